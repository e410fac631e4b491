//! What must hold after a run, checked against PostgreSQL (the truth) and, for the limits,
//! PostgreSQL's own samples and the webhook backend's observations from outside: never the
//! permits the stack's Redis holds.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sqlx::PgPool;

use crate::api::is_terminal;
use crate::bench_stack::BoxError;
use crate::report::{Check, Peaks};

mod reserved;
pub mod room;

pub use reserved::{States, await_settled, reserved};

const UNFINISHED: &str = "SELECT count(*) FROM commands WHERE namespace_id = $1 AND status IN \
     ('accepted', 'executing', 'running', 'retry_wait')";

/// Waits until no command of the namespace is in a non-terminal status, or `limit` passed.
/// Returns how many are still unfinished.
pub async fn await_drained(
    pg: &PgPool,
    namespace: NamespaceId,
    limit: Duration,
) -> Result<i64, BoxError> {
    let deadline = Instant::now() + limit;
    loop {
        let open: i64 = sqlx::query_scalar(UNFINISHED)
            .bind(namespace)
            .fetch_one(pg)
            .await?;
        if open == 0 || Instant::now() > deadline {
            return Ok(open);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn check(name: &str, holds: bool, detail: String) -> Check {
    Check {
        name: name.to_string(),
        holds,
        detail,
    }
}

/// The durable record against what the callers were told: every acceptance has its row, every
/// row was answered to a caller, every row is terminal, the terminal status a caller read is the
/// row's, and no subject has two rows (retries reused their request key).
pub async fn commands(
    pg: &PgPool,
    namespace: NamespaceId,
    accepted: &HashMap<CommandId, Option<CommandStatus>>,
) -> Result<Vec<Check>, BoxError> {
    let rows: Vec<(CommandId, CommandStatus, String)> =
        sqlx::query_as("SELECT id, status, subject FROM commands WHERE namespace_id = $1")
            .bind(namespace)
            .fetch_all(pg)
            .await?;
    let by_id: HashMap<CommandId, CommandStatus> =
        rows.iter().map(|(id, s, _)| (*id, *s)).collect();
    let missing = accepted.keys().filter(|id| !by_id.contains_key(id)).count();
    let unanswered = rows
        .iter()
        .filter(|(id, ..)| !accepted.contains_key(id))
        .count();
    let open = rows.iter().filter(|(_, s, _)| !is_terminal(*s)).count();
    let review = rows
        .iter()
        .filter(|(_, s, _)| *s == CommandStatus::NeedsReview)
        .count();
    let contradicted = accepted
        .iter()
        .filter(|(id, seen)| seen.is_some_and(|seen| by_id.get(id).is_some_and(|row| *row != seen)))
        .count();
    let mut subjects = HashSet::new();
    let twice = rows
        .iter()
        .filter(|(_, _, subject)| !subjects.insert(subject.as_str()))
        .count();
    Ok(vec![
        check(
            "every acceptance has its row",
            missing == 0,
            format!("{} acceptances, {missing} without a row", accepted.len()),
        ),
        check(
            "every row was answered to its caller",
            unanswered == 0,
            format!(
                "{} rows, {unanswered} whose acceptance no caller learnt",
                rows.len()
            ),
        ),
        check(
            "every row is terminal",
            open == 0,
            format!("{open} rows not terminal ({review} needs_review)"),
        ),
        check(
            "callers read the durable status",
            contradicted == 0,
            format!("{contradicted} terminal statuses read that differ from the row"),
        ),
        check(
            "no subject twice",
            twice == 0,
            format!("{} rows of {} subjects", rows.len(), subjects.len()),
        ),
    ])
}

/// The quota pool: its counts what the allocation rows say (`allocated` the confirmed ones,
/// `reserved` the reserved ones, read in one statement, so in one snapshot) and never above
/// capacity, one allocation per subject, one per succeeded command. Committed units are all
/// `confirmed`; a reserved drop's expired and released rows hold nothing.
pub async fn quota(
    pg: &PgPool,
    namespace: NamespaceId,
    pool: &str,
) -> Result<Vec<Check>, BoxError> {
    let (capacity, allocated, reserved, rows, subjects, confirmed_rows, reserved_rows): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = sqlx::query_as(
        "SELECT p.capacity, p.allocated, p.reserved, count(a.id), count(DISTINCT a.subject),
                count(a.id) FILTER (WHERE a.state = 'confirmed'),
                count(a.id) FILTER (WHERE a.state = 'reserved')
           FROM quota_pools p
           LEFT JOIN allocations a ON a.namespace_id = p.namespace_id AND a.pool = p.code
          WHERE p.namespace_id = $1 AND p.code = $2
          GROUP BY p.capacity, p.allocated, p.reserved",
    )
    .bind(namespace)
    .bind(pool)
    .fetch_one(pg)
    .await?;
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE namespace_id = $1 AND status = 'succeeded'",
    )
    .bind(namespace)
    .fetch_one(pg)
    .await?;
    let held = confirmed_rows + reserved_rows;
    Ok(vec![
        check(
            "allocations within capacity",
            held <= capacity
                && allocated + reserved <= capacity
                && allocated == confirmed_rows
                && reserved == reserved_rows,
            format!(
                "{rows} allocation rows ({confirmed_rows} confirmed, {reserved_rows} reserved), \
                 pool counts {allocated} allocated + {reserved} reserved, capacity {capacity}"
            ),
        ),
        check(
            "one allocation per subject",
            rows == subjects,
            format!("{rows} allocations for {subjects} subjects"),
        ),
        check(
            "one allocation per succeeded command",
            rows == succeeded,
            format!("{rows} allocations, {succeeded} succeeded commands"),
        ),
    ])
}

/// Commands executing at once, as PostgreSQL's rows show them (sampled every 50 ms), never above
/// the command's `max_in_flight`: a witness that shares nothing with the permits Redis holds
/// (the status board's permit counts are reported beside it, not trusted by it).
pub fn executing_within_limits(peaks: &Peaks) -> Check {
    let over: Vec<String> = peaks
        .executing
        .iter()
        .filter_map(|(command, p)| {
            let limit = p.limit?;
            (p.peak > limit).then(|| format!("{command}: {} > {limit}", p.peak))
        })
        .collect();
    let detail = if over.is_empty() {
        peaks
            .executing
            .iter()
            .map(|(c, p)| match p.limit {
                Some(limit) => format!("{c} {}/{limit}", p.peak),
                None => format!("{c} {}", p.peak),
            })
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        over.join(", ")
    };
    check(
        "commands executing at once within max_in_flight (PostgreSQL, sampled)",
        over.is_empty() && !peaks.executing.is_empty(),
        detail,
    )
}

/// How much later than its start tokens were taken a request may reach the backend and so appear
/// in a later window: the executor's token freshness (a request whose tokens are older takes
/// them again), which the provider bound allows as extra time.
const DELIVERY_ALLOWANCE: f64 = 0.2;

/// The webhook backend's own observations: every call signed, each command called once, no
/// account ever above its requests at once, no provider above what its token bucket allows in
/// any one second (`burst + rate × 1 s`, burst = rate).
pub fn backend(
    options: &crate::scenario::Options,
    seen: &crate::servers::BackendSeen,
    accepted: &HashMap<CommandId, Option<CommandStatus>>,
) -> Vec<Check> {
    let account_peak = seen.account_peak.values().copied().max().unwrap_or(0);
    let account_limit = i64::from(options.account_max_in_flight);
    let provider_peak = seen
        .provider_peak_per_second
        .values()
        .copied()
        .max()
        .unwrap_or(0);
    let rate = f64::from(options.provider_per_second);
    let provider_bound = (rate + rate * (1.0 + DELIVERY_ALLOWANCE)).floor() as u64;
    let succeeded = accepted
        .values()
        .filter(|s| **s == Some(CommandStatus::Succeeded))
        .count() as u64;
    vec![
        check(
            "every webhook call signed",
            seen.unsigned == 0 && seen.requests > 0,
            format!("{} calls, {} unsigned", seen.requests, seen.unsigned),
        ),
        check(
            "each command called once",
            seen.repeated == 0 && seen.requests >= succeeded,
            format!(
                "{} calls for {succeeded} succeeded commands, {} called again",
                seen.requests, seen.repeated
            ),
        ),
        check(
            "account requests at once within max_in_flight (backend's view)",
            account_peak <= account_limit,
            format!(
                "peak {account_peak} of {account_limit} over {} accounts",
                seen.account_peak.len()
            ),
        ),
        check(
            "provider starts per second within the token bucket (backend's view)",
            provider_peak <= provider_bound,
            format!(
                "peak {provider_peak} in one second; a bucket of {rate} per second with burst {rate} allows {provider_bound}"
            ),
        ),
    ]
}
