//! What connections cost a gateway, against a real `sluice serve` process, measured in one run on
//! one machine. Two modes:
//!
//! **`--mode half-open`** (the default): a slowloris flood.
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
//! after (MiB, and KiB per half-open connection).
//!
//! **`--mode idle`**: what an idle keep-alive connection costs after one real request.
//!
//! `--connections` connections each complete one request and then stay open, idle: every other
//! one `GET /healthz`, the others a ticket poll (`GET /v1/tickets/{ticket}`, a Redis script call
//! and the JSON answer a browser polls). The gateway's RSS is read before they open, with all of
//! them open and idle, and `--settle-seconds` after they close: bytes per idle connection, and
//! whether the memory goes back. The same is measured, in the same run, against the baseline: a
//! bare hyper-util server (this binary again, `--floor-server`, on the system allocator, hyper's
//! default buffers, the same header timeout) that answers the same two requests with bodies of
//! the same sizes; and, with `--before-bin`, against another `sluice` build (e.g. one of `main`).
//! The gateways run with `gateway.header_read_timeout_ms` (also the idle keep-alive limit) raised
//! to `--idle-hold-ms` and `gateway.max_connections` to `--connections` + 64, so none of the
//! connections is closed while they are counted.
//!
//! Loopback only; the scratch database and the tenant's Redis keys are removed afterwards. Needs
//! an open-file limit above `--connections` (`ulimit -n`); `loadtest/connections.sh` raises it to
//! the hard limit.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use sluice_loadtest::api::{Outcome, exchange};
use sluice_loadtest::bench_stack::ScratchDatabase;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_loadtest::driver::http_client;
use sluice_loadtest::sampler::resident_mib;
use sluice_loadtest::stack::{Stack, StackKind, StackSpec, default_sluice_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Connections that send half a request header: closes, a valid caller's latency, memory.
    HalfOpen,
    /// Keep-alive connections idle after one request each: memory per connection.
    Idle,
}

#[derive(Debug, Parser)]
#[command(
    about = "Connections against a gateway process: half-open (closes, latency, memory) or idle after one request (memory per connection)"
)]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Mode::HalfOpen)]
    mode: Mode,
    /// Connections opened at once.
    #[arg(long, default_value_t = 5_000)]
    connections: usize,
    /// The gateway's header read timeout this run expects (its default; half-open mode).
    #[arg(long, default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// Seconds of the valid caller alone, before the flood (half-open mode).
    #[arg(long, default_value_t = 3)]
    baseline_seconds: u64,
    /// The idle keep-alive limit the servers get in idle mode: longer than opening and counting
    /// every connection takes.
    #[arg(long, default_value_t = 120_000)]
    idle_hold_ms: u64,
    /// Seconds after the idle connections close before the RSS is read again (idle mode).
    #[arg(long, default_value_t = 5)]
    settle_seconds: u64,
    /// Another `sluice` binary measured in the same run (idle mode), e.g. a build of `main`.
    #[arg(long)]
    before_bin: Option<PathBuf>,
    /// A jemalloc shared library (e.g. Debian's `/usr/lib/x86_64-linux-gnu/libjemalloc.so.2`):
    /// the baseline is measured a second time with it preloaded and the gateway's jemalloc
    /// options, so that the allocator is the same on both sides (idle mode).
    #[arg(long)]
    floor_preload: Option<PathBuf>,
    /// Also write the idle mode's figures as JSON to this file (`loadtest/bench.sh` reads it).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Internal: serve as the bare hyper baseline on this address (idle mode starts it).
    #[arg(long, hide = true)]
    floor_server: Option<String>,
    /// Internal: the baseline's answer body to anything but `/healthz`, in bytes.
    #[arg(long, hide = true, default_value_t = 512)]
    floor_body_bytes: usize,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if let Some(address) = &args.floor_server {
        return floor_server(address, &args).await;
    }
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
    let outcome = match args.mode {
        Mode::HalfOpen => run(&args, &scratch.url).await,
        Mode::Idle => run_idle(&args, &scratch.url).await,
    };
    let dropped = scratch.drop_now().await;
    outcome?;
    dropped
}

