//! A throwaway database on the given PostgreSQL server and an in-process gateway, so a benchmark
//! measures Sluice's own code paths against real servers and leaves nothing behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use sluice_executor::{Executor, ExecutorConfig};
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_gateway::http::server;
use sluice_gateway::identity::ticket::TicketKeys;
use sluice_gateway::state::Gateway;
use sluice_store::db;
use sluice_store::tenancy::{self, BootstrapOutput, BootstrapRequest};
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use crate::driver::{http_client, run};
use sluice_redis::Projection;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a benchmark binary builds its rounds from: `use sluice_loadtest::bench_stack::prelude::*;`
/// instead of each binary listing the same dozen names.
pub mod prelude {
    pub use super::{
        BoxError, CLAIM_DECLARATION, Pace, PostgresSettings, RoundOptions, RunningGateway, Servers,
        Tenant, drain, enqueue_waiting, evalsha_stats, median, rates_cell, with_scratch_tenant,
        without_statement_timeout,
    };
}

/// The text of [`CLAIM_DECLARATION`], as a literal for `concat!` (the baselines' declaration adds
/// its own commands in front of it).
#[macro_export]
macro_rules! claim_declaration {
    () => {
        r#"
[[command]]
code = "claim"
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
"#
    };
}

/// A sale whose budgets no benchmark reaches (intake, queue, backlog), so every enqueue is
/// accepted and waits: what the intake and status benchmarks measure against.
pub const CLAIM_DECLARATION: &str = claim_declaration!();

/// The servers a benchmark measures, loopback only.
#[derive(Debug, Clone, clap::Args)]
pub struct Servers {
    /// Any database of the PostgreSQL server to measure; a scratch database is created beside it.
    #[arg(
        long,
        env = "SLUICE_BENCH_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
    )]
    pub database_url: String,
    #[arg(
        long,
        env = "SLUICE_BENCH_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
}

impl Servers {
    /// Refuses anything but loopback: benchmarks only ever load this machine.
    pub fn check(&self) -> Result<(), BoxError> {
        ensure_loopback(&self.database_url)?;
        ensure_loopback(&self.redis_url)
    }
}

/// How an executor benchmark runs its rounds: the executor's batches, the PostgreSQL
/// connections, the callers that enqueue and how long a round may take.
#[derive(Debug, Clone, clap::Args)]
pub struct RoundOptions {
    /// Rounds per mode (the modes alternate, so drift of a shared machine hits both alike).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Heads per admission (the executor's batch size).
    #[arg(long, default_value_t = 64)]
    pub batch_size: u32,
    /// Batches the executor handles at once.
    #[arg(long, default_value_t = 4)]
    pub parallel_batches: usize,
    /// PostgreSQL connections (gateway and executor share them).
    #[arg(long, default_value_t = 32)]
    pub connections: u32,
    /// Concurrent callers while enqueueing.
    #[arg(long, default_value_t = 128)]
    pub concurrency: usize,
    /// Give up on a round after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub round_timeout_seconds: u64,
}

impl RoundOptions {
    /// Refuses servers that are not on loopback and options that would measure nothing.
    pub fn check(&self, servers: &Servers) -> Result<(), BoxError> {
        servers.check()?;
        if self.rounds == 0 || self.batch_size == 0 || self.parallel_batches == 0 {
            return Err("--rounds, --batch-size and --parallel-batches must be at least 1".into());
        }
        if self.connections == 0 || self.concurrency == 0 {
            return Err("--connections and --concurrency must be at least 1".into());
        }
        Ok(())
    }

    /// The executor of a round: a 5 ms tick, the options' batches.
    pub fn executor_config(&self) -> ExecutorConfig {
        ExecutorConfig {
            tick_ms: 5,
            batch_size: self.batch_size,
            parallel_batches: self.parallel_batches,
            ..ExecutorConfig::default()
        }
    }
}

