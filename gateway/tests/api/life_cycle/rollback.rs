//! A Redis that comes back with some writes and not others: restarted from an RDB taken earlier,
//! while commands run. It still says ready at PostgreSQL's generation, but its permits, counters
//! and queue sequence went back; the epoch check notices it before any decision, and the rebuild
//! restores the permits of the work in hand.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::execution::{
    all_terminal, fast_executor, generation, repeated_queue_seqs, start_executor,
};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{each_succeeded_after_one_call, enqueue_ocr, ocr_declaration};

/// Every call is held half a second, so one is surely at the backend when Redis goes back.
const CALL: Duration = Duration::from_millis(500);

/// One account, one command at a time. The RDB is taken while nothing runs; Redis is killed and
/// restarted from it while a command is at the backend and others wait. The backend never has
/// two calls at once, no queue sequence is handed out twice, every command is called once and
/// succeeds, and the projection was rebuilt (a new generation, verified in the new process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_from_an_older_rdb_is_detected_and_rebuilt() {
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(CALL).await;
        Answer::succeeded(json!({}))
    }))
    .await;
    let mut redis = start_private_redis().await;
    let declaration = ocr_declaration(
        &backend.url("/ocr"),
        5_000,
        120,
        r#"{ key = "account:{provider}:{account}", max_in_flight = 1 }"#,
    );
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            declaration,
            redis_url: Some(redis.url()),
            ..StackOptions::default()
        })
        .await,
    );
    backend.set_secret(&stack.creds.webhook_secret);
    let generation_before = generation(&stack).await;
    // The snapshot: a ready projection with nothing in flight.
    let snapshot = tokio::task::spawn_blocking(move || {
        let snapshot = redis.snapshot();
        (redis, snapshot)
    })
    .await
    .expect("snapshot");
    let (mut redis, snapshot) = snapshot;

    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(enqueue_ocr(&stack, &format!("user-{i}"), "gitee", "a", "doc").await);
    }
    let executor = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(10), || async {
            backend.arrivals().len() >= 2 && backend.in_flight() == 1
        })
        .await,
        "a command is at the backend"
    );
    let killed_at = std::time::Instant::now();
    redis = tokio::task::spawn_blocking(move || {
        redis.restart_from(&snapshot);
        redis
    })
    .await
    .expect("restart from the snapshot");

    // More work after the rollback: enqueued with retries while the projection is rebuilt.
    for i in 6..12 {
        let body = json!({
            "request_key": format!("after-{i}"),
            "subject": format!("user-{i}"),
            "input": {"provider": "gitee", "account": "a", "doc": "doc"},
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let accepted = loop {
            let reply = stack
                .post(
                    "/v1/commands/ocr:enqueue",
                    Some(&stack.credential()),
                    &body.to_string(),
                )
                .await;
            if reply.status.is_success() {
                break reply.data()["command_id"].as_str().map(str::to_string);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "enqueue {i} after the rollback: {:?}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        ids.push(accepted.expect("a command id"));
    }
    assert!(all_terminal(&stack, Duration::from_secs(60)).await);
    each_succeeded_after_one_call(&stack, &backend, &ids).await;
    // Each call is held CALL long: calls that arrived closer together than that overlapped.
    let calls: Vec<String> = backend
        .arrivals()
        .iter()
        .map(|a| {
            let offset = a.at.saturating_duration_since(killed_at).as_millis() as i128
                - killed_at.saturating_duration_since(a.at).as_millis() as i128;
            format!(
                "{offset:+} ms {} (attempt {})",
                a.idempotency_key, a.body["attempt"]
            )
        })
        .collect();
    assert_eq!(
        backend.peak_in_flight(),
        1,
        "the account's limit as the backend counted it; calls relative to the kill: {calls:#?}"
    );
    let repeated = repeated_queue_seqs(&stack).await;
    assert!(
        repeated.is_empty(),
        "queue sequences handed out twice: {repeated:?}"
    );
    assert!(
        generation(&stack).await > generation_before,
        "the rollback was detected and the projection rebuilt"
    );
    executor.cancel();
    drop(redis);
}
