//! Joining a room: one live place per subject.
//!
//! A new place takes the next arrival number under the room's row lock and reads the clock
//! while holding it, so arrival numbers and the pre-queue cut (`clock < opens_at`) agree: every
//! pre-queue place has a smaller number than every place that came after the start, and the
//! draw (which takes the same lock) sees every pre-queue place committed. A join also takes the
//! namespace's control lock shared, as an enqueue does, so once an operator's pause has
//! answered no join slips in.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{Place, RoomRefusal, places};
use crate::DurableError;
use crate::ids::NamespaceId;

/// What a join found or made.
#[derive(Debug)]
pub enum Joined {
    /// A new place, at the back of the queue (or in the pre-queue).
    New(Place),
    /// The subject's live place, as it is now (a repeated join changes nothing).
    Existing(Place),
}

/// Joins `room` as `subject`. `challenge_id` is the proof-of-work challenge the join solved,
/// when the room asks for one: a new place records it, and a challenge already recorded is
/// refused ([`RoomRefusal::ChallengeUsed`]) with nothing written. A repeated join of a subject
/// with a live place uses up nothing.
pub async fn join(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
    subject: &str,
    challenge_id: Option<Uuid>,
) -> Result<Result<Joined, RoomRefusal>, DurableError> {
    if let Some(place) = live_place(pg, namespace_id, room, subject).await? {
        return Ok(Ok(Joined::Existing(place)));
    }
    match insert(pg, namespace_id, room, subject, challenge_id).await {
        Ok(Ok(id)) => Ok(places::read(pg, namespace_id, id)
            .await?
            .map(Joined::New)
            .ok_or(RoomRefusal::NoRoom)),
        Ok(Err(refusal)) => Ok(Err(refusal)),
        // Another join of the same subject committed first: that place is the answer.
        Err(DurableError::Postgres(sqlx::Error::Database(e)))
            if e.constraint() == Some("room_places_live_subject") =>
        {
            Ok(live_place(pg, namespace_id, room, subject)
                .await?
                .map(Joined::Existing)
                .ok_or(RoomRefusal::NoRoom))
        }
        // The challenge bought a place already: the subject's own (a concurrent join with the
        // same solution) is the answer, else the solution is spent.
        Err(DurableError::Postgres(sqlx::Error::Database(e)))
            if e.constraint() == Some("room_places_challenge") =>
        {
            Ok(live_place(pg, namespace_id, room, subject)
                .await?
                .map(Joined::Existing)
                .ok_or(RoomRefusal::ChallengeUsed))
        }
        Err(error) => Err(error),
    }
}

/// Joins so far in `room` (its arrival counter), for the rate adaptive proof of work follows;
/// `None` when the room does not exist.
pub async fn arrivals(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
) -> Result<Option<i64>, DurableError> {
    Ok(sqlx::query_scalar!(
        "SELECT next_seq FROM rooms WHERE namespace_id = $1 AND code = $2",
        namespace_id as _,
        room
    )
    .fetch_optional(pg)
    .await?)
}

async fn live_place(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
    subject: &str,
) -> Result<Option<Place>, DurableError> {
    let id = sqlx::query_scalar!(
        "SELECT id FROM room_places
          WHERE namespace_id = $1 AND room = $2 AND subject = $3
            AND state IN ('waiting', 'admitted')",
        namespace_id as _,
        room,
        subject
    )
    .fetch_optional(pg)
    .await?;
    match id {
        Some(id) => places::read(pg, namespace_id, id).await,
        None => Ok(None),
    }
}

/// The new place's id, in one transaction: the pause checked under the control lock, the
/// room's row locked while taking the arrival number, the place inserted.
async fn insert(
    pg: &PgPool,
    namespace_id: NamespaceId,
    room: &str,
    subject: &str,
    challenge_id: Option<Uuid>,
) -> Result<Result<Uuid, RoomRefusal>, DurableError> {
    let mut tx = pg.begin().await?;
    let paused = sqlx::query_scalar!(
        r#"SELECT coalesce(
               (SELECT paused FROM controls WHERE namespace_id = $1::uuid AND command = ''), false)
               AS "paused!"
             FROM (SELECT pg_advisory_xact_lock_shared(
                          hashtextextended('sluice:control:' || $1::text, 0))) AS locked"#,
        namespace_id as _
    )
    .fetch_one(&mut *tx)
    .await?;
    if paused {
        return Ok(Err(RoomRefusal::Paused));
    }
    let taken = sqlx::query!(
        r#"WITH clock AS (SELECT clock_timestamp() AS now)
           UPDATE rooms r SET next_seq = r.next_seq + 1, waiting = r.waiting + 1
             FROM clock
            WHERE r.namespace_id = $1 AND r.code = $2 AND r.declared
              AND (r.opens_at IS NULL OR r.prequeue_seconds IS NULL
                   OR clock.now >= r.opens_at - make_interval(secs => r.prequeue_seconds))
        RETURNING r.next_seq, clock.now AS "now!",
                  (r.opens_at IS NOT NULL AND clock.now < r.opens_at) AS "prequeue!""#,
        namespace_id as _,
        room
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(taken) = taken else {
        return Ok(Err(not_open(&mut tx, namespace_id, room).await?));
    };
    let id = Uuid::new_v4();
    sqlx::query!(
        "INSERT INTO room_places
                (id, namespace_id, room, subject, seq, prequeue, ord, state, joined_at, challenge_id)
         VALUES ($1, $2, $3, $4, $5::bigint, $6::boolean, CASE WHEN $6 THEN NULL ELSE $5 END,
                 'waiting', $7, $8)",
        id,
        namespace_id as _,
        room,
        subject,
        taken.next_seq,
        taken.prequeue,
        taken.now,
        challenge_id
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Ok(id))
}

/// Why the room's row took no join: it does not exist, or its pre-queue has not opened.
async fn not_open(
    tx: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
    room: &str,
) -> Result<RoomRefusal, DurableError> {
    let opens: Option<Option<DateTime<Utc>>> = sqlx::query_scalar!(
        "SELECT opens_at - make_interval(secs => prequeue_seconds) FROM rooms
          WHERE namespace_id = $1 AND code = $2 AND declared",
        namespace_id as _,
        room
    )
    .fetch_optional(&mut *tx)
    .await?;
    Ok(match opens.flatten() {
        Some(prequeue_opens_at) => RoomRefusal::NotOpenYet { prequeue_opens_at },
        None => RoomRefusal::NoRoom,
    })
}
