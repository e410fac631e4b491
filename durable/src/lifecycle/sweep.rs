//! The transitions PostgreSQL's clock drives, safe to run in any number of executors: each
//! sweeper takes a transaction-level advisory lock first (one sweeper of a kind at a time; the
//! others skip the round), works in bounded batches with `FOR UPDATE SKIP LOCKED`, and makes the
//! Redis side of what it changed after the commit.
//! - `rescue`: a held row whose attempt lapsed (its lease in PostgreSQL and its permits in
//!   Redis: its executor died or stalled) goes back in line, or ends if its deadline passed; its
//!   attempt is over, so it can never land.
//! - `expire`: a waiting row past its `max_wait` or deadline ends; a running row past its
//!   deadline becomes `needs_review`.
//!
//! (`prune`, retention by whole days, is [`super::retention`].)

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgArguments, PgRow, Postgres};
use sqlx::query::Map;
use uuid::Uuid;

use std::collections::HashMap;

use super::Stores;
use super::attempt::AttemptId;
use super::claim::ending_waiting;
use super::end::project_current;
use super::redis::still_held;
use super::row_state::{RowState, row_state};
use crate::DurableError;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;

/// Rows per sweep round; the next round continues.
const BATCH: i64 = 500;

const LOCK_LEASES: i64 = 0x51_1CE0_0001;
const LOCK_WAITING: i64 = 0x51_1CE0_0002;
const LOCK_RUNNING: i64 = 0x51_1CE0_0005;

/// How a sweep's Redis side is made.
#[derive(Debug, Clone, Copy)]
pub struct SweepSide {
    /// How long final statuses stay readable in Redis.
    pub retention_ms: i64,
    /// How long a Redis side is made again while the projection is not trusted.
    pub patience: Duration,
}

/// Runs `statement` under the advisory lock `key`; None when another executor holds it.
async fn locked<F>(
    pg: &PgPool,
    key: i64,
    statement: Map<'_, Postgres, F, PgArguments>,
) -> Result<Option<Vec<RowState>>, DurableError>
where
    F: FnMut(PgRow) -> Result<RowState, sqlx::Error> + Send,
{
    let mut tx = pg.begin().await?;
    let got: bool = sqlx::query_scalar!(r#"SELECT pg_try_advisory_xact_lock($1) AS "got!""#, key)
        .fetch_one(&mut *tx)
        .await?;
    if !got {
        return Ok(None);
    }
    let rows = statement.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(Some(rows))
}

/// The Redis side of what a sweep changed; returns how many rows it changed.
async fn project_all(stores: Stores<'_>, side: SweepSide, rows: &[RowState]) -> usize {
    for state in rows {
        let keys = AppKeys::new(state.row.application_id);
        project_current(stores, &keys, side.retention_ms, side.patience, state, None).await;
    }
    rows.len()
}

/// `rescue`: rows whose attempt lapsed (`executing`, or `retry_wait` between two webhook
/// attempts) go back to their queue in their original place, without an attempt (the lapsed one
/// can never land again). Past their deadline they end: `expired`, or `needs_review` when an
/// attempt may have reached a backend unanswered. Their permits go back either way: the
/// returned row carries the lapsed attempt, which the Redis side is fenced on.
///
/// A lease that lapsed in PostgreSQL alone is not enough to go back in line: an attempt whose
/// permits are still live in Redis is alive and renewing them (PostgreSQL was out of its reach),
/// and its request may be at its backend; taking the command from it would start it twice and
/// free its permits while the backend still works. Such rows wait until the attempt lands, or
/// stops and its permits lapse. (Past its deadline a command ends whatever Redis says: its
/// attempt's request was cut at the deadline.) Without an answer from Redis nothing goes back.
pub async fn rescue(stores: Stores<'_>, side: SweepSide) -> Result<usize, DurableError> {
    let mut tx = stores.pg.begin().await?;
    let got: bool = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock($1) AS "got!""#,
        LOCK_LEASES
    )
    .fetch_one(&mut *tx)
    .await?;
    if !got {
        return Ok(0);
    }
    // Rows whose lease lapsed in PostgreSQL, candidates for a rescue (locked until it is
    // decided).
    let lapsed: Vec<(CommandId, ApplicationId, Option<Uuid>, bool)> = sqlx::query!(
        r#"SELECT id AS "id: CommandId", application_id AS "application_id: ApplicationId",
                  attempt_id, deadline_at > now() AS "in_time!"
             FROM commands
            WHERE lease_owner IS NOT NULL AND lease_expires_at < now()
              AND status IN ('executing', 'retry_wait')
            ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED"#,
        BATCH,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.id, row.application_id, row.attempt_id, row.in_time))
    .collect();
    let mut rescued: Vec<CommandId> = lapsed
        .iter()
        .filter(|(_, _, attempt, in_time)| !in_time || attempt.is_none())
        .map(|(id, ..)| *id)
        .collect();
    let mut by_app: HashMap<ApplicationId, Vec<(CommandId, AttemptId)>> = HashMap::new();
    for (id, application_id, attempt, in_time) in &lapsed {
        if let (true, Some(attempt)) = (*in_time, attempt) {
            by_app
                .entry(*application_id)
                .or_default()
                .push((*id, AttemptId::from_uuid(*attempt)));
        }
    }
    for (application_id, attempts) in by_app {
        let keys = AppKeys::new(application_id);
        match still_held(stores.redis, &keys, &attempts).await {
            Ok(Some(held)) => rescued.extend(
                attempts
                    .iter()
                    .zip(held)
                    .filter(|(_, held)| !held)
                    .map(|((id, _), _)| *id),
            ),
            Ok(None) => {}
            Err(error) => {
                sluice_metrics::storage_error(&error);
                tracing::debug!(%application_id, %error, "lapsed leases not rescued: Redis cannot say whether their attempts live");
            }
        }
    }
    if rescued.is_empty() {
        return Ok(0);
    }
    // Transition `rescue`: rows whose attempt lapsed, among those found lapsed and locked.
    let rows = sqlx::query_file!("queries/rescue.sql", &rescued as _)
        .map(|rescued| row_state!(rescued))
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    for state in &rows {
        sluice_metrics::lease_rescued(state.row.status);
        if state.row.status == CommandStatus::RetryWait {
            tracing::info!(command_id = %state.row.id, "lease lapsed; command back in line");
        }
    }
    Ok(project_all(stores, side, &rows).await)
}

