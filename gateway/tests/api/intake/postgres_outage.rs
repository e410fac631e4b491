//! PostgreSQL stops in the middle of a run: the affected calls answer `503 UNAVAILABLE`, leave
//! no row and no reservation, and intake works again once PostgreSQL is back.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper::StatusCode;
use sluice_testkit::PgServer;
use uuid::Uuid;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_during_a_run_answers_503_and_leaks_nothing() {
    let mut postgres = tokio::task::spawn_blocking(PgServer::start)
        .await
        .expect("start postgres");
    let database_url = postgres.fresh_database().await;
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            database_url: Some(database_url),
            ..StackOptions::default()
        })
        .await,
    );
    let offer = offer();
    let running = Arc::new(AtomicBool::new(true));
    let mut load = Vec::new();
    for task in 0..8 {
        let (stack, offer, running) = (stack.clone(), offer.clone(), running.clone());
        load.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            let mut i = 0;
            while running.load(Ordering::Relaxed) {
                let key = key();
                let reply = stack
                    .enqueue(&format!("user-{task}-{i}"), &key, &offer)
                    .await;
                answers.push((reply, key));
                i += 1;
            }
            answers
        }));
    }
    // Let the load run, then stop PostgreSQL under it, then bring it back.
    assert!(
        eventually(Duration::from_secs(20), || async {
            stack.count_rows().await >= 50
        })
        .await
    );
    let mut postgres = tokio::task::spawn_blocking(move || {
        postgres.stop();
        postgres
    })
    .await
    .expect("stop postgres");
    let refusals_seen = eventually(Duration::from_secs(20), || async {
        stack
            .gateway
            .committer
            .stats()
            .failed_batches
            .load(Ordering::Relaxed)
            >= 3
    })
    .await;
    assert!(refusals_seen, "enqueues must fail while PostgreSQL is down");
    let postgres = tokio::task::spawn_blocking(move || {
        postgres.start_again();
        postgres
    })
    .await
    .expect("restart postgres");
    let before_recovery = stack.count_rows().await;
    assert!(
        eventually(Duration::from_secs(30), || async {
            stack.count_rows().await >= before_recovery + 50
        })
        .await,
        "intake works again after the restart"
    );
    running.store(false, Ordering::Relaxed);

    let mut accepted = HashSet::new();
    let mut unavailable = 0;
    for task in load {
        for (reply, _) in task.await.expect("load task") {
            match reply.status {
                StatusCode::ACCEPTED => {
                    accepted.insert(
                        Uuid::parse_str(reply.data()["command_id"].as_str().expect("id"))
                            .expect("uuid"),
                    );
                }
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert_eq!(reply.code(), "UNAVAILABLE", "{:?}", reply.body);
                    assert_eq!(reply.body["error"]["retryable"], true);
                    assert!(reply.headers.contains_key("retry-after"));
                    unavailable += 1;
                }
                other => panic!("unexpected {other}: {:?}", reply.body),
            }
        }
    }
    assert!(unavailable > 0, "some calls met the outage");
    let rows: HashSet<Uuid> =
        sqlx::query_scalar("SELECT id FROM commands WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_all(&stack.pg)
            .await
            .expect("rows")
            .into_iter()
            .collect();
    assert_eq!(
        rows, accepted,
        "the rows are exactly the 202 answers: no row for a 503"
    );
    assert_eq!(
        stack.reservations("claim").await,
        0,
        "no reservation left behind"
    );
    let counters = stack.counters().await;
    assert_eq!(
        counters.get("unfinished").copied(),
        Some(rows.len() as i64),
        "Redis counts equal the rows"
    );
    drop(postgres);
}
