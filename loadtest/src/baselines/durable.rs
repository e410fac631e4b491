//! Pair 2, durable acceptances: the gateway's `202`s (group commit) against the naive
//! counter-row admission (`naive`), both on pools of the same size, then every `202` checked
//! against its row, because a fast acceptance that loses a row is no acceptance.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use uuid::Uuid;

use super::Bench;
use super::commands::{CLAIM, enqueue_body, next_number, post};
use super::rounds::{MakeRequest, http_round};
use super::side::{Comparison, Side};
use crate::bench_stack::{BoxError, RunningGateway};

/// Offers the claims are spread over (the gateway's resource keys; the naive side stores them).
const OFFERS: u64 = 64;

/// Pair 2's results: the comparison with the naive server, the Sluice side again for the
/// pgbench ceiling, and the commands per group-commit batch the gateway reached.
pub(super) struct Durable {
    pub(super) naive: Comparison,
    pub(super) sluice: Side,
    pub(super) batch: u64,
}

/// `--rounds` alternating rounds of Sluice acceptances and naive counter-row transactions, then
/// the count of rows against the `202`s.
pub(super) async fn pair(bench: &Bench<'_>) -> Result<Durable, BoxError> {
    let options = bench.options;
    let offers: Arc<Vec<String>> =
        Arc::new((0..OFFERS).map(|_| Uuid::new_v4().to_string()).collect());
    let make = {
        let (path, bearer) = (
            format!("/v1/commands/{CLAIM}:enqueue"),
            bench.bearer.clone(),
        );
        Arc::new(move || {
            let n = next_number();
            post(
                &path,
                &bearer,
                enqueue_body(n, &offers[(n % OFFERS) as usize]),
            )
        }) as MakeRequest
    };
    let mut sluice = Side::new("gateway: HTTP 202, group commit");
    let mut naive = Side::new("naive: one transaction per request, counter row + INSERT");
    let (mut sluice_202, mut naive_202) = (0, 0);
    let (mut batches, mut commands) = (0, 0);
    let (gateway, baseline) = (bench.gateway_addr, bench.baseline.addr);
    let callers = options.concurrency;
    sluice_202 += http_round(gateway, callers, options.warmup(), &make, None)
        .await?
        .expect_only(&[202], "warm-up acceptance")?
        .count(202);
    naive_202 += http_round(baseline, callers, options.warmup(), &make, None)
        .await?
        .expect_only(&[202], "warm-up naive acceptance")?
        .count(202);
    for r in 0..options.rounds {
        let stats_before = CommitStats::read(bench.gateway);
        bench.perf.enable();
        let round = http_round(gateway, callers, options.round(), &make, None).await;
        bench.perf.disable();
        let round = round?;
        let stats = CommitStats::read(bench.gateway).since(stats_before);
        sluice_202 += round.expect_only(&[202], "acceptance")?.count(202);
        sluice.push_http(&round, 202);
        (batches, commands) = (batches + stats.batches, commands + stats.commands);
        let naive_round = http_round(baseline, callers, options.round(), &make, None).await?;
        naive_202 += naive_round
            .expect_only(&[202], "naive acceptance")?
            .count(202);
        naive.push_http(&naive_round, 202);
        println!(
            "durable round {}: Sluice {:.0}/s ({:.1} commands per batch), naive {:.0}/s",
            r + 1,
            sluice.last(),
            stats.commands as f64 / stats.batches.max(1) as f64,
            naive.last()
        );
    }
    check_rows(bench, sluice_202, naive_202).await?;
    let batch = ((commands as f64 / batches.max(1) as f64).round() as u64).max(1);
    Ok(Durable {
        naive: Comparison::new(
            "durable acceptances/s (HTTP 202 group commit vs naive counter-row transaction per \
             request)",
            sluice.clone(),
            naive,
            // The goal: 10×, about 110 µs of CPU per acceptance in all.
            Some(10.0),
        ),
        sluice,
        batch,
    })
}

/// Every `202` has its row, on both sides: a lost acceptance makes the measurement worthless.
async fn check_rows(bench: &Bench<'_>, sluice_202: u64, naive_202: u64) -> Result<(), BoxError> {
    let sluice_rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE namespace_id = $1 AND command = $2",
    )
    .bind(bench.tenant.creds.namespace_id)
    .bind(CLAIM)
    .fetch_one(&bench.tenant.pg)
    .await?;
    let naive_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM naive_claims")
        .fetch_one(&bench.tenant.pg)
        .await?;
    println!(
        "rows: {sluice_rows} commands for {sluice_202} Sluice 202s, {naive_rows} naive claims \
         for {naive_202} naive 202s"
    );
    if sluice_rows != sluice_202 as i64 || naive_rows != naive_202 as i64 {
        return Err(format!(
            "acceptances and rows differ: Sluice {sluice_202} 202s vs {sluice_rows} rows, naive \
             {naive_202} 202s vs {naive_rows} rows"
        )
        .into());
    }
    Ok(())
}

/// The group committer's counters, to take differences around a round.
#[derive(Debug, Clone, Copy)]
struct CommitStats {
    batches: u64,
    commands: u64,
}

impl CommitStats {
    fn read(gateway: &RunningGateway) -> Self {
        let stats = gateway.gateway.committer.stats();
        Self {
            batches: stats.batches.load(Ordering::Relaxed),
            commands: stats.commands.load(Ordering::Relaxed),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            batches: self.batches - before.batches,
            commands: self.commands - before.commands,
        }
    }
}
