//! The table of a run: per fault kind (every occurrence added up) the requests during the
//! fault (from its injection until it cleared and enqueues were accepted again), the explicit
//! refusals and unknown outcomes among them, the intents still unknown after their retries, lost
//! and duplicated commands and violations of its phases, the longest recovery, and the backend's
//! peak of one account's calls and tasks during its phases; then the whole run.

use std::fmt::Write as _;
use std::time::Duration;

use super::checks::{Data, Judge};
use super::ledger::{code_of, count_by};
use super::load::{Attempt, Class, Intent, Outcome};
use super::report::TableRow;
use super::runner::FaultRun;

/// When enqueues were accepted again after `fault`: the first `202` to an enqueue sent once the
/// fault was in effect (a `200` replay may come from Redis alone, so it proves less).
fn recovered_at(intents: &[Intent], fault: &FaultRun) -> Option<Duration> {
    intents
        .iter()
        .flat_map(|i| &i.attempts)
        .filter(|a| a.started >= fault.effective && a.status == Some(202))
        .map(|a| a.finished)
        .min()
}

pub(super) fn build(judge: &mut Judge<'_>, data: &Data) {
    let run = judge.run;
    let all_attempts: Vec<&Attempt> = data
        .intents
        .iter()
        .flat_map(|i| &i.attempts)
        .chain(data.polls.iter().map(|p| &p.attempt))
        .chain(data.cancels.iter().flat_map(|c| &c.attempts))
        .collect();
    let mut per_fault = Vec::new();
    for (p, fault) in run.faults.iter().enumerate() {
        let recovered = recovered_at(&data.intents, fault);
        let until = fault.cleared.max(recovered.unwrap_or(fault.cleared));
        let during: Vec<&&Attempt> = all_attempts
            .iter()
            .filter(|a| a.overlaps(fault.injected, until))
            .collect();
        let unknown_final = data
            .intents
            .iter()
            .filter(|i| {
                i.outcome == Outcome::Unknown
                    && i.attempts.iter().any(|a| a.overlaps(fault.injected, until))
            })
            .count();
        let peak = run
            .witnessed
            .peak(fault.injected, judge.phases.end(p, run.end))
            .map_or(0, |l| l.level);
        per_fault.push(TableRow {
            label: fault.planned.kind.label().to_string(),
            times: 1,
            requests: during.len(),
            refusals: during
                .iter()
                .filter(|a| a.class() == Class::Refused)
                .count(),
            unknown: during
                .iter()
                .filter(|a| a.class() == Class::Unknown)
                .count(),
            unknown_final,
            lost: Judge::count(&judge.lost, Some(p)),
            duplicated: Judge::count(&judge.duplicated, Some(p)),
            recovery: recovered.map(|r| r.saturating_sub(fault.effective)),
            peak_in_flight: peak,
            violations: Judge::count(&judge.violations, Some(p)),
        });
        let mut note = format!(
            "{}: {}, in effect at {:.2} s, back at {:.2} s, enqueues accepted again at {}",
            judge.phases.label(Some(p)),
            fault.note,
            fault.effective.as_secs_f64(),
            fault.cleared.as_secs_f64(),
            recovered.map_or("never".into(), |r| format!("{:.2} s", r.as_secs_f64()))
        );
        let codes = count_by(during.iter().map(|a| code_of(a)));
        let _ = write!(note, "; answers during the fault: {codes:?}");
        judge.note(note);
    }
    for kind in judge.phases.kinds() {
        let mut row = TableRow {
            label: kind.label().to_string(),
            ..TableRow::default()
        };
        for (fault, line) in run.faults.iter().zip(&per_fault) {
            if fault.planned.kind != kind {
                continue;
            }
            row.times += 1;
            row.requests += line.requests;
            row.refusals += line.refusals;
            row.unknown += line.unknown;
            row.unknown_final += line.unknown_final;
            row.lost += line.lost;
            row.duplicated += line.duplicated;
            row.recovery = row.recovery.max(line.recovery);
            row.peak_in_flight = row.peak_in_flight.max(line.peak_in_flight);
            row.violations += line.violations;
        }
        judge.report.rows.push(row);
    }
    judge.report.whole = TableRow {
        label: "whole run".into(),
        times: run.faults.len(),
        requests: all_attempts.len(),
        refusals: all_attempts
            .iter()
            .filter(|a| a.class() == Class::Refused)
            .count(),
        unknown: all_attempts
            .iter()
            .filter(|a| a.class() == Class::Unknown)
            .count(),
        unknown_final: data
            .intents
            .iter()
            .filter(|i| i.outcome == Outcome::Unknown)
            .count(),
        lost: judge.lost.iter().sum(),
        duplicated: judge.duplicated.iter().sum(),
        recovery: None,
        peak_in_flight: run
            .witnessed
            .peak(Duration::ZERO, run.end)
            .map_or(0, |l| l.level),
        violations: judge.report.violations.len(),
    };
}
