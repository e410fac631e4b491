//! An executor that loses only PostgreSQL is not dead: it keeps renewing its permits in Redis,
//! its request stays at the backend, and the lease sweeper rescues a row only once the
//! attempt's permits have lapsed too. Rescuing it earlier would free its permits while its
//! request is still in progress and let a second request of the same command (or another
//! command under the same limit key) start beside it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_durable::lifecycle::sweep::{SweepSide, rescue};
use sluice_executor::ExecutorConfig;
use sluice_testkit::PgServer;
use tokio::sync::Notify;
use uuid::Uuid;

use super::fencing::backdate_permits;
use super::{LEASE_MS, start_short_lease_executor};
use crate::execution::{fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{arrivals_of, arrives, enqueue_ocr, ocr_declaration, ocr_stack, row};

/// A backend that holds every request until `release` is notified, then answers `succeeded`.
async fn held_backend(release: Arc<Notify>) -> Backend {
    Backend::start(handler(move |_| {
        let release = release.clone();
        async move {
            let _ = tokio::time::timeout(Duration::from_secs(60), release.notified()).await;
            Answer::succeeded(json!({"from": "first"}))
        }
    }))
    .await
}

fn side() -> SweepSide {
    SweepSide {
        retention_ms: 60_000,
        patience: Duration::from_secs(2),
    }
}

/// The attempt holding `command` in PostgreSQL, with whether its lease there has lapsed (none
/// once no attempt holds it).
async fn lease_of(stack: &Stack, command: Uuid) -> (Option<Uuid>, Option<bool>) {
    sqlx::query_as("SELECT attempt_id, lease_expires_at < now() FROM commands WHERE id = $1")
        .bind(command)
        .fetch_one(&stack.pg)
        .await
        .expect("lease")
}

/// Moves `command`'s lease in PostgreSQL 10 s into the past.
async fn backdate_lease(stack: &Stack, command: Uuid) {
    sqlx::query(
        "UPDATE commands SET lease_expires_at = now() - interval '10 seconds' WHERE id = $1",
    )
    .bind(command)
    .execute(&stack.pg)
    .await
    .expect("backdate the lease");
}

/// The lease sweeper against one row whose lease lapsed in PostgreSQL: while its attempt still
/// holds live permits in Redis (the executor renews them; only PostgreSQL was out of its reach)
/// the row is left alone; once those permits lapse too, it is rescued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_row_whose_permits_are_live_is_not_rescued() {
    let release = Arc::new(Notify::new());
    let backend = held_backend(release.clone()).await;
    let stack = ocr_stack(&backend, 60_000, 120, "").await;
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    let command: Uuid = id.parse().expect("uuid");
    // A minute-long lease renews every 20 s and the executor's own sweeper runs once a minute:
    // between two renewals the test alone moves the lease.
    let executor = start_executor(
        &stack,
        ExecutorConfig {
            lease_ms: 60_000,
            sweep_interval_ms: 60_000,
            ..fast_executor()
        },
    );
    assert!(
        arrives(&backend, &id, Duration::from_secs(10)).await,
        "the request reached the backend"
    );
    let (attempt, _) = lease_of(&stack, command).await;
    let attempt = attempt.expect("the executing row names its attempt");

    backdate_lease(&stack, command).await;
    let rescued = rescue(stack.stores(), side()).await.expect("rescue");
    assert_eq!(
        lease_of(&stack, command).await,
        (Some(attempt), Some(true)),
        "the sweep saw the lapsed lease and left the row with its attempt"
    );
    assert_eq!(rescued, 0, "an attempt with live permits was rescued");
    assert_eq!(row(&stack, &id).await["status"], "executing");

    // The executor renews the lease and the permits every 20 s and may do so between the
    // backdating and the sweep (a loaded machine took long to get here): then they are live
    // again, rightly kept, and the next renewal is 20 s away, so a second try sees both lapsed.
    let mut rescued = 0;
    for _ in 0..2 {
        backdate_lease(&stack, command).await;
        backdate_permits(&stack, command, attempt).await;
        rescued = rescue(stack.stores(), side()).await.expect("rescue");
        if rescued > 0 {
            break;
        }
    }
    assert_eq!(rescued, 1, "once its permits lapsed the row is rescued");
    let (after, _) = lease_of(&stack, command).await;
    assert_ne!(
        after,
        Some(attempt),
        "the lapsed attempt no longer holds the row"
    );
    release.notify_waiters();
    executor.cancel();
}

/// The executor loses PostgreSQL for three leases while its only request is at the backend; the
/// backend answers during the outage. Nothing starts the command again: one request in all, and
/// once PostgreSQL is back its answer is the one that lands, under the first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_loses_only_postgres_keeps_its_request() {
    let release = Arc::new(Notify::new());
    let backend = held_backend(release.clone()).await;
    let mut postgres = tokio::task::spawn_blocking(PgServer::start)
        .await
        .expect("start postgres");
    let stack = Stack::start_with(StackOptions {
        declaration: ocr_declaration(&backend.url("/ocr"), 60_000, 120, ""),
        database_url: Some(postgres.fresh_database().await),
        ..StackOptions::default()
    })
    .await;
    backend.set_secret(&stack.creds.webhook_secret);
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    let executor = start_short_lease_executor(&stack);
    assert!(
        arrives(&backend, &id, Duration::from_secs(10)).await,
        "the request reached the backend"
    );

    postgres = tokio::task::spawn_blocking(move || {
        postgres.stop();
        postgres
    })
    .await
    .expect("stop postgres");
    // The outage itself is the condition under test: three leases without PostgreSQL, the
    // backend answering in the middle of it.
    tokio::time::sleep(Duration::from_millis(3 * LEASE_MS / 2)).await;
    release.notify_waiters();
    tokio::time::sleep(Duration::from_millis(3 * LEASE_MS / 2)).await;
    postgres = tokio::task::spawn_blocking(move || {
        postgres.start_again();
        postgres
    })
    .await
    .expect("restart postgres");

    let landed = eventually(Duration::from_secs(20), || async {
        row(&stack, &id).await["status"] == "succeeded"
    })
    .await;
    assert!(landed, "{}", row(&stack, &id).await);
    let landed = row(&stack, &id).await;
    assert_eq!(landed["result"], json!({"from": "first"}), "{landed}");
    assert_eq!(landed["attempts"], 1, "started again: {landed}");
    assert_eq!(
        arrivals_of(&backend, &id).len(),
        1,
        "a second request of the command reached the backend"
    );
    stack.assert_open_counts_drain("ocr").await;
    executor.cancel();
    drop(postgres);
}
