//! Rebuild of one application's Redis projection from PostgreSQL: an epoch change.
//!
//! 1. One rebuilder per application at a time (a transaction-level advisory lock held by a
//!    transaction that stays open for the whole rebuild, so a rebuilder that dies releases it).
//! 2. **Fence**: the projection is marked not ready first (`ready.lua`); from here every script
//!    that decides or writes answers `NOT_READY`, and its caller retries after the rebuild.
//! 3. **Advance the epoch** in PostgreSQL (`projections.generation + 1`). Commits and claims
//!    made under the old generation hold its row `FOR SHARE` and check it, so the ones in flight
//!    finish first and every later one is refused: nothing of the old epoch can commit after
//!    the snapshot.
//! 4. **Snapshot** (REPEATABLE READ, taken after 3): queues in their original order, permits of
//!    every row in hand (executing, between two attempts, running) under their attempt,
//!    counters, request keys, the queue sequence, pauses and budgets, written through
//!    `rebuild.lua`, which writes only while this rebuild's fence is the one in place in the
//!    Redis process that fenced it. The lock alone does not ensure that: a rebuild whose caller
//!    gave up (its future dropped while the client still had its commands queued) or whose
//!    lock's connection was cut goes on writing after the next rebuild started, and its late
//!    clear would delete the newer projection's permits.
//! 5. **Open** at the new generation (`ready.lua`), only if the fence is still in place in the
//!    same Redis process: a FLUSHALL or a restart while the rebuild wrote would otherwise open
//!    half a projection.
//!
//! Writes that reached Redis before the fence came from PostgreSQL commits made before the
//! snapshot, so the snapshot holds them; writes refused by the fence are made again after the
//! rebuild, and every life-cycle script is idempotent for them. Counts are therefore exact
//! afterwards.

use std::collections::HashMap;

use fred::prelude::*;
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;
use crate::faults::{self, Point};
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use crate::lifecycle::RUNNING_PERMIT_GRACE;
use sluice_model::CommandStatus;
use sluice_redis::Projection;
use sluice_redis::{AppKeys, request_key_field};
use sluice_store::command_row;
use sluice_store::outbox::{CommandRow, rfc3339};

/// Rows fetched and written per round trip (one `rebuild.lua` call: it blocks Redis while it
/// runs, so it stays short).
const CHUNK: i64 = 500;

/// What a rebuild did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    pub generation: i64,
    pub waiting: usize,
    pub unfinished: usize,
}

