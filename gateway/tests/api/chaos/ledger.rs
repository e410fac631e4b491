//! Every answer the clients got against the rows of PostgreSQL, for both commands:
//! - every `202` and every `200` has its row, of the same subject and request key (else lost);
//! - one request key never names two commands, and a replay is never a new command (else
//!   duplicated);
//! - every row is terminal (`needs_review` is not: nothing here may leave an outcome unknown);
//! - every terminal status a poll, a replay or a cancel showed is the row's final one;
//! - no row exists that no client asked for.

use std::collections::{BTreeMap, HashMap, HashSet};

use uuid::Uuid;

use super::checks::{Data, Judge, TERMINAL, subject_phases};
use super::load::{Attempt, Outcome};

pub(super) fn check(judge: &mut Judge<'_>, data: &Data) {
    let by_id = data.by_id();
    let subject_phase = subject_phases(&data.intents, &judge.phases);
    let phase_of_subject = |subject: &str| subject_phase.get(subject).copied().flatten();

    // Lost: an acknowledgement without its row.
    for intent in &data.intents {
        let (Some(at), Some(id)) = (intent.acknowledged_at(), intent.command_id) else {
            continue;
        };
        let phase = judge.phases.of(at);
        match by_id.get(&id) {
            Some(row) if row.subject == intent.subject && row.key == intent.key => {}
            Some(row) => judge.lost(
                phase,
                format!(
                    "{:?} for {} subject {} key {} named command {id}, whose row is subject {} \
                     key {}",
                    intent.outcome,
                    intent.command,
                    intent.subject,
                    intent.key,
                    row.subject,
                    row.key
                ),
            ),
            None => judge.lost(
                phase,
                format!(
                    "{:?} at {:.3} s for {} subject {} key {} named command {id}, which has no \
                     row; attempts: {}",
                    intent.outcome,
                    at.as_secs_f64(),
                    intent.command,
                    intent.subject,
                    intent.key,
                    describe(&intent.attempts)
                ),
            ),
        }
    }
    for intent in &data.intents {
        if matches!(intent.outcome, Outcome::Accepted | Outcome::Replayed)
            && intent.command_id.is_none()
        {
            let phase = judge.phases.of(intent.started());
            judge.violation(
                phase,
                format!(
                    "an acknowledgement of subject {} key {} named no command id",
                    intent.subject, intent.key
                ),
            );
        }
    }

    // Duplicated: two commands for one key (in PostgreSQL or in the answers).
    let mut rows_by_key: HashMap<(&str, &str, &str), Vec<Uuid>> = HashMap::new();
    for row in &data.rows {
        rows_by_key
            .entry((&row.command, &row.subject, &row.key))
            .or_default()
            .push(row.id);
    }
    for ((command, subject, key), found) in &rows_by_key {
        if found.len() > 1 {
            judge.duplicated(
                phase_of_subject(subject),
                found.len() - 1,
                format!(
                    "{command} subject {subject} key {key} has {} rows: {found:?}",
                    found.len()
                ),
            );
        }
    }
    let mut answered: HashMap<(&str, &str, &str), HashSet<Uuid>> = HashMap::new();
    for intent in &data.intents {
        if let Some(id) = intent.command_id {
            answered
                .entry((intent.command, &intent.subject, &intent.key))
                .or_default()
                .insert(id);
        }
    }
    for ((command, subject, key), ids) in &answered {
        if ids.len() > 1 {
            judge.duplicated(
                phase_of_subject(subject),
                ids.len() - 1,
                format!(
                    "{command} subject {subject} key {key} was answered with {} command ids: \
                     {ids:?}",
                    ids.len()
                ),
            );
        }
    }
    for intent in data.intents.iter().filter(|i| i.replay_of.is_some()) {
        if intent.outcome == Outcome::Accepted {
            judge.duplicated(
                phase_of_subject(&intent.subject),
                1,
                format!(
                    "a replay of {} subject {} key {} was accepted as a new command {:?} (the \
                     original: {:?})",
                    intent.command, intent.subject, intent.key, intent.command_id, intent.replay_of
                ),
            );
        }
    }

    // Every row terminal.
    let open: Vec<String> = data
        .rows
        .iter()
        .filter(|r| !TERMINAL.contains(&r.status.as_str()))
        .map(|r| format!("{} {} {} {}", r.command, r.id, r.status, r.error_code))
        .collect();
    if !open.is_empty() {
        judge.violation_of_run(format!(
            "{} commands never reached a terminal state: {:?}",
            open.len(),
            &open[..open.len().min(20)]
        ));
    }

    // Statuses the clients saw are final.
    let observed = data
        .polls
        .iter()
        .filter_map(|p| {
            Some((
                p.command_id,
                p.status.clone()?,
                "a poll",
                p.attempt.finished,
            ))
        })
        .chain(data.intents.iter().filter_map(|i| {
            Some((
                i.command_id?,
                i.answered_status.clone()?,
                "an enqueue answer",
                i.acknowledged_at()?,
            ))
        }))
        .chain(data.cancels.iter().filter_map(|c| {
            Some((
                c.command_id,
                c.answered_status.clone()?,
                "a cancel answer",
                c.attempts.last()?.finished,
            ))
        }));
    let mut flips = 0;
    for (id, status, source, at) in observed {
        if !TERMINAL.contains(&status.as_str()) {
            continue;
        }
        let final_status = by_id.get(&id).map(|r| r.status.as_str());
        if final_status != Some(status.as_str()) {
            flips += 1;
            if flips <= 20 {
                let phase = judge.phases.of(at);
                judge.violation(
                    phase,
                    format!(
                        "command {id}: {source} at {:.3} s showed the terminal status {status}, \
                         the row ends {final_status:?}",
                        at.as_secs_f64()
                    ),
                );
            }
        }
    }
    if flips > 20 {
        judge.violation_of_run(format!(
            "{flips} terminal statuses shown in all were not final"
        ));
    }

    // Rows nobody asked for.
    let sent: HashSet<(&str, &str)> = data
        .intents
        .iter()
        .map(|i| (i.subject.as_str(), i.key.as_str()))
        .collect();
    for row in &data.rows {
        if !sent.contains(&(row.subject.as_str(), row.key.as_str())) {
            judge.violation_of_run(format!(
                "row {} ({} subject {} key {}) was never requested",
                row.id, row.command, row.subject, row.key
            ));
        }
    }

    // What the run did, for the reader.
    let outcomes = count_by(data.intents.iter().map(|i| {
        let outcome = match &i.outcome {
            Outcome::Accepted => "202".to_string(),
            Outcome::Replayed => "200".to_string(),
            Outcome::Refused(status, code) => format!("{status} {code}"),
            Outcome::Unknown => "unknown".to_string(),
        };
        format!("{} {outcome}", i.command)
    }));
    let statuses = count_by(data.rows.iter().map(|r| {
        if r.error_code.is_empty() {
            format!("{} {}", r.command, r.status)
        } else {
            format!("{} {} {}", r.command, r.status, r.error_code)
        }
    }));
    let unknown_committed = data
        .intents
        .iter()
        .filter(|i| {
            i.outcome == Outcome::Unknown
                && rows_by_key.contains_key(&(i.command, i.subject.as_str(), i.key.as_str()))
        })
        .count();
    let retried = data.intents.iter().filter(|i| i.attempts.len() > 1).count();
    let rescued = data.rows.iter().filter(|r| r.attempts > 1).count();
    judge.note(format!(
        "{} intents ({} subjects), final outcomes {outcomes:?}; {retried} needed retries; \
         {unknown_committed} of the intents still unknown after their retries were committed \
         after all",
        data.intents.len(),
        subject_phase.len(),
    ));
    judge.note(format!(
        "{} rows: {statuses:?}; {rescued} commands took more than one attempt",
        data.rows.len(),
    ));
    judge.note(format!(
        "{} ticket polls: {:?}; {} cancels: {:?}",
        data.polls.len(),
        count_by(data.polls.iter().map(|p| code_of(&p.attempt))),
        data.cancels.len(),
        count_by(data.cancels.iter().map(|c| {
            c.answered_status
                .clone()
                .unwrap_or_else(|| "no answer".into())
        }))
    ));
}

pub(super) fn code_of(attempt: &Attempt) -> String {
    match attempt.status {
        None => "no answer".into(),
        Some(status) if attempt.code.is_empty() => status.to_string(),
        Some(status) => format!("{status} {}", attempt.code),
    }
}

pub(super) fn count_by(items: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for item in items {
        *counts.entry(item).or_insert(0) += 1;
    }
    counts
}

/// The attempts of an intent, briefly.
fn describe(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|a| {
            let answer = if a.status.is_some() {
                code_of(a)
            } else {
                format!("no answer ({})", a.failure)
            };
            format!(
                "[gateway {} {:.3}–{:.3} s: {answer}]",
                a.gateway,
                a.started.as_secs_f64(),
                a.finished.as_secs_f64()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}
