//! The executor's start of work: `admit` (admit.lua takes the permits and mints the attempt)
//! and `claim` (PostgreSQL records the attempt and a lease), in that order.
//!
//! The claim is fenced three ways: on the epoch the heads were admitted under (a rebuild since
//! then re-queued them from its snapshot, so they are simply dropped), on the row still waiting
//! and unheld, and on its deadline and `max_wait` (a head past either ends `expired`, or
//! `needs_review` if an earlier attempt may have reached a backend, instead of starting). Heads
//! that could not be claimed are given back according to what PostgreSQL says of them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Stores;
use super::attempt::AttemptId;
use super::end::project_current;
use super::redis::{Admission, Requeue, Requeued, requeue};
use super::row_state::{RowState, row_state};
use crate::DurableError;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_store::outbox::{CommandRow, rfc3339};

pub use super::redis::{AdmitLimits, AdmittedHead, RateKey};

/// A row this executor now holds, under its attempt: the row (the table's one row type,
/// [`CommandRow`]) and what only an attempt needs beside it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub row: CommandRow,
    pub attempt: AttemptId,
    pub input: serde_json::Value,
    pub attempts: i32,
    /// Rendered limit keys, `[[template, key], …]`.
    pub limit_keys: Vec<[String; 2]>,
    /// Whether an earlier attempt may have reached the backend without a decisive answer.
    pub was_in_doubt: bool,
    /// The W3C `traceparent` it was enqueued under: its attempts continue that trace.
    pub trace_parent: Option<String>,
}

/// A statement that ends waiting commands that ran out of time: `$head`, then the `SET` items
/// below (the row aliased `c`: expired, or needs_review when an earlier attempt may have reached
/// a backend unanswered), then `$tail`, run by `sqlx::$query!` with the arguments that follow.
/// Shared by the claim (a head past its time) and the expiry sweeper. The sqlx macros take
/// string literals joined by `+`, never another macro's output, so the call is written here
/// around the items.
macro_rules! ending_waiting {
    ($query:ident!($($record:path,)? $head:literal, $tail:literal, $($args:tt)*)) => {
        sqlx::$query!(
            $($record,)?
            $head
                + "status = CASE WHEN c.in_doubt THEN 'needs_review' ELSE 'expired' END,
         finished_at = CASE WHEN c.in_doubt THEN NULL ELSE now() END,
         updated_at = now(),
         error_code = CASE WHEN c.in_doubt THEN 'OUTCOME_UNKNOWN'
                           WHEN c.deadline_at <= now() THEN 'DEADLINE_EXCEEDED'
                           ELSE 'MAX_WAIT_EXCEEDED' END,
         error_message = CASE WHEN c.in_doubt
                              THEN 'an earlier attempt may have reached the backend unanswered and the command ran out of time'
                              WHEN c.deadline_at <= now()
                              THEN 'the deadline passed while the command was waiting'
                              ELSE 'the command waited longer than its max_wait' END"
                + $tail,
            $($args)*
        )
    };
}
pub(crate) use ending_waiting;

/// What a claim came to.
#[derive(Debug, Clone)]
pub enum Claim {
    /// The projection was rebuilt since the admission (its snapshot queued the heads again):
    /// nothing was claimed and nothing is to be given back.
    Stale,
    /// The rows now held; the other heads were given back (or ended, if past their time).
    Claimed(Vec<Claimed>),
}

/// What the claim needs besides the heads.
pub struct ClaimOrder<'a> {
    pub application_id: ApplicationId,
    /// The epoch the heads were admitted under.
    pub generation: i64,
    pub heads: &'a [AdmittedHead],
    /// Heads whose handler reaches outside (a webhook): in doubt from here on, since nobody
    /// knows whether the backend acted if this executor dies mid-request.
    pub external: &'a [CommandId],
    pub owner: Uuid,
    pub lease: Duration,
    /// How long final statuses stay readable in Redis.
    pub retention_ms: i64,
    /// How long a given-back head's Redis side is retried while the projection is not trusted.
    pub patience: Duration,
}

/// Heads admitted together, under the projection generation their claim is fenced on.
#[derive(Debug)]
pub struct AdmittedBatch {
    pub generation: i64,
    pub heads: Vec<AdmittedHead>,
}

/// `admit`, the Redis side of an executor's start of work: up to `limits.max_heads` heads of
/// the application's queues that every budget lets start, or None when none is due. A
/// projection that is not trusted is rebuilt from PostgreSQL first, and the next round admits.
pub async fn admit(
    stores: Stores<'_>,
    keys: &AppKeys,
    limits: AdmitLimits,
) -> Result<Option<AdmittedBatch>, DurableError> {
    match super::redis::admit(stores.redis, keys, limits).await? {
        Admission::Heads { heads, .. } if heads.is_empty() => Ok(None),
        Admission::Heads {
            generation, heads, ..
        } => Ok(Some(AdmittedBatch { generation, heads })),
        Admission::NotReady => {
            crate::lifecycle::rebuild::ensure_ready(stores.pg, stores.redis, keys.application_id())
                .await?;
            Ok(None)
        }
    }
}

