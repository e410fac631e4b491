//! FIFO within a resource. A command `Y` that first started (PostgreSQL's `started_at`, the
//! Redis time of its admission) while an earlier command `X` of its resource stood in the queue
//! (the recorder saw it there before, and it neither started nor ended before `Y`) broke the
//! order, unless the documented lookahead allows it (`X` names limit keys and shares none with
//! `Y`), or a fault that may strand admitted work (a killed or stopped executor, a lost answer,
//! a lost Redis) came near, or `X` was admitted with `Y` and its end (a cancel, its deadline)
//! took its row before its claim did.

use std::collections::HashMap;

use super::{Evidence, Stats, Violation};
use crate::model;
use crate::rows::CommandRow;

/// Slack for the two clocks' instants (Redis `TIME` and the recorder's, on one machine).
const SLACK_MS: i64 = 2;

pub fn check(evidence: &Evidence<'_>, violations: &mut Vec<Violation>, stats: &mut Stats) {
    // Per queue: the first sample that saw each member.
    let mut first_seen: HashMap<(usize, &str), i64> = HashMap::new();
    for span in &evidence.spans {
        for (q, members) in span.content.queues.iter().enumerate() {
            for (member, _) in members {
                first_seen
                    .entry((q, member.as_str()))
                    .or_insert(span.first_us / 1000);
            }
        }
    }
    let mut by_queue: HashMap<(String, String), Vec<&CommandRow>> = HashMap::new();
    for row in &evidence.rows {
        by_queue
            .entry((row.command.clone(), row.resource_key.clone()))
            .or_default()
            .push(row);
    }
    let mut reported = 0;
    for ((command, resource), mut rows) in by_queue {
        let Some(&q) = evidence
            .queue_index
            .get(&(command.clone(), resource.clone()))
        else {
            continue;
        };
        let Some(decl) = evidence.decl.command(&command) else {
            continue;
        };
        rows.sort_by_key(|r| r.queue_seq);
        let keys: Vec<Vec<model::KeyUse>> = rows
            .iter()
            .map(|r| {
                Evidence::intent_of(r)
                    .and_then(|n| evidence.intent(n))
                    .map(|i| model::keys_of(decl, &i.input(decl), &i.subject))
                    .unwrap_or_default()
            })
            .collect();
        for (yi, y) in rows.iter().enumerate() {
            let Some(y_start) = y.started_ms else {
                continue;
            };
            for (xi, x) in rows[..yi].iter().enumerate() {
                let Some(&seen) = first_seen.get(&(q, x.id.as_str())) else {
                    continue;
                };
                // Both waited together: the order between them is judged.
                let queued_together = seen + SLACK_MS < y_start
                    && x.finished_ms.is_none_or(|f| f > y_start + SLACK_MS)
                    && x.started_ms.is_none_or(|s| s + SLACK_MS >= seen);
                if !queued_together {
                    continue;
                }
                stats.order_pairs += 1;
                if x.started_ms.is_some_and(|s| s <= y_start + SLACK_MS) {
                    continue;
                }
                stats.order_overtakes += 1;
                if model::may_overtake(&keys[xi], &keys[yi]) {
                    continue;
                }
                if lost_to_its_end(evidence, q, x, y_start) {
                    stats.order_excused += 1;
                    continue;
                }
                let until = x.started_ms.or(x.finished_ms).unwrap_or(y_start);
                if evidence.strand_excuse(seen, until) {
                    stats.order_excused += 1;
                    continue;
                }
                reported += 1;
                if reported <= 20 {
                    violations.push(Violation::new(
                        "order-broken",
                        format!(
                            "{command}/{resource}: seq {} (intent {:?}) started at {y_start} while seq {} (intent {:?}) waited in the queue since {seen} and started at {:?}, ended at {:?}",
                            y.queue_seq,
                            Evidence::intent_of(y),
                            x.queue_seq,
                            Evidence::intent_of(x),
                            x.started_ms,
                            x.finished_ms,
                        ),
                    ));
                }
            }
        }
    }
}

