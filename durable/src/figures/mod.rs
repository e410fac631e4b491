//! The figures of `GET /metrics` read when scraped rather than counted, beside the gateway's
//! counted families (`sluice_metrics`).
//!
//! The projection figures (generation, readiness, queue depths, permits in flight) are not
//! counted but read from Redis when scraped, for every application (at most
//! [`MAX_APPLICATIONS`], the list cached for [`APPLICATION_LIST_TTL`]), one `metrics.lua` call
//! per application. A read that fails never fails the scrape: that application is exported with
//! `sluice_projection_up 0` and the scrape goes on.
//!
//! The quota pools' units by state are read from PostgreSQL when scraped, at the same time as
//! the projection figures (one query, at most [`MAX_POOLS`] pools); a failed read is exported as
//! `sluice_quota_pools_up 0`, and the scrape goes on. The waiting rooms' figures (people
//! waiting, live passes, admissions, leaves and abandonments) are read from PostgreSQL the same
//! way (one query, at most [`MAX_ROOMS`] rooms; a failed read is `sluice_rooms_up 0`).

use std::time::Duration;

use prometheus_client::registry::Registry;
use sluice_metrics::storage_error;
use sluice_model::DurableError;
use sluice_redis::Projection;
use sqlx::PgPool;

mod pools;
mod projection;
mod rooms;

pub use pools::MAX_POOLS;
use pools::pool_figures;
use projection::projection_figures;
pub use projection::{AppFigures, CommandFigures, read_app_figures};
pub use rooms::MAX_ROOMS;
use rooms::room_figures;

/// Applications whose projection figures one scrape reads at most: a scrape must stay cheap
/// and its answer bounded however many applications there are.
pub const MAX_APPLICATIONS: i64 = 1_000;

/// How long the list of applications is reused between scrapes.
pub const APPLICATION_LIST_TTL: Duration = Duration::from_secs(5);

/// The time one scrape may spend on projection reads; applications not read by then are
/// exported as down rather than making the scraper time out.
const PROJECTION_BUDGET: Duration = Duration::from_secs(5);

/// Rows of a scrape-time read of PostgreSQL, or `None` when it failed or took longer than
/// `budget`: a scrape never fails or hangs for them (the caller exports its `…_up 0`).
async fn read_within<T>(
    what: &'static str,
    budget: Duration,
    read: impl std::future::Future<Output = Result<Vec<T>, sqlx::Error>>,
) -> Option<Vec<T>> {
    match tokio::time::timeout(budget, read).await {
        Ok(Ok(rows)) => Some(rows),
        Ok(Err(error)) => {
            let error = DurableError::from(error);
            storage_error(&error);
            tracing::warn!(%error, "metrics: {what} not read");
            None
        }
        Err(_) => {
            tracing::warn!(
                budget_ms = budget.as_millis() as u64,
                "metrics: {what} not read within the budget"
            );
            None
        }
    }
}

/// The gateway's exposition: its counters, then the projection figures of every application,
/// the quota pools' units and the waiting rooms' figures (all read now, side by side, see the
/// module's doc).
pub async fn gateway_text(pg: &PgPool, redis: &Projection) -> String {
    let mut registry = Registry::default();
    sluice_metrics::register_gateway(&mut registry);
    let (projection, pools, rooms) = tokio::join!(
        projection_figures(pg, redis),
        pool_figures(pg),
        room_figures(pg)
    );
    projection.register(&mut registry);
    pools.register(&mut registry);
    rooms.register(&mut registry);
    sluice_metrics::encode(&registry)
}
