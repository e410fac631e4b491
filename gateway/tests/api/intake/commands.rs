//! The command endpoints besides enqueue: read by id, resume by request key, a subject's own
//! commands, and cancel.

use std::time::Duration;

use chrono::DateTime;
use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_gateway::gateway_config::GatewayConfig;
use uuid::Uuid;

use crate::support::*;

/// Enqueues `claim` with the credential and returns the receipt data (asserting `202`).
async fn enqueued(stack: &Stack, subject: &str, key: &str, offer: &str) -> Value {
    let reply = stack.enqueue(subject, key, offer).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    reply.data().clone()
}

fn id_of(data: &Value) -> String {
    data["command_id"].as_str().expect("command_id").to_string()
}

fn assert_invalid(reply: &Reply, field: &str, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(reply.code(), "INVALID_ARGUMENT", "{what}: {:?}", reply.body);
    assert_eq!(reply.field(), field, "{what}: {:?}", reply.body);
}

fn assert_code(reply: &Reply, status: StatusCode, code: &str, what: &str) {
    assert_eq!(reply.status, status, "{what}: {:?}", reply.body);
    assert_eq!(reply.code(), code, "{what}: {:?}", reply.body);
}

/// Percent-encodes every byte outside RFC 3986's unreserved set.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn parse_time(value: &Value) -> DateTime<chrono::FixedOffset> {
    DateTime::parse_from_rfc3339(value.as_str().expect("a time string")).expect("RFC 3339")
}

async fn ticket_status(stack: &Stack, data: &Value) -> Value {
    let reply = stack.poll(data["ticket"].as_str().expect("ticket")).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply.data().clone()
}

/// `GET /v1/commands/{id}` with the credential is the full record: status, times (deadline =
/// accepted + 600 s by default), attempts 0, no result, no error, and a ticket that polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reads_as_its_full_record() {
    let stack = Stack::start().await;
    let offer = offer();
    let key = key();
    let receipt = enqueued(&stack, "user-1", &key, &offer).await;
    let id = id_of(&receipt);
    let reply = stack
        .get(&format!("/v1/commands/{id}"), Some(&stack.credential()))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let record = reply.data();
    assert_eq!(record["command_id"], id.as_str());
    assert_eq!(record["command"], "claim");
    assert_eq!(record["subject"], "user-1");
    assert_eq!(record["request_key"], key.as_str());
    assert_eq!(record["resource_key"], offer.as_str());
    assert_eq!(record["status"], "accepted");
    assert_eq!(record["accepted_at"], receipt["accepted_at"]);
    assert_eq!(record["deadline_at"], receipt["deadline_at"]);
    let accepted = parse_time(&record["accepted_at"]);
    let deadline = parse_time(&record["deadline_at"]);
    assert_eq!((deadline - accepted).num_milliseconds(), 600_000);
    assert!(record["updated_at"].is_string());
    assert_eq!(record["finished_at"], Value::Null);
    assert_eq!(record["attempts"], 0);
    assert_eq!(record["cancel_requested"], false);
    assert_eq!(record["result"], Value::Null);
    assert_eq!(record["error"], Value::Null);
    let status = ticket_status(&stack, record).await;
    assert_eq!(status["command_id"], id.as_str());
    assert_eq!(status["status"], "accepted");
    assert_eq!(status["queue"]["position"], 0);
}

/// A declared `deadline_seconds` sets the record's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_deadline_is_the_records_deadline() {
    let declaration = CLAIM_DECLARATION.replace(
        "resource_key = { from = \"input\", field = \"offer\" }",
        "resource_key = { from = \"input\", field = \"offer\" }\ndeadline_seconds = 90",
    );
    assert_ne!(declaration, CLAIM_DECLARATION);
    let stack = Stack::with_declaration(&declaration).await;
    let id = id_of(&enqueued(&stack, "user-1", &key(), &offer()).await);
    let reply = stack
        .get(&format!("/v1/commands/{id}"), Some(&stack.credential()))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let accepted = parse_time(&reply.data()["accepted_at"]);
    let deadline = parse_time(&reply.data()["deadline_at"]);
    assert_eq!((deadline - accepted).num_milliseconds(), 90_000);
}

