//! Positions after a rebuild: right after Redis lost (part of) the projection and enqueues are
//! accepted again, the ticket positions of the commands still waiting must be exact and follow
//! their `queue_seq` within each queue.
//!
//! Exact: a position told is the command's `ZRANK` in its resource queue at the answer's
//! `observed_at`, whether the gateway's memory or Redis answered. Witness: the rank the test
//! reads from that queue itself, before the poll (every rank first, then a wait of
//! [`SNAPSHOTS_OUT`], so that no snapshot pulled before those reads can answer) and right after
//! the answer. A queue only drains meanwhile, so `after <= told <= before`, unless a command
//! ahead was put back (a lease that lapsed after the loss requeues it at its old sequence, a
//! head whose claim failed goes back) and, when it started again before the `after` read, left
//! no trace in the queue. Such a command leaves one in PostgreSQL: it was not in the queue at
//! the `before` read, and its row's `attempts` grew after it (it was claimed again). So a told
//! position above `before` is excused by exactly those commands of its queue with a smaller
//! sequence, counted from PostgreSQL. An answer outside that is read again, twice, and only one
//! outside its witness every time is a violation (the queue and the answer are both Redis's;
//! the other checks judge the queue against PostgreSQL).
//!
//! Order: the commands are polled in descending `queue_seq`: a queue's drain only shrinks
//! positions, so a later poll of an earlier command shows a smaller position and cannot hide an
//! inversion. Positions can also grow: a command whose lease lapsed after the loss goes back to
//! its queue at its original `queue_seq`, ahead of later commands, and one that does so between
//! the two polls of a pair makes the pair look tied. So a pair that looks out of order is polled
//! again, the later command then the earlier one at once: an inversion of the rebuilt queue
//! (scores out of acceptance order) persists while both wait, a re-entry between two polls does
//! not. A rebuild can meet an almost empty backlog, with no two commands of one queue to
//! compare; a run whose checks compared no pair at all proves nothing, and is judged a violation
//! (see `checks`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fred::interfaces::SortedSetsInterface;
use sluice_redis::AppKeys;
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
    /// Positions judged against their queue's rank read around the answer.
    pub(super) witnessed: usize,
    pub(super) violations: Vec<String>,
}

/// (command, resource key).
type Queue = (String, String);
/// (queue_seq, position, command id).
type Polled = (i64, u64, Uuid);

/// Longer than a gateway's snapshot may answer (200 ms) plus its refresh (100 ms): an answer
/// given this long after a read of the queue is of an instant after it.
const SNAPSHOTS_OUT: Duration = Duration::from_millis(350);

