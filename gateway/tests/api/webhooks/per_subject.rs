//! Per-subject budgets: one person cannot take what everyone shares.
//!
//! - A limit key naming `{subject}` is that subject's own budget at admission: with
//!   `max_in_flight = 1`, a subject's second command does not reach the backend while its first
//!   runs, and another subject's does (counted by the backend itself).
//! - `intake.per_subject_per_second`: a subject that spends its own burst is refused
//!   `RATE_LIMITED` with the wait of its own bucket, and another subject is accepted at once.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use super::*;
use crate::execution::{fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};

const SUBJECT_LIMIT: &str = r#"{ key = "subject:{subject}", max_in_flight = 1 }"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_limit_holds_one_persons_commands_and_not_anothers() {
    // 202: each command stays `running` (its permits held) until its `:complete`.
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let stack = ocr_stack(&backend, 2_000, 60, SUBJECT_LIMIT).await;
    let executor = start_executor(&stack, fast_executor());
    // Different accounts (resources): only the subject limit can hold them back.
    let alice_first = enqueue_ocr(&stack, "alice", "gitee", "a1", "d").await;
    assert!(arrives(&backend, &alice_first, Duration::from_secs(10)).await);
    let alice_second = enqueue_ocr(&stack, "alice", "gitee", "a2", "d").await;
    let bob = enqueue_ocr(&stack, "bob", "gitee", "b1", "d").await;
    assert!(
        arrives(&backend, &bob, Duration::from_secs(10)).await,
        "another subject's command runs beside alice's"
    );
    assert!(
        never_arrives(&backend, &alice_second, Duration::from_millis(1_500)).await,
        "alice's second command reached the backend while her first ran"
    );
    let done = complete(
        &stack,
        &alice_first,
        json!({"outcome": "succeeded", "result": {}}),
    )
    .await;
    assert_eq!(done.status, StatusCode::OK, "{:?}", done.body);
    assert!(
        arrives(&backend, &alice_second, Duration::from_secs(10)).await,
        "her first ended: the second runs"
    );
    // The limit key the row carries is hers, escaped like every rendered value.
    let keys: serde_json::Value =
        sqlx::query_scalar("SELECT limit_keys FROM commands WHERE id = $1::uuid")
            .bind(&alice_second)
            .fetch_one(&stack.pg)
            .await
            .expect("the row");
    assert_eq!(keys, json!([["subject:{subject}", "subject:alice"]]));
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_that_spent_its_own_intake_burst_is_refused_and_another_is_not() {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let declaration = ocr_declaration(&backend.url("/ocr"), 2_000, 60, "")
        .replace(
            OPEN_INTAKE,
            "intake = { per_second = 1000, burst = 1000, per_subject_per_second = 1, per_subject_burst = 2 }",
        );
    assert!(declaration.contains("per_subject_burst = 2"));
    let stack = stack_with(&backend, &declaration).await;
    let enqueue = |subject: &'static str| {
        let stack = &stack;
        async move {
            let body = json!({"request_key": key(), "subject": subject,
                "input": {"provider": "p", "account": "a", "doc": "d"}});
            stack
                .post(
                    "/v1/commands/ocr:enqueue",
                    Some(&stack.credential()),
                    &body.to_string(),
                )
                .await
        }
    };
    for n in 0..2 {
        let reply = enqueue("mallory").await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "call {n}: {:?}",
            reply.body
        );
    }
    let refused = enqueue("mallory").await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{:?}",
        refused.body
    );
    assert_eq!(refused.code(), "RATE_LIMITED");
    let wait = refused.body["error"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    assert!(
        (1..=1_000).contains(&wait),
        "the wait of her own bucket at 1/s: {wait}"
    );
    let other = enqueue("trent").await;
    assert_eq!(other.status, StatusCode::ACCEPTED, "{:?}", other.body);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM commands WHERE subject = 'mallory'")
        .fetch_one(&stack.pg)
        .await
        .expect("count");
    assert_eq!(rows, 2, "the refusal wrote nothing");
}
