//! The Lua scripts alone against a real Redis, with concurrent callers from several tasks.

use std::time::{Duration, Instant};

use fred::prelude::*;
use sluice_durable::declaration::{IntakeBudget, SubjectRate};
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    Acceptance, Accepted, IntakeRequest, IntakeVerdict, Limit, Release, accept, release,
    reserve as intake,
};
use uuid::Uuid;

use crate::lua_fixture;

/// The helpers of this file on the shared bench: the intake calls of these tests.
enum IntakeCalls {}

type Bench = lua_fixture::Bench<IntakeCalls>;

#[derive(Clone, Copy)]
struct Limits {
    per_second: u32,
    burst: u32,
    max_in_flight: u32,
    max_queue: u64,
    max_unfinished: i64,
    reservation_ttl_ms: u64,
    per_subject: Option<SubjectRate>,
    subject: &'static str,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            per_second: 1_000_000,
            burst: 1_000_000,
            max_in_flight: 1_000_000,
            max_queue: 1_000_000,
            max_unfinished: 1_000_000,
            reservation_ttl_ms: 60_000,
            per_subject: None,
            subject: "sub",
        }
    }
}

impl Bench {
    async fn call(&self, limits: Limits, field: &str, digest: &str) -> (Uuid, IntakeVerdict) {
        let id = Uuid::now_v7();
        let budget = IntakeBudget {
            per_second: limits.per_second,
            burst: limits.burst,
            max_in_flight: limits.max_in_flight,
            per_subject: limits.per_subject,
        };
        let request = IntakeRequest {
            keys: &self.keys,
            min_generation: 1,
            namespace_id: self.namespace,
            command: "claim",
            subject: limits.subject,
            request_key_field: field,
            content_sha256_hex: digest,
            command_id: CommandId::from_uuid(id),
            max_unfinished: limits.max_unfinished,
            max_waiting: 1_000_000,
            max_queue: limits.max_queue,
            intake: &budget,
            reservation_ttl_ms: limits.reservation_ttl_ms,
        };
        (id, intake(&self.redis, &request).await.expect("intake.lua"))
    }

    async fn fresh(&self, limits: Limits) -> (Uuid, IntakeVerdict) {
        let field = format!("3:sub{}", Uuid::new_v4());
        self.call(limits, &field, &"a".repeat(64)).await
    }
}

/// A bucket never grants more than burst + rate × elapsed, however many callers race for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_never_grants_more_than_burst_plus_rate_times_elapsed() {
    let bench = Bench::new().await;
    let limits = Limits {
        per_second: 200,
        burst: 50,
        ..Limits::default()
    };
    let started = Instant::now();
    let run_for = Duration::from_millis(1_500);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let (mut granted, mut refused) = (0u64, 0u64);
            while started.elapsed() < run_for {
                match bench.fresh(limits).await.1 {
                    IntakeVerdict::Reserved { .. } => granted += 1,
                    IntakeVerdict::Limited(Limit::RateLimited { retry_after_ms }) => {
                        assert!(
                            (1..=5).contains(&retry_after_ms),
                            "real wait of one token at 200/s: {retry_after_ms}"
                        );
                        refused += 1;
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            (granted, refused)
        }));
    }
    let (mut granted, mut refused) = (0, 0);
    for task in tasks {
        let (g, r) = task.await.expect("task");
        granted += g;
        refused += r;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ceiling = 50.0 + 200.0 * elapsed;
    assert!(
        (granted as f64) <= ceiling + 1.0,
        "granted {granted} > ceiling {ceiling:.1}"
    );
    assert!(
        granted >= 50,
        "the burst is available at once: granted {granted}"
    );
    assert!(refused > 0, "the callers outran the bucket");
}

