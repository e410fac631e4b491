//! The command life cycle as one fenced state machine.
//!
//! Every state change of a command is a named transition ([`table::TRANSITIONS`]) with its
//! PostgreSQL statement and its Redis script side by side; the functions of this module carry
//! them out, and the HTTP handlers and the executor call them instead of orchestrating steps.
//! PostgreSQL is the truth and is written first; Redis (the projection) follows. Neither the
//! gateway nor the executor names [`redis`], and no statement outside this module writes
//! `commands` (`gateway/tests/api/repository/crate_graph.rs` reads the sources for both).
//!
//! Three fences keep every ordering safe:
//! - **The epoch** (the projection's generation): a rebuild marks the projection not ready,
//!   advances the generation in PostgreSQL and only then takes its snapshot. Commits and claims
//!   are fenced on the generation they were reserved or admitted under, so nothing of an old
//!   epoch commits after the snapshot; every script that decides or writes answers `NOT_READY`
//!   while the projection is not trusted (also when Redis lost writes: `lua/lib/epoch.lua`),
//!   and the Redis side of a transition is made again once it is.
//! - **The attempt** ([`AttemptId`]): minted with a command's permits, recorded by the claim,
//!   required by every later write of that start in PostgreSQL and in Redis. A start whose
//!   lease lapsed can neither land nor touch the permits of the start that replaced it, and
//!   its requests to a backend go out only through its fence
//!   ([`crate::executor::fence`]), checked as they are written.
//! - **Monotonic statuses**: no script moves a command out of a final status, and every count
//!   changes exactly once per transition.
//!
//! - [`table`]: the transitions, rendered into `docs/life-cycle.md`'s state diagram.
//! - [`attempt`]: the attempt token (the statuses are `sluice_model::CommandStatus`).
//! - [`redis`]: the Redis side of each transition, one typed caller per script.
//! - [`until_ready`]: the Redis side of a transition, again once the projection is trusted.
//! - [`enqueue`]: reserve, commit, accept, release (the gateway's intake).
//! - [`intake_batcher`]: concurrent reservations of one application in one `intake.lua` call.
//! - [`commit`]: transition `commit` for a batch, the multi-row insert (idempotent by request
//!   key, pause and epoch re-checked); [`group_commit`]: concurrent enqueues batched into one
//!   such transaction each.
//! - [`claim`]: admit and claim (the executor's start of work).
//! - [`row_state`]: what PostgreSQL says of a row whose Redis side must follow.
//! - [`held`]: what an attempt does while it holds a command: renew, retry, running, give back.
//! - [`land_batch`]: `land` for a batch a handler decided in its own transaction (the quota
//!   handler), and the batch's Redis sides.
//! - [`end`]: land, cancel, complete: every way a command ends.
//! - [`sweep`]: rescue and expire (PostgreSQL's clock).
//! - [`retention`]: prune, by whole days of `commands`.
//! - [`repair`]: the Redis sides that were missed, found from what Redis shows.

pub mod attempt;
pub mod claim;
pub mod commit;
pub mod end;
pub mod enqueue;
pub mod group_commit;
pub mod held;
pub mod intake_batcher;
pub mod land_batch;
pub mod rebuild;
pub mod redis;
pub mod repair;
pub mod retention;
pub mod row_state;
pub mod sweep;
pub mod table;
mod until_ready;

use std::time::Duration;

pub use attempt::AttemptId;
pub use until_ready::until_ready;

use sluice_redis::Projection;

/// How long a running command's permits outlive its deadline, so the deadline sweeper (not the
/// lease) ends it; if every sweeper is down they lapse anyway.
pub const RUNNING_PERMIT_GRACE: Duration = Duration::from_secs(60);

/// What every transition works on: PostgreSQL (the truth), Redis (the projection) and the
/// scripts. Borrowed, so any owner of the three lends them without a copy.
#[derive(Clone, Copy)]
pub struct Stores<'a> {
    pub pg: &'a sqlx::PgPool,
    pub redis: &'a Projection,
}
