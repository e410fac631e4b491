//! What a side's rounds add up to, and how Sluice compares with a baseline: the median round of
//! each side (a median, so one round disturbed by the shared machine does not move the result),
//! their ratio and the target it should reach.

use hdrhistogram::Histogram;

use super::cpu::Cpu;
use super::rounds::{HttpRound, new_histogram};
use crate::bench_stack::median;

/// One side of a pair: its rate per round and, for HTTP sides, its latencies over every round.
#[derive(Clone)]
pub(super) struct Side {
    pub(super) name: String,
    pub(super) rates: Vec<f64>,
    latency_us: Option<Histogram<u64>>,
    /// CPU used over the measured rounds, and the answers it bought.
    cpu: Cpu,
    answers: u64,
}

impl Side {
    pub(super) fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            rates: Vec::new(),
            latency_us: None,
            cpu: Cpu::default(),
            answers: 0,
        }
    }

    /// A measured round of `answers` at `rate` that used `cpu`.
    pub(super) fn push(&mut self, rate: f64, answers: u64, cpu: Cpu) {
        self.rates.push(rate);
        self.answers += answers;
        self.cpu = self.cpu.plus(cpu);
    }

    /// A measured HTTP round, counting answers of `status`.
    pub(super) fn push_http(&mut self, round: &HttpRound, status: u16) {
        self.push(round.per_second(status), round.count(status), round.cpu);
        let latency = self.latency_us.get_or_insert_with(new_histogram);
        let _ = latency.add(&round.latency_us);
    }

    /// CPU microseconds per answer: (this process, Redis, PostgreSQL).
    pub(super) fn cpu_per_answer(&self) -> Option<(f64, f64, f64)> {
        let per = |seconds: f64| seconds * 1e6 / self.answers as f64;
        (self.answers > 0).then(|| {
            (
                per(self.cpu.here),
                per(self.cpu.redis),
                per(self.cpu.postgres),
            )
        })
    }

    /// The rate of the latest round, for the progress lines.
    pub(super) fn last(&self) -> f64 {
        self.rates.last().copied().unwrap_or(0.0)
    }

    pub(super) fn median(&self) -> Option<f64> {
        (!self.rates.is_empty()).then(|| median(self.rates.clone()))
    }

    /// The latency at `quantile` in milliseconds, for HTTP sides.
    pub(super) fn latency_ms(&self, quantile: f64) -> Option<f64> {
        self.latency_us
            .as_ref()
            .map(|h| h.value_at_quantile(quantile) as f64 / 1000.0)
    }
}

/// Sluice against one baseline, with the ratio it should reach (if any).
pub(super) struct Comparison {
    pub(super) measurement: String,
    pub(super) sluice: Side,
    pub(super) baseline: Side,
    pub(super) target: Option<f64>,
    /// Why the baseline was not measured.
    pub(super) skipped: Option<String>,
    /// A measurement that went wrong without stopping the run (exit status non-zero).
    pub(super) problem: Option<String>,
}

impl Comparison {
    pub(super) fn new(
        measurement: &str,
        sluice: Side,
        baseline: Side,
        target: Option<f64>,
    ) -> Self {
        Self {
            measurement: measurement.to_string(),
            sluice,
            baseline,
            target,
            skipped: None,
            problem: None,
        }
    }

    pub(super) fn skipped(measurement: &str, sluice: Side, baseline: Side, why: &str) -> Self {
        Self {
            skipped: Some(why.to_string()),
            ..Self::new(measurement, sluice, baseline, None)
        }
    }

    /// Sluice's median over the baseline's.
    pub(super) fn ratio(&self) -> Option<f64> {
        Some(self.sluice.median()? / self.baseline.median()?)
    }

    /// Whether the ratio reached the target, when there is one.
    pub(super) fn met(&self) -> Option<bool> {
        Some(self.ratio()? >= self.target?)
    }
}
