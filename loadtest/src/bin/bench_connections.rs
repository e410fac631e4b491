//! What half-open connections cost a gateway: a slowloris flood against a real `sluice serve`
//! process, measured in one run on one machine.
//!
//! A scratch database and tenant, then `sluice serve` and `sluice execute` as processes (the
//! load generator's split stack, default settings: `gateway.header_read_timeout_ms` 10 s,
//! `gateway.max_connections` 10,000). Then:
//! 1. a valid caller (`GET /v1/status` with the credential, one call every 20 ms) alone for a few
//!    seconds: its latencies are the baseline;
//! 2. `--connections` TCP connections each send half a request header
//!    (`GET /healthz HTTP/1.1\r\nHost: x\r\n`) and then nothing; the valid caller keeps calling;
//!    the gateway's resident memory (`VmRSS`) is sampled every 100 ms;
//! 3. every half-open connection waits for the server to close it: the time from its last byte
//!    to the close is recorded, and so is any connection still open after the header timeout
//!    and a grace.
//!
//! Printed: connections closed by the server and the slowest close, the valid caller's p50/p99
//! during the flood against its baseline (ratio), and the gateway's RSS before, at its peak and
//! after (MiB, and KiB per half-open connection). Loopback only; the scratch database and the
//! tenant's Redis keys are removed afterwards. Needs an open-file limit above `--connections`
//! (`ulimit -n`); `loadtest/connections.sh` raises it to the hard limit.

use std::time::{Duration, Instant};

use clap::Parser;
use hyper::Method;
use sluice_loadtest::api::{Outcome, exchange};
use sluice_loadtest::bench_stack::ScratchDatabase;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_loadtest::driver::http_client;
use sluice_loadtest::sampler::resident_mib;
use sluice_loadtest::stack::{Stack, StackKind, StackSpec, default_sluice_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(about = "Half-open connections against a gateway process: closes, latency, memory")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Half-open connections opened at once.
    #[arg(long, default_value_t = 5_000)]
    connections: usize,
    /// The gateway's header read timeout this run expects (its default).
    #[arg(long, default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// Seconds of the valid caller alone, before the flood.
    #[arg(long, default_value_t = 3)]
    baseline_seconds: u64,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.servers.check()?;
    let needed = args.connections as u64 + 512;
    let limit = open_file_limit()?;
    if limit < needed {
        return Err(format!(
            "the open-file limit is {limit}; {needed} are needed: raise it (`ulimit -n {needed}`, or run loadtest/connections.sh)"
        )
        .into());
    }
    let scratch = ScratchDatabase::create(&args.servers.database_url).await?;
    let outcome = run(&args, &scratch.url).await;
    let dropped = scratch.drop_now().await;
    outcome?;
    dropped
}