/// Rebuilds unconditionally (an operator asked).
pub async fn rebuild(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<RebuildReport, DurableError> {
    rebuild_unless_ready(pg, redis, application_id, true)
        .await?
        .ok_or_else(|| DurableError::script("rebuild", "a forced rebuild did not run"))
}

/// The rebuild itself. Unless `force`, it re-checks readiness once it holds the lock: callers
/// that found the projection missing at the same moment queue up on the lock, and only the first
/// rebuilds (a second rebuild right after would flip the projection to not-ready again under the
/// requests the first one just unblocked).
async fn rebuild_unless_ready(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
    force: bool,
) -> Result<Option<RebuildReport>, DurableError> {
    let keys = AppKeys::new(application_id);
    let mut lock = pg.begin().await?;
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended('sluice:rebuild:' || $1::text, 0))",
        application_id as _
    )
    .execute(&mut *lock)
    .await?;
    let generation: i64 = sqlx::query_scalar!(
        "INSERT INTO projections (application_id, generation) VALUES ($1, 0)
         ON CONFLICT (application_id) DO UPDATE SET generation = projections.generation
         RETURNING generation",
        application_id as _
    )
    .fetch_one(pg)
    .await?;
    let client = redis.pool().next();
    if !force && redis_is_ready(client, &keys, generation).await? {
        return Ok(None);
    }

    // 2. Fence.
    let token = fence(redis, &keys).await?;
    // 3. Advance the epoch: waits for the commits and claims of the old one in flight.
    let next_generation: i64 = sqlx::query_scalar!(
        "UPDATE projections SET generation = generation + 1, rebuilt_at = now()
          WHERE application_id = $1 RETURNING generation",
        application_id as _
    )
    .fetch_one(pg)
    .await?;
    faults::pass(Point::RebuildBeforeSnapshot, application_id).await?;

    // 4. Snapshot.
    let mut tx = pg.begin().await?;
    // The one statement of durable/src the sqlx macros do not check: it has no parameters and no
    // result, so there is nothing to check but its spelling, which every rebuild runs.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    // The first read fixes the snapshot; everything written below comes from it.
    let max_seq: Option<i64> = sqlx::query_scalar!(
        "SELECT max(queue_seq) FROM commands WHERE application_id = $1",
        application_id as _
    )
    .fetch_one(&mut *tx)
    .await?;
    faults::pass(Point::RebuildAfterSnapshot, application_id).await?;
    // The sequence handed out so far, if Redis still has it (a forced rebuild of a live
    // projection): new commands must never get a number an earlier one already holds.
    let handed_out: Option<i64> = client.get(keys.seq()).await?;
    clear_application(redis, &keys, &token).await?;

    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut waiting = 0usize;
    let mut unfinished = 0usize;
    // Pages are keyed by (queue_seq, id), so no row is skipped at a page boundary even if two
    // rows ever shared a sequence number.
    let mut after = (i64::MIN, CommandId::from_uuid(Uuid::nil()));
    loop {
        let rows = sqlx::query_file!(
            "queries/rebuild_rows.sql",
            application_id as _,
            after.0,
            CHUNK,
            after.1 as _,
            RUNNING_PERMIT_GRACE.as_secs_f64()
        )
        .fetch_all(&mut *tx)
        .await?;
        if rows.is_empty() {
            break;
        }
        let mut args: Vec<Value> = Vec::with_capacity(2 + rows.len() * ProjectedRow::ARGS);
        let mut row_keys: Vec<String> = Vec::with_capacity(rows.len() * ProjectedRow::KEYS);
        for row in rows {
            let projected = ProjectedRow {
                permit_expires_ms: row.permit_expires_at.timestamp_millis(),
                limit_keys: serde_json::from_value(row.limit_keys).unwrap_or_default(),
                attempt_id: row.attempt_id,
                held: row.held,
                row: command_row!(row),
            };
            after = (projected.row.queue_seq, projected.row.id);
            unfinished += 1;
            *counts.entry("unfinished".into()).or_default() += 1;
            if projected.is_waiting() {
                waiting += 1;
                *counts
                    .entry(format!("waiting:{}", projected.row.namespace_id))
                    .or_default() += 1;
                *counts
                    .entry(format!(
                        "queued:{}:{}",
                        projected.row.namespace_id, projected.row.command
                    ))
                    .or_default() += 1;
            }
            projected.push(&keys, &mut args, &mut row_keys);
        }
        write_fenced(redis, &keys, &token, "rows", row_keys, args).await?;
    }
    faults::pass(Point::RebuildBeforeCounts, application_id).await?;

    // Pauses and the shared budgets as PostgreSQL holds them now (not as of this transaction's
    // snapshot), each with its revision: a control or configure call committing meanwhile has
    // stored a newer one, and the newest revision wins.
    crate::converge::refresh(pg, redis, application_id).await?;
    // Reservations made before a loss of Redis may still be committing with numbers above
    // PostgreSQL's maximum; starting right after it would hand those numbers out again and queue
    // later commands ahead of earlier ones. The sequence jumps past them instead: positions are
    // ranks, so the gap is invisible.
    let next_seq = handed_out
        .unwrap_or(i64::MIN)
        .max(max_seq.unwrap_or(0).saturating_add(SEQUENCE_GAP_AFTER_LOSS));
    let mut args: Vec<Value> = vec![next_seq.into()];
    for (field, count) in counts {
        args.push(field.into());
        args.push(count.into());
    }
    write_fenced(
        redis,
        &keys,
        &token,
        "finish",
        vec![keys.seq(), keys.count()],
        args,
    )
    .await?;
    tx.commit().await?;

    // 5. Open.
    open(redis, &keys, token, next_generation, generation == 0).await?;
    lock.commit().await?;
    tracing::info!(%application_id, generation = next_generation, waiting, unfinished, "projection rebuilt");
    Ok(Some(RebuildReport {
        generation: next_generation,
        waiting,
        unfinished,
    }))
}

/// Marks the (empty) projection of `keys` ready at `generation` in this Redis process, as a
/// rebuild's last step does for an application's first projection: for tests and benchmarks
/// that write a projection by hand.
pub async fn open_empty(
    redis: &Projection,
    keys: &AppKeys,
    generation: i64,
) -> Result<(), DurableError> {
    let token = fence(redis, keys).await?;
    open(redis, keys, token, generation, true).await
}

