//! `intake.lua` deciding several enqueues in one call, and the intake batcher that makes those
//! calls: each entry decided exactly as sequential single calls would, and no reservation lost
//! when its caller goes away.

use std::collections::HashSet;
use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use fred::prelude::*;
use sluice_durable::declaration::IntakeBudget;
use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_durable::lifecycle::intake_batcher::IntakeBatcher;
use sluice_durable::lifecycle::redis::{IntakeRequest, IntakeVerdict, Limit, reserve_batch};
use sluice_testkit::RedisServer;
use uuid::Uuid;

use crate::lua_fixture;

/// The helpers of this file on the shared bench.
enum BatchCalls {}

type Bench = lua_fixture::Bench<BatchCalls>;

/// One entry of a batch, owned by the test.
#[derive(Clone)]
struct Entry {
    namespace: NamespaceId,
    command: &'static str,
    field: String,
    digest: String,
    id: CommandId,
    budget: IntakeBudget,
}

fn budget(per_second: u32, burst: u32) -> IntakeBudget {
    IntakeBudget {
        per_second,
        burst,
        max_in_flight: 1_000_000,
        per_subject: None,
    }
}

impl Entry {
    fn new(namespace: NamespaceId, command: &'static str, budget: IntakeBudget) -> Self {
        Self {
            namespace,
            command,
            field: format!("3:sub{}", Uuid::new_v4()),
            digest: "a".repeat(64),
            id: CommandId::new_v7(),
            budget,
        }
    }

    /// The same request key again, under a fresh command id (another call of the same caller).
    fn again(&self) -> Self {
        Self {
            id: CommandId::new_v7(),
            ..self.clone()
        }
    }
}

impl Bench {
    fn request<'a>(&'a self, e: &'a Entry) -> IntakeRequest<'a> {
        IntakeRequest {
            keys: &self.keys,
            min_generation: 1,
            namespace_id: e.namespace,
            command: e.command,
            subject: "sub",
            request_key_field: &e.field,
            content_sha256_hex: &e.digest,
            command_id: e.id,
            max_unfinished: 1_000_000,
            max_waiting: 1_000_000,
            max_queue: 1_000_000,
            intake: &e.budget,
            reservation_ttl_ms: 60_000,
        }
    }

    async fn batch(&self, entries: &[Entry]) -> Vec<IntakeVerdict> {
        let requests: Vec<_> = entries.iter().map(|e| self.request(e)).collect();
        reserve_batch(&self.redis, &requests)
            .await
            .expect("intake.lua")
    }

    async fn set_meta(&self, field: String, value: &str) {
        let _: () = self
            .redis
            .pool()
            .next()
            .hset(self.keys.meta(), (field, value))
            .await
            .expect("hset meta");
    }

    /// Live reservations of a command, read from Redis itself.
    async fn reservations(&self, command: &str) -> i64 {
        self.redis
            .pool()
            .next()
            .zcard(self.keys.reservations(self.namespace, command))
            .await
            .expect("zcard")
    }
}

fn reserved(verdict: &IntakeVerdict) -> bool {
    matches!(verdict, IntakeVerdict::Reserved { .. })
}

/// Six tasks sending batches of 1 to 16 entries at one bucket (200/s, burst 50) for 1.5 s: the
/// reservations the test counts stay within burst + rate × elapsed, as sequential single calls
/// would, and reach most of it (a script that refused everything, or lost refills, fails); every
/// reservation has its own queue sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_admit_what_the_bucket_allows_and_no_more() {
    let bench = Bench::new().await;
    let limits = budget(200, 50);
    let started = Instant::now();
    let run_for = Duration::from_millis(1_500);
    let mut tasks = Vec::new();
    for task in 0..6usize {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let (mut seqs, mut refused) = (Vec::new(), 0u64);
            let mut size = task % 4 + 1;
            while started.elapsed() < run_for {
                let entries: Vec<Entry> = (0..size)
                    .map(|_| Entry::new(bench.namespace, "claim", limits))
                    .collect();
                for verdict in bench.batch(&entries).await {
                    match verdict {
                        IntakeVerdict::Reserved { queue_seq, .. } => seqs.push(queue_seq),
                        IntakeVerdict::Limited(Limit::RateLimited { retry_after_ms }) => {
                            assert!(
                                (1..=5).contains(&retry_after_ms),
                                "a real wait of one token at 200/s: {retry_after_ms}"
                            );
                            refused += 1;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                size = size % 16 + 1;
            }
            (seqs, refused)
        }));
    }
    let (mut seqs, mut refused) = (Vec::new(), 0);
    for task in tasks {
        let (s, r) = task.await.expect("task");
        seqs.extend(s);
        refused += r;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let granted = seqs.len() as f64;
    let ceiling = 50.0 + 200.0 * elapsed;
    let floor = 50.0 + 200.0 * run_for.as_secs_f64() * 0.8;
    println!("batched intake: {granted} reserved, {refused} refused in {elapsed:.3} s");
    assert!(granted <= ceiling + 1.0, "granted {granted} > {ceiling:.1}");
    assert!(
        granted >= floor,
        "granted {granted} < {floor:.1}: refills were lost"
    );
    assert!(refused > 0, "the callers outran the bucket");
    let distinct: HashSet<i64> = seqs.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        seqs.len(),
        "a queue sequence handed out twice"
    );
    assert_eq!(
        bench.reservations("claim").await,
        i64::try_from(seqs.len()).expect("count"),
        "Redis holds one reservation per reservation counted"
    );
}

