//! `max_in_flight` is exact under concurrent callers.

use super::*;

/// Eight tasks race `admit.lua` over one queue of 100 with `max_in_flight` 5: exactly five heads
/// come out in total, five permits are held and the counters drop by exactly five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_is_exact_under_concurrency() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "5 1000000 1000000 0")], &[])
        .await;
    let queued = bench.queue_accepted("claim", "r1", 100).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..10 {
                mine.extend(bench.heads(3).await);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    assert_eq!(all.len(), 5, "exactly max_in_flight heads: {all:?}");
    let unique: HashSet<CommandId> = ids(&all).into_iter().collect();
    assert_eq!(unique.len(), 5, "no head handed out twice");
    let expected: HashSet<CommandId> = queued[..5].iter().copied().collect();
    assert_eq!(unique, expected, "the five oldest commands");
    let leases: HashSet<String> = bench.command_leases("claim").await.into_iter().collect();
    assert_eq!(
        leases,
        expected
            .iter()
            .map(CommandId::to_string)
            .collect::<HashSet<_>>()
    );
    assert_eq!(bench.queue("claim", "r1").await.len(), 95);
    assert_eq!(bench.waiting().await, 95);
    assert_eq!(bench.queued("claim").await, 95);
}
