//! The system under check, as real processes: its own Redis and a fresh PostgreSQL database,
//! `sluice serve` gateways and `sluice execute` executors, each process reaching each store
//! through a proxy of its own ([`crate::proxy`]) so a fault can cut one link; and the faults.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_servers::{PgServer, RdbSnapshot, RedisServer};
use tokio::process::Command;

use crate::client::Http;
use crate::plan::{Process, Timing};

/// What every process is started with.
#[derive(Clone)]
pub struct Env {
    pub sluice: PathBuf,
    pub dir: PathBuf,
    pub database: String,
    pub ticket_keys: String,
    pub timing: Timing,
}

mod faults;
mod node;

use faults::Held;

pub use node::Node;

pub struct Stack {
    pub env: Env,
    pub redis: Arc<Mutex<RedisServer>>,
    pub redis_url: String,
    pub pg: Arc<Mutex<Option<PgServer>>>,
    pub pg_port: u16,
    pub gateways: Vec<Node>,
    pub executors: Vec<Node>,
    http: Http,
    snapshot: Option<RdbSnapshot>,
    /// What faults hold now (a store, a process): another fault on it waits its turn.
    held: std::collections::HashSet<Held>,
}

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("{0}")]
    Start(String),
    #[error("sluice {command} failed: {output}")]
    Cli { command: String, output: String },
}

impl Stack {
    /// Starts Redis (always its own) and uses `pg` (a server the caller may share between runs,
    /// with a fresh database per run).
    pub async fn start(
        env_base: (PathBuf, PathBuf),
        pg: Arc<Mutex<Option<PgServer>>>,
        timing: Timing,
    ) -> Result<Stack, StackError> {
        let (sluice, dir) = env_base;
        let redis = tokio::task::spawn_blocking(RedisServer::start)
            .await
            .map_err(|e| StackError::Start(format!("redis: {e}")))?;
        let redis_url = redis.url();
        let redis_port = redis.port();
        let (database, pg_port) = {
            let server = pg.lock().unwrap_or_else(|p| p.into_inner());
            let server = server
                .as_ref()
                .ok_or_else(|| StackError::Start("no PostgreSQL".into()))?;
            (String::new(), server.port())
        };
        let fresh = {
            // `fresh_database` is async but needs the server only for its port.
            let admin = format!("postgres://postgres@127.0.0.1:{pg_port}/postgres");
            fresh_database(&admin).await?
        };
        let _ = database;
        let ticket_keys = cli_output(&sluice, &dir, &[], &["keygen"]).await?;
        let env = Env {
            sluice,
            dir,
            database: fresh,
            ticket_keys: ticket_keys.trim().to_string(),
            timing: timing.clone(),
        };
        let mut gateways = Vec::new();
        for i in 0..timing.gateways {
            gateways
                .push(Node::new(format!("gateway-{i}"), &["serve"], redis_port, pg_port).await?);
        }
        let mut executors = Vec::new();
        for i in 0..timing.executors {
            executors
                .push(Node::new(format!("executor-{i}"), &["execute"], redis_port, pg_port).await?);
        }
        Ok(Stack {
            env,
            redis: Arc::new(Mutex::new(redis)),
            redis_url,
            pg,
            pg_port,
            gateways,
            executors,
            http: Http::default(),
            snapshot: None,
            held: Default::default(),
        })
    }

