//! `sluice dev`: a whole local stack in one command.
//!
//! Redis and PostgreSQL are reused when the configured URLs answer; otherwise throwaway servers
//! are started in a temporary directory (they stop with this process). Then migrations, a demo
//! namespace with the demo declaration, the executor and the gateway.

use std::sync::Arc;
use std::time::Duration;

use sluice_executor::Executor;
use sluice_servers::{PgServer, RedisServer};
use sluice_store::db;
use sluice_store::secrets::Redacted;
use sluice_store::tenancy::{self, BootstrapRequest};
use tokio_util::sync::CancellationToken;

use crate::cli::{CliResult, DevArgs, read_credentials, watch_signals};
use crate::identity::ticket::TicketKeys;
use crate::pages::demo::Demo;
use crate::settings::Flag;
use crate::state::Gateway;

/// The demo declaration: a flash sale of 100 units of one offer.
pub const DEMO_DECLARATION: &str = include_str!("../../../deploy/demo.toml");

/// How long `sluice dev` keeps trying a PostgreSQL that listens but does not answer yet.
const POSTGRES_PATIENCE: Duration = Duration::from_secs(30);

/// Whether a server may be at `address` (host, port): only where nothing is (the connection is
/// refused, or the name does not resolve) does `sluice dev` start a throwaway server. A server
/// that is there but slow (a loaded machine) is used and waited for: a throwaway one beside it
/// would silently serve another database, with none of the configured one's data. None (a
/// Unix socket, a cluster list) counts as there.
async fn listens(address: Option<(String, u16)>) -> bool {
    let Some((host, port)) = address else {
        return true;
    };
    match tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    {
        Ok(Ok(_)) => true,
        // Refused, unreachable, or a name that does not resolve: nothing is there.
        Ok(Err(_)) => false,
        // No answer yet: something may be there, too busy to accept at once.
        Err(_) => true,
    }
}

/// The host and port of a PostgreSQL URL; None for a Unix socket or a URL sqlx cannot read
/// (then the connection itself reports what is wrong).
fn postgres_address(url: &str) -> Option<(String, u16)> {
    let options: sqlx::postgres::PgConnectOptions = url.parse().ok()?;
    let host = options.get_host();
    (!host.starts_with('/')).then(|| (host.to_string(), options.get_port()))
}

/// The host and port of a single Redis URL; None for a cluster list or a URL fred cannot read.
fn redis_address(url: &str) -> Option<(String, u16)> {
    if url.contains(',') {
        return None;
    }
    match fred::types::config::Config::from_url(url).ok()?.server {
        fred::types::config::ServerConfig::Centralized { server } => {
            Some((server.host.to_string(), server.port))
        }
        _ => None,
    }
}

/// The pool on a PostgreSQL that listens, tried again for [`POSTGRES_PATIENCE`] while it does not
/// answer (each try waits up to the pool's acquire timeout).
async fn patiently_connect(url: &str) -> Result<sqlx::PgPool, sluice_durable::DurableError> {
    let deadline = tokio::time::Instant::now() + POSTGRES_PATIENCE;
    loop {
        match db::connect(url, 32).await {
            Ok(pool) => return Ok(pool),
            Err(error)
                if error.postgres_is_unreachable() && tokio::time::Instant::now() < deadline =>
            {
                tracing::warn!(%error, "PostgreSQL does not answer yet; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

pub async fn run(args: DevArgs) -> CliResult {
    let settings = args.settings.load(vec![
        Flag::new("listen", &args.listen),
        Flag::new("admin_listen", &args.admin_listen),
    ])?;
    let mut _servers: (Option<RedisServer>, Option<PgServer>) = (None, None);
    let redis_url = if listens(redis_address(&settings.redis_url)).await {
        settings.redis_url.clone()
    } else {
        println!("no Redis at {}: starting one", settings.redis_url);
        let server = tokio::task::spawn_blocking(RedisServer::start).await?;
        let url = server.url();
        _servers.0 = Some(server);
        url
    };
    let database_url = if listens(postgres_address(&settings.database_url)).await {
        settings.database_url.clone()
    } else {
        println!("no PostgreSQL at {}: starting one", settings.database_url);
        let server = tokio::task::spawn_blocking(PgServer::start).await?;
        let url = server.fresh_database().await;
        _servers.1 = Some(server);
        url
    };
    let pg = patiently_connect(&database_url).await?;
    db::run_migrations(&pg).await?;
    let redis = sluice_redis::connect_redis(&redis_url, 4).await?;
    sluice_redis::connect::check_eviction_policy(&redis).await?;

    std::fs::create_dir_all(&args.dir)?;
    let path = args.dir.join("credentials.json");
    // A credentials file from an earlier run is reused only if it belongs to this database.
    let creds = match read_credentials(&path) {
        Ok(creds)
            if tenancy::credential_by_secret(&pg, &creds.credential)
                .await?
                .is_some() =>
        {
            creds
        }
        _ => {
            let creds = tenancy::bootstrap(
                &pg,
                &BootstrapRequest {
                    application: "demo".into(),
                    namespace: "demo".into(),
                    application_id: None,
                    scopes: vec![],
                    resource_access: true,
                },
            )
            .await?;
            crate::cli::write_secret_file(&path, &serde_json::to_vec_pretty(&creds)?)?;
            creds
        }
    };
    let revision =
        tenancy::apply_declaration(&pg, creds.namespace_id, DEMO_DECLARATION, "dev", None).await?;
    // Ready before the port opens: the first enqueue must not find the projection missing.
    sluice_durable::lifecycle::rebuild::ensure_ready(&pg, &redis, creds.application_id).await?;

    let tickets = match settings.ticket_keys.as_ref().map(Redacted::expose) {
        Some(spec) => TicketKeys::parse(spec).map_err(|e| format!("SLUICE_TICKET_KEYS: {e}"))?,
        None => TicketKeys::generate().1,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    let executor = Executor::new(pg.clone(), redis.clone(), settings.executor_config());
    let executor_task = tokio::spawn(executor.run(shutdown.clone()));
    let ticker_pg = db::connect(&database_url, crate::rooms::ticker::TICKER_CONNECTIONS).await?;
    let listener = crate::http::server::bind(settings.listen)?;
    let admin = crate::cli::bind_admin(settings.admin_listen).await?;
    let admin_address = admin.local_addr()?;
    let gateway = Arc::new(
        Gateway::new(pg, redis, tickets, settings.gateway_config()).with_ticker_pool(ticker_pg),
    );
    let _ = gateway.demo.set(Demo {
        namespace_id: creds.namespace_id,
        subject_key_id: creds.subject_key.id.clone(),
        subject_key: Redacted(creds.subject_key.secret.clone()),
    });
    println!(
        "\nSluice dev stack\n  gateway:     http://{}\n  dashboard:   http://{}/ui/ (sign in with the credential)\n  demo sale:   http://{}/demo/ (the browser module and the waiting page)\n  metrics:     http://{admin_address}/metrics (admin listener)\n  credentials: {} (namespace {}, declaration revision {revision})\n  redis:       {redis_url}\n  postgres:    {database_url}\n",
        settings.listen,
        settings.listen,
        settings.listen,
        path.display(),
        creds.namespace
    );
    let admin = tokio::spawn(crate::http::admin::serve_gateway(
        admin,
        gateway.clone(),
        shutdown.clone(),
    ));
    crate::http::server::run(listener, gateway.clone(), shutdown.clone()).await;
    let _ = admin.await;
    crate::http::server::flush_committer(&gateway).await;
    let _ = executor_task.await;
    Ok(())
}
