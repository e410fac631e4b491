//! Hot-key reads per second through `GET /v1/reads/{name}`, against raw Redis `GET`s of the same
//! bytes, measured in one run on one machine against the same Redis.
//!
//! One `[[read]]` (`offer`, one uuid parameter) whose origin is a tiny HTTP server in this binary
//! that counts its calls. The key is read once (the one origin call) and warmed for a second at
//! full concurrency. Then, rounds alternating so drift of the shared machine hits every mode
//! alike, each for `--seconds` from `--concurrency` closed-loop callers:
//! - gateway: `GET /v1/reads/offer?id=…` over HTTP/1.1 keep-alive, one connection per caller, to
//!   an in-process gateway (authentication, the read cache: L1 → Redis → origin, the JSON);
//! - in process: `ReadCache::get` called directly with the same key (no HTTP, no
//!   authentication, no JSON), to split the gateway's time between the cache and the rest;
//! - baseline: raw Redis `GET` of a key holding the gateway's response body (the same bytes),
//!   through a fred pool of `--redis-pool` connections (the gateway's own pool has 4).
//!
//! Reported: each round's rate, the medians, the ratio gateway / baseline, the origin's calls
//! and which layer served (the gateway's `reads.stats` counters). Loopback only; the scratch
//! database and the tenant's Redis keys are removed afterwards.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use fred::interfaces::KeysInterface;
use http_body_util::{BodyExt, Empty, Full};
use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_gateway::reads::{CacheStats, ReadCall};
use sluice_loadtest::bench_stack::prelude::*;
use sluice_redis::AppKeys;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;

#[derive(Debug, Parser)]
#[command(about = "Hot-key reads per second through the gateway versus raw Redis GETs")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Concurrent closed-loop callers (HTTP/1.1 keep-alive connections for the gateway).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds per round and mode.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Rounds per mode (alternating).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Connections of the baseline's fred pool.
    #[arg(long, default_value_t = 4)]
    redis_pool: usize,
    /// Skip the in-process `ReadCache::get` mode.
    #[arg(long)]
    no_in_process: bool,
}

/// The origin's answer: one offer.
const ORIGIN_BODY: &str = r#"{"items":[{"id":"7f1c2a4e-0b7d-4a4e-9d43-52f5a0c1e9b1","title":"Bench offer","price_cents":1999,"currency":"EUR","stock":42,"tags":["hot","bench"]}]}"#;
const OFFER: &str = "7f1c2a4e-0b7d-4a4e-9d43-52f5a0c1e9b1";

fn declaration(origin: SocketAddr) -> String {
    format!(
        r#"
[[read]]
name = "offer"
origin = "http://{origin}/offers/{{id}}"
parameters = {{ id = {{ type = "uuid" }} }}
fresh_seconds = 60
stale_seconds = 60
"#
    )
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.servers.check()?;
    if args.rounds == 0 || args.concurrency == 0 || args.redis_pool == 0 || args.seconds <= 0.0 {
        return Err("--rounds, --concurrency, --redis-pool and --seconds must be positive".into());
    }
    let origin_calls = Arc::new(AtomicU64::new(0));
    let floor = Arc::new(OnceLock::new());
    let origin = start_origin(origin_calls.clone(), floor.clone()).await?;
    with_scratch_tenant(&args.servers, 8, &declaration(origin), async |tenant| {
        rounds(&args, tenant, origin, &origin_calls, &floor).await
    })
    .await
}

/// The origin: `/offers/…` answers [`ORIGIN_BODY`] and is counted; any other path (the HTTP
/// floor) answers `floor`'s bytes, uncounted.
async fn start_origin(
    calls: Arc<AtomicU64>,
    floor: Arc<OnceLock<Bytes>>,
) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (calls, floor) = (calls.clone(), floor.clone());
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<Incoming>| {
                    let body = if request.uri().path().starts_with("/offers/") {
                        calls.fetch_add(1, Ordering::Relaxed);
                        Bytes::from_static(ORIGIN_BODY.as_bytes())
                    } else {
                        floor.get().cloned().unwrap_or_default()
                    };
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(body))
                                .expect("a valid response"),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// The counters of the gateway's read cache, to take differences around a round.
#[derive(Debug, Clone, Copy, Default)]
struct Served {
    l1_hits: u64,
    hits: u64,
    stale: u64,
    misses: u64,
    origin_calls: u64,
}

