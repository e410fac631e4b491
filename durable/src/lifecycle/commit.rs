//! One batch of acceptances as one statement (transition `commit`): each request key claimed in
//! `request_keys` (`ON CONFLICT DO NOTHING`) and the commands of the keys it claimed inserted,
//! with the pause state re-checked in the same statement, so a pause recorded in PostgreSQL
//! holds even if Redis lost its copy of the flag, and the epoch checked, so a reservation made
//! before a rebuild never commits after the rebuild's snapshot.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::DurableError;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_store::command_row;
use sluice_store::outbox::CommandRow;

/// What makes two enqueues the same intent: the primary key of `request_keys`. A second enqueue with
/// the same key is a replay (or a conflict when its content differs), never a second command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    pub namespace_id: NamespaceId,
    pub command: String,
    pub subject: String,
    pub request_key: String,
}

/// A command the gateway has reserved and wants committed.
#[derive(Debug, Clone)]
pub struct NewCommand {
    pub id: CommandId,
    pub application_id: ApplicationId,
    pub key: IdempotencyKey,
    pub content_sha256: [u8; 32],
    pub input: serde_json::Value,
    pub resource_key: String,
    pub queue_seq: i64,
    pub deadline_seconds: i32,
    pub max_wait_seconds: i32,
    /// Rendered limit keys, `[[template, key], …]` (see `render_limit_keys`).
    pub limit_keys: serde_json::Value,
    /// The projection generation its reservation was made under: it commits only while that is
    /// still PostgreSQL's generation.
    pub generation: i64,
    /// The W3C `traceparent` of the request that enqueued it, if any.
    pub trace_parent: Option<String>,
}

/// What happened to one command of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    Inserted {
        accepted_at: DateTime<Utc>,
        deadline_at: DateTime<Utc>,
    },
    /// The key already had a row (a replay, or a conflict if the content differs).
    Existing(CommandRow),
    /// PostgreSQL says the namespace or command is paused.
    Paused,
    /// The projection was rebuilt since the reservation (a new epoch): reserve again.
    Stale,
}

/// Takes, in one statement of its own before the INSERT, the two locks a batch commits under:
/// each namespace's control lock shared (a pause waits for the batches that began before it,
/// and the INSERT's snapshot sees every pause that held the lock) and each application's epoch
/// row `FOR SHARE` (a rebuild's epoch change waits for the batches in flight, and the INSERT
/// reads the generation it cannot change until the commit). Sorted and distinct: every batch
/// takes its locks in the same order, so two batches never wait on each other through a pause
/// or a rebuild queued between them.
pub async fn lock_batch(conn: &mut PgConnection, batch: &[NewCommand]) -> Result<(), DurableError> {
    let mut namespaces: Vec<NamespaceId> = batch.iter().map(|c| c.key.namespace_id).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    let mut applications: Vec<ApplicationId> = batch.iter().map(|c| c.application_id).collect();
    applications.sort_unstable();
    applications.dedup();
    sqlx::query!(
        "WITH pauses AS (
             SELECT pg_advisory_xact_lock_shared(hashtextextended('sluice:control:' || n::text, 0))
               FROM unnest($1::uuid[]) AS n),
         epochs AS (
             SELECT application_id FROM projections
              WHERE application_id = ANY($2) ORDER BY application_id FOR SHARE)
         SELECT (SELECT count(*) FROM pauses) + (SELECT count(*) FROM epochs) AS locks",
        &namespaces as _,
        &applications as _
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// Inserts a batch inside the caller's transaction, after [`lock_batch`]; outcomes are in the
/// batch's order.
pub async fn insert_batch(
    conn: &mut PgConnection,
    batch: &[NewCommand],
) -> Result<Vec<InsertOutcome>, DurableError> {
    let columns = Columns::of(batch);
    // The multi-row INSERT of a batch (transition `commit`).
    let inserted = sqlx::query_file!(
        "queries/insert_batch.sql",
        &columns.id as _,
        &columns.application_id as _,
        &columns.namespace_id as _,
        &columns.command,
        &columns.subject,
        &columns.request_key,
        &columns.content_sha256,
        &columns.input,
        &columns.resource_key,
        &columns.queue_seq,
        &columns.deadline_seconds,
        &columns.max_wait_seconds,
        &columns.limit_keys,
        &columns.generation,
        &columns.trace_parent as &[Option<String>],
    )
    .fetch_all(&mut *conn)
    .await?;

    let mut by_id: HashMap<CommandId, InsertOutcome> = HashMap::with_capacity(inserted.len());
    for row in inserted {
        by_id.insert(
            row.id,
            InsertOutcome::Inserted {
                accepted_at: row.accepted_at,
                deadline_at: row.deadline_at,
            },
        );
    }
    let missing: Vec<&NewCommand> = batch
        .iter()
        .filter(|c| !by_id.contains_key(&c.id))
        .collect();
    let (existing, generations) = if missing.is_empty() {
        (HashMap::new(), HashMap::new())
    } else {
        (
            find_existing(conn, &missing).await?,
            generations(conn, &missing).await?,
        )
    };
    Ok(batch
        .iter()
        .map(|c| match by_id.remove(&c.id) {
            Some(outcome) => outcome,
            None => match existing.get(&c.key) {
                Some(row) => InsertOutcome::Existing(row.clone()),
                None if generations.get(&c.application_id) != Some(&c.generation) => {
                    InsertOutcome::Stale
                }
                None => InsertOutcome::Paused,
            },
        })
        .collect())
}

/// The generation of each application of `missing` (held `FOR SHARE` by [`lock_batch`], so it is
/// the one the INSERT checked).
async fn generations(
    conn: &mut PgConnection,
    missing: &[&NewCommand],
) -> Result<HashMap<ApplicationId, i64>, DurableError> {
    let applications: Vec<ApplicationId> = missing.iter().map(|c| c.application_id).collect();
    let rows = sqlx::query!(
        r#"SELECT application_id AS "application_id: ApplicationId", generation FROM projections
            WHERE application_id = ANY($1)"#,
        &applications as _,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.application_id, row.generation))
        .collect())
}

