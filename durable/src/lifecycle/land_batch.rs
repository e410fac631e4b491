//! Transition `land` for a batch: the terminal states a handler decided for the commands its
//! attempts hold, written in one statement inside the handler's own transaction (the quota
//! handler's allocations and its pool's counts commit with them), each row fenced by the attempt
//! that holds it; then their Redis sides, one `land.lua` call each.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::Stores;
use super::claim::Claimed;
use super::end::{Outcome, Place, Projecting, project_end};
use crate::DurableError;
use crate::ids::CommandId;
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;

/// A terminal state a handler decided for one command it holds, before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub id: CommandId,
    pub status: CommandStatus,
    pub result: Option<Value>,
    pub error: Option<(&'static str, String)>,
}

/// A terminal state written: what was decided, and when PostgreSQL wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct Landed {
    pub id: CommandId,
    pub status: CommandStatus,
    pub result: Option<Value>,
    pub error: Option<(&'static str, String)>,
    pub updated_at: DateTime<Utc>,
}

/// Writes the final states of the rows their attempts in `batch` still hold, in one statement
/// on `tx`: a row another attempt holds by now (its lease lapsed and it was rescued) or that
/// ended meanwhile is left as it is, and missing from the answer.
pub async fn land_batch(
    tx: &mut sqlx::PgConnection,
    batch: &[Claimed],
    decided: &[Decided],
) -> Result<Vec<Landed>, DurableError> {
    let ids: Vec<CommandId> = decided.iter().map(|d| d.id).collect();
    let attempts: Vec<Option<Uuid>> = decided
        .iter()
        .map(|d| {
            batch
                .iter()
                .find(|c| c.row.id == d.id)
                .map(|c| c.attempt.as_uuid())
        })
        .collect();
    let statuses: Vec<&str> = decided.iter().map(|d| d.status.as_str()).collect();
    let results: Vec<Option<Value>> = decided.iter().map(|d| d.result.clone()).collect();
    let codes: Vec<Option<&str>> = decided
        .iter()
        .map(|d| d.error.as_ref().map(|e| e.0))
        .collect();
    let messages: Vec<Option<&str>> = decided
        .iter()
        .map(|d| d.error.as_ref().map(|e| e.1.as_str()))
        .collect();
    let rows = sqlx::query!(
        r#"UPDATE commands c
              SET status = o.status, result = o.result, error_code = o.code,
                  error_message = o.message, finished_at = now(), updated_at = now(),
                  lease_owner = NULL, lease_expires_at = NULL, attempt_id = NULL
             FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::text[], $5::text[], $6::uuid[])
                  AS o(id, status, result, code, message, attempt_id)
            WHERE c.id = o.id AND c.attempt_id = o.attempt_id AND c.status = 'executing'
           RETURNING c.id AS "id: CommandId", c.updated_at"#,
        &ids as _,
        &statuses as _,
        &results as _,
        &codes as _,
        &messages as _,
        &attempts as _,
    )
    .fetch_all(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let decided = decided.iter().find(|d| d.id == row.id)?;
            Some(Landed {
                id: row.id,
                status: decided.status,
                result: decided.result.clone(),
                error: decided.error.clone(),
                updated_at: row.updated_at,
            })
        })
        .collect())
}

/// The Redis side of each end in `landed` (after its transaction committed), for the rows of
/// `batch` they name.
pub async fn project_landed(
    stores: Stores<'_>,
    keys: &AppKeys,
    batch: &[Claimed],
    landed: &[Landed],
    projecting: Projecting,
) {
    for done in landed {
        let Some(claimed) = batch.iter().find(|c| c.row.id == done.id) else {
            continue;
        };
        let place = Place {
            id: claimed.row.id,
            namespace_id: claimed.row.namespace_id,
            command: &claimed.row.command,
            resource_key: &claimed.row.resource_key,
            limit_keys: &claimed.limit_keys,
        };
        let outcome = Outcome {
            status: done.status,
            result: done.result.as_ref(),
            error: done
                .error
                .as_ref()
                .map(|(code, message)| (*code, message.as_str())),
        };
        project_end(stores, keys, place, &outcome, done.updated_at, projecting).await;
    }
}
