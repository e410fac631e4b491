//! The outcome of a chaos run as a reader gets it: the seed, a markdown table with one row per
//! fault kind and the run's totals, notes, and every violation (each naming the seed, the fault
//! phase and the commands).

use std::fmt::Write as _;
use std::time::Duration;

use super::runner::FaultRun;
use super::schedule::{FaultKind, SEED_VARIABLE};

/// One line of the table: one fault kind (every occurrence added up), or the whole run.
#[derive(Debug, Clone, Default)]
pub(super) struct TableRow {
    pub(super) label: String,
    pub(super) times: usize,
    pub(super) requests: usize,
    pub(super) refusals: usize,
    pub(super) unknown: usize,
    pub(super) unknown_final: usize,
    pub(super) lost: usize,
    pub(super) duplicated: usize,
    /// The longest recovery of its occurrences.
    pub(super) recovery: Option<Duration>,
    /// The backend's highest count of one account during its phases.
    pub(super) peak_in_flight: usize,
    /// Violations found in its phases.
    pub(super) violations: usize,
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub(super) seed: u64,
    pub(super) account_limit: u32,
    pub(super) rows: Vec<TableRow>,
    pub(super) whole: TableRow,
    pub(super) violations: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) set_up: Duration,
    pub(super) total: Duration,
    pub(super) log_dir: Option<String>,
    pub(super) logs: String,
}

impl Report {
    /// The markdown table.
    pub(super) fn table(&self) -> String {
        let mut text = String::from(
            "| fault | times | requests during the fault | explicit refusals | unknown outcomes (final) | lost | duplicated | recovery time (longest) | backend peak in flight / limit | violations |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for row in self.rows.iter().chain(std::iter::once(&self.whole)) {
            let recovery = row
                .recovery
                .map(|d| format!("{:.2} s", d.as_secs_f64()))
                .unwrap_or_else(|| "–".into());
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} / {} | {} |",
                row.label,
                row.times,
                row.requests,
                row.refusals,
                row.unknown,
                row.unknown_final,
                row.lost,
                row.duplicated,
                recovery,
                row.peak_in_flight,
                self.account_limit,
                row.violations
            );
        }
        text
    }

    /// The seed, the table, the notes and the violations.
    pub(super) fn render(&self) -> String {
        let mut text = format!(
            "chaos seed {seed} (replay: {SEED_VARIABLE}={seed})\n\n",
            seed = self.seed
        );
        text.push_str(&self.table());
        text.push('\n');
        for note in &self.notes {
            let _ = writeln!(text, "- {note}");
        }
        let _ = writeln!(
            text,
            "- set-up {:.1} s, whole run {:.1} s",
            self.set_up.as_secs_f64(),
            self.total.as_secs_f64()
        );
        if !self.violations.is_empty() {
            let _ = writeln!(
                text,
                "\nVIOLATIONS ({}, seed {}):",
                self.violations.len(),
                self.seed
            );
            for violation in &self.violations {
                let _ = writeln!(text, "- [seed {}] {violation}", self.seed);
            }
            if let Some(dir) = &self.log_dir {
                let _ = writeln!(text, "process logs kept in {dir}");
            }
            text.push_str(&self.logs);
        }
        text
    }

    pub(super) fn assert_clean(&self) {
        assert!(
            self.violations.is_empty() && self.whole.lost == 0 && self.whole.duplicated == 0,
            "the chaos run of seed {} broke invariants (replay with {SEED_VARIABLE}={}):\n{}",
            self.seed,
            self.seed,
            self.render()
        );
    }
}

/// The phases of a run: phase `p` runs from fault `p`'s injection to the next one's (the last
/// to the end of the run); `None` is before the first fault.
pub(super) struct Phases<'a> {
    pub(super) faults: &'a [FaultRun],
}

impl Phases<'_> {
    /// The phase a moment belongs to.
    pub(super) fn of(&self, at: Duration) -> Option<usize> {
        self.faults.iter().rposition(|f| f.injected <= at)
    }

    /// `fault 3 (Redis FLUSHALL at 12.3 s)`, or `before the faults`.
    pub(super) fn label(&self, phase: Option<usize>) -> String {
        phase.map_or("before the faults".into(), |p| {
            let fault = &self.faults[p];
            format!(
                "fault {} ({} at {:.2} s)",
                p + 1,
                fault.planned.kind.label(),
                fault.injected.as_secs_f64()
            )
        })
    }

    /// Where phase `p` ends.
    pub(super) fn end(&self, p: usize, run_end: Duration) -> Duration {
        self.faults.get(p + 1).map_or(run_end, |f| f.injected)
    }

    /// The fault kinds in the table's order: every kind that occurred.
    pub(super) fn kinds(&self) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|k| self.faults.iter().any(|f| f.planned.kind == *k))
            .collect()
    }
}
