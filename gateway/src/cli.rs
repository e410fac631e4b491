//! The `sluice` command line: thin wrappers that parse, connect and call the libraries.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use sluice_durable::tenancy::{self, BootstrapOutput, BootstrapRequest};
use sluice_durable::{db, projection};
use tokio_util::sync::CancellationToken;

use sluice_durable::executor::{Executor, ExecutorConfig};
use sluice_durable::ids::ApplicationId;

use crate::config::GatewayConfig;
use crate::state::Gateway;
use crate::ticket::TicketKeys;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a Redis-first admission gateway"
)]
pub struct Cli {
    /// Log format: `text` or `json`.
    #[arg(long, global = true, env = "SLUICE_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the PostgreSQL migrations (idempotent).
    Migrate(Database),
    /// Create (or join) an application and a namespace with a credential; writes FILE (0600).
    Bootstrap(BootstrapArgs),
    /// Apply a TOML declaration to the credential's namespace as a new revision.
    Apply(ApplyArgs),
    /// Run the gateway.
    Serve(ServeArgs),
    /// Run the executor: drain accepted commands under their budgets.
    Execute(ExecuteArgs),
    /// A local stack in one command: Redis and PostgreSQL (reused when reachable, else started
    /// in a temporary directory), migrations, a demo namespace, gateway and executor.
    Dev(DevArgs),
    /// Rotate the namespace's subject-token keys.
    #[command(subcommand)]
    SubjectKey(SubjectKeyCommand),
    /// Rebuild an application's Redis projection from PostgreSQL.
    Rebuild(RebuildArgs),
    /// Print a fresh ticket signing key spec for SLUICE_TICKET_KEYS.
    Keygen,
}

#[derive(Debug, Clone, Args)]
pub struct Database {
    #[arg(
        long,
        env = "SLUICE_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/sluice"
    )]
    pub database_url: String,
}

#[derive(Debug, Clone, Args)]
pub struct Redis {
    /// A `redis://` URL, or a comma-separated list of cluster nodes.
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    pub database: Database,
    #[arg(long)]
    pub application: String,
    #[arg(long)]
    pub namespace: String,
    /// Add the namespace to this existing application.
    #[arg(long)]
    pub application_id: Option<ApplicationId>,
    /// A scope for the credential (repeatable); default: every namespace scope.
    #[arg(long = "scope")]
    pub scopes: Vec<String>,
    /// Also grant the application scopes (`application:resources:read`/`manage`).
    #[arg(long)]
    pub resource_access: bool,
    #[arg(long)]
    pub output: PathBuf,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub database: Database,
    /// The credentials file written by `sluice bootstrap`.
    #[arg(long)]
    pub credentials: PathBuf,
    /// The declaration (TOML).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub database: Database,
    #[command(flatten)]
    pub redis: Redis,
    #[arg(long, env = "SLUICE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Ticket signing keys, `kid:secret,kid:secret` (the first signs; all verify).
    #[arg(long, env = "SLUICE_TICKET_KEYS", hide_env_values = true)]
    pub ticket_keys: Option<String>,
    /// Commands per group-commit transaction at most (1 = one transaction per request).
    #[arg(long, env = "SLUICE_GROUP_COMMIT_MAX_BATCH", default_value_t = 256)]
    pub group_commit_max_batch: usize,
    /// Concurrent group-commit transactions.
    #[arg(long, env = "SLUICE_GROUP_COMMIT_COMMITTERS", default_value_t = 4)]
    pub group_commit_committers: usize,
    #[arg(long, env = "SLUICE_PG_POOL_SIZE", default_value_t = 16)]
    pub pg_pool_size: u32,
    #[arg(long, env = "SLUICE_REDIS_POOL_SIZE", default_value_t = 4)]
    pub redis_pool_size: usize,
    /// Ticket polls and look-ups answered from PostgreSQL when Redis cannot answer, per second
    /// per process at most (the rest get `503` with `Retry-After`).
    #[arg(long, env = "SLUICE_FALLBACK_PER_SECOND", default_value_t = 4)]
    pub fallback_per_second: u32,
    /// Such PostgreSQL look-ups in progress at once, per process at most.
    #[arg(long, env = "SLUICE_FALLBACK_CONCURRENCY", default_value_t = 4)]
    pub fallback_concurrency: usize,
    /// Calls to read origins in progress at once in this process, at most.
    #[arg(long, env = "SLUICE_ORIGIN_PER_PROCESS", default_value_t = 2)]
    pub origin_per_process: usize,
    /// Calls to read origins in progress at once per application, across every gateway.
    #[arg(long, env = "SLUICE_ORIGIN_PER_APPLICATION", default_value_t = 2)]
    pub origin_per_application: i64,
}

