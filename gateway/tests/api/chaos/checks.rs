//! The judgement of a chaos run: the records of the clients and of the backend against
//! PostgreSQL once every command drained. Nothing here reads Redis (its leases, counters or
//! `/v1/status`): what Redis says is what is on trial.
//!
//! The invariants live in one module each: [`super::ledger`] (every answer against the rows),
//! [`super::quota`] (the pool), [`super::order`] (`queue_seq`), [`super::delivery`] (the
//! backend's witnesses); the positions after each rebuild were checked during the run
//! ([`super::positions`]); [`super::table`] adds it up per fault kind. Each violation names its
//! fault phase and the commands; the report adds the seed.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::load::{Cancel, Intent, Poll};
use super::positions::PositionCheck;
use super::report::{Phases, Report};
use super::runner::Finished;
use super::{delivery, ledger, order, quota, table};

pub(super) const TERMINAL: [&str; 5] = ["succeeded", "rejected", "failed", "expired", "cancelled"];

/// A command row.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) id: Uuid,
    pub(super) command: String,
    pub(super) subject: String,
    pub(super) key: String,
    pub(super) status: String,
    pub(super) error_code: String,
    pub(super) result: Option<Value>,
    pub(super) queue_seq: i64,
    pub(super) resource_key: String,
    pub(super) attempts: i32,
    pub(super) finished_at: Option<DateTime<Utc>>,
}

impl Row {
    /// The allocation a quota success names.
    pub(super) fn allocation_id(&self) -> Option<String> {
        self.result.as_ref()?["allocation_id"]
            .as_str()
            .map(str::to_string)
    }
}

type RowTuple = (
    Uuid,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<Value>,
    i64,
    String,
    i32,
    Option<DateTime<Utc>>,
);

/// What the clients recorded and what PostgreSQL holds.
pub(super) struct Data {
    pub(super) intents: Vec<Intent>,
    pub(super) polls: Vec<Poll>,
    pub(super) cancels: Vec<Cancel>,
    pub(super) rows: Vec<Row>,
}

impl Data {
    async fn load(run: &Finished) -> Data {
        let rows = sqlx::query_as::<_, RowTuple>(
            "SELECT id, command, subject, request_key, status, error_code, result, queue_seq,
                    resource_key, attempts, finished_at
               FROM commands WHERE application_id = $1",
        )
        .bind(run.creds.application_id)
        .fetch_all(&run.pg)
        .await
        .expect("command rows")
        .into_iter()
        .map(
            |(
                id,
                command,
                subject,
                key,
                status,
                error_code,
                result,
                queue_seq,
                resource_key,
                attempts,
                finished_at,
            )| Row {
                id,
                command,
                subject,
                key,
                status,
                error_code: error_code.unwrap_or_default(),
                result,
                queue_seq,
                resource_key,
                attempts,
                finished_at,
            },
        )
        .collect();
        Data {
            intents: run.shared.intents.lock().expect("intents lock").clone(),
            polls: run.shared.polls.lock().expect("polls lock").clone(),
            cancels: run.shared.cancels.lock().expect("cancels lock").clone(),
            rows,
        }
    }

    pub(super) fn by_id(&self) -> HashMap<Uuid, &Row> {
        self.rows.iter().map(|r| (r.id, r)).collect()
    }
}

/// The judgement in progress: the report, and lost, duplicated and violations per phase
/// (index 0 = before the faults, p + 1 = fault p).
pub(super) struct Judge<'a> {
    pub(super) run: &'a Finished,
    pub(super) phases: Phases<'a>,
    pub(super) report: Report,
    pub(super) lost: Vec<usize>,
    pub(super) duplicated: Vec<usize>,
    pub(super) violations: Vec<usize>,
}