/// Enqueues `n` commands of `command` through the gateway from `concurrency` callers, the `i`-th
/// with the JSON body `body(i)`, while no executor runs; fails unless all `n` were accepted and
/// wait.
pub async fn enqueue_waiting<F>(
    tenant: &Tenant,
    gateway: &RunningGateway,
    command: &str,
    n: u64,
    concurrency: usize,
    body: F,
) -> Result<(), BoxError>
where
    F: Fn(u64) -> String + Send + Sync + 'static,
{
    let client = http_client(concurrency);
    let uri = format!("{}/v1/commands/{command}:enqueue", gateway.base);
    let bearer = format!("Bearer {}", tenant.creds.credential);
    let report = run(&client, n, concurrency, move |i| {
        Request::post(&uri)
            .header("authorization", &bearer)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body(i))))
            .expect("a valid request")
    })
    .await;
    if report.count(202) != n {
        return Err(format!(
            "{} of {n} enqueues were accepted: {:?}",
            report.count(202),
            report.by_status
        )
        .into());
    }
    let waiting = open_commands(tenant, command).await?;
    if waiting != n as i64 {
        return Err(format!("{waiting} of {n} commands wait before the executor starts").into());
    }
    Ok(())
}

/// Commands of `command` that are not terminal yet.
pub async fn open_commands(tenant: &Tenant, command: &str) -> Result<i64, BoxError> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM commands
          WHERE namespace_id = $1 AND command = $2
            AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')",
    )
    .bind(tenant.creds.namespace_id)
    .bind(command)
    .fetch_one(&tenant.pg)
    .await?)
}

