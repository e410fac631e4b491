//! The executor against the gateway: accepted commands are drained under their budgets and land
//! exactly one result each.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use hyper::StatusCode;
use sluice_durable::executor::{Executor, ExecutorConfig};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// An executor in this process until the returned token is cancelled.
pub fn start_executor(stack: &Stack, config: ExecutorConfig) -> CancellationToken {
    let shutdown = CancellationToken::new();
    let executor = Executor::new(stack.pg.clone(), stack.redis.clone(), config);
    tokio::spawn(executor.run(shutdown.clone()));
    shutdown
}

pub fn fast_executor() -> ExecutorConfig {
    ExecutorConfig {
        tick_ms: 20,
        sweep_interval_ms: 100,
        catalog_refresh_ms: 200,
        ..ExecutorConfig::default()
    }
}

/// Every accepted command reaches a terminal state and polls it.
pub async fn all_terminal(stack: &Stack, within: Duration) -> bool {
    eventually(within, || async {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM commands WHERE application_id = $1
               AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')",
        )
        .bind(stack.creds.application_id)
        .fetch_one(&stack.pg)
        .await
        .expect("count");
        open == 0
    })
    .await
}

/// A small sale end to end: 30 subjects for 10 units; exactly 10 succeed, the rest are
/// `SOLD_OUT`, tickets show the results, and the Redis counts return to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_sale_lands_one_result_per_command() {
    let declaration = CLAIM_DECLARATION.replace("capacity = 100", "capacity = 10");
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let offer = offer();
    let mut tickets = Vec::new();
    for i in 0..30 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED);
        tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_string());
    }
    let shutdown = start_executor(&stack, fast_executor());
    assert!(
        all_terminal(&stack, Duration::from_secs(30)).await,
        "every command lands"
    );
    let mut succeeded = 0;
    let mut allocations = HashSet::new();
    for ticket in &tickets {
        let poll = stack.poll(ticket).await;
        match poll.data()["status"].as_str() {
            Some("succeeded") => {
                succeeded += 1;
                assert!(allocations.insert(poll.data()["result"]["allocation_id"].to_string()));
            }
            Some("rejected") => assert_eq!(poll.data()["error"]["code"], "SOLD_OUT"),
            other => panic!("unexpected status {other:?}: {:?}", poll.body),
        }
    }
    assert_eq!(succeeded, 10);
    let allocated: i64 =
        sqlx::query_scalar("SELECT allocated FROM quota_pools WHERE namespace_id = $1")
            .bind(stack.creds.namespace_id)
            .fetch_one(&stack.pg)
            .await
            .expect("pool");
    assert_eq!(allocated, 10);
    let counters = stack.counters().await;
    assert_eq!(counters.get("unfinished").copied(), Some(0));
    assert_eq!(
        counters
            .get(&format!("waiting:{}", stack.creds.namespace_id))
            .copied(),
        Some(0)
    );
    shutdown.cancel();
}