/// `claim`, and the Redis side of every head it did not claim. Its statement (transition `claim`)
/// also ends the heads past their time.
pub async fn claim(stores: Stores<'_>, order: &ClaimOrder<'_>) -> Result<Claim, DurableError> {
    let ids: Vec<CommandId> = order.heads.iter().map(|h| h.command_id).collect();
    let attempts: Vec<Uuid> = order.heads.iter().map(|h| h.attempt.as_uuid()).collect();
    // When `admit.lua` took each head's permits (Redis time): recorded as `started_at` by a
    // row's first claim. A Redis time out of chrono's range is not a time: the claim's clock.
    let started: Vec<DateTime<Utc>> = order
        .heads
        .iter()
        .map(|h| DateTime::from_timestamp_millis(h.started_ms).unwrap_or_else(Utc::now))
        .collect();
    let rows = ending_waiting!(query!(
        r#"WITH epoch AS (
             SELECT generation FROM projections
              WHERE application_id = $1 AND generation = $2 FOR SHARE),
         heads AS (
             SELECT h.id, h.attempt_id, h.started_at
               FROM unnest($3::uuid[], $4::uuid[], $8::timestamptz[]) AS h(id, attempt_id, started_at)),
         old AS (
             SELECT c.id, c.in_doubt, heads.attempt_id, heads.started_at,
                    c.deadline_at > now() AND c.max_wait_at > now() AS in_time
               FROM commands c JOIN heads ON heads.id = c.id
              WHERE EXISTS (SELECT 1 FROM epoch)
                AND c.status IN ('accepted', 'retry_wait') AND c.lease_owner IS NULL
              FOR UPDATE OF c),
         claimed AS (
             UPDATE commands c
                SET status = 'executing', attempts = c.attempts + 1, lease_owner = $5,
                    attempt_id = old.attempt_id, started_at = COALESCE(c.started_at, old.started_at),
                    lease_expires_at = now() + make_interval(secs => $6::double precision / 1000),
                    lease_ms = round($6::double precision)::integer,
                    updated_at = now(), in_doubt = c.in_doubt OR c.id = ANY($7)
               FROM old
              WHERE c.id = old.id AND old.in_time
             -- These names are the UNION's (its first branch names its columns), with the types
             -- and nullability sqlx cannot infer through it.
             RETURNING c.subject AS "subject!", c.request_key AS "request_key!",
                       c.content_sha256 AS "content_sha256!", c.input AS "input!",
                       c.accepted_at AS "accepted_at!",
                       c.deadline_at AS "deadline_at!", c.attempts AS "attempts!",
                       c.limit_keys AS "limit_keys!", old.in_doubt AS "was_in_doubt!",
                       c.id AS "id!: CommandId", c.application_id AS "application_id!: ApplicationId",
                       c.namespace_id AS "namespace_id!: NamespaceId", c.command AS "command!",
                       c.resource_key AS "resource_key!", c.queue_seq AS "queue_seq!",
                       c.status AS "status!: CommandStatus", c.updated_at AS "updated_at!", c.result,
                       c.error_code, c.error_message, c.lease_owner IS NOT NULL AS "held!",
                       c.attempt_id AS "attempt: AttemptId", c.trace_parent),
         ended AS (
             UPDATE commands c SET "#,
        "
               FROM old
              WHERE c.id = old.id AND NOT old.in_time
             RETURNING c.subject, c.request_key, c.content_sha256, c.input, c.accepted_at,
                       c.deadline_at, c.attempts, c.limit_keys,
                       old.in_doubt AS was_in_doubt, c.id, c.application_id, c.namespace_id,
                       c.command, c.resource_key, c.queue_seq, c.status, c.updated_at, c.result,
                       c.error_code, c.error_message, c.lease_owner IS NOT NULL AS held, c.attempt_id,
                       c.trace_parent)
         SELECT * FROM claimed UNION ALL SELECT * FROM ended",
        order.application_id as _,
        order.generation,
        &ids as _,
        &attempts,
        order.owner,
        order.lease.as_millis() as f64,
        order.external as _,
        &started,
    ))
    .fetch_all(stores.pg)
    .await?;
    let found: Vec<CommandId> = rows.iter().map(|row| row.id).collect();
    let mut claimed = Vec::with_capacity(rows.len());
    let mut ended = Vec::new();
    for record in rows {
        let input = record.input;
        let attempts = record.attempts;
        let limit_keys = record.limit_keys;
        let was_in_doubt = record.was_in_doubt;
        let trace_parent = record.trace_parent.clone();
        let state = row_state!(record);
        if state.row.status != CommandStatus::Executing {
            ended.push(state);
            continue;
        }
        claimed.push(Claimed {
            attempt: state
                .attempt
                .ok_or_else(|| DurableError::script("claim", "a claimed row without attempt"))?,
            row: state.row,
            input,
            attempts,
            limit_keys: serde_json::from_value(limit_keys).unwrap_or_default(),
            was_in_doubt,
            trace_parent,
        });
    }
    if found.is_empty() && generation(stores, order.application_id).await? != order.generation {
        return Ok(Claim::Stale);
    }
    let keys = AppKeys::new(order.application_id);
    for state in &ended {
        tracing::info!(command_id = %state.row.id, status = %state.row.status, "admitted past its time: ended instead of started");
        project_current(
            stores,
            &keys,
            order.retention_ms,
            order.patience,
            state,
            None,
        )
        .await;
    }
    let unclaimed: Vec<&AdmittedHead> = order
        .heads
        .iter()
        .filter(|h| !found.contains(&h.command_id))
        .collect();
    if !unclaimed.is_empty() {
        requeue_unclaimed(stores, &keys, order, &unclaimed).await;
    }
    Ok(Claim::Claimed(claimed))
}