    /// The database URL for the checker's own connections (no proxy).
    pub fn database_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}",
            self.pg_port, self.env.database
        )
    }

    /// Runs `sluice <args>` against the database and Redis directly; its output, or an error.
    pub async fn cli(&self, args: &[&str]) -> Result<String, StackError> {
        let vars = [
            ("SLUICE_DATABASE_URL", self.database_url()),
            ("SLUICE_REDIS_URL", self.redis_url.clone()),
        ];
        cli_output(&self.env.sluice, &self.env.dir, &vars, args).await
    }

    /// Like [`Stack::cli`], but a failure is an answer: (succeeded, output).
    pub async fn cli_verdict(&self, args: &[&str]) -> (bool, String) {
        match self.cli(args).await {
            Ok(output) => (true, output),
            Err(StackError::Cli { output, .. }) => (false, output),
            Err(other) => (false, other.to_string()),
        }
    }

    pub fn gateway_urls(&self) -> Vec<String> {
        self.gateways
            .iter()
            .map(|g| format!("http://127.0.0.1:{}", g.port))
            .collect()
    }

    /// Starts every process and waits until each answers `/healthz`.
    pub async fn start_processes(&mut self) -> Result<(), StackError> {
        let patience = Duration::from_secs(30);
        for i in 0..self.gateways.len() {
            let env = self.env.clone();
            self.gateways[i].spawn(&env, &self.http, patience).await?;
        }
        for i in 0..self.executors.len() {
            let env = self.env.clone();
            self.executors[i].spawn(&env, &self.http, patience).await?;
        }
        Ok(())
    }

    /// The run's supervisor, once: a process that exited by itself is reported (a finding) and,
    /// like one a fault killed and could not start again at once, started again; a Redis no fault
    /// holds that is not running is started again (empty). Nothing a fault holds is touched.
    pub async fn revive(&mut self) -> Vec<String> {
        let mut exits = Vec::new();
        let env = self.env.clone();
        let http = self.http.clone();
        let quick = Duration::from_secs(3);
        for (i, node) in self.gateways.iter_mut().enumerate() {
            if self.held.contains(&Held::Process(Process::Gateway(i))) {
                continue;
            }
            exits.extend(node.exited());
            if node.child.is_none() {
                let _ = node.spawn(&env, &http, quick).await;
            }
        }
        for (i, node) in self.executors.iter_mut().enumerate() {
            if self.held.contains(&Held::Process(Process::Executor(i))) {
                continue;
            }
            exits.extend(node.exited());
            if node.child.is_none() {
                let _ = node.spawn(&env, &http, quick).await;
            }
        }
        if !self.held.contains(&Held::Redis) {
            let redis = Arc::clone(&self.redis);
            let _ = tokio::task::spawn_blocking(move || {
                let mut redis = redis.lock().unwrap_or_else(|p| p.into_inner());
                if !redis.is_running() {
                    redis.restart();
                }
            })
            .await;
        }
        exits
    }

    /// The processes that exited by themselves (a finding) since the supervisor last looked.
    pub fn exited(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        for node in self.gateways.iter_mut().chain(self.executors.iter_mut()) {
            gone.extend(node.exited());
        }
        gone
    }

    /// The last lines of every process's current log.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for node in self.gateways.iter().chain(self.executors.iter()) {
            let path = node.log_path(&self.env.dir, node.starts.saturating_sub(1));
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {} ({}) ---\n", node.name, path.display()));
            out.push_str(&all[all.len().saturating_sub(lines)..].join("\n"));
            out.push('\n');
        }
        out
    }

    pub async fn stop(&mut self) {
        for node in self.gateways.iter_mut().chain(self.executors.iter_mut()) {
            node.kill().await;
            node.redis_proxy.stop();
            node.pg_proxy.stop();
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, StackError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StackError::Start(format!("a server operation panicked: {e}")))
}

async fn cli_output(
    sluice: &Path,
    dir: &Path,
    vars: &[(&str, String)],
    args: &[&str],
) -> Result<String, StackError> {
    let output = Command::new(sluice)
        .args(args)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .env("SLUICE_LOG", "warn")
        .current_dir(dir)
        .output()
        .await
        .map_err(|e| StackError::Start(format!("run {}: {e}", sluice.display())))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(StackError::Cli {
            command: args.join(" "),
            output: text,
        })
    }
}

async fn fresh_database(admin_url: &str) -> Result<String, StackError> {
    use sqlx::Connection;
    let name = format!("check_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(admin_url)
        .await
        .map_err(|e| StackError::Start(format!("PostgreSQL: {e}")))?;
    // The name is made here from a UUID: no caller text reaches the statement.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .map_err(|e| StackError::Start(format!("CREATE DATABASE: {e}")))?;
    let _ = conn.close().await;
    Ok(name)
}

/// One command on a fresh connection (FLUSHALL), ignoring the answer.
async fn redis_command(url: &str, command: &str) {
    use fred::prelude::*;
    let Ok(config) = Config::from_url(url) else {
        return;
    };
    let Ok(client) = Builder::from_config(config).build() else {
        return;
    };
    if client.init().await.is_ok() {
        let _: Result<Value, _> = client
            .custom(fred::cmd!(command), Vec::<String>::new())
            .await;
        let _ = client.quit().await;
    }
}