impl Served {
    fn read(stats: &CacheStats) -> Self {
        Self {
            l1_hits: stats.l1_hits.load(Ordering::Relaxed),
            hits: stats.hits.load(Ordering::Relaxed),
            stale: stats.stale_serves.load(Ordering::Relaxed),
            misses: stats.misses.load(Ordering::Relaxed),
            origin_calls: stats.origin_calls.load(Ordering::Relaxed),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            l1_hits: self.l1_hits - before.l1_hits,
            hits: self.hits - before.hits,
            stale: self.stale - before.stale,
            misses: self.misses - before.misses,
            origin_calls: self.origin_calls - before.origin_calls,
        }
    }

    fn add(&mut self, other: Self) {
        self.l1_hits += other.l1_hits;
        self.hits += other.hits;
        self.stale += other.stale;
        self.misses += other.misses;
        self.origin_calls += other.origin_calls;
    }

    fn cell(self) -> String {
        format!(
            "L1 {}, Redis {}, stale {}, miss {}",
            self.l1_hits, self.hits, self.stale, self.misses
        )
    }
}

/// One mode's round: answers per second and answers that were wrong.
struct Rate {
    per_second: f64,
    reads: u64,
    failed: u64,
}

/// CPU seconds used so far by this process (load tool and gateway) and by the Redis server.
#[derive(Debug, Clone, Copy)]
struct Cpu {
    process: f64,
    redis: f64,
}

impl Cpu {
    async fn read(pool: &fred::prelude::Pool) -> Result<Self, BoxError> {
        // utime and stime, fields 14 and 15 of /proc/self/stat, in clock ticks (100 a second).
        let stat = std::fs::read_to_string("/proc/self/stat")?;
        let after_name = stat.rsplit_once(')').ok_or("unreadable /proc/self/stat")?.1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
        let info: String = fred::interfaces::ClientLike::custom(
            pool.next(),
            fred::types::CustomCommand::new_static("INFO", None, false),
            vec!["cpu"],
        )
        .await?;
        let redis = info
            .lines()
            .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
            .filter_map(|l| l.split_once(':')?.1.trim().parse::<f64>().ok())
            .sum();
        Ok(Self {
            process: ticks / 100.0,
            redis,
        })
    }

    /// `µs of this process + µs of Redis per read` since `before`.
    fn per_read(self, before: Self, reads: u64) -> String {
        let us = |s: f64| s * 1e6 / reads.max(1) as f64;
        format!(
            "CPU/read {:.1} µs here + {:.1} µs Redis",
            us(self.process - before.process),
            us(self.redis - before.redis)
        )
    }
}

