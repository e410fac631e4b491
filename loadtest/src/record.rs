//! Everything the callers of a run saw, recorded as it happens: per-endpoint answers and
//! latencies, what became of each person, and per-second counts for the timeline.
//!
//! One mutex guards the tallies: each person records a handful of events, so contention stays
//! far below the cost of the HTTP exchanges being measured. The progress counters are atomics so
//! the progress bar never takes the lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sluice_durable::ids::CommandId;
use sluice_model::CommandStatus;

use crate::api::{Exchange, Outcome};
use crate::report::{Endpoint, Latency, People, Second};

/// How a person's (or job's) story ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Succeeded,
    /// Accepted, then a terminal status other than `succeeded`: its error code (or the status).
    Rejected(String),
    /// Never accepted; the last answer was this explicit refusal code.
    Refused(String),
    /// Gave up without knowing.
    Unknown,
}

/// Live counters for the progress bar.
#[derive(Debug, Default)]
pub struct Progress {
    pub arrived: AtomicU64,
    pub accepted: AtomicU64,
    pub finished: AtomicU64,
    pub refused: AtomicU64,
    pub unknown: AtomicU64,
}

pub struct Recorder {
    /// The first arrival's instant: second 0 of the timeline.
    pub origin: Instant,
    pub progress: Progress,
    inner: Mutex<Tallies>,
}

#[derive(Default)]
struct Tallies {
    endpoints: BTreeMap<&'static str, EndpointTally>,
    final_latency_us: Option<Histogram<u64>>,
    timeline: Vec<Second>,
    people: People,
    /// Every command id a caller was told is accepted, with the terminal status the caller saw
    /// last (`None` while none was seen).
    accepted: HashMap<CommandId, Option<CommandStatus>>,
    /// How each accepted command's caller waited: its first ETA and the pace of its polls.
    waits: HashMap<CommandId, Wait>,
}

/// How one caller waited for its accepted command: what it was first told and how it polled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Wait {
    /// When the caller learnt its command is accepted (this machine's clock, Unix ms).
    pub accepted_ms: i64,
    /// The first `eta_seconds` a poll answered, and when Redis observed the position it was
    /// computed from (`queue.observed_at`, Unix milliseconds): compared afterwards with when
    /// the command really started (PostgreSQL's `started_at`, on the same clock).
    pub first_eta: Option<(u64, i64)>,
    /// Ticket polls sent.
    pub polls: u64,
    /// The sum of the waits advised before each poll (`poll_after_ms` of the answer before it,
    /// or `Retry-After`).
    pub advised: Duration,
    /// Polls sent before the advised wait had passed.
    pub early: u64,
    /// From the acceptance to the last poll.
    pub span: Duration,
}

struct EndpointTally {
    count: u64,
    by_status: BTreeMap<String, u64>,
    latency_us: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 10 min at 3 significant digits; the bounds are constants and valid.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("constant histogram bounds are valid")
}

impl Recorder {
    pub fn new(origin: Instant) -> Self {
        Self {
            origin,
            progress: Progress::default(),
            inner: Mutex::new(Tallies::default()),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Tallies) -> T) -> T {
        // A panic while holding the lock poisons it; the tallies stay usable for the report.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    fn second(&self, at: Instant) -> usize {
        at.saturating_duration_since(self.origin).as_secs() as usize
    }

    /// One exchange with an endpoint (`read offer`, `enqueue`, …).
    pub fn exchange(&self, endpoint: &'static str, exchange: &Exchange) {
        let label = exchange.status_label();
        let refused = match &exchange.outcome {
            Outcome::Refused {
                code,
                reason: Some(reason),
                ..
            } => Some(format!("{code} ({reason})")),
            Outcome::Refused { code, .. } => Some(code.clone()),
            _ => None,
        };
        let second = self.second(Instant::now());
        self.with(|t| {
            let tally = t
                .endpoints
                .entry(endpoint)
                .or_insert_with(|| EndpointTally {
                    count: 0,
                    by_status: BTreeMap::new(),
                    latency_us: histogram(),
                });
            tally.count += 1;
            *tally.by_status.entry(label).or_default() += 1;
            let _ = tally
                .latency_us
                .record(exchange.took.as_micros().max(1) as u64);
            if let Some(code) = refused {
                *t.people.refusals_by_code.entry(code).or_default() += 1;
                t.at(second).refusals += 1;
            }
            if let Outcome::Refused {
                status: 503,
                message,
                ..
            } = &exchange.outcome
            {
                *t.people
                    .unavailable_messages
                    .entry(message.clone())
                    .or_default() += 1;
            }
        });
    }

