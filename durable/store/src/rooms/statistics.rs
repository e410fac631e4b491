//! Fresh planner statistics for `room_places` while a drop fills it.
//!
//! A drop's room grows from nothing to 100,000 places in a minute, and its places change state
//! by the thousand a second once it opens. Autovacuum looks at a table at most once a minute
//! (`autovacuum_naptime`), so for that whole minute PostgreSQL plans the room's statements
//! with statistics of a room that was nearly empty, and each connection keeps the plans it made
//! then. Seen in a 100,000-person run: the live-place lookup of a join batch read the whole
//! table, and the heartbeats' statement scanned every admitted place per batch (1.4 to 1.7 s a
//! batch). The admission ticker therefore analyzes the table itself once it has changed by half
//! (and at least [`MIN_CHANGED`] rows) since it was last analyzed. `ANALYZE` samples at most
//! 30,000 rows whatever the table's size, and it invalidates every plan cached on the table, so
//! the next execution of each statement is planned for the room as it is.

use sqlx::PgPool;

use crate::DurableError;

/// Fewer changed rows than this never warrant an analysis (autovacuum's own threshold is 50).
pub const MIN_CHANGED: i64 = 1_000;

/// Analyzes `room_places` when it has changed by half since its last analysis (by anyone,
/// autovacuum included); whether it did. One gateway at a time: the others skip (an advisory
/// lock taken without waiting), so gateways never queue behind each other's analysis.
pub async fn refresh(pg: &PgPool) -> Result<bool, DurableError> {
    let drift = sqlx::query!(
        r#"SELECT n_mod_since_analyze AS "changed!", n_live_tup AS "live!"
             FROM pg_stat_user_tables WHERE relid = 'room_places'::regclass"#
    )
    .fetch_optional(pg)
    .await?;
    let Some(drift) = drift else {
        return Ok(false);
    };
    if drift.changed < MIN_CHANGED.max(drift.live / 2) {
        return Ok(false);
    }
    let mut tx = pg.begin().await?;
    let ours = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock(hashtextextended('sluice:rooms:analyze', 0))
                  AS "ours!""#
    )
    .fetch_one(&mut *tx)
    .await?;
    if ours {
        sqlx::query!("ANALYZE room_places")
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(ours)
}
