//! The start bucket limits starts, and expired leases give their permit back.

use super::*;

/// per_second 1, burst 3: the first call starts three, the next ones nothing until a token has
/// accrued; over the run never more than burst + rate × elapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_bucket_limits_starts() {
    let bench = Bench::new().await;
    bench.configure(&[("claim", "1000 1 3 0")], &[]).await;
    bench.queue_accepted("claim", "ra", 10).await;
    bench.queue_accepted("claim", "rb", 10).await;
    let started = Instant::now();
    let first = bench.heads(20).await;
    assert_eq!(first.len(), 3, "the burst");
    let second = bench.heads(20).await;
    assert!(second.is_empty(), "no token left: {second:?}");
    let bucket = bench.hash(&bench.command_bucket("claim")).await;
    assert!(
        bucket.contains_key("tokens"),
        "bucket persisted: {bucket:?}"
    );
    let refilled = eventually(Duration::from_secs(3), || {
        let bench = bench.clone();
        async move { !bench.heads(20).await.is_empty() }
    })
    .await;
    let refilled_after = started.elapsed();
    assert!(refilled, "a token accrues within three seconds");
    assert!(
        refilled_after >= Duration::from_millis(900),
        "at 1/s a token came back after only {refilled_after:?}"
    );
    // Every head holds a permit (60 s leases): the permits count the starts.
    let total = bench.command_leases("claim").await.len();
    let elapsed = started.elapsed().as_secs_f64();
    assert!(total > first.len());
    assert!(
        (total as f64) <= 3.0 + elapsed + 1.0,
        "{total} starts in {elapsed:.2} s"
    );
    assert_eq!(bench.waiting().await, 20 - total as i64);
}

/// A permit leased for 1 ms lapses: once it has expired it no longer counts and the next call
/// admits again; the lapsed member is left for the executors' sweeper to reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_give_their_permit_back() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1 1000000 1000000 1")], &[])
        .await;
    let queued = bench.queue_accepted("claim", "r", 3).await;
    let first = bench.heads_with_lease(5, 1).await;
    assert_eq!(ids(&first), vec![queued[0]]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = Arc::new(std::sync::Mutex::new(Vec::new()));
    let lapsed = eventually(Duration::from_secs(2), || {
        let bench = bench.clone();
        let second = second.clone();
        async move {
            let heads = bench.heads(5).await;
            let got = !heads.is_empty();
            second.lock().expect("lock").extend(heads);
            got
        }
    })
    .await;
    assert!(lapsed, "the expired permit comes back");
    assert_eq!(ids(&second.lock().expect("lock")), vec![queued[1]]);
    let mut leases = bench.command_leases("claim").await;
    leases.sort();
    let mut expected = vec![queued[0].to_string(), queued[1].to_string()];
    expected.sort();
    assert_eq!(
        leases, expected,
        "the lapsed member stays (uncounted) for the sweeper to reconcile; the new one is held"
    );
    assert!(
        bench.heads(5).await.is_empty(),
        "a 60 s lease does not lapse"
    );
}
