//! The gone record is gap-free, bounded, and reports its trimming.

use super::*;

/// Many commands end while waiting, from several tasks at once: the gone record numbers them
/// without gaps or repeats, keeps the newest GONE_KEEP, and a reader whose cursor fell below
/// what was trimmed is told it missed entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gone_record_is_gap_free_bounded_and_reports_trimming() {
    let bench = Bench::new().await;
    let per_task = 1030usize;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let mut ended = Vec::with_capacity(per_task);
            for _ in 0..per_task {
                let id = CommandId::new_v7();
                bench.land("job", "r1", id, "cancelled").await;
                ended.push(id);
            }
            ended
        }));
    }
    let mut ended = HashSet::new();
    for task in tasks {
        ended.extend(task.await.expect("task"));
    }
    let total = (4 * per_task) as u64;
    let first = bench.pull(&[], 0).await;
    assert_eq!(first.gone_high, total, "one number per end");
    assert_eq!(first.gone_low, total - GONE_KEEP + 1, "the newest kept");
    assert!(first.missed_gone(0), "entries 1.. were trimmed");
    // One entry short of the kept ones: the entry after the cursor is gone.
    let edge = bench.pull(&[], total - GONE_KEEP - 1).await;
    assert!(edge.missed_gone(total - GONE_KEEP - 1));
    // The last 1024: all there, all read.
    let last = bench.pull(&[], total - 1024).await;
    assert_eq!(last.gone.len(), 1024);
    assert!(!last.missed_gone(total - 1024));
    // Read the kept entries in pulls of 1024: every number once, every id one the test ended.
    let mut cursor = total - GONE_KEEP;
    let mut numbers = Vec::new();
    loop {
        let view = bench.pull(&[], cursor).await;
        if view.gone.is_empty() {
            break;
        }
        for entry in &view.gone {
            assert!(ended.contains(&entry.command_id));
            numbers.push(entry.number);
        }
        cursor = view.gone.last().map_or(cursor, |e| e.number);
    }
    let expected: Vec<u64> = (total - GONE_KEEP + 1..=total).collect();
    assert_eq!(numbers, expected);
    // A reader that took a pull with more after it than one pull returns missed entries too.
    let partial = bench.pull(&[], total - GONE_KEEP).await;
    assert_eq!(partial.gone.len(), 1024);
    assert!(partial.missed_gone(total - GONE_KEEP));
}
