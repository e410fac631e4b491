//! What a load run measured, as one serialisable value: written as JSON for machines and rendered
//! as a self-contained HTML page ([`html`]) for the people reviewing capacity.
//!
//! The fields follow an operator's capacity review of a drop: how many arrived in the same second,
//! how many got in, how many were refused explicitly, how many outcomes stayed unknown, how long
//! each person waited for the final answer, and what the stack's resources peaked at.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub mod html;

/// One load run, start to verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// `drop`, `steady` or `backend`.
    pub scenario: String,
    /// RFC 3339 UTC, the load generator's clock.
    pub started_at: String,
    /// Wall time from the first arrival to the last final answer (or the give-up point).
    pub duration_seconds: f64,
    pub machine: Machine,
    /// What was run against: e.g. `sluice dev (gateway and executor in one process)`.
    pub stack: String,
    /// The run's options as given (subjects, rate, capacity, deadlines…), for reproduction.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// What happened to each person (drop/steady) or each backend job (backend).
    pub people: People,
    /// Every HTTP request the generator sent, per endpoint.
    pub requests: BTreeMap<String, Endpoint>,
    /// From arrival to the final answer (a terminal status read, or an explicit final refusal).
    pub final_latency: Latency,
    /// One entry per whole second since the first arrival.
    pub timeline: Vec<Second>,
    /// Sampled from `GET /v1/status` while the run went on.
    pub peaks: Peaks,
    /// CPU and memory of the stack's processes, sampled from `/proc`.
    pub processes: Vec<ProcessUsage>,
    /// Checked at the end from PostgreSQL (and the webhook receiver's own observations).
    pub invariants: Vec<Check>,
    /// The targets with the measured value, met or not.
    pub targets: Vec<Target>,
    /// All invariants hold (targets are reported, not enforced).
    pub invariants_hold: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub hostname: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
    /// 1-minute load average when the run started.
    pub load_average: f64,
}

/// The people's (or jobs') outcomes. Every arrival ends in exactly one of `succeeded`,
/// `rejected`, `refused`, `unknown`, and `arrived` is their sum.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct People {
    pub arrived: u64,
    /// Arrivals whose first step (reading the offer) answered 200. Backend jobs have no first
    /// step: equal to `arrived`.
    pub entered: u64,
    /// Arrivals holding a durable acceptance (`202`, or `200` replay of it).
    pub accepted: u64,
    /// Accepted and ended `succeeded`.
    pub succeeded: u64,
    /// Accepted and ended in another terminal status, by error code (`SOLD_OUT`, …).
    pub rejected: BTreeMap<String, u64>,
    /// Never accepted: the last answer was an explicit refusal, by code (`RATE_LIMITED`, …).
    pub refused: BTreeMap<String, u64>,
    /// Outcome not known when the person gave up: a connection error, a timeout, `503
    /// UNAVAILABLE` to a write that retries did not resolve, or a poll that never saw a
    /// terminal status before the deadline. The target is 0.
    pub unknown: u64,
    /// Explicit refusals of any attempt (a person refused twice then accepted counts twice).
    pub refusals_by_code: BTreeMap<String, u64>,
    /// Retries sent after an explicit retryable refusal, honouring `Retry-After`.
    pub retries: u64,
}

/// Requests to one endpoint (`read offer`, `enqueue`, `poll ticket`, `read result`, …).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Endpoint {
    pub count: u64,
    /// By HTTP status (`"202"`) or `"error"` for a transport failure.
    pub by_status: BTreeMap<String, u64>,
    pub latency: Latency,
}

/// A latency distribution from an HdrHistogram, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Log-spaced buckets for the histogram chart; empty buckets included so the axis is even.
    pub buckets: Vec<Bucket>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bucket {
    /// Values in `(previous upper, upper_ms]`.
    pub upper_ms: f64,
    pub count: u64,
}

/// One second of the run, counted by the second the event happened in.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Second {
    pub second: u64,
    pub arrivals: u64,
    /// First `202` of a person in this second.
    pub acceptances: u64,
    /// Explicit refusals answered in this second (any attempt).
    pub refusals: u64,
    /// Final answers (terminal status seen, or final refusal) in this second.
    pub completions: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Peaks {
    pub samples: u64,
    pub application_in_flight: i64,
    /// Live permits per command, and the command's declared `max_in_flight` when it has one.
    pub command_in_flight: BTreeMap<String, PeakOf>,
    /// Commands waiting (`accepted`) in the namespace.
    pub waiting: i64,
    /// Commands not yet terminal in the namespace.
    pub unfinished: i64,
    /// The oldest non-terminal command's age at any sample, seconds.
    pub oldest_unfinished_seconds: f64,
    /// Live permits per limit key at any sample, with the declared limit.
    pub limit_keys: BTreeMap<String, PeakOf>,
    /// Commands executing or running at once per command, counted in PostgreSQL (not from the
    /// permits Redis holds), with the command's declared `max_in_flight`.
    #[serde(default)]
    pub executing: BTreeMap<String, PeakOf>,
    /// The samples themselves, for the chart: milliseconds since the first arrival.
    pub series: Vec<StatusSample>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeakOf {
    pub peak: i64,
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusSample {
    pub at_ms: u64,
    pub application_in_flight: i64,
    pub waiting: i64,
    pub unfinished: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// `sluice dev`, `gateway`, `executor`, `redis-server`, `load generator`.
    pub name: String,
    pub pid: u32,
    /// CPU time over the run divided by wall time: 100 = one core busy.
    pub cpu_average_percent: f64,
    /// The busiest sampling interval.
    pub cpu_peak_percent: f64,
    /// Peak resident set size (`VmHWM`), MiB.
    pub rss_peak_mib: f64,
    pub samples: u64,
}

/// An invariant checked after the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub holds: bool,
    /// The numbers behind the verdict, e.g. `100 allocations of capacity 100`.
    pub detail: String,
}

/// A target of the issue with the measured value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

impl Latency {
    /// Summarises a histogram of microseconds.
    pub fn from_micros(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            count: histogram.len(),
            mean_ms: histogram.mean() / 1000.0,
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p95_ms: ms(histogram.value_at_quantile(0.95)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
            buckets: log_buckets(histogram),
        }
    }
}

/// Four buckets per power of ten from the smallest to the largest value: readable from 1 ms to
/// minutes on one axis.
fn log_buckets(histogram: &Histogram<u64>) -> Vec<Bucket> {
    const PER_DECADE: i32 = 4;
    let lowest = (histogram.min().max(1) as f64).log10();
    let highest = (histogram.max().max(1) as f64).log10();
    let first = (lowest * f64::from(PER_DECADE)).floor() as i32;
    let last = (highest * f64::from(PER_DECADE)).ceil() as i32;
    let mut buckets = Vec::new();
    let mut below = 0u64;
    for step in first..=last.max(first + 1) {
        let upper_us = 10f64.powf(f64::from(step) / f64::from(PER_DECADE));
        let upto = histogram.count_between(0, upper_us as u64);
        buckets.push(Bucket {
            upper_ms: upper_us / 1000.0,
            count: upto - below,
        });
        below = upto;
    }
    buckets
}
