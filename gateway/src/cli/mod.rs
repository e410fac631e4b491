//! The `sluice` command line: thin wrappers that parse, connect and call the libraries.

pub mod dev;

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use sluice_store::tenancy::{self, BootstrapOutput, BootstrapRequest};
use sluice_store::{db, webhook_secret};
use tokio_util::sync::CancellationToken;

use sluice_durable::ids::ApplicationId;
use sluice_executor::Executor;

use crate::identity::ticket::TicketKeys;
use crate::settings::{Flag, Settings, SettingsError};
use crate::state::Gateway;

#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a Redis-first admission gateway",
    after_help = "Logging: SLUICE_LOG sets the filter (a tracing filter such as `info` or \
                  `sluice_gateway=debug,info`); when it is unset RUST_LOG is read, then `info`. \
                  A filter that does not parse stops the start."
)]
pub struct Cli {
    /// Log format: one JSON object per line (`request_id`, `trace_id`, `command_id` at its top
    /// level) or human-readable text.
    #[arg(
        long,
        global = true,
        env = "SLUICE_LOG_FORMAT",
        value_enum,
        default_value_t = crate::logging::LogFormat::Text
    )]
    pub log_format: crate::logging::LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply the PostgreSQL migrations (idempotent).
    Migrate(ConfigArgs),
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
    /// Rotate the namespace's webhook secret: both sign until the old one is retired.
    #[command(subcommand)]
    WebhookSecret(WebhookSecretCommand),
    /// Rotate the Ed25519 key that signs waiting-room passes (one for the installation): the
    /// old key stays published in /.well-known/jwks.json until every pass it signed expired.
    #[command(subcommand)]
    PassKey(PassKeyCommand),
    /// Rebuild an application's Redis projection from PostgreSQL.
    Rebuild(RebuildArgs),
    /// Print the effective settings as TOML (defaults, file, environment and flags applied; the
    /// ticket keys not shown).
    Config(ConfigArgs),
    /// Print a fresh ticket signing key spec for SLUICE_TICKET_KEYS.
    Keygen,
    /// Print a subject token for SUBJECT, signed with the subject key of a credentials file, as
    /// an application's backend mints them: for a quick test with curl or a browser.
    Token(TokenArgs),
}

impl Command {
    /// The service name its traces are exported under (unless `OTEL_SERVICE_NAME` says another).
    pub fn service(&self) -> &'static str {
        match self {
            Command::Serve(_) => "sluice-gateway",
            Command::Execute(_) => "sluice-executor",
            Command::Dev(_) => "sluice-dev",
            _ => "sluice",
        }
    }
}

/// `sluice token`: nothing is read but the credentials file; nothing connects.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The credentials file written by `sluice bootstrap` (its `subject_key` signs).
    #[arg(long)]
    pub credentials: PathBuf,
    /// The person the token speaks for (`sub`, 1 to 128 characters).
    #[arg(long)]
    pub subject: String,
    /// How long the token is valid, at most 86400 (the gateway refuses longer).
    #[arg(long, default_value_t = 3600)]
    pub ttl_seconds: i64,
}

/// Where the settings come from (see [`crate::settings`]): every command that connects takes
/// these.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// A TOML file of settings (docs/configuration.md); the environment and flags override it.
    #[arg(long, env = "SLUICE_CONFIG")]
    pub config: Option<PathBuf>,
    /// PostgreSQL (`database_url`, `SLUICE_DATABASE_URL`).
    #[arg(long)]
    pub database_url: Option<String>,
    /// Redis (`redis_url`, `SLUICE_REDIS_URL`): a `redis://` URL, or cluster nodes separated by
    /// commas.
    #[arg(long)]
    pub redis_url: Option<String>,
    /// One setting as `PATH=VALUE` (for example `executor.lease_ms=1500`); repeatable, applied
    /// after the file, the environment and the other flags.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
}

impl ConfigArgs {
    /// The settings, with `flags` (a command's own) above the environment.
    pub fn load(&self, flags: Vec<Flag>) -> Result<Settings, SettingsError> {
        let mut all = vec![
            Flag::new("database_url", &self.database_url),
            Flag::new("redis_url", &self.redis_url),
        ];
        all.extend(flags);
        Settings::load(self.config.as_deref(), std::env::vars(), &all, &self.set)
    }
}

#[derive(Debug, Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
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
    pub settings: ConfigArgs,
    /// The credentials file written by `sluice bootstrap`.
    #[arg(long)]
    pub credentials: PathBuf,
    /// The declaration (TOML).
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
}

