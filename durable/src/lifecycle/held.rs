//! What an attempt does while it holds a command, every write fenced by the attempt in
//! PostgreSQL and in Redis: `renew` its lease and permits, wait for a retry and start it
//! (`attempt`), hand the command to its backend (`running`), or give it back (`requeue`).
//!
//! A write that finds the attempt gone (its lease lapsed and the row was rescued, a `:complete`
//! or a cancel decided it, a newer attempt holds it) changes nothing and says so; the caller
//! stops the attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::attempt::AttemptId;
use super::claim::Claimed;
use super::redis::{Extend, Mark, RateKey, Requeued, set_attempt_status};
use super::{RUNNING_PERMIT_GRACE, Stores, until_ready};
use crate::DurableError;
use crate::ids::CommandId;
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_store::outbox::rfc3339;

pub use super::redis::Retake;

/// `renew`, Redis side (`renew.lua`): extends the permits of each `(command, attempt)` of one
/// application for `lease_ms` from Redis time; `permits` are the lease zsets the caller derived
/// when it took them. None while the projection is not trusted, else whether each attempt still
/// holds every permit (false: lost; stop it).
pub async fn renew_permits(
    stores: Stores<'_>,
    keys: &AppKeys,
    attempts: &[(CommandId, AttemptId)],
    permits: &[String],
    lease_ms: u64,
) -> Result<Option<Vec<bool>>, DurableError> {
    super::redis::renew(stores.redis, keys, attempts, permits, lease_ms).await
}

/// `renew`, PostgreSQL side: extends the leases of the attempts that still hold their rows;
/// returns those. An attempt missing from the answer lost its row: stop it.
pub async fn renew_leases(
    stores: Stores<'_>,
    attempts: &[(CommandId, AttemptId)],
    lease: Duration,
) -> Result<Vec<AttemptId>, DurableError> {
    let ids: Vec<CommandId> = attempts.iter().map(|(id, _)| *id).collect();
    let tokens: Vec<Uuid> = attempts.iter().map(|(_, a)| a.as_uuid()).collect();
    // Transition `renew`: the leases of the attempts that still hold their rows.
    let renewed: Vec<Uuid> = sqlx::query_file_scalar!(
        "queries/renew.sql",
        &ids as _,
        &tokens,
        lease.as_millis() as f64
    )
    .fetch_all(stores.pg)
    .await?;
    Ok(renewed.into_iter().map(AttemptId::from_uuid).collect())
}

/// Between two attempts: `retry_wait`, still held by this attempt (and its permits with it).
/// `in_doubt` is what is known after the attempt that just failed. Returns whether a cancel was
/// asked for, or None when the attempt lost the row.
pub async fn wait_for_retry(
    stores: Stores<'_>,
    keys: &AppKeys,
    claimed: &Claimed,
    in_doubt: bool,
    next_attempt_at: DateTime<Utc>,
    reason: &str,
) -> Result<Option<bool>, DurableError> {
    // Transition `attempt`, first half.
    let cancel: Option<bool> = sqlx::query_scalar!(
        "UPDATE commands
            SET status = 'retry_wait', in_doubt = $3, next_attempt_at = $4,
                error_code = 'WEBHOOK_RETRYING', error_message = $5, updated_at = now()
          WHERE id = $1 AND attempt_id = $2 AND status = 'executing'
         RETURNING cancel_requested",
        claimed.row.id as _,
        claimed.attempt.as_uuid(),
        in_doubt,
        next_attempt_at,
        reason,
    )
    .fetch_optional(stores.pg)
    .await?;
    if cancel.is_some() {
        show(stores, keys, claimed, CommandStatus::RetryWait).await;
    }
    Ok(cancel)
}

/// `attempt`: the next request of a held command starts — `executing` again, and in doubt until
/// it is answered. Returns its attempt number, or None when the attempt lost the row.
pub async fn start_retry(
    stores: Stores<'_>,
    keys: &AppKeys,
    claimed: &Claimed,
) -> Result<Option<i32>, DurableError> {
    // Transition `attempt`, second half.
    let number: Option<i32> = sqlx::query_file_scalar!(
        "queries/start_retry.sql",
        claimed.row.id as _,
        claimed.attempt.as_uuid()
    )
    .fetch_optional(stores.pg)
    .await?;
    if number.is_some() {
        show(stores, keys, claimed, CommandStatus::Executing).await;
    }
    Ok(number)
}

/// Whether a cancel was asked for while the attempt ran.
pub async fn cancel_requested(stores: Stores<'_>, id: CommandId) -> Result<bool, DurableError> {
    Ok(sqlx::query_scalar!(
        "SELECT cancel_requested FROM commands WHERE id = $1",
        id as _
    )
    .fetch_optional(stores.pg)
    .await?
    .unwrap_or(false))
}

