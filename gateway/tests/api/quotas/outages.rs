//! A holder's decision when a store is down: PostgreSQL (the truth) down refuses with `503` and
//! changes nothing, and the same call decides once it is back; Redis (only the cached reads)
//! down changes nothing about the decision.

use sluice_testkit::PgServer;

use super::*;

/// The holder's receipt of one reserved unit, landed by an executor in this process.
async fn one_reservation(stack: &Stack, subject: &str) -> String {
    let shutdown = start_executor(stack, fast_executor());
    let receipt = hold(stack, subject, &offer()).await;
    assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
    let landed = landed_within(stack, &receipt, Duration::from_secs(20)).await;
    shutdown.cancel();
    let (status, result, code) = landed.expect("the hold lands");
    assert_eq!(status, "succeeded", "{code:?}");
    result["allocation_id"].as_str().expect("id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_refuses_a_confirm_with_503_and_the_same_call_decides_once_it_is_back() {
    let postgres = tokio::task::spawn_blocking(PgServer::start)
        .await
        .expect("start postgres");
    let stack = Stack::start_with(StackOptions {
        declaration: reserved_declaration(2, 300),
        database_url: Some(postgres.fresh_database().await),
        ..StackOptions::default()
    })
    .await;
    let id = one_reservation(&stack, "alice").await;
    let alice = stack.subject_token("alice");
    let mut postgres = tokio::task::spawn_blocking(move || {
        let mut postgres = postgres;
        postgres.stop();
        postgres
    })
    .await
    .expect("stop postgres");
    for verb in ["confirm", "release"] {
        let refused = act(&stack, &id, verb, &alice).await;
        assert_eq!(
            refused.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{:?}",
            refused.body
        );
        assert_eq!(refused.code(), "UNAVAILABLE");
        assert_eq!(refused.body["error"]["retryable"], true);
    }
    postgres = tokio::task::spawn_blocking(move || {
        postgres.start_again();
        postgres
    })
    .await
    .expect("restart postgres");
    assert_eq!(
        states(&stack.pg, "seats").await.get("reserved"),
        Some(&1),
        "nothing was decided while PostgreSQL was down"
    );
    let confirmed = eventually(Duration::from_secs(20), || async {
        act(&stack, &id, "confirm", &alice).await.status == StatusCode::OK
    })
    .await;
    assert!(
        confirmed,
        "the same confirm decides once PostgreSQL is back"
    );
    assert_eq!(states(&stack.pg, "seats").await.get("confirmed"), Some(&1));
    assert_counts_match_rows(&stack.pg, "seats").await;
    drop(postgres);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_changes_nothing_about_a_holders_decision() {
    let redis = start_private_redis().await;
    let stack = Stack::start_with(StackOptions {
        declaration: reserved_declaration(2, 300),
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    let id = one_reservation(&stack, "alice").await;
    let alice = stack.subject_token("alice");
    let redis = kill_redis(redis).await;
    let confirmed = act(&stack, &id, "confirm", &alice).await;
    assert_eq!(confirmed.status, StatusCode::OK, "{:?}", confirmed.body);
    assert_eq!(confirmed.data()["state"], "confirmed");
    let read = stack
        .get(&format!("/v1/allocations/{id}"), Some(&alice))
        .await;
    assert_eq!(read.data()["state"], "confirmed");
    let pool = stack
        .get("/v1/quota-pools/seats", Some(&stack.credential()))
        .await;
    assert_eq!(
        (
            pool.data()["allocated"].as_i64(),
            pool.data()["reserved"].as_i64()
        ),
        (Some(1), Some(0))
    );
    assert_counts_match_rows(&stack.pg, "seats").await;
    drop(redis);
}
