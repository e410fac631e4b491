//! The Redis side of the transitions: one typed caller per life-cycle script. Each answers what
//! the script decided, including `NotReady` (the projection is not trusted: being rebuilt, or a
//! Redis that lost writes) and `Stale` (the write belongs to an epoch or an attempt that is
//! over), which callers must not take for success.
//!
//! - [`intake`]: `reserve` (intake.lua), `accept`, `release` — the gateway's.
//! - [`start`]: `admit`, and the `permit_holders` of a command's permits the sweeper reconciles.
//! - [`attempt`]: `renew`, `attempt_status`, `start_tokens`, `requeue` — a started attempt's.
//! - [`end`]: a command's end, `land`.

mod attempt;
mod end;
mod intake;
mod start;

pub use attempt::*;
pub use end::*;
pub use intake::*;
pub use start::*;

use fred::prelude::*;

pub(super) fn is_not_ready(value: &Value) -> bool {
    value.as_str().as_deref() == Some("NOT_READY")
}

pub(super) fn clamp_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
