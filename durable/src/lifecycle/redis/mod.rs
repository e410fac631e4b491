//! The Redis side of the transitions: one typed caller per life-cycle script. Each answers what
//! the script decided, including `NotReady` (the projection is not trusted: being rebuilt, or a
//! Redis that lost writes) and `Stale` (the write belongs to an epoch or an attempt that is
//! over), which callers must not take for success.
//!
//! - [`intake`]: `reserve` (intake.lua), `accept`, `release` — the gateway's.
//! - [`start`]: `admit`, and the `holders` of a command's permits the sweeper reconciles.
//! - [`attempt`]: `renew`, `mark`, `retake`, `requeue` — a started attempt's.
//! - [`end`]: a command's end, `land`.

mod attempt;
mod end;
mod intake;
mod start;

pub use attempt::*;
pub use end::*;
pub use intake::*;
pub use start::*;

use std::future::Future;

use fred::prelude::*;

use crate::DurableError;

/// Calls of a script that checks the permits it touches against its `KEYS` before the caller
/// gives up: each refused call names every lease it lacked, so a second call succeeds unless a
/// command's permits changed in between (it was admitted again, or a rebuild restored it).
const DECLARED_PERMIT_TRIES: usize = 4;

/// Calls a script that releases, extends or reads commands' permits (land, requeue, mark,
/// renew, holding) with `keys`, and again with the leases it asks for in a `{"HELD", lease,
/// ...}` answer (lib/epoch.lua's declared permits): nothing was done then. The leases asked
/// for are appended, so the script's own keys keep their places.
pub(super) async fn with_declared_permits<F, Fut>(
    script: &'static str,
    mut keys: Vec<String>,
    mut call: F,
) -> Result<Value, DurableError>
where
    F: FnMut(Vec<String>) -> Fut,
    Fut: Future<Output = Result<Value, DurableError>>,
{
    for _ in 0..DECLARED_PERMIT_TRIES {
        let answer = call(keys.clone()).await?;
        match permits_asked(&answer) {
            None => return Ok(answer),
            Some(asked) if asked.is_empty() => {
                return Err(DurableError::script(script, "HELD without a lease"));
            }
            Some(asked) => keys.extend(asked),
        }
    }
    Err(DurableError::script(
        script,
        "the permits the commands hold changed on every try",
    ))
}

/// The leases a `{"HELD", lease, ...}` answer asks for; None for any other answer.
fn permits_asked(answer: &Value) -> Option<Vec<String>> {
    let Value::Array(items) = answer else {
        return None;
    };
    let (first, leases) = items.split_first()?;
    if first.as_str().as_deref() != Some("HELD") {
        return None;
    }
    Some(leases.iter().filter_map(Value::as_string).collect())
}

pub(super) fn is_not_ready(value: &Value) -> bool {
    value.as_str().as_deref() == Some("NOT_READY")
}

pub(super) fn clamp_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