/// No `Debug` derive: it may hold the ticket keys (see the impl below).
#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
    /// The gateway's address (`listen`).
    #[arg(long)]
    pub listen: Option<String>,
    /// The admin listener's address (`admin_listen`): `/metrics` and the detailed `/readyz`.
    #[arg(long)]
    pub admin_listen: Option<String>,
    /// Ticket signing keys (`ticket_keys`), `kid:secret,kid:secret`: the first signs; all verify.
    #[arg(long)]
    pub ticket_keys: Option<String>,
    /// PostgreSQL connections (`pg_pool_size`).
    #[arg(long)]
    pub pg_pool_size: Option<String>,
    /// Redis connections (`redis_pool_size`).
    #[arg(long)]
    pub redis_pool_size: Option<String>,
}

impl std::fmt::Debug for ServeArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeArgs")
            .field("settings", &self.settings)
            .field("listen", &self.listen)
            .field("admin_listen", &self.admin_listen)
            .field(
                "ticket_keys",
                &self.ticket_keys.as_ref().map(|_| "<redacted>"),
            )
            .field("pg_pool_size", &self.pg_pool_size)
            .field("redis_pool_size", &self.redis_pool_size)
            .finish()
    }
}

impl ServeArgs {
    fn load(&self) -> Result<Settings, SettingsError> {
        self.settings.load(vec![
            Flag::new("listen", &self.listen),
            Flag::new("admin_listen", &self.admin_listen),
            Flag::new("ticket_keys", &self.ticket_keys),
            Flag::new("pg_pool_size", &self.pg_pool_size),
            Flag::new("redis_pool_size", &self.redis_pool_size),
        ])
    }
}

#[derive(Debug, Args)]
pub struct ExecuteArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
    /// Permit and row lease (`executor.lease_ms`), renewed every third of it.
    #[arg(long)]
    pub lease_ms: Option<String>,
    /// Wake-up when no NOTIFY arrives (`executor.tick_ms`).
    #[arg(long)]
    pub tick_ms: Option<String>,
    /// PostgreSQL connections (`pg_pool_size`).
    #[arg(long)]
    pub pg_pool_size: Option<String>,
    /// Redis connections (`redis_pool_size`).
    #[arg(long)]
    pub redis_pool_size: Option<String>,
    /// Serve `GET /metrics` and `GET /healthz` here (`metrics_listen`); off unless set.
    #[arg(long)]
    pub metrics_listen: Option<String>,
}

impl ExecuteArgs {
    fn load(&self) -> Result<Settings, SettingsError> {
        self.settings.load(vec![
            Flag::new("executor.lease_ms", &self.lease_ms),
            Flag::new("executor.tick_ms", &self.tick_ms),
            Flag::new("pg_pool_size", &self.pg_pool_size),
            Flag::new("redis_pool_size", &self.redis_pool_size),
            Flag::new("metrics_listen", &self.metrics_listen),
        ])
    }
}

