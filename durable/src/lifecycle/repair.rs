//! Repairs of the projection, driven by what Redis shows and decided by what PostgreSQL says,
//! for the Redis sides that could not be made when their transition happened (Redis down, a
//! process killed between the two sides). One executor repairs at a time (advisory locks); each
//! round is bounded and the next continues.
//! - [`permits`]: every holder of a command's permits against its row: an ended row's permits
//!   are freed, a running row's are extended to its deadline (restored if they lapsed), a head
//!   admitted by an executor that died before its claim goes back in line.
//! - [`projection`]: waiting rows with no projection (committed while the gateway's `accept`
//!   failed) are accepted; waiting rows missing from their queue are put back. It only ever
//!   adds, so no count is lowered and no limit gets looser.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use fred::prelude::*;

use super::claim::current_state;
use super::end::project_current;
use super::redis::{Acceptance, Accepted, Extend, accept, permit_holders, set_attempt_status};
use super::sweep::SweepSide;
use super::{RUNNING_PERMIT_GRACE, Stores};
use crate::DurableError;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_redis::{AppKeys, request_key_field};
use sluice_store::command_row;
use sluice_store::outbox::{CommandRow, rfc3339};

const LOCK_PERMITS: i64 = 0x51_1CE0_0004;
const LOCK_RECONCILE: i64 = 0x51_1CE0_0006;
/// Holders looked at per command and round.
const HOLDERS: i64 = 500;
/// Waiting rows looked at per application and round.
const SLICE: i64 = 500;

/// One application's commands, as the repairs walk them.
pub struct AppCommands<'a> {
    pub application_id: ApplicationId,
    pub commands: Vec<(NamespaceId, &'a str)>,
}

/// Reconciles the holders of every command's permits with PostgreSQL; returns how many it
/// changed.
pub async fn permits(
    stores: Stores<'_>,
    apps: &[AppCommands<'_>],
    side: SweepSide,
) -> Result<usize, DurableError> {
    let mut tx = stores.pg.begin().await?;
    let got: bool = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock($1) AS "got!""#,
        LOCK_PERMITS
    )
    .fetch_one(&mut *tx)
    .await?;
    if !got {
        return Ok(0);
    }
    let mut changed = 0;
    for app in apps {
        let keys = AppKeys::new(app.application_id);
        for (namespace_id, command) in &app.commands {
            let found =
                permit_holders(stores.redis, &keys, *namespace_id, command, HOLDERS).await?;
            if found.is_empty() {
                continue;
            }
            let ids: Vec<CommandId> = found.iter().map(|h| h.command_id).collect();
            let states = current_state(stores, &ids).await?;
            for holder in &found {
                let Some(state) = states.iter().find(|s| s.row.id == holder.command_id) else {
                    continue;
                };
                let repaired = match state.row.status {
                    // An admitted head nobody claimed (its executor died): back in line, once
                    // its permit lapsed (a live one is an admission whose claim is under way).
                    CommandStatus::Accepted | CommandStatus::RetryWait
                        if !state.held && !holder.live =>
                    {
                        tracing::info!(command_id = %state.row.id, "permit lapsed before its claim; command back in line");
                        project_current(
                            stores,
                            &keys,
                            side.retention_ms,
                            side.patience,
                            state,
                            holder.attempt,
                        )
                        .await
                    }
                    CommandStatus::Running => {
                        restore_running(stores, &keys, state, holder.attempt).await
                    }
                    CommandStatus::Executing
                    | CommandStatus::RetryWait
                    | CommandStatus::Accepted => false,
                    // Ended (or needs_review) while its landing missed Redis.
                    _ => {
                        project_current(
                            stores,
                            &keys,
                            side.retention_ms,
                            side.patience,
                            state,
                            None,
                        )
                        .await
                    }
                };
                changed += usize::from(repaired);
            }
            // Permits of rows that no longer exist (pruned) are simply dropped.
            let gone: Vec<String> = ids
                .iter()
                .filter(|id| !states.iter().any(|s| s.row.id == **id))
                .map(CommandId::to_string)
                .collect();
            if !gone.is_empty() {
                let _: i64 = stores
                    .redis
                    .pool()
                    .next()
                    .zrem(keys.command_leases(*namespace_id, command), gone)
                    .await?;
            }
        }
    }
    tx.commit().await?;
    Ok(changed)
}

/// A running row's permits last until its deadline plus a grace, whatever happened to them: its
/// backend has the command. Only the attempt whose backend answered `202` is restored.
async fn restore_running(
    stores: Stores<'_>,
    keys: &AppKeys,
    state: &super::row_state::RowState,
    on_record: Option<super::AttemptId>,
) -> bool {
    let row = &state.row;
    let Some(attempt) = state.attempt.filter(|a| Some(*a) == on_record) else {
        return false;
    };
    let deadline: Option<chrono::DateTime<Utc>> = sqlx::query_scalar!(
        "SELECT deadline_at FROM commands WHERE id = $1 AND status = 'running'",
        row.id as _
    )
    .fetch_optional(stores.pg)
    .await
    .ok()
    .flatten();
    let Some(deadline) = deadline else {
        return false;
    };
    let until = (deadline - Utc::now())
        .to_std()
        .unwrap_or_default()
        .saturating_add(RUNNING_PERMIT_GRACE);
    matches!(
        set_attempt_status(
            stores.redis,
            keys,
            row.id,
            attempt,
            CommandStatus::Running,
            rfc3339(row.updated_at),
            Some(Extend::Restore(until)),
            &[],
        )
        .await,
        Ok(super::redis::Mark::Marked)
    )
}

