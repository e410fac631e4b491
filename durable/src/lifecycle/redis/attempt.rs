//! What a started attempt writes: `renew`, `attempt_status`, `start_tokens`, `requeue`.

use std::time::Duration;

use fred::prelude::*;

use super::{clamp_i64, is_not_ready};
use crate::DurableError;
use crate::ids::{CommandId, NamespaceId};
use crate::lifecycle::attempt::AttemptId;
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_redis::asked_keys::call_asking;

/// A started command that PostgreSQL moved back to waiting.
#[derive(Debug, Clone)]
pub struct Requeued<'a> {
    pub command_id: CommandId,
    /// The attempt given back; None for a command Redis shows waiting (its queue entry lost).
    pub attempt: Option<AttemptId>,
    pub namespace_id: NamespaceId,
    pub command: &'a str,
    pub resource_key: &'a str,
    pub queue_seq: i64,
    /// `accepted` or `retry_wait`.
    pub status: CommandStatus,
    pub updated_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    Done,
    /// Not the attempt on record (admitted again, ended, or unknown): nothing changed.
    Stale,
    NotReady,
}

/// `requeue.lua`.
pub async fn requeue(
    redis: &Projection,
    keys: &AppKeys,
    back: &Requeued<'_>,
) -> Result<Requeue, DurableError> {
    let suffix = AppKeys::queue_suffix(back.namespace_id, back.command, back.resource_key);
    let mut script_keys = vec![
        keys.meta(),
        keys.count(),
        keys.queue_by_suffix(&suffix),
        keys.command(back.command_id),
        keys.resource_ready(back.namespace_id, back.command),
        keys.ready(),
        keys.turn(),
    ];
    script_keys.extend(keys.command_permits(
        back.namespace_id,
        back.command,
        back.resource_key,
        &[],
    ));
    let args: Vec<Value> = vec![
        back.command_id.to_string().into(),
        back.attempt
            .map(|a| a.to_string())
            .unwrap_or_default()
            .into(),
        back.queue_seq.into(),
        back.namespace_id.to_string().into(),
        back.command.into(),
        suffix.into(),
        back.status.as_str().into(),
        back.updated_at.clone().into(),
    ];
    let answer = call_asking("requeue.lua", script_keys, |keys| {
        redis.requeue(keys, args.clone())
    })
    .await?;
    match answer.as_str().as_deref() {
        Some("OK") => Ok(Requeue::Done),
        Some("STALE") => Ok(Requeue::Stale),
        Some("NOT_READY") => Ok(Requeue::NotReady),
        _ => Err(DurableError::script("requeue.lua", "unknown verdict")),
    }
}

/// `renew.lua`: extends the permits of each `(command, attempt)` for `lease_ms` from Redis time.
/// `permits` are the lease zsets the caller expects them to hold (what it derived when it took
/// them, [`AppKeys::command_permits`]); any other the script asks for. Returns None when the
/// projection is not trusted, else whether each attempt still holds every permit (false: lost;
/// stop it).
pub async fn renew(
    redis: &Projection,
    keys: &AppKeys,
    attempts: &[(CommandId, AttemptId)],
    permits: &[String],
    lease_ms: u64,
) -> Result<Option<Vec<bool>>, DurableError> {
    if attempts.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let mut script_keys = Vec::with_capacity(attempts.len() + 1);
    script_keys.push(keys.meta());
    let mut args: Vec<Value> = Vec::with_capacity(2 * attempts.len() + 1);
    args.push(clamp_i64(lease_ms).into());
    for (id, attempt) in attempts {
        script_keys.push(keys.command(*id));
        args.push(id.to_string().into());
        args.push(attempt.to_string().into());
    }
    // Each permit once, after the status hashes.
    let expected: std::collections::BTreeSet<&String> = permits.iter().collect();
    script_keys.extend(expected.into_iter().cloned());
    let answer = call_asking("renew.lua", script_keys, |keys| {
        redis.renew(keys, args.clone())
    })
    .await?;
    if is_not_ready(&answer) {
        return Ok(None);
    }
    let renewed: Vec<bool> = match answer {
        Value::Array(items) => items.iter().map(|v| v.as_i64() == Some(1)).collect(),
        _ => return Err(DurableError::script("renew.lua", "not a list")),
    };
    if renewed.len() != attempts.len() {
        return Err(DurableError::script("renew.lua", "one answer per attempt"));
    }
    Ok(Some(renewed))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Marked,
    /// Not this attempt's any more, or a permit lapsed: the attempt is lost.
    Lost,
    NotReady,
}

