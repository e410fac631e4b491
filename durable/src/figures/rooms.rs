//! The waiting rooms of `GET /metrics`, read from PostgreSQL when scraped, with the same
//! figures as the status board: people waiting, live passes, and the room's totals of
//! admissions, leaves and abandonments (passes that lapsed) as counters, so `rate()` gives
//! admissions per second and an alert can watch abandonments.
//!
//! Bounded like the pools: one query of at most [`MAX_ROOMS`] rooms (by namespace and code, the
//! primary key's order), each room's live passes one range of `room_places_admitted`, within
//! [`ROOMS_BUDGET`]. A failed or slow read never fails the scrape: it is exported as
//! `sluice_rooms_up 0` with no room figures.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sqlx::PgPool;

use crate::ids::NamespaceId;

/// Rooms one scrape exports at most: the answer stays bounded however many namespaces declare
/// rooms.
pub const MAX_ROOMS: i64 = 1_000;

/// The time one scrape may wait for the rooms; read beside the projection figures and the pools.
const ROOMS_BUDGET: Duration = Duration::from_secs(2);

/// `namespace` and `room`.
type RoomLabels = [(&'static str, String); 2];

/// The room figures of one scrape. The totals are counters set from PostgreSQL's counts, which
/// only grow, so a scraper sees a counter that never goes back.
pub(super) struct RoomGauges {
    up: Gauge,
    waiting: Family<RoomLabels, Gauge>,
    active: Family<RoomLabels, Gauge>,
    admitted: Family<RoomLabels, Counter>,
    left: Family<RoomLabels, Counter>,
    abandoned: Family<RoomLabels, Counter>,
}

impl RoomGauges {
    pub(super) fn register(self, registry: &mut Registry) {
        registry.register(
            "sluice_rooms_up",
            "1 if this scrape could read the waiting rooms from PostgreSQL, else 0",
            self.up,
        );
        registry.register(
            "sluice_room_waiting",
            "Places waiting in a room (its pre-queue included); at most 1000 rooms",
            self.waiting,
        );
        registry.register(
            "sluice_room_active",
            "Admitted places of a room whose pass is live now",
            self.active,
        );
        registry.register(
            "sluice_room_admitted",
            "Places a room admitted (passes handed out)",
            self.admitted,
        );
        registry.register(
            "sluice_room_left",
            "Places given back by their holder, waiting or admitted",
            self.left,
        );
        registry.register(
            "sluice_room_abandoned",
            "Passes that lapsed: their holder stopped heartbeating, or pass_seconds ran out",
            self.abandoned,
        );
    }
}

struct RoomRow {
    namespace_id: NamespaceId,
    code: String,
    waiting: i64,
    active: i64,
    admitted_total: i64,
    left_total: i64,
    lapsed_total: i64,
}

/// Reads the rooms' figures with one query within [`ROOMS_BUDGET`].
pub(super) async fn room_figures(pg: &PgPool) -> RoomGauges {
    let gauges = RoomGauges {
        up: Gauge::default(),
        waiting: Family::default(),
        active: Family::default(),
        admitted: Family::default(),
        left: Family::default(),
        abandoned: Family::default(),
    };
    let Some(rows) = super::read_within(
        "waiting rooms",
        ROOMS_BUDGET,
        sqlx::query_as!(
            RoomRow,
            r#"SELECT r.namespace_id AS "namespace_id: NamespaceId", r.code, r.waiting,
                      (SELECT count(*) FROM room_places p
                        WHERE p.namespace_id = r.namespace_id AND p.room = r.code
                          AND p.state = 'admitted' AND p.pass_until > now()) AS "active!",
                      r.admitted_total, r.left_total, r.lapsed_total
                 FROM rooms r ORDER BY r.namespace_id, r.code LIMIT $1"#,
            MAX_ROOMS
        )
        .fetch_all(pg),
    )
    .await
    else {
        return gauges;
    };
    gauges.up.set(1);
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    for row in rows {
        let labels = [
            ("namespace", row.namespace_id.to_string()),
            ("room", row.code),
        ];
        gauges.waiting.get_or_create(&labels).set(row.waiting);
        gauges.active.get_or_create(&labels).set(row.active);
        gauges
            .admitted
            .get_or_create(&labels)
            .inc_by(count(row.admitted_total));
        gauges
            .left
            .get_or_create(&labels)
            .inc_by(count(row.left_total));
        gauges
            .abandoned
            .get_or_create(&labels)
            .inc_by(count(row.lapsed_total));
    }
    gauges
}
