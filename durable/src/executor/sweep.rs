//! Sweepers, safe to run in any number of executors: each takes a transaction-level advisory
//! lock first (one sweeper of a kind at a time; the others skip the round), works in bounded
//! batches with `FOR UPDATE SKIP LOCKED`, and mirrors what it changed into Redis after commit.

use fred::prelude::Pool;
use sqlx::PgPool;
use uuid::Uuid;

use super::claim::RowState;
use super::land::mirror_current;
use crate::DurableError;
use crate::projection::{AppKeys, Scripts, request_key_field};

/// The columns [`RowState`] reads, for the `RETURNING` of every sweep (spliced with `concat!`).
macro_rules! row_state_columns {
    () => {
        "c.id, c.application_id, c.namespace_id, c.command, c.resource_key, c.queue_seq,
         c.status, c.updated_at, c.result, c.error_code, c.error_message,
         c.lease_owner IS NOT NULL AS held"
    };
}

/// Rows per sweep round; the next round continues.
const BATCH: i64 = 500;

const LOCK_LEASES: i64 = 0x51_1CE0_0001;
const LOCK_WAITING: i64 = 0x51_1CE0_0002;
const LOCK_RETENTION: i64 = 0x51_1CE0_0003;
const LOCK_RUNNING: i64 = 0x51_1CE0_0005;

/// Runs `statement` under the advisory lock `key`; None when another executor holds it.
async fn locked(
    pg: &PgPool,
    key: i64,
    statement: &'static str,
) -> Result<Option<Vec<RowState>>, DurableError> {
    let mut tx = pg.begin().await?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
    if !got {
        return Ok(None);
    }
    let rows = sqlx::query(statement)
        .bind(BATCH)
        .fetch_all(&mut *tx)
        .await?;
    let rows = rows
        .iter()
        .map(RowState::from_row)
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit().await?;
    Ok(Some(rows))
}

/// Rows whose executor's lease lapsed (it died or stalled: `executing`, or `retry_wait` between
/// two webhook attempts): back to their queue in their original place. Past their deadline they
/// end: `expired`, or `needs_review` when an attempt may have reached a backend unanswered.
/// Their permits go back either way.
pub async fn rescue_expired_leases(
    pg: &PgPool,
    redis: &Pool,
    scripts: &Scripts,
    retention_seconds: i64,
) -> Result<usize, DurableError> {
    let Some(rows) = locked(
        pg,
        LOCK_LEASES,
        concat!(
        "WITH due AS (
             SELECT id FROM commands
              WHERE lease_owner IS NOT NULL AND lease_expires_at < now()
                AND status IN ('executing', 'retry_wait')
              ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED),
         decided AS (
             SELECT c.id,
                    CASE WHEN c.deadline_at > now() THEN 'retry_wait'
                         WHEN c.in_doubt THEN 'needs_review'
                         ELSE 'expired' END AS status
               FROM commands c JOIN due ON due.id = c.id)
         UPDATE commands c SET
             status = d.status,
             finished_at = CASE WHEN d.status = 'expired' THEN now() END,
             error_code = CASE d.status WHEN 'expired' THEN 'DEADLINE_EXCEEDED'
                                        WHEN 'needs_review' THEN 'OUTCOME_UNKNOWN'
                                        ELSE c.error_code END,
             error_message = CASE d.status
                 WHEN 'expired' THEN 'the deadline passed before the command could finish'
                 WHEN 'needs_review' THEN 'the executor stopped mid-request and the deadline passed: the backend may have acted'
                 ELSE c.error_message END,
             lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
             updated_at = now()
           FROM decided d WHERE c.id = d.id
         RETURNING ",
        row_state_columns!()
        ),
    )
    .await?
    else {
        return Ok(0);
    };
    for row in &rows {
        crate::metrics::lease_rescued(&row.status);
        if row.status == "retry_wait" {
            tracing::info!(command_id = %row.id, "lease expired; command requeued");
        }
    }
    Ok(mirror_all(redis, scripts, retention_seconds, &rows).await)
}

