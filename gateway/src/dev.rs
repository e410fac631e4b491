//! `sluice dev`: a whole local stack in one command.
//!
//! Redis and PostgreSQL are reused when the configured URLs answer; otherwise throwaway servers
//! are started in a temporary directory (they stop with this process). Then migrations, a demo
//! namespace with the demo declaration, the executor and the gateway.

use std::sync::Arc;
use std::time::Duration;

use sluice_durable::executor::Executor;
use sluice_durable::secrets::Redacted;
use sluice_durable::tenancy::{self, BootstrapRequest};
use sluice_durable::{db, projection};
use sluice_servers::{PgServer, RedisServer};
use tokio_util::sync::CancellationToken;

use crate::cli::{CliResult, DevArgs, read_credentials, watch_signals};
use crate::demo::Demo;
use crate::settings::Flag;
use crate::state::Gateway;
use crate::ticket::TicketKeys;

/// The demo declaration: a flash sale of 100 units of one offer.
pub const DEMO_DECLARATION: &str = include_str!("../../deploy/demo.toml");

pub async fn run(args: DevArgs) -> CliResult {
    let settings = args.settings.load(vec![
        Flag::new("listen", &args.listen),
        Flag::new("admin_listen", &args.admin_listen),
    ])?;
    let mut _servers: (Option<RedisServer>, Option<PgServer>) = (None, None);
    let redis_url = match projection::connect_redis(&settings.redis_url, 1).await {
        Ok(_) => settings.redis_url.clone(),
        Err(_) => {
            println!("no Redis at {}: starting one", settings.redis_url);
            let server = tokio::task::spawn_blocking(RedisServer::start).await?;
            let url = server.url();
            _servers.0 = Some(server);
            url
        }
    };
    let database_url = match tokio::time::timeout(
        Duration::from_secs(3),
        db::connect(&settings.database_url, 1),
    )
    .await
    {
        Ok(Ok(_)) => settings.database_url.clone(),
        _ => {
            println!("no PostgreSQL at {}: starting one", settings.database_url);
            let server = tokio::task::spawn_blocking(PgServer::start).await?;
            let url = server.fresh_database().await;
            _servers.1 = Some(server);
            url
        }
    };
    let pg = db::connect(&database_url, 32).await?;
    db::run_migrations(&pg).await?;
    let redis = projection::connect_redis(&redis_url, 4).await?;
    projection::connect::check_eviction_policy(&redis).await?;

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
    sluice_durable::projection::rebuild::ensure_ready(&pg, &redis, creds.application_id).await?;

    let tickets = match settings.ticket_keys.as_ref().map(Redacted::expose) {
        Some(spec) => TicketKeys::parse(spec).map_err(|e| format!("SLUICE_TICKET_KEYS: {e}"))?,
        None => TicketKeys::generate().1,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(watch_signals(shutdown.clone()));
    let executor = Executor::new(pg.clone(), redis.clone(), settings.executor_config());
    let executor_task = tokio::spawn(executor.run(shutdown.clone()));
    let listener = crate::server::bind(settings.listen)?;
    let admin = crate::cli::bind_admin(settings.admin_listen).await?;
    let admin_address = admin.local_addr()?;
    let gateway = Arc::new(Gateway::new(pg, redis, tickets, settings.gateway_config()));
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
    let admin = tokio::spawn(crate::admin::serve_gateway(
        admin,
        gateway.clone(),
        shutdown.clone(),
    ));
    crate::server::run(listener, gateway.clone(), shutdown.clone()).await;
    let _ = admin.await;
    crate::server::flush_committer(&gateway).await;
    let _ = executor_task.await;
    Ok(())
}