/// Whether `x`, which never started, was admitted together with a command that started at
/// `y_start` and lost its claim to its own end: a cancel or its deadline ended its row first
/// (the claim then finds it ended and starts nothing). It ended without a start within a lease
/// of `y_start`, and no sample after `y_start` saw it still waiting, as one that admission had
/// passed over would have been until its end.
fn lost_to_its_end(evidence: &Evidence<'_>, q: usize, x: &CommandRow, y_start: i64) -> bool {
    let (None, Some(ended)) = (x.started_ms, x.finished_ms) else {
        return false;
    };
    if !matches!(x.status.as_str(), "cancelled" | "expired")
        || ended > y_start + evidence.plan.timing.lease_ms as i64
    {
        return false;
    }
    !evidence.spans.iter().any(|span| {
        let at = span.first_us / 1000;
        at > y_start + SLACK_MS
            && at < ended
            && span
                .content
                .queues
                .get(q)
                .is_some_and(|members| members.iter().any(|(m, _)| *m == x.id))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::Records;
    use crate::plan::{Declaration, Plan};
    use crate::recorder::{Content, Span};

    fn row(status: &str, started_ms: Option<i64>, finished_ms: Option<i64>) -> CommandRow {
        CommandRow {
            id: "x".into(),
            command: "q0".into(),
            subject: "s".into(),
            request_key: "intent-1".into(),
            input: serde_json::json!({}),
            resource_key: "r0".into(),
            queue_seq: 1,
            status: status.into(),
            accepted_ms: 1_000,
            started_ms,
            finished_ms,
            attempts: 0,
            result: None,
            error_code: None,
        }
    }

    fn span(at_ms: i64, members: &[&str]) -> Span {
        Span {
            first_us: at_ms * 1_000,
            last_us: at_ms * 1_000,
            content: Content {
                queues: vec![
                    members
                        .iter()
                        .enumerate()
                        .map(|(i, m)| (m.to_string(), i as i64 + 1))
                        .collect(),
                ],
                generation: Some("1".into()),
            },
        }
    }

    #[test]
    fn a_command_cancelled_while_admitted_with_a_later_one_is_excused_one_passed_over_is_not() {
        let declaration: Declaration = serde_json::from_value(serde_json::json!({
            "commands": [], "pools": [], "rooms": [], "application": null
        }))
        .expect("a declaration");
        let plan: Plan = serde_json::from_value(serde_json::json!({
            "seed": 1, "declaration": declaration.clone(), "ops": [],
            "timing": {"lease_ms": 3000, "sweep_interval_ms": 500, "gateways": 2, "executors": 2}
        }))
        .expect("a plan");
        let records = Records::default();
        let evidence = |spans: Vec<Span>| Evidence {
            plan: &plan,
            decl: &declaration,
            records: &records,
            deliveries: Vec::new(),
            decisions: HashMap::new(),
            spans,
            queue_index: HashMap::new(),
            rows: Vec::new(),
            allocations: Vec::new(),
            places: Vec::new(),
            drained: true,
            exited: Vec::new(),
        };
        let cancelled = row("cancelled", None, Some(1_105));
        // Admitted with `y` at 1,098: gone from the next sample, its cancel took the row first.
        let admitted = evidence(vec![span(1_095, &["x", "y"]), span(1_108, &[])]);
        assert!(lost_to_its_end(&admitted, 0, &cancelled, 1_098));
        // Passed over: still waiting after `y` started, until its cancel removed it.
        let passed_over = evidence(vec![
            span(1_095, &["x", "y"]),
            span(1_101, &["x"]),
            span(1_108, &[]),
        ]);
        assert!(!lost_to_its_end(&passed_over, 0, &cancelled, 1_098));
        // An end a lease later, a command that started, or one that succeeded: not this race.
        for other in [
            row("cancelled", None, Some(1_098 + 3_001)),
            row("cancelled", Some(1_200), Some(1_300)),
            row("succeeded", None, Some(1_105)),
        ] {
            assert!(!lost_to_its_end(&admitted, 0, &other, 1_098), "{other:?}");
        }
    }
}