/// A subject's own bucket: 8 tasks of one subject racing a burst of 3 at 2/s get 3 (plus what
/// refilled), while another subject, asking in the same instant, still gets its own 3; and the
/// subject's refusals debit nothing from the command's shared bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_cannot_take_more_than_its_own_bucket() {
    let bench = Bench::new().await;
    let greedy = Limits {
        per_second: 1,
        burst: 30,
        per_subject: Some(SubjectRate {
            per_second: 2,
            burst: 3,
        }),
        subject: "greedy",
        ..Limits::default()
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let mut granted = 0u64;
            for _ in 0..25 {
                match bench.fresh(greedy).await.1 {
                    IntakeVerdict::Reserved { .. } => granted += 1,
                    IntakeVerdict::Limited(Limit::RateLimited { retry_after_ms }) => assert!(
                        (1..=500).contains(&retry_after_ms),
                        "the subject's own wait at 2/s: {retry_after_ms}"
                    ),
                    other => panic!("unexpected {other:?}"),
                }
            }
            granted
        }));
    }
    let mut granted = 0;
    for task in tasks {
        granted += task.await.expect("task");
    }
    let ceiling = 3.0 + 2.0 * started.elapsed().as_secs_f64();
    assert!(granted >= 3, "the subject's burst: {granted}");
    assert!(
        (granted as f64) <= ceiling + 1.0,
        "one subject got {granted} > {ceiling:.1}"
    );
    let other = Limits {
        subject: "patient",
        ..greedy
    };
    for n in 0..3 {
        assert!(
            matches!(bench.fresh(other).await.1, IntakeVerdict::Reserved { .. }),
            "another subject's own burst, call {n}"
        );
    }
    // The shared bucket (burst 30, 1/s) lost only what was granted: 30 - granted - 3 are left
    // (plus a token a second of refill).
    let shared = Limits {
        per_subject: None,
        ..greedy
    };
    let mut left = 0;
    while matches!(bench.fresh(shared).await.1, IntakeVerdict::Reserved { .. }) {
        left += 1;
    }
    let expected = 30 - granted as i64 - 3;
    assert!(
        (expected..=expected + 2).contains(&left),
        "the shared bucket had {left} left, expected {expected} (plus refill): refusals by the \
         subject's bucket must not spend it"
    );
}