#[derive(Debug, Args)]
pub struct ExecuteArgs {
    #[command(flatten)]
    pub database: Database,
    #[command(flatten)]
    pub redis: Redis,
    /// Heads admitted per batch.
    #[arg(long, env = "SLUICE_EXECUTOR_BATCH_SIZE", default_value_t = 64)]
    pub batch_size: u32,
    /// Batches handled at once.
    #[arg(long, env = "SLUICE_EXECUTOR_PARALLEL_BATCHES", default_value_t = 4)]
    pub parallel_batches: usize,
    /// Permit and row lease, renewed every third of it while a handler works.
    #[arg(long, env = "SLUICE_EXECUTOR_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,
    /// Wake-up when no NOTIFY arrives.
    #[arg(long, env = "SLUICE_EXECUTOR_TICK_MS", default_value_t = 100)]
    pub tick_ms: u64,
    /// How long terminal commands are kept.
    #[arg(long, env = "SLUICE_RETENTION_SECONDS", default_value_t = 7 * 86_400)]
    pub retention_seconds: i64,
    /// Commands of one queue looked at when its head waits only on its own limit keys.
    #[arg(long, env = "SLUICE_EXECUTOR_LOOKAHEAD", default_value_t = 16)]
    pub lookahead: u32,
    /// First webhook retry delay; doubles per attempt, with jitter, up to the maximum.
    #[arg(long, env = "SLUICE_WEBHOOK_RETRY_BASE_MS", default_value_t = 500)]
    pub retry_base_ms: u64,
    #[arg(long, env = "SLUICE_WEBHOOK_RETRY_MAX_MS", default_value_t = 30_000)]
    pub retry_max_ms: u64,
    #[arg(long, env = "SLUICE_PG_POOL_SIZE", default_value_t = 16)]
    pub pg_pool_size: u32,
    /// Serve `GET /metrics` (Prometheus text) and `GET /healthz` on this address; off unless
    /// set (the executor serves no HTTP otherwise).
    #[arg(long, env = "SLUICE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
}

impl ExecuteArgs {
    pub fn config(&self) -> ExecutorConfig {
        ExecutorConfig {
            batch_size: self.batch_size,
            parallel_batches: self.parallel_batches,
            lease_ms: self.lease_ms,
            tick_ms: self.tick_ms,
            retention_seconds: self.retention_seconds,
            lookahead: self.lookahead,
            retry_base_ms: self.retry_base_ms,
            retry_max_ms: self.retry_max_ms,
            ..ExecutorConfig::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub database: Database,
    #[command(flatten)]
    pub redis: Redis,
    #[arg(long, env = "SLUICE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where the credentials file is written.
    #[arg(long, default_value = ".sluice-dev")]
    pub dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum SubjectKeyCommand {
    /// Add a key (prints its id and secret once); existing keys stay valid.
    Create(SubjectKeyArgs),
    /// Revoke a key by id.
    Revoke {
        #[command(flatten)]
        key: SubjectKeyArgs,
        #[arg(long)]
        kid: String,
    },
}

#[derive(Debug, Args)]
pub struct SubjectKeyArgs {
    #[command(flatten)]
    pub database: Database,
    /// The credentials file written by `sluice bootstrap` (needs `declarations:manage`).
    #[arg(long)]
    pub credentials: PathBuf,
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub database: Database,
    #[command(flatten)]
    pub redis: Redis,
    #[arg(long)]
    pub application_id: ApplicationId,
}

pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

pub async fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Migrate(database) => {
            let pg = db::connect(&database.database_url, 2).await?;
            db::run_migrations(&pg).await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Bootstrap(args) => bootstrap(args).await,
        Command::Apply(args) => apply(args).await,
        Command::Serve(args) => serve(args).await,
        Command::Execute(args) => execute(args).await,
        Command::Dev(args) => crate::dev::run(args).await,
        Command::SubjectKey(command) => subject_key(command).await,
        Command::Rebuild(args) => {
            let pg = db::connect(&args.database.database_url, 2).await?;
            let redis = projection::connect_redis(&args.redis.redis_url, 1).await?;
            let report = projection::rebuild::rebuild(&pg, &redis, args.application_id).await?;
            println!(
                "rebuilt application {} at generation {}: {} unfinished, {} waiting",
                args.application_id, report.generation, report.unfinished, report.waiting
            );
            Ok(())
        }
        Command::Keygen => {
            let (spec, _) = TicketKeys::generate();
            println!("{spec}");
            Ok(())
        }
    }
}

async fn bootstrap(args: BootstrapArgs) -> CliResult {
    let pg = db::connect(&args.database.database_url, 2).await?;
    let output = tenancy::bootstrap(
        &pg,
        &BootstrapRequest {
            application: args.application,
            namespace: args.namespace,
            application_id: args.application_id,
            scopes: args.scopes,
            resource_access: args.resource_access,
        },
    )
    .await?;
    write_secret_file(&args.output, &serde_json::to_vec_pretty(&output)?)?;
    println!(
        "application {} namespace {} ({}): credentials written to {}",
        output.application_id,
        output.namespace,
        output.namespace_id,
        args.output.display()
    );
    Ok(())
}

/// Writes a file only its owner can read: it holds secrets shown nowhere else.
pub fn write_secret_file(path: &PathBuf, contents: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)?;
    file.write_all(b"\n")
}

pub fn read_credentials(
    path: &PathBuf,
) -> Result<BootstrapOutput, Box<dyn std::error::Error + Send + Sync>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read credentials file {}: {e}", path.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| {
        format!(
            "credentials file {} is not bootstrap output: {e}",
            path.display()
        )
    })?)
}

