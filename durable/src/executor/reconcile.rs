//! The reconciler: repairs commands PostgreSQL holds as waiting whose projection is missing or
//! incomplete in Redis — committed while the gateway's projection write failed, or put back by
//! a mirror that could not reach Redis. Without it such a command waits until the next rebuild.
//!
//! It only ever adds: a missing projection is written by `accept.lua` (idempotent, counts exactly
//! once whatever became of the reservation), a queue entry missing beside a waiting status hash
//! is restored by `requeue.lua` after PostgreSQL is asked again under the row's current state. A
//! count is never lowered here, so no limit gets looser. One executor reconciles at a time
//! (advisory lock); each round looks at a bounded slice of each application's waiting rows and
//! the next round continues where it stopped.

use std::collections::HashMap;

use fred::prelude::*;
use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::claim::current_state;
use super::land::mirror_current;
use crate::DurableError;
use crate::outbox::rfc3339;
use crate::projection::settle::{Accepted, accept};
use crate::projection::{AppKeys, Scripts, request_key_field};

const LOCK_RECONCILE: i64 = 0x51_1CE0_0006;
/// Waiting rows looked at per application and round.
const SLICE: i64 = 500;

/// Where the last round stopped, per application (queue sequence).
#[derive(Debug, Default)]
pub struct Cursor {
    after: HashMap<Uuid, i64>,
}

/// One round over `applications`; returns how many commands it repaired. Rows changed less than
/// `grace` ago are left alone: their gateway or executor may still be projecting them.
pub async fn reconcile_projection(
    pg: &PgPool,
    redis: &Pool,
    scripts: &Scripts,
    applications: &[Uuid],
    cursor: &mut Cursor,
    retention_seconds: i64,
    grace: std::time::Duration,
) -> Result<usize, DurableError> {
    let mut tx = pg.begin().await?;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(LOCK_RECONCILE)
        .fetch_one(&mut *tx)
        .await?;
    if !got {
        return Ok(0);
    }
    let mut repaired = 0;
    for &application_id in applications {
        let after = cursor
            .after
            .get(&application_id)
            .copied()
            .unwrap_or(i64::MIN);
        let rows = sqlx::query(
            "SELECT id, namespace_id, command, subject, request_key, content_sha256, resource_key,
                    queue_seq, accepted_at, deadline_at, limit_keys
               FROM commands
              WHERE application_id = $1 AND status IN ('accepted', 'retry_wait')
                AND lease_owner IS NULL AND queue_seq > $2
                AND updated_at < now() - make_interval(secs => $4)
              ORDER BY queue_seq LIMIT $3",
        )
        .bind(application_id)
        .bind(after)
        .bind(SLICE)
        .bind(grace.as_secs_f64())
        .fetch_all(pg)
        .await?;
        let last = rows
            .last()
            .map(|r| r.try_get::<i64, _>("queue_seq"))
            .transpose()?;
        match last {
            Some(seq) if rows.len() as i64 == SLICE => cursor.after.insert(application_id, seq),
            _ => cursor.after.remove(&application_id),
        };
        if rows.is_empty() {
            continue;
        }
        let keys = AppKeys::new(application_id);
        let waiting: Vec<Waiting> = rows
            .iter()
            .map(Waiting::from_row)
            .collect::<Result<_, _>>()?;
        let seen = projected(redis, scripts, &keys, &waiting).await?;
        let mut unqueued = Vec::new();
        for (row, (status, queued)) in waiting.iter().zip(seen) {
            match status.as_deref() {
                None => {
                    tracing::warn!(command_id = %row.id, "committed command missing from Redis; projecting it");
                    accept(redis, scripts, &keys, &[row.accepted()]).await?;
                    repaired += 1;
                }
                Some("accepted" | "retry_wait") if !queued => unqueued.push(row.id),
                _ => {}
            }
        }
        if !unqueued.is_empty() {
            // Asked again under the rows' current state: one claimed meanwhile is left alone.
            for row in current_state(pg, &unqueued).await? {
                if mirror_current(redis, scripts, &keys, retention_seconds, &row).await {
                    tracing::warn!(command_id = %row.id, "waiting command missing from its queue; back in line");
                    repaired += 1;
                }
            }
        }
    }
    tx.commit().await?;
    Ok(repaired)
}

/// A waiting row as the projection needs it.
struct Waiting {
    id: Uuid,
    namespace_id: Uuid,
    command: String,
    subject: String,
    request_key: String,
    content_sha256: Vec<u8>,
    resource_key: String,
    queue_seq: i64,
    accepted_at: chrono::DateTime<chrono::Utc>,
    deadline_at: chrono::DateTime<chrono::Utc>,
    limit_keys: serde_json::Value,
}

impl Waiting {
    fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            namespace_id: row.try_get("namespace_id")?,
            command: row.try_get("command")?,
            subject: row.try_get("subject")?,
            request_key: row.try_get("request_key")?,
            content_sha256: row.try_get("content_sha256")?,
            resource_key: row.try_get("resource_key")?,
            queue_seq: row.try_get("queue_seq")?,
            accepted_at: row.try_get("accepted_at")?,
            deadline_at: row.try_get("deadline_at")?,
            limit_keys: row.try_get("limit_keys")?,
        })
    }

    fn accepted(&self) -> Accepted {
        let limit_keys = match &self.limit_keys {
            serde_json::Value::Array(keys) if !keys.is_empty() => self.limit_keys.to_string(),
            _ => String::new(),
        };
        Accepted {
            command_id: self.id,
            namespace_id: self.namespace_id,
            command: self.command.clone(),
            resource_key: self.resource_key.clone(),
            request_key_field: request_key_field(&self.subject, &self.request_key),
            content_sha256_hex: hex::encode(&self.content_sha256),
            queue_seq: self.queue_seq,
            accepted_at: rfc3339(self.accepted_at),
            deadline_at: rfc3339(self.deadline_at),
            limit_keys,
        }
    }
}

/// Each row's projected status (None: no status hash) and whether it is in its queue.
async fn projected(
    redis: &Pool,
    scripts: &Scripts,
    keys: &AppKeys,
    rows: &[Waiting],
) -> Result<Vec<(Option<String>, bool)>, DurableError> {
    let mut script_keys = Vec::with_capacity(rows.len() * 2);
    let mut args: Vec<Value> = Vec::with_capacity(rows.len());
    for row in rows {
        script_keys.push(keys.command(row.id));
        script_keys.push(keys.queue(row.namespace_id, &row.command, &row.resource_key));
        args.push(row.id.to_string().into());
    }
    let answer: Vec<Value> = scripts.projected.call(redis, script_keys, args).await?;
    if answer.len() != rows.len() * 2 {
        return Err(DurableError::script(
            "projected.lua",
            "one pair per command",
        ));
    }
    Ok(answer
        .chunks(2)
        .map(|pair| (pair[0].as_string(), pair[1].as_i64() == Some(1)))
        .collect())
}
