//! The quota pools of `GET /metrics`, read from PostgreSQL when scraped: a pool's units by
//! state (`allocated`, `reserved`, `available`), so a sale held in reservations shows beside
//! the units already sold, and an alert can tell a pool that is sold out from one that only
//! waits on confirmations or expiries.
//!
//! Bounded like the projection figures: one query of at most [`MAX_POOLS`] pools (by namespace
//! and code, the primary key's order), within [`POOLS_BUDGET`]. A failed or slow read never
//! fails the scrape: it is exported as `sluice_quota_pools_up 0` with no pool figures.

use std::time::Duration;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sqlx::PgPool;

use crate::ids::NamespaceId;

/// Pools one scrape exports at most: the answer stays bounded however many namespaces
/// declare pools.
pub const MAX_POOLS: i64 = 1_000;

/// The time one scrape may wait for the pools (a connection and the query); read beside the
/// projection figures, so it adds nothing to a scrape that waits on Redis.
const POOLS_BUDGET: Duration = Duration::from_secs(2);

/// The states a pool's units are exported in; they add up to its capacity.
const STATES: [&str; 3] = ["allocated", "reserved", "available"];

/// The pool figures of one scrape, as gauge families.
pub(super) struct PoolGauges {
    up: Gauge,
    units: Family<[(&'static str, String); 3], Gauge>,
}

impl PoolGauges {
    pub(super) fn register(self, registry: &mut Registry) {
        registry.register(
            "sluice_quota_pools_up",
            "1 if this scrape could read the quota pools from PostgreSQL, else 0",
            self.up,
        );
        registry.register(
            "sluice_quota_pool_units",
            "Units of a quota pool by state: allocated (confirmed), reserved (held until confirmed, released or expired) and available; at most 1000 pools",
            self.units,
        );
    }
}

struct PoolRow {
    namespace_id: NamespaceId,
    code: String,
    capacity: i64,
    allocated: i64,
    reserved: i64,
}

/// Reads the pools' counts with one query within [`POOLS_BUDGET`].
pub(super) async fn pool_figures(pg: &PgPool) -> PoolGauges {
    let gauges = PoolGauges {
        up: Gauge::default(),
        units: Family::default(),
    };
    let Some(rows) = super::read_within(
        "quota pools",
        POOLS_BUDGET,
        sqlx::query_as!(
            PoolRow,
            r#"SELECT namespace_id AS "namespace_id: NamespaceId", code, capacity, allocated, reserved
                 FROM quota_pools ORDER BY namespace_id, code LIMIT $1"#,
            MAX_POOLS
        )
        .fetch_all(pg),
    )
    .await
    else {
        return gauges;
    };
    gauges.up.set(1);
    for row in rows {
        let available = crate::quotas::pools::available(row.capacity, row.allocated, row.reserved);
        for (state, units) in STATES
            .into_iter()
            .zip([row.allocated, row.reserved, available])
        {
            let labels = [
                ("namespace", row.namespace_id.to_string()),
                ("pool", row.code.clone()),
                ("state", state.to_string()),
            ];
            gauges.units.get_or_create(&labels).set(units);
        }
    }
    gauges
}