/// The same request key twice in one batch: the second entry sees the first's reservation
/// (a pending replay of the first's id), or a conflict when its content differs, exactly as a
/// second call would; only one reservation is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_twice_in_one_batch_is_a_replay_of_the_first() {
    let bench = Bench::new().await;
    let first = Entry::new(bench.namespace, "claim", budget(1_000, 1_000));
    let twin = first.again();
    let mut other_content = first.again();
    other_content.digest = "e".repeat(64);
    let verdicts = bench.batch(&[first.clone(), twin, other_content]).await;
    assert!(reserved(&verdicts[0]), "{verdicts:?}");
    assert_eq!(
        verdicts[1],
        IntakeVerdict::Replay {
            command_id: first.id,
            committed: false
        }
    );
    assert_eq!(
        verdicts[2],
        IntakeVerdict::Conflict {
            command_id: first.id
        }
    );
    assert_eq!(bench.reservations("claim").await, 1);
    assert_eq!(bench.counter("unfinished").await, 1);
}

/// A replay is answered inside a batch while the command is paused, and while its bucket is
/// empty, between new entries that are refused for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_are_answered_inside_a_batch_when_paused_or_full() {
    let bench = Bench::new().await;
    // Burst 2, and a refill far slower than the test.
    let limits = budget(1, 2);
    let known = Entry::new(bench.namespace, "claim", limits);
    assert!(reserved(
        &bench.batch(std::slice::from_ref(&known)).await[0]
    ));

    bench
        .set_meta(format!("paused:{}:claim", bench.namespace), "1")
        .await;
    let fresh = || Entry::new(bench.namespace, "claim", limits);
    let verdicts = bench.batch(&[fresh(), known.again(), fresh()]).await;
    let paused = IntakeVerdict::Limited(Limit::Paused {
        whole_namespace: false,
    });
    let replay = IntakeVerdict::Replay {
        command_id: known.id,
        committed: false,
    };
    assert_eq!(verdicts, vec![paused.clone(), replay.clone(), paused]);

    bench
        .set_meta(format!("paused:{}:claim", bench.namespace), "0")
        .await;
    let verdicts = bench.batch(&[fresh(), fresh(), known.again()]).await;
    assert!(reserved(&verdicts[0]), "the last token: {verdicts:?}");
    assert!(
        matches!(
            verdicts[1],
            IntakeVerdict::Limited(Limit::RateLimited { .. })
        ),
        "the bucket is empty: {verdicts:?}"
    );
    assert_eq!(verdicts[2], replay, "the replay still answered");
    assert_eq!(bench.reservations("claim").await, 2);
}

/// One batch with entries of two commands in two namespaces: each draws on its own command's
/// bucket and counters, the application's counters take them all, and the queue sequence is
/// the application's one sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_commands_in_one_batch_each_use_their_own_bucket() {
    let bench = Bench::new().await;
    let other_namespace = NamespaceId::new_v7();
    let claim = budget(1, 1);
    let refund = budget(1, 2);
    let entries = [
        Entry::new(bench.namespace, "claim", claim),
        Entry::new(other_namespace, "refund", refund),
        Entry::new(bench.namespace, "claim", claim),
        Entry::new(other_namespace, "refund", refund),
        Entry::new(other_namespace, "refund", refund),
    ];
    let verdicts = bench.batch(&entries).await;
    let seqs: Vec<i64> = verdicts
        .iter()
        .filter_map(|v| match v {
            IntakeVerdict::Reserved { queue_seq, .. } => Some(*queue_seq),
            _ => None,
        })
        .collect();
    assert!(reserved(&verdicts[0]) && reserved(&verdicts[1]) && reserved(&verdicts[3]));
    for refused in [&verdicts[2], &verdicts[4]] {
        assert!(
            matches!(refused, IntakeVerdict::Limited(Limit::RateLimited { .. })),
            "{verdicts:?}"
        );
    }
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "one sequence in batch order: {seqs:?}"
    );
    assert_eq!(bench.counter("unfinished").await, 3);
    assert_eq!(
        bench
            .counter(&format!("queued:{}:claim", bench.namespace))
            .await,
        1
    );
    assert_eq!(
        bench
            .counter(&format!("queued:{other_namespace}:refund"))
            .await,
        2
    );
}

