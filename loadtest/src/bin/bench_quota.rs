//! Quota commands executed per second, batched versus one transaction each, measured in one run
//! on one machine against the same PostgreSQL (fsync on, as it is configured) and Redis.
//!
//! Every round has its own command and quota pool (declared together up front), so each round
//! starts with the full capacity. A round:
//! 1. enqueues N commands over HTTP through an in-process gateway, spread over R resources, one
//!    subject each, with no executor running;
//! 2. starts an in-process executor and measures the time until every command of the round is
//!    terminal in PostgreSQL (polled every 20 ms): commands/s = N / elapsed.
//!
//! Only the quota handler's strategy differs between the modes:
//! - batched: the commands of one pool that were admitted together share one transaction
//!   (`batch_quota: true`, the default);
//! - one transaction each: `batch_quota: false`, one transaction per command.
//!
//! Capacity is below N, so both allocations and `SOLD_OUT` rejections are written; each round
//! checks its outcome (exactly `capacity` allocations, the rest `SOLD_OUT`). Rounds alternate
//! between the modes so drift of the shared machine hits both alike; medians are reported.
//! Loopback only; the scratch database and the tenant's Redis keys are removed afterwards.

use std::time::Duration;

use clap::Parser;
use sluice_executor::ExecutorConfig;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_store::batching::GroupCommitConfig;

#[derive(Debug, Parser)]
#[command(about = "Quota commands executed per second: batched versus one transaction each")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Commands per round.
    #[arg(long, default_value_t = 5_000)]
    commands: u64,
    /// Resources (offers) the commands of a round are spread over.
    #[arg(long, default_value_t = 32)]
    resources: usize,
    /// Capacity of each round's pool (below --commands, so some are SOLD_OUT).
    #[arg(long, default_value_t = 2_500)]
    capacity: u64,
    #[command(flatten)]
    run: RoundOptions,
}

/// What one round measured.
struct Round {
    pace: Pace,
    succeeded: i64,
    sold_out: i64,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.run.check(&args.servers)?;
    if args.commands == 0 || args.resources == 0 {
        return Err("--commands and --resources must be at least 1".into());
    }
    with_scratch_tenant(
        &args.servers,
        args.run.connections,
        &declaration(&args),
        async |tenant| rounds(&args, tenant).await,
    )
    .await
}

/// One command and one pool per round (round 0 is the warm-up), identical but for their codes.
fn declaration(args: &Args) -> String {
    let mut toml = String::from("[namespace]\nmax_waiting = 100000000\n");
    for k in 0..=2 * args.run.rounds {
        toml.push_str(&format!(
            r#"
[[command]]
code = "claim{k}"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
intake = {{ per_second = 10000000, burst = 10000000, max_in_flight = 1000000 }}
admission = {{ max_queue = 100000000, per_second = 10000000, max_in_flight = 1000000 }}
handler = {{ kind = "quota", pool = "stock{k}", mode = "committed" }}

[[quota_pool]]
code = "stock{k}"
capacity = {capacity}
"#,
            capacity = args.capacity
        ));
    }
    toml
}

