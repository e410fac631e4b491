//! The admission ticker's step for one room, in one transaction under the room's row lock:
//!
//! 0. leaves since the last step are counted into the room's figures;
//! 1. at or after `opens_at`, once: the draw, which gives the pre-queue its order
//!    ([`super::fair_order`]), committed alone (the next steps follow in a transaction of their
//!    own, so the first passes' times are those of their commit);
//! 2. admitted places whose pass has lapsed (`pass_until` plus [`PASS_GRACE`] has passed) end
//!    (`expired`);
//! 3. the first waiting places by queue order are admitted, as many as `max_active` leaves room
//!    for (counting every place whose last pass an origin may still accept, given back or
//!    not) and the `admit_per_minute` bucket allows.
//!
//! Every gateway runs the ticker; a room whose row another one holds is skipped (`SKIP
//! LOCKED`), so any number of gateways admit exactly as one would.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::PASS_GRACE;
use super::pace::{LOOSENED_PICKUP, LOOSENED_WINDOW, Pace, first_pass_after_start};
use crate::DurableError;
use crate::ids::NamespaceId;

/// Most places admitted by one step, so one transaction stays bounded (joins wait for the
/// room's row meanwhile, for their arrival numbers); the next step goes on. Passes handed out
/// in one second end in one second (`exp` is whole seconds), so a room of 20,000 frees a
/// cohort of thousands at once: a step of 10,000 refills it in one transaction (about 0.4 s on
/// a saturated 2-core machine), where steps of 2,000 a tick apart left the last of it empty
/// for 0.6 s more.
const MAX_ADMITTED_PER_STEP: i64 = 10_000;

/// What one step did to a room.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stepped {
    pub drawn: bool,
    pub expired: u64,
    pub admitted: u64,
}

/// A room the ticker should look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomRef {
    pub namespace_id: NamespaceId,
    pub code: String,
}

/// Rooms with something to do: people waiting, passes live, or a draw due.
pub async fn busy_rooms(pg: &PgPool) -> Result<Vec<RoomRef>, DurableError> {
    Ok(sqlx::query!(
        r#"SELECT namespace_id AS "namespace_id: NamespaceId", code FROM rooms
            WHERE waiting > 0 OR active > 0
               OR (opens_at IS NOT NULL AND drawn_at IS NULL AND opens_at <= now())"#
    )
    .fetch_all(pg)
    .await?
    .into_iter()
    .map(|row| RoomRef {
        namespace_id: row.namespace_id,
        code: row.code,
    })
    .collect())
}

/// One step for `room`; `None` when another ticker holds the room right now.
///
/// The draw commits on its own, and the first admissions follow in a transaction of their own:
/// a pass's times are its admission's, and the draw of a large pre-queue takes seconds (about
/// 2 s for 100,000 places here), which passes drawn and admitted in one transaction would have
/// spent unseen (they become visible at the commit).
pub async fn step(pg: &PgPool, room: &RoomRef) -> Result<Option<Stepped>, DurableError> {
    let Some(first) = step_once(pg, room).await? else {
        return Ok(None);
    };
    if !first.drawn {
        return Ok(Some(first));
    }
    Ok(Some(match step_once(pg, room).await? {
        Some(then) => Stepped {
            drawn: true,
            ..then
        },
        None => first,
    }))
}

