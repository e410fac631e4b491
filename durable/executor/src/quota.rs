//! The built-in quota handler: one unit per subject per pool, ever. In committed mode the unit is
//! `confirmed` when the command succeeds; in reserved mode it is `reserved` until its holder
//! confirms or releases it or the database's clock passes `expires_at` (`sluice_durable::quotas`). Both
//! modes draw on the same free units (`capacity - allocated - reserved`) and the same
//! once-per-subject fact, so commands of either mode can share a pool.
//!
//! All commands of one pool that are ready together are decided in one transaction: the pool row
//! is locked once, the batch is decided in queue order, the allocations, the pool's count and
//! every command's terminal state are written together. The rows are re-checked to still be
//! held by their attempts (`FOR UPDATE`), so an attempt whose lease lapsed can never land a
//! result next to the one that took over.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use sluice_durable::DurableError;
use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_durable::lifecycle::claim::Claimed;
use sluice_durable::lifecycle::land_batch::{Decided, Landed, land_batch};
use sluice_metrics::HandlerKind;
use sluice_model::CommandStatus;

/// The decision for one command, before it is written.
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Allocated(Uuid),
    SoldOut,
    AlreadyAllocated,
}

/// Decides a batch in queue order: each subject at most one unit (counting allocations that
/// exist already), and never more than `available` units. A subject is told
/// `ALREADY_ALLOCATED` only if it really holds a unit; otherwise an empty pool is `SOLD_OUT`.
fn decide(subjects: &[&str], already: &HashSet<String>, available: i64) -> Vec<Decision> {
    let mut allocated_now: HashSet<&str> = HashSet::new();
    let mut left = available;
    subjects
        .iter()
        .map(|subject| {
            if already.contains(*subject) || allocated_now.contains(subject) {
                Decision::AlreadyAllocated
            } else if left > 0 {
                left -= 1;
                allocated_now.insert(subject);
                Decision::Allocated(Uuid::now_v7())
            } else {
                Decision::SoldOut
            }
        })
        .collect()
}

/// How long each reserved-mode command of a batch holds its unit, by command id: its command's
/// `reservation_seconds`. A command not listed takes a committed unit.
pub type Holds = HashMap<CommandId, u32>;

/// Allocates for a batch of one pool; returns the states that landed (commands this executor no
/// longer held are left out: someone else decides them). Timed and counted for `/metrics` here,
/// where the transaction that decides them has committed.
pub async fn allocate(
    pg: &PgPool,
    namespace_id: NamespaceId,
    pool: &str,
    batch: &[Claimed],
    holds: &Holds,
) -> Result<Vec<Landed>, DurableError> {
    let started = Instant::now();
    // One span for the transaction of many commands: none of their traces is its parent.
    let span = tracing::info_span!(
        "quota_batch",
        namespace_id = %namespace_id,
        pool,
        commands = batch.len()
    );
    let landed = tracing::Instrument::instrument(
        allocate_in_one_transaction(pg, namespace_id, pool, batch, holds),
        span,
    )
    .await;
    sluice_metrics::handler_latency(HandlerKind::Quota, started.elapsed());
    if let Ok(landed) = &landed {
        for done in landed {
            sluice_metrics::execution_landed(done.status);
        }
    }
    landed
}

async fn allocate_in_one_transaction(
    pg: &PgPool,
    namespace_id: NamespaceId,
    pool: &str,
    batch: &[Claimed],
    holds: &Holds,
) -> Result<Vec<Landed>, DurableError> {
    let ids: Vec<CommandId> = batch.iter().map(|c| c.row.id).collect();
    let attempts: Vec<Uuid> = batch.iter().map(|c| c.attempt.as_uuid()).collect();
    let mut tx = pg.begin().await?;
    let held: Vec<(CommandId, String)> = sqlx::query!(
        r#"SELECT c.id AS "id: CommandId", c.subject FROM commands c
             JOIN unnest($1::uuid[], $2::uuid[]) AS a(id, attempt_id)
               ON c.id = a.id AND c.attempt_id = a.attempt_id
            WHERE c.status = 'executing'
            ORDER BY c.queue_seq
            FOR UPDATE OF c"#,
        &ids as _,
        &attempts,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.id, row.subject))
    .collect();
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let counts: Option<(i64, i64, i64)> = sqlx::query!(
        "SELECT capacity, allocated, reserved FROM quota_pools
          WHERE namespace_id = $1 AND code = $2 FOR UPDATE",
        namespace_id as _,
        pool,
    )
    .fetch_optional(&mut *tx)
    .await?
    .map(|row| (row.capacity, row.allocated, row.reserved));
    let counts = match counts {
        // Under the pool's row lock, before units are counted: a buyer is never told
        // `SOLD_OUT` while a unit whose reservation lapsed waits for the sweeper.
        Some((capacity, allocated, reserved)) if reserved > 0 => {
            let lapsed =
                sluice_durable::quotas::expiry::expire_in_pool(&mut *tx, namespace_id, pool, None)
                    .await?;
            Some((
                capacity,
                allocated,
                reserved - i64::try_from(lapsed).unwrap_or(0),
            ))
        }
        other => other,
    };
    let subjects: Vec<&str> = held.iter().map(|(_, s)| s.as_str()).collect();
    let decisions = match counts {
        None => None,
        Some((capacity, allocated, reserved)) => {
            let already: HashSet<String> = sqlx::query_scalar!(
                "SELECT subject FROM allocations
                  WHERE namespace_id = $1 AND pool = $2 AND subject = ANY($3)",
                namespace_id as _,
                pool,
                &subjects as _
            )
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
            Some(decide(&subjects, &already, capacity - allocated - reserved))
        }
    };
    let units = match &decisions {
        Some(decisions) => {
            insert_allocations(&mut tx, namespace_id, pool, &held, decisions, holds).await?
        }
        None => HashMap::new(),
    };
    let decided: Vec<Decided> = match &decisions {
        None => held
            .iter()
            .map(|(id, _)| {
                let message = format!("the quota pool {pool:?} does not exist");
                Decided {
                    id: *id,
                    status: CommandStatus::Failed,
                    result: None,
                    error: Some(("POOL_NOT_FOUND", message)),
                }
            })
            .collect(),
        Some(decisions) => held
            .iter()
            .zip(decisions)
            .map(|((id, _), decision)| match decision {
                Decision::Allocated(allocation) => Decided {
                    id: *id,
                    status: CommandStatus::Succeeded,
                    result: Some(receipt(
                        *allocation,
                        units.get(allocation).copied().flatten(),
                    )),
                    error: None,
                },
                Decision::SoldOut => Decided {
                    id: *id,
                    status: CommandStatus::Rejected,
                    result: None,
                    error: Some(("SOLD_OUT", "the pool has no units left".to_string())),
                },
                Decision::AlreadyAllocated => Decided {
                    id: *id,
                    status: CommandStatus::Rejected,
                    result: None,
                    error: Some((
                        "ALREADY_ALLOCATED",
                        "this subject already holds an allocation of the pool".to_string(),
                    )),
                },
            })
            .collect(),
    };
    let landed = land_batch(&mut tx, batch, &decided).await?;
    tx.commit().await?;
    Ok(landed)
}