impl Judge<'_> {
    fn slot(phase: Option<usize>) -> usize {
        phase.map_or(0, |p| p + 1)
    }

    /// A violation in `phase`, labelled with it.
    pub(super) fn violation(&mut self, phase: Option<usize>, text: impl std::fmt::Display) {
        self.violations[Self::slot(phase)] += 1;
        let label = self.phases.label(phase);
        self.report.violations.push(format!("{label}: {text}"));
    }

    /// A violation of the whole run (no phase of its own).
    pub(super) fn violation_of_run(&mut self, text: impl std::fmt::Display) {
        self.report.violations.push(format!("whole run: {text}"));
    }

    pub(super) fn lost(&mut self, phase: Option<usize>, text: impl std::fmt::Display) {
        self.lost[Self::slot(phase)] += 1;
        self.violation(phase, format!("lost: {text}"));
    }

    pub(super) fn duplicated(
        &mut self,
        phase: Option<usize>,
        n: usize,
        text: impl std::fmt::Display,
    ) {
        self.duplicated[Self::slot(phase)] += n;
        self.violation(phase, format!("duplicated: {text}"));
    }

    pub(super) fn note(&mut self, text: impl Into<String>) {
        self.report.notes.push(text.into());
    }

    /// Lost, duplicated or violations of phase `p` (None: before the faults).
    pub(super) fn count(list: &[usize], phase: Option<usize>) -> usize {
        list[Self::slot(phase)]
    }
}

/// The phase a subject belongs to: when its first intent started.
pub(super) fn subject_phases<'a>(
    intents: &'a [Intent],
    phases: &Phases<'_>,
) -> HashMap<&'a str, Option<usize>> {
    let mut subject_phase: HashMap<&str, Option<usize>> = HashMap::new();
    for intent in intents {
        let phase = phases.of(intent.started());
        subject_phase
            .entry(&intent.subject)
            .and_modify(|p| *p = (*p).min(phase))
            .or_insert(phase);
    }
    subject_phase
}

pub(super) async fn judge(run: &Finished) -> Report {
    let data = Data::load(run).await;
    let slots = run.faults.len() + 1;
    let mut judge = Judge {
        run,
        phases: Phases {
            faults: &run.faults,
        },
        report: Report {
            seed: run.config.seed,
            account_limit: run.config.account_max_in_flight,
            logs: run.logs.clone(),
            ..Report::default()
        },
        lost: vec![0; slots],
        duplicated: vec![0; slots],
        violations: vec![0; slots],
    };
    ledger::check(&mut judge, &data);
    quota::check(&mut judge, &data).await;
    order::check(&mut judge, &data);
    delivery::check(&mut judge, &data);
    let checked: Vec<&PositionCheck> = run
        .faults
        .iter()
        .filter_map(|f| f.positions.as_ref())
        .collect();
    if !checked.is_empty() && checked.iter().all(|c| c.compared == 0) {
        judge.violation_of_run(format!(
            "FIFO after the rebuilds: {} checks compared no pair of one queue at all (the \
             backlogs were empty): the check proves nothing",
            checked.len()
        ));
    }
    for (p, fault) in run.faults.iter().enumerate() {
        if let Some(check) = &fault.positions {
            judge.note(format!(
                "{}: right after the rebuild {} commands were waiting; {} positions read, {} \
                 judged against their queue's rank read around the answer, {} neighbouring \
                 pairs compared in queue order; {} violations",
                judge.phases.label(Some(p)),
                check.waiting,
                check.polled,
                check.witnessed,
                check.compared,
                check.violations.len()
            ));
            for violation in &check.violations {
                judge.violation(Some(p), violation);
            }
        }
        if !fault.recovered_live {
            let limit = run.config.recovery_limit;
            judge.violation(
                Some(p),
                format!("no enqueue was accepted again within {limit:?}"),
            );
        }
    }
    if run.drained.is_none() {
        let limit = run.config.drain_limit;
        judge.violation_of_run(format!(
            "not drained within {limit:?} after the load stopped ({} :complete calls of the \
             backend still going)",
            run.completes_pending
        ));
    }
    table::build(&mut judge, &data);
    judge.note(format!(
        "load stopped at {:.1} s, every command terminal at {}",
        run.load_stopped.as_secs_f64(),
        run.drained.map_or("never".into(), |d: Duration| format!(
            "{:.1} s",
            d.as_secs_f64()
        ))
    ));
    judge.report
}
