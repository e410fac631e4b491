//! Acceptance order, from PostgreSQL's `queue_seq`:
//! - one sequence for the whole application: no number is handed out twice (a repeat is the
//!   sequence restarting below numbers already used, e.g. after Redis came back with an older
//!   counter);
//! - within one queue, a command whose accepting request was sent after another command's `202`
//!   arrived has the larger `queue_seq`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use uuid::Uuid;

use super::checks::{Data, Judge};
use super::load::Outcome;

/// A `202`: (acknowledged at, sent at, queue_seq, command id).
type Accepted = (Duration, Duration, i64, Uuid);

pub(super) fn check(judge: &mut Judge<'_>, data: &Data) {
    let by_id = data.by_id();
    let acknowledged: HashMap<Uuid, Duration> = data
        .intents
        .iter()
        .filter_map(|i| Some((i.command_id?, i.acknowledged_at()?)))
        .collect();

    // No queue_seq twice within the application.
    let mut by_seq: BTreeMap<i64, Vec<Uuid>> = BTreeMap::new();
    for row in &data.rows {
        by_seq.entry(row.queue_seq).or_default().push(row.id);
    }
    let repeated: Vec<(i64, Vec<Uuid>)> = by_seq
        .into_iter()
        .filter(|(_, ids)| ids.len() > 1)
        .collect();
    for (seq, ids) in repeated.iter().take(20) {
        // The phase of the later acknowledgement: where the repeat was handed out.
        let at = ids.iter().filter_map(|id| acknowledged.get(id)).max();
        let phase = at.and_then(|at| judge.phases.of(*at));
        let commands: Vec<String> = ids
            .iter()
            .map(|id| {
                let command = by_id.get(id).map_or("?", |r| r.command.as_str());
                match acknowledged.get(id) {
                    Some(at) => format!("{command} {id} acknowledged at {:.3} s", at.as_secs_f64()),
                    None => format!("{command} {id} never acknowledged"),
                }
            })
            .collect();
        judge.violation(
            phase,
            format!(
                "queue_seq {seq} was handed out {} times: {commands:?}",
                ids.len()
            ),
        );
    }
    if repeated.len() > 20 {
        judge.violation_of_run(format!(
            "{} queue_seq values in all were handed out more than once",
            repeated.len()
        ));
    }

    // Within a queue: B sent after A's 202 arrived ⇒ queue_seq(B) > queue_seq(A).
    // (acknowledged at, sent at, seq, id) per queue, for every 202 whose row exists.
    let mut per_queue: HashMap<(&str, &str), Vec<Accepted>> = HashMap::new();
    for intent in &data.intents {
        if intent.outcome != Outcome::Accepted {
            continue;
        }
        let (Some(id), Some(last)) = (intent.command_id, intent.attempts.last()) else {
            continue;
        };
        if let Some(row) = by_id.get(&id) {
            per_queue
                .entry((&row.command, &row.resource_key))
                .or_default()
                .push((last.finished, last.started, row.queue_seq, id));
        }
    }
    let mut out_of_order = 0;
    for ((command, resource), accepted) in &per_queue {
        let mut by_ack = accepted.clone();
        by_ack.sort_by_key(|a| a.0);
        let mut by_send = accepted.clone();
        by_send.sort_by_key(|a| a.1);
        let mut next = 0;
        // The acknowledged command with the highest queue_seq so far: (seq, id, sent, acked).
        let mut highest: Option<(i64, Uuid, Duration, Duration)> = None;
        for (_, sent, seq, id) in by_send {
            while next < by_ack.len() && by_ack[next].0 < sent {
                let (acked, a_sent, a_seq, a_id) = by_ack[next];
                if highest.is_none_or(|(s, ..)| a_seq > s) {
                    highest = Some((a_seq, a_id, a_sent, acked));
                }
                next += 1;
            }
            if let Some((a_seq, a_id, a_sent, acked)) = highest
                && seq <= a_seq
            {
                out_of_order += 1;
                if out_of_order <= 20 {
                    let phase = judge.phases.of(sent);
                    judge.violation(
                        phase,
                        format!(
                            "acceptance order: {command} queue {resource}: command {id} \
                             (queue_seq {seq}) was sent at {:.3} s, after command {a_id} \
                             (queue_seq {a_seq}, sent at {:.3} s) was acknowledged at {:.3} s, \
                             yet it queues ahead of it",
                            sent.as_secs_f64(),
                            a_sent.as_secs_f64(),
                            acked.as_secs_f64()
                        ),
                    );
                }
            }
        }
    }
    if out_of_order > 20 {
        judge.violation_of_run(format!(
            "acceptance order: {out_of_order} commands in all queue ahead of an earlier one"
        ));
    }
}
