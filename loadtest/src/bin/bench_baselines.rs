//! Sluice against the baselines it claims to beat or approach, measured in one run on one machine
//! against the same PostgreSQL and Redis (loopback only), with the ratios and their targets.
//!
//! Three pairs, each measured with the same closed-loop client (`--concurrency` callers, one
//! HTTP/1.1 keep-alive connection each) for `--rounds` time-bounded rounds of `--seconds` per
//! side, the two sides alternating so drift of the shared machine hits both alike; the median
//! round of each side is compared:
//!
//! 1. Intake decisions: `POST /v1/commands/decide:enqueue` on a command whose intake bucket is
//!    empty (`per_second = 1, burst = 1`), so every answer is a whole `intake.lua` decision
//!    refused `429 RATE_LIMITED` (auth, strict JSON, key derivation, the script, the error
//!    envelope), against the ceiling: the same `intake.lua` call with the same keys and budget
//!    through `projection::intake::intake` (EVALSHA, fred pipelining concurrent calls on a pool of
//!    the gateway's size) from as many tokio tasks, no HTTP. The bucket refills one token a
//!    second, so about one decision a second is an acceptance; those are allowed (and counted),
//!    nothing else is.
//! 2. Durable acceptances: `POST /v1/commands/claim:enqueue`, every one accepted `202` (group
//!    commit in its default configuration, no executor), against the counter-row admission users
//!    build today: a hyper handler that parses the same body and, in one transaction per request
//!    on a pool of the same size, decrements a stock row and inserts the claim. Plus the ceiling
//!    of PostgreSQL itself for the group commit's transaction: `pgbench` running the same
//!    multi-row INSERT (`loadtest/baselines/group_commit_insert.pgbench.sql`) with the batch size
//!    the gateway reached, in rows per second. Afterwards the rows are counted: every `202` must
//!    have its row.
//! 3. Ticket polls: `GET /v1/tickets/{ticket}` round-robin over waiting commands, against a bare
//!    hyper server answering the exact bytes and headers of one real poll answer (the HTTP floor).
//!
//! Targets are reported, not enforced: the exit status is non-zero only when the measurement
//! itself went wrong (an unexpected status, a lost acceptance, a failing pgbench). The scratch
//! database is dropped, the tenant's Redis keys deleted and pgbench killed, whatever happened.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{DATE, HeaderMap, TRANSFER_ENCODING};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sluice_durable::db;
use sluice_durable::projection::intake::{IntakeRequest, IntakeVerdict, intake};
use sluice_durable::projection::settle::{Release, release};
use sluice_durable::projection::{self, AppKeys, Scripts, request_key_field};
use sluice_durable::secrets::sha256;
use sluice_durable::tenancy::NamespaceConfig;
use sluice_gateway::config::GatewayConfig;
use sluice_loadtest::bench_stack::{
    BoxError, RunningGateway, ScratchDatabase, Servers, Tenant, median, rates_cell,
};
use sqlx::PgPool;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[derive(Debug, Parser)]
#[command(about = "Sluice against its baselines: intake decisions, durable acceptances, polls")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Concurrent closed-loop callers (one keep-alive connection or task each), every side.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds per round and side.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Rounds per side (alternating between the two sides of a pair).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// PostgreSQL connections of the gateway, and of the naive server's pool.
    #[arg(long, default_value_t = 16)]
    connections: u32,
    /// Connections of the raw intake baseline's fred pool (the gateway's Redis pool has 4).
    #[arg(long, default_value_t = 4)]
    redis_pool: usize,
    /// Waiting commands whose tickets are polled round-robin.
    #[arg(long, default_value_t = 1_000)]
    tickets: u64,
    /// The pgbench binary; by default the newest /usr/lib/postgresql/*/bin/pgbench, else the
    /// one on PATH.
    #[arg(long)]
    pgbench: Option<PathBuf>,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Args {
    fn check(&self) -> Result<(), BoxError> {
        self.servers.check()?;
        if self.rounds == 0
            || self.concurrency == 0
            || self.connections == 0
            || self.redis_pool == 0
            || self.tickets == 0
            || self.seconds <= 0.0
        {
            return Err(
                "--rounds, --concurrency, --connections, --redis-pool, --tickets and \
                        --seconds must be positive"
                    .into(),
            );
        }
        Ok(())
    }

    fn round(&self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }

    /// Warm-up per side before a pair's rounds: connections, caches, script loads, JIT-free but
    /// cold paths (a third of a round, at most a second).
    fn warmup(&self) -> Duration {
        Duration::from_secs_f64((self.seconds / 3.0).min(1.0))
    }
}

/// The command refused by its empty intake bucket (pair 1).
const DECIDE: &str = "decide";
/// The command every enqueue of which is accepted (pair 2).
const CLAIM: &str = "claim";
/// The command whose waiting instances are polled (pair 3), apart so pair 2's row count is exact.
const HOLD: &str = "hold";
/// The offer of every intake decision, so its content digest is one constant.
const OFFER: &str = "7f1c2a4e-0b7d-4a4e-9d43-52f5a0c1e9b1";
/// The `Host` header of every request (connections are made to a socket address).
const HOST: &str = "127.0.0.1";

const DECLARATION: &str = r#"
[[command]]
code = "decide"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 1, burst = 1, max_in_flight = 1000000 }
admission = { max_queue = 100000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[command]]
code = "claim"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 10000000, burst = 10000000, max_in_flight = 1000000 }
admission = { max_queue = 100000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[command]]
code = "hold"
parameters = { offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 10000000, burst = 10000000, max_in_flight = 1000000 }
admission = { max_queue = 100000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[namespace]
max_waiting = 100000000

[[quota_pool]]
code = "stock"
capacity = 100
"#;

/// The naive admission's tables: one counter row, one claims table with the uniqueness an
/// idempotent API needs (the `commands` table has its own).
const NAIVE_SCHEMA: [&str; 3] = [
    "CREATE TABLE naive_stock (id int PRIMARY KEY, used bigint NOT NULL, cap bigint NOT NULL)",
    "INSERT INTO naive_stock (id, used, cap) VALUES (1, 0, 1000000000000)",
    "CREATE TABLE naive_claims (id uuid PRIMARY KEY, subject text NOT NULL,
                                request_key text NOT NULL, offer uuid NOT NULL,
                                created_at timestamptz NOT NULL, UNIQUE (subject, request_key))",
];