/// Reading an unknown id is 404; a malformed id is 400 naming `command_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_malformed_ids_are_404_and_400() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let unknown = stack
        .get(
            &format!("/v1/commands/{}", Uuid::now_v7()),
            Some(&credential),
        )
        .await;
    assert_code(&unknown, StatusCode::NOT_FOUND, "NOT_FOUND", "unknown id");
    for bad in ["not-a-uuid", "12345", "0b0c7d4e-1a2b-4c3d-8e9f-00112233445"] {
        let reply = stack
            .get(&format!("/v1/commands/{bad}"), Some(&credential))
            .await;
        assert_invalid(&reply, "command_id", bad);
    }
}

/// `requests/{key}?subject=` with the credential finds the command of that original key; the
/// subject is required with a credential; an unknown key is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_key_finds_its_command() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let key = key();
    let id = id_of(&enqueued(&stack, "user-1", &key, &offer()).await);
    enqueued(&stack, "user-2", &key, &offer()).await;

    let reply = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}?subject=user-1"),
            Some(&credential),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.data()["command_id"], id.as_str());
    assert_eq!(reply.data()["subject"], "user-1");
    assert_eq!(reply.data()["status"], "accepted");

    let without = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}"),
            Some(&credential),
        )
        .await;
    assert_invalid(&without, "subject", "no ?subject=");
    let empty = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}?subject="),
            Some(&credential),
        )
        .await;
    assert_invalid(&empty, "subject", "empty ?subject=");
    let unknown = stack
        .get(
            "/v1/commands/claim/requests/never-used?subject=user-1",
            Some(&credential),
        )
        .await;
    assert_code(&unknown, StatusCode::NOT_FOUND, "NOT_FOUND", "unknown key");
    let other_subject = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}?subject=user-3"),
            Some(&credential),
        )
        .await;
    assert_code(
        &other_subject,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "key of another subject",
    );
    let bad_key = stack
        .get(
            "/v1/commands/claim/requests/a%20b?subject=user-1",
            Some(&credential),
        )
        .await;
    assert_invalid(&bad_key, "request_key", "key with a space");
}

/// With a subject token and no query, `requests/{key}` finds the token's own command; naming
/// another subject is 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_token_finds_its_own_request() {
    let stack = Stack::start().await;
    let key = key();
    let mine = id_of(&enqueued(&stack, "user-1", &key, &offer()).await);
    enqueued(&stack, "user-2", &key, &offer()).await;
    let token = stack.subject_token("user-1");
    let reply = stack
        .get(&format!("/v1/commands/claim/requests/{key}"), Some(&token))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.data()["command_id"], mine.as_str());
    let named = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}?subject=user-1"),
            Some(&token),
        )
        .await;
    assert_eq!(named.status, StatusCode::OK, "{:?}", named.body);
    assert_eq!(named.data()["command_id"], mine.as_str());
    let other = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}?subject=user-2"),
            Some(&token),
        )
        .await;
    assert_code(
        &other,
        StatusCode::FORBIDDEN,
        "PERMISSION_DENIED",
        "another subject",
    );
    let stranger = stack.subject_token("user-3");
    let none = stack
        .get(
            &format!("/v1/commands/claim/requests/{key}"),
            Some(&stranger),
        )
        .await;
    assert_code(
        &none,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "no such key for user-3",
    );
}

/// Request keys and subjects with characters that must be percent-encoded in a URL round-trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_keys_needing_percent_encoding_round_trip() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let keys = [
        "a/b%c",
        "q?x=1&y=2",
        "hash#frag",
        "plus+sign",
        "colon:semi;",
        "quote\"'<>",
        "back\\slash",
        "{braces}[]|^`",
        "%2F",
    ];
    for key in keys {
        let id = id_of(&enqueued(&stack, "user 1/é&x+", key, &offer()).await);
        let path = format!(
            "/v1/commands/claim/requests/{}?subject={}",
            encode(key),
            encode("user 1/é&x+")
        );
        let reply = stack.get(&path, Some(&credential)).await;
        assert_eq!(reply.status, StatusCode::OK, "{key}: {:?}", reply.body);
        assert_eq!(reply.data()["command_id"], id.as_str(), "{key}");
        assert_eq!(reply.data()["request_key"], key, "{key}");
    }
    // A literal `+` in a path segment is a plus, not a space; in the query it is a space.
    let id = id_of(&enqueued(&stack, "user 2", "x+y", &offer()).await);
    let reply = stack
        .get(
            "/v1/commands/claim/requests/x+y?subject=user+2",
            Some(&credential),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.data()["command_id"], id.as_str());
}

