//! A reserved drop's invariants, from PostgreSQL once every reservation had time to expire:
//! each allocation row decided (none still `reserved`), the pool's counts what the rows say,
//! `allocated + reserved` within capacity at every sample, and each holder's answer the row's
//! truth: a `200` to a confirm means `confirmed`, a `409` means the row is in the state it
//! named, a unit let lapse is `expired`, and nothing is confirmed or released that no holder's
//! `200` decided.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sluice_durable::ids::NamespaceId;
use sqlx::PgPool;
use uuid::Uuid;

use super::check;
use crate::bench_stack::BoxError;
use crate::holders::{Answer, Choice, Held, Logged};
use crate::report::Check;
use crate::sampler::PoolSamples;

/// Waits until no allocation of the pool is `reserved`, at most until the latest `expires_at`
/// (by the database's clock) plus `margin`, the time the expiry sweeper has to catch up (it
/// runs once a second in every executor). Returns how many are still reserved.
pub async fn await_settled(
    pg: &PgPool,
    namespace: NamespaceId,
    pool: &str,
    margin: Duration,
) -> Result<i64, BoxError> {
    let mut deadline = None;
    loop {
        let (left, lapses_in): (i64, f64) = sqlx::query_as(
            "SELECT count(*),
                    COALESCE(EXTRACT(EPOCH FROM max(expires_at) - clock_timestamp()), 0)::float8
               FROM allocations
              WHERE namespace_id = $1 AND pool = $2 AND state = 'reserved'",
        )
        .bind(namespace)
        .bind(pool)
        .fetch_one(pg)
        .await?;
        // Every command is terminal by now: no reservation starts later than those seen first.
        let deadline = *deadline.get_or_insert_with(|| {
            Instant::now() + Duration::from_secs_f64(lapses_in.max(0.0)) + margin
        });
        if left == 0 || Instant::now() > deadline {
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The allocation rows by final state.
#[derive(Debug, Clone, Copy, Default)]
pub struct States {
    pub rows: u64,
    pub confirmed: u64,
    pub released: u64,
    pub expired: u64,
    pub reserved: u64,
}

/// The pool's row and every allocation of it, in one snapshot.
struct Snapshot {
    allocated: i64,
    reserved: i64,
    capacity: i64,
    state_of: HashMap<Uuid, String>,
}

async fn snapshot(pg: &PgPool, namespace: NamespaceId, pool: &str) -> Result<Snapshot, BoxError> {
    let mut tx = pg.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let (capacity, allocated, reserved): (i64, i64, i64) = sqlx::query_as(
        "SELECT capacity, allocated, reserved FROM quota_pools
          WHERE namespace_id = $1 AND code = $2",
    )
    .bind(namespace)
    .bind(pool)
    .fetch_one(&mut *tx)
    .await?;
    let rows: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT id, state FROM allocations WHERE namespace_id = $1 AND pool = $2")
            .bind(namespace)
            .bind(pool)
            .fetch_all(&mut *tx)
            .await?;
    tx.commit().await?;
    Ok(Snapshot {
        allocated,
        reserved,
        capacity,
        state_of: rows.into_iter().collect(),
    })
}

/// The checks, with the rows counted by state for the report.
pub async fn reserved(
    pg: &PgPool,
    namespace: NamespaceId,
    pool: &str,
    logged: &Logged,
    samples: &PoolSamples,
) -> Result<(Vec<Check>, States), BoxError> {
    let snap = snapshot(pg, namespace, pool).await?;
    let mut states = States {
        rows: snap.state_of.len() as u64,
        ..States::default()
    };
    for state in snap.state_of.values() {
        match state.as_str() {
            "confirmed" => states.confirmed += 1,
            "released" => states.released += 1,
            "expired" => states.expired += 1,
            _ => states.reserved += 1,
        }
    }
    let mut checks = vec![
        check(
            "no reservation left once all had time to expire",
            states.reserved == 0,
            format!(
                "{} rows: {} confirmed, {} released, {} expired, {} still reserved",
                states.rows, states.confirmed, states.released, states.expired, states.reserved
            ),
        ),
        check(
            "pool counts equal the allocation rows (allocated = confirmed, reserved = reserved)",
            snap.allocated == states.confirmed as i64 && snap.reserved == states.reserved as i64,
            format!(
                "pool {} allocated, {} reserved; rows {} confirmed, {} reserved",
                snap.allocated, snap.reserved, states.confirmed, states.reserved
            ),
        ),
        sampled_within_capacity(samples, &snap),
    ];
    checks.extend(answers(logged, &snap.state_of, &states));
    Ok((checks, states))
}

fn sampled_within_capacity(samples: &PoolSamples, snap: &Snapshot) -> Check {
    let detail = match samples.first_over {
        Some((allocated, reserved, capacity)) => format!(
            "{} of {} samples over, first {allocated} allocated + {reserved} reserved > {capacity}",
            samples.over_capacity, samples.samples
        ),
        None => format!(
            "{} samples, peak {} held of {}",
            samples.samples, samples.peak_held, samples.capacity
        ),
    };
    check(
        "allocated + reserved within capacity at every sample (PostgreSQL, sampled)",
        samples.samples > 0
            && samples.over_capacity == 0
            && snap.allocated + snap.reserved <= snap.capacity,
        detail,
    )
}

/// The state an action decides.
fn target(choice: Choice) -> Option<&'static str> {
    match choice {
        Choice::Confirm => Some("confirmed"),
        Choice::Release => Some("released"),
        Choice::Lapse => None,
    }
}

/// Whether a holder's `200` decided its row: it changed it, or it repeats what an attempt whose
/// answer was lost did.
fn decided_by(held: &Held) -> bool {
    matches!(
        &held.answer,
        Some(Answer::Decided { changed, .. }) if *changed || held.lost_attempt
    )
}

/// Each holder's answer against its row.
fn answers(logged: &Logged, state_of: &HashMap<Uuid, String>, states: &States) -> Vec<Check> {
    let row = |held: &Held| state_of.get(&held.allocation).map(String::as_str);
    let missing = logged.held.iter().filter(|h| row(h).is_none()).count();
    let (mut ok_200, mut bad_200, mut ok_409, mut bad_409, mut lapsed, mut lapse_kept) =
        (0, 0, 0, 0, 0, 0);
    for held in &logged.held {
        let state = row(held);
        match (&held.answer, target(held.choice)) {
            (Some(Answer::Decided { state: told, .. }), Some(target)) => {
                if state == Some(target) && told == target && (decided_by(held)) {
                    ok_200 += 1;
                } else {
                    bad_200 += 1;
                }
            }
            (Some(Answer::Conflict { state: told }), Some(target)) => {
                let fits = state
                    .is_some_and(|s| s != target && s != "reserved" && told.as_deref() == Some(s));
                if fits { ok_409 += 1 } else { bad_409 += 1 }
            }
            (None, None) => {
                lapsed += 1;
                if state != Some("expired") {
                    lapse_kept += 1;
                }
            }
            _ => {}
        }
    }
    let decided = |choice: Choice| {
        logged
            .held
            .iter()
            .filter(|h| h.choice == choice && decided_by(h))
            .count() as u64
    };
    let (confirms, releases) = (decided(Choice::Confirm), decided(Choice::Release));
    vec![
        check(
            "every winner's allocation has its row",
            missing == 0 && logged.without_allocation == 0,
            format!(
                "{} winners told an allocation, {missing} without a row, {} told none",
                logged.held.len(),
                logged.without_allocation
            ),
        ),
        check(
            "every 200 to a confirm or release is the row's state",
            bad_200 == 0,
            format!("{ok_200} answers match their row, {bad_200} do not"),
        ),
        check(
            "every 409 names the row's state (expired, or the other decision)",
            bad_409 == 0,
            format!("{ok_409} answers match their row, {bad_409} do not"),
        ),
        check(
            "every unit let lapse expired",
            lapse_kept == 0,
            format!("{lapsed} let lapse, {lapse_kept} not expired"),
        ),
        check(
            "confirmed and released rows are as many as the 200s that decided them",
            states.confirmed == confirms && states.released == releases,
            format!(
                "{} confirmed rows, {confirms} confirms decided; {} released rows, {releases} \
                 releases decided",
                states.confirmed, states.released
            ),
        ),
    ]
}