/// Intake in-flight: with 5 slots and 40 concurrent callers exactly 5 reserve; releasing one
/// frees exactly one slot; releasing it twice frees nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_slots_are_exact_under_concurrency() {
    let bench = Bench::new().await;
    let limits = Limits {
        max_in_flight: 5,
        ..Limits::default()
    };
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let field = format!("3:sub{}", Uuid::new_v4());
            let (id, verdict) = bench.call(limits, &field, &"a".repeat(64)).await;
            (id, field, verdict)
        }));
    }
    let mut reserved = Vec::new();
    for task in tasks {
        let (id, field, verdict) = task.await.expect("task");
        match verdict {
            IntakeVerdict::Reserved { .. } => reserved.push((id, field)),
            IntakeVerdict::Limited(Limit::RateLimited { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(reserved.len(), 5);
    assert_eq!(bench.counter("unfinished").await, 5);
    let (id, field) = &reserved[0];
    let give = Release {
        command_id: CommandId::from_uuid(*id),
        namespace_id: bench.namespace,
        command: "claim",
        request_key_field: field,
        existing: None,
    };
    assert!(
        release(&bench.redis, &bench.keys, &give)
            .await
            .expect("release")
    );
    assert!(
        !release(&bench.redis, &bench.keys, &give)
            .await
            .expect("release again")
    );
    assert_eq!(
        bench.counter("unfinished").await,
        4,
        "released exactly once"
    );
    assert!(matches!(
        bench.fresh(limits).await.1,
        IntakeVerdict::Reserved { .. }
    ));
    assert!(matches!(
        bench.fresh(limits).await.1,
        IntakeVerdict::Limited(Limit::RateLimited { .. })
    ));
}

/// Backlog caps are exact under concurrency and the outermost cap wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backlog_caps_are_exact_and_outermost_wins() {
    let bench = Bench::new().await;
    let limits = Limits {
        max_queue: 7,
        ..Limits::default()
    };
    let mut tasks = Vec::new();
    for _ in 0..30 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move { bench.fresh(limits).await.1 }));
    }
    let mut reserved = 0;
    for task in tasks {
        match task.await.expect("task") {
            IntakeVerdict::Reserved { .. } => reserved += 1,
            IntakeVerdict::Limited(Limit::QueueFull) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(reserved, 7);
    // Application full and queue full and bucket empty at once: APPLICATION_FULL is reported.
    let all_full = Limits {
        max_queue: 7,
        max_unfinished: 7,
        per_second: 1,
        burst: 1,
        ..Limits::default()
    };
    assert_eq!(
        bench.fresh(all_full).await.1,
        IntakeVerdict::Limited(Limit::ApplicationFull)
    );
}

/// Every refusal leaves Redis exactly as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_leave_nothing_behind() {
    let bench = Bench::new().await;
    let field = "2:u1key".to_string();
    let digest = "b".repeat(64);
    assert!(matches!(
        bench.call(Limits::default(), &field, &digest).await.1,
        IntakeVerdict::Reserved { .. }
    ));
    let before = bench.snapshot().await;

    let conflict = bench
        .call(Limits::default(), &field, &"c".repeat(64))
        .await
        .1;
    assert!(
        matches!(conflict, IntakeVerdict::Conflict { .. }),
        "{conflict:?}"
    );
    let pending = bench.call(Limits::default(), &field, &digest).await.1;
    assert!(
        matches!(
            pending,
            IntakeVerdict::Replay {
                committed: false,
                ..
            }
        ),
        "{pending:?}"
    );
    assert_eq!(
        bench
            .fresh(Limits {
                max_queue: 1,
                ..Limits::default()
            })
            .await
            .1,
        IntakeVerdict::Limited(Limit::QueueFull)
    );
    assert_eq!(
        bench
            .fresh(Limits {
                max_unfinished: 1,
                ..Limits::default()
            })
            .await
            .1,
        IntakeVerdict::Limited(Limit::ApplicationFull)
    );
    assert!(matches!(
        bench
            .fresh(Limits {
                max_in_flight: 1,
                ..Limits::default()
            })
            .await
            .1,
        IntakeVerdict::Limited(Limit::RateLimited { .. })
    ));
    assert_eq!(bench.snapshot().await, before, "refusals must not write");

    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(
            bench.keys.meta(),
            (format!("paused:{}", bench.namespace), "1"),
        )
        .await
        .expect("pause");
    let paused_before = bench.snapshot().await;
    assert_eq!(
        bench.fresh(Limits::default()).await.1,
        IntakeVerdict::Limited(Limit::Paused {
            whole_namespace: true
        })
    );
    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(bench.keys.meta(), ("generation", "0"))
        .await
        .expect("stale");
    let stale_before = bench.snapshot().await;
    assert_eq!(
        bench.fresh(Limits::default()).await.1,
        IntakeVerdict::NotReady
    );
    assert_eq!(bench.snapshot().await, stale_before);
    assert_ne!(paused_before, stale_before);
}

/// A reservation whose gateway died expires: its counts and its pending key are given back by
/// the next intake call, and the key can be used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_reservations_are_given_back() {
    let bench = Bench::new().await;
    let short = Limits {
        reservation_ttl_ms: 1,
        ..Limits::default()
    };
    let field = "2:u1key".to_string();
    let digest = "d".repeat(64);
    let (first, verdict) = bench.call(short, &field, &digest).await;
    assert!(matches!(verdict, IntakeVerdict::Reserved { .. }));
    assert_eq!(bench.counter("unfinished").await, 1);
    // Wait (bounded) until Redis time has passed the 1 ms expiry; the next call then purges it.
    let purged = sluice_testkit::eventually(Duration::from_secs(2), || async {
        let (second, verdict) = bench.call(Limits::default(), &field, &digest).await;
        matches!(verdict, IntakeVerdict::Reserved { .. }) && second != first
    })
    .await;
    assert!(
        purged,
        "the dead reservation expired and the key was reserved afresh"
    );
    assert_eq!(
        bench.counter("unfinished").await,
        1,
        "the dead reservation's count was given back"
    );
}