#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
    /// The gateway's address (`listen`).
    #[arg(long)]
    pub listen: Option<String>,
    /// The admin listener's address (`admin_listen`): `/metrics` and the detailed `/readyz`.
    #[arg(long)]
    pub admin_listen: Option<String>,
    /// Where the credentials file is written.
    #[arg(long, default_value = ".sluice-dev")]
    pub dir: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum SubjectKeyCommand {
    /// Add a key (prints its id and secret once); existing keys stay valid.
    Create(ManageArgs),
    /// Revoke a key by id.
    Revoke {
        #[command(flatten)]
        key: ManageArgs,
        #[arg(long)]
        kid: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PassKeyCommand {
    /// Make a new key live now (prints its id); passes signed with the old one stay valid.
    Rotate(ConfigArgs),
}

#[derive(Debug, Subcommand)]
pub enum WebhookSecretCommand {
    /// Make a new secret current (printed once); requests are signed with both the new and the
    /// old one until `retire`.
    Rotate(ManageArgs),
    /// Stop signing with the previous secret (once every backend checks the new one).
    Retire(ManageArgs),
}

#[derive(Debug, Args)]
pub struct ManageArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
    /// The credentials file written by `sluice bootstrap` (needs `declarations:manage`).
    #[arg(long)]
    pub credentials: PathBuf,
}

#[derive(Debug, Args)]
pub struct RebuildArgs {
    #[command(flatten)]
    pub settings: ConfigArgs,
    #[arg(long)]
    pub application_id: ApplicationId,
}

pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

pub async fn run(cli: Cli) -> CliResult {
    match cli.command {
        Command::Migrate(config) => {
            let pg = db::connect(config.load(vec![])?.session_url(), 2).await?;
            db::run_migrations(&pg).await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Bootstrap(args) => bootstrap(args).await,
        Command::Apply(args) => apply(args).await,
        Command::Serve(args) => serve(args).await,
        Command::Execute(args) => execute(args).await,
        Command::Dev(args) => crate::cli::dev::run(args).await,
        Command::SubjectKey(command) => subject_key(command).await,
        Command::WebhookSecret(command) => webhook_secret(command).await,
        Command::PassKey(PassKeyCommand::Rotate(config)) => {
            let pg = config.load(vec![])?.postgres_for_tool().await?;
            let key = sluice_store::pass_keys::rotate(&pg).await?;
            println!("{}", serde_json::json!({"kid": key.kid}));
            Ok(())
        }
        Command::Config(config) => {
            print!("{}", config.load(vec![])?.to_redacted_toml()?);
            Ok(())
        }
        Command::Rebuild(args) => {
            let settings = args.settings.load(vec![])?;
            let pg = settings.postgres_for_tool().await?;
            let redis = sluice_redis::connect_redis(&settings.redis_url, 1).await?;
            let report =
                sluice_durable::lifecycle::rebuild::rebuild(&pg, &redis, args.application_id)
                    .await?;
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
        Command::Token(args) => {
            println!("{}", mint_token(&args)?);
            Ok(())
        }
    }
}

async fn bootstrap(args: BootstrapArgs) -> CliResult {
    let pg = args.settings.load(vec![])?.postgres_for_tool().await?;
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
///
/// A symbolic link at `path` is refused, not followed (`O_NOFOLLOW`): whoever could plant one
/// would otherwise have the secrets written wherever it points. A file that exists already is
/// narrowed to `0600` before anything is written to it (the mode given to `open` applies only to
/// a file it creates).
pub fn write_secret_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| {
            if error.raw_os_error() == Some(libc::ELOOP) {
                std::io::Error::other(format!(
                    "{} is a symbolic link: refusing to write secrets through it",
                    path.display()
                ))
            } else {
                error
            }
        })?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.set_len(0)?;
    file.write_all(contents)?;
    file.write_all(b"\n")?;
    file.sync_all()
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

/// The token `sluice token` prints; the subject and the lifetime are checked as the gateway
/// checks them, so a token that would be refused is never printed.
fn mint_token(args: &TokenArgs) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let subject_length = args.subject.chars().count();
    if !(1..=128).contains(&subject_length) {
        return Err(format!("--subject must be 1 to 128 characters, not {subject_length}").into());
    }
    if !(1..=86_400).contains(&args.ttl_seconds) {
        return Err(format!(
            "--ttl-seconds must be 1 to 86400 (the gateway refuses a token valid longer than 24 h), not {}",
            args.ttl_seconds
        )
        .into());
    }
    let credentials = read_credentials(&args.credentials)?;
    let now = chrono::Utc::now().timestamp();
    Ok(crate::identity::subject_token::issue(
        &credentials.subject_key.id,
        credentials.subject_key.secret.as_bytes(),
        &args.subject,
        now,
        now + args.ttl_seconds,
    ))
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
    let pg = args.settings.load(vec![])?.postgres_for_tool().await?;
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

async fn webhook_secret(command: WebhookSecretCommand) -> CliResult {
    let args = match &command {
        WebhookSecretCommand::Rotate(args) | WebhookSecretCommand::Retire(args) => args,
    };
    let pg = args.settings.load(vec![])?.postgres_for_tool().await?;
    let record = manager(&pg, &args.credentials, "declarations:manage").await?;
    let actor = format!("credential:{}", record.id);
    match command {
        WebhookSecretCommand::Rotate(_) => {
            let secret = webhook_secret::rotate(&pg, record.namespace_id, &actor).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "webhook_secret": secret }))?
            );
            eprintln!(
                "requests are signed with the new and the previous secret from the executors' next catalog refresh; once every backend checks the new one, run `sluice webhook-secret retire`"
            );
        }
        WebhookSecretCommand::Retire(_) => {
            webhook_secret::retire(&pg, record.namespace_id, &actor).await?;
            println!(
                "the previous webhook secret is retired: requests are signed with the current one only"
            );
        }
    }
    Ok(())
}

