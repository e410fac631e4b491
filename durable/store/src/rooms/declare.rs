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

use super::Pace;
use crate::DurableError;
use crate::declaration::{Declaration, RoomDecl, room_opens_at};
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
            r#"SELECT opens_at, shuffle_prequeue, drawn_at, max_active, admit_per_minute,
                      pass_seconds, heartbeat_seconds
                 FROM rooms WHERE namespace_id = $1 AND code = $2 FOR UPDATE"#,
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
        let pace = pace_of(room);
        // Read under the row's lock, so what the upsert replaces is what was compared.
        let loosened = started.as_ref().is_some_and(|row| {
            let before = Pace {
                max_active: row.max_active,
                admit_per_minute: row.admit_per_minute,
                pass_seconds: row.pass_seconds,
                heartbeat_seconds: row.heartbeat_seconds,
            };
            let start_brought_forward = row.drawn_at.is_none()
                && row
                    .opens_at
                    .is_some_and(|old| opens_at.is_none_or(|new| new < old));
            start_brought_forward || pace.admits_sooner_than(&before)
        });
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        sqlx::query!(
            "INSERT INTO rooms (namespace_id, code, max_active, admit_per_minute, pass_seconds,
                                heartbeat_seconds, opens_at, prequeue_seconds, shuffle_prequeue, seed)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (namespace_id, code) DO UPDATE
                SET loosened_at = CASE WHEN $11 THEN clock_timestamp() ELSE rooms.loosened_at END,
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
            pace.max_active,
            pace.admit_per_minute,
            pace.pass_seconds,
            pace.heartbeat_seconds,
            opens_at,
            room.prequeue_seconds.map(|n| n as i32),
            room.shuffle_prequeue,
            &seed[..],
            loosened
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

/// The limits a declared room is applied with, as the rooms' rows hold them.
fn pace_of(room: &RoomDecl) -> Pace {
    Pace {
        max_active: room.max_active.map(|n| n as i32),
        admit_per_minute: room.admit_per_minute.map(|n| n as i32),
        pass_seconds: room.pass_seconds as i32,
        heartbeat_seconds: room.heartbeat_seconds.map(|n| n as i32),
    }
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
