//! The start rate behind ticket ETAs, in a real Redis: `admit.lua` records each resource queue's
//! starts in `{a:ID}:starts` (every admission that starts something there, the first opening the
//! record), `ticket.lua` hands the record of a waiting command's queue to the poll with one
//! `HGET`, and concurrent admissions from several tasks count every start exactly once.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fred::prelude::*;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{Admission, AdmitLimits};
use sluice_redis::start_rate::{StartRecord, TIME_CONSTANT_MS};
use sluice_redis::ticket::read_status;

use crate::lua_fixture;

enum StartRate {}

type Bench = lua_fixture::Bench<StartRate>;

fn limits(max_heads: u32) -> AdmitLimits {
    lua_fixture::admit_limits(max_heads)
}

impl Bench {
    /// Queues `n` accepted commands of `command` on `resource` with the fields a ticket poll
    /// reads (`q`, `ns`, `cmd`), as `accept.lua` leaves them.
    async fn queue_waiting(&self, command: &str, resource: &str, n: usize) -> Vec<CommandId> {
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let fields = vec![
                ("status".to_string(), "accepted".to_string()),
                (
                    "q".to_string(),
                    self.keys.queue(self.namespace, command, resource),
                ),
                ("ns".to_string(), self.namespace.to_string()),
                ("cmd".to_string(), command.to_string()),
            ];
            let counters = vec![
                format!("waiting:{}", self.namespace),
                format!("queued:{}", self.nscmd(command)),
            ];
            let seq = self.next_seq();
            ids.push(
                self.queue_command(command, resource, seq, fields, counters)
                    .await,
            );
        }
        ids
    }

    /// The start record of a queue, as stored.
    async fn record(&self, command: &str, resource: &str) -> Option<String> {
        self.redis
            .pool()
            .next()
            .hget(self.keys.starts(), self.suffix(command, resource))
            .await
            .expect("hget starts")
    }

    async fn admit_at(&self, max_heads: u32) -> (i64, Vec<String>) {
        match self.admission(limits(max_heads)).await {
            Admission::Heads { at_ms, heads, .. } => {
                (at_ms, heads.into_iter().map(|h| h.queue_suffix).collect())
            }
            Admission::NotReady => panic!("the projection is ready"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_record_each_queues_start_rate_for_ticket_polls() {
    let bench = Bench::new().await;
    // A burst of 100 but 7 per second declared: whatever a burst reads as, the queue cannot
    // drain faster than 7 per second for long, so 7 caps the rate.
    bench.configure(&[("claim", "100 7 100 0")], &[]).await;
    let ids = bench.queue_waiting("claim", "r1", 20).await;
    let elsewhere = bench.queue_waiting("other", "r2", 1).await;

    let waiting = ids[10];
    // Without the queue: ticket.lua names it, and the second call reads it.
    let before = read_status(&bench.redis, &bench.keys, waiting, None)
        .await
        .expect("ticket.lua");
    assert_eq!(before.position, Some(10));
    assert_eq!(before.starts_per_second, None, "nothing started yet");

    // The first admission opens the record with its starts.
    let (first_at, started) = bench.admit_at(3).await;
    assert_eq!(started.len(), 3);
    let opened = StartRecord::parse(&bench.record("claim", "r1").await.expect("a record"))
        .expect("a well-formed record");
    assert_eq!(
        opened,
        StartRecord {
            decayed: 3.0,
            at_ms: first_at,
            born_ms: first_at,
            cap: 7.0
        }
    );

    // Later admissions count their starts, decayed to their own instant.
    let (second_at, started) = bench.admit_at(2).await;
    assert_eq!(started.len(), 2);
    let counted = StartRecord::parse(&bench.record("claim", "r1").await.expect("a record"))
        .expect("a well-formed record");
    assert_eq!((counted.at_ms, counted.born_ms), (second_at, first_at));
    let expected = 3.0 * (-((second_at - first_at) as f64) / TIME_CONSTANT_MS).exp() + 2.0;
    assert!(
        (counted.decayed - expected).abs() < 1e-3,
        "{counted:?}: three starts decayed, then two"
    );

    // The poll reads the record of its own queue: five started quickly, capped at 7 per second.
    let r1 = bench.suffix("claim", "r1");
    let polled = read_status(&bench.redis, &bench.keys, waiting, Some(&r1))
        .await
        .expect("ticket.lua");
    assert_eq!(polled.position, Some(5));
    assert_eq!(polled.starts_per_second, Some(7.0));
    // A queue that started nothing has no rate, whatever the others do.
    // A wrong queue is not read: the one named is.
    let other = read_status(&bench.redis, &bench.keys, elsewhere[0], Some(&r1))
        .await
        .expect("ticket.lua");
    assert_eq!(other.position, Some(0));
    assert_eq!(other.starts_per_second, None);

    // The queue emptied: its record goes with it, and the next wait starts a new one.
    let (_, started) = bench.admit_at(64).await;
    assert_eq!(started.len(), 15, "the rest of the queue");
    assert_eq!(bench.record("claim", "r1").await, None);
    let again = bench.queue_waiting("claim", "r1", 2).await;
    assert_eq!(bench.admit_at(1).await.1.len(), 1);
    let reopened = StartRecord::parse(&bench.record("claim", "r1").await.expect("a record"))
        .expect("a well-formed record");
    assert_eq!(reopened.decayed, 1.0, "a new record: {reopened:?}");
    assert_eq!(reopened.born_ms, reopened.at_ms);
    let last = read_status(&bench.redis, &bench.keys, again[1], None)
        .await
        .expect("ticket.lua");
    assert_eq!(last.position, Some(0));
    assert_eq!(last.starts_per_second, Some(7.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_admissions_count_every_start_once() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1000 100000 100000 0")], &[])
        .await;
    bench.queue_waiting("claim", "a", 100).await;
    bench.queue_waiting("claim", "b", 100).await;
    // Four executors admit one command per call until 120 started: both queues keep waiting
    // work (their records stay), each has been admitted from by many calls at once.
    let started = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (bench, started) = (bench.clone(), started.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = Vec::new();
            while started.load(Ordering::SeqCst) < 120 {
                let (at_ms, suffixes) = bench.admit_at(1).await;
                started.fetch_add(suffixes.len(), Ordering::SeqCst);
                calls.extend(suffixes.into_iter().map(|suffix| (at_ms, suffix)));
            }
            calls
        }));
    }
    let mut calls: Vec<(i64, String)> = Vec::new();
    for task in tasks {
        calls.extend(task.await.expect("an admitting task"));
    }
    // Redis ran the calls one at a time, in the order of their times: the record must be
    // exactly the fold of every one of them (a lost or doubled update shows as a difference of
    // at least one start).
    calls.sort();
    let mut expected: HashMap<String, StartRecord> = HashMap::new();
    for (at_ms, suffix) in &calls {
        let next = match expected.get(suffix) {
            None => StartRecord {
                decayed: 1.0,
                at_ms: *at_ms,
                born_ms: *at_ms,
                cap: 100_000.0,
            },
            Some(r) => StartRecord {
                decayed: r.decayed * (-((at_ms - r.at_ms) as f64) / TIME_CONSTANT_MS).exp() + 1.0,
                at_ms: *at_ms,
                born_ms: r.born_ms,
                cap: r.cap,
            },
        };
        expected.insert(suffix.clone(), next);
    }
    assert_eq!(expected.len(), 2, "both queues started work");
    for resource in ["a", "b"] {
        let suffix = bench.suffix("claim", resource);
        let want = expected[&suffix];
        let got = StartRecord::parse(&bench.record("claim", resource).await.expect("a record"))
            .expect("a well-formed record");
        let starts = calls.iter().filter(|(_, s)| *s == suffix).count();
        assert_eq!(
            (got.at_ms, got.born_ms, got.cap),
            (want.at_ms, want.born_ms, want.cap)
        );
        assert!(
            (got.decayed - want.decayed).abs() < 0.01,
            "{resource}: {got:?}, expected {want:?} from {starts} starts"
        );
    }
}
