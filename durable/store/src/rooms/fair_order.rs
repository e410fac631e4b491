//! The fair start: the pre-queue's order is a function anyone can recompute.
//!
//! Every place that joined before `opens_at` is ordered by `SHA-256(seed ‖ join_id)`, ascending
//! as bytes, where `seed` is the room's 32 random bytes and `join_id` the place's id as its
//! 36-character lowercase hyphenated text in UTF-8 (ties, which SHA-256 makes practically
//! impossible, by the join id's text). The seed is drawn when the room is first declared;
//! `GET /v1/rooms/{room}` shows its SHA-256 until `opens_at` and the seed from then on, and
//! `GET /v1/rooms/{room}/prequeue` lists the join ids. Nobody, the operator included, can
//! choose an order: the seed is committed before anyone joins the pre-queue, and join ids are
//! random and handed out by the gateway. Places that join after `opens_at` follow, first come,
//! first served. The SQL of [`super::admission`] computes the same function; [`order`] is its
//! reference, and a test recomputes it with an independent script.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;
use crate::ids::NamespaceId;

/// The pre-queue's join ids in admission order.
pub fn order(seed: &[u8], join_ids: &[Uuid]) -> Vec<Uuid> {
    let mut keyed: Vec<([u8; 32], String, Uuid)> = join_ids
        .iter()
        .map(|id| {
            let text = id.hyphenated().to_string();
            let digest: [u8; 32] = Sha256::new()
                .chain_update(seed)
                .chain_update(text.as_bytes())
                .finalize()
                .into();
            (digest, text, *id)
        })
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, _, id)| id).collect()
}

/// A room as anyone in its namespace may see it.
#[derive(Debug, Clone)]
pub struct RoomView {
    pub code: String,
    pub max_active: Option<i32>,
    pub admit_per_minute: Option<i32>,
    pub pass_seconds: i32,
    pub heartbeat_seconds: Option<i32>,
    pub active: i64,
    pub waiting: i64,
    pub opens_at: Option<DateTime<Utc>>,
    pub prequeue_opens_at: Option<DateTime<Utc>>,
    pub shuffle_prequeue: bool,
    /// Hex SHA-256 of the seed: the commitment, shown whenever the room has a start.
    pub seed_sha256: Option<String>,
    /// Hex seed, only from `opens_at` on.
    pub seed: Option<String>,
    pub drawn_at: Option<DateTime<Utc>>,
    pub prequeue: i64,
    pub admitted_total: i64,
    pub left_total: i64,
    pub expired_total: i64,
    pub observed_at: DateTime<Utc>,
}

pub async fn view(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
) -> Result<Option<RoomView>, DurableError> {
    let row = sqlx::query!(
        r#"SELECT code, max_active, admit_per_minute, pass_seconds, heartbeat_seconds, active,
                  waiting, opens_at, opens_at - make_interval(secs => prequeue_seconds) AS prequeue_opens_at,
                  shuffle_prequeue, seed, drawn_at, admitted_total, left_total, lapsed_total,
                  (SELECT count(*) FROM room_places p
                    WHERE p.namespace_id = r.namespace_id AND p.room = r.code AND p.prequeue)
                      AS "prequeue!",
                  now() AS "now!"
             FROM rooms r WHERE namespace_id = $1 AND code = $2 AND declared"#,
        namespace_id as _,
        room
    )
    .fetch_optional(pg)
    .await?;
    Ok(row.map(|row| {
        let started = row.opens_at.is_some_and(|at| at <= row.now);
        RoomView {
            code: row.code,
            max_active: row.max_active,
            admit_per_minute: row.admit_per_minute,
            pass_seconds: row.pass_seconds,
            heartbeat_seconds: row.heartbeat_seconds,
            active: row.active,
            waiting: row.waiting,
            opens_at: row.opens_at,
            prequeue_opens_at: row.prequeue_opens_at,
            shuffle_prequeue: row.shuffle_prequeue,
            seed_sha256: row.opens_at.map(|_| hex::encode(Sha256::digest(&row.seed))),
            seed: started.then(|| hex::encode(&row.seed)),
            drawn_at: row.drawn_at,
            prequeue: row.prequeue,
            admitted_total: row.admitted_total,
            left_total: row.left_total,
            expired_total: row.lapsed_total,
            observed_at: row.now,
        }
    }))
}

/// Up to `limit` pre-queue join ids of the room after `after` (from the first without it),
/// sorted by id: an order that says nothing about the draw, and one a reader can page through
/// (`room_places_prequeue` serves it) while joins are still coming.
pub async fn prequeue_ids(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Uuid>, DurableError> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM room_places
          WHERE namespace_id = $1 AND room = $2 AND prequeue
            AND ($3::uuid IS NULL OR id > $3)
          ORDER BY id LIMIT $4",
        namespace_id as _,
        room,
        after,
        limit
    )
    .fetch_all(pg)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_is_the_digest_order_of_seed_and_id_text() {
        let seed = [7u8; 32];
        let ids: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
        let ordered = order(&seed, &ids);
        let mut sorted = ids.clone();
        sorted.sort_by_key(|id| {
            let mut hasher = Sha256::new();
            hasher.update(seed);
            hasher.update(id.to_string());
            hasher.finalize().to_vec()
        });
        assert_eq!(ordered, sorted);
        // Another seed, another order; the same seed, the same order.
        assert_ne!(order(&[8u8; 32], &ids), ordered);
        let mut reversed = ids.clone();
        reversed.reverse();
        assert_eq!(order(&seed, &reversed), ordered);
    }
}
