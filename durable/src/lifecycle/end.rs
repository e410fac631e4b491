//! Every way a command ends, PostgreSQL first, then its Redis side (`land.lua`):
//! - `land`: an attempt's result (or its deadline), fenced by the attempt;
//! - `cancel`: a waiting command ends at once; a started one records the intent;
//! - `complete`: a backend's authoritative result, whoever holds the command;
//! - and the Redis side of what a sweeper or a failed claim found in PostgreSQL.
//!
//! The Redis side of an end is made again while the projection is not trusted
//! ([`super::until_ready`]); if it still cannot be made, the permit sweeper frees the permits of
//! ended rows and the next admission of a stale queue entry lands it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::attempt::AttemptId;
use super::redis::{Ending, Requeue, Requeued, land as land_script, requeue};
use super::row_state::RowState;
use super::{Stores, until_ready};
use crate::DurableError;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_store::command_record;
use sluice_store::outbox::queries::CommandRecord;
use sluice_store::outbox::rfc3339;

/// A final state (or `needs_review`) an attempt writes.
#[derive(Debug, Clone)]
pub struct Outcome<'a> {
    pub status: CommandStatus,
    pub result: Option<&'a Value>,
    pub error: Option<(&'a str, &'a str)>,
}

/// How an end's Redis side is made: for how long it is tried again while the projection is not
/// trusted, and for how long the ended status stays readable by ticket polls.
#[derive(Debug, Clone, Copy)]
pub struct Projecting {
    pub retention_ms: i64,
    pub patience: Duration,
}

/// Where a command ends, for its Redis side.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub id: CommandId,
    pub namespace_id: NamespaceId,
    pub command: &'a str,
    pub resource_key: &'a str,
    /// Its rendered limit keys when the caller has them (an executor's claimed row): their
    /// permits are passed to land.lua up front instead of asked for.
    pub limit_keys: &'a [[String; 2]],
}

/// `land`, PostgreSQL side: writes `outcome` on the row only while `attempt` still holds it.
/// Returns the landing time, or None when the attempt lost the row (its lease lapsed and it was
/// rescued, a `:complete` decided it, …): then this result must not show anywhere.
pub async fn land_attempt(
    stores: Stores<'_>,
    id: CommandId,
    attempt: AttemptId,
    outcome: &Outcome<'_>,
) -> Result<Option<DateTime<Utc>>, DurableError> {
    let (code, message) = outcome.error.unzip();
    // Transition `land`.
    Ok(sqlx::query_file_scalar!(
        "queries/land.sql",
        id as _,
        attempt.as_uuid(),
        outcome.status as _,
        outcome.result,
        code,
        message
    )
    .fetch_optional(stores.pg)
    .await?)
}

/// The Redis side of an end that PostgreSQL committed: out of its queue, permits released,
/// counted out once, the status shown to ticket polls. Made again while the projection is not
/// trusted, for at most `patience`; false when it could not be made (logged: the sweepers
/// repair it).
pub async fn project_end(
    stores: Stores<'_>,
    keys: &AppKeys,
    place: Place<'_>,
    outcome: &Outcome<'_>,
    updated_at: DateTime<Utc>,
    projecting: Projecting,
) -> bool {
    let status = outcome.status;
    let ending = Ending {
        command_id: place.id,
        namespace_id: place.namespace_id,
        command: place.command,
        resource_key: place.resource_key,
        limit_keys: place.limit_keys,
        status,
        updated_at: rfc3339(updated_at),
        result: outcome.result.map(Value::to_string),
        error: outcome.error,
        retention_ms: projecting.retention_ms,
    };
    let landed = until_ready(stores, keys.application_id(), projecting.patience, || {
        land_script(stores.redis, keys, &ending)
    })
    .await;
    match landed {
        Ok(Some(_)) => true,
        Ok(None) => {
            tracing::warn!(command_id = %place.id, %status, "end not projected while the projection was rebuilt; the sweepers repair it");
            false
        }
        Err(error) => {
            sluice_metrics::storage_error(&error);
            tracing::warn!(command_id = %place.id, %error, "end not projected; its permits lapse and the sweepers repair it");
            false
        }
    }
}

