//! The highest sequence started per queue: a requeue after the queue emptied stays at or below it, and concurrent admissions never leave a started command above it.

use super::*;

/// A queue that empties forgets its started sequence; a command requeued afterwards at its old
/// sequence is never above the value the queue's next start records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_after_the_queue_emptied_stays_at_or_below_the_started_sequence() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", "100000 1000000 1000000 0")], &[])
        .await;
    bench.enqueue("r1", 3).await;
    let started = bench.admit(10).await;
    assert_eq!(started.len(), 3);
    // The next admission finds the queue empty and drops its records.
    assert!(bench.admit(10).await.is_empty());
    let view = bench.pull(&["r1"], 0).await;
    assert_eq!(view.queues[0].started_seq, None);
    assert_eq!(view.queues[0].waiting, 0);

    let head = &started[1];
    let back = requeue(
        &bench.redis,
        &bench.keys,
        &Requeued {
            command_id: head.command_id,
            attempt: Some(head.attempt),
            namespace_id: bench.namespace,
            command: "job",
            resource_key: "r1",
            queue_seq: head.queue_seq,
            status: sluice_model::CommandStatus::RetryWait,
            updated_at: "2026-12-01T00:00:00.000Z".into(),
        },
    )
    .await
    .expect("requeue.lua");
    assert_eq!(back, Requeue::Done);
    let newer = bench.enqueue("r1", 40).await;
    // Back in line at sequence 2, unknown to memory until the queue starts again.
    let view = bench.pull(&["r1"], 0).await;
    assert_eq!(view.queues[0].started_seq, None);
    assert_eq!(view.queues[0].head_seq, Some(2));
    let again = bench.admit(1).await;
    assert_eq!(again[0].command_id, head.command_id, "its old place");
    let view = bench.pull(&["r1"], 0).await;
    let high = view.queues[0].started_seq.expect("a start on record");
    assert_eq!(
        high, newer[39].1 as u64,
        "the application's sequence at the first start"
    );
}

/// Concurrent admissions from several tasks: the started sequence is never below a sequence an
/// admission answered (while the queue has waiting work), and every waiting command above it is
/// one no admission started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_admissions_never_leave_a_started_command_above_the_record() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", "100000 1000000 1000000 0")], &[])
        .await;
    bench.enqueue("r1", 10).await;
    assert_eq!(bench.admit(1).await.len(), 1);
    let queued = bench.enqueue("r1", 400).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            let mut highs = Vec::new();
            for _ in 0..15 {
                seqs.extend(bench.admit(3).await.iter().map(|h| h.queue_seq));
                highs.push(bench.pull(&["r1"], 0).await.queues[0].started_seq);
            }
            (seqs, highs)
        }));
    }
    let mut started: HashSet<i64> = HashSet::new();
    for task in tasks {
        let (seqs, highs) = task.await.expect("task");
        for seq in seqs {
            assert!(started.insert(seq), "sequence {seq} started twice");
        }
        assert!(highs.iter().all(Option::is_some), "the queue never emptied");
    }
    let view = bench.pull(&["r1"], 0).await;
    let high = view.queues[0].started_seq.expect("on record") as i64;
    let max_started = started.iter().copied().max().expect("starts");
    assert!(high >= max_started, "{high} below a started {max_started}");
    let waiting: HashMap<String, f64> = bench
        .zscores(&bench.keys.queue_by_suffix(&bench.suffix("job", "r1")))
        .await;
    for (id, seq) in &queued {
        let waits = waiting.contains_key(&id.to_string());
        if *seq > high {
            assert!(
                waits && !started.contains(seq),
                "{seq} above {high} must be waiting"
            );
        }
    }
    assert_eq!(started.len(), 4 * 15 * 3);
}