/// Mirrors what a sweep changed into Redis; returns how many rows it changed.
async fn mirror_all(
    redis: &Pool,
    scripts: &Scripts,
    retention_seconds: i64,
    rows: &[RowState],
) -> usize {
    for row in rows {
        let keys = AppKeys::new(row.application_id);
        mirror_current(redis, scripts, &keys, retention_seconds, row).await;
    }
    rows.len()
}

/// Running commands (a webhook answered `202`) with no `:complete` by their deadline: the
/// backend has the task and nobody knows its outcome, so `needs_review`. Their permits go back;
/// their share of `max_unfinished` stays until a late `:complete` or an operator ends them.
pub async fn review_overdue_running(
    pg: &PgPool,
    redis: &Pool,
    scripts: &Scripts,
    retention_seconds: i64,
) -> Result<usize, DurableError> {
    let Some(rows) = locked(
        pg,
        LOCK_RUNNING,
        concat!(
        "WITH due AS (
             SELECT id FROM commands
              WHERE status = 'running' AND deadline_at <= now()
              ORDER BY deadline_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE commands c SET
             status = 'needs_review', error_code = 'OUTCOME_UNKNOWN',
             error_message = 'the backend accepted the command (202) and reported no result by the deadline',
             updated_at = now()
           FROM due WHERE c.id = due.id
         RETURNING ",
        row_state_columns!()
        ),
    )
    .await?
    else {
        return Ok(0);
    };
    for row in &rows {
        tracing::warn!(command_id = %row.id, "running command reached its deadline without a result: needs_review");
    }
    Ok(mirror_all(redis, scripts, retention_seconds, &rows).await)
}

/// Waiting commands past their `max_wait` or their deadline become `expired` (`needs_review`
/// when an earlier attempt may have reached a backend unanswered).
pub async fn expire_waiting(
    pg: &PgPool,
    redis: &Pool,
    scripts: &Scripts,
    retention_seconds: i64,
) -> Result<usize, DurableError> {
    let Some(rows) = locked(
        pg,
        LOCK_WAITING,
        concat!(
        "WITH due AS (
             SELECT id FROM commands
              WHERE status IN ('accepted', 'retry_wait') AND lease_owner IS NULL
                AND (max_wait_at <= now() OR deadline_at <= now())
              ORDER BY max_wait_at LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE commands c SET
             status = CASE WHEN c.in_doubt THEN 'needs_review' ELSE 'expired' END,
             finished_at = CASE WHEN c.in_doubt THEN NULL ELSE now() END,
             updated_at = now(),
             error_code = CASE WHEN c.in_doubt THEN 'OUTCOME_UNKNOWN'
                               WHEN c.deadline_at <= now() THEN 'DEADLINE_EXCEEDED'
                               ELSE 'MAX_WAIT_EXCEEDED' END,
             error_message = CASE WHEN c.in_doubt
                                  THEN 'an earlier attempt may have reached the backend unanswered and the command ran out of time'
                                  WHEN c.deadline_at <= now()
                                  THEN 'the deadline passed while the command was waiting'
                                  ELSE 'the command waited longer than its max_wait' END
           FROM due WHERE c.id = due.id
         RETURNING ",
        row_state_columns!()
        ),
    )
    .await?
    else {
        return Ok(0);
    };
    for row in &rows {
        let keys = AppKeys::new(row.application_id);
        let done = crate::projection::settle::FinishedWaiting {
            command_id: row.id,
            namespace_id: row.namespace_id,
            command: &row.command,
            resource_key: &row.resource_key,
            status: &row.status,
            updated_at: crate::outbox::rfc3339(row.updated_at),
            error: row
                .error_code
                .as_deref()
                .map(|code| (code, row.error_message.as_deref().unwrap_or(""))),
            retention_ms: retention_seconds.saturating_mul(1_000),
        };
        if let Err(error) =
            crate::projection::settle::finish_waiting(redis, scripts, &keys, &done).await
        {
            crate::metrics::storage_error(&error);
            tracing::warn!(command_id = %row.id, %error, "expiry not mirrored");
        }
    }
    Ok(rows.len())
}

