//! `POST /v1/control`: pauses that hold across gateways, whatever Redis does, and a contract that
//! refuses every bad call without changing anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::gateway_process::GatewayProcess;
use crate::support::*;

/// Two commands of one namespace, so a command's pause can be told from the namespace's.
const TWO_COMMANDS: &str = r#"
[[command]]
code = "claim"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }
admission = { max_queue = 1000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[command]]
code = "hold"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }
admission = { max_queue = 1000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[quota_pool]]
code = "stock"
capacity = 100
"#;

async fn control(stack: &Stack, body: Value) -> Reply {
    stack
        .post("/v1/control", Some(&stack.credential()), &body.to_string())
        .await
}

async fn enqueue_command(stack: &Stack, command: &str, subject: &str) -> Reply {
    let body = json!({"request_key": key(), "subject": subject, "input": {"offer": offer()}});
    stack
        .post(
            &format!("/v1/commands/{command}:enqueue"),
            Some(&stack.credential()),
            &body.to_string(),
        )
        .await
}

/// `(paused, revision)` of a scope in PostgreSQL (`""` is the whole namespace).
async fn stored(stack: &Stack, command: &str) -> Option<(bool, i64)> {
    sqlx::query_as("SELECT paused, revision FROM controls WHERE namespace_id = $1 AND command = $2")
        .bind(stack.creds.namespace_id)
        .bind(command)
        .fetch_optional(&stack.pg)
        .await
        .expect("read controls")
}

/// `(paused, revision)` of a scope in the Redis meta hash.
async fn projected(stack: &Stack, scope: &str) -> (Option<String>, Option<String>) {
    let fields: Vec<Option<String>> = stack
        .redis
        .pool()
        .next()
        .hmget(
            stack.keys().meta(),
            vec![format!("paused:{scope}"), format!("pause_rev:{scope}")],
        )
        .await
        .expect("read meta");
    (fields[0].clone(), fields[1].clone())
}