/// `mine` pages a subject's own commands newest first: 25 commands are a page of 20 and a page
/// of 5 (then no cursor); other subjects' commands never appear; pages of 5 end exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mine_pages_newest_first() {
    let stack = Stack::start().await;
    let mut ids = Vec::new();
    for i in 0..25 {
        ids.push(id_of(&enqueued(&stack, "me", &key(), &offer()).await));
        if i % 5 == 0 {
            enqueued(&stack, "someone-else", &key(), &offer()).await;
        }
    }
    ids.reverse();
    let sorted = {
        let mut parsed: Vec<Uuid> = ids
            .iter()
            .map(|i| Uuid::parse_str(i).expect("uuid"))
            .collect();
        parsed.sort_unstable_by(|a, b| b.cmp(a));
        parsed.iter().map(Uuid::to_string).collect::<Vec<_>>()
    };
    assert_eq!(sorted, ids, "ids descend in creation order");
    let token = stack.subject_token("me");

    let first = stack.get("/v1/commands/claim/mine", Some(&token)).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    let items = first.data()["items"].as_array().expect("items");
    let page: Vec<&str> = items
        .iter()
        .map(|i| i["command_id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        page,
        ids[..20].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(
        items
            .iter()
            .all(|i| i["subject"] == "me" && i["command"] == "claim")
    );
    let cursor = first.data()["next_cursor"]
        .as_str()
        .expect("a cursor after 20 of 25");

    let second = stack
        .get(
            &format!("/v1/commands/claim/mine?cursor={cursor}"),
            Some(&token),
        )
        .await;
    assert_eq!(second.status, StatusCode::OK, "{:?}", second.body);
    let items = second.data()["items"].as_array().expect("items");
    let page: Vec<&str> = items
        .iter()
        .map(|i| i["command_id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        page,
        ids[20..].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(second.data()["next_cursor"], Value::Null);

    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/commands/claim/mine?limit=5&cursor={c}"),
            None => "/v1/commands/claim/mine?limit=5".to_string(),
        };
        let reply = stack.get(&path, Some(&token)).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        pages += 1;
        let items = reply.data()["items"].as_array().expect("items");
        assert_eq!(items.len(), 5, "page {pages}");
        walked.extend(
            items
                .iter()
                .map(|i| i["command_id"].as_str().expect("id").to_string()),
        );
        match reply.data()["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(pages < 10, "the walk must end");
    }
    assert_eq!(pages, 5);
    assert_eq!(walked, ids);
}

/// `mine` filtered by `resource_key` returns only that resource's commands of the subject.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mine_filters_by_resource_key() {
    let stack = Stack::start().await;
    let (x, y) = (offer(), offer());
    let mut on_x = Vec::new();
    for _ in 0..3 {
        on_x.push(id_of(&enqueued(&stack, "me", &key(), &x).await));
        enqueued(&stack, "me", &key(), &y).await;
    }
    enqueued(&stack, "someone-else", &key(), &x).await;
    on_x.reverse();
    let token = stack.subject_token("me");
    let reply = stack
        .get(
            &format!("/v1/commands/claim/mine?resource_key={x}"),
            Some(&token),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let items = reply.data()["items"].as_array().expect("items");
    let ids: Vec<&str> = items
        .iter()
        .map(|i| i["command_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, on_x.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        items
            .iter()
            .all(|i| i["resource_key"] == x.as_str() && i["subject"] == "me")
    );
    assert_eq!(reply.data()["next_cursor"], Value::Null);
    let unused = stack
        .get(
            &format!("/v1/commands/claim/mine?resource_key={}", offer()),
            Some(&token),
        )
        .await;
    assert_eq!(unused.status, StatusCode::OK, "{:?}", unused.body);
    assert_eq!(unused.data()["items"], json!([]));
}

/// `mine` refuses a limit outside 1..=20, a cursor it did not issue and unknown parameters
/// (400 naming each), and is for subject tokens only (403 with a credential).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mine_refuses_bad_queries_and_credentials() {
    let stack = Stack::start().await;
    enqueued(&stack, "me", &key(), &offer()).await;
    let token = stack.subject_token("me");
    for limit in ["0", "21", "-1", "abc", "", "1.5", "99999999999999999999"] {
        let reply = stack
            .get(
                &format!("/v1/commands/claim/mine?limit={limit}"),
                Some(&token),
            )
            .await;
        assert_invalid(&reply, "limit", limit);
    }
    for cursor in ["garbage!", "not-a-cursor", "AAAA", "%25"] {
        let reply = stack
            .get(
                &format!("/v1/commands/claim/mine?cursor={cursor}"),
                Some(&token),
            )
            .await;
        assert_invalid(&reply, "cursor", cursor);
    }
    let unknown = stack
        .get("/v1/commands/claim/mine?page=2", Some(&token))
        .await;
    assert_invalid(&unknown, "page", "unknown parameter");
    let twice = stack
        .get("/v1/commands/claim/mine?limit=1&limit=2", Some(&token))
        .await;
    assert_invalid(&twice, "limit", "repeated parameter");
    for limit in ["1", "20"] {
        let reply = stack
            .get(
                &format!("/v1/commands/claim/mine?limit={limit}"),
                Some(&token),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "limit {limit}: {:?}",
            reply.body
        );
    }
    let credential = stack
        .get("/v1/commands/claim/mine", Some(&stack.credential()))
        .await;
    assert_code(
        &credential,
        StatusCode::FORBIDDEN,
        "PERMISSION_DENIED",
        "credential",
    );
    // A code the namespace does not declare is a wrong path, not an empty list.
    for code in ["null", "clam"] {
        let undeclared = stack
            .get(&format!("/v1/commands/{code}/mine"), Some(&token))
            .await;
        assert_code(&undeclared, StatusCode::NOT_FOUND, "NOT_FOUND", code);
    }
}

/// Cancelling a waiting command answers `cancelled` at once; cancelling again answers the same
/// record unchanged; the ticket then polls `cancelled` without a queue position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_waiting_command_is_immediate_and_repeatable() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let receipt = enqueued(&stack, "user-1", &key(), &offer()).await;
    let id = id_of(&receipt);
    let path = format!("/v1/commands/{id}:cancel");
    let first = stack.post(&path, Some(&credential), "").await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(first.data()["command_id"], id.as_str());
    assert_eq!(first.data()["status"], "cancelled");
    assert!(first.data()["finished_at"].is_string(), "{:?}", first.body);
    assert_eq!(first.data()["cancel_requested"], false);

    let again = stack.post(&path, Some(&credential), "").await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert_eq!(
        again.data(),
        first.data(),
        "a repeated cancel changes nothing"
    );

    let read = stack
        .get(&format!("/v1/commands/{id}"), Some(&credential))
        .await;
    assert_eq!(read.data(), first.data());
    let status = ticket_status(&stack, &receipt).await;
    assert_eq!(status["status"], "cancelled");
    assert_eq!(status["queue"], Value::Null);
    assert_eq!(status["error"], Value::Null);
}

/// Cancelling the head of a resource's queue moves the commands behind it up by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_moves_later_commands_up() {
    let stack = Stack::start().await;
    let offer = offer();
    let a = enqueued(&stack, "user-a", &key(), &offer).await;
    let b = enqueued(&stack, "user-b", &key(), &offer).await;
    let c = enqueued(&stack, "user-c", &key(), &offer).await;
    for (data, position) in [(&a, 0), (&b, 1), (&c, 2)] {
        assert_eq!(data["queue"]["position"], position, "receipt");
        assert_eq!(
            ticket_status(&stack, data).await["queue"]["position"],
            position,
            "poll"
        );
    }
    let cancel = stack
        .post(
            &format!("/v1/commands/{}:cancel", id_of(&a)),
            Some(&stack.credential()),
            "",
        )
        .await;
    assert_eq!(cancel.status, StatusCode::OK, "{:?}", cancel.body);
    assert_eq!(ticket_status(&stack, &b).await["queue"]["position"], 0);
    assert_eq!(ticket_status(&stack, &c).await["queue"]["position"], 1);
}

