//! The stack of a chaos run: its own Redis and PostgreSQL, the database migrated and
//! bootstrapped with the `sluice` CLI and the run's declaration, two `sluice serve` gateways and
//! two `sluice execute` executors. Dropped in field order: the processes before the servers.

use std::time::Duration;

use sluice_gateway::identity::ticket::TicketKeys;
use sluice_store::tenancy::BootstrapOutput;
use sluice_testkit::{PgServer, RedisServer};
use sqlx::PgPool;
use uuid::Uuid;

use super::config::ChaosConfig;
use super::http::Client;
use super::processes::{Env, ExecutorProcess, GatewayProcess, run_cli};
use sluice_redis::Projection;

pub(super) struct Stack {
    pub(super) gateways: Vec<GatewayProcess>,
    pub(super) executors: Vec<ExecutorProcess>,
    pub(super) creds: BootstrapOutput,
    pub(super) pg: PgPool,
    /// Used to inject `FLUSHALL`, and by the positions check to read a waiting command's rank in
    /// its queue (what a position told must be); no other check reads Redis.
    pub(super) redis: Projection,
    pub(super) redis_server: Option<RedisServer>,
    pub(super) pg_server: Option<PgServer>,
}

impl Stack {
    pub(super) async fn start(
        config: &ChaosConfig,
        backend_url: &str,
        dir: &std::path::Path,
        client: &Client,
    ) -> Stack {
        let redis_server = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .expect("start redis");
        let pg_server = tokio::task::spawn_blocking(PgServer::start)
            .await
            .expect("start postgres");
        let database_url = pg_server.fresh_database().await;
        let (ticket_spec, _) = TicketKeys::generate();
        let env = Env {
            database_url: database_url.clone(),
            redis_url: redis_server.url(),
            ticket_spec,
            dir: dir.to_path_buf(),
        };
        let creds_path = dir.join("credentials.json");
        let declaration = dir.join("chaos.toml");
        std::fs::write(&declaration, config.declaration(backend_url))
            .expect("write the declaration");
        {
            let env = env.clone();
            let (creds, decl) = (creds_path.clone(), declaration.clone());
            tokio::task::spawn_blocking(move || {
                run_cli(&env, &["migrate"]);
                let creds = creds.to_str().expect("utf-8 path");
                run_cli(
                    &env,
                    &[
                        "bootstrap",
                        "--application",
                        "chaos",
                        "--namespace",
                        "main",
                        "--output",
                        creds,
                    ],
                );
                run_cli(
                    &env,
                    &[
                        "apply",
                        "--credentials",
                        creds,
                        "-f",
                        decl.to_str().expect("utf-8 path"),
                    ],
                );
            })
            .await
            .expect("migrate, bootstrap, apply");
        }
        let creds: BootstrapOutput =
            serde_json::from_str(&std::fs::read_to_string(&creds_path).expect("credentials"))
                .expect("bootstrap output");
        let pg = sluice_store::db::connect(&database_url, 4)
            .await
            .expect("connect PostgreSQL");
        let redis = sluice_redis::connect_redis(&env.redis_url, 1)
            .await
            .expect("connect Redis");
        let gateways = vec![
            GatewayProcess::start(&env, "0", client.clone()).await,
            GatewayProcess::start(&env, "1", client.clone()).await,
        ];
        let lease = config.timing.lease;
        let executors = vec![
            ExecutorProcess::start(&env, "0", lease).await,
            ExecutorProcess::start(&env, "1", lease).await,
        ];
        Stack {
            redis_server: Some(redis_server),
            pg_server: Some(pg_server),
            creds,
            pg,
            redis,
            gateways,
            executors,
        }
    }

    /// Waits up to 3 s until executor `i` holds rows of `command` (any command if None), so a
    /// fault of the executor meets work in hand; returns how many it holds.
    pub(super) async fn executor_holding_work(&self, i: usize, command: Option<&str>) -> i64 {
        let owner = self.executors[i].owner;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let holding = self.held_by(owner, command).await;
            if holding > 0 || tokio::time::Instant::now() >= deadline {
                return holding;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Rows `executing` or `retry_wait` under `owner`'s lease.
    async fn held_by(&self, owner: Uuid, command: Option<&str>) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM commands WHERE application_id = $1
               AND status IN ('executing', 'retry_wait') AND lease_owner = $2
               AND ($3::text IS NULL OR command = $3)",
        )
        .bind(self.creds.application_id)
        .bind(owner)
        .bind(command)
        .fetch_one(&self.pg)
        .await
        .unwrap_or(0)
    }

    /// The last lines of every process log, and which processes are gone.
    pub(super) fn log_tails(&mut self) -> String {
        let mut text = String::new();
        for (i, gateway) in self.gateways.iter_mut().enumerate() {
            text.push_str(&format!("--- gateway {i} ---\n{}\n", gateway.log_tail(15)));
            if !gateway.is_running() {
                text.push_str(&format!("gateway {i} is not running at the end\n"));
            }
        }
        for (i, executor) in self.executors.iter_mut().enumerate() {
            text.push_str(&format!(
                "--- executor {i} ---\n{}\n",
                executor.log_tail(15)
            ));
            if !executor.is_running() {
                text.push_str(&format!("executor {i} is not running at the end\n"));
            }
        }
        text
    }
}

/// Rows of the application that are not terminal.
pub(super) async fn open_rows(pg: &PgPool, application_id: Uuid) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1
            AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')",
    )
    .bind(application_id)
    .fetch_one(pg)
    .await
    .ok()
}