/// `expire`, running rows (a webhook answered `202`) with no `:complete` by their deadline: the
/// backend has the task and nobody knows its outcome, so `needs_review`. Their permits go back;
/// their share of `max_unfinished` stays until a late `:complete` or an operator ends them.
pub async fn review_overdue_running(
    stores: Stores<'_>,
    side: SweepSide,
) -> Result<usize, DurableError> {
    // Running rows past their deadline (transition `review`).
    let review = sqlx::query_file!("queries/review_running.sql", BATCH).map(|due| row_state!(due));
    let Some(rows) = locked(stores.pg, LOCK_RUNNING, review).await? else {
        return Ok(0);
    };
    for state in &rows {
        tracing::warn!(command_id = %state.row.id, "running command reached its deadline without a result: needs_review");
    }
    Ok(project_all(stores, side, &rows).await)
}

/// `expire`, waiting rows past their `max_wait` or their deadline: `expired` (`needs_review` when
/// an earlier attempt may have reached a backend unanswered).
pub async fn expire_waiting(stores: Stores<'_>, side: SweepSide) -> Result<usize, DurableError> {
    // Waiting rows past their `max_wait` or deadline (transition `expire`).
    let expire = ending_waiting!(query!(
        "WITH due AS (
             SELECT id FROM commands
              WHERE status IN ('accepted', 'retry_wait') AND lease_owner IS NULL
                AND (max_wait_at <= now() OR deadline_at <= now())
              ORDER BY max_wait_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE commands c SET ",
        r#"
           FROM due WHERE c.id = due.id
         RETURNING c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
                   c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject,
                   c.request_key, c.content_sha256, c.resource_key, c.queue_seq,
                   c.status AS "status: CommandStatus", c.accepted_at, c.deadline_at,
                   c.updated_at, c.result, c.error_code, c.error_message,
                   c.lease_owner IS NOT NULL AS "held!", c.attempt_id AS "attempt: AttemptId""#,
        BATCH
    ))
    .map(|due| row_state!(due));
    let Some(rows) = locked(stores.pg, LOCK_WAITING, expire).await? else {
        return Ok(0);
    };
    Ok(project_all(stores, side, &rows).await)
}
