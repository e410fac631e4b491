//! The transitions that look at the clock and at what Redis missed: a claim past the head's time
//! ends it instead of starting it, and the permit sweeper frees the permits of an ended row and
//! restores those of a running one, whatever Redis lost of them.

use std::time::Duration;

use fred::prelude::*;
use serde_json::json;
use sluice_executor::ExecutorConfig;
use uuid::Uuid;

use crate::execution::{fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{arrivals_of, enqueue_ocr, never_arrives, ocr_declaration, row, stack_with};

/// `max_wait_seconds = 1`: a command still waiting after it is admitted and claimed ends
/// `expired` with `MAX_WAIT_EXCEEDED` by the claim itself (the sweepers are slowed down to a
/// minute here, so nothing else could end it) and its backend is never called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_past_max_wait_ends_the_command_instead_of_starting_it() {
    let backend = Backend::start(handler(|_| async { Answer::succeeded(json!({})) })).await;
    let declaration = ocr_declaration(&backend.url("/ocr"), 2_000, 60, "").replace(
        "max_queue = 1000000 }",
        "max_queue = 1000000, max_wait_seconds = 1 }",
    );
    let stack = stack_with(&backend, &declaration).await;
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    let past: bool = eventually(Duration::from_secs(5), || async {
        sqlx::query_scalar("SELECT max_wait_at < now() FROM commands WHERE id = $1::uuid")
            .bind(&id)
            .fetch_one(&stack.pg)
            .await
            .expect("max_wait_at")
    })
    .await;
    assert!(past, "the command's max_wait passed while no executor ran");
    let executor = start_executor(
        &stack,
        ExecutorConfig {
            sweep_interval_ms: 60_000,
            ..fast_executor()
        },
    );
    let ended = eventually(Duration::from_secs(5), || async {
        row(&stack, &id).await["status"] == "expired"
    })
    .await;
    assert!(ended, "{}", row(&stack, &id).await);
    assert_eq!(row(&stack, &id).await["error_code"], "MAX_WAIT_EXCEEDED");
    assert_eq!(row(&stack, &id).await["attempts"], 0, "never started");
    assert!(
        arrivals_of(&backend, &id).is_empty(),
        "the backend was called"
    );
    stack.assert_open_counts_drain("ocr").await;
    executor.cancel();
}

/// The permits of the command's account key (`max_in_flight = 1`).
fn account_lease(stack: &Stack) -> String {
    stack
        .keys()
        .limit_leases(stack.creds.namespace_id, "account:gitee:a")
}

/// The permit sweeper against PostgreSQL: a running command whose permit is about to lapse (its
/// extension to the deadline failed) gets it extended until its deadline, so the account's next
/// command keeps waiting; once the command has ended in PostgreSQL without its landing reaching
/// Redis, its lingering permit is freed and the next command starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_permit_sweeper_restores_running_permits_and_frees_ended_ones() {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let declaration = ocr_declaration(
        &backend.url("/ocr"),
        2_000,
        600,
        r#"{ key = "account:{provider}:{account}", max_in_flight = 1 }"#,
    );
    let stack = stack_with(&backend, &declaration).await;
    let first = enqueue_ocr(&stack, "user-1", "gitee", "a", "one").await;
    let second = enqueue_ocr(&stack, "user-2", "gitee", "a", "two").await;
    let executor = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(10), || async {
            row(&stack, &first).await["status"] == "running"
        })
        .await
    );
    // The running command's account permit is about to lapse, as it would if the extension to
    // its deadline had failed (it keeps the lease it was admitted with, a second here).
    let soon = chrono::Utc::now().timestamp_millis() + 1_000;
    let _: i64 = stack
        .redis
        .pool()
        .next()
        .zadd(
            account_lease(&stack),
            Some(SetOptions::XX),
            None,
            false,
            false,
            (soon as f64, first.as_str()),
        )
        .await
        .expect("zadd");
    let restored = eventually(Duration::from_secs(5), || async {
        let score: Option<f64> = stack
            .redis
            .pool()
            .next()
            .zscore(account_lease(&stack), &first)
            .await
            .expect("zscore");
        score
            .is_some_and(|expiry| expiry > (chrono::Utc::now().timestamp_millis() + 500_000) as f64)
    })
    .await;
    assert!(
        restored,
        "the running command's permit lasts until its deadline"
    );
    // Past the moment the permit would have lapsed: the next command still waits.
    assert!(
        never_arrives(&backend, &second, Duration::from_millis(1_500)).await,
        "the account's next command started beside the running one"
    );

    // The command ends in PostgreSQL while its landing misses Redis (the permit lingers).
    let first_id: Uuid = first.parse().expect("uuid");
    sqlx::query(
        "UPDATE commands SET status = 'succeeded', result = '{}', finished_at = now(),
                updated_at = now(), attempt_id = NULL
          WHERE id = $1",
    )
    .bind(first_id)
    .execute(&stack.pg)
    .await
    .expect("end it in PostgreSQL alone");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !arrivals_of(&backend, &second).is_empty()
        })
        .await,
        "the ended command's permit was freed and the next command started"
    );
    executor.cancel();
}
