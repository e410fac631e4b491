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
mod room;

pub use room::{RoomFigures, RoomSecond};

/// One load run, start to verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// `drop`, `steady`, `backend` or `room`.
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
    /// How the waiters were told and how they polled (`drop` and `steady`; absent in reports
    /// written before it existed).
    #[serde(default)]
    pub waiting: Option<Waiting>,
    /// What became of the reserved units (`--mode reserved` only; absent otherwise, and in
    /// reports written before it existed).
    #[serde(default)]
    pub reservations: Option<Reservations>,
    /// The waiting room's figures (`room` only; absent otherwise, and in reports written
    /// before it existed).
    #[serde(default)]
    pub room: Option<RoomFigures>,
    /// A gateway's SIGTERM mid-run, witnessed from the callers' side
    /// (`--sigterm-gateway-after` only; absent otherwise, and in reports written before it
    /// existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigterm: Option<crate::sigterm::Figures>,
    /// The documented targets (docs/performance.md) with the measured value, met or not.
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
    /// The messages of every `503` answer (`UNAVAILABLE`, `INTAKE_PAUSED`), by message: a
    /// gateway's `503` leaves an outcome unknown, and its message says which of the causes
    /// the API shares that code among it was.
    #[serde(default)]
    pub unavailable_messages: BTreeMap<String, u64>,
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

/// The waiting figures: the first ETA each waiter was told against when its command really
/// started (PostgreSQL's `started_at`), the waiters' polls against what they were advised, and
/// the order of starts within each resource against the order of acceptance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Waiting {
    /// Waiters that were told an ETA (their first `eta_seconds`) and whose command started.
    pub told: u64,
    /// |told − actual| / actual of the first ETA (0.2 = 20 %), the actual wait running from the
    /// observation of the position the ETA was computed from to the start.
    pub eta_error_p50: f64,
    pub eta_error_p90: f64,
    /// The same, less the half second an answer in whole seconds cannot avoid: what the
    /// estimate itself got wrong.
    pub eta_error_beyond_rounding_p50: f64,
    pub eta_error_beyond_rounding_p90: f64,
    /// told / actual: above 1, the estimate was too long.
    pub eta_ratio_p10: f64,
    pub eta_ratio_p50: f64,
    pub eta_ratio_p90: f64,
    /// The actual waits of those told, seconds.
    pub actual_wait_p50_seconds: f64,
    pub actual_wait_p90_seconds: f64,
    /// Waiters that polled their ticket at least once.
    pub waiters_polling: u64,
    /// Each waiter's polls per minute, from its acceptance to its last poll.
    pub polls_per_minute_p50: f64,
    pub polls_per_minute_p90: f64,
    /// The rate the advice it was given allowed (its polls over the sum of the advised waits).
    pub advised_polls_per_minute_p50: f64,
    pub advised_polls_per_minute_p90: f64,
    /// Polls sent before the advised wait had passed (the goal is 0).
    pub polls_sooner_than_advised: u64,
    /// Commands with a `started_at`.
    pub started: u64,
    /// Pairs of commands of one resource accepted in one order (`queue_seq`) and started in the
    /// other (the goal is 0).
    pub inversions: u64,
    /// Commands that a command of their resource accepted after them started before.
    pub overtaken: u64,
    /// Ticket polls the gateways answered, by source, from their `/metrics` at the end of the
    /// run (absent when no gateway's metrics could be read, and in reports written before).
    #[serde(default)]
    pub polls_answered: Option<PollSources>,
}

/// Ticket polls answered, by source (`sluice_ticket_polls_total` summed over the gateways).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollSources {
    /// From the gateway's memory of the waiting queues.
    pub memory: u64,
    /// `ticket.lua`.
    pub redis: u64,
    /// PostgreSQL (Redis could not answer).
    pub postgres: u64,
}

impl PollSources {
    /// Adds the counts of one gateway's `/metrics` text.
    pub fn add_exposition(&mut self, text: &str) {
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("sluice_ticket_polls_total{answered_by=\"") else {
                continue;
            };
            let Some((source, value)) = rest.split_once("\"} ") else {
                continue;
            };
            let count = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
            match source {
                "memory" => self.memory += count,
                "redis" => self.redis += count,
                "postgres" => self.postgres += count,
                _ => {}
            }
        }
    }

    pub fn total(&self) -> u64 {
        self.memory + self.redis + self.postgres
    }

    /// The share answered from memory, 0..=1.
    pub fn memory_share(&self) -> f64 {
        self.memory as f64 / self.total().max(1) as f64
    }
}

