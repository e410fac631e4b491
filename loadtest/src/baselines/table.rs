//! The report: two Markdown tables on stdout (the comparisons, then every side's rounds,
//! latencies and CPU per answer), ready to paste into `docs/performance.md`, and the same numbers as JSON
//! for anything that compares runs.

use serde_json::{Value, json};

use super::environment::Machine;
use super::side::{Comparison, Side};
use super::{Options, Outcome};
use crate::bench_stack::{rates_cell, thousands};

/// The run's result with the machine it ran on, read at its start and at its end (the machine
/// is shared: a load average that rose says the numbers may be low).
pub(super) struct Report {
    pub(super) machine_before: Machine,
    pub(super) machine_after: Machine,
    pub(super) outcome: Outcome,
}

impl Report {
    pub(super) fn print(&self, options: &Options) {
        let (m, v) = (&self.machine_before, &self.outcome.versions);
        println!();
        println!(
            "machine: {} CPUs ({}), load average {} at the start, {} at the end; PostgreSQL {} \
             (fsync {}, synchronous_commit {}), Redis {}; {} callers, median of {} rounds x \
             {:.1} s per side",
            m.cpus,
            m.model,
            m.load_average,
            self.machine_after.load_average,
            v.postgres,
            v.fsync,
            v.synchronous_commit,
            v.redis,
            options.concurrency,
            options.rounds,
            options.seconds
        );
        println!();
        println!("| measurement | Sluice | baseline | ratio | target | met |");
        println!("| --- | ---: | ---: | ---: | ---: | --- |");
        for comparison in &self.outcome.comparisons {
            println!("{}", comparison.row());
        }
        println!();
        println!(
            "| side | per round (/s) | median (/s) | p50 ms | p99 ms | CPU µs per answer: this \
             process (and pgbench) + Redis + PostgreSQL |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: |");
        // The durable Sluice side appears in two comparisons; print it once.
        let mut printed: Vec<&str> = Vec::new();
        for comparison in &self.outcome.comparisons {
            for side in [&comparison.sluice, &comparison.baseline] {
                if side.rates.is_empty() || printed.contains(&side.name.as_str()) {
                    continue;
                }
                printed.push(&side.name);
                println!("{}", side.row());
            }
        }
        if let Some(problem) = &self.outcome.problem {
            println!();
            println!("MEASUREMENT PROBLEM: {problem}");
        }
    }

    pub(super) fn json(&self, options: &Options) -> Value {
        let (m, v) = (&self.machine_before, &self.outcome.versions);
        let comparisons: Vec<Value> = self
            .outcome
            .comparisons
            .iter()
            .map(Comparison::json)
            .collect();
        json!({
            "machine": {
                "cpus": m.cpus,
                "model": m.model,
                "load_average_start": m.load_average,
                "load_average_end": self.machine_after.load_average,
                "postgres": v.postgres,
                "fsync": v.fsync,
                "synchronous_commit": v.synchronous_commit,
                "redis": v.redis,
            },
            "settings": {
                "concurrency": options.concurrency,
                "seconds": options.seconds,
                "rounds": options.rounds,
                "connections": options.connections,
                "redis_pool": options.redis_pool,
                "tickets": options.tickets,
            },
            "comparisons": comparisons,
            "problem": self.outcome.problem,
        })
    }
}

impl Comparison {
    /// The comparison's row of the first table.
    fn row(&self) -> String {
        let number = |side: &Side| side.median().map_or("–".into(), thousands);
        let baseline = match &self.skipped {
            Some(why) => format!("skipped: {why}"),
            None => number(&self.baseline),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.measurement,
            number(&self.sluice),
            baseline,
            self.ratio().map_or("–".into(), |r| format!("{r:.2}×")),
            self.target.map_or("–".into(), |t| format!("≥ {t:.2}×")),
            match self.met() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "–",
            }
        )
    }

    fn json(&self) -> Value {
        json!({
            "measurement": self.measurement,
            "sluice": self.sluice.json(),
            "baseline": self.baseline.json(),
            "ratio": self.ratio(),
            "target_ratio": self.target,
            "met": self.met(),
            "skipped": self.skipped,
            "problem": self.problem,
        })
    }
}

impl Side {
    /// The side's row of the second table.
    fn row(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.name,
            rates_cell(self.rates.iter().copied()),
            self.median().map_or("–".into(), thousands),
            ms(self.latency_ms(0.5)),
            ms(self.latency_ms(0.99)),
            self.cpu_per_answer()
                .map_or("–".into(), |(here, redis, postgres)| format!(
                    "{here:.0} + {redis:.0} + {postgres:.0}"
                )),
        )
    }

    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "median_per_second": self.median(),
            "rounds_per_second": self.rates,
            "p50_ms": self.latency_ms(0.5),
            "p99_ms": self.latency_ms(0.99),
            "cpu_us_per_answer": self.cpu_per_answer().map(|(here, redis, postgres)| json!({
                "this_process": here,
                "redis": redis,
                "postgres": postgres,
            })),
        })
    }
}
