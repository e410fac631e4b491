//! An application's shared budgets: `max_unfinished` (accepted, not terminal, in every
//! namespace), `max_concurrency` (executing permits) and `rate_per_second` (execution starts).
//!
//! PostgreSQL holds the configuration, its revision, the audit and the idempotency receipts of
//! configure calls; Redis holds a copy the scripts read (`app_limits.lua`, newest revision wins)
//! and the live usage. Lowering a limit deletes and revokes nothing: usage may stay above it until
//! work finishes, while new intake and new starts wait.

use fred::prelude::*;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_store::tenancy::audit;

/// The three limits, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budgets {
    pub max_unfinished_tasks: u32,
    pub max_concurrency: u32,
    pub rate_per_second: u32,
}

/// Ranges of the contract (and of the table's CHECK constraints).
pub const MAX_UNFINISHED_RANGE: std::ops::RangeInclusive<u64> = 1..=100_000_000;
pub const MAX_CONCURRENCY_RANGE: std::ops::RangeInclusive<u64> = 1..=1_000_000;
pub const RATE_PER_SECOND_RANGE: std::ops::RangeInclusive<u64> = 1..=10_000_000;

/// Configuration and usage at one moment, as `GET /v1/application/resources` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub application_id: ApplicationId,
    pub revision: i64,
    pub budgets: Budgets,
    pub usage: Usage,
}

/// Live usage: `unfinished_tasks` (every non-terminal status, `needs_review` included),
/// `active_attempts` (executing permits held, in all namespaces), `pending_starts` (permits held
/// by commands between two attempts: reserved, not running an attempt now).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub unfinished_tasks: u64,
    pub active_attempts: u64,
    pub pending_starts: u64,
}

/// A configure call.
#[derive(Debug, Clone)]
pub struct Configure<'a> {
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub actor: &'a str,
    pub idempotency_key: &'a str,
    pub expected_revision: i64,
    pub reason: &'a str,
    pub budgets: Budgets,
}

/// What a configure call answered.
#[derive(Debug, Clone)]
pub struct Configured {
    pub snapshot: Snapshot,
    pub deduplicated: bool,
}

async fn budgets_of(
    conn: &mut sqlx::PgConnection,
    application_id: ApplicationId,
    lock: bool,
) -> Result<(i64, Budgets), DurableError> {
    // Two statements, not one built at run time: each is checked at compile time.
    let row = if lock {
        sqlx::query_as!(
            BudgetRow,
            "SELECT resources_revision, max_unfinished, max_concurrency, rate_per_second
               FROM applications WHERE id = $1 FOR UPDATE",
            application_id as _,
        )
        .fetch_optional(&mut *conn)
        .await?
    } else {
        sqlx::query_as!(
            BudgetRow,
            "SELECT resources_revision, max_unfinished, max_concurrency, rate_per_second
               FROM applications WHERE id = $1",
            application_id as _,
        )
        .fetch_optional(&mut *conn)
        .await?
    };
    let row = row.ok_or_else(|| DurableError::NotFound("the application is gone".into()))?;
    let limit = |value: i64| u32::try_from(value).unwrap_or(u32::MAX);
    Ok((
        row.resources_revision,
        Budgets {
            max_unfinished_tasks: limit(row.max_unfinished),
            max_concurrency: limit(row.max_concurrency),
            rate_per_second: limit(row.rate_per_second),
        },
    ))
}

/// The `applications` columns of the shared budgets, as stored.
struct BudgetRow {
    resources_revision: i64,
    max_unfinished: i64,
    max_concurrency: i64,
    rate_per_second: i64,
}

/// Usage from the live projection (Redis) and, for commands between two attempts, PostgreSQL.
/// A projection being rebuilt cannot say: `Unavailable`.
pub async fn usage(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<Usage, DurableError> {
    let keys = AppKeys::new(application_id);
    let answer: Vec<Value> = redis
        .usage(
            vec![keys.meta(), keys.count(), keys.application_leases()],
            vec![],
        )
        .await?;
    let number = |i: usize| answer.get(i).and_then(Value::as_i64).unwrap_or(0);
    if answer.first().and_then(Value::as_string).as_deref() != Some("1") {
        return Err(DurableError::Unavailable(
            "the application's projection is being rebuilt".into(),
        ));
    }
    let pending: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "pending!" FROM commands
            WHERE application_id = $1 AND status = 'retry_wait' AND lease_owner IS NOT NULL"#,
        application_id as ApplicationId,
    )
    .fetch_one(pg)
    .await?;
    Ok(Usage {
        unfinished_tasks: u64::try_from(number(1)).unwrap_or(0),
        active_attempts: u64::try_from(number(2)).unwrap_or(0),
        pending_starts: u64::try_from(pending).unwrap_or(0),
    })
}

/// The configuration and live usage now.
pub async fn read(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
) -> Result<Snapshot, DurableError> {
    let mut conn = pg.acquire().await?;
    let (revision, budgets) = budgets_of(&mut conn, application_id, false).await?;
    drop(conn);
    Ok(Snapshot {
        application_id,
        revision,
        budgets,
        usage: usage(pg, redis, application_id).await?,
    })
}

