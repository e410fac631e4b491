//! Readiness in its two depths. On the admin listener, `GET /readyz` is ready only with
//! PostgreSQL, Redis and every application's projection, and a projection Redis lost is rebuilt
//! by the probe itself. On the public port it is answered from memory: no query, no rebuild, no
//! server's error text; and `/metrics` is not served there at all.

use std::time::Duration;

use fred::prelude::*;
use hyper::StatusCode;

use crate::support::*;

/// The admin listener's detailed readiness.
async fn probe(stack: &Stack) -> (StatusCode, String) {
    text_of(stack.admin_get("/readyz").await)
}

/// The public port's readiness.
async fn public_probe(stack: &Stack) -> (StatusCode, String) {
    text_of(
        stack
            .request(hyper::Method::GET, "/readyz", None, None)
            .await,
    )
}

fn text_of(reply: Reply) -> (StatusCode, String) {
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
    stack.flush_redis().await;
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
    assert!(stack.redis_disconnected(Duration::from_secs(10)).await);
    let (status, text) = probe(&stack).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("Redis unavailable"), "{text}");
    drop(redis);
}

/// The public readiness starts no work: a lost projection stays lost (only traffic or the admin
/// probe rebuilds it), a closed PostgreSQL pool does not change its answer (it never queries),
/// and with Redis gone it says `not ready` without the client's error text. `/metrics` is the
/// admin listener's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_public_readiness_does_no_io_and_the_public_port_serves_no_metrics() {
    let redis = start_private_redis().await;
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    assert_eq!(
        public_probe(&stack).await,
        (StatusCode::OK, "ready\n".to_string())
    );

    let metrics = stack
        .request(hyper::Method::GET, "/metrics", None, None)
        .await;
    assert_eq!(metrics.status, StatusCode::NOT_FOUND, "{:?}", metrics.body);
    assert_eq!(metrics.code(), "NOT_FOUND");
    let scraped = stack.admin_get("/metrics").await;
    assert_eq!(scraped.status, StatusCode::OK);
    assert!(
        scraped
            .body
            .as_str()
            .is_some_and(|text| text.contains("sluice_projection_ready")),
        "the admin listener serves the exposition: {:?}",
        scraped.body
    );

    // A lost projection: the public probe answers and leaves it lost.
    stack.lose_projection().await;
    for _ in 0..3 {
        assert_eq!(public_probe(&stack).await.0, StatusCode::OK);
    }
    let meta: Vec<Option<String>> = stack
        .redis
        .pool()
        .next()
        .hmget(stack.keys().meta(), vec!["ready", "generation"])
        .await
        .expect("meta");
    assert_eq!(meta, vec![None, None], "the public probe rebuilt nothing");

    // PostgreSQL closed to this gateway: the public probe never asked it, the admin one does.
    stack.pg.close().await;
    assert_eq!(public_probe(&stack).await.0, StatusCode::OK);
    let (status, text) = probe(&stack).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(text.contains("PostgreSQL unavailable"), "{text}");

    // Redis gone: not ready, in two words.
    let redis = kill_redis(redis).await;
    assert!(stack.redis_disconnected(Duration::from_secs(10)).await);
    assert_eq!(
        public_probe(&stack).await,
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".to_string())
    );
    drop(redis);
}
