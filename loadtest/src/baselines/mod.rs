//! Sluice against the baselines it claims to beat or approach, measured in one run on one machine
//! against the same PostgreSQL and Redis (loopback only), with the ratios and their targets.
//!
//! Five pairs, each measured with the same closed-loop client (`--concurrency` callers, one
//! HTTP/1.1 keep-alive connection each) for `--rounds` time-bounded rounds of `--seconds` per
//! side, the two sides alternating so drift of the shared machine hits both alike; the median
//! round of each side is compared:
//!
//! 1. Intake decisions (`intake`): `POST /v1/commands/decide:enqueue` on a command whose intake
//!    bucket is empty (`per_second = 1, burst = 1`), so every answer is a whole `intake.lua`
//!    decision refused `429 RATE_LIMITED` (auth, strict JSON, key derivation, the script, the
//!    error envelope), against the ceiling: the same `intake.lua` call with the same keys and
//!    budget through `lifecycle::redis::reserve` (EVALSHA, fred pipelining concurrent calls on a
//!    pool of the gateway's size) from as many tokio tasks, no HTTP. The bucket refills one token
//!    a second, so about one decision a second is an acceptance; those are allowed (and counted),
//!    nothing else is.
//! 2. Durable acceptances (`durable`): `POST /v1/commands/claim:enqueue`, every one accepted
//!    `202` (group commit in its default configuration, no executor), against the counter-row
//!    admission users build today (`naive`): a hyper handler that parses the same body and, in
//!    one transaction per request on a pool of the same size, decrements a stock row and inserts
//!    the claim. Plus the ceiling of PostgreSQL itself for the group commit's transaction
//!    (`pgbench`): `pgbench` running the same multi-row INSERT
//!    (`loadtest/baselines/group_commit_insert.pgbench.sql`) with the batch size the gateway
//!    reached, in rows per second. Afterwards the rows are counted: every `202` must have its row.
//! 3. Ticket polls (`polls`): `GET /v1/tickets/{ticket}` round-robin over waiting commands,
//!    against a bare hyper server answering the exact bytes and headers of one real poll answer
//!    (the HTTP floor).
//! 4. Place polls (`place-polls`): `GET /v1/tickets/{ticket}` round-robin over places waiting in
//!    a waiting room (one admitted ahead of them), against the same floor with one real place
//!    answer.
//! 5. Room joins (`room-joins`): `POST /v1/rooms/{room}:join`, a new subject each (`202`, a new
//!    place), against the gateway's own durable command enqueues with the same callers; every
//!    `202` join must have its place row.
//!
//! Targets are reported, not enforced: the exit status is non-zero only when the measurement
//! itself went wrong (an unexpected status, a lost acceptance, a failing pgbench). The scratch
//! database is dropped, the tenant's Redis keys deleted and pgbench killed, whatever happened.
//!
//! # Layout
//! [`run`] owns the servers' lifetimes (here); `commands` is the declaration and the requests
//! every pair sends; `rounds` the round runner and the closed-loop HTTP client (every side but
//! pgbench); `side` what a side's rounds add up to and how two sides compare; `cpu` the CPU
//! each answer cost; `server` the baseline HTTP server; `table` and `environment` the report.

mod commands;
mod cpu;
mod durable;
mod environment;
mod intake;
mod naive;
mod perf_gate;
mod pgbench;
mod place_polls;
mod polls;
mod room_joins;
mod rounds;
mod server;
mod side;
mod table;

/// The declaration the baselines apply (their commands before the shared sale).
pub use commands::DECLARATION;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_gateway::gateway_config::GatewayConfig;
use sluice_store::db;
use sluice_store::tenancy::NamespaceConfig;

use crate::bench_stack::{BoxError, RunningGateway, ScratchDatabase, Servers, Tenant};
use environment::{Machine, Versions};
use server::BaselineServer;
use side::Comparison;
use table::Report;

/// What `sluice-bench-baselines` takes on its command line.
#[derive(Debug, clap::Args)]
pub struct Options {
    #[command(flatten)]
    pub servers: Servers,
    /// Concurrent closed-loop callers (one keep-alive connection or task each), every side.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Seconds per round and side.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Rounds per side (alternating between the two sides of a pair).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// PostgreSQL connections of the gateway, and of the naive server's pool.
    #[arg(long, default_value_t = 16)]
    pub connections: u32,
    /// Connections of the raw intake baseline's fred pool (the gateway's Redis pool has 4).
    #[arg(long, default_value_t = 4)]
    pub redis_pool: usize,
    /// Waiting commands whose tickets are polled round-robin.
    #[arg(long, default_value_t = 1_000)]
    pub tickets: u64,
    /// The pgbench binary; by default the newest /usr/lib/postgresql/*/bin/pgbench, else the
    /// one on PATH.
    #[arg(long)]
    pub pgbench: Option<PathBuf>,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Measure only these pairs (repeatable; all five by default): a profile of one answer
    /// (`loadtest/profile.sh`) wants nothing else running.
    #[arg(long, value_enum)]
    pub only: Vec<Pair>,
    /// A `perf record --control fifo:PATH` FIFO: sampling is switched on only during Sluice's
    /// measured rounds (`loadtest/profile.sh`).
    #[arg(long)]
    pub perf_control: Option<PathBuf>,
    /// The gateway's `intake_batch_max`: enqueues of one application per `intake.lua` call
    /// (1: batching off, one call per enqueue as before the intake batcher).
    #[arg(long, default_value_t = sluice_durable::lifecycle::intake_batcher::DEFAULT_MAX_ENTRIES)]
    pub intake_batch_max: usize,
}

