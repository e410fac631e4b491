//! FIFO after a rebuild: right after Redis lost (part of) the projection and enqueues are
//! accepted again, the ticket positions of the commands still waiting must follow their
//! `queue_seq` within each queue.
//!
//! The commands are polled in descending `queue_seq` (positions only shrink over time, so a
//! later poll of an earlier command can only show a smaller position, never hide an
//! inversion). A rebuild can meet an almost empty backlog, with no two commands of one queue
//! to compare; a run whose checks compared no pair at all proves nothing, and is judged a
//! violation (see `checks`).

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
            let answer = shared.poll(1, *id, ticket).await;
            if let Answer::Http {
                status: 200, body, ..
            } = answer
                && body["data"]["status"] == "accepted"
                && let Some(position) = body["data"]["queue"]["position"].as_u64()
            {
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
                check.compared += 1;
                if pos_a >= pos_b {
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