/// `ready.lua fence`: the projection is not ready from here on; the rebuild's token. Public for
/// tests that fence a projection the way a rebuild's first step does.
pub async fn fence(redis: &Projection, keys: &AppKeys) -> Result<String, DurableError> {
    let token = Uuid::new_v4().to_string();
    let _: String = redis
        .ready(
            vec![keys.meta()],
            vec!["fence".into(), token.clone().into()],
        )
        .await?;
    Ok(token)
}

/// `ready.lua open`: ready at `generation`, unless the fence of `token` is gone (a FLUSHALL or a
/// restart while the rebuild wrote). `first`: the application never had a projection (its
/// token buckets start full).
async fn open(
    redis: &Projection,
    keys: &AppKeys,
    token: String,
    generation: i64,
    first: bool,
) -> Result<(), DurableError> {
    let opened: i64 = redis
        .ready(
            vec![keys.meta()],
            vec![
                "open".into(),
                token.into(),
                generation.into(),
                if first { "first" } else { "" }.into(),
            ],
        )
        .await?;
    if opened == 1 {
        Ok(())
    } else {
        Err(DurableError::Unavailable(
            "Redis was flushed or restarted while the projection was being rebuilt; it is \
             rebuilt again on the next request"
                .into(),
        ))
    }
}

/// How far the queue sequence jumps past PostgreSQL's highest committed number after a rebuild:
/// more than the reservations that can be in flight at once (each command's intake in-flight is
/// bounded), and small enough for 9 million rebuilds before scores leave the 2^53 range in which
/// Redis sorted-set scores are exact.
const SEQUENCE_GAP_AFTER_LOSS: i64 = 1_000_000_000;