/// The Redis side of a requeue PostgreSQL committed (or of a waiting row Redis lost track of),
/// made again while the projection is not trusted, for at most `patience`. True when this call
/// put the command back; false when it was not the attempt on record (nothing to do) or could
/// not be made (logged: the reconciler and the permit sweeper repair it).
pub async fn project_requeue(
    stores: Stores<'_>,
    keys: &AppKeys,
    back: &Requeued<'_>,
    patience: Duration,
) -> bool {
    let requeued = until_ready(stores, keys.application_id(), patience, || async {
        Ok(match requeue(stores.redis, keys, back).await? {
            Requeue::NotReady => None,
            done => Some(done),
        })
    })
    .await;
    match requeued {
        Ok(Some(Requeue::Done)) => true,
        Ok(Some(_)) => false,
        Ok(None) => {
            tracing::warn!(command_id = %back.command_id, "requeue not projected while the projection was rebuilt; the sweepers repair it");
            false
        }
        Err(error) => {
            sluice_metrics::storage_error(&error);
            tracing::warn!(command_id = %back.command_id, %error, "requeue not projected; the reconciler repairs it");
            false
        }
    }
}

/// The Redis side of whatever PostgreSQL says of a row now (a head that could not be claimed, a
/// row a sweeper changed, a permit that lapsed): waiting rows go back in line under the attempt
/// Redis has on record (`attempt`, else the row's own), ended ones land; rows an attempt or a
/// backend holds are theirs and are left alone. Returns false for those left alone (and for a
/// Redis side that could not be made).
pub async fn project_current(
    stores: Stores<'_>,
    keys: &AppKeys,
    retention_ms: i64,
    patience: Duration,
    state: &RowState,
    attempt: Option<AttemptId>,
) -> bool {
    let row = &state.row;
    match row.status {
        // Held between two webhook attempts: its attempt decides, like an executing one.
        CommandStatus::RetryWait if state.held => false,
        CommandStatus::Accepted | CommandStatus::RetryWait => {
            let back = Requeued {
                command_id: row.id,
                attempt: attempt.or(state.attempt),
                namespace_id: row.namespace_id,
                command: &row.command,
                resource_key: &row.resource_key,
                queue_seq: row.queue_seq,
                status: row.status,
                updated_at: rfc3339(row.updated_at),
            };
            project_requeue(stores, keys, &back, patience).await
        }
        CommandStatus::Executing | CommandStatus::Running => false,
        status => {
            let place = Place {
                id: row.id,
                namespace_id: row.namespace_id,
                command: &row.command,
                resource_key: &row.resource_key,
                limit_keys: &[],
            };
            let error = state
                .error_code
                .as_deref()
                .map(|c| (c, state.error_message.as_deref().unwrap_or("")));
            project_end(
                stores,
                keys,
                place,
                &Outcome {
                    status,
                    result: state.result.as_ref(),
                    error,
                },
                row.updated_at,
                Projecting {
                    retention_ms,
                    patience,
                },
            )
            .await
        }
    }
}

// ---------------------------------------------------------------------------------------------
// cancel

/// What a cancel did.
#[derive(Debug, Clone)]
pub struct Cancelled {
    pub record: CommandRecord,
    /// The command was waiting and is now `cancelled`.
    pub ended: bool,
}

/// `cancel`: waiting → `cancelled` at once; executing/running → only the intent is recorded (the
/// handler's authoritative result or the deadline decides); final → unchanged. A command between
/// two webhook attempts whose earlier attempt may have reached the backend unanswered
/// (`retry_wait`, in doubt) is not waiting but executing in all but name: intent only, and the
/// next attempt, with the same idempotency key, learns the authoritative result.
pub async fn cancel(
    stores: Stores<'_>,
    namespace_id: NamespaceId,
    id: CommandId,
    retention_ms: i64,
    patience: Duration,
) -> Result<Option<Cancelled>, DurableError> {
    // Transition `cancel`.
    let Some(row) = sqlx::query_file!("queries/cancel.sql", id as _, namespace_id as _)
        .fetch_optional(stores.pg)
        .await?
    else {
        return Ok(None);
    };
    let ended = row.now_cancelled;
    let record = command_record!(row);
    if ended {
        let keys = AppKeys::new(record.row.application_id);
        project_end(
            stores,
            &keys,
            place_of(&record),
            &Outcome {
                status: CommandStatus::Cancelled,
                result: None,
                error: None,
            },
            record.row.updated_at,
            Projecting {
                retention_ms,
                patience,
            },
        )
        .await;
    }
    Ok(Some(Cancelled { record, ended }))
}

