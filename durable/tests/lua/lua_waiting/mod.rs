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

mod gone;
mod pull;
mod runs;
mod started;

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