/// `rebuild.lua` writes only for the rebuild whose fence is in place, in the Redis process that
/// fenced it: a superseded rebuild's writes (from several tasks at once) change nothing and
/// answer `FENCED`, the current one's go through, and once the projection is open no rebuild's
/// token writes any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_writes_only_under_their_own_fence() {
    use sluice_durable::lifecycle::rebuild::{fence, open_empty};
    let bench = lua_fixture::LuaFixture::new().await;
    let (redis, keys) = (&bench.redis, &bench.keys);
    let client = redis.pool().next();
    let _: () = client
        .set(keys.seq(), 7, None, None, false)
        .await
        .expect("SET");
    let clear = |token: String| {
        let (redis, keys) = (redis.clone(), keys.clone());
        async move {
            redis
                .rebuild::<String>(
                    vec![keys.meta(), keys.seq()],
                    vec![token.into(), "clear".into()],
                )
                .await
                .expect("rebuild.lua")
        }
    };
    let superseded = fence(redis, keys).await.expect("fence");
    let current = fence(redis, keys).await.expect("fence");
    let late: Vec<_> = (0..8)
        .map(|_| tokio::spawn(clear(superseded.clone())))
        .collect();
    for answer in late {
        assert_eq!(answer.await.expect("task"), "FENCED");
    }
    let seq: Option<i64> = client.get(keys.seq()).await.expect("GET");
    assert_eq!(seq, Some(7), "a superseded rebuild cleared nothing");
    assert_eq!(clear(current.clone()).await, "OK");
    // Rows whose values do not come in whole commands are refused, not written misaligned.
    let misaligned = redis
        .rebuild::<String>(
            vec![keys.meta()],
            vec![current.clone().into(), "rows".into(), "only-an-id".into()],
        )
        .await;
    assert!(misaligned.is_err(), "{misaligned:?}");
    // A whole command's values with keys that are not its own (here: none) are refused too.
    let mut values: Vec<Value> = vec![current.clone().into(), "rows".into()];
    values.extend((0..17).map(|i| Value::from(format!("v{i}"))));
    let keyless = redis
        .rebuild::<String>(vec![keys.meta()], values)
        .await
        .expect_err("rows without their keys");
    assert!(
        keyless
            .to_string()
            .contains("the keys do not follow the commands"),
        "{keyless:?}"
    );
    let seq: Option<i64> = client.get(keys.seq()).await.expect("GET");
    assert_eq!(seq, None, "the current rebuild clears");

    let _: () = client
        .set(keys.seq(), 8, None, None, false)
        .await
        .expect("SET");
    open_empty(redis, keys, 2).await.expect("open");
    assert_eq!(clear(current).await, "FENCED", "after the open");
    let seq: Option<i64> = client.get(keys.seq()).await.expect("GET");
    assert_eq!(seq, Some(8));
}

/// `accept.lua` answers each command's position once the whole batch is queued: a command of the
/// batch with a lower sequence, queued after another, stands ahead of it at the answer's instant
/// (the rank read mid-batch told the later command one place too few).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_positions_count_the_whole_batch() {
    let bench = Bench::new().await;
    let committed = |seq: i64| Accepted {
        command_id: CommandId::new_v7(),
        namespace_id: bench.namespace,
        command: "claim".into(),
        resource_key: "r1".into(),
        request_key_field: format!("3:sub{}", Uuid::new_v4()),
        content_sha256_hex: "a".repeat(64),
        queue_seq: seq,
        accepted_at: "2026-12-01T00:00:00.000Z".into(),
        deadline_at: "2026-12-02T00:00:00.000Z".into(),
        limit_keys: String::new(),
    };
    // In the batch's order: sequences 20, 10, 30 of one queue.
    let batch = [committed(20), committed(10), committed(30)];
    let Acceptance::Projected(answer) = accept(&bench.redis, &bench.keys, 1, &batch)
        .await
        .expect("accept.lua")
    else {
        panic!("the projection is ready");
    };
    let queue = bench.keys.queue(bench.namespace, "claim", "r1");
    let mut truth = Vec::new();
    for a in &batch {
        let rank: Option<u64> = bench
            .redis
            .pool()
            .next()
            .zrank(&queue, a.command_id.to_string(), false)
            .await
            .expect("ZRANK");
        truth.push(rank);
    }
    assert_eq!(truth, [Some(1), Some(0), Some(2)], "the queue's order");
    assert_eq!(
        answer.positions, truth,
        "the positions told are the ranks after the call"
    );
}
