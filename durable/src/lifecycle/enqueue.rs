//! The gateway's intake: `reserve` (intake.lua) → `commit` (the group commit) → `accept`
//! (accept.lua), or `release` (release.lua) when the commit did not take the reservation.
//!
//! Every path that reserved something settles it: a commit turns the reservation into the
//! accepted command; a refusal or failure of PostgreSQL gives it back; a gateway that dies in
//! between leaves a reservation that expires by itself. A reservation of an epoch that a rebuild
//! ended is refused by the commit (`Stale`) and reserved again under the new one.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::Stores;
use super::intake_batcher::IntakeBatcher;
use super::redis::{Acceptance, Accepted, IntakeRequest, IntakeVerdict, Release, accept, release};

use super::commit::{IdempotencyKey, InsertOutcome, NewCommand};
use super::group_commit::GroupCommitter;
/// Why intake refused an intent before anything was written (a [`Refusal::Limited`]).
pub use super::redis::Limit;
use crate::DurableError;
use crate::declaration::CommandDecl;
use crate::faults::{self, Point};
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_redis::AppKeys;
use sluice_store::outbox::CommandRow;
use sluice_store::outbox::rfc3339;

/// Reservations refused by the commit because a rebuild began meanwhile, before the enqueue
/// gives up with `NotReady`.
const STALE_RESERVATIONS: u32 = 3;

/// One validated enqueue of one namespace.
pub struct Intent<'a> {
    pub keys: &'a AppKeys,
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    /// PostgreSQL's projection generation as the caller last read it.
    pub min_generation: i64,
    pub decl: &'a CommandDecl,
    pub max_unfinished: i64,
    pub max_waiting: u64,
    pub subject: &'a str,
    pub request_key: &'a str,
    pub input: &'a Map<String, Value>,
    /// What the request key is bound to (command and canonical input).
    pub digest: [u8; 32],
    pub resource_key: &'a str,
    /// Rendered limit keys, fixed at acceptance like the deadline.
    pub limit_keys: &'a [[String; 2]],
    /// The request-key map's field for (subject, request key).
    pub field: &'a str,
    pub reservation_ttl: Duration,
    /// How long a replay waits for a concurrent first request of its key to commit.
    pub replay_wait: Duration,
    /// The W3C `traceparent` the command is stored with, for its attempts to continue.
    pub trace_parent: Option<&'a str>,
}

/// Makes a projection ready when the reservation found it not ready (the gateway rebuilds it,
/// one caller per application and process, within its patience).
pub trait Readiness {
    fn ensure(&self, application_id: ApplicationId) -> impl Future<Output = bool> + Send;
}

/// How an enqueue ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Committed now as a new command, and projected unless `queue` is None.
    Accepted {
        command_id: CommandId,
        generation: i64,
        /// The queue sequence `intake.lua` handed out: its queue entry's score.
        queue_seq: i64,
        accepted_at: DateTime<Utc>,
        deadline_at: DateTime<Utc>,
        /// 0-based position and the Redis time it was observed at; None when the projection
        /// could not take it now (a rebuild or the reconciler projects it).
        queue: Option<(u64, i64)>,
    },
    /// The key is known to the projection as committed: its command.
    Replayed {
        command_id: CommandId,
    },
    /// PostgreSQL already held a row for the key (same content: a replay; else a conflict).
    Existing {
        row: CommandRow,
        generation: i64,
    },
    Refused(Refusal),
}

/// Refusals, in the order `intake.lua` checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    NotReady,
    /// The first request with this key is still between its reservation and its commit.
    StillCommitting,
    Conflict,
    Limited(Limit),
}

