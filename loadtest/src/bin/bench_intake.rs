//! Acceptances per second with group commit versus one transaction per request, measured in one
//! run on one machine against the same PostgreSQL (fsync on, as it is configured) and Redis.
//!
//! Both modes run the whole enqueue path over HTTP: authentication, validation, `intake.lua`,
//! the durable insert, `accept.lua`, the signed ticket. Only the commit strategy differs:
//! - group commit: the default (committers pull every waiting acceptance into one transaction);
//! - per request: `max_batch = 1` and as many committers as connections, i.e. one transaction
//!   per request, as an application that inserts in its request handler would do.
//!
//! Rounds alternate between the modes so drift of the shared machine hits both alike; the
//! median of the rounds is reported. Loopback only; bounded by `--requests`.

use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::Request;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_loadtest::driver::{RunReport, http_client, run};
use sluice_store::batching::GroupCommitConfig;

#[derive(Debug, Parser)]
#[command(about = "Group commit versus one transaction per request")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Enqueues per round.
    #[arg(long, default_value_t = 6_000)]
    requests: u64,
    /// Concurrent callers.
    #[arg(long, default_value_t = 128)]
    concurrency: usize,
    /// PostgreSQL connections of the gateway (both modes).
    #[arg(long, default_value_t = 32)]
    connections: u32,
    /// Rounds per mode (alternating).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.servers.check()?;
    with_scratch_tenant(
        &args.servers,
        args.connections,
        CLAIM_DECLARATION,
        async |tenant| rounds(&args, tenant).await,
    )
    .await
}

async fn rounds(args: &Args, tenant: &Tenant) -> Result<(), BoxError> {
    let group = GroupCommitConfig::default();
    let per_request = GroupCommitConfig {
        max_batch: 1,
        committers: args.connections as usize,
        ..GroupCommitConfig::default()
    };
    println!(
        "intake benchmark: {} enqueues per round, {} concurrent callers, {} connections, {} rounds per mode",
        args.requests, args.concurrency, args.connections, args.rounds
    );
    // Warm-up: connections, caches, script load.
    round(args, tenant, group.clone(), 0, args.requests / 5).await?;
    let mut grouped = Vec::new();
    let mut single = Vec::new();
    for r in 0..args.rounds {
        let offset = (r as u64 + 1) * 2 * args.requests;
        grouped.push(round(args, tenant, group.clone(), offset, args.requests).await?);
        single.push(
            round(
                args,
                tenant,
                per_request.clone(),
                offset + args.requests,
                args.requests,
            )
            .await?,
        );
    }
    let g = median(grouped.iter().map(|r| r.0).collect());
    let s = median(single.iter().map(|r| r.0).collect());
    println!();
    println!("| mode | acceptances/s (median) | p50 ms | p99 ms | batches |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    print_row("group commit", g, &grouped);
    print_row("one transaction per request", s, &single);
    println!();
    println!("ratio group commit / per request: {:.2}x", g / s);
    Ok(())
}

fn print_row(name: &str, median_rate: f64, rounds: &[(f64, RunReport, u64)]) {
    let last = &rounds[rounds.len() / 2];
    println!(
        "| {name} | {median_rate:.0} | {:.1} | {:.1} | {} |",
        last.1.latency_us.value_at_quantile(0.5) as f64 / 1000.0,
        last.1.latency_us.value_at_quantile(0.99) as f64 / 1000.0,
        last.2
    );
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One round on a fresh gateway with the given commit strategy: (acceptances/s, report, batches).
async fn round(
    args: &Args,
    tenant: &Tenant,
    commit: GroupCommitConfig,
    offset: u64,
    requests: u64,
) -> Result<(f64, RunReport, u64), BoxError> {
    let config = GatewayConfig {
        group_commit: commit,
        ..GatewayConfig::default()
    };
    let gateway = RunningGateway::start(tenant, config).await?;
    let client = http_client(args.concurrency);
    let uri = format!("{}/v1/commands/claim:enqueue", gateway.base);
    let bearer = format!("Bearer {}", tenant.creds.credential);
    let offers: Vec<String> = (0..64).map(|_| uuid::Uuid::new_v4().to_string()).collect();
    let report = run(&client, requests, args.concurrency, move |i| {
        let n = offset + i;
        let body = format!(
            r#"{{"request_key":"r{n}","subject":"user-{n}","input":{{"offer":"{}"}}}}"#,
            offers[(n % 64) as usize]
        );
        Request::post(&uri)
            .header("authorization", &bearer)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("a valid request")
    })
    .await;
    let batches = gateway
        .gateway
        .committer
        .stats()
        .batches
        .load(std::sync::atomic::Ordering::Relaxed);
    let unexpected: u64 = report
        .by_status
        .iter()
        .filter(|(status, _)| *status != 202)
        .map(|(_, n)| *n)
        .sum();
    if unexpected > 0 {
        return Err(format!(
            "{unexpected} enqueues were not accepted: {:?}",
            report.by_status
        )
        .into());
    }
    drop(gateway);
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok((report.per_second(202), report, batches))
}
