//! Starting work: `admit`, and the holders of a command's permits.

use fred::prelude::*;

use super::clamp_i64;
use crate::DurableError;
use crate::faults::{self, Point};
use crate::ids::{CommandId, NamespaceId};
use crate::lifecycle::attempt::AttemptId;
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_redis::asked_keys::call_asking;

/// One waiting command whose permits `admit.lua` took, and the attempt it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedHead {
    pub command_id: CommandId,
    pub queue_suffix: String,
    pub queue_seq: i64,
    pub attempt: AttemptId,
    /// The Redis time of the `admit.lua` call that took its permits (Unix milliseconds): when
    /// its turn came, which the claim records as its `started_at`. Heads of one admission
    /// started by a later call carry that call's time, never an earlier one: a head may have
    /// been queued after the first call.
    pub started_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    NotReady,
    /// The heads admitted under the projection's `generation` (the claim is fenced on it); `at_ms`
    /// is the Redis time (Unix milliseconds) of the first call that started something, and each
    /// head carries the time of its own call.
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

/// Calls of `admit.lua` one admission makes at most: a call that lacked keys asked for them, and
/// the next goes on with them. From nothing known (a new executor), the levels are the window's
/// commands, their queues, the queues' heads and the heads' limit keys; once warm, one call.
const ADMIT_CALLS: usize = 6;

/// `admit.lua`: starts up to `max_heads` commands, each under a fresh attempt token.
///
/// The script is given every key it may touch: the application's own, and those the last
/// answers named ([`sluice_redis::admission_keys`]). When it lacked some, it admitted what
/// it could without them and asked; it is called again at once with them for the rest of the
/// batch.
pub async fn admit(
    redis: &Projection,
    keys: &AppKeys,
    limits: AdmitLimits,
) -> Result<Admission, DurableError> {
    let memory = keys.meta();
    let mut admitted: Option<(i64, i64, Vec<AdmittedHead>)> = None;
    for _ in 0..ADMIT_CALLS {
        let taken = admitted.as_ref().map_or(0, |(_, _, heads)| heads.len());
        let room = limits.max_heads.saturating_sub(taken as u32);
        let mut script_keys = own_keys(keys);
        script_keys.extend(redis.admission_keys().keys(&memory));
        let call = match later_call(redis, keys, script_keys, &limits, room, taken).await {
            Ok(call) => call,
            // A later call failed (a timeout, a reset connection, a failover): the heads earlier
            // calls started hold their permits and show `executing` in Redis, so they are claimed
            // now. Dropped, they would wait for their leases to lapse while the commands behind
            // them in their queues started first.
            Err(error) if taken > 0 => {
                tracing::warn!(%error, heads = taken, "a later admit.lua call failed; the heads started before it are claimed");
                break;
            }
            Err(error) => return Err(error),
        };
        let Some(call) = call else {
            // Not trusted (any more): heads admitted by an earlier call of this admission were
            // under a projection a rebuild has replaced, so their claim could not be fenced.
            return Ok(Admission::NotReady);
        };
        redis
            .admission_keys()
            .learn(&memory, &call.done, call.named);
        admitted = Some(match admitted {
            // The admission's time is its first call's; each head keeps its own call's.
            Some((generation, at_ms, mut heads))
                if generation == call.generation && !heads.is_empty() =>
            {
                heads.extend(call.heads);
                (generation, at_ms, heads)
            }
            // A rebuild between two calls: the earlier heads belong to the projection it
            // replaced (where their commands wait again), so only the later ones are admitted.
            _ => (call.generation, call.at_ms, call.heads),
        });
        let taken = admitted.as_ref().map_or(0, |(_, _, heads)| heads.len());
        if call.asked == 0 || taken >= limits.max_heads as usize {
            break;
        }
    }
    let (generation, at_ms, heads) = admitted.unwrap_or_default();
    Ok(Admission::Heads {
        generation,
        at_ms,
        heads,
    })
}

/// One `admit.lua` call of an admission that has started `taken` heads so far; None for
/// `NOT_READY`.
async fn later_call(
    redis: &Projection,
    keys: &AppKeys,
    script_keys: Vec<String>,
    limits: &AdmitLimits,
    room: u32,
    taken: usize,
) -> Result<Option<AdmitCall>, DurableError> {
    if taken > 0 {
        faults::pass(Point::LaterAdmitCall, keys.application_id()).await?;
    }
    let answer: Vec<Value> = redis.admit(script_keys, script_args(limits, room)).await?;
    parse_answer(&answer)
}

