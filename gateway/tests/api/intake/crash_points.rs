//! A gateway that stops between two steps of an enqueue (fault-injection points, compiled only
//! for tests): between the Redis reservation and the PostgreSQL commit, and between the commit
//! and the projection write. Nothing acknowledged is lost, nothing is counted twice, and what the
//! crash leaves in Redis is gone once the reservation expires.

use std::time::Duration;

use serde_json::json;
use sluice_durable::faults::{self, Point};
use sluice_durable::lifecycle::repair::Cursor;
use sluice_gateway::gateway_config::GatewayConfig;

use crate::execution::{all_terminal, fast_executor, start_executor};
use crate::support::*;

/// Reservations expire after a second here, so the tests can wait them out.
const RESERVATION_TTL_MS: u64 = 1_000;

async fn stack() -> Stack {
    Stack::start_with(StackOptions {
        config: GatewayConfig {
            reservation_ttl_ms: RESERVATION_TTL_MS,
            replay_wait_ms: 200,
            ..GatewayConfig::default()
        },
        ..StackOptions::default()
    })
    .await
}

async fn rows(stack: &Stack) -> Vec<(String, String)> {
    sqlx::query_as("SELECT id::text, status FROM commands ORDER BY queue_seq")
        .fetch_all(&stack.pg)
        .await
        .expect("rows")
}

/// Enqueues with a fixed key until the answer is not a 503 (a client retrying an unknown
/// outcome with the same key), within `within`.
async fn enqueue_until_decided(stack: &Stack, key: &str, offer: &str, within: Duration) -> Reply {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let reply = stack.enqueue("user-1", key, offer).await;
        if reply.status.as_u16() != 503 || tokio::time::Instant::now() >= deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_crash_between_reservation_and_commit_loses_nothing_and_leaks_nothing() {
    let stack = stack().await;
    let (key, offer) = (key(), offer());
    faults::arm(Point::AfterReservation, stack.creds.namespace_id, true);
    let crashed = stack.enqueue("user-1", &key, &offer).await;
    faults::arm(Point::AfterReservation, stack.creds.namespace_id, false);
    assert_eq!(crashed.status.as_u16(), 503, "{:?}", crashed.body);
    assert_eq!(crashed.code(), "UNAVAILABLE");
    // The crash left its reservation (counted, so no cap can be overshot meanwhile) and no row.
    assert_eq!(stack.open_counts("claim").await, (1, 1, 1));
    assert_eq!(stack.reservations("claim").await, 1);
    assert!(rows(&stack).await.is_empty(), "nothing was committed");
    // The client retries with the same key: refused while the dead reservation lives, accepted
    // once it expired (its counts given back first, so the retry is counted once).
    let retried = enqueue_until_decided(&stack, &key, &offer, Duration::from_secs(10)).await;
    assert_eq!(retried.status.as_u16(), 202, "{:?}", retried.body);
    assert_eq!(
        stack.open_counts("claim").await,
        (1, 1, 1),
        "counted exactly once"
    );
    assert_eq!(stack.reservations("claim").await, 0, "nothing leaked");
    assert_eq!(rows(&stack).await.len(), 1);
    let executor = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    let drained = eventually(Duration::from_secs(10), || async {
        stack.open_counts("claim").await == (0, 0, 0)
    })
    .await;
    assert!(drained, "{:?}", stack.open_counts("claim").await);
    executor.cancel();
}

#[tokio::test]
async fn a_crash_between_commit_and_projection_is_repaired_and_answered_once() {
    let stack = stack().await;
    let (key, offer) = (key(), offer());
    faults::arm(Point::AfterCommit, stack.creds.namespace_id, true);
    let crashed = stack.enqueue("user-1", &key, &offer).await;
    faults::arm(Point::AfterCommit, stack.creds.namespace_id, false);
    assert_eq!(crashed.status.as_u16(), 503, "{:?}", crashed.body);
    // Committed: the command exists, though its client was told the outcome is unknown.
    let committed = rows(&stack).await;
    assert_eq!(committed.len(), 1);
    assert_eq!(committed[0].1, "accepted");
    // The client retries with the same key and learns the original command (a replay, not a
    // second command).
    let retried = enqueue_until_decided(&stack, &key, &offer, Duration::from_secs(10)).await;
    assert_eq!(retried.status.as_u16(), 200, "{:?}", retried.body);
    assert_eq!(retried.data()["deduplicated"], true);
    assert_eq!(retried.data()["command_id"], json!(committed[0].0));
    assert_eq!(rows(&stack).await.len(), 1, "still one command");
    // The dead reservation expired and gave its counts back: the command is not projected yet.
    assert_eq!(stack.open_counts("claim").await, (0, 0, 0));
    // The reconciler projects it, counting it once.
    let repaired = stack.reconcile(&mut Cursor::default()).await;
    assert_eq!(repaired, 1);
    assert_eq!(stack.open_counts("claim").await, (1, 1, 1));
    let poll = stack
        .poll(retried.data()["ticket"].as_str().expect("ticket"))
        .await;
    assert_eq!(
        poll.data()["queue"]["position"],
        0,
        "first in line: {:?}",
        poll.body
    );
    // And it runs exactly once.
    let executor = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    assert_eq!(rows(&stack).await[0].1, "succeeded");
    let allocations: i64 = sqlx::query_scalar("SELECT count(*) FROM allocations")
        .fetch_one(&stack.pg)
        .await
        .expect("allocations");
    assert_eq!(allocations, 1);
    let drained = eventually(Duration::from_secs(10), || async {
        stack.open_counts("claim").await == (0, 0, 0)
    })
    .await;
    assert!(drained, "{:?}", stack.open_counts("claim").await);
    executor.cancel();
}
