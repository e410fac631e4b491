//! The sweeper that expires overdue reservations, safe in any number of executors: each pool's
//! batch is decided under the pool's row lock (the order [`super::allocations::decide`] takes),
//! and a reservation is expired only if, once locked, it is still reserved and the database's
//! clock has passed its `expires_at`. A confirm that got the pool first wins; one that comes
//! after finds it expired.

use std::collections::BTreeMap;

use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_redis::Projection;

/// Overdue reservations read per round, oldest first.
const BATCH: i64 = 1_000;

/// Expires up to [`BATCH`] overdue reservations, one short transaction per pool, and drops the
/// cached reads of every pool that changed. Returns how many expired.
pub async fn expire_overdue(pg: &PgPool, redis: &Projection) -> Result<usize, DurableError> {
    let overdue = sqlx::query!(
        r#"SELECT a.id, a.namespace_id AS "namespace_id: NamespaceId", a.pool,
                  n.application_id AS "application_id: ApplicationId"
             FROM allocations a JOIN namespaces n ON n.id = a.namespace_id
            WHERE a.state = 'reserved' AND a.expires_at <= clock_timestamp()
            ORDER BY a.expires_at
            LIMIT $1"#,
        BATCH,
    )
    .fetch_all(pg)
    .await?;
    let mut by_pool: BTreeMap<(ApplicationId, NamespaceId, String), Vec<Uuid>> = BTreeMap::new();
    for row in overdue {
        by_pool
            .entry((row.application_id, row.namespace_id, row.pool))
            .or_default()
            .push(row.id);
    }
    let mut expired = 0;
    for ((application_id, namespace_id, pool), ids) in by_pool {
        let count = expire_in_pool(pg, namespace_id, &pool, Some(&ids)).await?;
        if count > 0 {
            expired += count;
            super::invalidate_pool(redis, application_id, namespace_id, &pool).await;
        }
    }
    Ok(expired)
}

/// Expires the reservations of `pool` (those of `only`, when given) that are still reserved
/// and overdue once the pool's row is locked; returns how many. One statement, in the order
/// [`super::allocations::decide`] takes (the pool's row, then each allocation's as it is
/// updated), so the pool is held for microseconds; run inside a transaction that already holds
/// the pool's row (the quota handler's), it takes nothing new.
pub async fn expire_in_pool(
    conn: impl sqlx::PgExecutor<'_>,
    namespace_id: NamespaceId,
    pool: &str,
    only: Option<&[Uuid]>,
) -> Result<usize, DurableError> {
    let expired = sqlx::query_scalar!(
        r#"WITH pool AS (
               SELECT code FROM quota_pools WHERE namespace_id = $1 AND code = $2 FOR UPDATE
           ), expired AS (
               UPDATE allocations a SET state = 'expired', updated_at = clock_timestamp()
                 FROM pool
                WHERE a.namespace_id = $1 AND a.pool = $2
                  AND ($3::uuid[] IS NULL OR a.id = ANY($3))
                  AND a.state = 'reserved' AND a.expires_at <= clock_timestamp()
               RETURNING a.id
           ), counted AS (
               UPDATE quota_pools q SET reserved = q.reserved - (SELECT count(*) FROM expired)
                WHERE q.namespace_id = $1 AND q.code = $2 AND EXISTS (SELECT 1 FROM expired)
               RETURNING 1 AS counted
           )
           SELECT count(*) AS "expired!" FROM expired"#,
        namespace_id as _,
        pool,
        only as _,
    )
    .fetch_one(conn)
    .await?;
    let expired = usize::try_from(expired).unwrap_or(0);
    sluice_metrics::reservations_expired(expired);
    Ok(expired)
}