/// Where the started processes write their logs, kept for a look after a failed run.
fn logs_dir() -> Result<PathBuf, BoxError> {
    let dir = std::env::temp_dir().join(format!("sluice-bench-connections-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("logs of the stacks in {}", dir.display());
    Ok(dir)
}

async fn run(args: &Args, database_url: &str) -> Result<(), BoxError> {
    let tenant =
        Tenant::create(database_url, &args.servers.redis_url, 4, CLAIM_DECLARATION).await?;
    let dir = logs_dir()?;
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
            gateway_env: &[],
            gateways: 1,
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

/// One server measured in idle mode.
struct IdleFigures {
    name: String,
    rss_before: f64,
    rss_open: f64,
    rss_after: f64,
    opened_in: Duration,
    /// Bytes of the ticket poll's answer body (the baseline answers with as many).
    poll_body_bytes: usize,
}

impl IdleFigures {
    fn bytes_per_connection(&self, connections: usize) -> f64 {
        (self.rss_open - self.rss_before).max(0.0) * 1024.0 * 1024.0 / connections as f64
    }
}

async fn run_idle(args: &Args, database_url: &str) -> Result<(), BoxError> {
    let tenant =
        Tenant::create(database_url, &args.servers.redis_url, 4, CLAIM_DECLARATION).await?;
    let dir = logs_dir()?;
    let mut gateways = vec![("sluice serve".to_string(), default_sluice_bin())];
    if let Some(before) = &args.before_bin {
        gateways.push((
            format!("sluice serve ({})", before.display()),
            before.clone(),
        ));
    }
    let mut figures = Vec::new();
    let mut outcome = Ok(());
    for (name, bin) in &gateways {
        match idle_against_gateway(args, database_url, &tenant, &dir, name, bin).await {
            Ok(measured) => figures.push(measured),
            Err(error) => {
                outcome = Err(error);
                break;
            }
        }
    }
    let closed = tenant.close().await;
    outcome?;
    closed?;
    let poll_body_bytes = figures.first().map_or(512, |f| f.poll_body_bytes);
    let mut floors = vec![idle_against_floor(args, poll_body_bytes, None).await?];
    if let Some(preload) = &args.floor_preload {
        floors.push(idle_against_floor(args, poll_body_bytes, Some(preload)).await?);
    }
    print_idle(args, &figures, &floors);
    if let Some(path) = &args.json {
        std::fs::write(path, idle_json(args, &figures, &floors).to_string())?;
    }
    Ok(())
}

/// The idle figures as JSON: `gateways` (this build first, then `--before-bin`) and `floors` (the
/// bare hyper baseline, then with `--floor-preload`), MiB and bytes per idle connection.
fn idle_json(args: &Args, gateways: &[IdleFigures], floors: &[IdleFigures]) -> serde_json::Value {
    let side = |f: &IdleFigures| {
        serde_json::json!({
            "name": f.name,
            "rss_before_mib": f.rss_before,
            "rss_open_mib": f.rss_open,
            "rss_after_mib": f.rss_after,
            "bytes_per_connection": f.bytes_per_connection(args.connections),
        })
    };
    serde_json::json!({
        "connections": args.connections,
        "gateways": gateways.iter().map(side).collect::<Vec<_>>(),
        "floors": floors.iter().map(side).collect::<Vec<_>>(),
    })
}

/// The gateway's jemalloc options (gateway/src/main.rs), for the baseline with jemalloc preloaded.
const GATEWAY_MALLOC_CONF: &str = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

/// The environment that keeps every idle connection open while it is counted.
fn idle_env(args: &Args) -> [(String, String); 2] {
    [
        (
            "SLUICE_GATEWAY_HEADER_READ_TIMEOUT_MS".into(),
            args.idle_hold_ms.to_string(),
        ),
        (
            "SLUICE_GATEWAY_MAX_CONNECTIONS".into(),
            (args.connections + 64).to_string(),
        ),
    ]
}

async fn idle_against_gateway(
    args: &Args,
    database_url: &str,
    tenant: &Tenant,
    dir: &Path,
    name: &str,
    sluice_bin: &Path,
) -> Result<IdleFigures, BoxError> {
    let client = http_client(4);
    let env = idle_env(args);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let stack = Stack::start(
        StackSpec {
            kind: StackKind::Split,
            sluice_bin,
            database_url,
            redis_url: &args.servers.redis_url,
            external_gateway: None,
            dir,
            gateway_env: &env,
            gateways: 1,
        },
        &client,
    )
    .await?;
    let measured = async {
        let pid = stack
            .watched()
            .into_iter()
            .find(|w| w.name == "gateway")
            .map(|w| w.pid)
            .ok_or("the stack has no gateway process")?;
        let ticket = enqueue_one(&client, &stack.base, &tenant.creds.credential).await?;
        let address = stack.base.trim_start_matches("http://").to_string();
        idle_round(args, name, &address, pid, &format!("/v1/tickets/{ticket}")).await
    }
    .await;
    let stopped = stack.stop().await;
    let measured = measured?;
    stopped?;
    Ok(measured)
}

/// One accepted command's ticket: what the ticket polls ask for.
async fn enqueue_one(
    client: &sluice_loadtest::driver::HttpClient,
    base: &str,
    credential: &str,
) -> Result<String, BoxError> {
    let body = serde_json::json!({
        "request_key": format!("idle-{}", uuid::Uuid::new_v4()),
        "subject": "idle-bench",
        "input": {"offer": uuid::Uuid::new_v4()},
    });
    let answer = exchange(
        client,
        Method::POST,
        &format!("{base}/v1/commands/claim:enqueue"),
        Some(credential),
        Some(body.to_string()),
    )
    .await;
    match answer.outcome {
        Outcome::Success { data, .. } => data["ticket"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| "the enqueue answer has no ticket".into()),
        other => Err(format!("the enqueue was not accepted: {other:?}").into()),
    }
}

async fn idle_against_floor(
    args: &Args,
    body_bytes: usize,
    preload: Option<&Path>,
) -> Result<IdleFigures, BoxError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?.to_string();
    drop(listener);
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    let name = match preload {
        Some(library) => {
            command
                .env("LD_PRELOAD", library)
                .env("MALLOC_CONF", GATEWAY_MALLOC_CONF);
            "bare hyper-util server, jemalloc preloaded (baseline)"
        }
        None => "bare hyper-util server (baseline)",
    };
    let mut child = command
        .args([
            "--floor-server",
            &address,
            "--floor-body-bytes",
            &body_bytes.to_string(),
            "--idle-hold-ms",
            &args.idle_hold_ms.to_string(),
        ])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("the baseline server did not start")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&address).await.is_err() {
        if Instant::now() > deadline {
            return Err("the baseline server did not listen within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let measured = idle_round(args, name, &address, pid, "/v1/tickets/t").await;
    let _ = child.start_kill();
    let _ = child.wait().await;
    measured
}

/// Opens `--connections` connections to `address`, each answered one request (every other one
/// `GET /healthz`, the others `GET {poll_path}`), and keeps them open while the server's RSS is
/// read; then closes them and reads it again after `--settle-seconds`.
async fn idle_round(
    args: &Args,
    name: &str,
    address: &str,
    pid: u32,
    poll_path: &str,
) -> Result<IdleFigures, BoxError> {
    let requests: Arc<[Vec<u8>; 2]> =
        Arc::new([request_bytes("/healthz"), request_bytes(poll_path)]);
    // A few rounds first, so the server's lazily built state (caches, pools, the allocator's
    // first arenas) is in "before" and not counted against the connections.
    let mut poll_body_bytes = 0;
    for _ in 0..32 {
        let mut stream = TcpStream::connect(address).await?;
        for request in requests.iter() {
            let (status, body) = one_exchange(&mut stream, request).await?;
            if status != 200 {
                return Err(format!("{name}: a warm-up request was answered {status}").into());
            }
            poll_body_bytes = body;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = resident_mib(pid);

    let started = Instant::now();
    let gate = Arc::new(Semaphore::new(64));
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..args.connections {
        let (gate, requests, address) = (gate.clone(), requests.clone(), address.to_string());
        opening.spawn(async move {
            let _turn = gate.acquire_owned().await?;
            let mut stream = TcpStream::connect(&address).await?;
            let (status, _) = one_exchange(&mut stream, &requests[i % 2]).await?;
            if status != 200 {
                return Err(BoxError::from(format!("answered {status}")));
            }
            Ok::<_, BoxError>(stream)
        });
    }
    let mut open = Vec::with_capacity(args.connections);
    while let Some(joined) = opening.join_next().await {
        open.push(joined??);
    }
    let opened_in = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_open = resident_mib(pid);
    // Still open: a connection the server had closed would read EOF at once.
    let mut closed_early = 0;
    let mut probe = [0u8; 1];
    for stream in &open {
        if matches!(stream.try_read(&mut probe), Ok(0)) {
            closed_early += 1;
        }
    }
    if closed_early > 0 {
        return Err(format!("{name}: {closed_early} connections were closed while idle").into());
    }
    drop(open);
    tokio::time::sleep(Duration::from_secs(args.settle_seconds)).await;
    let rss_after = resident_mib(pid);
    Ok(IdleFigures {
        name: name.to_string(),
        rss_before,
        rss_open,
        rss_after,
        opened_in,
        poll_body_bytes,
    })
}

fn request_bytes(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: sluice-bench-connections\r\nAccept: */*\r\n\r\n")
        .into_bytes()
}

/// Sends one request and reads its answer (headers and a `Content-Length` body): the status and
/// the body's length. The connection stays open.
async fn one_exchange(stream: &mut TcpStream, request: &[u8]) -> Result<(u16, usize), BoxError> {
    let exchange = async {
        stream.write_all(request).await?;
        let mut seen = Vec::with_capacity(1024);
        let mut buffer = [0u8; 2048];
        let head_end = loop {
            let n = stream.read(&mut buffer).await?;
            if n == 0 {
                return Err(BoxError::from("closed before the answer's headers"));
            }
            seen.extend_from_slice(&buffer[..n]);
            if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
        };
        let head = std::str::from_utf8(&seen[..head_end])?;
        let status: u16 = head.split(' ').nth(1).ok_or("no status line")?.parse()?;
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .ok_or("no Content-Length")?;
        while seen.len() < head_end + length {
            let n = stream.read(&mut buffer).await?;
            if n == 0 {
                return Err(BoxError::from("closed before the answer's body"));
            }
            seen.extend_from_slice(&buffer[..n]);
        }
        Ok((status, length))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| BoxError::from("no answer within 10 s"))?
}

fn print_idle(args: &Args, gateways: &[IdleFigures], floors: &[IdleFigures]) {
    let n = args.connections;
    println!(
        "{n} keep-alive connections, each idle after one request (GET /healthz or a ticket poll); \
         RSS read 2 s after the last one opened and {} s after they all closed",
        args.settle_seconds
    );
    println!();
    println!(
        "| server | opened in | RSS before | with {n} idle | {} s after they closed | bytes per idle connection |",
        args.settle_seconds
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for f in gateways.iter().chain(floors) {
        println!(
            "| {} | {:.1} s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.0} |",
            f.name,
            f.opened_in.as_secs_f64(),
            f.rss_before,
            f.rss_open,
            f.rss_after,
            f.bytes_per_connection(n)
        );
    }
    println!();
    for floor in floors {
        let floor_bytes = floor.bytes_per_connection(n).max(1.0);
        for f in gateways {
            println!(
                "ratio bytes per idle connection, {} / {}: {:.2}x",
                f.name,
                floor.name,
                f.bytes_per_connection(n) / floor_bytes
            );
        }
    }
}

/// The baseline server: hyper-util's auto builder as its documentation writes it (the system
/// allocator, hyper's default buffers), the same header timeout as the gateway, answering
/// `/healthz` with `ok` and anything else with a JSON body of `--floor-body-bytes` bytes.
async fn floor_server(address: &str, args: &Args) -> Result<(), BoxError> {
    let listener = TcpListener::bind(address).await?;
    let json = Bytes::from(format!(
        "{{\"data\":\"{}\"}}",
        "x".repeat(args.floor_body_bytes.saturating_sub(11))
    ));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(args.idle_hold_ms));
    let builder = Arc::new(builder);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (builder, json) = (builder.clone(), json.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let body = if request.uri().path() == "/healthz" {
                    Bytes::from_static(b"ok\n")
                } else {
                    json.clone()
                };
                async move {
                    let mut response = Response::new(Full::new(body));
                    response
                        .headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = builder
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