/// The pairs, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pair {
    /// Intake decisions (`429`) against raw `EVALSHA intake.lua`.
    Intake,
    /// Durable acceptances against the naive transaction, and the pgbench ceiling.
    Durable,
    /// Ticket polls against a static hyper server.
    Polls,
    /// A waiting room's place polls against a static hyper server.
    PlacePolls,
    /// Room joins against command enqueues, on the same gateway.
    RoomJoins,
}

impl Options {
    fn runs(&self, pair: Pair) -> bool {
        self.only.is_empty() || self.only.contains(&pair)
    }
}

impl Options {
    /// Refuses non-loopback servers and zero sizes before anything is created.
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

/// Checks the options, measures the three pairs on a scratch database, prints the report (and
/// writes its JSON); an error when the options or a measurement went wrong, never for a missed
/// target. The scratch database is dropped whatever happened.
pub async fn run(options: &Options) -> Result<(), BoxError> {
    options.check()?;
    let machine_before = Machine::read();
    let scratch = ScratchDatabase::create(&options.servers.database_url).await?;
    let result = measure(options, &scratch.url).await;
    let dropped = scratch.drop_now().await;
    let outcome = result?;
    dropped?;
    let report = Report {
        machine_before,
        machine_after: Machine::read(),
        outcome,
    };
    report.print(options);
    if let Some(path) = &options.json {
        std::fs::write(path, serde_json::to_string_pretty(&report.json(options))?)?;
        println!("\nJSON written to {}", path.display());
    }
    match &report.outcome.problem {
        Some(problem) => Err(problem.clone().into()),
        None => Ok(()),
    }
}

/// Creates the tenant, runs the pairs, and deletes the tenant's Redis keys whatever happened.
async fn measure(options: &Options, database_url: &str) -> Result<Outcome, BoxError> {
    let tenant = Tenant::create(
        database_url,
        &options.servers.redis_url,
        options.connections,
        commands::DECLARATION,
    )
    .await?;
    let result = with_servers(options, &tenant, database_url).await;
    let closed = tenant.close().await;
    let outcome = result?;
    closed?;
    Ok(outcome)
}

/// Starts the gateway and the baseline server, runs the pairs, and stops both.
async fn with_servers(
    options: &Options,
    tenant: &Tenant,
    database_url: &str,
) -> Result<Outcome, BoxError> {
    let config = GatewayConfig {
        intake_batch_max: options.intake_batch_max.max(1),
        ..GatewayConfig::default()
    };
    let gateway = RunningGateway::start(tenant, config).await?;
    let naive = db::connect(database_url, options.connections).await?;
    naive::create_schema(&naive).await?;
    let baseline = BaselineServer::start(naive.clone()).await?;
    let result = run_pairs(options, tenant, database_url, &gateway, &baseline).await;
    baseline.shutdown.cancel();
    naive.close().await;
    gateway.gateway.committer.close().await;
    drop(gateway);
    result
}

/// What the pairs share: the servers, the caller's credential, the tenant's namespace.
struct Bench<'a> {
    options: &'a Options,
    tenant: &'a Tenant,
    /// The scratch database, for pgbench.
    database_url: &'a str,
    gateway: &'a RunningGateway,
    gateway_addr: SocketAddr,
    baseline: &'a BaselineServer,
    bearer: String,
    namespace: Arc<NamespaceConfig>,
    /// On only while Sluice's side is measured, when a profile is recorded.
    perf: perf_gate::PerfGate,
}

/// What the pairs measured.
struct Outcome {
    versions: Versions,
    comparisons: Vec<Comparison>,
    /// The first comparison's problem: the run measured, but its exit status is non-zero.
    problem: Option<String>,
}

/// Runs the pairs in their order (intake, durable with its pgbench ceiling, polls).
async fn run_pairs(
    options: &Options,
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
        options,
        tenant,
        database_url,
        gateway,
        gateway_addr: gateway.base.trim_start_matches("http://").parse()?,
        baseline,
        bearer: format!("Bearer {}", tenant.creds.credential),
        namespace,
        perf: perf_gate::PerfGate::open(options.perf_control.as_deref())?,
    };
    println!(
        "baselines benchmark: {} callers, {} rounds x {:.1} s per side (alternating), {} \
         PostgreSQL connections, Redis pool {} (gateway 4), {} tickets; application {}",
        options.concurrency,
        options.rounds,
        options.seconds,
        options.connections,
        options.redis_pool,
        options.tickets,
        tenant.creds.application_id
    );
    let versions = Versions::read(tenant).await?;
    let mut comparisons = Vec::new();
    if options.runs(Pair::Intake) {
        comparisons.push(intake::pair(&bench).await?);
    }
    if options.runs(Pair::Durable) {
        let durable = durable::pair(&bench).await?;
        comparisons.push(durable.naive);
        comparisons.push(pgbench::ceiling(&bench, durable.sluice, durable.batch).await);
    }
    if options.runs(Pair::Polls) {
        comparisons.push(polls::pair(&bench).await?);
    }
    if options.runs(Pair::PlacePolls) {
        comparisons.push(place_polls::pair(&bench).await?);
    }
    if options.runs(Pair::RoomJoins) {
        comparisons.push(room_joins::pair(&bench).await?);
    }
    let problem = comparisons.iter().find_map(|c| c.problem.clone());
    Ok(Outcome {
        versions,
        comparisons,
        problem,
    })
}