/// The rows that already hold the keys of commands that were not inserted.
async fn find_existing(
    conn: &mut PgConnection,
    missing: &[&NewCommand],
) -> Result<HashMap<IdempotencyKey, CommandRow>, DurableError> {
    let namespaces: Vec<NamespaceId> = missing.iter().map(|c| c.key.namespace_id).collect();
    let commands: Vec<&str> = missing.iter().map(|c| c.key.command.as_str()).collect();
    let subjects: Vec<&str> = missing.iter().map(|c| c.key.subject.as_str()).collect();
    let keys: Vec<&str> = missing.iter().map(|c| c.key.request_key.as_str()).collect();
    let rows = sqlx::query!(
        r#"SELECT c.id AS "id: CommandId", c.application_id AS "application_id: ApplicationId",
                  c.namespace_id AS "namespace_id: NamespaceId", c.command, c.subject,
                  c.request_key, c.content_sha256, c.resource_key, c.queue_seq,
                  c.status AS "status: CommandStatus", c.accepted_at, c.deadline_at,
                  c.updated_at
             FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS k(ns, cmd, sub, rk)
             JOIN request_keys held
               ON held.namespace_id = k.ns AND held.command = k.cmd AND held.subject = k.sub
              AND held.request_key = k.rk
             JOIN commands c ON c.id = held.command_id"#,
        &namespaces as _,
        &commands as _,
        &subjects as _,
        &keys as _,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let key = IdempotencyKey {
                namespace_id: row.namespace_id,
                command: row.command.clone(),
                subject: row.subject.clone(),
                request_key: row.request_key.clone(),
            };
            (key, command_row!(row))
        })
        .collect())
}

/// The batch as column arrays, the shape `unnest` takes.
struct Columns {
    id: Vec<CommandId>,
    application_id: Vec<ApplicationId>,
    namespace_id: Vec<NamespaceId>,
    command: Vec<String>,
    subject: Vec<String>,
    request_key: Vec<String>,
    content_sha256: Vec<Vec<u8>>,
    input: Vec<serde_json::Value>,
    resource_key: Vec<String>,
    queue_seq: Vec<i64>,
    deadline_seconds: Vec<i32>,
    max_wait_seconds: Vec<i32>,
    limit_keys: Vec<serde_json::Value>,
    generation: Vec<i64>,
    trace_parent: Vec<Option<String>>,
}

impl Columns {
    fn of(batch: &[NewCommand]) -> Self {
        Self {
            id: batch.iter().map(|c| c.id).collect(),
            application_id: batch.iter().map(|c| c.application_id).collect(),
            namespace_id: batch.iter().map(|c| c.key.namespace_id).collect(),
            command: batch.iter().map(|c| c.key.command.clone()).collect(),
            subject: batch.iter().map(|c| c.key.subject.clone()).collect(),
            request_key: batch.iter().map(|c| c.key.request_key.clone()).collect(),
            content_sha256: batch.iter().map(|c| c.content_sha256.to_vec()).collect(),
            input: batch.iter().map(|c| c.input.clone()).collect(),
            resource_key: batch.iter().map(|c| c.resource_key.clone()).collect(),
            queue_seq: batch.iter().map(|c| c.queue_seq).collect(),
            deadline_seconds: batch.iter().map(|c| c.deadline_seconds).collect(),
            max_wait_seconds: batch.iter().map(|c| c.max_wait_seconds).collect(),
            limit_keys: batch.iter().map(|c| c.limit_keys.clone()).collect(),
            generation: batch.iter().map(|c| c.generation).collect(),
            trace_parent: batch.iter().map(|c| c.trace_parent.clone()).collect(),
        }
    }
}