async fn audit_rows(stack: &Stack) -> Vec<(String, Value)> {
    sqlx::query_as(
        "SELECT action, details FROM audit
          WHERE namespace_id = $1 AND action LIKE 'control.%' ORDER BY id",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("read audit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_refuses_intake_and_a_resume_restores_it() {
    let stack = Stack::start().await;
    let ns = stack.creds.namespace_id.to_string();
    let before = stack.enqueue("u1", &key(), &offer()).await;
    assert_eq!(before.status, StatusCode::ACCEPTED);
    let ticket = before.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();

    let paused = control(&stack, json!({"paused": true, "reason": "drop at 10:00"})).await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.body);
    assert_eq!(
        paused.data(),
        &json!({"namespace": ns, "command": null, "paused": true, "revision": "1"})
    );
    assert_eq!(
        projected(&stack, &ns).await,
        (Some("1".into()), Some("1".into()))
    );

    let refused = stack.enqueue("u2", &key(), &offer()).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.code(), "INTAKE_PAUSED");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(refused.body["error"]["retryable"], json!(true));
    // Accepted work is still answered while intake is paused.
    assert_eq!(stack.poll(&ticket).await.status, StatusCode::OK);
    assert_eq!(stack.count_rows().await, 1);
    assert_eq!(stack.reservations("claim").await, 0);

    // Absolute and repeatable: the same call changes nothing, not even the revision.
    let again = control(&stack, json!({"paused": true, "reason": "again"})).await;
    assert_eq!(again.data()["revision"], json!("1"));
    let audit = audit_rows(&stack).await;
    assert_eq!(audit.len(), 1, "a repeat is not a change: {audit:?}");
    assert_eq!(audit[0].0, "control.pause");
    assert_eq!(audit[0].1["reason"], json!("drop at 10:00"));
    assert_eq!(audit[0].1["before"], json!(null));

    let resumed = control(&stack, json!({"paused": false, "reason": "go"})).await;
    assert_eq!(resumed.data()["paused"], json!(false));
    assert_eq!(resumed.data()["revision"], json!("2"));
    assert_eq!(stored(&stack, "").await, Some((false, 2)));
    assert_eq!(
        projected(&stack, &ns).await,
        (Some("0".into()), Some("2".into()))
    );
    assert_eq!(
        stack.enqueue("u2", &key(), &offer()).await.status,
        StatusCode::ACCEPTED
    );
    let audit = audit_rows(&stack).await;
    assert_eq!(audit.len(), 2);
    assert_eq!(audit[1].0, "control.resume");
    assert_eq!(audit[1].1["before"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_pause_holds_only_that_command() {
    let stack = Stack::with_declaration(TWO_COMMANDS).await;
    let paused = control(
        &stack,
        json!({"paused": true, "reason": "claim only", "command": "claim"}),
    )
    .await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.body);
    assert_eq!(paused.data()["command"], json!("claim"));
    assert_eq!(paused.data()["revision"], json!("1"));

    let refused = enqueue_command(&stack, "claim", "u1").await;
    assert_eq!(refused.code(), "INTAKE_PAUSED");
    assert_eq!(
        enqueue_command(&stack, "hold", "u1").await.status,
        StatusCode::ACCEPTED
    );
    // The namespace's own switch is independent of the command's.
    assert_eq!(stored(&stack, "").await, None);
    let resumed = control(
        &stack,
        json!({"paused": false, "reason": "back", "command": "claim"}),
    )
    .await;
    assert_eq!(resumed.data()["revision"], json!("2"));
    assert_eq!(
        enqueue_command(&stack, "claim", "u1").await.status,
        StatusCode::ACCEPTED
    );
    // Resuming a scope that was never paused changes nothing and records nothing.
    let noop = control(
        &stack,
        json!({"paused": false, "reason": "noop", "command": "hold"}),
    )
    .await;
    assert_eq!(noop.status, StatusCode::OK);
    assert_eq!(noop.data()["revision"], json!("0"));
    assert_eq!(stored(&stack, "hold").await, None);
    assert_eq!(audit_rows(&stack).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_control_calls_are_refused_and_change_nothing() {
    let stack = Stack::start().await;
    let long = "x".repeat(1025);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "missing paused",
            json!({"reason": "r"}).to_string(),
            "paused",
        ),
        (
            "missing reason",
            json!({"paused": true}).to_string(),
            "reason",
        ),
        (
            "paused as a string",
            json!({"paused": "yes", "reason": "r"}).to_string(),
            "paused",
        ),
        (
            "null paused",
            json!({"paused": null, "reason": "r"}).to_string(),
            "paused",
        ),
        (
            "blank reason",
            json!({"paused": true, "reason": "  "}).to_string(),
            "reason",
        ),
        (
            "long reason",
            json!({"paused": true, "reason": long}).to_string(),
            "reason",
        ),
        (
            "unknown field",
            json!({"paused": true, "reason": "r", "until": 5}).to_string(),
            "until",
        ),
        (
            "wrong case",
            json!({"Paused": true, "reason": "r"}).to_string(),
            "Paused",
        ),
        (
            "command as a number",
            json!({"paused": true, "reason": "r", "command": 7}).to_string(),
            "command",
        ),
        (
            "malformed command",
            json!({"paused": true, "reason": "r", "command": "Claim!"}).to_string(),
            "command",
        ),
        (
            "duplicate key",
            r#"{"paused": true, "paused": false, "reason": "r"}"#.to_string(),
            "paused",
        ),
        ("not an object", "[true]".to_string(), ""),
        ("not JSON", "paused".to_string(), ""),
    ];
    for (what, body, field) in &cases {
        let reply = stack
            .post("/v1/control", Some(&stack.credential()), body)
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{what}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "INVALID_ARGUMENT", "{what}");
        if !field.is_empty() {
            assert_eq!(reply.field(), *field, "{what}: {:?}", reply.body);
        }
    }
    let good = json!({"paused": true, "reason": "r"}).to_string();

    let undeclared = control(
        &stack,
        json!({"paused": true, "reason": "r", "command": "nope"}),
    )
    .await;
    assert_eq!(undeclared.status, StatusCode::NOT_FOUND);
    assert_eq!(undeclared.code(), "NOT_FOUND");

    let plain_text = stack
        .request_with(
            Method::POST,
            "/v1/control",
            Some(&stack.credential()),
            Some(good.clone().into()),
            &[("content-type", "text/plain")],
        )
        .await;
    assert_eq!(plain_text.code(), "INVALID_ARGUMENT");
    assert_eq!(plain_text.field(), "Content-Type");

    let reader = credential_with_scopes(&stack, stack.creds.namespace_id, &["status:read"]).await;
    let denied = stack.post("/v1/control", Some(&reader), &good).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN);
    assert_eq!(denied.code(), "PERMISSION_DENIED");
    let subject = stack
        .post("/v1/control", Some(&stack.subject_token("u1")), &good)
        .await;
    assert_eq!(subject.status, StatusCode::FORBIDDEN);
    let anonymous = stack.post("/v1/control", None, &good).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let wrong_method = stack.get("/v1/control", Some(&stack.credential())).await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong_method.headers["allow"], "POST");

    // Nothing of any of them was stored, audited or projected.
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM controls WHERE namespace_id = $1")
        .bind(stack.creds.namespace_id)
        .fetch_one(&stack.pg)
        .await
        .expect("count controls");
    assert_eq!(rows, 0);
    assert!(audit_rows(&stack).await.is_empty());
    let ns = stack.creds.namespace_id.to_string();
    assert_eq!(projected(&stack, &ns).await, (None, None));
    assert_eq!(
        stack.enqueue("u1", &key(), &offer()).await.status,
        StatusCode::ACCEPTED
    );
}

