//! Operator pauses: an absolute value per namespace or per command.
//!
//! PostgreSQL holds the truth (`controls`, with a revision per scope and an audit row per
//! change); Redis holds a copy `intake.lua` reads to refuse at once. Three things make a pause
//! hold whatever fails:
//! - Acceptance re-checks `controls` in its own INSERT, so a pause Redis never learned (or lost)
//!   still refuses every new command.
//! - A change takes the namespace's control lock exclusively, and every group-commit batch takes
//!   it shared before its INSERT (`lifecycle::commit::lock_batch`): the change waits for batches
//!   already inserting, and batches after it see it. Once a pause has answered, no command of
//!   the namespace is accepted by a transaction that started before it either.
//! - The Redis copy is written only after the commit, with the scope's revision (`control.lua`:
//!   newest wins), by the call itself, every rebuild and every executor catalog refresh. A lost
//!   write converges within seconds and an old value never overwrites a newer one.

use fred::prelude::*;
use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_store::tenancy::audit;

/// One scope's pause state as PostgreSQL holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseState {
    pub namespace_id: NamespaceId,
    /// `None` for the whole namespace.
    pub command: Option<String>,
    pub paused: bool,
    /// Starts at 0 for a scope never set; every change adds one, a repeat adds nothing.
    pub revision: i64,
}

impl PauseState {
    fn scope(&self) -> String {
        match &self.command {
            Some(command) => format!("{}:{command}", self.namespace_id),
            None => self.namespace_id.to_string(),
        }
    }
}

/// A pause or resume as an operator asked for it.
#[derive(Debug, Clone)]
pub struct SetPause<'a> {
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub command: Option<&'a str>,
    pub paused: bool,
    pub reason: &'a str,
    pub actor: &'a str,
}

/// Sets the pause value of one scope and propagates it to Redis.
///
/// Refuses with [`DurableError::Unavailable`] before changing anything when Redis is
/// unreachable. If Redis fails between the commit and the propagation the error is the same,
/// and the stored value may have changed: repeating the call is safe (a repeat changes nothing
/// in PostgreSQL and writes Redis again).
pub async fn set_pause(
    pg: &PgPool,
    redis: &Projection,
    change: &SetPause<'_>,
) -> Result<PauseState, DurableError> {
    require_redis(redis).await?;
    let mut tx = pg.begin().await?;
    // The namespace's control lock, exclusive: `lifecycle::commit::lock_batch` is its other side.
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtextextended('sluice:control:' || $1::text, 0))",
        change.namespace_id as NamespaceId,
    )
    .execute(&mut *tx)
    .await?;
    let command = change.command.unwrap_or("");
    let before: Option<(bool, i64)> = sqlx::query!(
        "SELECT paused, revision FROM controls WHERE namespace_id = $1 AND command = $2",
        change.namespace_id as NamespaceId,
        command,
    )
    .fetch_optional(&mut *tx)
    .await?
    .map(|row| (row.paused, row.revision));
    let revision = match before {
        Some((paused, revision)) if paused == change.paused => revision,
        // Resuming a scope that was never paused: there is nothing to change or audit.
        None if !change.paused => 0,
        _ => {
            // clock_timestamp(), not now(): the moment the lock was held, after every batch
            // that was inserting had committed.
            let revision: i64 = sqlx::query_scalar!(
                "INSERT INTO controls (namespace_id, command, paused, reason, revision, updated_at)
                 VALUES ($1, $2, $3, $4, 1, clock_timestamp())
                 ON CONFLICT (namespace_id, command) DO UPDATE
                    SET paused = EXCLUDED.paused, reason = EXCLUDED.reason,
                        revision = controls.revision + 1, updated_at = clock_timestamp()
                 RETURNING revision",
                change.namespace_id as NamespaceId,
                command,
                change.paused,
                change.reason,
            )
            .fetch_one(&mut *tx)
            .await?;
            audit(
                &mut tx,
                change.application_id,
                Some(change.namespace_id),
                change.actor,
                if change.paused {
                    "control.pause"
                } else {
                    "control.resume"
                },
                serde_json::json!({
                    "command": change.command,
                    "paused": change.paused,
                    "before": before.map(|(paused, _)| paused),
                    "reason": change.reason,
                    "revision": revision.to_string(),
                }),
            )
            .await?;
            revision
        }
    };
    tx.commit().await?;
    let state = PauseState {
        namespace_id: change.namespace_id,
        command: change.command.map(str::to_string),
        paused: change.paused,
        revision,
    };
    store_in_redis(redis, change.application_id, std::slice::from_ref(&state))
        .await
        .map_err(|error| {
            DurableError::Unavailable(format!(
                "the pause was stored but Redis did not take it ({error}); repeat the same call"
            ))
        })?;
    Ok(state)
}

/// Fails fast, before any change, when no Redis connection is up.
async fn require_redis(redis: &Projection) -> Result<(), DurableError> {
    let client = redis.pool().next_connected();
    if client.is_connected() {
        Ok(())
    } else {
        Err(DurableError::Unavailable(
            "Redis is unreachable; nothing was changed".into(),
        ))
    }
}

/// Every pause scope of a namespace that was ever set.
pub async fn namespace_pauses(
    pg: &PgPool,
    namespace_id: NamespaceId,
) -> Result<Vec<PauseState>, DurableError> {
    let rows = sqlx::query_as!(
        PauseRow,
        r#"SELECT namespace_id AS "namespace_id: NamespaceId", command, paused, revision
             FROM controls WHERE namespace_id = $1 ORDER BY command"#,
        namespace_id as NamespaceId,
    )
    .fetch_all(pg)
    .await?;
    Ok(rows.into_iter().map(PauseState::from).collect())
}

/// A `controls` row as stored: the whole namespace's scope has the command `''`.
struct PauseRow {
    namespace_id: NamespaceId,
    command: String,
    paused: bool,
    revision: i64,
}

impl From<PauseRow> for PauseState {
    fn from(row: PauseRow) -> Self {
        Self {
            namespace_id: row.namespace_id,
            command: (!row.command.is_empty()).then_some(row.command),
            paused: row.paused,
            revision: row.revision,
        }
    }
}

/// Writes pause states where `intake.lua` reads them; an older revision never overwrites a
/// newer one.
pub async fn store_in_redis(
    redis: &Projection,
    application_id: ApplicationId,
    states: &[PauseState],
) -> Result<(), DurableError> {
    if states.is_empty() {
        return Ok(());
    }
    let mut args: Vec<Value> = Vec::with_capacity(states.len() * 3);
    for state in states {
        args.push(state.scope().into());
        args.push(if state.paused { "1" } else { "0" }.into());
        args.push(state.revision.into());
    }
    let _: i64 = redis
        .control(vec![AppKeys::new(application_id).meta()], args)
        .await?;
    Ok(())
}

/// Every pause of an application, as committed in PostgreSQL now.
pub async fn pauses_of(
    pg: &PgPool,
    application_id: ApplicationId,
) -> Result<Vec<PauseState>, DurableError> {
    let rows = sqlx::query_as!(
        PauseRow,
        r#"SELECT c.namespace_id AS "namespace_id: NamespaceId", c.command, c.paused, c.revision
             FROM controls c JOIN namespaces n ON n.id = c.namespace_id
            WHERE n.application_id = $1"#,
        application_id as ApplicationId,
    )
    .fetch_all(pg)
    .await?;
    Ok(rows.into_iter().map(PauseState::from).collect())
}