/// Reads of a position outside its witness before it is judged a violation.
const WITNESS_TRIES: usize = 3;

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
        let mut candidates = Vec::new();
        let mut queued_before: HashMap<Queue, HashSet<Uuid>> = HashMap::new();
        for (id, command, resource, seq) in &waiting {
            if let Some(ticket) = tickets.get(id) {
                if let std::collections::hash_map::Entry::Vacant(queue) =
                    queued_before.entry((command.clone(), resource.clone()))
                {
                    queue.insert(self.queue_members(command, resource).await);
                }
                let before = self.rank_in_queue(command, resource, *id).await;
                candidates.push((*id, command, resource, *seq, ticket, before));
            }
        }
        // Read after the queues: a command claimed between the two reads is in neither (it was
        // in its queue, or already claimed at this count).
        let attempts_before = self.attempts_of_unfinished().await;
        let put_back = PutBack {
            queued_before: &queued_before,
            attempts_before: &attempts_before,
        };
        tokio::time::sleep(SNAPSHOTS_OUT).await;
        for (id, command, resource, seq, ticket, before) in candidates {
            let Some(position) = waiting_position(shared, id, ticket).await else {
                continue;
            };
            let after = self.rank_in_queue(command, resource, id).await;
            check.polled += 1;
            seen.entry((command.clone(), resource.clone()))
                .or_default()
                .push((seq, position, id));
            let mut problem = match (before, after) {
                (Some(before), Some(after)) => {
                    self.judged(&put_back, (command, resource, seq), position, before, after)
                        .await
                }
                // Not waiting at one of the reads: started or left, not judged.
                _ => continue,
            };
            let mut tries = 1;
            while let Some(what) = &problem
                && tries < WITNESS_TRIES
            {
                eprintln!("chaos positions: {id} read again: {what}");
                tries += 1;
                match self
                    .witnessed_position(shared, command, resource, id, ticket)
                    .await
                {
                    Some((position, before, after)) => {
                        problem = self
                            .judged(&put_back, (command, resource, seq), position, before, after)
                            .await;
                    }
                    // No longer waiting: the earlier reads are what judge it.
                    None => break,
                }
            }
            check.witnessed += 1;
            if let Some(what) = problem {
                check.violations.push(format!(
                    "exact positions ({phase}): {command} queue {resource}: command {id} \
                     (queue_seq {seq}) {what}, {tries} times"
                ));
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

impl Stack {
    /// The key of one resource queue of the run's namespace.
    fn queue_key(&self, command: &str, resource: &str) -> String {
        AppKeys::new(self.creds.application_id).queue(self.creds.namespace_id, command, resource)
    }

    /// The command's rank in its resource queue, read from Redis by the test (None: not waiting
    /// there, or Redis did not answer).
    async fn rank_in_queue(&self, command: &str, resource: &str, id: Uuid) -> Option<u64> {
        let queue = self.queue_key(command, resource);
        self.redis
            .pool()
            .next()
            .zrank(queue, id.to_string(), false)
            .await
            .ok()
            .flatten()
    }

    /// One position with its witness, read again: the rank, a wait of [`SNAPSHOTS_OUT`], the
    /// poll, the rank. None when the command no longer waits at one of them.
    async fn witnessed_position(
        &self,
        shared: &Shared,
        command: &str,
        resource: &str,
        id: Uuid,
        ticket: &str,
    ) -> Option<(u64, u64, u64)> {
        let before = self.rank_in_queue(command, resource, id).await?;
        tokio::time::sleep(SNAPSHOTS_OUT).await;
        let position = waiting_position(shared, id, ticket).await?;
        let after = self.rank_in_queue(command, resource, id).await?;
        Some((position, before, after))
    }
}

/// What the witness saw before the polls, to tell a command put back ahead of a waiter from a
/// position told wrong.
struct PutBack<'a> {
    /// The members of each queue checked, read before the polls.
    queued_before: &'a HashMap<Queue, HashSet<Uuid>>,
    /// `attempts` of every unfinished command, read from PostgreSQL after those queues.
    attempts_before: &'a HashMap<Uuid, i32>,
}

impl Stack {
    /// What is wrong with a position `told` of the command at `seq` in `queue` whose rank was
    /// `before` before the request and `after` after the answer, if anything: below `after`, or
    /// above `before` by more than the commands put back ahead of it since (see the module's
    /// documentation), counted only when needed.
    async fn judged(
        &self,
        put_back: &PutBack<'_>,
        (command, resource, seq): (&str, &str, i64),
        told: u64,
        before: u64,
        after: u64,
    ) -> Option<String> {
        if told < after {
            return Some(outside(told, before, after, 0));
        }
        if told <= before {
            return None;
        }
        let queue = (command.to_owned(), resource.to_owned());
        let queued = put_back.queued_before.get(&queue);
        let claimed_again: Vec<(Uuid, i32)> = sqlx::query_as(
            "SELECT id, attempts FROM commands
              WHERE application_id = $1 AND command = $2 AND resource_key = $3
                AND queue_seq < $4",
        )
        .bind(self.creds.application_id)
        .bind(command)
        .bind(resource)
        .bind(seq)
        .fetch_all(&self.pg)
        .await
        .expect("the attempts of the commands ahead");
        let ahead_put_back = claimed_again
            .iter()
            .filter(|(id, attempts)| {
                !queued.is_some_and(|members| members.contains(id))
                    && put_back
                        .attempts_before
                        .get(id)
                        .is_some_and(|earlier| attempts > earlier)
            })
            .count() as u64;
        (told > before + ahead_put_back).then(|| outside(told, before, after, ahead_put_back))
    }

    /// Every member of one resource queue, read from Redis by the test (empty when Redis did not
    /// answer: no command then counts as having waited in it).
    async fn queue_members(&self, command: &str, resource: &str) -> HashSet<Uuid> {
        let queue = self.queue_key(command, resource);
        let members: Vec<String> = self
            .redis
            .pool()
            .next()
            .zrange(queue, 0, -1, None, false, None, false)
            .await
            .unwrap_or_default();
        members.iter().filter_map(|m| m.parse().ok()).collect()
    }

    /// `attempts` of every unfinished command of the run's application, from PostgreSQL.
    async fn attempts_of_unfinished(&self) -> HashMap<Uuid, i32> {
        sqlx::query_as::<_, (Uuid, i32)>(
            "SELECT id, attempts FROM commands
              WHERE application_id = $1
                AND status IN ('accepted', 'executing', 'running', 'retry_wait')",
        )
        .bind(self.creds.application_id)
        .fetch_all(&self.pg)
        .await
        .expect("attempts of the unfinished commands")
        .into_iter()
        .collect()
    }
}

/// A position `told` outside its witness: the queue rank `before` the request, `after` the
/// answer, and the commands put back ahead of it meanwhile.
fn outside(told: u64, before: u64, after: u64, put_back: u64) -> String {
    format!(
        "told position {told}, its queue rank was {before} before and {after} after, \
         {put_back} commands ahead of it put back meanwhile"
    )
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