/// An entry whose caller read an older generation than the projection's gets it; one whose
/// caller read a newer one is `NOT_READY` alone, the rest of its batch decided as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_generation_refuses_only_its_own_entry() {
    let bench = Bench::new().await;
    let limits = budget(1_000, 1_000);
    let entries = [
        Entry::new(bench.namespace, "claim", limits),
        Entry::new(bench.namespace, "claim", limits),
    ];
    let mut requests: Vec<_> = entries.iter().map(|e| bench.request(e)).collect();
    requests[0].min_generation = 2;
    let verdicts = reserve_batch(&bench.redis, &requests)
        .await
        .expect("intake.lua");
    assert_eq!(verdicts[0], IntakeVerdict::NotReady);
    assert!(reserved(&verdicts[1]), "{verdicts:?}");
}

/// Twenty callers of the batcher from twenty tasks on one thread: they queue while the lane has
/// not run yet, so fewer calls than entries are made; every caller gets its own verdict, and the
/// bucket (burst 8) admits exactly 8 of them.
#[tokio::test(flavor = "current_thread")]
async fn the_batcher_answers_each_caller_and_admits_what_the_bucket_allows() {
    let bench = Bench::new().await;
    let batcher = IntakeBatcher::new(bench.redis.clone(), 128);
    let limits = budget(1, 8);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (bench, batcher) = (bench.clone(), batcher.clone());
        tasks.push(tokio::spawn(async move {
            let entry = Entry::new(bench.namespace, "claim", limits);
            let verdict = batcher
                .reserve(&bench.request(&entry))
                .await
                .expect("intake");
            (entry.id, verdict)
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        let (_, verdict) = task.await.expect("task");
        match verdict {
            IntakeVerdict::Reserved { .. } => admitted += 1,
            IntakeVerdict::Limited(Limit::RateLimited { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let stats = batcher.stats();
    let (calls, entries) = (
        stats.calls.load(std::sync::atomic::Ordering::Relaxed),
        stats.entries.load(std::sync::atomic::Ordering::Relaxed),
    );
    println!("batcher: {entries} entries in {calls} calls");
    assert_eq!(entries, 20);
    assert!(calls < entries, "{calls} calls for {entries} entries");
    // The refill of 1/s may add one token while the test runs.
    assert!((8..=9).contains(&admitted), "admitted {admitted}");
    assert_eq!(bench.reservations("claim").await, admitted);
}

/// Polls `future` once (enough to queue its entry on the lane) and tells whether it finished.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *future).poll(cx).is_ready()))
        .await
}

/// Queues `future`'s entry on its lane while `server` is frozen, so the first poll cannot
/// find its answer already there (on a busy machine the lane's call may otherwise finish
/// before the caller's first poll does, and a caller who read its verdict is not gone).
async fn poll_while_frozen<F: Future + Unpin>(server: &mut RedisServer, future: &mut F) {
    server.freeze();
    let finished = poll_once(future).await;
    assert!(!finished, "no answer while Redis is frozen");
}

/// A caller that goes away after its entry was queued, before (first case) or after (second
/// case) the lane answered: its reservation is given back (`release.lua`), so Redis holds no
/// reservation, no count and no pending key for it, and the same key reserves afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_whose_caller_went_away_is_given_back() {
    use std::sync::atomic::Ordering;
    let mut server = RedisServer::start();
    let bench = Bench::on(&server.url()).await;
    let batcher = IntakeBatcher::new(bench.redis.clone(), 128);
    let limits = budget(1_000, 1_000);
    let ordering = Ordering::Relaxed;

    // Gone before the answer: dropped while the lane's call waits on the frozen Redis, which
    // then answers well within the call's 2 s timeout; the lane finds the reply closed.
    let gone_early = Entry::new(bench.namespace, "claim", limits);
    {
        let request = bench.request(&gone_early);
        let mut future = Box::pin(batcher.reserve(&request));
        poll_while_frozen(&mut server, &mut future).await;
        drop(future);
        server.thaw();
    }
    // Gone after the answer arrived, without reading it: the receiver gives it back.
    let gone_late = Entry::new(bench.namespace, "claim", limits);
    {
        let request = bench.request(&gone_late);
        let mut future = Box::pin(batcher.reserve(&request));
        poll_while_frozen(&mut server, &mut future).await;
        server.thaw();
        let answered = sluice_testkit::eventually(Duration::from_secs(5), || async {
            batcher.stats().entries.load(ordering) == 2
        })
        .await;
        assert!(answered, "the lane decided both entries");
    }
    // The give-back's count follows its Redis call: wait for both, not the first alone.
    let released = sluice_testkit::eventually(Duration::from_secs(10), || async {
        bench.reservations("claim").await == 0
            && batcher.stats().orphans_released.load(ordering) == 2
    })
    .await;
    assert!(
        released,
        "both reservations were given back: {} left, {} give-backs, {} failed tries (last: {:?})",
        bench.reservations("claim").await,
        batcher.stats().orphans_released.load(ordering),
        batcher.stats().orphan_release_errors.load(ordering),
        batcher.stats().last_orphan_error(),
    );
    assert_eq!(bench.counter("unfinished").await, 0);
    assert_eq!(
        bench
            .counter(&format!("queued:{}:claim", bench.namespace))
            .await,
        0
    );
    for entry in [&gone_early, &gone_late] {
        let again = entry.again();
        let verdict = batcher
            .reserve(&bench.request(&again))
            .await
            .expect("intake");
        assert!(reserved(&verdict), "the key is free again: {verdict:?}");
    }
}

/// A give-back that finds Redis stalled (its calls time out, three times) is tried again until
/// Redis answers: the slot of a caller who is gone is freed once Redis is back, not held until
/// the reservation expires (60 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_fails_is_tried_again_once_redis_answers() {
    use std::sync::atomic::Ordering;
    let mut server = RedisServer::start();
    let bench = Bench::on(&server.url()).await;
    let batcher = IntakeBatcher::new(bench.redis.clone(), 128);
    let ordering = Ordering::Relaxed;
    let gone = Entry::new(bench.namespace, "claim", budget(1_000, 1_000));
    let request = bench.request(&gone);
    let mut future = Box::pin(batcher.reserve(&request));
    poll_while_frozen(&mut server, &mut future).await;
    server.thaw();
    let answered = sluice_testkit::eventually(Duration::from_secs(5), || async {
        batcher.stats().entries.load(ordering) == 1
    })
    .await;
    assert!(answered, "the lane decided the entry");
    assert_eq!(bench.reservations("claim").await, 1);

    // Stalled for three tries (each times out after 2 s): more than a short retry covers.
    server.freeze();
    drop(future);
    let failed = sluice_testkit::eventually(Duration::from_secs(20), || async {
        batcher.stats().orphan_release_errors.load(ordering) >= 3
    })
    .await;
    assert_eq!(batcher.stats().orphans_released.load(ordering), 0);
    server.thaw();
    assert!(
        failed,
        "three give-back tries failed while Redis was stalled: {} failed",
        batcher.stats().orphan_release_errors.load(ordering),
    );

    let released = sluice_testkit::eventually(Duration::from_secs(15), || async {
        batcher.stats().orphans_released.load(ordering) == 1
            && bench.reservations("claim").await == 0
    })
    .await;
    assert!(
        released,
        "given back once Redis answered: {} left, {} give-backs, {} failed tries (last: {:?})",
        bench.reservations("claim").await,
        batcher.stats().orphans_released.load(ordering),
        batcher.stats().orphan_release_errors.load(ordering),
        batcher.stats().last_orphan_error(),
    );
    assert_eq!(bench.counter("unfinished").await, 0);
}

/// Redis gone: every caller waiting on the batcher gets the Redis error a single call gives
/// (what the gateway answers `503` for), none waits forever; once Redis is back the same lane
/// decides again (a restarted, empty Redis: `NOT_READY`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_error_fails_every_entry_with_the_redis_error() {
    use sluice_durable::DurableError;
    let mut server = RedisServer::start();
    let bench = Bench::on(&server.url()).await;
    let batcher = IntakeBatcher::new(bench.redis.clone(), 128);
    let limits = budget(1_000, 1_000);
    let entry = Entry::new(bench.namespace, "claim", limits);
    assert!(reserved(
        &batcher
            .reserve(&bench.request(&entry))
            .await
            .expect("intake")
    ));

    server.kill();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (bench, batcher) = (bench.clone(), batcher.clone());
        tasks.push(tokio::spawn(async move {
            let entry = Entry::new(bench.namespace, "claim", limits);
            tokio::time::timeout(
                Duration::from_secs(10),
                batcher.reserve(&bench.request(&entry)),
            )
            .await
        }));
    }
    for task in tasks {
        let answered = task.await.expect("task").expect("answered within 10 s");
        assert!(
            matches!(answered, Err(DurableError::Redis(_))),
            "the Redis error, as a single call: {answered:?}"
        );
    }

    server.restart();
    let back = sluice_testkit::eventually(Duration::from_secs(10), || async {
        let entry = Entry::new(bench.namespace, "claim", limits);
        matches!(
            batcher.reserve(&bench.request(&entry)).await,
            Ok(IntakeVerdict::NotReady)
        )
    })
    .await;
    assert!(back, "the lane decides again once Redis is back");
}
