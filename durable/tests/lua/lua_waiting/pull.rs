//! One pull reads the started sequences, the queues' bounds and the gone entries.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pull_reads_started_sequences_queue_bounds_and_gone_entries() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", "100000 1000000 1000000 0")], &[])
        .await;
    let first = bench.enqueue("r1", 5).await;
    let none = bench.pull(&["r1"], 0).await;
    assert!(none.ready);
    assert_eq!(none.generation, Some(1));
    assert_eq!(none.app_seq, 5);
    let q = &none.queues[0];
    assert_eq!(
        q.started_seq, None,
        "nothing started: nothing can be told from memory"
    );
    assert_eq!((q.waiting, q.head_seq, q.tail_seq), (5, Some(1), Some(5)));

    // The queue's first start records the application's sequence (every sequence handed out).
    let started = bench.admit(2).await;
    assert_eq!(started.len(), 2);
    let later = bench.enqueue("r1", 30).await;
    let view = bench.pull(&["r1"], 0).await;
    let q = &view.queues[0];
    assert_eq!(q.started_seq, Some(5));
    assert_eq!((q.waiting, q.head_seq, q.tail_seq), (33, Some(3), Some(35)));
    assert!(
        q.start_record.is_some(),
        "the ETA's start record comes along"
    );

    // Later starts raise it to the highest sequence they started.
    let started = bench.admit(4).await;
    let seqs: Vec<i64> = started.iter().map(|h| h.queue_seq).collect();
    assert_eq!(seqs, vec![3, 4, 5, 6]);
    assert_eq!(bench.pull(&["r1"], 0).await.queues[0].started_seq, Some(6));

    // Ended while waiting: on the gone record with its sequence. Ended after it started: not.
    let (cancelled, cancelled_seq) = later[14];
    assert_eq!(
        bench.land("job", "r1", cancelled, "cancelled").await,
        Some(true)
    );
    assert_eq!(
        bench
            .land("job", "r1", started[0].command_id, "succeeded")
            .await,
        Some(true)
    );
    // Ended before accept.lua queued it (no status hash): on the record, with the application's
    // sequence as its bound.
    let never_queued = CommandId::new_v7();
    bench.land("job", "r1", never_queued, "cancelled").await;
    let view = bench.pull(&["r1"], 0).await;
    let gone: Vec<(CommandId, u64, u64)> = view
        .gone
        .iter()
        .map(|e| (e.command_id, e.seq, e.number))
        .collect();
    assert_eq!(
        gone,
        vec![(cancelled, cancelled_seq as u64, 1), (never_queued, 35, 2)]
    );
    assert_eq!((view.gone_low, view.gone_high), (1, 2));
    assert!(!view.missed_gone(0));
    let after = bench.pull(&["r1"], 2).await;
    assert!(after.gone.is_empty());
    assert!(!after.missed_gone(2));
    assert_eq!(after.queues[0].waiting, 28);
    let _ = first;
}