/// Runs an executor with `config` until none of the `n` commands of `command` is open, and says
/// how long that took. `worth_asking` says when counting the open commands is worth its cost
/// (the count visits every row of the round); the executor is stopped and joined either way,
/// and a round still open after `timeout` is an error naming how many are left.
pub async fn drain(
    tenant: &Tenant,
    config: ExecutorConfig,
    command: &str,
    n: u64,
    timeout: Duration,
    mut worth_asking: impl FnMut() -> bool,
) -> Result<Duration, BoxError> {
    let shutdown = CancellationToken::new();
    let executor = Executor::new(tenant.pg.clone(), tenant.redis.clone(), config);
    let started = Instant::now();
    let running = tokio::spawn(executor.run(shutdown.clone()));
    let deadline = started + timeout;
    let outcome = loop {
        if worth_asking() {
            match open_commands(tenant, command).await {
                Ok(0) => break Ok(started.elapsed()),
                Ok(_) => {}
                Err(error) => break Err(error),
            }
        }
        if Instant::now() >= deadline {
            let open = open_commands(tenant, command).await?;
            break Err(format!("{open} of {n} commands still open after the timeout").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    shutdown.cancel();
    running.await?;
    outcome
}

/// How fast one round went: `n` commands over its elapsed time.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub per_second: f64,
    pub elapsed: Duration,
}

impl Pace {
    pub fn of(n: u64, elapsed: Duration) -> Self {
        Self {
            per_second: n as f64 / elapsed.as_secs_f64(),
            elapsed,
        }
    }
}

/// The median of the rates of a mode's rounds.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The rates of a mode's rounds as one cell of the report's table: `1893, 1901, 1877`.
pub fn rates_cell(rates: impl Iterator<Item = f64>) -> String {
    rates
        .map(|rate| format!("{rate:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `12345.6` as `12,346`.
pub fn thousands(value: f64) -> String {
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

/// A database created for one benchmark run and dropped afterwards.
pub struct ScratchDatabase {
    admin_url: String,
    name: String,
    pub url: String,
}

impl ScratchDatabase {
    /// `server_url` points at any database of the server (its `postgres` database will do).
    pub async fn create(server_url: &str) -> Result<Self, BoxError> {
        let admin = db::connect(server_url, 1).await?;
        let name = format!("sluice_bench_{}", uuid::Uuid::new_v4().simple());
        // DDL takes no bind parameters; the name is ours (a uuid), never input.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await?;
        admin.close().await;
        // The URL's parameters (`?sslmode=…`) carry over to the scratch database's URL.
        let (path, query) = server_url
            .split_once('?')
            .map_or((server_url, ""), |(path, query)| (path, query));
        let (base, _) = path
            .rsplit_once('/')
            .ok_or("the database URL has no database name")?;
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        Ok(Self {
            admin_url: server_url.to_string(),
            url: format!("{base}/{name}{query}"),
            name,
        })
    }

    /// Drops the database, unless `SLUICE_BENCH_KEEP_DATABASE` is set (to read a run's rows
    /// afterwards: its name is printed then).
    pub async fn drop_now(self) -> Result<(), BoxError> {
        if std::env::var_os("SLUICE_BENCH_KEEP_DATABASE").is_some() {
            eprintln!("kept the run's database: {}", self.url);
            return Ok(());
        }
        let admin = db::connect(&self.admin_url, 1).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&admin)
        .await?;
        Ok(())
    }
}

/// Runs `rounds` against a tenant of its own on a scratch database: both are created for it and
/// removed afterwards whatever `rounds` returned, so a failed benchmark leaves neither a database
/// nor Redis keys behind on shared servers.
pub async fn with_scratch_tenant<T>(
    servers: &Servers,
    pool_size: u32,
    declaration: &str,
    rounds: impl AsyncFnOnce(&Tenant) -> Result<T, BoxError>,
) -> Result<T, BoxError> {
    let scratch = ScratchDatabase::create(&servers.database_url).await?;
    let result: Result<T, BoxError> = async {
        let tenant =
            Tenant::create(&scratch.url, &servers.redis_url, pool_size, declaration).await?;
        let result = rounds(&tenant).await;
        let closed = tenant.close().await;
        let outcome = result?;
        closed?;
        Ok(outcome)
    }
    .await;
    let dropped = scratch.drop_now().await;
    let outcome = result?;
    dropped?;
    Ok(outcome)
}

/// The PostgreSQL settings a durable figure depends on, printed in a benchmark's header.
pub struct PostgresSettings {
    pub version: String,
    pub fsync: String,
    pub synchronous_commit: String,
}

impl PostgresSettings {
    pub async fn read(pg: &PgPool) -> Result<Self, BoxError> {
        let (version, fsync, synchronous_commit): (String, String, String) = sqlx::query_as(
            "SELECT current_setting('server_version'), current_setting('fsync'),
                    current_setting('synchronous_commit')",
        )
        .fetch_one(pg)
        .await?;
        Ok(Self {
            version,
            fsync,
            synchronous_commit,
        })
    }
}

impl std::fmt::Display for PostgresSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PostgreSQL {} (fsync={}, synchronous_commit={})",
            self.version, self.fsync, self.synchronous_commit
        )
    }
}

/// A namespace with a declaration, ready for load.
pub struct Tenant {
    pub pg: PgPool,
    pub redis: Projection,
    pub creds: BootstrapOutput,
}

impl Tenant {
    pub async fn create(
        database_url: &str,
        redis_url: &str,
        pool_size: u32,
        declaration: &str,
    ) -> Result<Self, BoxError> {
        let pg = db::connect(database_url, pool_size).await?;
        db::run_migrations(&pg).await?;
        let redis = sluice_redis::connect_redis(redis_url, 4).await?;
        let creds = tenancy::bootstrap(
            &pg,
            &BootstrapRequest {
                application: "bench".into(),
                namespace: "bench".into(),
                application_id: None,
                scopes: vec![],
                resource_access: false,
            },
        )
        .await?;
        tenancy::apply_declaration(&pg, creds.namespace_id, declaration, "bench", None).await?;
        sluice_durable::lifecycle::rebuild::ensure_ready(&pg, &redis, creds.application_id).await?;
        Ok(Self { pg, redis, creds })
    }
}

impl Tenant {
    /// Deletes the tenant's Redis keys and closes its connections; a benchmark calls it whatever
    /// its rounds did, so nothing is left behind on a shared Redis.
    pub async fn close(&self) -> Result<(), BoxError> {
        let forgotten = self.forget_redis().await;
        self.pg.close().await;
        forgotten.map(|_| ())
    }

    /// Deletes every Redis key of the tenant's application, so a benchmark leaves nothing
    /// behind on a shared Redis.
    pub async fn forget_redis(&self) -> Result<u64, BoxError> {
        forget_application(&self.redis, self.creds.application_id).await
    }
}

/// Deletes every Redis key of `application_id` (they share one hash tag): to the application,
/// what a `FLUSHALL` does, without touching anything else on a shared Redis. How many went.
pub async fn forget_application(
    redis: &Projection,
    application_id: sluice_durable::ids::ApplicationId,
) -> Result<u64, BoxError> {
    use fred::interfaces::KeysInterface;
    let pattern = sluice_redis::AppKeys::new(application_id).pattern();
    let client = redis.pool().next();
    let mut cursor = "0".to_string();
    let mut deleted = 0;
    loop {
        let (next, page): (String, Vec<String>) = client
            .scan_page(cursor.as_str(), pattern.as_str(), Some(1_000), None)
            .await?;
        if !page.is_empty() {
            deleted += client.unlink::<u64, _>(page).await?;
        }
        if next == "0" {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// Refuses a server URL whose hosts are not loopback: benchmarks only ever load this machine.
/// Accepts `scheme://[user@]host[:port][/…]` and comma-separated node lists (Redis Cluster).
pub fn ensure_loopback(url: &str) -> Result<(), BoxError> {
    for node in url.split(',') {
        let rest = node.split_once("://").map_or(node, |(_, rest)| rest);
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = match host_port.strip_prefix('[') {
            Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
            None => host_port.split(':').next().unwrap_or(""),
        };
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return Err(format!("benchmarks only target loopback, not {host:?}").into());
        }
    }
    Ok(())
}

/// A gateway serving on an ephemeral loopback port until dropped.
pub struct RunningGateway {
    pub base: String,
    pub gateway: Arc<Gateway>,
    shutdown: CancellationToken,
}

impl RunningGateway {
    pub async fn start(tenant: &Tenant, config: GatewayConfig) -> Result<Self, BoxError> {
        let (_, tickets) = TicketKeys::generate();
        let gateway = Arc::new(Gateway::new(
            tenant.pg.clone(),
            tenant.redis.clone(),
            tickets,
            config,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shutdown = CancellationToken::new();
        tokio::spawn(server::run(listener, gateway.clone(), shutdown.clone()));
        Ok(Self {
            base,
            gateway,
            shutdown,
        })
    }
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// `EVALSHA` calls and microseconds so far, from `INFO commandstats`: what Redis itself spent on
/// scripts between two readings, whatever the client measured.
pub async fn evalsha_stats(redis: &Projection) -> Result<(u64, u64), BoxError> {
    use fred::prelude::*;
    let info: String = redis
        .pool()
        .next()
        .info(Some(fred::types::InfoKind::CommandStats))
        .await?;
    let line = info
        .lines()
        .find(|line| line.starts_with("cmdstat_evalsha:"))
        .unwrap_or("cmdstat_evalsha:calls=0,usec=0");
    let field = |name: &str| -> u64 {
        line.split([':', ','])
            .find_map(|part| part.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("calls="), field("usec=")))
}

/// Runs `work` on one connection of `pg` with no statement timeout (a bulk load or a `VACUUM`
/// outlasts the pool's), then gives the connection back with the pool's own session settings
/// (a `RESET` would drop to the server's defaults).
pub async fn without_statement_timeout<T>(
    pg: &PgPool,
    work: impl AsyncFnOnce(&mut PgConnection) -> Result<T, BoxError>,
) -> Result<T, BoxError> {
    let mut conn = pg.acquire().await?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let outcome = work(&mut conn).await;
    sqlx::raw_sql(sluice_store::db::SESSION_SETTINGS)
        .execute(&mut *conn)
        .await?;
    outcome
}