async fn run(args: &Args, database_url: &str) -> Result<(), BoxError> {
    let tenant =
        Tenant::create(database_url, &args.servers.redis_url, 4, CLAIM_DECLARATION).await?;
    // The processes' logs, kept for a look after a failed run.
    let dir = std::env::temp_dir().join(format!("sluice-bench-connections-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("logs of the stack in {}", dir.display());
    let client = http_client(16);
    let sluice_bin = default_sluice_bin();
    let stack = Stack::start(
        StackSpec {
            kind: StackKind::Split,
            sluice_bin: &sluice_bin,
            database_url,
            redis_url: &args.servers.redis_url,
            external_gateway: None,
            dir: &dir,
        },
        &client,
    )
    .await?;
    let measured = measure(args, &stack, &tenant).await;
    let stopped = stack.stop().await;
    let closed = tenant.close().await;
    measured?;
    stopped?;
    closed
}

async fn measure(args: &Args, stack: &Stack, tenant: &Tenant) -> Result<(), BoxError> {
    let gateway_pid = stack
        .watched()
        .into_iter()
        .find(|w| w.name == "gateway")
        .map(|w| w.pid)
        .ok_or("the stack has no gateway process")?;
    let address = stack.base.trim_start_matches("http://").to_string();
    let status_url = format!("{}/v1/status", stack.base);
    let credential = tenant.creds.credential.clone();

    let baseline = caller(
        &status_url,
        &credential,
        |_| false,
        Duration::from_secs(args.baseline_seconds),
    )
    .await?;
    let rss_before = resident_mib(gateway_pid);

    // The flood and, beside it, the valid caller and the memory sampler.
    let stop = CancellationToken::new();
    let during = tokio::spawn({
        let (url, credential, stop) = (status_url.clone(), credential.clone(), stop.clone());
        async move {
            caller(
                &url,
                &credential,
                move |_| stop.is_cancelled(),
                Duration::from_secs(3_600),
            )
            .await
        }
    });
    let peak = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut peak = 0.0f64;
            while !stop.is_cancelled() {
                peak = peak.max(resident_mib(gateway_pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        }
    });
    let opened_at = Instant::now();
    let mut holders = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let mut stream = TcpStream::connect(&address).await?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await?;
        let sent = Instant::now();
        holders.push(tokio::spawn(async move {
            // The server's close: EOF or a reset. Anything it answers first is read past.
            let mut buffer = [0u8; 256];
            loop {
                match stream.read(&mut buffer).await {
                    Ok(0) | Err(_) => return sent.elapsed(),
                    Ok(_) => {}
                }
            }
        }));
    }
    let all_open = opened_at.elapsed();
    let grace = Duration::from_millis(args.header_timeout_ms) + Duration::from_secs(5);
    let mut closes = Vec::with_capacity(holders.len());
    let mut still_open = 0usize;
    let deadline = tokio::time::Instant::now() + grace;
    for holder in holders {
        match tokio::time::timeout_at(deadline, holder).await {
            Ok(Ok(took)) => closes.push(took),
            _ => still_open += 1,
        }
    }
    stop.cancel();
    let during = during.await??;
    let rss_peak = peak.await?.max(resident_mib(gateway_pid));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = resident_mib(gateway_pid);

    closes.sort_unstable();
    let slowest = closes.last().copied().unwrap_or_default();
    let fastest = closes.first().copied().unwrap_or_default();
    println!(
        "half-open connections against sluice serve (header read timeout {} ms): {} opened in {:.2} s",
        args.header_timeout_ms,
        args.connections,
        all_open.as_secs_f64()
    );
    println!();
    println!("| figure | value |");
    println!("| --- | ---: |");
    println!(
        "| closed by the server | {} of {} |",
        closes.len(),
        args.connections
    );
    println!(
        "| still open {:.0} s after their last byte | {still_open} |",
        grace.as_secs_f64()
    );
    println!(
        "| time from last byte to close: first / slowest | {:.2} s / {:.2} s |",
        fastest.as_secs_f64(),
        slowest.as_secs_f64()
    );
    println!(
        "| valid caller p50 / p99, alone ({} calls, {} failed) | {:.1} ms / {:.1} ms |",
        baseline.latencies.len(),
        baseline.failed,
        percentile(&baseline.latencies, 0.50),
        percentile(&baseline.latencies, 0.99)
    );
    println!(
        "| valid caller p50 / p99, during the flood ({} calls, {} failed) | {:.1} ms / {:.1} ms |",
        during.latencies.len(),
        during.failed,
        percentile(&during.latencies, 0.50),
        percentile(&during.latencies, 0.99)
    );
    println!(
        "| gateway RSS before / peak / after | {rss_before:.1} / {rss_peak:.1} / {rss_after:.1} MiB |"
    );
    println!(
        "| RSS per half-open connection at the peak | {:.1} KiB |",
        (rss_peak - rss_before).max(0.0) * 1024.0 / args.connections as f64
    );
    println!();
    println!(
        "ratio valid caller p99, during the flood / alone: {:.2}x",
        percentile(&during.latencies, 0.99) / percentile(&baseline.latencies, 0.99).max(0.001)
    );
    if still_open > 0 || during.failed > 0 {
        return Err(format!(
            "{still_open} connections outlived the header timeout, {} valid calls failed",
            during.failed
        )
        .into());
    }
    Ok(())
}

/// What the valid caller saw.
struct Calls {
    latencies: Vec<f64>,
    failed: usize,
}

/// `GET /v1/status` with the credential every 20 ms until `done` says so or `for_at_most`
/// passes; latencies in ms.
async fn caller(
    url: &str,
    credential: &str,
    done: impl Fn(&Calls) -> bool,
    for_at_most: Duration,
) -> Result<Calls, BoxError> {
    let client = http_client(1);
    let until = Instant::now() + for_at_most;
    let mut calls = Calls {
        latencies: Vec::new(),
        failed: 0,
    };
    while Instant::now() < until && !done(&calls) {
        let answer = exchange(&client, Method::GET, url, Some(credential), None).await;
        match answer.outcome {
            Outcome::Success { status: 200, .. } => {
                calls.latencies.push(answer.took.as_secs_f64() * 1_000.0)
            }
            _ => calls.failed += 1,
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(calls)
}

fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The soft limit of open files of this process (`/proc/self/limits`).
fn open_file_limit() -> Result<u64, BoxError> {
    let limits = std::fs::read_to_string("/proc/self/limits")?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .ok_or("/proc/self/limits has no open-file limit")?;
    let soft = line
        .split_whitespace()
        .nth(3)
        .ok_or("unreadable open-file limit")?;
    Ok(if soft == "unlimited" {
        u64::MAX
    } else {
        soft.parse()?
    })
}