/// The command's result: what it took, as it stood when it landed. A reservation's current
/// truth is its allocation row (`GET /v1/allocations/{id}`), never this receipt.
fn receipt(allocation: Uuid, expires_at: Option<DateTime<Utc>>) -> Value {
    match expires_at {
        Some(expires_at) => json!({
            "allocation_id": allocation,
            "state": "reserved",
            "expires_at": sluice_store::outbox::rfc3339(expires_at),
        }),
        None => json!({"allocation_id": allocation, "state": "confirmed"}),
    }
}

/// Writes the batch's allocations and moves the pool's counts; returns each new allocation's
/// `expires_at` (`None`: a committed unit). A reservation's clock starts on the database's
/// clock, now.
async fn insert_allocations(
    tx: &mut sqlx::PgConnection,
    namespace_id: NamespaceId,
    pool: &str,
    held: &[(CommandId, String)],
    decisions: &[Decision],
    holds: &Holds,
) -> Result<HashMap<Uuid, Option<DateTime<Utc>>>, DurableError> {
    let mut allocation_ids = Vec::new();
    let mut command_ids = Vec::new();
    let mut subjects = Vec::new();
    let mut hold_seconds: Vec<Option<i32>> = Vec::new();
    for ((command_id, subject), decision) in held.iter().zip(decisions) {
        if let Decision::Allocated(allocation) = decision {
            allocation_ids.push(*allocation);
            command_ids.push(*command_id);
            subjects.push(subject.as_str());
            hold_seconds.push(
                holds
                    .get(command_id)
                    .map(|s| i32::try_from(*s).unwrap_or(i32::MAX)),
            );
        }
    }
    if allocation_ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query!(
        "INSERT INTO allocations (id, namespace_id, pool, subject, command_id, state, expires_at)
         SELECT a.id, $1, $2, a.subject, a.command_id,
                CASE WHEN a.hold IS NULL THEN 'confirmed' ELSE 'reserved' END,
                clock_timestamp() + make_interval(secs => a.hold)
           FROM unnest($3::uuid[], $4::text[], $5::uuid[], $6::int4[])
                AS a(id, subject, command_id, hold)
         RETURNING id, expires_at",
        namespace_id as _,
        pool,
        &allocation_ids,
        &subjects as _,
        &command_ids as _,
        &hold_seconds as _,
    )
    .fetch_all(&mut *tx)
    .await?;
    let reserved = hold_seconds.iter().filter(|h| h.is_some()).count() as i64;
    let confirmed = allocation_ids.len() as i64 - reserved;
    sqlx::query!(
        "UPDATE quota_pools SET allocated = allocated + $3, reserved = reserved + $4
          WHERE namespace_id = $1 AND code = $2",
        namespace_id as _,
        pool,
        confirmed,
        reserved,
    )
    .execute(&mut *tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.id, row.expires_at))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_follow_queue_order_and_capacity() {
        let already: HashSet<String> = ["carol".to_string()].into();
        let d = decide(
            &["alice", "bob", "alice", "carol", "dave", "erin"],
            &already,
            3,
        );
        assert!(matches!(d[0], Decision::Allocated(_)));
        assert!(matches!(d[1], Decision::Allocated(_)));
        assert_eq!(
            d[2],
            Decision::AlreadyAllocated,
            "a subject's second command in one batch"
        );
        assert_eq!(
            d[3],
            Decision::AlreadyAllocated,
            "a subject allocated earlier"
        );
        assert!(matches!(d[4], Decision::Allocated(_)));
        assert_eq!(d[5], Decision::SoldOut);
    }

    #[test]
    fn a_subject_without_a_unit_is_sold_out_not_already_allocated() {
        let none = HashSet::new();
        let d = decide(&["winner", "loser", "loser"], &none, 1);
        assert!(matches!(d[0], Decision::Allocated(_)));
        assert_eq!(d[1], Decision::SoldOut);
        assert_eq!(d[2], Decision::SoldOut);
    }

    #[test]
    fn an_exhausted_or_overdrawn_pool_sells_nothing() {
        let none = HashSet::new();
        assert_eq!(decide(&["a"], &none, 0), vec![Decision::SoldOut]);
        assert_eq!(decide(&["a"], &none, -3), vec![Decision::SoldOut]);
    }
}