/// Eight operators flip the switch at once through two gateways' worth of calls: PostgreSQL
/// orders the changes, and Redis ends with exactly PostgreSQL's last value, never an older one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_leave_redis_equal_to_postgres() {
    let stack = Arc::new(Stack::start().await);
    let mut tasks = Vec::new();
    for task in 0..8 {
        let stack = stack.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..12 {
                let paused = (task + round) % 2 == 0;
                let reply = control(&stack, json!({"paused": paused, "reason": "race"})).await;
                assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
            }
        }));
    }
    for task in tasks {
        task.await.expect("operator task");
    }
    let (paused, revision) = stored(&stack, "").await.expect("a stored value");
    let ns = stack.creds.namespace_id.to_string();
    assert_eq!(
        projected(&stack, &ns).await,
        (
            Some(if paused { "1" } else { "0" }.to_string()),
            Some(revision.to_string())
        )
    );
    let changes = audit_rows(&stack).await.len() as i64;
    assert_eq!(
        revision, changes,
        "every change, and only a change, adds a revision"
    );
    let answer = stack.enqueue("u1", &key(), &offer()).await;
    if paused {
        assert_eq!(answer.code(), "INTAKE_PAUSED");
    } else {
        assert_eq!(answer.status, StatusCode::ACCEPTED);
    }
}

/// A pause whose Redis copy was lost (or overwritten) is still enforced by the INSERT, which
/// re-checks PostgreSQL; the refusal leaves no row, count or reservation; and the executors'
/// catalog refresh puts the flag back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_redis_lost_is_still_enforced_and_converges() {
    let stack = Stack::start().await;
    assert_eq!(
        control(&stack, json!({"paused": true, "reason": "r"}))
            .await
            .status,
        StatusCode::OK
    );
    let ns = stack.creds.namespace_id.to_string();
    let _: () = stack
        .redis
        .pool()
        .next()
        .hset(stack.keys().meta(), (format!("paused:{ns}"), "0"))
        .await
        .expect("lose the flag");

    let refused = stack.enqueue("u1", &key(), &offer()).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.code(), "INTAKE_PAUSED");
    assert_eq!(stack.count_rows().await, 0);
    assert_eq!(stack.reservations("claim").await, 0);
    assert_eq!(stack.open_counts("claim").await, (0, 0, 0));

    sluice_executor::catalog::load(&stack.pg, &stack.redis)
        .await
        .expect("catalog refresh");
    assert_eq!(
        projected(&stack, &ns).await,
        (Some("1".into()), Some("1".into()))
    );
}