/// The reserved units of a `--mode reserved` sale: their final states as PostgreSQL holds them
/// once every reservation had time to expire, what the holders chose and were answered, and
/// the pool's counts as sampled while it ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Reservations {
    pub reservation_seconds: u32,
    /// Allocation rows: every unit that was ever reserved.
    pub reserved: u64,
    /// The rows by final state, and those still `reserved` at the end (the goal is 0).
    pub confirmed: u64,
    pub released: u64,
    pub expired: u64,
    pub still_reserved: u64,
    /// Winners' choices.
    pub chose_confirm: u64,
    pub chose_release: u64,
    pub let_lapse: u64,
    /// Confirms answered `200` (that changed the allocation), and `409` (too late: the
    /// allocation had expired).
    pub confirms_changed: u64,
    pub confirms_refused: u64,
    pub releases_changed: u64,
    pub releases_refused: u64,
    /// Confirms and releases left without a final answer.
    pub unanswered: u64,
    /// Each confirm request (retries included), from sending to its answer.
    pub confirm_latency: Latency,
    /// The pool's row, sampled every 50 ms from PostgreSQL while the run went on.
    pub pool_samples: u64,
    pub capacity: i64,
    pub peak_held: i64,
    pub peak_reserved: i64,
}

impl Reservations {
    /// The figures as (name, value) lines, shared by the Markdown summary and the HTML page.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "units reserved (allocation rows)",
                format!("{} (held {} s)", self.reserved, self.reservation_seconds),
            ),
            (
                "confirmed / released / expired / still reserved",
                format!(
                    "{} / {} / {} / {}",
                    self.confirmed, self.released, self.expired, self.still_reserved
                ),
            ),
            (
                "winners chose confirm / release / lapse",
                format!(
                    "{} / {} / {}",
                    self.chose_confirm, self.chose_release, self.let_lapse
                ),
            ),
            (
                "confirms changed / too late (409)",
                format!("{} / {}", self.confirms_changed, self.confirms_refused),
            ),
            (
                "releases changed / refused (409)",
                format!("{} / {}", self.releases_changed, self.releases_refused),
            ),
            (
                "confirms and releases without an answer",
                self.unanswered.to_string(),
            ),
            (
                "confirm latency p50 / p99 / max",
                format!(
                    "{:.1} / {:.1} / {:.1} ms",
                    self.confirm_latency.p50_ms,
                    self.confirm_latency.p99_ms,
                    self.confirm_latency.max_ms
                ),
            ),
            (
                "pool peak held / reserved of capacity (sampled)",
                format!(
                    "{} / {} of {} ({} samples)",
                    self.peak_held, self.peak_reserved, self.capacity, self.pool_samples
                ),
            ),
        ]
    }
}

/// An invariant checked after the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub holds: bool,
    /// The numbers behind the verdict, e.g. `100 allocations of capacity 100`.
    pub detail: String,
}

/// A documented target with the measured value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

impl Waiting {
    /// The figures as (name, value) lines, shared by the Markdown summary and the HTML page.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let percent = |v: f64| format!("{:.0} %", v * 100.0);
        vec![
            (
                "waiters told an ETA that then started",
                self.told.to_string(),
            ),
            (
                "ETA error p50 / p90 (|told − actual| / actual, first ETA)",
                format!(
                    "{} / {}",
                    percent(self.eta_error_p50),
                    percent(self.eta_error_p90)
                ),
            ),
            (
                "ETA error beyond whole-second rounding p50 / p90",
                format!(
                    "{} / {}",
                    percent(self.eta_error_beyond_rounding_p50),
                    percent(self.eta_error_beyond_rounding_p90)
                ),
            ),
            (
                "told / actual p10 / p50 / p90",
                format!(
                    "{:.2} / {:.2} / {:.2}",
                    self.eta_ratio_p10, self.eta_ratio_p50, self.eta_ratio_p90
                ),
            ),
            (
                "actual wait p50 / p90",
                format!(
                    "{:.1} / {:.1} s",
                    self.actual_wait_p50_seconds, self.actual_wait_p90_seconds
                ),
            ),
            (
                "polls per waiter per minute p50 / p90",
                format!(
                    "{:.1} / {:.1} (advised {:.1} / {:.1}, {} waiters)",
                    self.polls_per_minute_p50,
                    self.polls_per_minute_p90,
                    self.advised_polls_per_minute_p50,
                    self.advised_polls_per_minute_p90,
                    self.waiters_polling
                ),
            ),
            (
                "polls sooner than advised",
                self.polls_sooner_than_advised.to_string(),
            ),
            (
                "order inversions within a resource (pairs, commands overtaken)",
                format!(
                    "{}, {} of {} started",
                    self.inversions, self.overtaken, self.started
                ),
            ),
            (
                "ticket polls answered from the gateway's memory",
                match self.polls_answered {
                    Some(polls) => format!(
                        "{} of {} ({:.1} %; Redis {}, PostgreSQL {})",
                        polls.memory,
                        polls.total(),
                        polls.memory_share() * 100.0,
                        polls.redis,
                        polls.postgres
                    ),
                    None => "not read (no gateway metrics)".into(),
                },
            ),
        ]
    }
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
