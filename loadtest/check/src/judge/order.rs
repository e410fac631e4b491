//! FIFO within a resource. A command `Y` that first started (PostgreSQL's `started_at`, the
//! Redis time of its admission) while an earlier command `X` of its resource stood in the queue
//! (the recorder saw it there before, and it neither started nor ended before `Y`) broke the
//! order, unless the documented lookahead allows it (`X` names limit keys and shares none with
//! `Y`), or a fault that may strand admitted work (a killed or stopped executor, a lost answer,
//! a lost Redis) came near.

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