/// Reserves (through the application's intake batcher, with whatever else of it is waiting),
/// commits and accepts one command (or answers why not).
pub async fn enqueue<R: Readiness>(
    stores: Stores<'_>,
    intake: &IntakeBatcher,
    committer: &GroupCommitter,
    readiness: &R,
    intent: &Intent<'_>,
) -> Result<Enqueued, DurableError> {
    let started = Instant::now();
    let digest_hex = hex::encode(intent.digest);
    let mut rebuilt = false;
    let mut stale = 0;
    let mut pause = Duration::from_millis(2);
    loop {
        let command_id = CommandId::new_v7();
        let request = intake_request(intent, &digest_hex, command_id);
        let reserving = Instant::now();
        match intake.reserve(&request).await? {
            IntakeVerdict::NotReady if !rebuilt => {
                rebuilt = true;
                if !readiness.ensure(intent.application_id).await {
                    return Ok(Enqueued::Refused(Refusal::NotReady));
                }
            }
            IntakeVerdict::NotReady => return Ok(Enqueued::Refused(Refusal::NotReady)),
            IntakeVerdict::Replay {
                command_id,
                committed: true,
            } => return Ok(Enqueued::Replayed { command_id }),
            IntakeVerdict::Replay {
                committed: false, ..
            } => {
                if started.elapsed() >= intent.replay_wait {
                    return Ok(Enqueued::Refused(Refusal::StillCommitting));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            IntakeVerdict::Conflict { .. } => return Ok(Enqueued::Refused(Refusal::Conflict)),
            IntakeVerdict::Limited(limit) => return Ok(Enqueued::Refused(Refusal::Limited(limit))),
            IntakeVerdict::Reserved {
                queue_seq,
                generation,
                ..
            } => {
                let reserved_in = reserving.elapsed();
                faults::pass(Point::AfterReservation, intent.namespace_id).await?;
                let reservation = Reservation {
                    command_id,
                    queue_seq,
                    generation,
                    reserved_in,
                };
                match commit(stores, committer, intent, &reservation).await? {
                    Some(enqueued) => return Ok(enqueued),
                    // A rebuild began after the reservation: reserve again under the new epoch.
                    None if stale < STALE_RESERVATIONS => {
                        stale += 1;
                        rebuilt = false;
                    }
                    None => return Ok(Enqueued::Refused(Refusal::NotReady)),
                }
            }
        }
    }
}

fn intake_request<'a>(
    intent: &'a Intent<'_>,
    digest_hex: &'a str,
    command_id: CommandId,
) -> IntakeRequest<'a> {
    IntakeRequest {
        keys: intent.keys,
        min_generation: intent.min_generation,
        namespace_id: intent.namespace_id,
        command: &intent.decl.code,
        subject: intent.subject,
        request_key_field: intent.field,
        content_sha256_hex: digest_hex,
        command_id,
        max_unfinished: intent.max_unfinished,
        max_waiting: intent.max_waiting,
        max_queue: intent.decl.admission.max_queue,
        intake: &intent.decl.intake,
        reservation_ttl_ms: u64::try_from(intent.reservation_ttl.as_millis()).unwrap_or(u64::MAX),
    }
}

/// A reservation `intake.lua` handed out.
struct Reservation {
    command_id: CommandId,
    queue_seq: i64,
    generation: i64,
    /// How long its `reserve` took (for `sluice_intake_phase_duration_seconds`).
    reserved_in: Duration,
}