/// One transaction: a draw alone when one is due, else the rest of the step.
async fn step_once(pg: &PgPool, room: &RoomRef) -> Result<Option<Stepped>, DurableError> {
    let mut tx = pg.begin().await?;
    let Some(row) = sqlx::query!(
        r#"SELECT max_active, admit_per_minute, pass_seconds, heartbeat_seconds, opens_at,
                  shuffle_prequeue, seed, drawn_at, drawn_crowd, waiting, tokens, tokens_at,
                  clock_timestamp() AS "now!"
             FROM rooms WHERE namespace_id = $1 AND code = $2
              FOR UPDATE SKIP LOCKED"#,
        room.namespace_id as _,
        &room.code
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let now = row.now;
    let mut stepped = Stepped::default();
    let leaves = count_leaves(&mut tx, room).await?;
    let waiting = row.waiting - leaves.waiting;
    let opened = row.opens_at.is_none_or(|opens_at| now >= opens_at);
    // Nobody is admitted before the start: the bucket stays as it was until then.
    let tokens_at = if opened { now } else { row.tokens_at };
    let bucket = Bucket::refill(row.admit_per_minute, row.tokens, row.tokens_at, tokens_at);
    if !opened && leaves.waiting == 0 && leaves.active == 0 {
        // Before the start with nothing to count: nothing to write.
        return Ok(Some(stepped));
    }
    if opened && row.opens_at.is_some() && row.drawn_at.is_none() {
        draw(&mut tx, room, &row.seed, row.shuffle_prequeue).await?;
        stepped.drawn = true;
    }
    if opened && !stepped.drawn {
        stepped.expired = expire(&mut tx, room, now).await?;
        let room_left = match row.max_active {
            Some(max) => (i64::from(max) - holding(&mut tx, room, now).await?).max(0),
            None => i64::MAX,
        };
        let wanted = room_left
            .min(bucket.whole())
            .min(waiting)
            .min(MAX_ADMITTED_PER_STEP);
        if wanted > 0 {
            let pace = Pace {
                max_active: row.max_active,
                admit_per_minute: row.admit_per_minute,
                pass_seconds: row.pass_seconds,
                heartbeat_seconds: row.heartbeat_seconds,
            };
            let pickup = first_pass_after_start(&pace, row.drawn_at, row.drawn_crowd, now);
            stepped.admitted = admit(&mut tx, room, wanted, now, pickup).await?;
        }
    }
    sqlx::query!(
        "UPDATE rooms
            SET active = active - $3 + $4 - $7, waiting = waiting - $4 - $8,
                admitted_total = admitted_total + $4, lapsed_total = lapsed_total + $3,
                left_total = left_total + $7 + $8,
                tokens = $5, tokens_at = $9,
                drawn_at = CASE WHEN $6 THEN clock_timestamp() ELSE drawn_at END,
                drawn_crowd = CASE WHEN $6 THEN next_seq ELSE drawn_crowd END
          WHERE namespace_id = $1 AND code = $2",
        room.namespace_id as _,
        &room.code,
        stepped.expired as i64,
        stepped.admitted as i64,
        bucket.after(stepped.admitted),
        stepped.drawn,
        leaves.active,
        leaves.waiting,
        tokens_at
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(stepped))
}

/// Leaves not yet in the room's figures, by what the place was when it left.
struct Leaves {
    waiting: i64,
    active: i64,
}

/// Counts the room's leaves since the last step into its figures (a leave changes only its
/// place's row, see [`super::places::leave`]), each exactly once.
async fn count_leaves(tx: &mut sqlx::PgConnection, room: &RoomRef) -> Result<Leaves, DurableError> {
    let counted = sqlx::query!(
        r#"WITH counted AS (
               UPDATE room_places SET leave_counted = true
                WHERE namespace_id = $1 AND room = $2 AND NOT leave_counted
            RETURNING admitted_at IS NULL AS was_waiting)
           SELECT count(*) FILTER (WHERE was_waiting) AS "waiting!",
                  count(*) FILTER (WHERE NOT was_waiting) AS "active!"
             FROM counted"#,
        room.namespace_id as _,
        &room.code
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(Leaves {
        waiting: counted.waiting,
        active: counted.active,
    })
}

/// Gives every undrawn pre-queue place its queue order: the pre-queue's own arrival numbers,
/// handed out again in the order [`super::fair_order`] documents (or in arrival order when the
/// room does not shuffle), so orders stay unique and every later arrival stays behind. The two
/// orders are zipped as arrays: one pass over the pre-queue and one index look-up per place
/// (a join of two ranked sets planned as a nested loop took minutes for 10,000).
async fn draw(
    tx: &mut sqlx::PgConnection,
    room: &RoomRef,
    seed: &[u8],
    shuffle: bool,
) -> Result<(), DurableError> {
    sqlx::query!(
        r#"WITH pre AS (
               SELECT id, seq,
                      CASE WHEN $4 THEN sha256($3 || convert_to(id::text, 'UTF8')) END AS draw
                 FROM room_places
                WHERE namespace_id = $1 AND room = $2 AND prequeue AND ord IS NULL),
           drawn AS (
               SELECT array_agg(id ORDER BY draw, CASE WHEN $4 THEN id::text END COLLATE "C", seq)
                          AS ids,
                      array_agg(seq ORDER BY seq) AS seqs
                 FROM pre)
           UPDATE room_places p SET ord = pairs.seq
             FROM drawn, unnest(drawn.ids, drawn.seqs) AS pairs (id, seq)
            WHERE p.id = pairs.id"#,
        room.namespace_id as _,
        &room.code,
        seed,
        shuffle
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Ends every admitted place of the room whose pass lapsed: `pass_until` plus the grace is at
/// or before `now`.
async fn expire(
    tx: &mut sqlx::PgConnection,
    room: &RoomRef,
    now: DateTime<Utc>,
) -> Result<u64, DurableError> {
    let expired = sqlx::query!(
        "UPDATE room_places SET state = 'expired', ended_at = pass_until
          WHERE namespace_id = $1 AND room = $2 AND state = 'admitted'
            AND pass_until <= $3::timestamptz - make_interval(secs => $4)",
        room.namespace_id as _,
        &room.code,
        now,
        PASS_GRACE.as_secs_f64()
    )
    .execute(&mut *tx)
    .await?;
    Ok(expired.rows_affected())
}

/// Places holding a slot of `max_active` at `now`: admitted or given back, with a pass an
/// origin may still accept. Two ranges of two indexes (`room_places_admitted`,
/// `room_places_given_back`), neither keyed by `pass_until`, which heartbeats move.
async fn holding(
    tx: &mut sqlx::PgConnection,
    room: &RoomRef,
    now: DateTime<Utc>,
) -> Result<i64, DurableError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT (SELECT count(*) FROM room_places
                    WHERE namespace_id = $1 AND room = $2 AND state = 'admitted'
                      AND pass_until > $3::timestamptz - make_interval(secs => $4))
                + (SELECT count(*) FROM room_places
                    WHERE namespace_id = $1 AND room = $2 AND holds_until IS NOT NULL
                      AND holds_until > $3::timestamptz - make_interval(secs => $4))
                  AS "holding!""#,
        room.namespace_id as _,
        &room.code,
        now,
        PASS_GRACE.as_secs_f64()
    )
    .fetch_one(&mut *tx)
    .await?)
}