async fn rounds(args: &Args, tenant: &Tenant) -> Result<(), BoxError> {
    let postgres = PostgresSettings::read(&tenant.pg).await?;
    let gateway = RunningGateway::start(
        tenant,
        GatewayConfig {
            group_commit: GroupCommitConfig::default(),
            ..GatewayConfig::default()
        },
    )
    .await?;
    println!(
        "quota benchmark: {} commands per round over {} resources, pool capacity {}, batch size {}, \
         {} parallel batches, {} rounds per mode; {postgres}",
        args.commands,
        args.resources,
        args.capacity,
        args.run.batch_size,
        args.run.parallel_batches,
        args.run.rounds
    );
    // Warm-up: connections, caches, script load.
    let warm = round(args, tenant, &gateway, 0, true, args.commands / 5).await?;
    println!(
        "warm-up (batched, {} commands): {:.0} commands/s",
        args.commands / 5,
        warm.pace.per_second
    );
    let mut batched = Vec::new();
    let mut single = Vec::new();
    for r in 0..args.run.rounds {
        let b = round(args, tenant, &gateway, 2 * r + 1, true, args.commands).await?;
        println!(
            "round {}: batched {:.0} commands/s ({:.2} s)",
            r + 1,
            b.pace.per_second,
            b.pace.elapsed.as_secs_f64()
        );
        batched.push(b);
        let s = round(args, tenant, &gateway, 2 * r + 2, false, args.commands).await?;
        println!(
            "round {}: one transaction each {:.0} commands/s ({:.2} s)",
            r + 1,
            s.pace.per_second,
            s.pace.elapsed.as_secs_f64()
        );
        single.push(s);
    }
    let b = median(batched.iter().map(|r| r.pace.per_second).collect());
    let s = median(single.iter().map(|r| r.pace.per_second).collect());
    println!();
    println!("| mode | commands/s (median) | rounds (commands/s) | succeeded | SOLD_OUT |");
    println!("| --- | ---: | --- | ---: | ---: |");
    print_row("batched (one transaction per pool and batch)", b, &batched);
    print_row("one transaction each", s, &single);
    println!();
    println!("ratio batched / one transaction each: {:.2}x", b / s);
    Ok(())
}

fn print_row(name: &str, median_rate: f64, rounds: &[Round]) {
    let each = rates_cell(rounds.iter().map(|r| r.pace.per_second));
    let last = &rounds[rounds.len() / 2];
    println!(
        "| {name} | {median_rate:.0} | {} | {} | {} |",
        each, last.succeeded, last.sold_out
    );
}

/// Enqueues `n` commands of `claim{k}` with no executor running, then times one executor (in
/// the given mode) until all of them are terminal.
async fn round(
    args: &Args,
    tenant: &Tenant,
    gateway: &RunningGateway,
    k: usize,
    batch_quota: bool,
    n: u64,
) -> Result<Round, BoxError> {
    let command = format!("claim{k}");
    let offers: Vec<String> = (0..args.resources)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let resources = args.resources as u64;
    enqueue_waiting(
        tenant,
        gateway,
        &command,
        n,
        args.run.concurrency,
        move |i| {
            format!(
                r#"{{"request_key":"r{i}","subject":"user-{k}-{i}","input":{{"offer":"{}"}}}}"#,
                offers[(i % resources) as usize]
            )
        },
    )
    .await?;

    let elapsed = drain(
        tenant,
        ExecutorConfig {
            batch_quota,
            ..args.run.executor_config()
        },
        &command,
        n,
        Duration::from_secs(args.run.round_timeout_seconds),
        || true,
    )
    .await?;

    let (succeeded, sold_out, other): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                count(*) FILTER (WHERE status = 'rejected' AND error_code = 'SOLD_OUT'),
                count(*) FILTER (WHERE status NOT IN ('succeeded', 'rejected')
                                    OR (status = 'rejected' AND error_code <> 'SOLD_OUT'))
           FROM commands WHERE namespace_id = $1 AND command = $2",
    )
    .bind(tenant.creds.namespace_id)
    .bind(&command)
    .fetch_one(&tenant.pg)
    .await?;
    let allocated: i64 = sqlx::query_scalar(
        "SELECT allocated FROM quota_pools WHERE namespace_id = $1 AND code = $2",
    )
    .bind(tenant.creds.namespace_id)
    .bind(format!("stock{k}"))
    .fetch_one(&tenant.pg)
    .await?;
    let expected = n.min(args.capacity) as i64;
    if succeeded != expected
        || allocated != expected
        || sold_out != n as i64 - expected
        || other != 0
    {
        return Err(format!(
            "round {command}: {succeeded} succeeded, {allocated} allocated, {sold_out} SOLD_OUT, \
             {other} other; expected {expected} allocations and the rest SOLD_OUT"
        )
        .into());
    }
    Ok(Round {
        pace: Pace::of(n, elapsed),
        succeeded,
        sold_out,
    })
}
