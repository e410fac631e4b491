//! The waiting rooms' admission ticker: every [`TICK`], each room with people waiting, passes
//! live or a draw due gets one step of `sluice_store::rooms::admission` (the draw at
//! `opens_at`, lapsed passes freed, the next people admitted); once a second the places'
//! planner statistics are refreshed if a drop has outgrown them (`statistics`).
//!
//! It runs on connections of its own (`Gateway::ticker_pg`, [`TICKER_CONNECTIONS`] in a
//! serving process), so a crowd's requests holding the process's pool never delay an admission.
//!
//! Every gateway runs one. A step locks its room's row with `SKIP LOCKED`, so gateways never
//! wait for each other and admit together exactly as one would; with none running, nobody is
//! admitted, but nothing is lost either (the places wait in PostgreSQL).

use std::sync::Arc;
use std::time::Duration;

use sluice_store::rooms::{admission, statistics};
use tokio_util::sync::CancellationToken;

use crate::state::Gateway;

/// The admission ticker's connections in a serving process (beside `pg_pool_size`): one step
/// at a time, and one spare for a connection being replaced.
pub const TICKER_CONNECTIONS: u32 = 2;

/// How often rooms are stepped: the delay between a freed place and the next admission.
pub const TICK: Duration = Duration::from_millis(200);

/// How many ticks apart the places' planner statistics are looked at (once a second).
const STATISTICS_EVERY: u32 = 5;

/// Steps every busy room each [`TICK`] until `shutdown`.
pub async fn run(gateway: Arc<Gateway>, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A failure is logged when it starts and when it ends, not at every tick of an outage.
    let mut failing = false;
    let mut ticks = 0u32;
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = shutdown.cancelled() => return,
        }
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(STATISTICS_EVERY) {
            // A failure here costs only plans; the rooms' steps below report an outage.
            match statistics::refresh(&gateway.ticker_pg).await {
                Ok(true) => tracing::debug!("room places analyzed"),
                Ok(false) => {}
                Err(error) => tracing::debug!(%error, "room places not analyzed"),
            }
        }
        let outcome = step_all(&gateway).await;
        match (&outcome, failing) {
            (Err(error), false) => tracing::warn!(%error, "waiting rooms cannot admit"),
            (Ok(()), true) => tracing::info!("waiting rooms admit again"),
            _ => {}
        }
        failing = outcome.is_err();
    }
}

/// One step for every busy room. A room whose step fails does not keep the rooms after it
/// waiting for the next tick: each is stepped, and the first failure is reported.
async fn step_all(gateway: &Gateway) -> Result<(), sluice_durable::DurableError> {
    let mut first_failure = None;
    for room in admission::busy_rooms(&gateway.ticker_pg).await? {
        if let Err(error) = admission::step(&gateway.ticker_pg, &room).await {
            tracing::debug!(%error, namespace = %room.namespace_id, room = %room.code, "room step failed");
            first_failure.get_or_insert(error);
        }
    }
    first_failure.map_or(Ok(()), Err)
}
