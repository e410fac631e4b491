//! The PostgreSQL side of a webhook command's life. Every transition is fenced by the lease
//! owner and the expected status, so whoever decides first (this executor, a `:complete`, a
//! cancel, a sweeper) wins and the others change nothing.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;

/// A terminal (or `needs_review`) state to write.
#[derive(Debug, Clone)]
pub struct Outcome<'a> {
    pub status: &'a str,
    pub result: Option<&'a Value>,
    pub error: Option<(&'a str, &'a str)>,
}

/// Lands `outcome` on a row this executor holds; the landing time, or None when the row was
/// decided elsewhere meanwhile.
pub async fn land(
    pg: &PgPool,
    id: Uuid,
    owner: Uuid,
    outcome: &Outcome<'_>,
) -> Result<Option<DateTime<Utc>>, DurableError> {
    let (code, message) = outcome.error.unzip();
    Ok(sqlx::query_scalar(
        "UPDATE commands
            SET status = $3, result = $4, error_code = $5, error_message = $6,
                finished_at = CASE WHEN $3 = 'needs_review' THEN NULL ELSE now() END,
                lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
                updated_at = now()
          WHERE id = $1 AND lease_owner = $2 AND status IN ('executing', 'retry_wait')
         RETURNING updated_at",
    )
    .bind(id)
    .bind(owner)
    .bind(outcome.status)
    .bind(outcome.result)
    .bind(code)
    .bind(message)
    .fetch_optional(pg)
    .await?)
}

/// The backend answered `202`: the command runs until `:complete` or its deadline. Nobody
/// holds a lease on it any more; its permits are held until its deadline instead.
pub async fn mark_running(
    pg: &PgPool,
    id: Uuid,
    owner: Uuid,
) -> Result<Option<DateTime<Utc>>, DurableError> {
    Ok(sqlx::query_scalar(
        "UPDATE commands
            SET status = 'running', in_doubt = true, lease_owner = NULL,
                lease_expires_at = NULL, next_attempt_at = NULL, updated_at = now()
          WHERE id = $1 AND lease_owner = $2 AND status = 'executing'
         RETURNING updated_at",
    )
    .bind(id)
    .bind(owner)
    .fetch_optional(pg)
    .await?)
}

/// Between two attempts: `retry_wait`, still held (and its permits with it) by this executor.
/// `in_doubt` is what is known after this attempt. Returns whether a cancel was asked for, or
/// None when the row was decided elsewhere.
pub async fn wait_for_retry(
    pg: &PgPool,
    id: Uuid,
    owner: Uuid,
    in_doubt: bool,
    next_attempt_at: DateTime<Utc>,
    reason: &str,
) -> Result<Option<bool>, DurableError> {
    Ok(sqlx::query_scalar(
        "UPDATE commands
            SET status = 'retry_wait', in_doubt = $3, next_attempt_at = $4,
                error_code = 'WEBHOOK_RETRYING', error_message = $5, updated_at = now()
          WHERE id = $1 AND lease_owner = $2 AND status = 'executing'
         RETURNING cancel_requested",
    )
    .bind(id)
    .bind(owner)
    .bind(in_doubt)
    .bind(next_attempt_at)
    .bind(reason)
    .fetch_optional(pg)
    .await?)
}

/// The next attempt starts: `executing` again and in doubt until it is answered. Returns the
/// attempt number, or None when the row was decided elsewhere (a cancel, a sweeper).
pub async fn start_retry(pg: &PgPool, id: Uuid, owner: Uuid) -> Result<Option<i32>, DurableError> {
    Ok(sqlx::query_scalar(
        "UPDATE commands
            SET status = 'executing', attempts = attempts + 1, in_doubt = true,
                next_attempt_at = NULL, error_code = NULL, error_message = NULL,
                updated_at = now()
          WHERE id = $1 AND lease_owner = $2 AND status = 'retry_wait'
         RETURNING attempts",
    )
    .bind(id)
    .bind(owner)
    .fetch_optional(pg)
    .await?)
}

/// Whether a cancel was asked for while the attempt ran.
pub async fn cancel_requested(pg: &PgPool, id: Uuid) -> Result<bool, DurableError> {
    Ok(
        sqlx::query_scalar("SELECT cancel_requested FROM commands WHERE id = $1")
            .bind(id)
            .fetch_optional(pg)
            .await?
            .unwrap_or(false),
    )
}

/// Gives a held row back to its queue (the executor is shutting down between two attempts).
pub async fn hand_back(pg: &PgPool, id: Uuid, owner: Uuid) -> Result<bool, DurableError> {
    Ok(sqlx::query(
        "UPDATE commands
            SET lease_owner = NULL, lease_expires_at = NULL, next_attempt_at = NULL,
                updated_at = now()
          WHERE id = $1 AND lease_owner = $2 AND status = 'retry_wait'",
    )
    .bind(id)
    .bind(owner)
    .execute(pg)
    .await?
    .rows_affected()
        == 1)
}