async fn rounds(
    args: &Args,
    tenant: &Tenant,
    origin: SocketAddr,
    origin_calls: &AtomicU64,
    floor: &OnceLock<Bytes>,
) -> Result<(), BoxError> {
    let running = RunningGateway::start(tenant, GatewayConfig::default()).await?;
    let gateway = running.gateway.clone();
    let addr: SocketAddr = running.base.trim_start_matches("http://").parse()?;
    let path = format!("/v1/reads/offer?id={OFFER}");
    let bearer = format!("Bearer {}", tenant.creds.credential);

    // The first read: a miss, the one origin call; its body is the baseline's value.
    let mut probe = connect(addr).await?;
    let first = get(&mut probe, &path, &bearer).await?;
    let body: serde_json::Value = serde_json::from_slice(&first)?;
    if body["data"]["items"][0]["id"] != OFFER || body["data"]["freshness"] != "fresh" {
        return Err(format!("unexpected first read: {body}").into());
    }
    let value = first.clone();
    let _ = floor.set(value.clone());
    let baseline_key = format!(
        "{}bench-read-baseline",
        AppKeys::new(tenant.creds.application_id)
            .pattern()
            .trim_end_matches('*')
    );
    let pool = sluice_redis::connect_redis(&args.servers.redis_url, args.redis_pool)
        .await?
        .pool()
        .clone();
    pool.next()
        .set::<(), _, _>(&baseline_key, value.clone(), None, None, false)
        .await?;
    // The cache key the handler used, for the in-process mode.
    let entry = entry_key(tenant).await?;
    let stats = gateway.reads.stats.clone();

    let version: String = {
        let info: String = fred::interfaces::ClientLike::custom(
            pool.next(),
            fred::types::CustomCommand::new_static("INFO", None, false),
            vec!["server"],
        )
        .await?;
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    println!(
        "read benchmark: {} callers, {} rounds x {:.1} s per mode, {} CPUs, Redis {version}; \
         value {} bytes as the gateway answers it ({} bytes of items); baseline pool {} \
         connections",
        args.concurrency,
        args.rounds,
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        value.len(),
        serde_json::to_string(&body["data"]["items"])?.len(),
        args.redis_pool,
    );

    let duration = Duration::from_secs_f64(args.seconds);
    // Warm-up: connections, the L1 copy, the script cache.
    http_round(
        addr,
        &path,
        &bearer,
        args.concurrency,
        Duration::from_secs(1),
    )
    .await?;
    redis_round(
        &pool,
        &baseline_key,
        value.len(),
        args.concurrency,
        Duration::from_millis(500),
    )
    .await?;

    let mut modes: Vec<Mode> = vec![
        Mode::new("gateway GET /v1/reads/offer (HTTP/1.1 keep-alive)"),
        Mode::new("HTTP floor: the same client against a bare hyper server, same bytes"),
        Mode::new("in-process ReadCache::get (no HTTP, auth, JSON)"),
        Mode::new(&format!(
            "baseline: raw Redis GET, fred pool of {}",
            args.redis_pool
        )),
    ];
    if args.no_in_process {
        modes[2].skip = true;
    }
    let floor_path = "/floor";
    for r in 0..args.rounds {
        for (m, mode) in modes.iter_mut().enumerate() {
            if mode.skip {
                continue;
            }
            let before = Served::read(&stats);
            let cpu = Cpu::read(&pool).await?;
            let rate = match m {
                0 => http_round(addr, &path, &bearer, args.concurrency, duration).await?,
                1 => http_round(origin, floor_path, &bearer, args.concurrency, duration).await?,
                2 => in_process_round(&running, tenant, &entry, args.concurrency, duration).await?,
                _ => {
                    redis_round(
                        &pool,
                        &baseline_key,
                        value.len(),
                        args.concurrency,
                        duration,
                    )
                    .await?
                }
            };
            let cpu_cell = Cpu::read(&pool).await?.per_read(cpu, rate.reads);
            let served = Served::read(&stats).since(before);
            mode.served.add(served);
            mode.rates.push(rate.per_second);
            let served_cell = if m == 0 || m == 2 {
                format!("{}; ", served.cell())
            } else {
                String::new()
            };
            println!(
                "round {} {}: {:.0}/s ({served_cell}{cpu_cell}{})",
                r + 1,
                mode.short(),
                rate.per_second,
                failed(rate.failed)
            );
        }
    }
    let _ = pool.next().del::<u64, _>(&baseline_key).await;
    let _ = fred::interfaces::ClientLike::quit(&pool).await;

    println!();
    println!(
        "| measured ({} callers, {:.0} s rounds) | reads/s per round | median reads/s |",
        args.concurrency, args.seconds
    );
    println!("| --- | --- | ---: |");
    for mode in modes.iter().filter(|m| !m.skip) {
        println!(
            "| {} | {} | {:.0} |",
            mode.name,
            rates_cell(mode.rates.iter().copied()),
            median(mode.rates.clone())
        );
    }
    let gateway_median = median(modes[0].rates.clone());
    println!();
    println!(
        "ratio gateway / raw Redis GET: {:.2}x; gateway / HTTP floor: {:.2}x",
        gateway_median / median(modes[3].rates.clone()),
        gateway_median / median(modes[1].rates.clone()),
    );
    println!(
        "served over the gateway's timed rounds: {} (origin calls by the cache {})",
        modes[0].served.cell(),
        modes[0].served.origin_calls
    );
    if !args.no_in_process {
        println!(
            "served over the in-process rounds: {}",
            modes[2].served.cell()
        );
    }
    println!(
        "origin calls received over the whole run: {}",
        origin_calls.load(Ordering::Relaxed)
    );
    Ok(())
}

/// One measured mode: its rates per round and what the cache served in it.
struct Mode {
    name: String,
    rates: Vec<f64>,
    served: Served,
    skip: bool,
}

impl Mode {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            rates: Vec::new(),
            served: Served::default(),
            skip: false,
        }
    }

    /// The name up to its first space-separated parenthesis or colon.
    fn short(&self) -> &str {
        self.name
            .split([':', '('])
            .next()
            .unwrap_or(&self.name)
            .trim()
    }
}

fn failed(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(", {n} FAILED")
    }
}

