//! FIFO after a rebuild: right after Redis lost (part of) the projection and enqueues are
//! accepted again, the ticket positions of the commands still waiting must follow their
//! `queue_seq` within each queue.
//!
//! The commands are polled in descending `queue_seq`: a queue's drain only shrinks positions,
//! so a later poll of an earlier command shows a smaller position and cannot hide an inversion.
//! Positions can also grow: a command whose lease lapsed after the loss goes back to its queue
//! at its original `queue_seq`, ahead of later commands, and one that does so between the two
//! polls of a pair makes the pair look tied. So a pair that looks out of order is polled again,
//! the later command then the earlier one at once: an inversion of the rebuilt queue (scores out
//! of acceptance order) persists while both wait, a re-entry between two polls does not. A
//! rebuild can meet an almost empty backlog, with no two commands of one queue to compare; a
//! run whose checks compared no pair at all proves nothing, and is judged a violation (see
//! `checks`).

use std::collections::HashMap;

use uuid::Uuid;

use super::http::Answer;
use super::load::Shared;
use super::stack::Stack;

/// What one position check saw.
#[derive(Debug, Clone, Default)]
pub(super) struct PositionCheck {
    /// Commands waiting in PostgreSQL.
    pub(super) waiting: usize,
    /// Positions read from ticket polls.
    pub(super) polled: usize,
    /// Neighbouring pairs of one queue compared.
    pub(super) compared: usize,
    pub(super) violations: Vec<String>,
}

/// (command, resource key).
type Queue = (String, String);
/// (queue_seq, position, command id).
type Polled = (i64, u64, Uuid);

impl Stack {
    /// The positions check, labelled `phase` in its violations.
    pub(super) async fn check_positions(&self, shared: &Shared, phase: &str) -> PositionCheck {
        let waiting: Vec<(Uuid, String, String, i64)> = sqlx::query_as(
            "SELECT id, command, resource_key, queue_seq FROM commands
              WHERE application_id = $1 AND status = 'accepted'
                AND accepted_at < now() - interval '200 milliseconds'
              ORDER BY queue_seq DESC LIMIT 400",
        )
        .bind(self.creds.application_id)
        .fetch_all(&self.pg)
        .await
        .expect("waiting commands");
        let tickets = shared.ticket_map();
        let mut seen: HashMap<Queue, Vec<Polled>> = HashMap::new();
        let mut check = PositionCheck {
            waiting: waiting.len(),
            ..PositionCheck::default()
        };
        for (id, command, resource, seq) in &waiting {
            let Some(ticket) = tickets.get(id) else {
                continue;
            };
            if let Some(position) = waiting_position(shared, *id, ticket).await {
                check.polled += 1;
                seen.entry((command.clone(), resource.clone()))
                    .or_default()
                    .push((*seq, position, *id));
            }
        }
        for ((command, resource), mut polled) in seen {
            polled.sort();
            for pair in polled.windows(2) {
                let ((seq_a, pos_a, id_a), (seq_b, pos_b, id_b)) = (pair[0], pair[1]);
                // Two commands with one queue_seq have no order to keep (the repeat is a
                // violation of its own, judged by `order`).
                if seq_a == seq_b {
                    continue;
                }
                let out_of_order = if pos_a < pos_b {
                    false
                } else {
                    match still_out_of_order(shared, &tickets, id_a, id_b).await {
                        Some(out_of_order) => out_of_order,
                        // One of them started meanwhile: the pair cannot be judged.
                        None => continue,
                    }
                };
                check.compared += 1;
                if out_of_order {
                    check.violations.push(format!(
                        "FIFO after the rebuild ({phase}): {command} queue {resource}: command \
                         {id_a} (queue_seq {seq_a}) at position {pos_a}, command {id_b} \
                         (queue_seq {seq_b}) at position {pos_b}"
                    ));
                }
            }
        }
        check
    }
}

/// The position a ticket poll shows for a command still waiting (`accepted`), if it shows one.
async fn waiting_position(shared: &Shared, id: Uuid, ticket: &str) -> Option<u64> {
    match shared.poll(1, id, ticket).await {
        Answer::Http {
            status: 200, body, ..
        } if body["data"]["status"] == "accepted" => body["data"]["queue"]["position"].as_u64(),
        _ => None,
    }
}

/// Polls a pair that looked out of order again, the later command `b` first and the earlier `a`
/// right after: whether `a` still shows a position not smaller than `b`'s, or `None` when one of
/// them no longer waits (a pair that cannot be judged again is not judged).
async fn still_out_of_order(
    shared: &Shared,
    tickets: &HashMap<Uuid, String>,
    a: Uuid,
    b: Uuid,
) -> Option<bool> {
    let pos_b = waiting_position(shared, b, tickets.get(&b)?).await?;
    let pos_a = waiting_position(shared, a, tickets.get(&a)?).await?;
    Some(pos_a >= pos_b)
}
