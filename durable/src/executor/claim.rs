//! Admitted heads become `executing` rows leased to this executor, in one statement. A head
//! whose row is no longer waiting (cancelled or expired meanwhile) is not claimed; the caller
//! mirrors its real state and gives its permits back.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use uuid::Uuid;

use crate::DurableError;

/// A row this executor now holds.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: Uuid,
    pub namespace_id: Uuid,
    pub command: String,
    pub subject: String,
    pub resource_key: String,
    pub queue_seq: i64,
    pub input: serde_json::Value,
    pub accepted_at: DateTime<Utc>,
    pub deadline_at: DateTime<Utc>,
    pub attempts: i32,
    /// Rendered limit keys, `[[template, key], …]`.
    pub limit_keys: Vec<[String; 2]>,
    /// Whether an earlier attempt may have reached the backend without a decisive answer.
    pub was_in_doubt: bool,
}

/// Claims the waiting rows among `ids` for `owner` with a lease of `lease_ms`.
///
/// The rows are found by primary key alone and their state checked once locked: with the state
/// in the lookup, a planner without fresh statistics (a burst just filled the table) combines
/// the key lookup with a scan of the whole waiting backlog's partial index on every claim. Rows in
/// `external` (their handler reaches outside, e.g. a webhook) are marked in doubt from here on:
/// if this executor dies mid-request, nobody knows whether the backend acted.
pub async fn claim(
    pg: &PgPool,
    ids: &[Uuid],
    external: &[Uuid],
    owner: Uuid,
    lease_ms: u64,
) -> Result<Vec<Claimed>, DurableError> {
    let rows = sqlx::query(
        "WITH old AS (
             SELECT id, in_doubt, status, lease_owner FROM commands
              WHERE id = ANY($1)
              FOR UPDATE)
         UPDATE commands c
            SET status = 'executing', attempts = c.attempts + 1, lease_owner = $2,
                lease_expires_at = now() + make_interval(secs => $3::double precision / 1000),
                updated_at = now(), in_doubt = c.in_doubt OR c.id = ANY($4)
           FROM old
          WHERE c.id = old.id AND old.status IN ('accepted', 'retry_wait')
            AND old.lease_owner IS NULL
         RETURNING c.id, c.namespace_id, c.command, c.subject, c.resource_key, c.queue_seq,
                   c.input, c.accepted_at, c.deadline_at, c.attempts, c.limit_keys,
                   old.in_doubt AS was_in_doubt",
    )
    .bind(ids)
    .bind(owner)
    .bind(lease_ms as f64)
    .bind(external)
    .fetch_all(pg)
    .await?;
    rows.iter()
        .map(|row| {
            let limit_keys: serde_json::Value = row.try_get("limit_keys")?;
            Ok(Claimed {
                id: row.try_get("id")?,
                namespace_id: row.try_get("namespace_id")?,
                command: row.try_get("command")?,
                subject: row.try_get("subject")?,
                resource_key: row.try_get("resource_key")?,
                queue_seq: row.try_get("queue_seq")?,
                input: row.try_get("input")?,
                accepted_at: row.try_get("accepted_at")?,
                deadline_at: row.try_get("deadline_at")?,
                attempts: row.try_get("attempts")?,
                limit_keys: serde_json::from_value(limit_keys).unwrap_or_default(),
                was_in_doubt: row.try_get("was_in_doubt")?,
            })
        })
        .collect()
}

/// What PostgreSQL says of a row whose Redis side is in doubt: a head that could not be claimed,
/// a permit that lapsed, a row a sweeper just changed.
#[derive(Debug, Clone)]
pub struct RowState {
    pub id: Uuid,
    pub application_id: Uuid,
    pub namespace_id: Uuid,
    pub command: String,
    pub resource_key: String,
    pub queue_seq: i64,
    pub status: String,
    pub updated_at: DateTime<Utc>,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// An executor holds it (executing, or `retry_wait` between two webhook attempts).
    pub held: bool,
}

impl RowState {
    pub fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            application_id: row.try_get("application_id")?,
            namespace_id: row.try_get("namespace_id")?,
            command: row.try_get("command")?,
            resource_key: row.try_get("resource_key")?,
            queue_seq: row.try_get("queue_seq")?,
            status: row.try_get("status")?,
            updated_at: row.try_get("updated_at")?,
            result: row.try_get("result")?,
            error_code: row.try_get("error_code")?,
            error_message: row.try_get("error_message")?,
            held: row.try_get("held")?,
        })
    }
}

pub async fn current_state(pg: &PgPool, ids: &[Uuid]) -> Result<Vec<RowState>, DurableError> {
    let rows = sqlx::query(
        "SELECT id, application_id, namespace_id, command, resource_key, queue_seq, status,
                updated_at, result, error_code, error_message, lease_owner IS NOT NULL AS held
           FROM commands WHERE id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(pg)
    .await?;
    Ok(rows
        .iter()
        .map(RowState::from_row)
        .collect::<Result<_, _>>()?)
}

/// Gives claimed rows back to their queues (the handler could not run, e.g. PostgreSQL failed
/// mid-batch). Only rows this owner still holds are touched.
pub async fn unclaim(pg: &PgPool, ids: &[Uuid], owner: Uuid) -> Result<Vec<Uuid>, DurableError> {
    Ok(sqlx::query_scalar(
        "UPDATE commands
            SET status = 'retry_wait', lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
          WHERE id = ANY($1) AND lease_owner = $2 AND status = 'executing'
         RETURNING id",
    )
    .bind(ids)
    .bind(owner)
    .fetch_all(pg)
    .await?)
}

/// Extends the leases of rows this owner still holds.
pub async fn renew(
    pg: &PgPool,
    ids: &[Uuid],
    owner: Uuid,
    lease_ms: u64,
) -> Result<u64, DurableError> {
    Ok(sqlx::query(
        "UPDATE commands
            SET lease_expires_at = now() + make_interval(secs => $3::double precision / 1000)
          WHERE id = ANY($1) AND lease_owner = $2 AND status IN ('executing', 'retry_wait')",
    )
    .bind(ids)
    .bind(owner)
    .bind(lease_ms as f64)
    .execute(pg)
    .await?
    .rows_affected())
}
