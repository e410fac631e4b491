//! The command life cycle under the orderings ordinary tests never produce: many
//! blocked resources, a rebuild racing a claim, a commit or a completion, a Redis that rolls
//! back, a lease that lapses mid-call, late writes racing an end. Limits are judged by the
//! backend's own count of calls in progress, results by PostgreSQL, never by Redis's leases.

mod diagram;
mod fencing;
mod postgres_loss;
pub(crate) mod query_plans;
mod rebuild_races;
mod repairs;
pub(crate) mod retention;
mod rollback;
mod starvation;
mod withheld;

use tokio_util::sync::CancellationToken;

use crate::execution::{fast_executor, start_executor};
use crate::support::Stack;

/// The lease of these tests' executors: the shortest allowed, so a lapse is quick to provoke.
const LEASE_MS: u64 = 1_000;

/// A fast executor on `stack` with a [`LEASE_MS`] lease.
fn start_short_lease_executor(stack: &Stack) -> CancellationToken {
    start_executor(
        stack,
        sluice_executor::ExecutorConfig {
            lease_ms: LEASE_MS,
            ..fast_executor()
        },
    )
}