/// The group commit's transaction for pgbench (see the file's header).
const PGBENCH_SCRIPT: &str = include_str!("../../baselines/group_commit_insert.pgbench.sql");

/// Every enqueue of the run gets its own number: unique request keys and subjects across sides,
/// rounds and pairs.
static SEQUENCE: AtomicU64 = AtomicU64::new(1);

fn next_number() -> u64 {
    SEQUENCE.fetch_add(1, Ordering::Relaxed)
}

fn request_key(n: u64) -> String {
    format!("r{n}")
}

fn subject(n: u64) -> String {
    format!("user-{n}")
}

fn enqueue_body(n: u64, offer: &str) -> String {
    format!(
        r#"{{"request_key":"{}","subject":"{}","input":{{"offer":"{offer}"}}}}"#,
        request_key(n),
        subject(n)
    )
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.check()?;
    let machine_before = Machine::read();
    let scratch = ScratchDatabase::create(&args.servers.database_url).await?;
    let result = measure(&args, &scratch.url).await;
    let dropped = scratch.drop_now().await;
    let outcome = result?;
    dropped?;
    let report = Report {
        machine_before,
        machine_after: Machine::read(),
        outcome,
    };
    report.print(&args);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json(&args))?)?;
        println!("\nJSON written to {}", path.display());
    }
    match &report.outcome.problem {
        Some(problem) => Err(problem.clone().into()),
        None => Ok(()),
    }
}

/// Creates the tenant, runs the pairs, and deletes the tenant's Redis keys whatever happened.
async fn measure(args: &Args, database_url: &str) -> Result<Outcome, BoxError> {
    let tenant = Tenant::create(
        database_url,
        &args.servers.redis_url,
        args.connections,
        DECLARATION,
    )
    .await?;
    let result = with_servers(args, &tenant, database_url).await;
    let closed = tenant.close().await;
    let outcome = result?;
    closed?;
    Ok(outcome)
}

/// Starts the gateway and the baseline server, runs the pairs, and stops both.
async fn with_servers(
    args: &Args,
    tenant: &Tenant,
    database_url: &str,
) -> Result<Outcome, BoxError> {
    let gateway = RunningGateway::start(tenant, GatewayConfig::default()).await?;
    let naive = db::connect(database_url, args.connections).await?;
    for statement in NAIVE_SCHEMA {
        sqlx::query(statement).execute(&naive).await?;
    }
    let baseline = BaselineServer::start(naive.clone()).await?;
    let result = run_pairs(args, tenant, database_url, &gateway, &baseline).await;
    baseline.shutdown.cancel();
    naive.close().await;
    gateway.gateway.committer.close().await;
    drop(gateway);
    result
}

/// What the pairs share: the servers, the caller's credential, the tenant's namespace.
struct Bench<'a> {
    args: &'a Args,
    tenant: &'a Tenant,
    /// The scratch database, for pgbench.
    database_url: &'a str,
    gateway: &'a RunningGateway,
    gateway_addr: SocketAddr,
    baseline: &'a BaselineServer,
    bearer: String,
    namespace: Arc<NamespaceConfig>,
}

async fn run_pairs(
    args: &Args,
    tenant: &Tenant,
    database_url: &str,
    gateway: &RunningGateway,
    baseline: &BaselineServer,
) -> Result<Outcome, BoxError> {
    let namespace = gateway
        .gateway
        .namespace(tenant.creds.namespace_id)
        .await
        .map_err(|e| format!("the namespace's configuration: {e:?}"))?;
    let bench = Bench {
        args,
        tenant,
        database_url,
        gateway,
        gateway_addr: gateway.base.trim_start_matches("http://").parse()?,
        baseline,
        bearer: format!("Bearer {}", tenant.creds.credential),
        namespace,
    };
    println!(
        "baselines benchmark: {} callers, {} rounds x {:.1} s per side (alternating), {} \
         PostgreSQL connections, Redis pool {} (gateway 4), {} tickets; application {}",
        args.concurrency,
        args.rounds,
        args.seconds,
        args.connections,
        args.redis_pool,
        args.tickets,
        tenant.creds.application_id
    );
    let versions = Versions::read(tenant).await?;
    let mut comparisons = vec![intake_pair(&bench).await?];
    let durable = durable_pair(&bench).await?;
    comparisons.push(durable.naive);
    comparisons.push(pgbench_ceiling(&bench, durable.sluice, durable.batch).await);
    comparisons.push(poll_pair(&bench).await?);
    let problem = comparisons.iter().find_map(|c| c.problem.clone());
    Ok(Outcome {
        versions,
        comparisons,
        problem,
    })
}

// ---------------------------------------------------------------------------------------------
// Pair 1: intake decisions.

