//! What gateways answering waiting polls from memory rely on, in a real Redis: `admit.lua`
//! keeps the highest sequence started per queue (never below any sequence that started from it,
//! also across the queue emptying and a requeue), `land.lua` and `admit.lua` put every command
//! that leaves a queue without starting on the gone record with gap-free numbers, the record
//! keeps its newest entries only, and `waiting.lua` reads all of it at one instant, including
//! each queue's first sequences as runs that cover a prefix of its ranks exactly. Witnesses:
//! the sequences the admissions answered and the commands the test ended, counted by the test,
//! and the queue's scores read by the test itself (`ZRANGE ... WITHSCORES`) or, under
//! concurrent writers, the log of what each writer had done before and after each pull.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use fred::prelude::*;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    Admission, AdmitLimits, AdmittedHead, Requeue, Requeued, requeue,
};
use sluice_redis::waiting::{QueueView, RunLimits, WaitingSnapshot, pull};

use crate::lua_fixture;

enum Waiting {}

type Bench = lua_fixture::Bench<Waiting>;

/// Kept in step with `GONE_KEEP` in lua/lib/epoch.lua.
const GONE_KEEP: u64 = 4096;

/// What a gateway asks for (`RUNS_ENTRIES`, `RUNS_READS` in gateway/src/polls/waiting_view.rs).
const GATEWAY_RUNS: RunLimits = RunLimits {
    entries: 16_384,
    reads: 2_048,
};

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
        self.pull_runs(resources, cursor, GATEWAY_RUNS).await
    }

    async fn pull_runs(&self, resources: &[&str], cursor: u64, runs: RunLimits) -> WaitingSnapshot {
        let suffixes: Vec<String> = resources.iter().map(|r| self.suffix("job", r)).collect();
        pull(&self.redis, &self.keys, &suffixes, cursor, 1024, runs)
            .await
            .expect("waiting.lua")
    }

    /// `resource`'s queue holding exactly the sequences `seqs` (members made up: the pull
    /// reads scores only).
    async fn fill(&self, resource: &str, seqs: &[u64]) {
        let queue = self.keys.queue_by_suffix(&self.suffix("job", resource));
        let client = self.redis.pool().next();
        let _: i64 = client.del(&queue).await.expect("del");
        for chunk in seqs.chunks(1000) {
            let entries: Vec<(f64, String)> =
                chunk.iter().map(|s| (*s as f64, format!("m{s}"))).collect();
            let _: i64 = client
                .zadd(&queue, None, None, false, false, entries)
                .await
                .expect("zadd");
        }
    }

    /// The queue's scores in rank order, read by the test (the witness).
    async fn scores(&self, resource: &str) -> Vec<u64> {
        let queue = self.keys.queue_by_suffix(&self.suffix("job", resource));
        let entries: Vec<(String, f64)> = self
            .redis
            .pool()
            .next()
            .zrange(&queue, 0, -1, None, false, None, true)
            .await
            .expect("zrange");
        entries.into_iter().map(|(_, s)| s as u64).collect()
    }
}

/// The sequences the runs cover, in order, after checking that they ascend and are apart.
fn expand(view: &QueueView) -> Vec<u64> {
    let mut seqs = Vec::new();
    for &(start, length) in &view.runs {
        assert!(length > 0, "an empty run in {:?}", view.runs);
        if let Some(last) = seqs.last() {
            assert!(start > last + 1, "runs not apart: {:?}", view.runs);
        }
        seqs.extend(start..start + length);
    }
    seqs
}

/// The runs are the queue's first scores, exactly (`scores` read by the test), covering no more
/// than `cap` and all of them when `whole`; `more` says whether any are left.
fn check_prefix(view: &QueueView, scores: &[u64], cap: u64, whole: bool) -> usize {
    let covered = expand(view);
    assert!(
        covered.len() as u64 <= cap,
        "{} entries past the cap {cap}",
        covered.len()
    );
    assert_eq!(
        covered,
        scores[..covered.len()],
        "the runs are the queue's first sequences"
    );
    assert_eq!(view.more, covered.len() < scores.len(), "more");
    assert_eq!(view.waiting, scores.len() as u64);
    if whole {
        assert_eq!(
            covered.len(),
            scores.len().min(cap as usize),
            "all within the cap"
        );
    }
    covered.len()
}

/// A small deterministic generator (xorshift64*), so a failing shape can be replayed.
struct Shapes(u64);

impl Shapes {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }

    /// A queue's sequences: stretches taken alone, stretches shared with other queues
    /// (every `k`-th sequence), and holes (cancelled blocks), over about `n` sequences.
    fn queue(&mut self, n: u64) -> Vec<u64> {
        let mut seqs = Vec::new();
        let mut next = 1 + self.below(50);
        while next < n {
            let length = 1 + self.below(120);
            match self.below(4) {
                0 => seqs.extend(next..next + length),
                1 => {
                    let every = 2 + self.below(3);
                    seqs.extend((0..length).map(|i| next + i * every));
                    next += length * every;
                }
                2 => next += length, // a hole
                _ => seqs.extend((0..length).filter(|_| self.below(3) > 0).map(|i| next + i)),
            }
            next += length;
        }
        seqs.sort_unstable();
        seqs.dedup();
        seqs
    }
}

