//! Request keys: one intent, one command, whatever the retries.

use std::collections::HashSet;

use fred::prelude::*;
use hyper::StatusCode;
use serde_json::json;

use crate::support::*;

/// One request key sent 50 times at once: one row, the same command id in all 50 answers, one
/// of them `202` and the others `200` with `deduplicated: true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_fifty_times_at_once_is_one_command() {
    let stack = std::sync::Arc::new(Stack::start().await);
    let offer = offer();
    let key = key();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (stack, offer, key) = (stack.clone(), offer.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            stack.enqueue("user-1", &key, &offer).await
        }));
    }
    let mut ids = HashSet::new();
    let mut fresh = 0;
    for task in tasks {
        let reply = task.await.expect("task");
        match reply.status {
            StatusCode::ACCEPTED => {
                fresh += 1;
                assert_eq!(reply.data()["deduplicated"], false);
            }
            StatusCode::OK => assert_eq!(reply.data()["deduplicated"], true),
            other => panic!("unexpected {other}: {:?}", reply.body),
        }
        ids.insert(reply.data()["command_id"].as_str().expect("id").to_string());
    }
    assert_eq!(fresh, 1, "exactly one call creates the command");
    assert_eq!(ids.len(), 1, "every answer names the same command");
    assert_eq!(stack.count_rows().await, 1);
    assert_eq!(stack.reservations("claim").await, 0);
    assert_eq!(stack.counters().await.get("unfinished").copied(), Some(1));
}

/// The same key with other content is `409 IDEMPOTENCY_CONFLICT` and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_other_content_conflicts() {
    let stack = Stack::start().await;
    let key = key();
    assert_eq!(
        stack.enqueue("user-1", &key, &offer()).await.status,
        StatusCode::ACCEPTED
    );
    let conflict = stack.enqueue("user-1", &key, &offer()).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    assert_eq!(conflict.code(), "IDEMPOTENCY_CONFLICT");
    assert_eq!(stack.count_rows().await, 1);
    assert_eq!(stack.counters().await.get("unfinished").copied(), Some(1));
    // Another subject may use the same key: keys are per subject.
    assert_eq!(
        stack.enqueue("user-2", &key, &offer()).await.status,
        StatusCode::ACCEPTED
    );
}

/// A replay is answered `200` even when the queue is full; a new key is refused `QUEUE_FULL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_is_answered_when_the_queue_is_full() {
    let declaration = CLAIM_DECLARATION.replace("max_queue = 1000000", "max_queue = 2");
    let stack = Stack::with_declaration(&declaration).await;
    let offer = offer();
    let first = key();
    let original = stack.enqueue("user-1", &first, &offer).await;
    assert_eq!(original.status, StatusCode::ACCEPTED);
    assert_eq!(
        stack.enqueue("user-2", &key(), &offer).await.status,
        StatusCode::ACCEPTED
    );
    let full = stack.enqueue("user-3", &key(), &offer).await;
    assert_eq!(full.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(full.code(), "QUEUE_FULL");
    assert_eq!(
        full.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let replay = stack.enqueue("user-1", &first, &offer).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.data()["deduplicated"], true);
    assert_eq!(replay.data()["command_id"], original.data()["command_id"]);
    assert_eq!(replay.data()["queue"]["position"], 0);
    assert_eq!(stack.count_rows().await, 2);
}

/// When Redis forgot a key (its map was lost), PostgreSQL's unique key still answers the
/// replay with the original command, and the borrowed reservation is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_redis_forgot_the_key_is_answered_by_postgres() {
    let stack = Stack::start().await;
    let offer = offer();
    let key = key();
    let original = stack.enqueue("user-1", &key, &offer).await;
    assert_eq!(original.status, StatusCode::ACCEPTED);
    let rk = stack.keys().request_keys(stack.creds.namespace_id, "claim");
    let _: i64 = stack
        .redis
        .pool()
        .next()
        .del(&rk)
        .await
        .expect("forget the key map");

    let replay = stack.enqueue("user-1", &key, &offer).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.data()["deduplicated"], true);
    assert_eq!(replay.data()["command_id"], original.data()["command_id"]);
    assert_eq!(stack.count_rows().await, 1);
    assert_eq!(stack.reservations("claim").await, 0);
    assert_eq!(
        stack.counters().await.get("unfinished").copied(),
        Some(1),
        "the reservation's count was given back"
    );
    // The map learned the key again: a third call is answered by Redis alone.
    let known: Option<String> = stack
        .redis
        .pool()
        .next()
        .hget(&rk, sluice_redis::request_key_field("user-1", &key))
        .await
        .expect("hget");
    assert!(known.is_some_and(|v| v.ends_with(" c")));

    let _: i64 = stack
        .redis
        .pool()
        .next()
        .del(&rk)
        .await
        .expect("forget again");
    let body = json!({"request_key": key, "subject": "user-1", "input": {"offer": uuid::Uuid::new_v4().to_string()}});
    let conflict = stack
        .post(
            "/v1/commands/claim:enqueue",
            Some(&stack.credential()),
            &body.to_string(),
        )
        .await;
    assert_eq!(conflict.code(), "IDEMPOTENCY_CONFLICT");
    assert_eq!(stack.counters().await.get("unfinished").copied(), Some(1));
}

/// An enqueue's idempotency is its body's `request_key`. The configure calls' `Idempotency-Key`
/// header is accepted on an enqueue only when it says the same; one that differs (or is
/// malformed) is `400` naming the header, and nothing is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_header_must_agree_with_the_request_key() {
    let stack = Stack::start().await;
    let send = |key: String, header: &'static str| {
        let stack = &stack;
        async move {
            let body = serde_json::json!({"request_key": key, "subject": "u1", "input": {"offer": offer()}});
            let credential = stack.credential();
            let header_value = if header == "same" {
                key.clone()
            } else {
                header.to_string()
            };
            stack
                .request_with(
                    hyper::Method::POST,
                    "/v1/commands/claim:enqueue",
                    Some(&credential),
                    Some(bytes::Bytes::from(body.to_string())),
                    &[("idempotency-key", header_value.as_str())],
                )
                .await
        }
    };
    let agreeing = send(key(), "same").await;
    assert_eq!(agreeing.status, StatusCode::ACCEPTED, "{:?}", agreeing.body);
    for header in ["another-key", "has space"] {
        let refused = send(key(), header).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{header}: {:?}",
            refused.body
        );
        assert_eq!(refused.code(), "INVALID_ARGUMENT");
        assert_eq!(refused.field(), "Idempotency-Key", "{:?}", refused.body);
    }
    assert_eq!(
        stack.count_rows().await,
        1,
        "only the agreeing enqueue was accepted"
    );
}
