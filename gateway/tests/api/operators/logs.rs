//! The structured logs of a real `sluice serve` process (JSON, `SLUICE_LOG=debug`): every line
//! logged while serving a request carries the id its client got in `X-Request-Id`, and each
//! request ends with exactly one `answered` line with its status, error code and level.

use std::collections::HashSet;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::gateway_process::GatewayProcess;
use crate::support::*;

/// What one request should leave in the log.
struct Expected {
    what: &'static str,
    reply: Reply,
    status: u16,
    code: Option<&'static str>,
    level: &'static str,
}

/// The request id of a line: a field of the `request` span around it, if any.
fn request_id_of(line: &Value) -> Option<&str> {
    let spans = line["spans"].as_array().into_iter().flatten();
    spans
        .chain(std::iter::once(&line["span"]))
        .find(|span| span["name"] == "request")
        .and_then(|span| span["request_id"].as_str())
}

fn message_of(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_of_a_request_carries_its_id_and_one_answered_line_ends_it() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gateway =
        GatewayProcess::start_with(&stack, dir.path(), "logs", &[("SLUICE_LOG", "debug")]).await;
    let credential = stack.credential();
    let enqueue =
        |key: &str| json!({"request_key": key, "subject": "u1", "input": {"offer": offer()}});
    let path = "/v1/commands/claim:enqueue";

    let mut expected = vec![
        Expected {
            what: "a probe",
            reply: gateway.send(Method::GET, "/healthz", None, None).await,
            status: 200,
            code: None,
            level: "DEBUG",
        },
        Expected {
            what: "an unknown path",
            reply: gateway.send(Method::GET, "/v1/nowhere", None, None).await,
            status: 404,
            code: Some("NOT_FOUND"),
            level: "DEBUG",
        },
        Expected {
            what: "a bad credential",
            reply: gateway
                .send(
                    Method::POST,
                    path,
                    Some("not-a-credential"),
                    Some(&enqueue(&key())),
                )
                .await,
            status: 401,
            code: Some("UNAUTHENTICATED"),
            level: "DEBUG",
        },
        Expected {
            what: "an enqueue",
            reply: gateway
                .send(
                    Method::POST,
                    path,
                    Some(&credential),
                    Some(&enqueue(&key())),
                )
                .await,
            status: 202,
            code: None,
            level: "DEBUG",
        },
    ];
    // A ticket poll: the ticket is a capability, so it must appear in no line (checked below).
    let ticket = expected[3].reply.body["data"]["ticket"]
        .as_str()
        .expect("the enqueue's ticket")
        .to_string();
    expected.push(Expected {
        what: "a ticket poll",
        reply: gateway
            .send(Method::GET, &format!("/v1/tickets/{ticket}"), None, None)
            .await,
        status: 200,
        code: None,
        level: "DEBUG",
    });
    // Paused in PostgreSQL only: Redis reserves, the group commit refuses. An expected refusal,
    // logged at `info`.
    sqlx::query(
        "INSERT INTO controls (namespace_id, command, paused, reason) VALUES ($1, 'claim', true, 'test')",
    )
    .bind(stack.creds.namespace_id)
    .execute(&stack.pg)
    .await
    .expect("pause in PostgreSQL");
    expected.push(Expected {
        what: "an enqueue refused by the group commit",
        reply: gateway
            .send(
                Method::POST,
                path,
                Some(&credential),
                Some(&enqueue(&key())),
            )
            .await,
        status: 503,
        code: Some("INTAKE_PAUSED"),
        level: "INFO",
    });

    // The whole log, shutdown included.
    gateway.signal("TERM");
    let exit = gateway.exited(Duration::from_secs(20)).await;
    let log = gateway.log_text();
    assert!(
        exit.is_some_and(|status| status.success()),
        "exit {exit:?}:\n{log}"
    );
    assert!(
        !log.contains(&ticket),
        "a ticket reached the log (whoever reads it can read the command):\n{log}"
    );
    assert!(
        log.contains("/v1/tickets/<ticket>"),
        "the poll's line shows no redacted path:\n{log}"
    );
    let lines: Vec<Value> = log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"))
        })
        .collect();

    let mut ids = HashSet::new();
    for request in &expected {
        let (what, reply) = (request.what, &request.reply);
        assert_eq!(
            reply.status.as_u16(),
            request.status,
            "{what}: {:?}",
            reply.body
        );
        let id = reply
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{what}: no X-Request-Id"))
            .to_string();
        assert_eq!(id.len(), 32, "{what}: {id}");
        if reply.status != StatusCode::OK {
            assert_eq!(
                reply.body["request_id"],
                id.as_str(),
                "{what}: the envelope's id"
            );
        }
        let own: Vec<&Value> = lines
            .iter()
            .filter(|line| request_id_of(line) == Some(id.as_str()))
            .collect();
        let answered: Vec<&&Value> = own
            .iter()
            .filter(|line| message_of(line) == "answered")
            .collect();
        assert_eq!(
            answered.len(),
            1,
            "{what}: one answered line of {id}:\n{log}"
        );
        let done = answered[0];
        assert_eq!(done["fields"]["status"], request.status, "{what}: {done}");
        assert_eq!(
            done["fields"]["code"].as_str(),
            request.code,
            "{what}: {done}"
        );
        assert_eq!(done["level"], request.level, "{what}: {done}");
        assert!(
            done["fields"]["latency_ms"].as_f64().is_some(),
            "{what}: {done}"
        );
        if let Some(code) = request.code {
            assert!(
                own.iter()
                    .any(|line| message_of(line) == "refused" && line["fields"]["code"] == code),
                "{what}: its refusal carries {id}:\n{log}"
            );
        }
        ids.insert(id);
    }

    // Lines logged while the enqueues waited on their group commit carry their ids and name
    // the batch; the batch's own lines (in the committer's task) name it too.
    for request in expected[3..].iter().filter(|r| r.what.contains("enqueue")) {
        let id = request.reply.headers["x-request-id"].to_str().expect("id");
        let batch =
            lines
                .iter()
                .find(|line| {
                    request_id_of(line) == Some(id) && message_of(line) == "group commit answered"
                })
                .unwrap_or_else(|| {
                    panic!("{}: no group commit line of {id}:\n{log}", request.what)
                })["fields"]["batch"]
                .clone();
        assert!(
            lines.iter().any(
                |line| line["span"]["name"] == "group_commit" && line["span"]["batch"] == batch
            ),
            "{}: no line of batch {batch}:\n{log}",
            request.what
        );
    }

    // No line of the gateway's request handling escapes its request's span. (`cli` and
    // `server` log for the process and its connections; `/readyz` is the start-up probe.)
    for line in &lines {
        let target = line["target"].as_str().unwrap_or("");
        let per_request = target.starts_with("sluice_gateway::")
            && !target.starts_with("sluice_gateway::cli")
            && !target.starts_with("sluice_gateway::http::server");
        let id = request_id_of(line);
        if per_request {
            assert!(id.is_some(), "a request line without a request id: {line}");
        }
        let probe = line["span"]["path"] == "/readyz"
            || line["spans"]
                .as_array()
                .is_some_and(|spans| spans.iter().any(|s| s["path"] == "/readyz"));
        if let Some(id) = id
            && !probe
        {
            assert!(ids.contains(id), "an id no client received: {line}");
        }
    }
}