/// A cancel gives back exactly one `unfinished` and one `waiting:<namespace>` count, and a
/// repeated cancel gives back nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_gives_back_the_counts_exactly_once() {
    let stack = Stack::start().await;
    let waiting = format!("waiting:{}", stack.creds.namespace_id);
    let queued = format!("queued:{}:claim", stack.creds.namespace_id);
    let offer = offer();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(id_of(&enqueued(&stack, "user-1", &key(), &offer).await));
    }
    let counts = |c: &std::collections::HashMap<String, i64>| {
        (
            c.get("unfinished").copied().unwrap_or(0),
            c.get(&waiting).copied().unwrap_or(0),
            c.get(&queued).copied().unwrap_or(0),
        )
    };
    assert_eq!(counts(&stack.counters().await), (3, 3, 3));
    let path = format!("/v1/commands/{}:cancel", ids[1]);
    let first = stack.post(&path, Some(&stack.credential()), "").await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(counts(&stack.counters().await), (2, 2, 2));
    let second = stack.post(&path, Some(&stack.credential()), "").await;
    assert_eq!(second.status, StatusCode::OK, "{:?}", second.body);
    assert_eq!(second.data()["status"], "cancelled");
    assert_eq!(counts(&stack.counters().await), (2, 2, 2));
}

