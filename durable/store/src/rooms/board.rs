//! What a gateway reads to answer a waiting place's polls from memory.
//!
//! A waiting place's position is its queue order minus the room's `admitted_through`, less
//! one (admission goes in order), so a poll needs three things, and none of them costs a query
//! per poll: the place's order (its ticket states it, or the draw, which never changes once
//! made and is read once per gateway), the room's admission front (one row, read a few times a
//! second per gateway whatever the number of polls), and whether the place left the queue
//! (leaves read since the last look, by `ended_at`).
//!
//! A leave's `ended_at` is the clock of its batch's `UPDATE` ([`super::leaves`]); the batch
//! commits after that statement and one read, each within `statement_timeout` (10 s), so
//! reading every leave since [`LEAVES_OVERLAP`] before the previous read's clock misses none
//! that commits in time. One that commits later
//! still (a stalled disk) is seen by polls from memory only at its turn, when its poll reads
//! PostgreSQL anyway.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::Pace;
use crate::DurableError;
use crate::ids::NamespaceId;

/// How far back each read of leaves reaches before the previous read's clock.
pub const LEAVES_OVERLAP: Duration = Duration::from_secs(30);

/// The room as polls of its waiting places need it.
#[derive(Debug, Clone)]
pub struct Front {
    /// The highest queue order admitted: a place at or below it has had its turn.
    pub admitted_through: i64,
    pub drawn: bool,
    pub opens_at: Option<DateTime<Utc>>,
    pub pace: Pace,
    /// Joins so far (`next_seq`): before the draw, how many may come back at the start.
    pub crowd: i64,
    /// The database's clock when the row was read.
    pub observed_at: DateTime<Utc>,
}

/// The room's admission front; `None` when there is no such room.
pub async fn front(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
) -> Result<Option<Front>, DurableError> {
    Ok(sqlx::query!(
        r#"SELECT admitted_through, drawn_at IS NOT NULL AS "drawn!", opens_at, max_active,
                  admit_per_minute, pass_seconds, heartbeat_seconds, next_seq,
                  clock_timestamp() AS "now!"
             FROM rooms WHERE namespace_id = $1 AND code = $2"#,
        namespace_id as _,
        room
    )
    .fetch_optional(pg)
    .await?
    .map(|row| Front {
        admitted_through: row.admitted_through,
        drawn: row.drawn,
        opens_at: row.opens_at,
        pace: Pace {
            max_active: row.max_active,
            admit_per_minute: row.admit_per_minute,
            pass_seconds: row.pass_seconds,
            heartbeat_seconds: row.heartbeat_seconds,
        },
        crowd: row.next_seq,
        observed_at: row.now,
    }))
}

/// The places that left the room's queue (before their turn) with `ended_at` after `since`,
/// each with its queue order (`None` for a pre-queue place that left before the draw).
pub async fn left_since(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
    since: DateTime<Utc>,
) -> Result<Vec<(Uuid, Option<i64>)>, DurableError> {
    Ok(sqlx::query!(
        "SELECT id, ord FROM room_places
          WHERE namespace_id = $1 AND room = $2 AND state = 'left' AND admitted_at IS NULL
            AND ended_at > $3",
        namespace_id as _,
        room,
        since
    )
    .fetch_all(pg)
    .await?
    .into_iter()
    .map(|row| (row.id, row.ord))
    .collect())
}

/// The drawn order of every pre-queue place, once the room is drawn (the draw takes the room's
/// row, and no pre-queue place commits after it, so a read after seeing `drawn` is complete).
pub async fn drawn_order(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
) -> Result<Vec<(Uuid, i64)>, DurableError> {
    Ok(sqlx::query!(
        r#"SELECT id, ord AS "ord!" FROM room_places
            WHERE namespace_id = $1 AND room = $2 AND prequeue AND ord IS NOT NULL"#,
        namespace_id as _,
        room
    )
    .fetch_all(pg)
    .await?
    .into_iter()
    .map(|row| (row.id, row.ord))
    .collect())
}