/// A queue's runs: one pair for contiguous sequences however deep, every entry for sequences
/// two queues took in turn, and, for random shapes of stretches, interleaving and holes, always
/// the queue's first scores exactly, within the cap and the reads allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_are_an_exact_prefix_of_the_queues_sequences() {
    let bench = Bench::new().await;
    bench.fill("r1", &(1000..6000).collect::<Vec<u64>>()).await;
    let view = bench.pull(&["r1"], 0).await;
    assert_eq!(view.queues[0].runs, vec![(1000, 5000)]);
    assert!(!view.queues[0].more);
    let capped = RunLimits {
        entries: 1200,
        reads: 2048,
    };
    let view = bench.pull_runs(&["r1"], 0, capped).await;
    assert_eq!(view.queues[0].runs, vec![(1000, 1200)]);
    assert!(view.queues[0].more, "entries beyond the cap");
    // The least a gateway gives a queue (RUNS_READS_MIN) still finds a contiguous one whole.
    let least = RunLimits {
        entries: 16_384,
        reads: 64,
    };
    let view = bench.pull_runs(&["r1"], 0, least).await;
    assert_eq!(view.queues[0].runs, vec![(1000, 5000)]);

    // Two queues taking turns: runs of one. The reads allowed bound how many are covered.
    let odd: Vec<u64> = (0..3000).map(|i| 2 * i + 1).collect();
    bench.fill("r2", &odd).await;
    let view = bench.pull(&["r1", "r2"], 0).await;
    assert_eq!(view.queues[0].runs, vec![(1000, 5000)]);
    let covered = check_prefix(&view.queues[1], &odd, GATEWAY_RUNS.entries, false);
    assert!(
        (1000..3000).contains(&covered),
        "{covered} entries of runs of one within 2,048 reads"
    );
    let ample = RunLimits {
        entries: 100_000,
        reads: 100_000,
    };
    let view = bench.pull_runs(&["r2"], 0, ample).await;
    check_prefix(&view.queues[0], &odd, ample.entries, true);

    let mut shapes = Shapes(0x5eed_0f0a_1e55);
    for round in 0..40 {
        let span = 200 + shapes.below(6000);
        let seqs = shapes.queue(span);
        bench.fill("r3", &seqs).await;
        let scores = bench.scores("r3").await;
        assert_eq!(scores, seqs);
        let limits = RunLimits {
            entries: 1 + shapes.below(seqs.len() as u64 + 200),
            reads: [10, 60, 300, 2048, 1_000_000][round % 5],
        };
        let view = bench.pull_runs(&["r3"], 0, limits).await;
        let covered = check_prefix(
            &view.queues[0],
            &scores,
            limits.entries,
            limits.reads > 100_000,
        );
        if limits.reads >= 60 {
            assert!(covered > 0, "round {round}: {limits:?} covered nothing");
        }
    }
    // An empty queue, and a cap of nothing.
    bench.fill("r4", &[]).await;
    let view = bench
        .pull_runs(
            &["r4", "r1"],
            0,
            RunLimits {
                entries: 0,
                reads: 2048,
            },
        )
        .await;
    assert_eq!((view.queues[0].runs.len(), view.queues[0].more), (0, false));
    assert_eq!((view.queues[1].runs.len(), view.queues[1].more), (0, true));
}

/// What a writer did to a sequence, on the test's clock (ticks taken before and after each
/// call): when it was added to its queue, and when the first call that removes it began and
/// the first one ended.
#[derive(Clone, Copy)]
struct Life {
    queue: usize,
    added: (u64, u64),
    removed: Option<(u64, u64)>,
}