async fn apply(args: ApplyArgs) -> CliResult {
    let source = std::fs::read_to_string(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let pg = args.settings.load(vec![])?.postgres_for_tool().await?;
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
    let settings = args.load()?;
    let spec = settings.ticket_keys.as_ref().map(|k| k.expose().as_str()).ok_or(
        "SLUICE_TICKET_KEYS is not set: create a key with `sluice keygen` and pass it in SLUICE_TICKET_KEYS or --ticket-keys",
    )?;
    let tickets = TicketKeys::parse(spec).map_err(|e| format!("SLUICE_TICKET_KEYS: {e}"))?;
    let pg = settings.postgres().await?;
    let ticker_pg = settings
        .postgres_sized(crate::rooms::ticker::TICKER_CONNECTIONS)
        .await?;
    let redis = sluice_redis::connect_redis(&settings.redis_url, settings.redis_pool_size).await?;
    sluice_redis::connect::check_eviction_policy(&redis).await?;
    let listener = crate::http::server::bind(settings.listen)?;
    let admin = bind_admin(settings.admin_listen).await?;
    let gateway = Arc::new(
        Gateway::new(pg, redis, tickets, settings.gateway_config()).with_ticker_pool(ticker_pg),
    );
    let (signalled, shutdown, admin_stop) = (
        CancellationToken::new(),
        CancellationToken::new(),
        CancellationToken::new(),
    );
    tokio::spawn(watch_signals(signalled.clone()));
    tokio::spawn(crate::http::drain::on_signal(
        gateway.clone(),
        signalled,
        shutdown.clone(),
        std::time::Duration::from_millis(gateway.config.shutdown_delay_ms),
    ));
    tracing::info!(listen = %settings.listen, admin = %admin.local_addr()?, "gateway serving");
    // The admin listener outlives the drain: `/readyz` says `draining` while it runs.
    let admin = tokio::spawn(crate::http::admin::serve_gateway(
        admin,
        gateway.clone(),
        admin_stop.clone(),
    ));
    crate::http::server::run(listener, gateway.clone(), shutdown).await;
    crate::http::server::flush_committer(&gateway).await;
    admin_stop.cancel();
    let _ = admin.await;
    tracing::info!("gateway stopped");
    Ok(())
}

async fn execute(args: ExecuteArgs) -> CliResult {
    let settings = args.load()?;
    let pg = settings.postgres().await?;
    let redis = sluice_redis::connect_redis(&settings.redis_url, settings.redis_pool_size).await?;
    sluice_redis::connect::check_eviction_policy(&redis).await?;
    // Bound before the executor starts, so a taken address fails the start, not a scrape later.
    let metrics = match settings.metrics_listen {
        Some(address) => Some((tokio::net::TcpListener::bind(address).await?, address)),
        None => None,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    let metrics = metrics.map(|(listener, address)| {
        tracing::info!(listen = %address, "executor metrics serving");
        tokio::spawn(crate::http::admin::serve_executor(
            listener,
            shutdown.clone(),
        ))
    });
    let session = match settings.database_pool_mode {
        db::PoolMode::Session => None,
        db::PoolMode::Transaction => Some(settings.session_url().parse()?),
    };
    Executor::new_with_session(pg, session, redis, settings.executor_config())
        .run(shutdown)
        .await;
    if let Some(server) = metrics {
        let _ = server.await;
    }
    Ok(())
}

/// The admin listener, bound before anything serves, so a taken address fails the start.
pub async fn bind_admin(
    address: std::net::SocketAddr,
) -> Result<tokio::net::TcpListener, Box<dyn std::error::Error + Send + Sync>> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("admin_listen {address}: {e}").into())
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::write_secret_file;

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_secret_file_is_0600_even_when_it_existed_and_a_symlink_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fresh = dir.path().join("fresh.json");
        write_secret_file(&fresh, b"{}").expect("write");
        assert_eq!(mode(&fresh), 0o600);

        let existing = dir.path().join("existing.json");
        std::fs::write(&existing, "old contents, longer than the new").expect("write");
        std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write_secret_file(&existing, b"{}").expect("write");
        assert_eq!(mode(&existing), 0o600);
        assert_eq!(std::fs::read(&existing).expect("read"), b"{}\n");

        let target = dir.path().join("target");
        std::fs::write(&target, "untouched").expect("write");
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let error = write_secret_file(&link, b"{}").expect_err("a symlink is refused");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "untouched");
    }
}
