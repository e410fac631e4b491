//! The waiting figures of a run: how good the first ETA each waiter was told turned out, how
//! often waiters polled against what they were advised, and whether commands of one resource
//! started in the order they were accepted. The callers' side comes from [`crate::record`]; when
//! each command really started comes from PostgreSQL (`started_at`, the Redis time of the
//! admission that started it, the clock the tickets' `queue.observed_at` is on too).

use std::collections::{BTreeMap, HashMap};

use sluice_durable::ids::{CommandId, NamespaceId};
use sqlx::PgPool;

use crate::bench_stack::BoxError;
use crate::record::Wait;
use crate::report::Waiting;

/// One command as PostgreSQL holds it, for the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub command: String,
    pub resource_key: String,
    /// The queue order (given at intake): "accepted before" means a smaller sequence.
    pub queue_seq: i64,
    /// Unix milliseconds; None when it never started.
    pub started_ms: Option<f64>,
}

/// Reads every command of the namespace with when it started.
pub async fn started(
    pg: &PgPool,
    namespace: NamespaceId,
) -> Result<HashMap<CommandId, Started>, BoxError> {
    let rows: Vec<(CommandId, String, String, i64, Option<f64>)> = sqlx::query_as(
        "SELECT id, command, resource_key, queue_seq,
                (extract(epoch FROM started_at) * 1000)::float8
           FROM commands WHERE namespace_id = $1",
    )
    .bind(namespace)
    .fetch_all(pg)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, command, resource_key, queue_seq, started_ms)| {
            (
                id,
                Started {
                    command,
                    resource_key,
                    queue_seq,
                    started_ms,
                },
            )
        })
        .collect())
}

/// The figures from what the callers saw and what PostgreSQL recorded.
pub fn figures(waits: &HashMap<CommandId, Wait>, rows: &HashMap<CommandId, Started>) -> Waiting {
    let mut errors = Vec::new();
    let mut beyond_rounding = Vec::new();
    let mut ratios = Vec::new();
    let mut actual_waits = Vec::new();
    for (id, wait) in waits {
        let Some((told, observed_ms)) = wait.first_eta else {
            continue;
        };
        let Some(started_ms) = rows.get(id).and_then(|row| row.started_ms) else {
            continue;
        };
        // Started at the very instant it was observed waiting: no wait to be relative to, so
        // a millisecond stands for it.
        let actual = ((started_ms - observed_ms as f64) / 1000.0).max(0.001);
        let told = told as f64;
        errors.push((told - actual).abs() / actual);
        beyond_rounding.push(((told - actual).abs() - 0.5).max(0.0) / actual);
        ratios.push(told / actual);
        actual_waits.push(actual);
    }
    let mut per_minute = Vec::new();
    let mut advised_per_minute = Vec::new();
    let mut early = 0;
    for wait in waits.values().filter(|w| w.polls > 0) {
        early += wait.early;
        let minutes = wait.span.as_secs_f64() / 60.0;
        if minutes > 0.0 {
            per_minute.push(wait.polls as f64 / minutes);
        }
        let advised = wait.advised.as_secs_f64() / 60.0;
        if advised > 0.0 {
            advised_per_minute.push(wait.polls as f64 / advised);
        }
    }
    let accepted: HashMap<CommandId, i64> =
        waits.iter().map(|(id, w)| (*id, w.accepted_ms)).collect();
    let (inversions, overtaken) = inversions(rows, &accepted);
    Waiting {
        told: errors.len() as u64,
        eta_error_p50: quantile(&mut errors, 0.5),
        eta_error_p90: quantile(&mut errors, 0.9),
        eta_error_beyond_rounding_p50: quantile(&mut beyond_rounding, 0.5),
        eta_error_beyond_rounding_p90: quantile(&mut beyond_rounding, 0.9),
        eta_ratio_p10: quantile(&mut ratios, 0.1),
        eta_ratio_p50: quantile(&mut ratios, 0.5),
        eta_ratio_p90: quantile(&mut ratios, 0.9),
        actual_wait_p50_seconds: quantile(&mut actual_waits, 0.5),
        actual_wait_p90_seconds: quantile(&mut actual_waits, 0.9),
        waiters_polling: per_minute.len() as u64,
        polls_per_minute_p50: quantile(&mut per_minute, 0.5),
        polls_per_minute_p90: quantile(&mut per_minute, 0.9),
        advised_polls_per_minute_p50: quantile(&mut advised_per_minute, 0.5),
        advised_polls_per_minute_p90: quantile(&mut advised_per_minute, 0.9),
        polls_sooner_than_advised: early,
        started: rows.values().filter(|r| r.started_ms.is_some()).count() as u64,
        inversions,
        overtaken,
        // Read from the gateways' metrics once the run is over (scenario::drive).
        polls_answered: None,
    }
}

/// The `q` quantile (nearest rank) of `values`; 0 when there are none.
fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// One started command of a resource: its queue sequence, when its caller learnt it is accepted
/// (if one did) and when it started, Unix ms.
type QueuedStart = (i64, Option<f64>, f64);

/// Order inversions within each resource (command and resource key): pairs (a, b) where a was
/// ahead of b in the queue (smaller `queue_seq`), a's caller had its acceptance answered before b
/// started (`accepted_ms`, so a was in the queue then: the acceptance is projected before it is
/// answered), and yet a started after b; and the commands overtaken so. Commands that never
/// started are left out; one whose acceptance no caller learnt can overtake but is never counted
/// as overtaken. Concurrent intake can project a later sequence before an earlier one (each
/// request projects its own commit): a command answered after b started was not yet waiting
/// ahead of b, and is not an inversion.
pub fn inversions(
    rows: &HashMap<CommandId, Started>,
    accepted_ms: &HashMap<CommandId, i64>,
) -> (u64, u64) {
    let mut resources: BTreeMap<(&str, &str), Vec<QueuedStart>> = BTreeMap::new();
    for (id, row) in rows {
        if let Some(started) = row.started_ms {
            resources
                .entry((&row.command, &row.resource_key))
                .or_default()
                .push((
                    row.queue_seq,
                    accepted_ms.get(id).map(|ms| *ms as f64),
                    started,
                ));
        }
    }
    let mut pairs = 0;
    let mut overtaken = 0;
    for starts in resources.values_mut() {
        starts.sort_by_key(|(seq, ..)| *seq);
        for (i, (_, accepted, started)) in starts.iter().enumerate() {
            let Some(accepted) = accepted else { continue };
            let passed = starts[i + 1..]
                .iter()
                .filter(|(_, _, later)| later < started && *accepted < *later)
                .count() as u64;
            pairs += passed;
            overtaken += u64::from(passed > 0);
        }
    }
    (pairs, overtaken)
}