/// Rebuilds only if the projection is missing, not ready or older than PostgreSQL's generation.
/// Returns None when the projection was fine.
pub async fn ensure_ready(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<Option<RebuildReport>, DurableError> {
    if is_ready(pg, redis, application_id).await? {
        return Ok(None);
    }
    rebuild_unless_ready(pg, redis, application_id, false).await
}

/// True when Redis holds a ready projection at least as new as PostgreSQL's generation.
pub async fn is_ready(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<bool, DurableError> {
    let stored: Option<i64> = sqlx::query_scalar!(
        "SELECT generation FROM projections WHERE application_id = $1",
        application_id as _
    )
    .fetch_optional(pg)
    .await?;
    redis_is_ready(
        redis.pool().next(),
        &AppKeys::new(application_id),
        stored.unwrap_or(0),
    )
    .await
}

/// Redis holds a ready projection of at least `generation`.
async fn redis_is_ready(
    client: &Client,
    keys: &AppKeys,
    generation: i64,
) -> Result<bool, DurableError> {
    let (ready, stored): (Option<String>, Option<i64>) = client
        .hmget(keys.meta(), vec!["ready", "generation"])
        .await?;
    Ok(ready.as_deref() == Some("1") && stored.unwrap_or(-1) >= generation)
}

/// Deletes every key of the application except `meta` (which says "not ready" meanwhile),
/// through the fence of this rebuild.
async fn clear_application(
    redis: &Projection,
    keys: &AppKeys,
    token: &str,
) -> Result<(), DurableError> {
    let client = redis.pool().next();
    let meta = keys.meta();
    let mut cursor = "0".to_string();
    loop {
        let (next, found): (String, Vec<String>) = client
            .scan_page(cursor.as_str(), keys.pattern(), Some(1_000), None)
            .await?;
        let doomed: Vec<String> = found.into_iter().filter(|k| *k != meta).collect();
        if !doomed.is_empty() {
            write_fenced(redis, keys, token, "clear", doomed, vec![]).await?;
        }
        if next == "0" {
            return Ok(());
        }
        cursor = next;
    }
}

/// One step of `rebuild.lua`, made only while this rebuild's fence (`token`) is in place in the
/// Redis process that fenced it: a rebuild that was abandoned half-way (its caller gave up, it
/// lost its PostgreSQL lock) and whose writes arrive after a newer rebuild fenced the projection
/// changes nothing, and stops here.
async fn write_fenced(
    redis: &Projection,
    keys: &AppKeys,
    token: &str,
    step: &str,
    extra_keys: Vec<String>,
    args: Vec<Value>,
) -> Result<(), DurableError> {
    let mut script_keys = Vec::with_capacity(1 + extra_keys.len());
    script_keys.push(keys.meta());
    script_keys.extend(extra_keys);
    let mut all: Vec<Value> = Vec::with_capacity(2 + args.len());
    all.push(token.into());
    all.push(step.into());
    all.extend(args);
    let answer: String = redis.rebuild(script_keys, all).await?;
    match answer.as_str() {
        "OK" => Ok(()),
        "FENCED" => Err(DurableError::Unavailable(
            "another rebuild fenced the projection (or Redis restarted) while this one wrote; \
             this one stops and writes nothing more"
                .into(),
        )),
        _ => Err(DurableError::script("rebuild.lua", "unknown verdict")),
    }
}

/// One unfinished command as the rebuild reads it: its row, and what it holds.
struct ProjectedRow {
    row: CommandRow,
    permit_expires_ms: i64,
    /// Rendered limit keys, `[[template, key], …]`.
    limit_keys: Vec<[String; 2]>,
    /// The attempt that holds it (executing, between two attempts, running).
    attempt_id: Option<Uuid>,
    /// An executor holds it (executing, or retry_wait between two webhook attempts).
    held: bool,
}

impl ProjectedRow {
    fn is_waiting(&self) -> bool {
        !self.held && self.row.status.is_waiting()
    }

    fn holds_permits(&self) -> bool {
        self.held || self.row.status == CommandStatus::Running
    }

    /// The lease zsets of every permit it holds: application, command, resource, each limit key.
    fn leases(&self, keys: &AppKeys) -> Vec<String> {
        let mut leases = vec![
            keys.application_leases(),
            keys.command_leases(self.row.namespace_id, &self.row.command),
            keys.resource_leases(&self.queue_suffix()),
        ];
        leases.extend(
            self.limit_keys
                .iter()
                .map(|[_, key]| keys.limit_leases(self.row.namespace_id, key)),
        );
        leases
    }

    /// Values `rebuild.lua rows` takes per command.
    const ARGS: usize = 17;
    /// Keys `rebuild.lua rows` takes per command, besides the leases of the permits it holds.
    const KEYS: usize = 5;

    /// Its values and keys for `rebuild.lua rows`: waiting, it goes in its queue (and its queue
    /// and command in the ready sets, at turn 0: before anything a later admission rotates); in
    /// hand, it keeps its permits until its lease (or, running, its deadline) runs out, as it
    /// did before the loss, under the attempt that holds it (a rebuild never frees a limit that
    /// is still in use, and that attempt goes on renewing them). Its status hash and request key
    /// either way. Every key goes in `script_keys`: the status hash, the queue, the command's
    /// resources, the ready set, the request-key map, then the leases of the permits it holds.
    fn push(&self, keys: &AppKeys, args: &mut Vec<Value>, script_keys: &mut Vec<String>) {
        let (place, leases) = if self.is_waiting() {
            ("queue", Vec::new())
        } else if self.holds_permits() {
            ("hold", self.leases(keys))
        } else {
            ("", Vec::new())
        };
        let held = if place == "hold" {
            serde_json::to_string(&leases).unwrap_or_else(|_| "[]".into())
        } else {
            String::new()
        };
        let lim = if self.limit_keys.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&self.limit_keys).unwrap_or_default()
        };
        let values: [Value; Self::ARGS] = [
            self.row.id.to_string().into(),
            place.into(),
            self.row.queue_seq.into(),
            self.queue_suffix().into(),
            format!("{}:{}", self.row.namespace_id, self.row.command).into(),
            self.row.status.as_str().into(),
            self.row.namespace_id.to_string().into(),
            self.row.command.clone().into(),
            rfc3339(self.row.accepted_at).into(),
            rfc3339(self.row.deadline_at).into(),
            rfc3339(self.row.updated_at).into(),
            lim.into(),
            self.permit_expires_ms.into(),
            held.into(),
            self.attempt_id
                .map(|a| a.to_string())
                .unwrap_or_default()
                .into(),
            request_key_field(&self.row.subject, &self.row.request_key).into(),
            hex::encode(&self.row.content_sha256).into(),
        ];
        args.extend(values);
        script_keys.extend([
            keys.command(self.row.id),
            self.queue_key(keys),
            keys.resource_ready(self.row.namespace_id, &self.row.command),
            keys.ready(),
            keys.request_keys(self.row.namespace_id, &self.row.command),
        ]);
        script_keys.extend(leases);
    }

    fn queue_suffix(&self) -> String {
        AppKeys::queue_suffix(
            self.row.namespace_id,
            &self.row.command,
            &self.row.resource_key,
        )
    }

    fn queue_key(&self, keys: &AppKeys) -> String {
        keys.queue(
            self.row.namespace_id,
            &self.row.command,
            &self.row.resource_key,
        )
    }
}