/// Redis unreachable: a control call is `503 UNAVAILABLE` and changes nothing; intake cannot
/// accept either. Redis back empty: the rebuilt projection carries the pause PostgreSQL holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_control_is_unavailable_and_a_pause_survives_its_loss() {
    let redis = start_private_redis().await;
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    assert_eq!(
        stack.enqueue("u0", &key(), &offer()).await.status,
        StatusCode::ACCEPTED
    );
    let mut redis = kill_redis(redis).await;
    assert!(
        stack.redis_disconnected(Duration::from_secs(10)).await,
        "the pool never noticed Redis is gone"
    );
    let refused = control(&stack, json!({"paused": true, "reason": "r"})).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        refused.body
    );
    assert_eq!(refused.code(), "UNAVAILABLE");
    assert_eq!(refused.body["error"]["retryable"], json!(true));
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(stored(&stack, "").await, None, "nothing was changed");
    assert_eq!(
        stack.enqueue("u1", &key(), &offer()).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    redis = restart_redis(redis).await;
    assert!(
        eventually(Duration::from_secs(15), || async {
            stack
                .redis
                .pool()
                .clients()
                .iter()
                .all(|c| c.is_connected())
        })
        .await,
        "the pool never reconnected"
    );
    let paused = control(&stack, json!({"paused": true, "reason": "r"})).await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.body);
    // Redis loses everything once more; the rebuild brings the pause back from PostgreSQL.
    stack.flush_redis().await;
    let answer = stack.enqueue("u2", &key(), &offer()).await;
    assert_eq!(answer.code(), "INTAKE_PAUSED", "{:?}", answer.body);
    let ns = stack.creds.namespace_id.to_string();
    assert_eq!(
        projected(&stack, &ns).await,
        (Some("1".into()), Some("1".into()))
    );
    assert_eq!(stack.count_rows().await, 1);
    drop(redis);
}

/// What one enqueue of the burst saw.
struct Sent {
    sent: Instant,
    status: StatusCode,
    code: String,
}

/// A burst through two gateway processes; an operator pauses through one of them mid-burst.
/// No request sent after the pause answered is accepted, through either gateway; every `202` has
/// its row; every row was accepted by a transaction that started before the pause took its lock
/// (so no batch in flight slipped past it); nothing is counted twice or left reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pause_during_a_burst_across_two_gateways() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gateways = Arc::new([
        GatewayProcess::start(&stack, dir.path(), "a").await,
        GatewayProcess::start(&stack, dir.path(), "b").await,
    ]);
    let credential = stack.credential();
    let stop = Arc::new(AtomicBool::new(false));
    let accepted = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for worker in 0..32 {
        let (gateways, stop, accepted) = (gateways.clone(), stop.clone(), accepted.clone());
        let answered = answered.clone();
        let credential = credential.clone();
        workers.push(tokio::spawn(async move {
            let gateway = &gateways[worker % 2];
            let mut seen = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = json!({"request_key": key(), "subject": format!("w{worker}-{n}"),
                                  "input": {"offer": offer()}});
                let sent = Instant::now();
                let reply = gateway
                    .post("/v1/commands/claim:enqueue", &credential, &body)
                    .await;
                if reply.status == StatusCode::ACCEPTED {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
                answered.fetch_add(1, Ordering::Relaxed);
                let code = reply.body["error"]["code"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                seen.push(Sent {
                    sent,
                    status: reply.status,
                    code,
                });
            }
            seen
        }));
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            accepted.load(Ordering::Relaxed) >= 300
        })
        .await,
        "the burst never reached 300 acceptances"
    );
    let pause = gateways[0]
        .post(
            "/v1/control",
            &credential,
            &json!({"paused": true, "reason": "mid-burst"}),
        )
        .await;
    let pause_answered = Instant::now();
    assert_eq!(pause.status, StatusCode::OK, "{:?}", pause.body);
    // Both gateways keep trying: another 300 requests after the answer.
    let answered_at = answered.load(Ordering::Relaxed);
    assert!(
        eventually(Duration::from_secs(30), || async {
            answered.load(Ordering::Relaxed) >= answered_at + 300
        })
        .await,
        "the burst stalled after the pause"
    );
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.expect("worker"));
    }

    let after: Vec<&Sent> = all.iter().filter(|s| s.sent > pause_answered).collect();
    assert!(
        after.len() >= 50,
        "only {} requests were sent after the pause",
        after.len()
    );
    for sent in &after {
        assert_eq!(
            (sent.status, sent.code.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "INTAKE_PAUSED"),
            "a request sent after the pause answered"
        );
    }
    let accepted_total = all
        .iter()
        .filter(|s| s.status == StatusCode::ACCEPTED)
        .count();
    let others: Vec<(StatusCode, &str)> = all
        .iter()
        .filter(|s| s.status != StatusCode::ACCEPTED && s.code != "INTAKE_PAUSED")
        .map(|s| (s.status, s.code.as_str()))
        .collect();
    assert!(others.is_empty(), "unexpected answers: {others:?}");
    assert_eq!(
        stack.count_rows().await,
        accepted_total as i64,
        "every 202 has its row, and only they"
    );
    let late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM commands c JOIN controls k
             ON k.namespace_id = c.namespace_id AND k.command = ''
          WHERE c.application_id = $1 AND c.accepted_at >= k.updated_at",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("late rows");
    assert_eq!(
        late, 0,
        "a row was accepted by a transaction that began after the pause"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            stack.reservations("claim").await == 0
        })
        .await,
        "refused requests left reservations"
    );
    let (unfinished, waiting, queued) = stack.open_counts("claim").await;
    assert_eq!(
        (unfinished, waiting, queued),
        (
            accepted_total as i64,
            accepted_total as i64,
            accepted_total as i64
        )
    );

    // Through the other gateway: a repeat changes nothing, a resume opens both.
    let repeat = gateways[1]
        .post(
            "/v1/control",
            &credential,
            &json!({"paused": true, "reason": "again"}),
        )
        .await;
    assert_eq!(repeat.data()["revision"], pause.data()["revision"]);
    let resume = gateways[1]
        .post(
            "/v1/control",
            &credential,
            &json!({"paused": false, "reason": "open"}),
        )
        .await;
    assert_eq!(resume.status, StatusCode::OK);
    for gateway in gateways.iter() {
        let body = json!({"request_key": key(), "subject": "after", "input": {"offer": offer()}});
        let reply = gateway
            .post("/v1/commands/claim:enqueue", &credential, &body)
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    eprintln!(
        "burst: {} requests, {accepted_total} accepted, {} sent after the pause answered, all refused",
        all.len(),
        after.len()
    );
}

