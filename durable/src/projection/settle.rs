//! Typed callers of the scripts that settle a reservation or a waiting command after PostgreSQL
//! has decided: `accept.lua`, `release.lua` and `finish_waiting.lua`.

use fred::prelude::*;
use uuid::Uuid;

use super::{AppKeys, Scripts};
use crate::DurableError;

/// A committed command to project into its queue.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub command_id: Uuid,
    pub namespace_id: Uuid,
    pub command: String,
    pub resource_key: String,
    pub request_key_field: String,
    pub content_sha256_hex: String,
    pub queue_seq: i64,
    pub accepted_at: String,
    pub deadline_at: String,
    /// Rendered limit keys as JSON `[[template, key], …]`, or "" when the command has none.
    pub limit_keys: String,
}

/// Queue positions right after acceptance, observed at one Redis time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedPositions {
    pub observed_at_ms: i64,
    /// 0-based position of each command of the batch, in batch order.
    pub positions: Vec<Option<u64>>,
}

/// Projects a batch of one application's committed commands.
pub async fn accept(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    batch: &[Accepted],
) -> Result<AcceptedPositions, DurableError> {
    let mut script_keys = Vec::with_capacity(2 + 4 * batch.len());
    let mut args: Vec<Value> = Vec::with_capacity(9 * batch.len());
    script_keys.push(keys.count());
    script_keys.push(keys.ready());
    for a in batch {
        script_keys.push(keys.reservations(a.namespace_id, &a.command));
        script_keys.push(keys.request_keys(a.namespace_id, &a.command));
        script_keys.push(keys.queue(a.namespace_id, &a.command, &a.resource_key));
        script_keys.push(keys.command(a.command_id));
        args.extend([
            a.command_id.to_string().into(),
            a.request_key_field.clone().into(),
            a.content_sha256_hex.clone().into(),
            a.queue_seq.into(),
            a.namespace_id.to_string().into(),
            a.command.clone().into(),
            a.accepted_at.clone().into(),
            a.deadline_at.clone().into(),
            a.limit_keys.clone().into(),
        ]);
    }
    let answer: Vec<Value> = scripts.accept.call(redis, script_keys, args).await?;
    let (first, ranks) = answer
        .split_first()
        .ok_or_else(|| DurableError::script("accept.lua", "empty answer"))?;
    Ok(AcceptedPositions {
        observed_at_ms: first.as_i64().unwrap_or_default(),
        positions: ranks.iter().map(Value::as_u64).collect(),
    })
}

/// A reservation to give back, optionally remembering the row PostgreSQL already holds for the
/// key (`"<id> <sha256hex>"`), so the next replay is answered by Redis alone.
#[derive(Debug, Clone)]
pub struct Release<'a> {
    pub command_id: Uuid,
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub request_key_field: &'a str,
    pub existing: Option<(Uuid, String)>,
}

/// Returns true if this call released the reservation (false: it had already expired).
pub async fn release(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    release: &Release<'_>,
) -> Result<bool, DurableError> {
    let script_keys = vec![
        keys.count(),
        keys.reservations(release.namespace_id, release.command),
        keys.request_keys(release.namespace_id, release.command),
    ];
    let existing = release
        .existing
        .as_ref()
        .map(|(id, digest)| format!("{id} {digest} c"))
        .unwrap_or_default();
    let args: Vec<Value> = vec![
        release.command_id.to_string().into(),
        release.request_key_field.into(),
        release.namespace_id.to_string().into(),
        release.command.into(),
        existing.into(),
    ];
    let released: i64 = scripts.release.call(redis, script_keys, args).await?;
    Ok(released == 1)
}

/// A waiting command that PostgreSQL moved to a final status without running it.
#[derive(Debug, Clone)]
pub struct FinishedWaiting<'a> {
    pub command_id: Uuid,
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub resource_key: &'a str,
    pub status: &'a str,
    pub updated_at: String,
    pub error: Option<(&'a str, &'a str)>,
    /// How long the final status stays readable in Redis.
    pub retention_ms: i64,
}

/// Returns true if this call took the command out of its queue (and so gave back its counts).
pub async fn finish_waiting(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    done: &FinishedWaiting<'_>,
) -> Result<bool, DurableError> {
    let script_keys = vec![
        keys.count(),
        keys.queue(done.namespace_id, done.command, done.resource_key),
        keys.command(done.command_id),
    ];
    let (code, message) = done.error.unwrap_or(("", ""));
    let args: Vec<Value> = vec![
        done.command_id.to_string().into(),
        done.namespace_id.to_string().into(),
        done.command.into(),
        done.status.into(),
        done.updated_at.clone().into(),
        code.into(),
        message.into(),
        done.retention_ms.into(),
    ];
    let removed: i64 = scripts
        .finish_waiting
        .call(redis, script_keys, args)
        .await?;
    Ok(removed == 1)
}
