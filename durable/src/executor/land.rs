//! After PostgreSQL decided: mirror the state into Redis and give the permits back.
//!
//! A Redis failure here loses nothing: PostgreSQL holds the result, tickets fall back to it,
//! the permits lapse with their leases, and the reconciler repairs the counts.

use chrono::{DateTime, Utc};
use fred::prelude::Pool;
use uuid::Uuid;

use crate::outbox::rfc3339;
use crate::projection::execution::{Finished, Requeued, finish, requeue};
use crate::projection::{AppKeys, Scripts};

/// Everything `finish.lua` needs about one command.
pub struct Mirror<'a> {
    pub id: Uuid,
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub resource_key: &'a str,
    pub status: &'a str,
    pub updated_at: DateTime<Utc>,
    pub result: Option<&'a serde_json::Value>,
    pub error: Option<(&'a str, &'a str)>,
}

pub async fn mirror_terminal(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    retention_seconds: i64,
    done: Mirror<'_>,
) {
    let suffix = AppKeys::queue_suffix(done.namespace_id, done.command, done.resource_key);
    let finished = Finished {
        command_id: done.id,
        namespace_id: done.namespace_id,
        command: done.command,
        queue_suffix: &suffix,
        status: done.status,
        updated_at: rfc3339(done.updated_at),
        result: done.result.map(|r| r.to_string()),
        error: done.error,
        retention_ms: retention_seconds.saturating_mul(1_000),
        unix_second: Utc::now().timestamp(),
    };
    if let Err(error) = finish(redis, scripts, keys, &finished).await {
        crate::metrics::storage_error(&error);
        tracing::warn!(command_id = %done.id, %error, "terminal state not mirrored; permits lapse with their lease");
    }
}

/// Everything `requeue.lua` needs about one command that waits again.
pub struct Waiting<'a> {
    pub id: Uuid,
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub resource_key: &'a str,
    pub queue_seq: i64,
    pub status: &'a str,
    pub updated_at: DateTime<Utc>,
}

impl<'a> Waiting<'a> {
    /// A claimed row given back to its queue at its original place, as `retry_wait`.
    pub fn retry_of(row: &'a super::claim::Claimed) -> Self {
        Self {
            id: row.id,
            namespace_id: row.namespace_id,
            command: &row.command,
            resource_key: &row.resource_key,
            queue_seq: row.queue_seq,
            status: "retry_wait",
            updated_at: Utc::now(),
        }
    }
}

pub async fn mirror_waiting(redis: &Pool, scripts: &Scripts, keys: &AppKeys, back: Waiting<'_>) {
    let suffix = AppKeys::queue_suffix(back.namespace_id, back.command, back.resource_key);
    let requeued = Requeued {
        command_id: back.id,
        namespace_id: back.namespace_id,
        command: back.command,
        queue_suffix: &suffix,
        queue_seq: back.queue_seq,
        status: back.status,
        updated_at: rfc3339(back.updated_at),
    };
    if let Err(error) = requeue(redis, scripts, keys, &requeued).await {
        crate::metrics::storage_error(&error);
        tracing::warn!(command_id = %back.id, %error, "requeue not mirrored; the reconciler will repair it");
    }
}

/// Mirrors what PostgreSQL says of a row whose Redis side is in doubt (admitted but not claimed,
/// or its permit lapsed): waiting rows go back in line, finished ones are mirrored, executing,
/// running and held ones belong to their executor (or backend) and are left alone. Returns false
/// for those left alone.
pub async fn mirror_current(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    retention_seconds: i64,
    row: &super::claim::RowState,
) -> bool {
    match row.status.as_str() {
        // Held between two webhook attempts: its executor decides, like an executing one.
        "retry_wait" if row.held => false,
        "accepted" | "retry_wait" => {
            let back = Waiting {
                id: row.id,
                namespace_id: row.namespace_id,
                command: &row.command,
                resource_key: &row.resource_key,
                queue_seq: row.queue_seq,
                status: &row.status,
                updated_at: row.updated_at,
            };
            mirror_waiting(redis, scripts, keys, back).await;
            true
        }
        "executing" | "running" => false,
        _ => {
            let done = Mirror {
                id: row.id,
                namespace_id: row.namespace_id,
                command: &row.command,
                resource_key: &row.resource_key,
                status: &row.status,
                updated_at: row.updated_at,
                result: row.result.as_ref(),
                error: row
                    .error_code
                    .as_deref()
                    .map(|c| (c, row.error_message.as_deref().unwrap_or(""))),
            };
            mirror_terminal(redis, scripts, keys, retention_seconds, done).await;
            true
        }
    }
}