/// The entry key the handler filled (the read's only one).
async fn entry_key(tenant: &Tenant) -> Result<String, BoxError> {
    let prefix = AppKeys::new(tenant.creds.application_id).cache_entry(
        tenant.creds.namespace_id,
        "offer",
        "",
    );
    let (_, keys): (String, Vec<String>) = tenant
        .redis
        .pool()
        .next()
        .scan_page("0", format!("{prefix}*"), Some(10_000), None)
        .await?;
    let mut entries: Vec<String> = keys.into_iter().filter(|k| !k.ends_with(":fill")).collect();
    match entries.len() {
        1 => Ok(entries.remove(0)),
        n => Err(format!("{n} cache entries of the read, expected 1: {entries:?}").into()),
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn connect(addr: SocketAddr) -> Result<Sender, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One keep-alive `GET`; the body of a `200`, or an error.
async fn get(sender: &mut Sender, path: &str, bearer: &str) -> Result<Bytes, BoxError> {
    sender.ready().await?;
    let request = Request::get(path)
        .header("host", "127.0.0.1")
        .header("authorization", bearer)
        .body(Empty::new())?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if status != hyper::StatusCode::OK {
        return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    Ok(body)
}

/// `concurrency` callers, each on its own connection, reading for `duration`.
async fn http_round(
    addr: SocketAddr,
    path: &str,
    bearer: &str,
    concurrency: usize,
    duration: Duration,
) -> Result<Rate, BoxError> {
    let mut senders = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        senders.push(connect(addr).await?);
    }
    let start = Arc::new(Barrier::new(concurrency + 1));
    let mut tasks = Vec::with_capacity(concurrency);
    for mut sender in senders {
        let (start, path, bearer) = (start.clone(), path.to_string(), bearer.to_string());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + duration;
            let (mut ok, mut failed) = (0u64, 0u64);
            while Instant::now() < deadline {
                match get(&mut sender, &path, &bearer).await {
                    Ok(body) if !body.is_empty() => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    collect(start, tasks).await
}

/// The same callers calling the gateway's cache directly, as the handler does once it has
/// authenticated and checked the query.
async fn in_process_round(
    running: &RunningGateway,
    tenant: &Tenant,
    entry: &str,
    concurrency: usize,
    duration: Duration,
) -> Result<Rate, BoxError> {
    let gateway = running.gateway.clone();
    let namespace = gateway
        .namespace(tenant.creds.namespace_id)
        .await
        .map_err(|e| format!("namespace: {e:?}"))?;
    let decl = namespace.declaration.reads[0].clone();
    let keys = sluice_redis::cache::EntryKeys {
        entry: entry.to_string(),
        lease: AppKeys::cache_lease(entry),
        dependencies: vec![],
    };
    let url = decl.origin.replace("{id}", OFFER);
    let (application_id, namespace_id) = (tenant.creds.application_id, tenant.creds.namespace_id);
    let start = Arc::new(Barrier::new(concurrency + 1));
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (start, gateway, keys, url, decl) = (
            start.clone(),
            gateway.clone(),
            keys.clone(),
            url.clone(),
            decl.clone(),
        );
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + duration;
            let (mut ok, mut failed) = (0u64, 0u64);
            while Instant::now() < deadline {
                let call = ReadCall::of(
                    &decl,
                    application_id,
                    namespace_id,
                    keys.clone(),
                    url.clone(),
                );
                match gateway.reads.get(&gateway.redis, call).await {
                    Ok(view) if !view.entry.body.is_empty() => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    collect(start, tasks).await
}

/// The same callers reading the baseline key with raw `GET`s through the pool.
async fn redis_round(
    pool: &fred::prelude::Pool,
    key: &str,
    len: usize,
    concurrency: usize,
    duration: Duration,
) -> Result<Rate, BoxError> {
    let start = Arc::new(Barrier::new(concurrency + 1));
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (start, pool, key) = (start.clone(), pool.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + duration;
            let (mut ok, mut failed) = (0u64, 0u64);
            while Instant::now() < deadline {
                match pool.next().get::<Bytes, _>(key.as_str()).await {
                    Ok(value) if value.len() == len => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    collect(start, tasks).await
}

/// Starts the callers together and sums their answers over the round's wall time.
async fn collect(
    start: Arc<Barrier>,
    tasks: Vec<tokio::task::JoinHandle<(u64, u64)>>,
) -> Result<Rate, BoxError> {
    start.wait().await;
    let started = Instant::now();
    let (mut ok, mut failed) = (0u64, 0u64);
    for task in tasks {
        let (o, f) = task.await?;
        ok += o;
        failed += f;
    }
    Ok(Rate {
        per_second: ok as f64 / started.elapsed().as_secs_f64(),
        reads: ok,
        failed,
    })
}
