//! `GET /readyz`: ready only with PostgreSQL, Redis and every application's projection; a
//! projection Redis lost is rebuilt by the probe itself.

use std::time::Duration;

use fred::prelude::*;
use hyper::StatusCode;

use crate::support::*;

async fn probe(stack: &Stack) -> (StatusCode, String) {
    let reply = stack
        .request(hyper::Method::GET, "/readyz", None, None)
        .await;
    (
        reply.status,
        reply.body.as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_redis_and_rebuilds_a_lost_projection() {
    let redis = start_private_redis().await;
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    assert_eq!(
        stack.enqueue("u1", &key(), &offer()).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(probe(&stack).await.0, StatusCode::OK);
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM projections WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_one(&stack.pg)
            .await
            .expect("generation");

    // Redis loses everything: the probe itself rebuilds, no enqueue needed.
    let _: () = stack
        .redis
        .pool()
        .next()
        .flushall(false)
        .await
        .expect("flushall");
    let (status, text) = probe(&stack).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let meta: Vec<Option<String>> = stack
        .redis
        .pool()
        .next()
        .hmget(stack.keys().meta(), vec!["ready", "generation"])
        .await
        .expect("meta");
    assert_eq!(meta[0].as_deref(), Some("1"));
    assert_eq!(
        meta[1].as_deref(),
        Some((generation + 1).to_string().as_str())
    );
    assert_eq!(
        stack.open_counts("claim").await,
        (1, 1, 1),
        "the waiting command is back"
    );

    // Redis gone: not ready, and the probe says why.
    let redis = kill_redis(redis).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            stack
                .redis
                .pool()
                .clients()
                .iter()
                .all(|c| !c.is_connected())
        })
        .await
    );
    let (status, text) = probe(&stack).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("Redis unavailable"), "{text}");
    drop(redis);
}
