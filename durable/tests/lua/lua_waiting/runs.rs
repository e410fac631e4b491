//! The runs `waiting.lua` reads are an exact prefix of each queue's sequences, and concurrent writers never show a pull a queue other than at one instant.

use super::*;

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
