//! The system under check, as real processes: its own Redis and a fresh PostgreSQL database,
//! `sluice serve` gateways and `sluice execute` executors, each process reaching each store
//! through a proxy of its own ([`crate::proxy`]) so a fault can cut one link; and the faults.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_servers::{PgServer, RdbSnapshot, RedisServer, free_port};
use tokio::process::{Child, Command};

use crate::client::Http;
use crate::plan::{FaultKind, Link, LinkFault, Process, Store, Timing};
use crate::proxy::{Mode, Proxy};

/// What every process is started with.
#[derive(Clone)]
pub struct Env {
    pub sluice: PathBuf,
    pub dir: PathBuf,
    pub database: String,
    pub ticket_keys: String,
    pub timing: Timing,
}

/// One `sluice` process with its two proxies; started again on the same ports after a kill.
pub struct Node {
    pub name: String,
    pub args: Vec<String>,
    pub redis_proxy: Arc<Proxy>,
    pub pg_proxy: Arc<Proxy>,
    /// The public port (gateways) and the port answering `/healthz` (both kinds).
    pub port: u16,
    pub health_port: u16,
    child: Option<Child>,
    starts: usize,
}

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
        for i in 0..self.gateways.len() {
            let env = self.env.clone();
            self.gateways[i].spawn(&env, &self.http).await?;
        }
        for i in 0..self.executors.len() {
            let env = self.env.clone();
            self.executors[i].spawn(&env, &self.http).await?;
        }
        Ok(())
    }

    fn node(&mut self, process: Process) -> Option<&mut Node> {
        match process {
            Process::Gateway(i) => self.gateways.get_mut(i),
            Process::Executor(i) => self.executors.get_mut(i),
        }
    }

    /// Begins a fault; [`Stack::end_fault`] ends it (instant faults end at once).
    pub async fn begin_fault(&mut self, kind: FaultKind) -> Result<(), StackError> {
        match kind {
            FaultKind::RedisFlush => {
                let url = self.redis_url.clone();
                redis_command(&url, "FLUSHALL").await;
            }
            FaultKind::RedisRestart => {
                let redis = Arc::clone(&self.redis);
                blocking(move || redis.lock().unwrap_or_else(|p| p.into_inner()).kill()).await?;
            }
            FaultKind::RedisRollback => {
                let redis = Arc::clone(&self.redis);
                self.snapshot = Some(
                    blocking(move || redis.lock().unwrap_or_else(|p| p.into_inner()).snapshot())
                        .await?,
                );
            }
            FaultKind::PostgresRestart => {
                let pg = Arc::clone(&self.pg);
                blocking(move || {
                    if let Some(server) = pg.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                        server.stop();
                    }
                })
                .await?;
            }
            FaultKind::KillGateway(i) | FaultKind::KillExecutor(i) => {
                let process = match kind {
                    FaultKind::KillGateway(_) => Process::Gateway(i),
                    _ => Process::Executor(i),
                };
                if let Some(node) = self.node(process) {
                    node.kill().await;
                }
            }
            FaultKind::StopExecutor(i) => {
                if let Some(node) = self.executors.get(i) {
                    node.signal("STOP").await;
                }
            }
            FaultKind::Link(link, fault) => {
                let proxy = self.proxy(link);
                if let Some(proxy) = proxy {
                    match fault {
                        LinkFault::Delay(ms) => proxy.set(Mode::Delay(Duration::from_millis(ms))),
                        LinkFault::Stall => proxy.set(Mode::Stall),
                        LinkFault::Blackhole => proxy.set(Mode::Blackhole),
                        LinkFault::Reset => proxy.reset(),
                        // Carried out by the run while it holds (see `flap`).
                        LinkFault::Flap { .. } => {}
                    }
                }
            }
        }
        Ok(())
    }

    pub async fn end_fault(&mut self, kind: FaultKind) -> Result<(), StackError> {
        match kind {
            FaultKind::RedisFlush => {}
            FaultKind::RedisRestart => {
                let redis = Arc::clone(&self.redis);
                blocking(move || redis.lock().unwrap_or_else(|p| p.into_inner()).restart()).await?;
            }
            FaultKind::RedisRollback => {
                if let Some(snapshot) = self.snapshot.take() {
                    let redis = Arc::clone(&self.redis);
                    blocking(move || {
                        redis
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .restart_from(&snapshot)
                    })
                    .await?;
                }
            }
            FaultKind::PostgresRestart => {
                let pg = Arc::clone(&self.pg);
                blocking(move || {
                    if let Some(server) = pg.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                        server.start_again();
                    }
                })
                .await?;
            }
            FaultKind::KillGateway(i) | FaultKind::KillExecutor(i) => {
                let process = match kind {
                    FaultKind::KillGateway(_) => Process::Gateway(i),
                    _ => Process::Executor(i),
                };
                let env = self.env.clone();
                let http = self.http.clone();
                if let Some(node) = self.node(process) {
                    node.spawn(&env, &http).await?;
                }
            }
            FaultKind::StopExecutor(i) => {
                if let Some(node) = self.executors.get(i) {
                    node.signal("CONT").await;
                }
            }
            FaultKind::Link(link, fault) => {
                if let Some(proxy) = self.proxy(link) {
                    if fault == LinkFault::Blackhole {
                        // Everything sent meanwhile was thrown away: the connections are reset
                        // (once every answer of what did arrive came back) so their callers see
                        // an error instead of waiting for an answer.
                        proxy
                            .reset_when_quiet(Duration::from_millis(100), Duration::from_secs(3))
                            .await;
                    }
                    proxy.set(Mode::Pass);
                }
            }
        }
        Ok(())
    }

    pub fn proxy(&self, link: Link) -> Option<Arc<Proxy>> {
        let node = match link.process {
            Process::Gateway(i) => self.gateways.get(i),
            Process::Executor(i) => self.executors.get(i),
        }?;
        Some(Arc::clone(match link.store {
            Store::Redis => &node.redis_proxy,
            Store::Postgres => &node.pg_proxy,
        }))
    }

    /// Whether every process still runs (a process that exited by itself is a finding).
    pub fn exited(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        for node in self.gateways.iter_mut().chain(self.executors.iter_mut()) {
            if let Some(child) = node.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                gone.push(format!("{} exited by itself ({status})", node.name));
            }
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

impl Node {
    async fn new(
        name: String,
        args: &[&str],
        redis_port: u16,
        pg_port: u16,
    ) -> Result<Node, StackError> {
        let redis_proxy = Proxy::start(redis_port)
            .await
            .map_err(|e| StackError::Start(format!("proxy: {e}")))?;
        let pg_proxy = Proxy::start(pg_port)
            .await
            .map_err(|e| StackError::Start(format!("proxy: {e}")))?;
        Ok(Node {
            name,
            args: args.iter().map(|s| s.to_string()).collect(),
            redis_proxy,
            pg_proxy,
            port: free_port(),
            health_port: free_port(),
            child: None,
            starts: 0,
        })
    }

    fn log_path(&self, dir: &Path, start: usize) -> PathBuf {
        dir.join(format!("{}-{start}.log", self.name))
    }

    fn is_gateway(&self) -> bool {
        self.args.first().is_some_and(|a| a == "serve")
    }

    async fn spawn(&mut self, env: &Env, http: &Http) -> Result<(), StackError> {
        // A process that cannot reach a store at start exits (a supervisor starts it again):
        // tried for half a minute, as systemd's restart would.
        let mut last = String::new();
        let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
        for attempt in 0.. {
            if attempt > 0 && tokio::time::Instant::now() >= give_up {
                break;
            }
            if attempt == 4 {
                self.port = free_port();
                self.health_port = free_port();
            }
            let log = self.log_path(&env.dir, self.starts);
            self.starts += 1;
            let file = std::fs::File::create(&log).map_err(|e| StackError::Start(e.to_string()))?;
            let err = file
                .try_clone()
                .map_err(|e| StackError::Start(e.to_string()))?;
            // Killed with the checker, whatever ends it: the kernel signals the child when the
            // thread that forked it (a runtime worker, alive as long as the checker) exits.
            let mut command = Command::new("setpriv");
            command
                .args(["--pdeathsig", "KILL", "--"])
                .arg(&env.sluice)
                .args(&self.args)
                .env(
                    "SLUICE_DATABASE_URL",
                    format!(
                        "postgres://postgres@127.0.0.1:{}/{}",
                        self.pg_proxy.port, env.database
                    ),
                )
                .env(
                    "SLUICE_REDIS_URL",
                    format!("redis://127.0.0.1:{}", self.redis_proxy.port),
                )
                .env("SLUICE_LOG", "info")
                .env("SLUICE_LOG_FORMAT", "json")
                .stdin(Stdio::null())
                .stdout(Stdio::from(file))
                .stderr(Stdio::from(err))
                .kill_on_drop(true);
            if self.is_gateway() {
                command
                    .env("SLUICE_LISTEN", format!("127.0.0.1:{}", self.port))
                    .env(
                        "SLUICE_ADMIN_LISTEN",
                        format!("127.0.0.1:{}", self.health_port),
                    )
                    .env("SLUICE_TICKET_KEYS", &env.ticket_keys);
            } else {
                command
                    .env(
                        "SLUICE_METRICS_LISTEN",
                        format!("127.0.0.1:{}", self.health_port),
                    )
                    .env("SLUICE_EXECUTOR_LEASE_MS", env.timing.lease_ms.to_string())
                    .env(
                        "SLUICE_EXECUTOR_SWEEP_INTERVAL_MS",
                        env.timing.sweep_interval_ms.to_string(),
                    )
                    .env("SLUICE_EXECUTOR_RETRY_BASE_MS", "200")
                    .env("SLUICE_EXECUTOR_RETRY_MAX_MS", "1500")
                    .env("SLUICE_EXECUTOR_CATALOG_REFRESH_MS", "500");
            }
            let mut child = command
                .spawn()
                .map_err(|e| StackError::Start(format!("spawn {}: {e}", env.sluice.display())))?;
            let health = format!("http://127.0.0.1:{}/healthz", self.health_port);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                if http.get(&health, None).await.status() == Some(200) {
                    self.child = Some(child);
                    return Ok(());
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    let _ = child.kill().await;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            last = std::fs::read_to_string(&log).unwrap_or_default();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Err(StackError::Start(format!(
            "{} did not start within 30 s; its last log:\n{}",
            self.name,
            last.lines().rev().take(30).collect::<Vec<_>>().join("\n")
        )))
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    async fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.as_ref().and_then(Child::id) {
            let _ = Command::new("kill")
                .args(["-s", signal, &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
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
