//! Quota pools and their allocations, outside the executor's handler (which takes the units,
//! `executor::quota`): what the API reads and changes, and the expiry of reservations.
//!
//! - [`allocations`]: an allocation's current truth, and its holder's confirm and release.
//! - [`expiry`]: the sweeper that expires overdue reservations by the database's clock.
//! - [`pools`]: a pool's counts, and the operator's capacity change.
//!
//! Lock order, everywhere a pool's counts change: the pool's row first (`FOR UPDATE`), then the
//! allocation rows. The executor's handler locks its commands' rows before the pool, and takes
//! no lock on an existing allocation, so no two orders ever meet.

pub mod allocations;
pub mod expiry;
pub mod pools;

/// The dependency every cached read of a pool declares: every change of the pool's counts or
/// capacity invalidates it.
pub fn pool_dependency(pool: &str) -> String {
    format!("pool:{pool}")
}

/// Drops the cached reads of `pool` after a change of its counts or capacity has committed. A
/// failure is logged, not returned: the change stands, and those reads expire by age.
pub async fn invalidate_pool(
    redis: &sluice_redis::Projection,
    application_id: crate::ids::ApplicationId,
    namespace_id: crate::ids::NamespaceId,
    pool: &str,
) {
    let dependency = [pool_dependency(pool)];
    if let Err(error) =
        sluice_redis::cache::invalidate(redis, application_id, namespace_id, &dependency).await
    {
        tracing::warn!(%error, %pool, "cached reads of the pool not invalidated; they expire by age");
    }
}
