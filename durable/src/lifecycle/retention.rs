//! `prune`: retention by whole days. A day of `commands` ([`sluice_store::outbox::days`]) goes once
//! every command of it ended before the retention's cutoff: first its request keys are forgotten,
//! in pages (in `request_keys`, then in the application's Redis projection, which answers replays
//! from its own copy), then the day is detached from `commands` without blocking intake
//! (`DETACH PARTITION … CONCURRENTLY`) and dropped: no row of it is deleted one by one, and no
//! vacuum follows.
//!
//! A day stays while any command of it is unfinished (`needs_review` waits for an operator) or
//! ended after the cutoff, so a result stays readable for at least the retention after it ended,
//! as it did when rows were deleted one by one. Keys are forgotten only for commands that ended
//! before the cutoff, so a command a gateway with a clock days behind wrote into an old day keeps
//! its key, and holds its day.
//!
//! Safe in any number of executors: key pages are claimed with `FOR UPDATE SKIP LOCKED`, the drop
//! runs under an advisory lock after checking the detached table once more (a day found in use
//! after all is attached again), and a detach another executor finished first is taken as done.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_redis::{AppKeys, Projection, request_key_field};
use sluice_store::outbox::days::Day;

/// Request keys forgotten per statement.
const KEYS_PAGE: i64 = 5_000;
/// Pages per day and round: a day of ten million commands is forgotten in 500 rounds, and no
/// round keeps the other sweepers waiting long.
const PAGES_PER_ROUND: usize = 4;

const LOCK_RETENTION: i64 = 0x51_1CE0_0003;

/// What one round of retention did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub keys_forgotten: usize,
    pub days_dropped: Vec<Day>,
    /// Days past the cutoff that something still holds (an unfinished command, or one that
    /// ended after the cutoff).
    pub days_held: Vec<Day>,
}

/// One round of retention at PostgreSQL's clock: what ended more than `retention_seconds` ago.
pub async fn prune(
    pg: &PgPool,
    redis: &Projection,
    retention_seconds: i64,
) -> Result<Pruned, DurableError> {
    let now: DateTime<Utc> = sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
        .fetch_one(pg)
        .await?;
    let cutoff = now - chrono::Duration::seconds(retention_seconds.max(0));
    prune_before(pg, redis, cutoff).await
}

/// One round of retention for what ended before `cutoff`: the days that ended by then, oldest
/// first, each forgotten a few pages at a time and dropped once nothing of it is left to forget.
pub async fn prune_before(
    pg: &PgPool,
    redis: &Projection,
    cutoff: DateTime<Utc>,
) -> Result<Pruned, DurableError> {
    let pruned = round(pg, redis, cutoff).await?;
    sluice_metrics::retention_round(
        pruned.keys_forgotten,
        pruned.days_dropped.len(),
        pruned.days_held.len(),
    );
    Ok(pruned)
}

async fn round(
    pg: &PgPool,
    redis: &Projection,
    cutoff: DateTime<Utc>,
) -> Result<Pruned, DurableError> {
    let mut pruned = Pruned::default();
    for table in day_tables(pg).await? {
        if table.day.end() > cutoff {
            continue;
        }
        if !table.attached {
            // Detached by a round that stopped before dropping it.
            if drop_detached(pg, table.day, cutoff).await? {
                pruned.days_dropped.push(table.day);
            }
            continue;
        }
        if !table.detaching && held(pg, table.day, cutoff).await? {
            pruned.days_held.push(table.day);
            continue;
        }
        let mut left = true;
        for _ in 0..PAGES_PER_ROUND {
            let Some(forgotten) = forget_keys(pg, redis, table.day, cutoff).await? else {
                return Ok(pruned);
            };
            pruned.keys_forgotten += forgotten;
            if forgotten < KEYS_PAGE as usize {
                left = false;
                break;
            }
        }
        if left {
            continue;
        }
        detach(pg, &table).await?;
        if drop_detached(pg, table.day, cutoff).await? {
            pruned.days_dropped.push(table.day);
        }
    }
    Ok(pruned)
}

/// A table of a day: attached to `commands` (perhaps half detached), or left detached.
struct DayTable {
    day: Day,
    attached: bool,
    detaching: bool,
}

/// Every table of a day in the current schema, oldest first.
async fn day_tables(pg: &PgPool) -> Result<Vec<DayTable>, DurableError> {
    let rows = sqlx::query!(
        r#"SELECT c.relname::text AS "name!", c.relispartition AS "attached!",
                  coalesce(i.inhdetachpending, false) AS "detaching!"
             FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
            WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
              AND c.relkind = 'r' AND c.relname LIKE 'commands\_d%'"#
    )
    .fetch_all(pg)
    .await?;
    let mut tables: Vec<DayTable> = rows
        .into_iter()
        .filter_map(|row| {
            Day::from_partition(&row.name).map(|day| DayTable {
                day,
                attached: row.attached,
                detaching: row.detaching,
            })
        })
        .collect();
    tables.sort_by_key(|t| t.day);
    Ok(tables)
}

/// Takes the retention's advisory lock for the transaction, if no other executor holds it.
async fn retention_lock(tx: &mut sqlx::PgConnection) -> Result<bool, DurableError> {
    let got = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock($1) AS "got!""#,
        LOCK_RETENTION
    )
    .fetch_one(tx)
    .await?;
    Ok(got)
}