/// Admits the first `count` waiting places by queue order; the room's `admitted_through`
/// follows. A pass's times are whole seconds (its `iat` and `exp`): it runs until the earlier
/// of `pass_seconds` and, when heartbeats are required, the latest of `heartbeat_seconds`,
/// `pickup` (the holder has not seen it yet: [`super::FIRST_PASS_PICKUP`], longer while a pre-queue is
/// still coming back at the start, [`first_pass_after_start`]) and, within [`LOOSENED_WINDOW`]
/// of an apply that loosened the room, [`LOOSENED_PICKUP`] (its holder may have been told to
/// come back later, under the old limits: [`super::pace`]).
async fn admit(
    tx: &mut sqlx::PgConnection,
    room: &RoomRef,
    count: i64,
    now: DateTime<Utc>,
    pickup: std::time::Duration,
) -> Result<u64, DurableError> {
    let admitted = sqlx::query!(
        r#"WITH next AS (
               SELECT id FROM room_places
                WHERE namespace_id = $1 AND room = $2 AND state = 'waiting' AND ord IS NOT NULL
                ORDER BY ord LIMIT $3),
           admitted AS (
               UPDATE room_places p
                  SET state = 'admitted', admitted_at = $4,
                      renewed_at = date_trunc('second', $4::timestamptz),
                      pass_until = date_trunc('second', $4::timestamptz) + make_interval(
                          secs => least(r.pass_seconds,
                                        greatest(coalesce(r.heartbeat_seconds, r.pass_seconds),
                                                 $5::int,
                                                 CASE WHEN r.loosened_at
                                                           > $4::timestamptz - make_interval(secs => $7)
                                                      THEN $6::int ELSE 0 END)))
                 FROM next, rooms r
                WHERE p.id = next.id AND r.namespace_id = $1 AND r.code = $2
                  -- Checked again on a row a leave changed meanwhile (the update waits for the
                  -- leave's commit, then skips the place), so the places need no lock of their
                  -- own first; said so that no partial index's predicate follows from it.
                  AND CASE p.state WHEN 'waiting' THEN true ELSE false END
            RETURNING p.ord)
           UPDATE rooms SET admitted_through = greatest(admitted_through, (SELECT max(ord) FROM admitted))
            WHERE namespace_id = $1 AND code = $2 AND EXISTS (SELECT 1 FROM admitted)
        RETURNING (SELECT count(*) FROM admitted) AS "admitted!""#,
        room.namespace_id as _,
        &room.code,
        count,
        now,
        i32::try_from(pickup.as_secs()).unwrap_or(i32::MAX),
        LOOSENED_PICKUP.as_secs() as i32,
        LOOSENED_WINDOW.as_secs_f64()
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(admitted.map_or(0, |row| row.admitted as u64))
}

/// The `admit_per_minute` bucket: refills evenly, holds at most one second's worth (at least
/// one admission), so no minute admits more than the rate and a second's burst.
struct Bucket {
    tokens: f64,
    limited: bool,
}

impl Bucket {
    fn refill(
        per_minute: Option<i32>,
        tokens: f64,
        tokens_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Self {
        let Some(per_minute) = per_minute else {
            return Self {
                tokens: 0.0,
                limited: false,
            };
        };
        let per_second = f64::from(per_minute) / 60.0;
        let capacity = per_second.max(1.0);
        let elapsed = (now - tokens_at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
        let tokens = (tokens.max(0.0) + elapsed.max(0.0) * per_second).min(capacity);
        Self {
            tokens,
            limited: true,
        }
    }

    fn whole(&self) -> i64 {
        if self.limited {
            self.tokens.floor() as i64
        } else {
            i64::MAX
        }
    }

    fn after(&self, admitted: u64) -> f64 {
        if self.limited {
            (self.tokens - admitted as f64).max(0.0)
        } else {
            0.0
        }
    }
}