    pub fn arrival(&self, at: Instant) {
        self.progress.arrived.fetch_add(1, Ordering::Relaxed);
        let second = self.second(at);
        self.with(|t| {
            t.people.arrived += 1;
            t.at(second).arrivals += 1;
        });
    }

    pub fn entered(&self) {
        self.with(|t| t.people.entered += 1);
    }

    pub fn retry(&self) {
        self.with(|t| t.people.retries += 1);
    }

    /// A person learnt that their command is accepted (first time only).
    pub fn accepted(&self, command_id: CommandId) {
        self.progress.accepted.fetch_add(1, Ordering::Relaxed);
        let second = self.second(Instant::now());
        self.with(|t| {
            t.people.accepted += 1;
            t.accepted.entry(command_id).or_insert(None);
            t.at(second).acceptances += 1;
        });
    }

    /// A person of a room holds a place (`202` to the join): counted as accepted, without a
    /// command.
    pub fn joined(&self) {
        self.progress.accepted.fetch_add(1, Ordering::Relaxed);
        let second = self.second(Instant::now());
        self.with(|t| {
            t.people.accepted += 1;
            t.at(second).acceptances += 1;
        });
    }

    /// The terminal status a caller read for an accepted command.
    pub fn terminal_seen(&self, command_id: CommandId, status: CommandStatus) {
        self.with(|t| {
            t.accepted.insert(command_id, Some(status));
        });
    }

    /// How the caller of an accepted command waited (recorded once its polling ended).
    pub fn wait(&self, command_id: CommandId, wait: Wait) {
        self.with(|t| {
            t.waits.insert(command_id, wait);
        });
    }

    /// A person's story ended; `arrived` is when it began.
    pub fn ending(&self, arrived: Instant, ending: Ending) {
        let now = Instant::now();
        let waited = now.saturating_duration_since(arrived);
        match &ending {
            Ending::Unknown => &self.progress.unknown,
            Ending::Refused(_) => &self.progress.refused,
            _ => &self.progress.finished,
        }
        .fetch_add(1, Ordering::Relaxed);
        let second = self.second(now);
        self.with(|t| {
            match ending {
                Ending::Succeeded => t.people.succeeded += 1,
                Ending::Rejected(code) => *t.people.rejected.entry(code).or_default() += 1,
                Ending::Refused(code) => *t.people.refused.entry(code).or_default() += 1,
                Ending::Unknown => t.people.unknown += 1,
            }
            t.at(second).completions += 1;
            let latency = t.final_latency_us.get_or_insert_with(histogram);
            let _ = latency.record(waited.as_micros().max(1) as u64);
        });
    }

    /// Ends the recording: the people, endpoints, final latency and timeline, plus every
    /// accepted command id with the terminal status its caller saw.
    pub fn finish(&self) -> Recorded {
        self.with(|t| {
            let endpoints = t
                .endpoints
                .iter()
                .map(|(name, tally)| {
                    (
                        (*name).to_string(),
                        Endpoint {
                            count: tally.count,
                            by_status: tally.by_status.clone(),
                            latency: Latency::from_micros(&tally.latency_us),
                        },
                    )
                })
                .collect();
            let mut timeline = t.timeline.clone();
            for (i, second) in timeline.iter_mut().enumerate() {
                second.second = i as u64;
            }
            Recorded {
                people: t.people.clone(),
                endpoints,
                final_latency: t
                    .final_latency_us
                    .as_ref()
                    .map(Latency::from_micros)
                    .unwrap_or_default(),
                timeline,
                accepted: t.accepted.clone(),
                waits: t.waits.clone(),
            }
        })
    }

    /// How long since the first arrival.
    pub fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }
}

impl Tallies {
    fn at(&mut self, second: usize) -> &mut Second {
        if self.timeline.len() <= second {
            self.timeline.resize_with(second + 1, Second::default);
        }
        &mut self.timeline[second]
    }
}

/// What the callers saw, at the end of a run.
pub struct Recorded {
    pub people: People,
    pub endpoints: BTreeMap<String, Endpoint>,
    pub final_latency: Latency,
    pub timeline: Vec<Second>,
    pub accepted: HashMap<CommandId, Option<CommandStatus>>,
    pub waits: HashMap<CommandId, Wait>,
}