/// Where the last round of [`projection`] stopped, per application (queue sequence).
#[derive(Debug, Default)]
pub struct Cursor {
    after: HashMap<ApplicationId, i64>,
}

/// One round over `applications`; returns how many commands it repaired. Rows changed less than
/// `grace` ago are left alone: their gateway or executor may still be projecting them.
pub async fn projection(
    stores: Stores<'_>,
    applications: &[ApplicationId],
    cursor: &mut Cursor,
    side: SweepSide,
    grace: Duration,
) -> Result<usize, DurableError> {
    let mut tx = stores.pg.begin().await?;
    let got: bool = sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_xact_lock($1) AS "got!""#,
        LOCK_RECONCILE
    )
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
        // The rows and the generation they belong to, read together: an `accept` under that
        // generation is refused if a rebuild (whose snapshot has these rows) came between.
        let waiting: Vec<Waiting> = sqlx::query_file!(
            "queries/repair_waiting.sql",
            application_id as _,
            after,
            SLICE,
            grace.as_secs_f64()
        )
        .fetch_all(stores.pg)
        .await?
        .into_iter()
        .map(|row| Waiting {
            limit_keys: row.limit_keys,
            generation: row.generation,
            row: command_row!(row),
        })
        .collect();
        match waiting.last() {
            Some(last) if waiting.len() as i64 == SLICE => {
                cursor.after.insert(application_id, last.row.queue_seq)
            }
            _ => cursor.after.remove(&application_id),
        };
        if waiting.is_empty() {
            continue;
        }
        let keys = AppKeys::new(application_id);
        let seen = queued_in_redis(stores, &keys, &waiting).await?;
        let mut unqueued = Vec::new();
        for (one, (status, queued)) in waiting.iter().zip(seen) {
            match status.as_deref() {
                None => {
                    let accepted =
                        accept(stores.redis, &keys, one.generation, &[one.accepted()]).await?;
                    if matches!(accepted, Acceptance::Projected(_)) {
                        tracing::warn!(command_id = %one.row.id, "committed command missing from Redis; projected");
                        repaired += 1;
                    }
                }
                Some(status)
                    if CommandStatus::parse(status).is_some_and(CommandStatus::is_waiting)
                        && !queued =>
                {
                    unqueued.push(one.row.id)
                }
                _ => {}
            }
        }
        if !unqueued.is_empty() {
            // Asked again under the rows' current state: one claimed meanwhile is left alone.
            for state in current_state(stores, &unqueued).await? {
                if project_current(
                    stores,
                    &keys,
                    side.retention_ms,
                    side.patience,
                    &state,
                    None,
                )
                .await
                {
                    tracing::warn!(command_id = %state.row.id, "waiting command missing from its queue; back in line");
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
    row: CommandRow,
    limit_keys: serde_json::Value,
    generation: i64,
}

impl Waiting {
    fn accepted(&self) -> Accepted {
        let limit_keys = match &self.limit_keys {
            serde_json::Value::Array(keys) if !keys.is_empty() => self.limit_keys.to_string(),
            _ => String::new(),
        };
        let row = &self.row;
        Accepted {
            command_id: row.id,
            namespace_id: row.namespace_id,
            command: row.command.clone(),
            resource_key: row.resource_key.clone(),
            request_key_field: request_key_field(&row.subject, &row.request_key),
            content_sha256_hex: hex::encode(&row.content_sha256),
            queue_seq: row.queue_seq,
            accepted_at: rfc3339(row.accepted_at),
            deadline_at: rfc3339(row.deadline_at),
            limit_keys,
        }
    }
}

/// Each row's projected status (None: no status hash) and whether it is in its queue.
async fn queued_in_redis(
    stores: Stores<'_>,
    keys: &AppKeys,
    rows: &[Waiting],
) -> Result<Vec<(Option<String>, bool)>, DurableError> {
    let mut script_keys = Vec::with_capacity(rows.len() * 2);
    let mut args: Vec<Value> = Vec::with_capacity(rows.len());
    for state in rows {
        script_keys.push(keys.command(state.row.id));
        script_keys.push(keys.queue(
            state.row.namespace_id,
            &state.row.command,
            &state.row.resource_key,
        ));
        args.push(state.row.id.to_string().into());
    }
    let answer: Vec<Value> = stores.redis.queued_in_redis(script_keys, args).await?;
    if answer.len() != rows.len() * 2 {
        return Err(DurableError::script(
            "queued_in_redis.lua",
            "one pair per command",
        ));
    }
    Ok(answer
        .chunks(2)
        .map(|pair| (pair[0].as_string(), pair[1].as_i64() == Some(1)))
        .collect())
}
