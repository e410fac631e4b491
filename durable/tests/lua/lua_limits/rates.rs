//! A rate-limited key starts at most its burst, then its rate.

use super::*;

/// Pushes `n` `ocr` commands naming `key` for the template `provider:{p}`, one in each of the
/// resources `<prefix>0`, `<prefix>1`, …
async fn push_per_resource(bench: &Bench, prefix: &str, n: usize, key: &str) -> HashSet<CommandId> {
    let mut pushed = HashSet::new();
    for i in 0..n {
        let resource = format!("{prefix}{i}");
        pushed.insert(bench.push("ocr", &resource, &[("provider:{p}", key)]).await);
    }
    pushed
}

/// A rate-limited key (per_second 1, burst 3): one call with ten eligible heads starts exactly
/// three (another key's commands are not held back by it); later starts never exceed
/// burst + rate × elapsed, measured on the Redis times admit.lua records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_key_starts_at_most_its_burst_then_its_rate() {
    let bench = Bench::new().await;
    bench
        .configure(&[("ocr", OPEN)], &[("provider:{p}", "0 1 3")])
        .await;
    let gitee = push_per_resource(&bench, "g", 10, "provider:gitee").await;
    let baidu = push_per_resource(&bench, "b", 2, "provider:baidu").await;
    let first = ids(&bench.admit(20).await);
    assert_eq!(
        first.iter().filter(|id| gitee.contains(id)).count(),
        3,
        "the burst of provider:gitee"
    );
    assert_eq!(
        first.iter().filter(|id| baidu.contains(id)).count(),
        2,
        "provider:baidu has its own bucket"
    );
    assert_eq!(first.len(), 5);
    assert!(
        bench
            .members(&bench.limit_leases("provider:gitee"))
            .await
            .is_empty(),
        "a rate-only key holds no lease"
    );
    let bucket = bench.limit_bucket("provider:gitee");
    let ttl: i64 = bench.redis.pool().next().pttl(&bucket).await.expect("pttl");
    assert!(ttl > 0, "the bucket expires once full again: {ttl}");

    // Keep admitting for a while: a token comes back about every second.
    let mut all = first;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(2_500);
    while tokio::time::Instant::now() < deadline {
        all.extend(ids(&bench.admit(20).await));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut starts = Vec::new();
    for id in all.iter().filter(|id| gitee.contains(id)) {
        let at: i64 = bench
            .field(*id, "updated_at")
            .await
            .expect("updated_at")
            .parse()
            .expect("ms");
        starts.push(at);
    }
    starts.sort();
    assert!(starts.len() > 3, "tokens accrue: {starts:?}");
    let t0 = starts[0];
    for (i, at) in starts.iter().enumerate() {
        let allowed = 3.0 + (at - t0) as f64 / 1000.0;
        assert!(
            (i + 1) as f64 <= allowed + 1e-9,
            "{} starts by {} ms: {starts:?}",
            i + 1,
            at - t0
        );
    }
}