/// Commits a reservation, then accepts or releases it. None: the commit refused it as stale.
async fn commit(
    stores: Stores<'_>,
    committer: &GroupCommitter,
    intent: &Intent<'_>,
    reservation: &Reservation,
) -> Result<Option<Enqueued>, DurableError> {
    let new = NewCommand {
        id: reservation.command_id,
        application_id: intent.application_id,
        key: IdempotencyKey {
            namespace_id: intent.namespace_id,
            command: intent.decl.code.clone(),
            subject: intent.subject.to_string(),
            request_key: intent.request_key.to_string(),
        },
        content_sha256: intent.digest,
        input: Value::Object(intent.input.clone()),
        resource_key: intent.resource_key.to_string(),
        queue_seq: reservation.queue_seq,
        deadline_seconds: i32::try_from(intent.decl.deadline_seconds).unwrap_or(i32::MAX),
        max_wait_seconds: i32::try_from(intent.decl.admission.max_wait_seconds).unwrap_or(i32::MAX),
        limit_keys: serde_json::json!(intent.limit_keys),
        generation: reservation.generation,
        trace_parent: intent.trace_parent.map(str::to_string),
    };
    let committing = Instant::now();
    match committer.submit(new).await {
        Ok(InsertOutcome::Inserted {
            accepted_at,
            deadline_at,
        }) => {
            let committed_in = committing.elapsed();
            faults::pass(Point::AfterCommit, intent.namespace_id).await?;
            let projecting = Instant::now();
            let queue = project(stores, intent, reservation, accepted_at, deadline_at).await;
            sluice_metrics::intake_phase("reserve", reservation.reserved_in);
            sluice_metrics::intake_phase("commit", committed_in);
            sluice_metrics::intake_phase("project", projecting.elapsed());
            Ok(Some(Enqueued::Accepted {
                command_id: reservation.command_id,
                generation: reservation.generation,
                queue_seq: reservation.queue_seq,
                accepted_at,
                deadline_at,
                queue,
            }))
        }
        Ok(InsertOutcome::Existing(row)) => {
            let same = row.content_sha256 == intent.digest;
            release_reservation(stores, intent, reservation.command_id, same.then_some(&row)).await;
            Ok(Some(Enqueued::Existing {
                row,
                generation: reservation.generation,
            }))
        }
        Ok(InsertOutcome::Paused) => {
            release_reservation(stores, intent, reservation.command_id, None).await;
            Ok(Some(Enqueued::Refused(Refusal::Limited(Limit::Paused {
                whole_namespace: true,
            }))))
        }
        Ok(InsertOutcome::Stale) => {
            release_reservation(stores, intent, reservation.command_id, None).await;
            Ok(None)
        }
        Err(error) => {
            release_reservation(stores, intent, reservation.command_id, None).await;
            Err(error)
        }
    }
}

/// `accept`: the committed command into its queue. If Redis cannot take it now the command is
/// still accepted (PostgreSQL holds it): a rebuild (its snapshot follows this commit) or the
/// reconciler projects it, and the answer says so with no position.
async fn project(
    stores: Stores<'_>,
    intent: &Intent<'_>,
    reservation: &Reservation,
    accepted_at: DateTime<Utc>,
    deadline_at: DateTime<Utc>,
) -> Option<(u64, i64)> {
    let accepted = Accepted {
        command_id: reservation.command_id,
        namespace_id: intent.namespace_id,
        command: intent.decl.code.clone(),
        resource_key: intent.resource_key.to_string(),
        request_key_field: intent.field.to_string(),
        content_sha256_hex: hex::encode(intent.digest),
        queue_seq: reservation.queue_seq,
        accepted_at: rfc3339(accepted_at),
        deadline_at: rfc3339(deadline_at),
        limit_keys: if intent.limit_keys.is_empty() {
            String::new()
        } else {
            serde_json::json!(intent.limit_keys).to_string()
        },
    };
    match accept(
        stores.redis,
        intent.keys,
        reservation.generation,
        &[accepted],
    )
    .await
    {
        Ok(Acceptance::Projected(positions)) => positions
            .positions
            .first()
            .copied()
            .flatten()
            .map(|p| (p, positions.observed_at_ms)),
        Ok(Acceptance::Stale | Acceptance::NotReady) => None,
        Err(error) => {
            sluice_metrics::storage_error(&error);
            tracing::warn!(command_id = %reservation.command_id, %error, "committed command not projected; the reconciler will repair it");
            None
        }
    }
}

/// `release`: gives a reservation back. If Redis is unreachable now the reservation simply
/// expires.
async fn release_reservation(
    stores: Stores<'_>,
    intent: &Intent<'_>,
    command_id: CommandId,
    existing: Option<&CommandRow>,
) {
    let give = Release {
        command_id,
        namespace_id: intent.namespace_id,
        command: &intent.decl.code,
        request_key_field: intent.field,
        existing: existing.map(|e| (e.id, hex::encode(&e.content_sha256))),
    };
    if let Err(error) = release(stores.redis, intent.keys, &give).await {
        sluice_metrics::storage_error(&error);
        tracing::warn!(%command_id, %error, "reservation not released; it will expire");
    }
}