/// `control.lua` directly, from 16 racing tasks that write revisions in random order: the meta
/// hash always ends with the highest revision's value, and an older revision never overwrites
/// a newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_script_keeps_the_newest_revision_under_racing_writers() {
    use sluice_durable::control::{PauseState, store_in_redis};
    let stack = Arc::new(Stack::start().await);
    let ns = stack.creds.namespace_id;
    let state = |revision: i64| PauseState {
        namespace_id: ns,
        command: None,
        // Odd revisions pause, even ones resume: the value tells which revision wrote it.
        paused: revision % 2 == 1,
        revision,
    };
    store_in_redis(&stack.redis, stack.creds.application_id, &[state(5)])
        .await
        .expect("store 5");
    store_in_redis(&stack.redis, stack.creds.application_id, &[state(4)])
        .await
        .expect("store 4");
    let scope = ns.to_string();
    assert_eq!(
        projected(&stack, &scope).await,
        (Some("1".into()), Some("5".into())),
        "revision 4 overwrote revision 5"
    );

    let mut tasks = Vec::new();
    for task in 0..16i64 {
        let stack = stack.clone();
        tasks.push(tokio::spawn(async move {
            // Each task writes its revisions from high to low, interleaved with the others.
            for step in (0..25i64).rev() {
                let revision = 6 + step * 16 + task;
                let state = PauseState {
                    namespace_id: stack.creds.namespace_id,
                    command: None,
                    paused: revision % 2 == 1,
                    revision,
                };
                store_in_redis(&stack.redis, stack.creds.application_id, &[state])
                    .await
                    .expect("store");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
    let highest = 6 + 24 * 16 + 15;
    assert_eq!(
        projected(&stack, &scope).await,
        (
            Some(if highest % 2 == 1 { "1" } else { "0" }.to_string()),
            Some(highest.to_string())
        )
    );
}