/// The credential of a credentials file, checked live against PostgreSQL for a scope.
async fn manager(
    pg: &sqlx::PgPool,
    path: &PathBuf,
    scope: &str,
) -> Result<tenancy::CredentialRecord, Box<dyn std::error::Error + Send + Sync>> {
    let credentials = read_credentials(path)?;
    let record = tenancy::credential_by_secret(pg, &credentials.credential)
        .await?
        .ok_or("the credential in the credentials file is unknown or revoked")?;
    if !record.scopes.iter().any(|s| s == scope) {
        return Err(format!("the credential lacks the scope {scope}").into());
    }
    Ok(record)
}

async fn subject_key(command: SubjectKeyCommand) -> CliResult {
    let (args, kid) = match &command {
        SubjectKeyCommand::Create(args) => (args, None),
        SubjectKeyCommand::Revoke { key, kid } => (key, Some(kid.as_str())),
    };
    let pg = db::connect(&args.database.database_url, 2).await?;
    let record = manager(&pg, &args.credentials, "declarations:manage").await?;
    let actor = format!("credential:{}", record.id);
    match kid {
        None => {
            let key = tenancy::create_subject_key(&pg, record.namespace_id, &actor).await?;
            println!("{}", serde_json::to_string_pretty(&key)?);
        }
        Some(kid) => {
            tenancy::revoke_subject_key(&pg, record.namespace_id, kid, &actor).await?;
            println!("revoked subject key {kid}");
        }
    }
    Ok(())
}

async fn apply(args: ApplyArgs) -> CliResult {
    let source = std::fs::read_to_string(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let pg = db::connect(&args.database.database_url, 2).await?;
    let record = manager(&pg, &args.credentials, "declarations:manage").await?;
    let revision = tenancy::apply_declaration(
        &pg,
        record.namespace_id,
        &source,
        &format!("credential:{}", record.id),
        None,
    )
    .await?;
    println!("applied {} as revision {revision}", args.file.display());
    Ok(())
}

async fn serve(args: ServeArgs) -> CliResult {
    let spec = args.ticket_keys.ok_or(
        "SLUICE_TICKET_KEYS is not set: create a key with `sluice keygen` and pass it in SLUICE_TICKET_KEYS or --ticket-keys",
    )?;
    let tickets = TicketKeys::parse(&spec).map_err(|e| format!("SLUICE_TICKET_KEYS: {e}"))?;
    let mut config = GatewayConfig::default();
    config.group_commit.max_batch = args.group_commit_max_batch;
    config.group_commit.committers = args.group_commit_committers;
    config.fallback_per_second = args.fallback_per_second;
    config.fallback_concurrency = args.fallback_concurrency;
    config.cache.origin_per_process = args.origin_per_process;
    config.cache.origin_per_application = args.origin_per_application;
    config.validate()?;
    let pg = db::connect(&args.database.database_url, args.pg_pool_size).await?;
    let redis = projection::connect_redis(&args.redis.redis_url, args.redis_pool_size).await?;
    projection::connect::check_eviction_policy(&redis).await?;
    let listener = crate::server::bind(args.listen)?;
    let gateway = Arc::new(Gateway::new(pg, redis, tickets, config));
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    tracing::info!(listen = %args.listen, "gateway serving");
    crate::server::run(listener, gateway.clone(), shutdown).await;
    crate::server::flush_committer(&gateway).await;
    tracing::info!("gateway stopped");
    Ok(())
}

async fn execute(args: ExecuteArgs) -> CliResult {
    let config = args.config();
    config.validate()?;
    let pg = db::connect(&args.database.database_url, args.pg_pool_size).await?;
    let redis = projection::connect_redis(&args.redis.redis_url, 4).await?;
    projection::connect::check_eviction_policy(&redis).await?;
    // Bound before the executor starts, so a taken address fails the start, not a scrape later.
    let metrics = match args.metrics_listen {
        Some(address) => Some((tokio::net::TcpListener::bind(address).await?, address)),
        None => None,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    let metrics = metrics.map(|(listener, address)| {
        tracing::info!(listen = %address, "executor metrics serving");
        tokio::spawn(crate::metrics_server::serve(listener, shutdown.clone()))
    });
    Executor::new(pg, redis, config).run(shutdown).await;
    if let Some(server) = metrics {
        let _ = server.await;
    }
    Ok(())
}

/// SIGTERM drains (stop accepting, finish in-flight requests); SIGINT stops at once, also in
/// the middle of a drain. Runs for the life of the process: tokio never restores a signal's
/// default action, so a watcher that returned after SIGTERM would leave SIGINT ignored.
pub async fn watch_signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            Some(()) = term.recv() => {
                if !shutdown.is_cancelled() {
                    tracing::info!("SIGTERM: draining");
                    shutdown.cancel();
                }
            }
            Some(()) = int.recv() => {
                tracing::info!("SIGINT: stopping now");
                std::process::exit(130);
            }
            else => return,
        }
    }
}
