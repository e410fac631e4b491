//! A quota pool's counts as PostgreSQL holds them, and the operator's capacity change
//! (`POST /v1/quota-pools/{pool}:configure`): compare-and-set on the pool's revision, audited,
//! idempotent by key like the application's budgets (`crate::budgets`).
//!
//! A declaration sets a pool's capacity when it creates the pool or when the document changes
//! the declared number; re-applying a document that declares the same number leaves a capacity
//! set here alone (`tenancy::apply_declaration`).

use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_store::tenancy::audit;

/// Largest capacity a pool may have: what a declaration may declare.
pub use crate::declaration::MAX_POOL_CAPACITY as MAX_CAPACITY;

/// A pool's counts at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSnapshot {
    pub code: String,
    pub capacity: i64,
    /// Units confirmed (committed mode, or a reservation its holder confirmed).
    pub allocated: i64,
    /// Units held by reservations not yet confirmed, released or expired.
    pub reserved: i64,
    pub revision: i64,
}

impl PoolSnapshot {
    /// Units neither allocated nor reserved.
    pub fn available(&self) -> i64 {
        available(self.capacity, self.allocated, self.reserved)
    }
}

/// A pool's free units, as every view of a pool shows them (never below zero, whatever the
/// counts say).
pub fn available(capacity: i64, allocated: i64, reserved: i64) -> i64 {
    (capacity - allocated - reserved).max(0)
}

/// A configure call.
#[derive(Debug, Clone)]
pub struct Configure<'a> {
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub pool: &'a str,
    pub actor: &'a str,
    pub idempotency_key: &'a str,
    pub expected_revision: i64,
    pub reason: &'a str,
    pub capacity: i64,
}

/// What a configure call answered.
#[derive(Debug, Clone)]
pub struct Configured {
    pub snapshot: PoolSnapshot,
    pub deduplicated: bool,
}

/// The pool's counts now; `NotFound` when the namespace declares no such pool.
pub async fn read(
    pg: &PgPool,
    namespace_id: NamespaceId,
    pool: &str,
) -> Result<PoolSnapshot, DurableError> {
    sqlx::query_as!(
        PoolSnapshot,
        "SELECT code, capacity, allocated, reserved, revision FROM quota_pools
          WHERE namespace_id = $1 AND code = $2",
        namespace_id as _,
        pool,
    )
    .fetch_optional(pg)
    .await?
    .ok_or_else(|| not_found(pool))
}

fn not_found(pool: &str) -> DurableError {
    DurableError::NotFound(format!("no quota pool {pool:?} in this namespace"))
}

/// Sets the pool's capacity, compare-and-set on its revision. The pool's row is locked first
/// (the order every change of its counts takes), so the check against `allocated + reserved`
/// cannot race a reservation or a confirmation. Change, audit and receipt commit together; the
/// same key with the same content answers the first snapshot (`deduplicated`), with other content
/// `IdempotencyConflict`. Raising the capacity is all that lets waiting commands succeed: the
/// handler reads it when it decides them.
pub async fn configure(pg: &PgPool, call: &Configure<'_>) -> Result<Configured, DurableError> {
    let digest = request_digest(call);
    let mut tx = pg.begin().await?;
    let before = sqlx::query_as!(
        PoolSnapshot,
        "SELECT code, capacity, allocated, reserved, revision FROM quota_pools
          WHERE namespace_id = $1 AND code = $2 FOR UPDATE",
        call.namespace_id as _,
        call.pool,
    )
    .fetch_optional(&mut *tx)
    .await?
    .ok_or_else(|| not_found(call.pool))?;
    let receipt = sqlx::query!(
        "SELECT request_sha256, snapshot FROM quota_pool_receipts
          WHERE namespace_id = $1 AND idempotency_key = $2",
        call.namespace_id as _,
        call.idempotency_key,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(receipt) = receipt {
        let snapshot: PoolSnapshot =
            sluice_store::receipts::replay(&receipt.request_sha256, receipt.snapshot, &digest)?;
        tx.commit().await?;
        return Ok(Configured {
            snapshot,
            deduplicated: true,
        });
    }
    if before.revision != call.expected_revision {
        return Err(DurableError::StateConflict(format!(
            "expected_revision {} does not match the pool's revision {}",
            call.expected_revision, before.revision
        )));
    }
    let used = before.allocated + before.reserved;
    if call.capacity < used {
        return Err(DurableError::StateConflict(format!(
            "capacity {} is below the {used} units allocated ({}) or reserved ({}) now",
            call.capacity, before.allocated, before.reserved
        )));
    }
    let snapshot = sqlx::query_as!(
        PoolSnapshot,
        "UPDATE quota_pools SET capacity = $3, revision = revision + 1
          WHERE namespace_id = $1 AND code = $2
         RETURNING code, capacity, allocated, reserved, revision",
        call.namespace_id as _,
        call.pool,
        call.capacity,
    )
    .fetch_one(&mut *tx)
    .await?;
    audit(
        &mut tx,
        call.application_id,
        Some(call.namespace_id),
        call.actor,
        "quota_pool.configure",
        serde_json::json!({
            "pool": call.pool,
            "reason": call.reason,
            "revision": snapshot.revision.to_string(),
            "capacity_before": before.capacity,
            "capacity": call.capacity,
            "allocated": snapshot.allocated,
            "reserved": snapshot.reserved,
            "idempotency_key": call.idempotency_key,
        }),
    )
    .await?;
    sqlx::query!(
        "INSERT INTO quota_pool_receipts (namespace_id, idempotency_key, request_sha256, snapshot)
         VALUES ($1, $2, $3, $4)",
        call.namespace_id as _,
        call.idempotency_key,
        &digest[..],
        serde_json::to_value(&snapshot).unwrap_or_default(),
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Configured {
        snapshot,
        deduplicated: false,
    })
}

/// What identifies a configure request's content: the pool, the expected revision, the reason
/// and the capacity (the key itself is the receipt's address).
fn request_digest(call: &Configure<'_>) -> Vec<u8> {
    sluice_store::receipts::digest(&serde_json::json!([
        call.pool,
        call.expected_revision.to_string(),
        call.reason,
        call.capacity,
    ]))
}