/// Writers from several tasks (two queues taking intake at once, so their sequences
/// interleave, cancellations, admissions) while other tasks pull: every pull's runs are the
/// first sequences of its queues at one instant. Witness: the writers' log on the test's clock.
/// A sequence added before a pull began and not touched by a removal until it ended is in the
/// runs if a later sequence is; one removed before the pull began, or added after it ended, is
/// not; and with nothing more, the runs hold as many as the queue's count, from its head to its
/// tail as the same call read them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_never_show_a_pull_a_queue_other_than_at_one_instant() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", "100000 1000000 1000000 0")], &[])
        .await;
    let clock = std::sync::Arc::new(AtomicU64::new(0));
    let lives: std::sync::Arc<Mutex<HashMap<u64, Life>>> = Default::default();
    let ids: std::sync::Arc<Mutex<Vec<(CommandId, i64, usize)>>> = Default::default();
    let resources = ["r1", "r2"];
    // One start on record for each queue, so admissions find work from the start.
    for resource in resources {
        bench.enqueue(resource, 1).await;
    }
    let mut writers = Vec::new();
    for (queue, resource) in resources.into_iter().enumerate() {
        let (bench, clock, lives, ids) = (bench.clone(), clock.clone(), lives.clone(), ids.clone());
        writers.push(tokio::spawn(async move {
            for _ in 0..500 {
                let start = clock.fetch_add(1, Ordering::SeqCst);
                let (id, seq) = bench.enqueue(resource, 1).await[0];
                let end = clock.fetch_add(1, Ordering::SeqCst);
                let life = Life {
                    queue,
                    added: (start, end),
                    removed: None,
                };
                lives.lock().expect("lives").insert(seq as u64, life);
                ids.lock().expect("ids").push((id, seq, queue));
            }
        }));
    }
    // Removals are logged apart from the additions: an admission may start a sequence before
    // the writer that added it has logged its life, and that removal must not be lost.
    let removals: std::sync::Arc<Mutex<HashMap<u64, (u64, u64)>>> = Default::default();
    let removing =
        |seqs: Vec<u64>, span: (u64, u64), removals: &Mutex<HashMap<u64, (u64, u64)>>| {
            let mut removals = removals.lock().expect("removals");
            for seq in seqs {
                // Several calls may remove it (a cancellation after its start): the first to begin
                // and the first to end bound when it left, whichever removed it.
                let (began, done) = removals.get(&seq).copied().unwrap_or(span);
                removals.insert(seq, (began.min(span.0), done.min(span.1)));
            }
        };
    {
        let (bench, clock, removals, ids) =
            (bench.clone(), clock.clone(), removals.clone(), ids.clone());
        writers.push(tokio::spawn(async move {
            let mut shapes = Shapes(7);
            for _ in 0..200 {
                let picked = {
                    let ids = ids.lock().expect("ids");
                    (!ids.is_empty()).then(|| ids[shapes.below(ids.len() as u64) as usize])
                };
                let Some((id, seq, queue)) = picked else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let start = clock.fetch_add(1, Ordering::SeqCst);
                bench.land("job", resources[queue], id, "cancelled").await;
                let end = clock.fetch_add(1, Ordering::SeqCst);
                removing(vec![seq as u64], (start, end), &removals);
            }
        }));
    }
    {
        let (bench, clock, removals) = (bench.clone(), clock.clone(), removals.clone());
        writers.push(tokio::spawn(async move {
            for _ in 0..60 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                let start = clock.fetch_add(1, Ordering::SeqCst);
                let heads = bench.admit(2).await;
                let end = clock.fetch_add(1, Ordering::SeqCst);
                let seqs = heads.iter().map(|h| h.queue_seq as u64).collect();
                removing(seqs, (start, end), &removals);
            }
        }));
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for reader in 0..2u64 {
        let (bench, clock, done) = (bench.clone(), clock.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let limits = RunLimits {
                entries: [1_000_000, 300][reader as usize],
                reads: [1_000_000, 2048][reader as usize],
            };
            let mut pulls = Vec::new();
            while pulls.len() < 50 || !done.load(Ordering::SeqCst) {
                let start = clock.fetch_add(1, Ordering::SeqCst);
                let view = bench.pull_runs(&resources, 0, limits).await;
                let end = clock.fetch_add(1, Ordering::SeqCst);
                pulls.push((start, end, view));
                tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            }
            pulls
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
    done.store(true, Ordering::SeqCst);
    let removals = removals.lock().expect("removals").clone();
    let mut lives = lives.lock().expect("lives").clone();
    for (seq, life) in lives.iter_mut() {
        life.removed = removals.get(seq).copied();
    }
    let (mut checked, mut covered_total) = (0usize, 0usize);
    for reader in readers {
        for (start, end, view) in reader.await.expect("reader") {
            for (queue, q) in view.queues.iter().enumerate() {
                let covered = expand(q);
                let last = covered.last().copied().unwrap_or(0);
                let shown: HashSet<u64> = covered.iter().copied().collect();
                if !q.more {
                    assert_eq!(
                        covered.len() as u64,
                        q.waiting,
                        "the runs hold the whole queue"
                    );
                    assert_eq!(q.head_seq, covered.first().copied());
                    assert_eq!(q.tail_seq, covered.last().copied());
                }
                for (seq, life) in &lives {
                    if shown.contains(seq) {
                        assert_eq!(life.queue, queue, "{seq} shown in the other queue");
                        assert!(life.added.0 < end, "{seq} shown before it was added");
                        assert!(
                            life.removed.is_none_or(|(_, done)| done > start),
                            "{seq} shown after its removal"
                        );
                    } else if life.queue == queue
                        && *seq < last
                        && life.added.1 < start
                        && life.removed.is_none_or(|(began, _)| began > end)
                    {
                        panic!(
                            "{seq} waited in queue {queue} throughout the pull ({start}..{end}), \
                             missing: added {:?}, removed {:?}, runs {:?}, more {}",
                            life.added, life.removed, q.runs, q.more
                        );
                    }
                }
                checked += 1;
                covered_total += covered.len();
            }
        }
    }
    eprintln!("{checked} queue reads checked, {covered_total} sequences in their runs");
    assert!(covered_total > 10_000, "the pulls saw the queues filled");
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
