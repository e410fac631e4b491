//! Starting work: `admit`, and the holders of a command's permits.

use fred::prelude::*;

use super::clamp_i64;
use crate::DurableError;
use crate::ids::{CommandId, NamespaceId};
use crate::lifecycle::CommandStatus;
use crate::lifecycle::attempt::AttemptId;
use crate::projection::AppKeys;
use crate::projection::Projection;
use crate::projection::asked_keys::call_asking;

/// One waiting command whose permits `admit.lua` took, and the attempt it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedHead {
    pub command_id: CommandId,
    pub queue_suffix: String,
    pub queue_seq: i64,
    pub attempt: AttemptId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    NotReady,
    /// The heads admitted under the projection's `generation` (the claim is fenced on it), at
    /// `at_ms` (Redis time, Unix milliseconds: when their turn came, which the claim records as
    /// their `started_at`).
    Heads {
        generation: i64,
        at_ms: i64,
        heads: Vec<AdmittedHead>,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct AdmitLimits {
    pub min_generation: i64,
    pub max_heads: u32,
    /// Commands looked at, and resource visits, per call: bounds the script's work.
    pub scan_limit: u32,
    pub lease_ms: u64,
    /// Commands looked at per resource when the head waits only on its own limit keys.
    pub lookahead: u32,
}

/// `admit.lua`: starts up to `max_heads` commands, each under a fresh attempt token.
pub async fn admit(
    redis: &Projection,
    keys: &AppKeys,
    limits: AdmitLimits,
) -> Result<Admission, DurableError> {
    let script_keys = vec![
        keys.meta(),
        keys.ready(),
        keys.admission_config(),
        keys.count(),
        keys.turn(),
        keys.starts(),
        keys.started(),
        keys.seq(),
        keys.gone(),
    ];
    let mut args: Vec<Value> = vec![
        limits.min_generation.into(),
        i64::from(limits.max_heads).into(),
        i64::from(limits.scan_limit.max(1)).into(),
        clamp_i64(limits.lease_ms).into(),
        i64::from(limits.lookahead.max(1)).into(),
    ];
    args.extend((0..limits.max_heads).map(|_| Value::from(AttemptId::mint().to_string())));
    let answer: Vec<Value> = redis.admit(script_keys, args).await?;
    let bad = |detail: &str| DurableError::script("admit.lua", detail.to_string());
    match answer.first().and_then(Value::as_str).as_deref() {
        Some("NOT_READY") => Ok(Admission::NotReady),
        Some("OK") => {
            let generation = answer
                .get(1)
                .and_then(Value::as_i64)
                .ok_or_else(|| bad("generation"))?;
            let at_ms = answer
                .get(2)
                .and_then(Value::as_i64)
                .ok_or_else(|| bad("time"))?;
            let rest = &answer[3..];
            if !rest.len().is_multiple_of(4) {
                return Err(bad("heads are not quadruples"));
            }
            let heads = rest
                .chunks(4)
                .map(|head| {
                    let id = head[0].as_string().ok_or_else(|| bad("id"))?;
                    let attempt = head[3].as_string().ok_or_else(|| bad("attempt"))?;
                    Ok(AdmittedHead {
                        command_id: str::parse::<CommandId>(&id)
                            .map_err(|_| bad("id is not a uuid"))?,
                        queue_suffix: head[1].as_string().ok_or_else(|| bad("suffix"))?,
                        queue_seq: head[2]
                            .as_string()
                            .and_then(|s| s.parse::<f64>().ok())
                            .map(|f| f as i64)
                            .ok_or_else(|| bad("seq"))?,
                        attempt: AttemptId::parse(&attempt)
                            .ok_or_else(|| bad("attempt is not a uuid"))?,
                    })
                })
                .collect::<Result<Vec<_>, DurableError>>()?;
            Ok(Admission::Heads {
                generation,
                at_ms,
                heads,
            })
        }
        _ => Err(bad("unknown verdict")),
    }
}

/// A command holding (or having held) a permit of its command's lease zset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub command_id: CommandId,
    /// The permit has not lapsed.
    pub live: bool,
    pub attempt: Option<AttemptId>,
    /// Its status as Redis shows it (None: no status hash).
    pub status: Option<CommandStatus>,
}

/// `holders.lua`: up to `limit` members of a command's lease zset, oldest expiry first.
pub async fn holders(
    redis: &Projection,
    keys: &AppKeys,
    namespace_id: NamespaceId,
    command: &str,
    limit: i64,
) -> Result<Vec<Holder>, DurableError> {
    // The holders are not known before the call: the first names their status hashes.
    let answer = call_asking(
        "holders.lua",
        vec![keys.command_leases(namespace_id, command)],
        |script_keys| {
            redis.holders(
                script_keys,
                vec![limit.into(), keys.command_prefix().into()],
            )
        },
    )
    .await?;
    let answer = match answer {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        _ => return Err(DurableError::script("holders.lua", "not a list")),
    };
    if !answer.len().is_multiple_of(4) {
        return Err(DurableError::script("holders.lua", "not quadruples"));
    }
    Ok(answer
        .chunks(4)
        .filter_map(|h| {
            Some(Holder {
                command_id: str::parse::<CommandId>(&h[0].as_string()?).ok()?,
                live: h[1].as_i64() == Some(1),
                attempt: h[2].as_string().and_then(|a| AttemptId::parse(&a)),
                status: h[3].as_str().and_then(|s| CommandStatus::parse(&s)),
            })
        })
        .collect())
}