/// `--rounds` alternating rounds of HTTP decisions and raw `intake.lua` calls on one bucket.
async fn intake_pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let args = bench.args;
    let path = format!("/v1/commands/{DECIDE}:enqueue");
    // The bucket starts full with its one token: the first enqueue takes it.
    let first = send_once(bench.gateway_addr, decide_request(&path, &bench.bearer)).await?;
    if first.0 != StatusCode::ACCEPTED {
        return Err(format!("the first decision was {}, not 202: {:?}", first.0, first.1).into());
    }
    let since = Instant::now();
    let budget = bench
        .namespace
        .declaration
        .command(DECIDE)
        .ok_or("the declaration lost its decide command")?
        .intake;
    let raw = RawIntake::new(bench).await?;
    let make = {
        let (path, bearer) = (path.clone(), bench.bearer.clone());
        Arc::new(move || decide_request(&path, &bearer)) as MakeRequest
    };
    let check = Some((429, "\"RATE_LIMITED\""));
    let mut sluice = Side::new("gateway: HTTP 429 RATE_LIMITED decisions");
    let mut ceiling = Side::new(&format!(
        "raw EVALSHA intake.lua, fred pool of {}",
        args.redis_pool
    ));
    let mut accepted = 0;
    let warm = http_round(bench.gateway_addr, args, args.warmup(), &make, check).await?;
    accepted += warm
        .expect_only(&[202, 429], "warm-up decision")?
        .count(202);
    accepted += raw.round(args.concurrency, args.warmup()).await?.reserved;
    for r in 0..args.rounds {
        let round = http_round(bench.gateway_addr, args, args.round(), &make, check).await?;
        round.expect_only(&[202, 429], "decision")?;
        accepted += round.count(202);
        sluice.push_http(&round, 429);
        let raw_round = raw.round(args.concurrency, args.round()).await?;
        accepted += raw_round.reserved;
        ceiling.push(raw_round.per_second(), raw_round.limited, raw_round.cpu);
        println!(
            "intake round {}: HTTP {:.0}/s ({} accepted as the bucket refilled), raw {:.0}/s \
             ({} reserved)",
            r + 1,
            sluice.last(),
            round.count(202),
            ceiling.last(),
            raw_round.reserved
        );
    }
    // One refill a second (and the odd token of the first and last partial second).
    let refills = (since.elapsed().as_secs_f64() * f64::from(budget.per_second)).ceil() as u64
        + u64::from(budget.burst);
    if accepted > refills {
        return Err(format!(
            "{accepted} decisions were acceptances; the bucket refilled at most {refills} tokens"
        )
        .into());
    }
    let _ = fred::interfaces::ClientLike::quit(&raw.pool).await;
    Ok(Comparison::new(
        "intake decisions/s (HTTP 429 RATE_LIMITED vs raw EVALSHA intake.lua)",
        sluice,
        ceiling,
        Some(0.5),
    ))
}

fn decide_request(path: &str, bearer: &str) -> Request<Full<Bytes>> {
    post(path, bearer, enqueue_body(next_number(), OFFER))
}

fn post(path: &str, bearer: &str, body: String) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", HOST)
        .header("authorization", bearer)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a request of a static method, a valid path and valid headers")
}

/// The raw ceiling of pair 1: what the gateway's handler sends to Redis for one decision, built
/// the same way (`enqueue.rs`: `Attempt::intake`), without HTTP, auth or JSON.
#[derive(Clone)]
struct RawIntake {
    pool: fred::prelude::Pool,
    scripts: Scripts,
    namespace: Arc<NamespaceConfig>,
    digest_hex: Arc<str>,
    reservation_ttl_ms: u64,
}

/// One raw round: refusals (the decisions counted) and acceptances (given back at once).
struct RawRound {
    limited: u64,
    reserved: u64,
    elapsed: Duration,
    cpu: Cpu,
}

impl RawRound {
    fn per_second(&self) -> f64 {
        self.limited as f64 / self.elapsed.as_secs_f64()
    }
}

impl RawIntake {
    async fn new(bench: &Bench<'_>) -> Result<Self, BoxError> {
        let pool =
            projection::connect_redis(&bench.args.servers.redis_url, bench.args.redis_pool).await?;
        // The gateway's content digest: the command, a NUL and the input in canonical JSON.
        let input = json!({ "offer": OFFER }).to_string();
        let mut content = Vec::with_capacity(DECIDE.len() + 1 + input.len());
        content.extend_from_slice(DECIDE.as_bytes());
        content.push(0);
        content.extend_from_slice(input.as_bytes());
        Ok(Self {
            pool,
            scripts: Scripts::new(),
            namespace: bench.namespace.clone(),
            digest_hex: lower_hex(&sha256(&content)).into(),
            reservation_ttl_ms: bench.gateway.gateway.config.reservation_ttl_ms,
        })
    }

    /// `concurrency` tasks calling `intake.lua` for `duration`, each with a fresh request key.
    async fn round(&self, concurrency: usize, duration: Duration) -> Result<RawRound, BoxError> {
        let start = Arc::new(Barrier::new(concurrency + 1));
        let mut tasks = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            let (raw, start) = (self.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                raw.decide_until(Instant::now() + duration).await
            }));
        }
        let cpu = Cpu::read();
        start.wait().await;
        let started = Instant::now();
        let (mut limited, mut reserved) = (0, 0);
        for task in tasks {
            let (l, r) = task.await??;
            limited += l;
            reserved += r;
        }
        Ok(RawRound {
            limited,
            reserved,
            elapsed: started.elapsed(),
            cpu: Cpu::read().since(cpu),
        })
    }

    /// Decides until `deadline`: (refused, reserved and released).
    async fn decide_until(&self, deadline: Instant) -> Result<(u64, u64), BoxError> {
        let decl = self
            .namespace
            .declaration
            .command(DECIDE)
            .ok_or("the declaration lost its decide command")?;
        let keys = AppKeys::new(self.namespace.application_id);
        let (mut limited, mut reserved) = (0, 0);
        while Instant::now() < deadline {
            let n = next_number();
            let field = request_key_field(&subject(n), &request_key(n));
            let command_id = Uuid::now_v7();
            let request = IntakeRequest {
                keys: &keys,
                min_generation: self.namespace.generation,
                namespace_id: self.namespace.namespace_id,
                command: &decl.code,
                request_key_field: &field,
                content_sha256_hex: &self.digest_hex,
                command_id,
                max_unfinished: self.namespace.max_unfinished,
                max_waiting: self.namespace.declaration.namespace.max_waiting,
                max_queue: decl.admission.max_queue,
                intake: &decl.intake,
                reservation_ttl_ms: self.reservation_ttl_ms,
            };
            match intake(&self.pool, &self.scripts, &request).await? {
                IntakeVerdict::RateLimited { .. } => limited += 1,
                IntakeVerdict::Reserved { .. } => {
                    self.give_back(&keys, command_id, &field).await?;
                    reserved += 1;
                }
                other => return Err(format!("raw intake.lua answered {other:?}").into()),
            }
        }
        Ok((limited, reserved))
    }

    /// A refill's token became a reservation: give it back, as a refused commit would.
    async fn give_back(
        &self,
        keys: &AppKeys,
        command_id: Uuid,
        field: &str,
    ) -> Result<(), BoxError> {
        let give = Release {
            command_id,
            namespace_id: self.namespace.namespace_id,
            command: DECIDE,
            request_key_field: field,
            existing: None,
        };
        release(&self.pool, &self.scripts, keys, &give).await?;
        Ok(())
    }
}

