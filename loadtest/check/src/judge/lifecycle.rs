//! Nothing accepted is lost, nothing appears that nobody asked for, every command ends once and
//! as its deciders decided: judged from PostgreSQL's rows and the backend's decisions.

use std::collections::HashMap;

use super::{Evidence, Stats, Violation};
use crate::backend::Decision;
use crate::plan::Handler;

const FINAL: [&str; 6] = [
    "succeeded",
    "rejected",
    "failed",
    "expired",
    "cancelled",
    "needs_review",
];

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    let by_id: HashMap<&str, &crate::rows::CommandRow> =
        evidence.rows.iter().map(|r| (r.id.as_str(), r)).collect();
    stats.accepted = evidence.rows.len();

    // Every acceptance answered is a row of that intent.
    for e in &evidence.records.enqueues {
        if !matches!(e.status, Some(200 | 202)) || e.other_input {
            continue;
        }
        let Some(id) = &e.command_id else { continue };
        match by_id.get(id.as_str()) {
            None => violations.push(Violation::new(
                "acceptance-lost",
                format!(
                    "intent {}: answered {:?} with command {id}, which PostgreSQL does not hold",
                    e.n, e.status
                ),
            )),
            Some(row) if Evidence::intent_of(row) != Some(e.n) => violations.push(Violation::new(
                "acceptance-lost",
                format!(
                    "intent {}: command {id} is the row of {}",
                    e.n, row.request_key
                ),
            )),
            Some(_) => {}
        }
    }
    // Every row is an intent the checker sent, with its subject.
    for row in &evidence.rows {
        let Some(n) = Evidence::intent_of(row) else {
            violations.push(Violation::new(
                "phantom-command",
                format!("row {} has key {}", row.id, row.request_key),
            ));
            continue;
        };
        match evidence.intent(n) {
            Some(intent) if intent.subject == row.subject && intent.command == row.command => {}
            _ => violations.push(Violation::new(
                "phantom-command",
                format!(
                    "row {} ({} {}) is no intent of the plan",
                    row.id, row.command, row.subject
                ),
            )),
        }
        if !FINAL.contains(&row.status.as_str()) {
            violations.push(Violation::new(
                "not-ended",
                format!(
                    "intent {n} ({}) is still {} after the drain",
                    row.id, row.status
                ),
            ));
        }
        // Under review: an attempt's outcome is unknown, which a fault can make so (a delivery
        // cut off, an executor stopped or cut off from Redis past its lease) while it ran: from its first start to its end, or to its last delivery when no end is recorded.
        let last_delivery = evidence
            .deliveries
            .iter()
            .filter(|d| d.command_id == row.id)
            .filter_map(|d| d.ended_ms)
            .max();
        let ran_from = row.started_ms.unwrap_or(row.accepted_ms);
        let ran_to = row
            .finished_ms
            .or(last_delivery)
            .unwrap_or(ran_from)
            .max(ran_from);
        // Or its deadline passed while it ran (a request out when the time was up: whether the
        // backend acted is what a reviewer decides), within a second of its last answer.
        let deadline_ms = evidence
            .decl
            .command(&row.command)
            .map(|c| row.accepted_ms + i64::from(c.deadline_seconds) * 1000);
        let deadline_while_running =
            deadline_ms.is_some_and(|deadline| ran_from <= deadline && deadline <= ran_to + 1_000);
        if row.status == "needs_review"
            && !deadline_while_running
            && !evidence.doubt_excuse(ran_from, ran_to)
        {
            violations.push(Violation::new(
                "review-without-doubt",
                format!("intent {n} ({}) ended needs_review with no fault that could leave its outcome unknown", row.id),
            ));
        }
    }

    // What polls saw: a final status never changes, and it is PostgreSQL's.
    let mut polls: HashMap<&str, Vec<&crate::journal::PollRecord>> = HashMap::new();
    for p in &evidence.records.polls {
        if p.status == Some(200) {
            polls.entry(p.command_id.as_str()).or_default().push(p);
        }
    }
    for (id, mut list) in polls {
        list.sort_by_key(|p| p.answered_ms);
        let mut final_seen: Option<(&str, i64)> = None;
        for p in list {
            let Some(state) = p.state.as_deref() else {
                continue;
            };
            if let Some((seen, at)) = final_seen
                && state != seen
                && p.sent_ms > at
            {
                violations.push(Violation::new(
                    "final-status-changed",
                    format!("command {id}: polled {seen}, later {state}"),
                ));
            }
            if FINAL.contains(&state) {
                final_seen.get_or_insert((state, p.answered_ms));
                if let Some(row) = by_id.get(id)
                    && row.status != state
                {
                    violations.push(Violation::new(
                        "final-status-not-the-truth",
                        format!(
                            "command {id}: a poll said {state}, PostgreSQL says {}",
                            row.status
                        ),
                    ));
                }
            }
        }
    }

    // Decisions: a webhook command ends as the backend decided, unless it ended first.
    for row in &evidence.rows {
        let Some(n) = Evidence::intent_of(row) else {
            continue;
        };
        let Some(decl) = evidence.decl.command(&row.command) else {
            continue;
        };
        if !matches!(decl.handler, Handler::Webhook { .. }) {
            continue;
        }
        let decided = evidence.decisions.get(&n);
        let expected = decided.map(|(d, _)| match d {
            Decision::Succeeded => "succeeded",
            Decision::Rejected => "rejected",
            Decision::Failed => "failed",
        });
        let result_n = row.result.as_ref().and_then(|r| r["n"].as_u64());
        let finished = row.finished_ms.unwrap_or(i64::MIN);
        let verdict = match (row.status.as_str(), decided, expected) {
            ("succeeded", Some(_), Some("succeeded")) if result_n != Some(u64::from(n)) => Some((
                "result-not-the-decided-one",
                format!("intent {n}: result {:?}", row.result),
            )),
            (status, Some(_), Some(want)) if status == want => None,
            ("succeeded" | "rejected", _, _) => Some((
                "end-not-decided",
                format!(
                    "intent {n} ended {} but the backend decided {expected:?}",
                    row.status
                ),
            )),
            // Failed by Sluice itself (attempts exhausted): it says why.
            ("failed", None, _) if row.error_code.is_none() => Some((
                "end-not-decided",
                format!("intent {n} failed with no error code"),
            )),
            ("failed", None, _) => None,
            ("failed", Some(_), Some(want)) => Some((
                "end-not-decided",
                format!("intent {n} failed but the backend decided {want}"),
            )),
            // Cancelled, expired or under review: only when that came before the decision.
            (_, Some((_, at)), Some(want)) if finished > *at + 1_000 => Some((
                "end-not-decided",
                format!(
                    "intent {n} ended {} at {finished}, after the backend decided {want} at {at}",
                    row.status
                ),
            )),
            _ => None,
        };
        if let Some((kind, detail)) = verdict {
            violations.push(Violation::new(kind, detail));
        }
    }
    // A cancel that answered `cancelled` is PostgreSQL's end.
    for c in &evidence.records.cancels {
        if c.state.as_deref() != Some("cancelled") {
            continue;
        }
        let row = evidence
            .rows
            .iter()
            .find(|r| Evidence::intent_of(r) == Some(c.n));
        if let Some(row) = row
            && row.status != "cancelled"
        {
            violations.push(Violation::new(
                "cancel-not-kept",
                format!(
                    "intent {}: :cancel answered cancelled, PostgreSQL says {}",
                    c.n, row.status
                ),
            ));
        }
    }
}