fn place_of(record: &CommandRecord) -> Place<'_> {
    Place {
        id: record.row.id,
        namespace_id: record.row.namespace_id,
        command: &record.row.command,
        resource_key: &record.row.resource_key,
        limit_keys: &[],
    }
}

// ---------------------------------------------------------------------------------------------
// complete

/// A decisive result as a backend reports it: its `200` answer, or a `:complete`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// `succeeded`, `rejected` or `failed`.
    pub status: CommandStatus,
    pub result: Option<Value>,
    pub error: Option<(String, String)>,
    /// Dependencies of cached reads the result changed (a webhook's `invalidate`).
    pub invalidate: Vec<String>,
}

/// Longest error code a backend may report (`:complete` or a webhook's `200` answer).
pub const MAX_ERROR_CODE_CHARS: usize = 64;

/// The one rule for a backend's error code, wherever it reports it: 1 to
/// [`MAX_ERROR_CODE_CHARS`] printable ASCII characters, so it is safe in records, logs and
/// headers.
pub fn is_error_code(code: &str) -> bool {
    (1..=MAX_ERROR_CODE_CHARS).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_graphic())
}

/// What a `:complete` came to.
#[derive(Debug, Clone)]
pub enum Completion {
    /// This call decided the command.
    Landed(CommandRecord),
    /// The same result had already landed: nothing changed.
    Repeated(CommandRecord),
    /// Another result (or a cancel, or expiry) decided it already.
    Conflict(CommandRecord),
    /// No backend holds it (never sent, or waiting again after attempts that certainly did
    /// not reach one or were refused): there is nothing a backend could complete.
    NotStarted(CommandRecord),
    NotFound,
}

/// `complete`: lands `reported` on command `id` of `namespace_id` under the row lock (the first
/// authoritative result wins; its repeat changes nothing; a different one is a conflict), then
/// its Redis side. It ends the command whoever holds it: the attempt in hand finds the row
/// decided and lets go without landing.
pub async fn complete(
    stores: Stores<'_>,
    namespace_id: NamespaceId,
    id: CommandId,
    reported: &Reported,
    retention_ms: i64,
    patience: Duration,
) -> Result<Completion, DurableError> {
    let mut tx = stores.pg.begin().await?;
    // The command it decides, under its row lock.
    let current = sqlx::query_file!("queries/complete_lock.sql", id as _, namespace_id as _)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(current) = current else {
        return Ok(Completion::NotFound);
    };
    let in_doubt = current.in_doubt;
    let current = command_record!(current);
    let (code, message) = reported.error.clone().unzip();
    if current.row.is_terminal() {
        let same = current.row.status == reported.status
            && current.result == reported.result
            && current.error_code == code;
        return Ok(if same {
            Completion::Repeated(current)
        } else {
            Completion::Conflict(current)
        });
    }
    // Waiting and not in doubt: every attempt so far certainly left the backend without the
    // command (a connection that never opened, an explicit 429 or 5xx), so no backend holds
    // it. Counting attempts alone would take a refused connection for a delivered request.
    if current.attempts == 0 || (current.row.is_waiting() && !in_doubt) {
        return Ok(Completion::NotStarted(current));
    }
    // Transition `complete`: the backend's authoritative result.
    let row = sqlx::query_file!(
        "queries/complete.sql",
        id as _,
        reported.status as _,
        reported.result,
        code,
        message
    )
    .fetch_one(&mut *tx)
    .await?;
    let record = command_record!(row);
    tx.commit().await?;
    let keys = AppKeys::new(record.row.application_id);
    let error = record
        .error_code
        .as_deref()
        .map(|code| (code, record.error_message.as_deref().unwrap_or("")));
    project_end(
        stores,
        &keys,
        place_of(&record),
        &Outcome {
            status: record.row.status,
            result: record.result.as_ref(),
            error,
        },
        record.row.updated_at,
        Projecting {
            retention_ms,
            patience,
        },
    )
    .await;
    Ok(Completion::Landed(record))
}