/// The status a ticket poll shows while the attempt holds the command (`attempt_status.lua`); a poll shows
/// PostgreSQL's status when this misses, so a failure is only logged.
async fn show(stores: Stores<'_>, keys: &AppKeys, claimed: &Claimed, status: CommandStatus) {
    let marked = set_attempt_status(
        stores.redis,
        keys,
        claimed.row.id,
        claimed.attempt,
        status,
        rfc3339(Utc::now()),
        None,
        &[],
    )
    .await;
    if let Err(error) = marked {
        tracing::debug!(command_id = %claimed.row.id, %error, "status not shown in Redis; PostgreSQL holds it");
    }
}

/// What handing a command to its backend came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Running {
    /// `running` until `:complete` or its deadline, its permits held until then.
    Running,
    /// Decided elsewhere meanwhile (a `:complete` arrived first, a sweeper took over).
    Elsewhere,
}

/// `running`: the backend answered `202`. The permits are extended to the deadline (plus a
/// grace) **before** the row says running, so they never lapse while the backend works; then
/// nobody holds a lease on it. If the permits could not be extended (they lapsed, or Redis is
/// gone for longer than `patience`) the row still says running — the backend has it — and the
/// permit sweeper restores the permits of running rows.
pub async fn running(
    stores: Stores<'_>,
    keys: &AppKeys,
    claimed: &Claimed,
    patience: Duration,
) -> Result<Running, DurableError> {
    let until_deadline = (claimed.row.deadline_at - Utc::now())
        .to_std()
        .unwrap_or_default()
        .saturating_add(RUNNING_PERMIT_GRACE);
    // The claimed claimed names every permit: the extension is one call.
    let permits = keys.command_permits(
        claimed.row.namespace_id,
        &claimed.row.command,
        &claimed.row.resource_key,
        &claimed.limit_keys,
    );
    let extended = until_ready(stores, keys.application_id(), patience, || async {
        Ok(
            match set_attempt_status(
                stores.redis,
                keys,
                claimed.row.id,
                claimed.attempt,
                CommandStatus::Running,
                rfc3339(Utc::now()),
                Some(Extend::Live(until_deadline)),
                &permits,
            )
            .await?
            {
                Mark::NotReady => None,
                done => Some(done),
            },
        )
    })
    .await;
    match extended {
        Ok(Some(Mark::Marked)) => {}
        other => {
            tracing::warn!(command_id = %claimed.row.id, ?other, "running permits not extended; the permit sweeper restores them");
        }
    }
    // Transition `running`: nobody holds a lease on it any more; the attempt stays on record,
    // so a rebuild restores its permits under it.
    let marked: Option<DateTime<Utc>> = sqlx::query_file_scalar!(
        "queries/running.sql",
        claimed.row.id as _,
        claimed.attempt.as_uuid()
    )
    .fetch_optional(stores.pg)
    .await?;
    Ok(if marked.is_some() {
        Running::Running
    } else {
        Running::Elsewhere
    })
}

/// `requeue`: the attempt gives its command back to its queue at its original place, as
/// `retry_wait` (its handler could not run, or the executor is draining between two attempts).
/// Returns false when the attempt had already lost the row.
pub async fn requeue_held(
    stores: Stores<'_>,
    keys: &AppKeys,
    claimed: &Claimed,
    patience: Duration,
) -> Result<bool, DurableError> {
    // Transition `requeue`.
    let given: Option<DateTime<Utc>> = sqlx::query_file_scalar!(
        "queries/requeue_held.sql",
        claimed.row.id as _,
        claimed.attempt.as_uuid()
    )
    .fetch_optional(stores.pg)
    .await?;
    let Some(updated_at) = given else {
        return Ok(false);
    };
    let back = Requeued {
        command_id: claimed.row.id,
        attempt: Some(claimed.attempt),
        namespace_id: claimed.row.namespace_id,
        command: &claimed.row.command,
        resource_key: &claimed.row.resource_key,
        queue_seq: claimed.row.queue_seq,
        status: CommandStatus::RetryWait,
        updated_at: rfc3339(updated_at),
    };
    super::end::project_requeue(stores, keys, &back, patience).await;
    Ok(true)
}

/// `take_start_tokens`: before a retry's request, one start token from every rate-limited bucket of the
/// command (`start_tokens.lua`), or how long until every bucket has one.
pub async fn take_start_tokens(
    stores: Stores<'_>,
    keys: &AppKeys,
    buckets: &[RateKey],
) -> Result<Retake, DurableError> {
    super::redis::take_start_tokens(stores.redis, keys, buckets).await
}