/// Whether a command of `day` is unfinished or ended at or after `cutoff` (two probes of partial
/// indexes of the day's partition).
async fn held(pg: &PgPool, day: Day, cutoff: DateTime<Utc>) -> Result<bool, DurableError> {
    let held = sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM commands
                           WHERE id >= $1 AND id < $2
                             AND status IN ('accepted', 'executing', 'running', 'retry_wait',
                                            'needs_review'))
               OR EXISTS (SELECT 1 FROM commands
                           WHERE id >= $1 AND id < $2 AND finished_at >= $3) AS "held!""#,
        day.first_id(),
        day.end_id(),
        cutoff
    )
    .fetch_one(pg)
    .await?;
    Ok(held)
}

/// Forgets one page of the request keys of `day`'s commands that ended before `cutoff`: deleted
/// from `request_keys` (committed first: from then on PostgreSQL takes the key as new), then from
/// Redis. None when another executor holds retention. Under that lock no other session deletes
/// or changes these rows (keys are only ever inserted or forgotten), so the page is deleted by
/// its rows' addresses, without row locks of its own.
async fn forget_keys(
    pg: &PgPool,
    redis: &Projection,
    day: Day,
    cutoff: DateTime<Utc>,
) -> Result<Option<usize>, DurableError> {
    let mut tx = pg.begin().await?;
    if !retention_lock(&mut tx).await? {
        return Ok(None);
    }
    let keys = sqlx::query!(
        r#"DELETE FROM request_keys WHERE ctid = ANY(ARRAY(
               SELECT k.ctid FROM request_keys k JOIN commands c ON c.id = k.command_id
                WHERE k.command_id >= $1 AND k.command_id < $2
                  AND c.id >= $1 AND c.id < $2 AND c.finished_at < $3
                LIMIT $4))
           RETURNING application_id AS "application_id: ApplicationId",
                     namespace_id AS "namespace_id: NamespaceId", command, subject,
                     request_key"#,
        day.first_id(),
        day.end_id(),
        cutoff,
        KEYS_PAGE
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;

    let mut fields: HashMap<(ApplicationId, NamespaceId, String), Vec<String>> = HashMap::new();
    for key in &keys {
        fields
            .entry((key.application_id, key.namespace_id, key.command.clone()))
            .or_default()
            .push(request_key_field(&key.subject, &key.request_key));
    }
    for ((application_id, namespace_id, command), fields) in fields {
        let hash = AppKeys::new(application_id).request_keys(namespace_id, &command);
        let result: Result<i64, _> =
            fred::interfaces::HashesInterface::hdel(redis.pool().next(), hash, fields).await;
        if let Err(error) = result {
            // A replay Redis still answers from its copy names a command that is gone: the
            // caller reads 404 and sends a new key. The rebuild forgets it for good.
            let error = DurableError::from(error);
            sluice_metrics::storage_error(&error);
            tracing::warn!(%error, "forgotten request keys not forgotten in Redis");
        }
    }
    Ok(Some(keys.len()))
}

/// Detaches a day from `commands` without an ACCESS EXCLUSIVE lock on it (intake goes on), or
/// finishes a detach that was interrupted. A detach another executor made first is taken as done.
async fn detach(pg: &PgPool, table: &DayTable) -> Result<(), DurableError> {
    let mode = if table.detaching {
        "FINALIZE"
    } else {
        "CONCURRENTLY"
    };
    let statement = format!(
        "ALTER TABLE commands DETACH PARTITION {} {mode}",
        table.day.partition()
    );
    // The name is a day's, digits after a fixed prefix (`Day::partition`): no input reaches it.
    let result = sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(pg)
        .await;
    if let Err(error) = result {
        let still_attached = day_tables(pg)
            .await?
            .iter()
            .any(|t| t.day == table.day && t.attached);
        if still_attached {
            return Err(error.into());
        }
    }
    Ok(())
}

/// Drops the detached table of `day` if nothing in it is unfinished, ended at or after `cutoff`
/// or still has its key; otherwise attaches it again (a late write found it). Under the retention
/// lock, with the table locked, so no write slips between the check and the drop.
async fn drop_detached(pg: &PgPool, day: Day, cutoff: DateTime<Utc>) -> Result<bool, DurableError> {
    let name = day.partition();
    let mut tx = pg.begin().await?;
    let got = retention_lock(&mut tx).await?;
    let detached = sqlx::query_scalar!(
        r#"SELECT NOT relispartition AS "detached!" FROM pg_class
            WHERE relname = $1 AND relkind = 'r'
              AND relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"#,
        name
    )
    .fetch_optional(&mut *tx)
    .await?;
    if !got || detached != Some(true) {
        return Ok(false);
    }
    // `name` is a day's, digits after a fixed prefix (`Day::partition`).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *tx)
    .await?;
    let in_use: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM {name} WHERE finished_at IS NULL OR finished_at >= $1)
             OR EXISTS (SELECT 1 FROM request_keys WHERE command_id >= $2 AND command_id < $3)"
    )))
    .bind(cutoff)
    .bind(day.first_id())
    .bind(day.end_id())
    .fetch_one(&mut *tx)
    .await?;
    // The drop of a whole day (transition `prune`), or its return.
    let statement = if in_use {
        tracing::warn!(day = %day.date(), "a day detached for retention is in use: attached again");
        format!(
            "ALTER TABLE commands ATTACH PARTITION {name} FOR VALUES FROM ('{}') TO ('{}')",
            day.first_id(),
            day.end_id()
        )
    } else {
        format!("DROP TABLE {name}")
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    if !in_use {
        tracing::info!(day = %day.date(), "a day of commands past retention dropped");
    }
    Ok(!in_use)
}