/// The application's own keys, `KEYS[1..11]` of every `admit.lua` call (the rest are those the
/// last answers named).
pub fn own_keys(keys: &AppKeys) -> Vec<String> {
    vec![
        keys.meta(),
        keys.ready(),
        keys.admission_config(),
        keys.count(),
        keys.turn(),
        keys.starts(),
        keys.started(),
        keys.seq(),
        keys.gone(),
        keys.application_leases(),
        keys.application_bucket(),
    ]
}

/// `ARGV` of one `admit.lua` call starting up to `room` commands: the limits, and a fresh attempt
/// token for each command it may start.
pub fn script_args(limits: &AdmitLimits, room: u32) -> Vec<Value> {
    let mut args: Vec<Value> = vec![
        limits.min_generation.into(),
        i64::from(room).into(),
        i64::from(limits.scan_limit.max(1)).into(),
        clamp_i64(limits.lease_ms).into(),
        i64::from(limits.lookahead.max(1)).into(),
    ];
    args.extend((0..room).map(|_| Value::from(AttemptId::mint().to_string())));
    args
}

/// One `{"OK", …}` answer of `admit.lua`.
struct AdmitCall {
    generation: i64,
    at_ms: i64,
    heads: Vec<AdmittedHead>,
    /// Keys it lacked (and named).
    asked: i64,
    done: Vec<String>,
    named: Vec<String>,
}

/// The answer of one call; None for `NOT_READY`.
fn parse_answer(answer: &[Value]) -> Result<Option<AdmitCall>, DurableError> {
    let bad = |detail: &str| DurableError::script("admit.lua", detail.to_string());
    match answer.first().and_then(Value::as_str).as_deref() {
        Some("NOT_READY") => return Ok(None),
        Some("OK") => {}
        _ => return Err(bad("unknown verdict")),
    }
    let number = |at: usize, what: &str| {
        answer
            .get(at)
            .and_then(Value::as_i64)
            .ok_or_else(|| bad(what))
    };
    let generation = number(1, "generation")?;
    let at_ms = number(2, "time")?;
    let count = usize::try_from(number(3, "head count")?).map_err(|_| bad("head count"))?;
    let heads_end = 4 + 4 * count;
    let head_fields = answer.get(4..heads_end).ok_or_else(|| bad("heads"))?;
    let heads = head_fields
        .chunks(4)
        .map(|head| {
            let id = head[0].as_string().ok_or_else(|| bad("id"))?;
            let attempt = head[3].as_string().ok_or_else(|| bad("attempt"))?;
            Ok(AdmittedHead {
                command_id: str::parse::<CommandId>(&id).map_err(|_| bad("id is not a uuid"))?,
                queue_suffix: head[1].as_string().ok_or_else(|| bad("suffix"))?,
                queue_seq: head[2]
                    .as_string()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(|f| f as i64)
                    .ok_or_else(|| bad("seq"))?,
                attempt: AttemptId::parse(&attempt).ok_or_else(|| bad("attempt is not a uuid"))?,
                started_ms: at_ms,
            })
        })
        .collect::<Result<Vec<_>, DurableError>>()?;
    let asked = number(heads_end, "asked")?;
    let done_count =
        usize::try_from(number(heads_end + 1, "done count")?).map_err(|_| bad("done count"))?;
    let keys_at = heads_end + 2;
    let strings = |values: &[Value]| -> Result<Vec<String>, DurableError> {
        values
            .iter()
            .map(|v| v.as_string().ok_or_else(|| bad("a key")))
            .collect()
    };
    let done = strings(
        answer
            .get(keys_at..keys_at + done_count)
            .ok_or_else(|| bad("done keys"))?,
    )?;
    let named = strings(&answer[keys_at + done_count..])?;
    Ok(Some(AdmitCall {
        generation,
        at_ms,
        heads,
        asked,
        done,
        named,
    }))
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

/// `permit_holders.lua`: up to `limit` members of a command's lease zset, oldest expiry first.
pub async fn permit_holders(
    redis: &Projection,
    keys: &AppKeys,
    namespace_id: NamespaceId,
    command: &str,
    limit: i64,
) -> Result<Vec<Holder>, DurableError> {
    // The holders are not known before the call: the first names their status hashes.
    let answer = call_asking(
        "permit_holders.lua",
        vec![keys.command_leases(namespace_id, command)],
        |script_keys| {
            redis.permit_holders(
                script_keys,
                vec![limit.into(), keys.command_prefix().into()],
            )
        },
    )
    .await?;
    let answer = match answer {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        _ => return Err(DurableError::script("permit_holders.lua", "not a list")),
    };
    if !answer.len().is_multiple_of(4) {
        return Err(DurableError::script("permit_holders.lua", "not quadruples"));
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