/// A caller's well-formed `X-Request-Id` (here a hyphenated UUID) is the answer's id, said as
/// the API's 32 hex digits; a malformed one is replaced. Its `traceparent`'s trace is the
/// request's. Both stand at the top level of every line logged inside the request, where a log
/// collector indexes them, and agree with the request span's own fields on every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_request_id_and_trace_are_kept_and_stand_at_the_top_of_each_line() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gateway =
        GatewayProcess::start_with(&stack, dir.path(), "ids", &[("SLUICE_LOG", "debug")]).await;
    let credential = stack.credential();
    let path = "/v1/commands/claim:enqueue";
    let enqueue = json!({"request_key": key(), "subject": "u1", "input": {"offer": offer()}});
    let (chosen, said) = (
        "6BA7B810-9dad-11d1-80b4-00c04fd430c8",
        "6ba7b8109dad11d180b400c04fd430c8",
    );
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let kept = gateway
        .post_with(
            path,
            &credential,
            &enqueue,
            &[("x-request-id", chosen), ("traceparent", &traceparent)],
        )
        .await;
    assert_eq!(kept.status, StatusCode::ACCEPTED, "{:?}", kept.body);
    assert_eq!(kept.headers["x-request-id"], said);
    assert_eq!(kept.body["request_id"], said);
    let malformed = "req 42; not an id";
    let replaced = gateway
        .post_with(
            path,
            &credential,
            &json!({"request_key": key(), "subject": "u2", "input": {"offer": offer()}}),
            &[("x-request-id", malformed), ("traceparent", "00-zz-yy-01")],
        )
        .await;
    assert_eq!(replaced.status, StatusCode::ACCEPTED, "{:?}", replaced.body);
    let new_id = replaced.body["request_id"]
        .as_str()
        .expect("an id")
        .to_string();
    assert!(
        new_id.len() == 32 && new_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "a new id of 32 hex digits: {new_id}"
    );

    gateway.signal("TERM");
    let exit = gateway.exited(Duration::from_secs(20)).await;
    let log = gateway.log_text();
    assert!(exit.is_some_and(|s| s.success()), "exit {exit:?}:\n{log}");
    let lines: Vec<Value> = log
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let of = |id: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|line| line["request_id"] == id)
            .collect()
    };
    let kept_lines = of(said);
    assert!(
        kept_lines.iter().any(|l| message_of(l) == "answered")
            && kept_lines
                .iter()
                .any(|l| message_of(l) == "group commit answered"),
        "the kept id is on the request's lines, at the top:\n{log}"
    );
    for line in &kept_lines {
        assert_eq!(line["trace_id"], trace, "the caller's trace: {line}");
    }
    let replaced_lines = of(&new_id);
    assert!(
        replaced_lines.iter().any(|l| message_of(l) == "answered"),
        "{log}"
    );
    for line in &replaced_lines {
        let made = line["trace_id"].as_str().expect("a trace id");
        assert!(
            made.len() == 32 && made != trace,
            "a trace of its own: {line}"
        );
    }
    // On every line, the top-level ids are the request span's own.
    let mut inside = 0;
    for line in &lines {
        if let Some(id) = request_id_of(line) {
            inside += 1;
            assert_eq!(line["request_id"], id, "{line}");
            let span = line["spans"]
                .as_array()
                .and_then(|spans| spans.iter().find(|s| s["name"] == "request"))
                .expect("the request span");
            assert_eq!(line["trace_id"], span["trace_id"], "{line}");
        }
    }
    assert!(inside >= kept_lines.len() + replaced_lines.len(), "{log}");
}
