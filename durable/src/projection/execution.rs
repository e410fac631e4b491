//! Typed callers of the executor's scripts: `admit.lua`, `finish.lua`, `requeue.lua`,
//! `renew.lua`, and the admission configuration they read.

use fred::prelude::*;
use uuid::Uuid;

use super::{AppKeys, Scripts};
use crate::DurableError;
use crate::declaration::CommandDecl;

/// One queue head whose permits `admit.lua` took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedHead {
    pub command_id: Uuid,
    pub queue_suffix: String,
    pub queue_seq: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    NotReady,
    Heads(Vec<AdmittedHead>),
}

#[derive(Debug, Clone, Copy)]
pub struct AdmitLimits {
    pub min_generation: i64,
    pub max_heads: u32,
    /// Resources looked at per call; bounds the script's work.
    pub scan_limit: u32,
    pub lease_ms: u64,
    /// Commands looked at per resource when the head waits only on its own limit keys.
    pub lookahead: u32,
}

pub async fn admit(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    limits: AdmitLimits,
) -> Result<Admission, DurableError> {
    let script_keys = vec![
        keys.meta(),
        keys.ready(),
        keys.admission_config(),
        keys.count(),
        keys.turn(),
    ];
    let args: Vec<Value> = vec![
        limits.min_generation.into(),
        i64::from(limits.max_heads).into(),
        i64::from(limits.scan_limit).into(),
        i64::try_from(limits.lease_ms).unwrap_or(i64::MAX).into(),
        i64::from(limits.lookahead.max(1)).into(),
    ];
    let answer: Vec<Value> = scripts.admit.call(redis, script_keys, args).await?;
    let bad = |detail: &str| DurableError::script("admit.lua", detail.to_string());
    match answer.first().and_then(Value::as_string).as_deref() {
        Some("NOT_READY") => Ok(Admission::NotReady),
        Some("OK") => {
            let rest = &answer[1..];
            if !rest.len().is_multiple_of(3) {
                return Err(bad("heads are not triples"));
            }
            rest.chunks(3)
                .map(|head| {
                    let id = head[0].as_string().ok_or_else(|| bad("id"))?;
                    Ok(AdmittedHead {
                        command_id: Uuid::parse_str(&id).map_err(|_| bad("id is not a uuid"))?,
                        queue_suffix: head[1].as_string().ok_or_else(|| bad("suffix"))?,
                        queue_seq: head[2]
                            .as_string()
                            .and_then(|s| s.parse::<f64>().ok())
                            .map(|f| f as i64)
                            .ok_or_else(|| bad("seq"))?,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Admission::Heads)
        }
        _ => Err(bad("unknown verdict")),
    }
}

/// The admission spec of a command as `admit.lua` reads it from the `cfg` hash.
pub fn admission_spec(decl: &CommandDecl) -> String {
    format!(
        "{} {} {} {}",
        decl.admission.max_in_flight,
        decl.admission.per_second,
        decl.admission.burst,
        decl.admission.max_in_flight_per_resource.unwrap_or(0)
    )
}

/// The `cfg` entries of a command's limit templates: `(field, "max_in_flight per_second burst")`,
/// 0 meaning unlimited.
pub fn limit_specs(namespace_id: Uuid, decl: &CommandDecl) -> Vec<(String, String)> {
    decl.limits
        .iter()
        .map(|limit| {
            (
                AppKeys::limit_config_field(namespace_id, &limit.key),
                format!(
                    "{} {} {}",
                    limit.max_in_flight.unwrap_or(0),
                    limit.per_second.unwrap_or(0),
                    limit.burst.or(limit.per_second).unwrap_or(0)
                ),
            )
        })
        .collect()
}

/// Replaces the admission specs of an application: commands that no longer exist (or whose
/// handler this executor cannot run) lose their entry, so `admit.lua` leaves them waiting.
pub async fn write_admission_config(
    redis: &Pool,
    keys: &AppKeys,
    specs: Vec<(String, String)>,
) -> Result<(), DurableError> {
    let client = redis.next();
    let current: Vec<String> = client.hkeys(keys.admission_config()).await?;
    let stale: Vec<String> = current
        .into_iter()
        .filter(|field| !specs.iter().any(|(f, _)| f == field))
        .collect();
    if !stale.is_empty() {
        let _: i64 = client.hdel(keys.admission_config(), stale).await?;
    }
    if !specs.is_empty() {
        let _: () = client.hset(keys.admission_config(), specs).await?;
    }
    Ok(())
}

/// A terminal state that PostgreSQL committed, to mirror.
#[derive(Debug, Clone)]
pub struct Finished<'a> {
    pub command_id: Uuid,
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub queue_suffix: &'a str,
    pub status: &'a str,
    pub updated_at: String,
    pub result: Option<String>,
    pub error: Option<(&'a str, &'a str)>,
    pub retention_ms: i64,
    pub unix_second: i64,
}

/// Returns true when this call counted the command out of `unfinished`.
pub async fn finish(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    done: &Finished<'_>,
) -> Result<bool, DurableError> {
    let script_keys = vec![
        keys.count(),
        keys.command(done.command_id),
        keys.command_leases(done.namespace_id, done.command),
        keys.resource_leases(done.queue_suffix),
        keys.drain(done.namespace_id, done.command, done.unix_second),
    ];
    let (code, message) = done.error.unwrap_or(("", ""));
    let args: Vec<Value> = vec![
        done.command_id.to_string().into(),
        done.status.into(),
        done.updated_at.clone().into(),
        done.result.clone().unwrap_or_default().into(),
        code.into(),
        message.into(),
        done.retention_ms.into(),
    ];
    let counted: i64 = scripts.finish.call(redis, script_keys, args).await?;
    Ok(counted == 1)
}

/// A command PostgreSQL moved back to waiting.
#[derive(Debug, Clone)]
pub struct Requeued<'a> {
    pub command_id: Uuid,
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub queue_suffix: &'a str,
    pub queue_seq: i64,
    pub status: &'a str,
    pub updated_at: String,
}

pub async fn requeue(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    back: &Requeued<'_>,
) -> Result<bool, DurableError> {
    let script_keys = vec![
        keys.count(),
        keys.queue_by_suffix(back.queue_suffix),
        keys.command(back.command_id),
        keys.command_leases(back.namespace_id, back.command),
        keys.resource_leases(back.queue_suffix),
        keys.ready(),
    ];
    let args: Vec<Value> = vec![
        back.command_id.to_string().into(),
        back.queue_seq.into(),
        back.namespace_id.to_string().into(),
        back.command.into(),
        back.queue_suffix.into(),
        back.status.into(),
        back.updated_at.clone().into(),
    ];
    let added: i64 = scripts.requeue.call(redis, script_keys, args).await?;
    Ok(added == 1)
}

/// Extends held permits: `(lease zset, member)` each, to `lease_ms` from Redis time.
pub async fn renew(
    redis: &Pool,
    scripts: &Scripts,
    held: &[(String, Uuid)],
    lease_ms: u64,
) -> Result<i64, DurableError> {
    if held.is_empty() {
        return Ok(0);
    }
    let mut script_keys = Vec::with_capacity(held.len());
    let mut args: Vec<Value> = Vec::with_capacity(held.len() + 1);
    args.push(i64::try_from(lease_ms).unwrap_or(i64::MAX).into());
    for (lease, id) in held {
        script_keys.push(lease.clone());
        args.push(id.to_string().into());
    }
    scripts.renew.call(redis, script_keys, args).await
}

/// One rate-limited limit key a retry must take a token from.
#[derive(Debug, Clone)]
pub struct RateKey {
    pub bucket: String,
    pub per_second: u32,
    pub burst: u32,
}

/// Takes one start token from every bucket, or none; `Ok(None)` when taken, otherwise the wait
/// until all of them have one.
pub async fn retake(
    redis: &Pool,
    scripts: &Scripts,
    buckets: &[RateKey],
) -> Result<Option<std::time::Duration>, DurableError> {
    if buckets.is_empty() {
        return Ok(None);
    }
    let keys = buckets.iter().map(|b| b.bucket.clone()).collect();
    let args = buckets
        .iter()
        .flat_map(|b| [i64::from(b.per_second).into(), i64::from(b.burst).into()])
        .collect();
    let wait_ms: i64 = scripts.retake.call(redis, keys, args).await?;
    Ok((wait_ms > 0).then(|| std::time::Duration::from_millis(wait_ms as u64)))
}

/// Permits of a command whose lease lapsed (expiry ≤ Redis time): their holder died or stalled.
pub async fn lapsed_permits(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    namespace_id: Uuid,
    command: &str,
    limit: i64,
) -> Result<Vec<Uuid>, DurableError> {
    let members: Vec<String> = scripts
        .lapsed
        .call(
            redis,
            vec![keys.command_leases(namespace_id, command)],
            vec![limit.into()],
        )
        .await?;
    Ok(members
        .iter()
        .filter_map(|m| Uuid::parse_str(m).ok())
        .collect())
}
