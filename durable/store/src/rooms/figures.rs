//! A namespace's rooms as an operator sees them on the status board, exact from PostgreSQL.
//!
//! The counters a place's moves keep on the room's row (`waiting`, `admitted_total`,
//! `left_total`, `lapsed_total`) are read as they are: each changes in the same transaction as
//! the place it counts. What depends on the clock is counted from the places, each with one
//! range of a partial index, so a room with a long queue or a long history costs no more to
//! show than a quiet one:
//!
//! - `active`: admitted places whose pass is live now (`room_places_admitted`, at most
//!   `max_active` places; no index is keyed by `pass_until`, which heartbeats move); the row's own
//!   `active` also counts a lapsed pass until the ticker's next step ends it.
//! - `holding`: places holding a slot of `max_active`, admitted or given back while their last
//!   pass may still be accepted (`room_places_admitted` and `room_places_given_back`, as [`super::admission`] counts them).
//! - `admitted_last_minute`: places admitted in the last [`ADMITTED_WINDOW`]
//!   (`room_places_admitted_at`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::PASS_GRACE;
use crate::DurableError;
use crate::ids::NamespaceId;

/// Rooms shown per namespace, at most: declared ones first (a declaration has at most 64), then
/// rooms no longer declared whose places may still run their course.
pub const ROOMS_SHOWN: i64 = 100;

/// What `admitted_last_minute` looks back over.
pub const ADMITTED_WINDOW: Duration = Duration::from_secs(60);

/// The board's query: `$1` namespace, `$2` a row limit, `$3` the pass grace and `$4` the
/// admission window in seconds. The text of the file [`of_namespace`] runs, for plan checks.
pub const ROOMS_SQL: &str = include_str!("../../queries/status_rooms.sql");

/// One room's figures at one instant of PostgreSQL's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomFigures {
    pub code: String,
    /// False once a later declaration left the room out (it takes no more joins).
    pub declared: bool,
    pub max_active: Option<i32>,
    pub admit_per_minute: Option<i32>,
    pub opens_at: Option<DateTime<Utc>>,
    pub drawn_at: Option<DateTime<Utc>>,
    pub waiting: i64,
    /// Admitted places with a live pass.
    pub active: i64,
    /// Places holding a slot of `max_active` (see the module's notes).
    pub holding: i64,
    pub admitted_last_minute: i64,
    pub admitted_total: i64,
    pub left_total: i64,
    /// Passes that lapsed (their holder stopped heartbeating, or `pass_seconds` ran out).
    pub abandoned_total: i64,
}

/// The rooms of `namespace_id`, declared first, then by code; at most [`ROOMS_SHOWN`].
pub async fn of_namespace(
    pg: &PgPool,
    namespace_id: NamespaceId,
) -> Result<Vec<RoomFigures>, DurableError> {
    let rows = sqlx::query_file!(
        "queries/status_rooms.sql",
        namespace_id as _,
        ROOMS_SHOWN,
        PASS_GRACE.as_secs_f64(),
        ADMITTED_WINDOW.as_secs_f64()
    )
    .fetch_all(pg)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| RoomFigures {
            code: row.code,
            declared: row.declared,
            max_active: row.max_active,
            admit_per_minute: row.admit_per_minute,
            opens_at: row.opens_at,
            drawn_at: row.drawn_at,
            waiting: row.waiting,
            active: row.active,
            holding: row.holding,
            admitted_last_minute: row.admitted_last_minute,
            admitted_total: row.admitted_total,
            left_total: row.left_total,
            abandoned_total: row.lapsed_total,
        })
        .collect())
}