/// Cancelling an unknown id is 404, a malformed id is 400 naming `command_id`, and an unknown
/// custom method is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_unknown_or_malformed_ids() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let unknown = stack
        .post(
            &format!("/v1/commands/{}:cancel", Uuid::now_v7()),
            Some(&credential),
            "",
        )
        .await;
    assert_code(&unknown, StatusCode::NOT_FOUND, "NOT_FOUND", "unknown id");
    for bad in ["not-a-uuid", "42", ""] {
        let reply = stack
            .post(&format!("/v1/commands/{bad}:cancel"), Some(&credential), "")
            .await;
        assert_invalid(&reply, "command_id", bad);
    }
    let id = id_of(&enqueued(&stack, "user-1", &key(), &offer()).await);
    let verb = stack
        .post(&format!("/v1/commands/{id}:destroy"), Some(&credential), "")
        .await;
    assert_code(
        &verb,
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "unknown custom method",
    );
    let read = stack
        .get(&format!("/v1/commands/{id}"), Some(&credential))
        .await;
    assert_eq!(read.data()["status"], "accepted");
}

/// Enqueueing the key of a cancelled command again is a replay: `200`, `deduplicated`, status
/// `cancelled`, the same id, and no new row or count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_of_a_cancelled_command_replays_cancelled() {
    let stack = Stack::start().await;
    let (key, offer) = (key(), offer());
    let id = id_of(&enqueued(&stack, "user-1", &key, &offer).await);
    let cancel = stack
        .post(
            &format!("/v1/commands/{id}:cancel"),
            Some(&stack.credential()),
            "",
        )
        .await;
    assert_eq!(cancel.status, StatusCode::OK, "{:?}", cancel.body);
    let before = stack.counters().await;
    let replay = stack.enqueue("user-1", &key, &offer).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.data()["command_id"], id.as_str());
    assert_eq!(replay.data()["status"], "cancelled");
    assert_eq!(replay.data()["deduplicated"], true);
    assert_eq!(stack.count_rows().await, 1);
    assert_eq!(stack.counters().await, before);
    let mine = stack
        .get(
            "/v1/commands/claim/mine",
            Some(&stack.subject_token("user-1")),
        )
        .await;
    assert_eq!(
        mine.data()["items"][0]["status"],
        "cancelled",
        "{:?}",
        mine.body
    );
}

/// Moves a command's row to `status` behind the gateway's back (as an executor would).
async fn set_status(stack: &Stack, id: &str, status: &str, finished: bool, result: Option<Value>) {
    sqlx::query(
        "UPDATE commands SET status = $2, result = $3, attempts = 1,
                finished_at = CASE WHEN $4 THEN now() - interval '1 second' END,
                updated_at = now() - interval '1 second'
          WHERE id = $1",
    )
    .bind(Uuid::parse_str(id).expect("uuid"))
    .bind(status)
    .bind(result)
    .bind(finished)
    .execute(&stack.pg)
    .await
    .expect("update status");
}

