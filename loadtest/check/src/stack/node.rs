//! One `sluice` process of the stack behind its two proxies: started (again, after a kill) on
//! the same ports, killed, signalled.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use sluice_servers::free_port;
use tokio::process::{Child, Command};

use super::{Env, StackError};
use crate::client::Http;
use crate::proxy::Proxy;

/// One `sluice` process with its two proxies; started again on the same ports after a kill.
pub struct Node {
    pub name: String,
    pub args: Vec<String>,
    pub redis_proxy: Arc<Proxy>,
    pub pg_proxy: Arc<Proxy>,
    /// The public port (gateways) and the port answering `/healthz` (both kinds).
    pub port: u16,
    pub health_port: u16,
    pub(super) child: Option<Child>,
    pub(super) starts: usize,
}

impl Node {
    pub(super) async fn new(
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

    pub(super) fn log_path(&self, dir: &Path, start: usize) -> PathBuf {
        dir.join(format!("{}-{start}.log", self.name))
    }

    fn is_gateway(&self) -> bool {
        self.args.first().is_some_and(|a| a == "serve")
    }

    /// Starts the process, again while it exits at once (one that cannot reach a store at start
    /// does), for up to `patience`; the run's supervisor tries again later, as systemd would.
    /// Always on the same ports: the callers were given a gateway's address once, as a load
    /// balancer is (the listeners reuse addresses, and the ports come from below the kernel's
    /// ephemeral range, so nothing else takes them meanwhile).
    pub(super) async fn spawn(
        &mut self,
        env: &Env,
        http: &Http,
        patience: Duration,
    ) -> Result<(), StackError> {
        let mut last = String::new();
        let give_up = tokio::time::Instant::now() + patience;
        for attempt in 0.. {
            if attempt > 0 && tokio::time::Instant::now() >= give_up {
                break;
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
            "{} did not start within {patience:?}; its last log:\n{}",
            self.name,
            last.lines().rev().take(30).collect::<Vec<_>>().join("\n")
        )))
    }

    /// Whether the process exited by itself (then forgotten, to be started again): its status.
    pub(super) fn exited(&mut self) -> Option<String> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(format!("{} exited by itself ({status})", self.name))
    }

    pub(super) async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    pub(super) async fn signal(&self, signal: &str) {
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