/// Deletes terminal rows older than the retention period and forgets their request keys.
pub async fn prune(
    pg: &PgPool,
    redis: &Pool,
    retention_seconds: i64,
) -> Result<usize, DurableError> {
    let mut tx = pg.begin().await?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(LOCK_RETENTION)
        .fetch_one(&mut *tx)
        .await?;
    if !got {
        return Ok(0);
    }
    let rows: Vec<(Uuid, Uuid, String, String, String)> = sqlx::query_as(
        "DELETE FROM commands WHERE id IN (
             SELECT id FROM commands
              WHERE finished_at < now() - make_interval(secs => $2::double precision)
              LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING application_id, namespace_id, command, subject, request_key",
    )
    .bind(BATCH)
    .bind(retention_seconds as f64)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    for (application_id, namespace_id, command, subject, request_key) in &rows {
        let keys = AppKeys::new(*application_id);
        let field = request_key_field(subject, request_key);
        let result: Result<i64, _> = fred::interfaces::HashesInterface::hdel(
            redis.next(),
            keys.request_keys(*namespace_id, command),
            field,
        )
        .await;
        if let Err(error) = result {
            let error = DurableError::from(error);
            crate::metrics::storage_error(&error);
            tracing::warn!(%error, "pruned request key not forgotten in Redis");
        }
    }
    Ok(rows.len())
}

const LOCK_LAPSED: i64 = 0x51_1CE0_0004;

/// Permits whose lease lapsed in Redis, reconciled with PostgreSQL: a head admitted by an
/// executor that died before claiming its row is still waiting in PostgreSQL, so it goes back in
/// line with its original sequence; a finished one is mirrored; one still executing is left to
/// its executor (or to [`rescue_expired_leases`] once its row's lease lapses too).
pub async fn reconcile_lapsed_permits(
    pg: &PgPool,
    redis: &Pool,
    scripts: &Scripts,
    apps: &[super::catalog::Application],
    retention_seconds: i64,
) -> Result<usize, DurableError> {
    let mut tx = pg.begin().await?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(LOCK_LAPSED)
        .fetch_one(&mut *tx)
        .await?;
    if !got {
        return Ok(0);
    }
    let mut reconciled = 0;
    for app in apps {
        let keys = AppKeys::new(app.id);
        for (namespace_id, command) in app.commands.keys() {
            let lapsed = crate::projection::execution::lapsed_permits(
                redis,
                scripts,
                &keys,
                *namespace_id,
                command,
                BATCH,
            )
            .await?;
            if lapsed.is_empty() {
                continue;
            }
            let states = super::claim::current_state(pg, &lapsed).await?;
            for row in &states {
                if row.status == "accepted" || row.status == "retry_wait" {
                    tracing::info!(command_id = %row.id, "permit lapsed before its claim; command back in line");
                }
                if mirror_current(redis, scripts, &keys, retention_seconds, row).await {
                    reconciled += 1;
                }
            }
            // Permits of rows that no longer exist (pruned) are simply dropped.
            let gone: Vec<String> = lapsed
                .iter()
                .filter(|id| !states.iter().any(|s| s.id == **id))
                .map(Uuid::to_string)
                .collect();
            if !gone.is_empty() {
                let _: i64 = fred::interfaces::SortedSetsInterface::zrem(
                    redis.next(),
                    keys.command_leases(*namespace_id, command),
                    gone,
                )
                .await?;
            }
        }
    }
    tx.commit().await?;
    Ok(reconciled)
}