async fn generation(
    stores: Stores<'_>,
    application_id: ApplicationId,
) -> Result<i64, DurableError> {
    Ok(sqlx::query_scalar!(
        "SELECT generation FROM projections WHERE application_id = $1",
        application_id as _
    )
    .fetch_optional(stores.pg)
    .await?
    .unwrap_or(0))
}

/// Heads admitted but not claimed (cancelled, ended or taken meanwhile): their Redis side follows
/// what PostgreSQL says of them, under the attempt their admission minted.
async fn requeue_unclaimed(
    stores: Stores<'_>,
    keys: &AppKeys,
    order: &ClaimOrder<'_>,
    unclaimed: &[&AdmittedHead],
) {
    let ids: Vec<CommandId> = unclaimed.iter().map(|h| h.command_id).collect();
    match current_state(stores, &ids).await {
        Ok(states) => {
            for state in &states {
                let attempt = unclaimed
                    .iter()
                    .find(|h| h.command_id == state.row.id)
                    .map(|h| h.attempt);
                project_current(
                    stores,
                    keys,
                    order.retention_ms,
                    order.patience,
                    state,
                    attempt,
                )
                .await;
            }
        }
        Err(error) => {
            // Put them back as waiting; if one of them ended meanwhile, its next admission finds
            // that out and lands it.
            sluice_metrics::storage_error(&error);
            tracing::warn!(%error, "unclaimed heads go back to their queues");
            let heads: Vec<AdmittedHead> = unclaimed.iter().map(|h| (*h).clone()).collect();
            requeue_heads(stores, keys, &heads).await;
        }
    }
}

/// Gives admitted heads back to their queues unclaimed (the claim failed, or the executor is
/// draining): PostgreSQL still has them waiting.
pub async fn requeue_heads(stores: Stores<'_>, keys: &AppKeys, heads: &[AdmittedHead]) {
    for head in heads {
        let Some((namespace_id, command, resource_key)) = split_suffix(&head.queue_suffix) else {
            continue;
        };
        let back = Requeued {
            command_id: head.command_id,
            attempt: Some(head.attempt),
            namespace_id,
            command,
            resource_key,
            queue_seq: head.queue_seq,
            status: CommandStatus::Accepted,
            updated_at: rfc3339(Utc::now()),
        };
        match requeue(stores.redis, keys, &back).await {
            Ok(Requeue::Done | Requeue::Stale) => {}
            // A rebuild is under way: its snapshot has the head waiting, as PostgreSQL does.
            Ok(Requeue::NotReady) => {}
            Err(error) => {
                sluice_metrics::storage_error(&error);
                tracing::warn!(command_id = %head.command_id, %error, "head not given back; its permits lapse and the sweeper puts it back");
            }
        }
    }
}

/// `"<namespace uuid>:<command>:<resource>"` → (namespace, command, resource).
pub fn split_suffix(suffix: &str) -> Option<(NamespaceId, &str, &str)> {
    let namespace = suffix.get(..36)?.parse().ok()?;
    let (command, resource) = suffix.get(37..)?.split_once(':')?;
    Some((namespace, command, resource))
}

/// What PostgreSQL says of `ids` now.
pub async fn current_state(
    stores: Stores<'_>,
    ids: &[CommandId],
) -> Result<Vec<RowState>, DurableError> {
    Ok(sqlx::query_file!("queries/current_state.sql", ids as _)
        .map(|current| row_state!(current))
        .fetch_all(stores.pg)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_suffixes_split_back() {
        let ns = NamespaceId::new_v7();
        let suffix = AppKeys::queue_suffix(ns, "claim", "offer:with:colons");
        assert_eq!(
            split_suffix(&suffix),
            Some((ns, "claim", "offer:with:colons"))
        );
        assert_eq!(split_suffix("short"), None);
    }
}
