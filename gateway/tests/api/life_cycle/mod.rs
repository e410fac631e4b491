//! The command life cycle under the orderings ordinary tests never produce (issue 15): many
//! blocked resources, a rebuild racing a claim, a commit or a completion, a Redis that rolls
//! back, a lease that lapses mid-call, late writes racing an end. Limits are judged by the
//! backend's own count of calls in progress, results by PostgreSQL, never by Redis's leases.

mod diagram;
mod fencing;
mod not_ready;
mod postgres_loss;
mod rebuild_races;
mod repairs;
mod rollback;
mod starvation;
mod withheld;
