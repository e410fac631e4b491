//! A declaration's `[[room]]`s, applied in the declaration's transaction.
//!
//! A room's row keeps its places' bookkeeping across applies: an apply changes the settings,
//! never the counts or the seed. The seed is drawn when the room is first declared and never
//! changes, so the SHA-256 published before the start always commits to the order drawn at it.
//! Once the pre-queue has been drawn, the start and whether it is shuffled can no longer change.
//! A room left out of a later declaration keeps its row (its passes run out as declared) and
//! takes no more joins. An apply that lets a room admit sooner than before (a larger or removed
//! `max_active` or `admit_per_minute`, a start brought forward, a shorter first pass) records
//! when (`loosened_at`): people were told when to come back under the old limits
//! ([`super::pace`]).

use chrono::{DateTime, Utc};
use rand::RngCore as _;

use crate::DurableError;
use crate::declaration::{Declaration, room_opens_at};
use crate::field_error::FieldError;
use crate::ids::NamespaceId;

pub async fn apply(
    tx: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
    declaration: &Declaration,
) -> Result<(), DurableError> {
    for (index, room) in declaration.rooms.iter().enumerate() {
        let opens_at = room_opens_at(room);
        let started = sqlx::query!(
            r#"SELECT opens_at, shuffle_prequeue, drawn_at FROM rooms
                WHERE namespace_id = $1 AND code = $2 FOR UPDATE"#,
            namespace_id as _,
            &room.code
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = &started
            && row.drawn_at.is_none()
            && row.opens_at.is_some()
            && opens_at.is_none()
        {
            check_no_prequeue(tx, namespace_id, index, &room.code).await?;
        }
        if let Some(row) = &started
            && let Some(drawn_at) = row.drawn_at
        {
            check_started(index, drawn_at, row.opens_at, opens_at)?;
            if row.shuffle_prequeue != room.shuffle_prequeue {
                return Err(FieldError::new(
                    format!("room[{index}].shuffle_prequeue"),
                    "the pre-queue was drawn; how it is ordered can no longer change",
                )
                .into());
            }
        }
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        sqlx::query!(
            "INSERT INTO rooms (namespace_id, code, max_active, admit_per_minute, pass_seconds,
                                heartbeat_seconds, opens_at, prequeue_seconds, shuffle_prequeue, seed)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (namespace_id, code) DO UPDATE
                SET loosened_at = CASE
                        WHEN (rooms.max_active IS NOT NULL
                              AND (EXCLUDED.max_active IS NULL
                                   OR EXCLUDED.max_active > rooms.max_active))
                          OR (rooms.admit_per_minute IS NOT NULL
                              AND (EXCLUDED.admit_per_minute IS NULL
                                   OR EXCLUDED.admit_per_minute > rooms.admit_per_minute))
                          OR (rooms.drawn_at IS NULL AND rooms.opens_at IS NOT NULL
                              AND (EXCLUDED.opens_at IS NULL OR EXCLUDED.opens_at < rooms.opens_at))
                          OR least(EXCLUDED.pass_seconds,
                                   greatest(coalesce(EXCLUDED.heartbeat_seconds, EXCLUDED.pass_seconds), $11::int))
                             < least(rooms.pass_seconds,
                                     greatest(coalesce(rooms.heartbeat_seconds, rooms.pass_seconds), $11::int))
                        THEN clock_timestamp() ELSE rooms.loosened_at END,
                    max_active = EXCLUDED.max_active,
                    admit_per_minute = EXCLUDED.admit_per_minute,
                    pass_seconds = EXCLUDED.pass_seconds,
                    heartbeat_seconds = EXCLUDED.heartbeat_seconds,
                    opens_at = EXCLUDED.opens_at,
                    prequeue_seconds = EXCLUDED.prequeue_seconds,
                    shuffle_prequeue = EXCLUDED.shuffle_prequeue,
                    declared = true",
            namespace_id as _,
            &room.code,
            room.max_active.map(|n| n as i32),
            room.admit_per_minute.map(|n| n as i32),
            room.pass_seconds as i32,
            room.heartbeat_seconds.map(|n| n as i32),
            opens_at,
            room.prequeue_seconds.map(|n| n as i32),
            room.shuffle_prequeue,
            &seed[..],
            super::FIRST_PASS_PICKUP.as_secs() as i32
        )
        .execute(&mut *tx)
        .await?;
    }
    let codes: Vec<String> = declaration.rooms.iter().map(|r| r.code.clone()).collect();
    sqlx::query!(
        "UPDATE rooms SET declared = false
          WHERE namespace_id = $1 AND declared AND code <> ALL($2::text[])",
        namespace_id as _,
        &codes
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A start may move until the draw, but not go while people wait in the pre-queue: they would
/// never be drawn.
async fn check_no_prequeue(
    tx: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
    index: usize,
    code: &str,
) -> Result<(), DurableError> {
    let waiting = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM room_places
                           WHERE namespace_id = $1 AND room = $2 AND prequeue) AS "waiting!""#,
        namespace_id as _,
        code
    )
    .fetch_one(&mut *tx)
    .await?;
    if waiting {
        return Err(FieldError::new(
            format!("room[{index}].opens_at"),
            "people joined the pre-queue: the start can move until it is reached, but not go",
        )
        .into());
    }
    Ok(())
}

/// A drawn room's start is history (a draw happens only at a set `opens_at`): refuse an apply
/// that would move or remove it.
fn check_started(
    index: usize,
    drawn_at: DateTime<Utc>,
    stored_opens_at: Option<DateTime<Utc>>,
    opens_at: Option<DateTime<Utc>>,
) -> Result<(), FieldError> {
    if stored_opens_at != opens_at {
        let drawn = crate::outbox::rfc3339(drawn_at);
        return Err(FieldError::new(
            format!("room[{index}].opens_at"),
            format!(
                "the room started (its pre-queue was drawn at {drawn}); its start can no longer change"
            ),
        ));
    }
    Ok(())
}
