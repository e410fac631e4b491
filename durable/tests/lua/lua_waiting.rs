//! What gateways answering waiting polls from memory rely on, in a real Redis: `admit.lua`
//! keeps the highest sequence started per queue (never below any sequence that started from it,
//! also across the queue emptying and a requeue), `land.lua` and `admit.lua` put every command
//! that leaves a queue without starting on the gone record with gap-free numbers, the record
//! keeps its newest entries only, and `waiting.lua` reads all of it at one instant. Witnesses:
//! the sequences the admissions answered and the commands the test ended, counted by the test.

use std::collections::{HashMap, HashSet};

use fred::prelude::*;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    Admission, AdmitLimits, AdmittedHead, Requeue, Requeued, requeue,
};
use sluice_durable::projection::waiting::{WaitingSnapshot, pull};

use crate::lua_fixture;

enum Waiting {}

type Bench = lua_fixture::Bench<Waiting>;

/// Kept in step with `GONE_KEEP` in lua/lib/epoch.lua.
const GONE_KEEP: u64 = 4096;

fn limits(max_heads: u32) -> AdmitLimits {
    lua_fixture::admit_limits(max_heads)
}

impl Bench {
    /// Queues `n` accepted `job`s on `resource` as intake and accept.lua leave them: the
    /// application's sequence (`{a:ID}:seq`) is the last one handed out.
    async fn enqueue(&self, resource: &str, n: usize) -> Vec<(CommandId, i64)> {
        let mut queued = Vec::with_capacity(n);
        for _ in 0..n {
            let seq = self.next_seq();
            let _: () = self
                .redis
                .pool()
                .next()
                .set(self.keys.seq(), seq, None, None, false)
                .await
                .expect("set seq");
            let id = self
                .queue_command(
                    "job",
                    resource,
                    seq,
                    vec![
                        ("status".into(), "accepted".into()),
                        ("ns".into(), self.namespace.to_string()),
                        ("cmd".into(), "job".into()),
                    ],
                    vec![
                        "unfinished".into(),
                        format!("waiting:{}", self.namespace),
                        format!("queued:{}:job", self.namespace),
                    ],
                )
                .await;
            queued.push((id, seq));
        }
        queued
    }

    async fn admit(&self, max_heads: u32) -> Vec<AdmittedHead> {
        match self.admission(limits(max_heads)).await {
            Admission::Heads { heads, .. } => heads,
            Admission::NotReady => panic!("the projection is ready"),
        }
    }

    async fn pull(&self, resources: &[&str], cursor: u64) -> WaitingSnapshot {
        let suffixes: Vec<String> = resources.iter().map(|r| self.suffix("job", r)).collect();
        pull(&self.redis, &self.keys, &suffixes, cursor, 1024)
            .await
            .expect("waiting.lua")
    }
}

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
            status: sluice_durable::lifecycle::CommandStatus::RetryWait,
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