/// Cancelling an executing or running command records only the intent (the status stays);
/// repeating it changes nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_started_command_records_the_intent() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    for status in ["executing", "running"] {
        let id = id_of(&enqueued(&stack, "user-1", &key(), &offer()).await);
        set_status(&stack, &id, status, false, None).await;
        let before = stack
            .get(&format!("/v1/commands/{id}"), Some(&credential))
            .await;
        let path = format!("/v1/commands/{id}:cancel");
        let first = stack.post(&path, Some(&credential), "").await;
        assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
        assert_eq!(first.data()["status"], status);
        assert_eq!(first.data()["cancel_requested"], true);
        assert_eq!(first.data()["finished_at"], Value::Null);
        assert_ne!(first.data()["updated_at"], before.data()["updated_at"]);
        let again = stack.post(&path, Some(&credential), "").await;
        assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
        assert_eq!(again.data()["status"], status);
        assert_eq!(again.data()["cancel_requested"], true);
    }
}

/// Cancelling a terminal command answers its current record, unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_a_finished_command_changes_nothing() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let id = id_of(&enqueued(&stack, "user-1", &key(), &offer()).await);
    let result = json!({"allocation_id": "a1", "state": "confirmed"});
    set_status(&stack, &id, "succeeded", true, Some(result.clone())).await;
    let before = stack
        .get(&format!("/v1/commands/{id}"), Some(&credential))
        .await;
    assert_eq!(before.data()["result"], result);
    let cancel = stack
        .post(&format!("/v1/commands/{id}:cancel"), Some(&credential), "")
        .await;
    assert_eq!(cancel.status, StatusCode::OK, "{:?}", cancel.body);
    assert_eq!(cancel.data(), before.data());
    let after = stack
        .get(&format!("/v1/commands/{id}"), Some(&credential))
        .await;
    assert_eq!(after.data(), before.data());
}

/// Command reads only PostgreSQL answers go through a budget: one subject past its own rate is
/// `429 RATE_LIMITED` with its wait and leaves the others served; past the process's budget
/// everyone is `503 UNAVAILABLE`. A refused cancel changes nothing (the row, read from
/// PostgreSQL, still waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_reads_spend_a_budget_per_subject_and_per_process() {
    let stack = Stack::start_with(StackOptions {
        config: GatewayConfig {
            command_reads_per_subject_per_second: 1,
            command_reads_per_second: 1,
            command_reads_concurrency: 16,
            ..GatewayConfig::default()
        },
        ..StackOptions::default()
    })
    .await;
    let waiting = id_of(&enqueued(&stack, "greedy", &key(), &offer()).await);
    let greedy = stack.subject_token("greedy");
    let mine = |token: String| {
        let stack = &stack;
        async move { stack.get("/v1/commands/claim/mine", Some(&token)).await }
    };
    // The process's budget has a burst of one: the first read spends it.
    assert_eq!(mine(greedy.clone()).await.status, StatusCode::OK);
    let refused = mine(stack.subject_token("patient")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        refused.body
    );
    assert_eq!(refused.code(), "UNAVAILABLE");
    // Greedy's own burst is two: its second read is its own to make but the process refuses
    // it; its third is refused by its own rate, with its own wait, and so is its cancel.
    assert_eq!(
        mine(greedy.clone()).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let own = mine(greedy.clone()).await;
    assert_eq!(own.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", own.body);
    assert_eq!(own.code(), "RATE_LIMITED");
    let wait = own.body["error"]["retry_after_ms"].as_u64().expect("wait");
    assert!((1..=1_000).contains(&wait), "{wait}");
    assert!(own.headers.contains_key("retry-after"));
    let cancel = stack
        .post(&format!("/v1/commands/{waiting}:cancel"), Some(&greedy), "")
        .await;
    assert_eq!(
        cancel.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{:?}",
        cancel.body
    );
    let status: String = sqlx::query_scalar("SELECT status FROM commands WHERE id = $1::uuid")
        .bind(&waiting)
        .fetch_one(&stack.pg)
        .await
        .expect("the row");
    assert_eq!(status, "accepted", "a refused cancel changed the row");
    // The process's budget refills a token a second, and the patient subject gets it.
    let served = eventually(Duration::from_secs(3), || async {
        mine(stack.subject_token("patient")).await.status == StatusCode::OK
    })
    .await;
    assert!(
        served,
        "the patient subject is served once the budget refills"
    );
}
