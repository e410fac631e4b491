//! `start_tokens.lua` takes a token from every bucket or none.

use super::*;

/// start_tokens.lua: one of two buckets empty → the wait, and nothing taken from the other; both with
/// a token → one taken from each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retake_takes_a_token_from_every_bucket_or_none() {
    let bench = Bench::new().await;
    let full = RateKey {
        bucket: bench.limit_bucket("provider:a"),
        per_second: 1,
        burst: 5,
    };
    let empty = RateKey {
        bucket: bench.limit_bucket("provider:b"),
        per_second: 2,
        burst: 2,
    };
    let set_bucket = |key: String, tokens: &'static str| {
        let bench = bench.clone();
        async move {
            let now = bench.now_ms().await;
            let _: () = bench
                .redis
                .pool()
                .next()
                .hset(
                    &key,
                    [("tokens", tokens.to_string()), ("ts", now.to_string())],
                )
                .await
                .expect("hset bucket");
        }
    };
    let fresh = RateKey {
        bucket: bench.limit_bucket("provider:c"),
        per_second: 1,
        burst: 1,
    };
    let buckets = [full.clone(), empty.clone()];
    // Retried when the machine stalls: at 2/s provider:b has a token again after 500 ms.
    for attempt in 0.. {
        assert!(attempt < 5, "Redis time kept jumping between two calls");
        let _: i64 = bench
            .redis
            .pool()
            .next()
            .del(&fresh.bucket)
            .await
            .expect("del");
        let before = bench.now_ms().await;
        set_bucket(full.bucket.clone(), "3").await;
        set_bucket(empty.bucket.clone(), "0").await;
        let full_before = bench.hash(&full.bucket).await;
        let wait = take_start_tokens(&bench.redis, &bench.keys, &buckets)
            .await
            .expect("start_tokens.lua");
        // A missing bucket is full: the wait comes from the empty one alone, whatever the order.
        let wait_fresh =
            take_start_tokens(&bench.redis, &bench.keys, &[empty.clone(), fresh.clone()])
                .await
                .expect("start_tokens.lua");
        if bench.now_ms().await - before >= 400 {
            continue;
        }
        let Retake::Wait(wait) = wait else {
            panic!("a wait: provider:b has no token, got {wait:?}")
        };
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "at 2/s a token is at most 500 ms away: {wait:?}"
        );
        assert_eq!(
            bench.hash(&full.bucket).await,
            full_before,
            "nothing taken from provider:a"
        );
        assert!(
            matches!(wait_fresh, Retake::Wait(_)),
            "provider:b still has no token"
        );
        assert!(
            !bench.exists(&fresh.bucket).await,
            "nothing written to provider:c"
        );
        break;
    }

    // Both with a token: one from each.
    set_bucket(empty.bucket.clone(), "2").await;
    let (a_tokens, a_ts) = bench.bucket(&full.bucket).await;
    let (b_tokens, b_ts) = bench.bucket(&empty.bucket).await;
    assert_eq!(
        take_start_tokens(&bench.redis, &bench.keys, &buckets)
            .await
            .expect("start_tokens.lua"),
        Retake::Taken
    );
    let (a_after, a_now) = bench.bucket(&full.bucket).await;
    let (b_after, b_now) = bench.bucket(&empty.bucket).await;
    assert_eq!(a_now, b_now, "one Redis time for both");
    let a_expected = refilled(a_tokens, a_ts, a_now, 1.0, 5.0) - 1.0;
    let b_expected = refilled(b_tokens, b_ts, b_now, 2.0, 2.0) - 1.0;
    assert!(
        (a_after - a_expected).abs() < 1e-6,
        "{a_after} vs {a_expected}"
    );
    assert!(
        (b_after - b_expected).abs() < 1e-6,
        "{b_after} vs {b_expected}"
    );
    assert_eq!(b_after, 1.0);
    // No bucket: nothing to wait for.
    assert_eq!(
        take_start_tokens(&bench.redis, &bench.keys, &[])
            .await
            .expect("retake"),
        Retake::Taken
    );
}