fn lower_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------
// Pair 2: durable acceptances.

/// Pair 2's results: the comparison with the naive server, the Sluice side again for the
/// pgbench ceiling, and the commands per group-commit batch the gateway reached.
struct Durable {
    naive: Comparison,
    sluice: Side,
    batch: u64,
}

/// `--rounds` alternating rounds of Sluice acceptances and naive counter-row transactions, then
/// the count of rows against the `202`s.
async fn durable_pair(bench: &Bench<'_>) -> Result<Durable, BoxError> {
    let args = bench.args;
    let offers: Arc<Vec<String>> = Arc::new((0..64).map(|_| Uuid::new_v4().to_string()).collect());
    let make = {
        let (path, bearer) = (
            format!("/v1/commands/{CLAIM}:enqueue"),
            bench.bearer.clone(),
        );
        Arc::new(move || {
            let n = next_number();
            post(&path, &bearer, enqueue_body(n, &offers[(n % 64) as usize]))
        }) as MakeRequest
    };
    let mut sluice = Side::new("gateway: HTTP 202, group commit");
    let mut naive = Side::new("naive: one transaction per request, counter row + INSERT");
    let (mut sluice_202, mut naive_202) = (0, 0);
    let (mut batches, mut commands) = (0, 0);
    let gateway = bench.gateway_addr;
    let baseline = bench.baseline.addr;
    sluice_202 += http_round(gateway, args, args.warmup(), &make, None)
        .await?
        .expect_only(&[202], "warm-up acceptance")?
        .count(202);
    naive_202 += http_round(baseline, args, args.warmup(), &make, None)
        .await?
        .expect_only(&[202], "warm-up naive acceptance")?
        .count(202);
    for r in 0..args.rounds {
        let stats_before = CommitStats::read(bench.gateway);
        let round = http_round(gateway, args, args.round(), &make, None).await?;
        let stats = CommitStats::read(bench.gateway).since(stats_before);
        sluice_202 += round.expect_only(&[202], "acceptance")?.count(202);
        sluice.push_http(&round, 202);
        (batches, commands) = (batches + stats.batches, commands + stats.commands);
        let naive_round = http_round(baseline, args, args.round(), &make, None).await?;
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
            Some(5.0),
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

/// PostgreSQL's own ceiling for the group commit's transaction at the batch size the gateway
/// reached; never fails the run when pgbench is missing, only when it ran and failed.
async fn pgbench_ceiling(bench: &Bench<'_>, sluice: Side, batch: u64) -> Comparison {
    let name = format!(
        "durable acceptances/s (HTTP 202 vs pgbench group-commit INSERT rows/s, {batch} rows per \
         transaction)"
    );
    let mut ceiling = Side::new(&format!(
        "pgbench: the group commit's transaction, {batch} rows, -c 4 -j 2 -M prepared"
    ));
    let Some(pgbench) = find_pgbench(bench.args.pgbench.as_deref()) else {
        println!(
            "pgbench: not found (neither /usr/lib/postgresql/*/bin/pgbench nor on PATH): skipped"
        );
        return Comparison::skipped(&name, sluice, ceiling, "pgbench not found");
    };
    match pgbench_rounds(bench, &pgbench, batch, &mut ceiling).await {
        Ok(()) => Comparison::new(&name, sluice, ceiling, None),
        Err(error) => {
            println!("pgbench failed: {error}");
            let mut comparison = Comparison::skipped(&name, sluice, ceiling, "pgbench failed");
            comparison.problem = Some(format!("pgbench failed: {error}"));
            comparison
        }
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin/pgbench`, else `pgbench` on `PATH`.
fn find_pgbench(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = explicit {
        return Some(path.to_path_buf());
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .ok()
        .and_then(|dir| {
            dir.filter_map(|entry| {
                let entry = entry.ok()?;
                let version: u32 = entry.file_name().to_str()?.parse().ok()?;
                let path = entry.path().join("bin/pgbench");
                path.is_file().then_some((version, path))
            })
            .max_by_key(|(version, _)| *version)
            .map(|(_, path)| path)
        });
    newest.or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|dir| dir.join("pgbench"))
            .find(|path| path.is_file())
    })
}

/// `--rounds` pgbench runs of `--seconds` (whole, at least one) each, in rows per second.
async fn pgbench_rounds(
    bench: &Bench<'_>,
    pgbench: &Path,
    batch: u64,
    ceiling: &mut Side,
) -> Result<(), BoxError> {
    let script = TempFile::write("pgbench.sql", PGBENCH_SCRIPT)?;
    let decl = bench
        .namespace
        .declaration
        .command(CLAIM)
        .ok_or("the declaration lost its claim command")?;
    let ns = bench.namespace.namespace_id;
    let defines = [
        ("control_lock", format!("sluice:control:{ns}")),
        ("app", bench.namespace.application_id.to_string()),
        ("ns", ns.to_string()),
        ("command", CLAIM.to_string()),
        ("offer", OFFER.to_string()),
        ("batch", batch.to_string()),
        ("deadline", decl.deadline_seconds.to_string()),
        ("max_wait", decl.admission.max_wait_seconds.to_string()),
    ];
    let seconds = bench.args.seconds.ceil().max(1.0) as u64;
    // Warm-up: connections, prepared statements, the table's and indexes' next pages.
    pgbench_run(pgbench, bench.database_url, &script.path, &defines, 1).await?;
    for r in 0..bench.args.rounds {
        let cpu = Cpu::read();
        let run = pgbench_run(pgbench, bench.database_url, &script.path, &defines, seconds).await?;
        let rows = run.tps * batch as f64;
        ceiling.push(rows, (rows * seconds as f64) as u64, Cpu::read().since(cpu));
        println!(
            "pgbench round {}: {:.1} transactions/s x {batch} = {:.0} rows/s (latency average \
             {} ms)",
            r + 1,
            run.tps,
            ceiling.last(),
            run.latency_ms.map_or("?".into(), |ms| format!("{ms:.1}"))
        );
    }
    Ok(())
}

/// What one pgbench run reported.
struct PgbenchRun {
    tps: f64,
    latency_ms: Option<f64>,
}

/// One pgbench run; its `tps = …` and `latency average = …` lines. Killed if it outlives its
/// duration by a minute.
async fn pgbench_run(
    pgbench: &Path,
    url: &str,
    script: &Path,
    defines: &[(&str, String)],
    seconds: u64,
) -> Result<PgbenchRun, BoxError> {
    let mut command = tokio::process::Command::new(pgbench);
    command
        .args(["-n", "-M", "prepared", "-c", "4", "-j", "2", "-T"])
        .arg(seconds.to_string())
        .arg("-f")
        .arg(script);
    for (name, value) in defines {
        command.arg("-D").arg(format!("{name}={value}"));
    }
    command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(seconds + 60), command.output())
        .await
        .map_err(|_| "pgbench did not finish in time (killed)")??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{}: {} {}",
            output.status,
            stdout.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    let number_after = |prefix: &str| -> Option<f64> {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|number| number.parse().ok())
    };
    Ok(PgbenchRun {
        tps: number_after("tps = ")
            .ok_or_else(|| format!("no tps line in pgbench's output: {stdout}"))?,
        latency_ms: number_after("latency average = "),
    })
}

/// A file in the temporary directory, removed when dropped.
struct TempFile {
    path: PathBuf,
}

impl TempFile {
    fn write(suffix: &str, contents: &str) -> Result<Self, BoxError> {
        let path = std::env::temp_dir().join(format!(
            "sluice-bench-baselines-{}-{suffix}",
            Uuid::new_v4().simple()
        ));
        std::fs::write(&path, contents)?;
        Ok(Self { path })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

// ---------------------------------------------------------------------------------------------
// Pair 3: ticket polls.

/// Enqueues `--tickets` waiting commands, captures one real poll answer for the static server,
/// then `--rounds` alternating rounds of round-robin polls and static answers.
async fn poll_pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let args = bench.args;
    let tickets = enqueue_tickets(bench).await?;
    let paths: Arc<Vec<String>> = Arc::new(
        tickets
            .iter()
            .map(|ticket| format!("/v1/tickets/{ticket}"))
            .collect(),
    );
    let captured = capture(bench.gateway_addr, &paths[0]).await?;
    println!(
        "poll answer captured for the static server: {} bytes, headers {}",
        captured.body.len(),
        captured
            .headers
            .keys()
            .map(|name| name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if bench.baseline.state.poll.set(captured).is_err() {
        return Err("the static poll answer was captured twice".into());
    }
    let next = Arc::new(AtomicU64::new(0));
    let make = Arc::new(move || {
        let i = next.fetch_add(1, Ordering::Relaxed) as usize % paths.len();
        Request::get(paths[i].as_str())
            .header("host", HOST)
            .body(Full::new(Bytes::new()))
            .expect("a request of a static method, a valid path and valid headers")
    }) as MakeRequest;
    let mut sluice = Side::new("gateway: GET /v1/tickets/{ticket}, round-robin");
    let mut floor = Side::new("static hyper server, the same bytes and headers");
    let (gateway, baseline) = (bench.gateway_addr, bench.baseline.addr);
    http_round(gateway, args, args.warmup(), &make, None)
        .await?
        .expect_only(&[200], "warm-up poll")?;
    http_round(baseline, args, args.warmup(), &make, None)
        .await?
        .expect_only(&[200], "warm-up static answer")?;
    for r in 0..args.rounds {
        let round = http_round(gateway, args, args.round(), &make, None).await?;
        sluice.push_http(round.expect_only(&[200], "poll")?, 200);
        let static_round = http_round(baseline, args, args.round(), &make, None).await?;
        floor.push_http(static_round.expect_only(&[200], "static answer")?, 200);
        println!(
            "poll round {}: gateway {:.0}/s, static {:.0}/s",
            r + 1,
            sluice.last(),
            floor.last()
        );
    }
    Ok(Comparison::new(
        "ticket polls/s (gateway GET /v1/tickets vs static hyper, same bytes)",
        sluice,
        floor,
        Some(0.6),
    ))
}

/// Enqueues `--tickets` commands of [`HOLD`] (no executor runs, so they wait) and returns their
/// tickets.
async fn enqueue_tickets(bench: &Bench<'_>) -> Result<Vec<String>, BoxError> {
    let total = bench.args.tickets;
    let callers = bench.args.concurrency.min(total as usize);
    let next = Arc::new(AtomicU64::new(0));
    let path = Arc::<str>::from(format!("/v1/commands/{HOLD}:enqueue"));
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        let mut sender = connect(bench.gateway_addr).await?;
        let (next, path, bearer) = (next.clone(), path.clone(), bench.bearer.clone());
        tasks.push(tokio::spawn(async move {
            let mut tickets = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let request = post(&path, &bearer, enqueue_body(next_number(), OFFER));
                let (status, body) = exchange(&mut sender, request).await?;
                let value: Value = serde_json::from_slice(&body)?;
                match (status, value["data"]["ticket"].as_str()) {
                    (StatusCode::ACCEPTED, Some(ticket)) => tickets.push(ticket.to_string()),
                    _ => return Err(format!("enqueue for a ticket: {status} {value}").into()),
                }
            }
            Ok::<_, BoxError>(tickets)
        }));
    }
    let mut tickets = Vec::with_capacity(total as usize);
    for task in tasks {
        tickets.extend(task.await??);
    }
    Ok(tickets)
}

/// One real answer of the gateway to `GET path`: status, headers (but `date`, which hyper adds
/// itself) and body.
async fn capture(addr: SocketAddr, path: &str) -> Result<Captured, BoxError> {
    let mut sender = connect(addr).await?;
    let request = Request::get(path)
        .header("host", HOST)
        .body(Full::new(Bytes::new()))?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let mut headers = response.headers().clone();
    headers.remove(DATE);
    headers.remove(TRANSFER_ENCODING);
    let body = response.into_body().collect().await?.to_bytes();
    if status != StatusCode::OK {
        return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    Ok(Captured {
        status,
        headers,
        body,
    })
}

// ---------------------------------------------------------------------------------------------
// The baseline server: the naive admission (POST) and the static poll answer (GET).

/// A recorded answer, replayed byte for byte.
struct Captured {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

struct BaselineState {
    naive: PgPool,
    poll: OnceLock<Captured>,
}

/// A bare hyper HTTP/1.1 server on an ephemeral loopback port, until `shutdown` is cancelled.
struct BaselineServer {
    addr: SocketAddr,
    state: Arc<BaselineState>,
    shutdown: CancellationToken,
}

impl BaselineServer {
    async fn start(naive: PgPool) -> Result<Self, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(BaselineState {
            naive,
            poll: OnceLock::new(),
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(accept_loop(listener, state.clone(), shutdown.clone()));
        Ok(Self {
            addr,
            state,
            shutdown,
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<BaselineState>,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            () = shutdown.cancelled() => return,
        };
        let _ = stream.set_nodelay(true);
        let (state, shutdown) = (state.clone(), shutdown.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&state, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                () = shutdown.cancelled() => {}
            }
        });
    }
}

/// `POST` is the naive admission, anything else the captured poll answer.
async fn answer(state: &BaselineState, request: Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() == Method::POST {
        return naive_enqueue(&state.naive, request)
            .await
            .unwrap_or_else(|error| {
                json_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &json!({ "error": { "code": "INTERNAL", "message": error.to_string() } }),
                )
            });
    }
    match state.poll.get() {
        Some(captured) => {
            let mut response = Response::new(Full::new(captured.body.clone()));
            *response.status_mut() = captured.status;
            *response.headers_mut() = captured.headers.clone();
            response
        }
        None => json_response(
            StatusCode::NOT_FOUND,
            &json!({ "error": "nothing captured" }),
        ),
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("a response of a valid status and a static header")
}

/// The enqueue body as the naive handler reads it.
struct NaiveClaim {
    request_key: String,
    subject: String,
    offer: Uuid,
}

impl NaiveClaim {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let text = |field: &str| -> Result<String, String> {
            value[field]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{field} must be a string"))
        };
        let offer = value["input"]["offer"]
            .as_str()
            .and_then(|offer| Uuid::parse_str(offer).ok())
            .ok_or("input.offer must be a uuid")?;
        Ok(Self {
            request_key: text("request_key")?,
            subject: text("subject")?,
            offer,
        })
    }
}

/// The admission users write today: one transaction per request that takes a unit from the
/// counter row (every request queues on that row's lock until the previous one committed) and
/// inserts the claim.
async fn naive_enqueue(
    pool: &PgPool,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, BoxError> {
    let body = request.into_body().collect().await?.to_bytes();
    let claim = match NaiveClaim::parse(&body) {
        Ok(claim) => claim,
        Err(message) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": { "code": "INVALID_ARGUMENT", "message": message } }),
            ));
        }
    };
    let mut tx = pool.begin().await?;
    let used: Option<i64> = sqlx::query_scalar(
        "UPDATE naive_stock SET used = used + 1 WHERE id = 1 AND used < cap RETURNING used",
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(used) = used else {
        tx.rollback().await?;
        return Ok(json_response(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({ "error": { "code": "SOLD_OUT", "message": "no stock left" } }),
        ));
    };
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO naive_claims (id, subject, request_key, offer, created_at)
         VALUES ($1, $2, $3, $4, now())",
    )
    .bind(id)
    .bind(&claim.subject)
    .bind(&claim.request_key)
    .bind(claim.offer)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({ "data": { "claim_id": id, "used": used } }),
    ))
}

// ---------------------------------------------------------------------------------------------
// The client: closed-loop callers on keep-alive connections for a fixed time.

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type MakeRequest = Arc<dyn Fn() -> Request<Full<Bytes>> + Send + Sync>;
/// A status whose body must contain a marker (e.g. `429` must say `"RATE_LIMITED"`); a body
/// without it is counted as status 598.
type BodyCheck = Option<(u16, &'static str)>;

/// What one time-bounded HTTP round saw.
struct HttpRound {
    statuses: BTreeMap<u16, u64>,
    latency_us: Histogram<u64>,
    elapsed: Duration,
    cpu: Cpu,
}

impl HttpRound {
    fn new() -> Self {
        Self {
            statuses: BTreeMap::new(),
            latency_us: new_histogram(),
            elapsed: Duration::ZERO,
            cpu: Cpu::default(),
        }
    }

    fn record(&mut self, status: u16, took: Duration) {
        *self.statuses.entry(status).or_default() += 1;
        let _ = self.latency_us.record(took.as_micros() as u64);
    }

    fn add(&mut self, other: &Self) {
        for (status, n) in &other.statuses {
            *self.statuses.entry(*status).or_default() += n;
        }
        let _ = self.latency_us.add(&other.latency_us);
    }

    fn count(&self, status: u16) -> u64 {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    fn per_second(&self, status: u16) -> f64 {
        self.count(status) as f64 / self.elapsed.as_secs_f64()
    }

    /// Fails the run when any answer had another status (599: the connection failed, 598: the
    /// body lacked its marker).
    fn expect_only(&self, allowed: &[u16], what: &str) -> Result<&Self, BoxError> {
        if self.statuses.keys().all(|status| allowed.contains(status)) {
            return Ok(self);
        }
        Err(format!(
            "unexpected {what} answers (status: count): {:?}; allowed {allowed:?}",
            self.statuses
        )
        .into())
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("constant histogram bounds are valid")
}

async fn connect(addr: SocketAddr) -> Result<Sender, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One request on a fresh connection: status and body.
async fn send_once(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), BoxError> {
    exchange(&mut connect(addr).await?, request).await
}

async fn exchange(
    sender: &mut Sender,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), BoxError> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    Ok((status, response.into_body().collect().await?.to_bytes()))
}

/// `--concurrency` callers, each on its own connection, sending `make()` for `duration`; the
/// round's wall time runs from their common start to the last answer.
async fn http_round(
    addr: SocketAddr,
    args: &Args,
    duration: Duration,
    make: &MakeRequest,
    check: BodyCheck,
) -> Result<HttpRound, BoxError> {
    let mut senders = Vec::with_capacity(args.concurrency);
    for _ in 0..args.concurrency {
        senders.push(connect(addr).await?);
    }
    let start = Arc::new(Barrier::new(args.concurrency + 1));
    let mut tasks = Vec::with_capacity(args.concurrency);
    for sender in senders {
        let (start, make) = (start.clone(), make.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            caller(addr, sender, Instant::now() + duration, make, check).await
        }));
    }
    let cpu = Cpu::read();
    start.wait().await;
    let started = Instant::now();
    let mut round = HttpRound::new();
    for task in tasks {
        round.add(&task.await??);
    }
    round.elapsed = started.elapsed();
    round.cpu = Cpu::read().since(cpu);
    Ok(round)
}

/// One closed-loop caller: the next request as soon as the last was answered. A failed
/// connection counts as status 599 and is replaced.
async fn caller(
    addr: SocketAddr,
    mut sender: Sender,
    deadline: Instant,
    make: MakeRequest,
    check: BodyCheck,
) -> Result<HttpRound, BoxError> {
    let mut round = HttpRound::new();
    while Instant::now() < deadline {
        let sent = Instant::now();
        let status = match exchange(&mut sender, make()).await {
            Ok((status, body)) => checked(status.as_u16(), &body, check),
            Err(_) => {
                sender = connect(addr).await?;
                599
            }
        };
        round.record(status, sent.elapsed());
    }
    Ok(round)
}

fn checked(status: u16, body: &[u8], check: BodyCheck) -> u16 {
    match check {
        Some((expected, marker))
            if status == expected
                && !body
                    .windows(marker.len())
                    .any(|window| window == marker.as_bytes()) =>
        {
            598
        }
        _ => status,
    }
}

// ---------------------------------------------------------------------------------------------
// Results.

/// One side of a pair: its rate per round and, for HTTP sides, its latencies over every round.
#[derive(Clone)]
struct Side {
    name: String,
    rates: Vec<f64>,
    latency_us: Option<Histogram<u64>>,
    /// CPU used over the measured rounds, and the answers it bought.
    cpu: Cpu,
    answers: u64,
}

impl Side {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            rates: Vec::new(),
            latency_us: None,
            cpu: Cpu::default(),
            answers: 0,
        }
    }

    /// A measured round of `answers` at `rate` that used `cpu`.
    fn push(&mut self, rate: f64, answers: u64, cpu: Cpu) {
        self.rates.push(rate);
        self.answers += answers;
        self.cpu = self.cpu.plus(cpu);
    }

    /// A measured HTTP round, counting answers of `status`.
    fn push_http(&mut self, round: &HttpRound, status: u16) {
        self.push(round.per_second(status), round.count(status), round.cpu);
        let latency = self.latency_us.get_or_insert_with(new_histogram);
        let _ = latency.add(&round.latency_us);
    }

    /// CPU microseconds per answer: (this process, Redis, PostgreSQL).
    fn cpu_per_answer(&self) -> Option<(f64, f64, f64)> {
        let per = |seconds: f64| seconds * 1e6 / self.answers as f64;
        (self.answers > 0).then(|| {
            (
                per(self.cpu.here),
                per(self.cpu.redis),
                per(self.cpu.postgres),
            )
        })
    }

    fn last(&self) -> f64 {
        self.rates.last().copied().unwrap_or(0.0)
    }

    fn median(&self) -> Option<f64> {
        (!self.rates.is_empty()).then(|| median(self.rates.clone()))
    }

    /// The latency at `quantile` in milliseconds, for HTTP sides.
    fn latency_ms(&self, quantile: f64) -> Option<f64> {
        self.latency_us
            .as_ref()
            .map(|h| h.value_at_quantile(quantile) as f64 / 1000.0)
    }

    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "median_per_second": self.median(),
            "rounds_per_second": self.rates,
            "p50_ms": self.latency_ms(0.5),
            "p99_ms": self.latency_ms(0.99),
            "cpu_us_per_answer": self.cpu_per_answer().map(|(here, redis, postgres)| json!({
                "this_process": here,
                "redis": redis,
                "postgres": postgres,
            })),
        })
    }
}

/// Sluice against one baseline, with the ratio it should reach (if any).
struct Comparison {
    measurement: String,
    sluice: Side,
    baseline: Side,
    target: Option<f64>,
    /// Why the baseline was not measured.
    skipped: Option<String>,
    /// A measurement that went wrong without stopping the run (exit status non-zero).
    problem: Option<String>,
}

impl Comparison {
    fn new(measurement: &str, sluice: Side, baseline: Side, target: Option<f64>) -> Self {
        Self {
            measurement: measurement.to_string(),
            sluice,
            baseline,
            target,
            skipped: None,
            problem: None,
        }
    }

    fn skipped(measurement: &str, sluice: Side, baseline: Side, why: &str) -> Self {
        Self {
            skipped: Some(why.to_string()),
            ..Self::new(measurement, sluice, baseline, None)
        }
    }

    fn ratio(&self) -> Option<f64> {
        Some(self.sluice.median()? / self.baseline.median()?)
    }

    fn met(&self) -> Option<bool> {
        Some(self.ratio()? >= self.target?)
    }

    fn row(&self) -> String {
        let number = |side: &Side| side.median().map_or("–".into(), thousands);
        let baseline = match &self.skipped {
            Some(why) => format!("skipped: {why}"),
            None => number(&self.baseline),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.measurement,
            number(&self.sluice),
            baseline,
            self.ratio().map_or("–".into(), |r| format!("{r:.2}×")),
            self.target.map_or("–".into(), |t| format!("≥ {t:.2}×")),
            match self.met() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "–",
            }
        )
    }

    fn json(&self) -> Value {
        json!({
            "measurement": self.measurement,
            "sluice": self.sluice.json(),
            "baseline": self.baseline.json(),
            "ratio": self.ratio(),
            "target_ratio": self.target,
            "met": self.met(),
            "skipped": self.skipped,
            "problem": self.problem,
        })
    }
}

/// `12345.6` as `12,346`.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if value < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// CPU seconds used so far by this process (the client, the gateway and the baseline servers
/// all run in it; pgbench, its child, is counted once it exited), by Redis and by PostgreSQL
/// (every process of those names). Each process's reaped children are included, so the CPU of a
/// backend that exits mid-round moves to the postmaster's count instead of vanishing.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    here: f64,
    redis: f64,
    postgres: f64,
}

impl Cpu {
    fn read() -> Self {
        let mut cpu = Self {
            here: process_cpu("self").map_or(0.0, |(_, seconds)| seconds),
            ..Self::default()
        };
        let Ok(processes) = std::fs::read_dir("/proc") else {
            return cpu;
        };
        for entry in processes.flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            match process_cpu(pid) {
                Some((command, seconds)) if command == "redis-server" => cpu.redis += seconds,
                Some((command, seconds)) if command == "postgres" => cpu.postgres += seconds,
                _ => {}
            }
        }
        cpu
    }

    fn since(self, before: Self) -> Self {
        Self {
            here: self.here - before.here,
            redis: self.redis - before.redis,
            postgres: self.postgres - before.postgres,
        }
    }

    fn plus(self, other: Self) -> Self {
        Self {
            here: self.here + other.here,
            redis: self.redis + other.redis,
            postgres: self.postgres + other.postgres,
        }
    }
}

/// A process's command name and CPU seconds (user + system, its own and its reaped
/// children's: `utime stime cutime cstime`, fields 14 to 17 of `/proc/<pid>/stat`), in clock
/// ticks of 1/100 s (Linux's `USER_HZ` on every common architecture).
fn process_cpu(pid: &str) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, tail) = stat.rsplit_once(')')?;
    let command = head.split_once('(')?.1.to_string();
    let fields: Vec<&str> = tail.split_whitespace().collect();
    let mut ticks = 0.0;
    for field in fields.get(11..15)? {
        ticks += field.parse::<f64>().ok()?;
    }
    Some((command, ticks / 100.0))
}

/// The machine a run measured, read at its start and at its end.
#[derive(Debug, Clone)]
struct Machine {
    cpus: usize,
    model: String,
    load_average: String,
}

impl Machine {
    fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map_or("unknown".to_string(), |(_, model)| model.trim().to_string());
        let load_average = std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        Self {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            model,
            load_average,
        }
    }
}

/// The servers' versions and the durability settings that decide the commit rate.
struct Versions {
    postgres: String,
    fsync: String,
    synchronous_commit: String,
    redis: String,
}

impl Versions {
    async fn read(tenant: &Tenant) -> Result<Self, BoxError> {
        let show = |setting: &'static str| async move {
            sqlx::query_scalar::<_, String>(setting)
                .fetch_one(&tenant.pg)
                .await
        };
        let info: String = fred::interfaces::ClientLike::custom(
            tenant.redis.next(),
            fred::types::CustomCommand::new_static("INFO", None, false),
            vec!["server"],
        )
        .await?;
        Ok(Self {
            postgres: show("SHOW server_version").await?,
            fsync: show("SHOW fsync").await?,
            synchronous_commit: show("SHOW synchronous_commit").await?,
            redis: info
                .lines()
                .find_map(|line| line.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .trim()
                .to_string(),
        })
    }
}

/// What the pairs measured.
struct Outcome {
    versions: Versions,
    comparisons: Vec<Comparison>,
    problem: Option<String>,
}

struct Report {
    machine_before: Machine,
    machine_after: Machine,
    outcome: Outcome,
}

impl Report {
    fn print(&self, args: &Args) {
        let (m, v) = (&self.machine_before, &self.outcome.versions);
        println!();
        println!(
            "machine: {} CPUs ({}), load average {} at the start, {} at the end; PostgreSQL {} \
             (fsync {}, synchronous_commit {}), Redis {}; {} callers, median of {} rounds x \
             {:.1} s per side",
            m.cpus,
            m.model,
            m.load_average,
            self.machine_after.load_average,
            v.postgres,
            v.fsync,
            v.synchronous_commit,
            v.redis,
            args.concurrency,
            args.rounds,
            args.seconds
        );
        println!();
        println!("| measurement | Sluice | baseline | ratio | target | met |");
        println!("| --- | ---: | ---: | ---: | ---: | --- |");
        for comparison in &self.outcome.comparisons {
            println!("{}", comparison.row());
        }
        println!();
        println!(
            "| side | per round (/s) | median (/s) | p50 ms | p99 ms | CPU µs per answer: this \
             process (and pgbench) + Redis + PostgreSQL |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: |");
        let ms = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
        // The durable Sluice side appears in two comparisons; print it once.
        let mut printed: Vec<&str> = Vec::new();
        for comparison in &self.outcome.comparisons {
            for side in [&comparison.sluice, &comparison.baseline] {
                if side.rates.is_empty() || printed.contains(&side.name.as_str()) {
                    continue;
                }
                printed.push(&side.name);
                println!(
                    "| {} | {} | {} | {} | {} | {} |",
                    side.name,
                    rates_cell(side.rates.iter().copied()),
                    side.median().map_or("–".into(), thousands),
                    ms(side.latency_ms(0.5)),
                    ms(side.latency_ms(0.99)),
                    side.cpu_per_answer()
                        .map_or("–".into(), |(here, redis, postgres)| format!(
                            "{here:.0} + {redis:.0} + {postgres:.0}"
                        )),
                );
            }
        }
        if let Some(problem) = &self.outcome.problem {
            println!();
            println!("MEASUREMENT PROBLEM: {problem}");
        }
    }

    fn json(&self, args: &Args) -> Value {
        let (m, v) = (&self.machine_before, &self.outcome.versions);
        let comparisons: Vec<Value> = self
            .outcome
            .comparisons
            .iter()
            .map(Comparison::json)
            .collect();
        json!({
            "machine": {
                "cpus": m.cpus,
                "model": m.model,
                "load_average_start": m.load_average,
                "load_average_end": self.machine_after.load_average,
                "postgres": v.postgres,
                "fsync": v.fsync,
                "synchronous_commit": v.synchronous_commit,
                "redis": v.redis,
            },
            "settings": {
                "concurrency": args.concurrency,
                "seconds": args.seconds,
                "rounds": args.rounds,
                "connections": args.connections,
                "redis_pool": args.redis_pool,
                "tickets": args.tickets,
            },
            "comparisons": comparisons,
            "problem": self.outcome.problem,
        })
    }
}