/// Full replacement of the three limits, compare-and-set on the revision. Configuration,
/// revision, audit and the idempotency receipt commit in one transaction; the same key with the
/// same content answers the original snapshot (`deduplicated`), with other content
/// `IdempotencyConflict`. Then the limits are stored in Redis for the scripts; if that fails, the
/// executors' catalog refresh stores them within seconds.
pub async fn configure(
    pg: &PgPool,
    redis: &Projection,
    call: &Configure<'_>,
) -> Result<Configured, DurableError> {
    let digest = request_digest(call);
    // Usage is read before the transaction: if Redis cannot say it, nothing changes.
    let usage = usage(pg, redis, call.application_id).await?;
    let mut tx = pg.begin().await?;
    // The application row is locked first, so two calls with one key serialise here and the
    // second finds the first one's receipt.
    let (revision, before) = budgets_of(&mut tx, call.application_id, true).await?;
    let receipt: Option<(Vec<u8>, serde_json::Value)> = sqlx::query!(
        "SELECT request_sha256, snapshot FROM application_resource_receipts
          WHERE namespace_id = $1 AND idempotency_key = $2",
        call.namespace_id as NamespaceId,
        call.idempotency_key,
    )
    .fetch_optional(&mut *tx)
    .await?
    .map(|row| (row.request_sha256, row.snapshot));
    if let Some((stored_digest, snapshot)) = receipt {
        let snapshot: Snapshot = sluice_store::receipts::replay(&stored_digest, snapshot, &digest)?;
        tx.commit().await?;
        return Ok(Configured {
            snapshot,
            deduplicated: true,
        });
    }
    if revision != call.expected_revision {
        return Err(DurableError::StateConflict(format!(
            "expected_revision {} does not match the current revision {revision}",
            call.expected_revision
        )));
    }
    let next = revision + 1;
    sqlx::query!(
        "UPDATE applications
            SET max_unfinished = $2, max_concurrency = $3, rate_per_second = $4,
                resources_revision = $5
          WHERE id = $1",
        call.application_id as ApplicationId,
        i64::from(call.budgets.max_unfinished_tasks),
        i64::from(call.budgets.max_concurrency),
        i64::from(call.budgets.rate_per_second),
        next,
    )
    .execute(&mut *tx)
    .await?;
    audit(
        &mut tx,
        call.application_id,
        Some(call.namespace_id),
        call.actor,
        "application.resources.configure",
        serde_json::json!({
            "reason": call.reason,
            "revision": next.to_string(),
            "before": before,
            "after": call.budgets,
            "idempotency_key": call.idempotency_key,
        }),
    )
    .await?;
    let snapshot = Snapshot {
        application_id: call.application_id,
        revision: next,
        budgets: call.budgets,
        usage,
    };
    sqlx::query!(
        "INSERT INTO application_resource_receipts
             (namespace_id, idempotency_key, request_sha256, snapshot)
         VALUES ($1, $2, $3, $4)",
        call.namespace_id as NamespaceId,
        call.idempotency_key,
        &digest[..],
        serde_json::to_value(&snapshot).unwrap_or_default(),
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    if let Err(error) = store_in_redis(redis, call.application_id, next, call.budgets).await {
        tracing::warn!(application_id = %call.application_id, %error, "budgets not stored in Redis yet; the executors' catalog refresh stores them");
    }
    Ok(Configured {
        snapshot,
        deduplicated: false,
    })
}

/// What identifies a configure request's content: the expected revision, the reason and the
/// three limits (the key itself is the receipt's address).
fn request_digest(call: &Configure<'_>) -> Vec<u8> {
    sluice_store::receipts::digest(&serde_json::json!([
        call.expected_revision.to_string(),
        call.reason,
        call.budgets.max_unfinished_tasks,
        call.budgets.max_concurrency,
        call.budgets.rate_per_second,
    ]))
}

/// Stores `budgets` of `revision` where the scripts read them; an older revision never
/// overwrites a newer one.
pub async fn store_in_redis(
    redis: &Projection,
    application_id: ApplicationId,
    revision: i64,
    budgets: Budgets,
) -> Result<(), DurableError> {
    let _: i64 = redis
        .app_limits(
            vec![AppKeys::new(application_id).meta()],
            vec![
                revision.into(),
                i64::from(budgets.max_unfinished_tasks).into(),
                i64::from(budgets.max_concurrency).into(),
                i64::from(budgets.rate_per_second).into(),
            ],
        )
        .await?;
    Ok(())
}

/// The budgets and their revision as PostgreSQL holds them now.
pub async fn budgets_now(
    pg: &PgPool,
    application_id: ApplicationId,
) -> Result<(i64, Budgets), DurableError> {
    let mut conn = pg.acquire().await?;
    budgets_of(&mut conn, application_id, false).await
}