/// How `attempt_status.lua` extends the permits of the command it marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extend {
    /// Every permit to last this long from now, provided each is still live.
    Live(Duration),
    /// Every permit to last this long from now, lapsed or missing ones put back (the permit
    /// sweeper, for a command PostgreSQL has running).
    Restore(Duration),
}

/// `attempt_status.lua`: shows `status` for a started attempt, after extending its permits if asked.
/// `permits` are the lease zsets the caller expects it to hold ([`AppKeys::command_permits`],
/// or none known): an extension asks for any other.
#[allow(clippy::too_many_arguments)]
pub async fn set_attempt_status(
    redis: &Projection,
    keys: &AppKeys,
    command_id: CommandId,
    attempt: AttemptId,
    status: CommandStatus,
    updated_at: String,
    extend: Option<Extend>,
    permits: &[String],
) -> Result<Mark, DurableError> {
    let millis = |d: Duration| clamp_i64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let (extend_ms, mode) = match extend {
        None => (0, ""),
        Some(Extend::Live(d)) => (millis(d), ""),
        Some(Extend::Restore(d)) => (millis(d), "restore"),
    };
    let args: Vec<Value> = vec![
        command_id.to_string().into(),
        attempt.to_string().into(),
        status.as_str().into(),
        updated_at.into(),
        extend_ms.into(),
        mode.into(),
    ];
    let mut script_keys = vec![keys.meta(), keys.command(command_id)];
    if extend.is_some() {
        script_keys.extend(permits.iter().cloned());
    }
    let answer = call_asking("attempt_status.lua", script_keys, |keys| {
        redis.attempt_status(keys, args.clone())
    })
    .await?;
    if is_not_ready(&answer) {
        return Ok(Mark::NotReady);
    }
    Ok(if answer.as_i64() == Some(1) {
        Mark::Marked
    } else {
        Mark::Lost
    })
}

/// One rate-limited limit key a retry must take a token from.
#[derive(Debug, Clone)]
pub struct RateKey {
    pub bucket: String,
    pub per_second: u32,
    pub burst: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retake {
    Taken,
    /// Every bucket has a token after this wait.
    Wait(Duration),
    NotReady,
}

/// `start_tokens.lua`: one start token from every bucket, or none.
pub async fn take_start_tokens(
    redis: &Projection,
    keys: &AppKeys,
    buckets: &[RateKey],
) -> Result<Retake, DurableError> {
    if buckets.is_empty() {
        return Ok(Retake::Taken);
    }
    let mut script_keys = vec![keys.meta()];
    script_keys.extend(buckets.iter().map(|b| b.bucket.clone()));
    let args = buckets
        .iter()
        .flat_map(|b| [i64::from(b.per_second).into(), i64::from(b.burst).into()])
        .collect();
    let answer: Value = redis.start_tokens(script_keys, args).await?;
    if is_not_ready(&answer) {
        return Ok(Retake::NotReady);
    }
    Ok(match answer.as_i64() {
        Some(wait) if wait > 0 => Retake::Wait(Duration::from_millis(wait as u64)),
        _ => Retake::Taken,
    })
}

/// `still_held.lua`: whether each `(command, attempt)` is still held — the attempt on record with
/// every permit live. None when the projection is not trusted (nothing can be told).
pub async fn still_held(
    redis: &Projection,
    keys: &AppKeys,
    attempts: &[(CommandId, AttemptId)],
) -> Result<Option<Vec<bool>>, DurableError> {
    if attempts.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let mut script_keys = vec![keys.meta()];
    let mut args: Vec<Value> = Vec::with_capacity(2 * attempts.len());
    for (id, attempt) in attempts {
        script_keys.push(keys.command(*id));
        args.push(id.to_string().into());
        args.push(attempt.to_string().into());
    }
    let answer = call_asking("still_held.lua", script_keys, |keys| {
        redis.still_held(keys, args.clone())
    })
    .await?;
    if is_not_ready(&answer) {
        return Ok(None);
    }
    match answer {
        Value::Array(items) if items.len() == attempts.len() => {
            Ok(Some(items.iter().map(|v| v.as_i64() == Some(1)).collect()))
        }
        _ => Err(DurableError::script(
            "still_held.lua",
            "one answer per attempt",
        )),
    }
}
