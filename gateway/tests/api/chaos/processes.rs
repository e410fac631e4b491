//! The chaos stack's real processes: `sluice serve` and `sluice execute` against the run's own
//! Redis and PostgreSQL, each killable with SIGKILL and startable again, or frozen with SIGSTOP
//! and thawed with SIGCONT.
//!
//! (`crate::support::sluice_process` spawns against the shared Redis; a chaos run kills and restarts its
//! Redis, so it spawns its own.)

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use uuid::Uuid;

use super::load::{Answer, Client, send};
use crate::support::free_port;

/// What every process of the stack is started with.
#[derive(Debug, Clone)]
pub(super) struct Env {
    pub(super) database_url: String,
    pub(super) redis_url: String,
    pub(super) ticket_spec: String,
    pub(super) dir: PathBuf,
}

/// Runs `sluice <args>` to completion (migrate, bootstrap, apply); panics with its output when
/// it fails.
pub(super) fn run_cli(env: &Env, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATABASE_URL", &env.database_url)
        .env("SLUICE_REDIS_URL", &env.redis_url)
        .env("SLUICE_LOG", "warn")
        .output()
        .unwrap_or_else(|error| panic!("run sluice {}: {error}", args.join(" ")));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "sluice {} failed: {text}",
        args.join(" ")
    );
    text
}

/// One `sluice` process, SIGKILLed and reaped when dropped; stdout and stderr (JSON logs) go to
/// its log file.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Process {
    fn spawn(env: &Env, args: &[&str], extra: &[(&str, &str)], log: PathBuf) -> Process {
        let out = std::fs::File::create(&log).expect("create the process log");
        let err = out.try_clone().expect("clone the log handle");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("SLUICE_DATABASE_URL", &env.database_url)
            .env("SLUICE_REDIS_URL", &env.redis_url)
            .envs(extra.iter().copied())
            .env("SLUICE_LOG", "info")
            .env("SLUICE_LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|error| panic!("spawn sluice {}: {error}", args.join(" ")));
        Process { child, log }
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` (`STOP`, `CONT`) with the `kill` utility (no `unsafe` libc call).
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} {}", self.child.id());
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a process log.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A `sluice serve` process on a fixed loopback port. Started again after a kill on the same
/// port when it can be bound, else on a fresh one; `base` always holds the current address, and
/// the load reads it for every request.
pub(super) struct GatewayProcess {
    name: String,
    env: Env,
    port: u16,
    /// The admin listener's port: the detailed `/readyz` that start-ups wait for.
    admin_port: u16,
    pub(super) base: Arc<RwLock<String>>,
    process: Option<Process>,
    starts: usize,
    client: Client,
}

impl GatewayProcess {
    pub(super) async fn start(env: &Env, name: &str, client: Client) -> GatewayProcess {
        let port = free_port();
        let mut gateway = GatewayProcess {
            name: name.to_string(),
            env: env.clone(),
            port,
            admin_port: free_port(),
            base: Arc::new(RwLock::new(format!("http://127.0.0.1:{port}"))),
            process: None,
            starts: 0,
            client,
        };
        gateway.start_again().await;
        gateway
    }

    /// Starts the process (again) and waits until the detailed `/readyz` answers `200`: on the
    /// same ports first, on fresh ports if the process cannot serve there.
    pub(super) async fn start_again(&mut self) {
        let mut last_log = String::new();
        for attempt in 0..4 {
            if attempt >= 2 {
                self.port = free_port();
                self.admin_port = free_port();
            }
            let listen = format!("127.0.0.1:{}", self.port);
            let admin_listen = format!("127.0.0.1:{}", self.admin_port);
            let log = self
                .env
                .dir
                .join(format!("gateway-{}-{}.log", self.name, self.starts));
            self.starts += 1;
            let mut process = Process::spawn(
                &self.env,
                &["serve", "--pg-pool-size", "16"],
                &[
                    ("SLUICE_LISTEN", &listen),
                    ("SLUICE_ADMIN_LISTEN", &admin_listen),
                    ("SLUICE_TICKET_KEYS", &self.env.ticket_spec),
                ],
                log,
            );
            let base = format!("http://{listen}");
            let admin = format!("http://{admin_listen}");
            if ready(&self.client, &admin, &mut process, Duration::from_secs(20)).await {
                *self.base.write().expect("base lock") = base;
                self.process = Some(process);
                return;
            }
            last_log = process.log_text();
            assert!(
                !process.is_running(),
                "gateway {} runs but is not ready within 20 s:\n{}",
                self.name,
                tail(&last_log, 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!(
            "gateway {} did not start in four attempts; last log:\n{}",
            self.name,
            tail(&last_log, 40)
        );
    }

    /// SIGKILL (no drain: requests in flight are cut off).
    pub(super) fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// SIGSTOP: it keeps its sockets, and whatever reaches them waits.
    pub(super) fn freeze(&self) {
        self.process
            .as_ref()
            .expect("a running gateway")
            .signal("STOP");
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub(super) fn thaw(&self) {
        self.process.as_ref().expect("a gateway").signal("CONT");
    }

    pub(super) fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::is_running)
    }

    pub(super) fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|p| tail(&p.log_text(), lines))
            .unwrap_or_default()
    }
}

/// Polls the admin listener's `/readyz` until `200`, the process exits, or `within` passes.
async fn ready(client: &Client, base: &str, process: &mut Process, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if !process.is_running() {
            return false;
        }
        let url = format!("{base}/readyz");
        let answer = send(
            client,
            hyper::Method::GET,
            &url,
            None,
            None,
            Duration::from_secs(2),
        )
        .await;
        if matches!(answer, Answer::Http { status: 200, .. }) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `sluice execute` process with a short lease (the run's, 1.5 s), so a killed or stopped
/// executor's work is taken over quickly, and short webhook retry delays (100 ms doubling up to
/// 2 s), so retried commands drain within a short run.
pub(super) struct ExecutorProcess {
    name: String,
    env: Env,
    lease: Duration,
    process: Option<Process>,
    starts: usize,
    pub(super) owner: Uuid,
}

impl ExecutorProcess {
    pub(super) async fn start(env: &Env, name: &str, lease: Duration) -> ExecutorProcess {
        let mut executor = ExecutorProcess {
            name: name.to_string(),
            env: env.clone(),
            lease,
            process: None,
            starts: 0,
            owner: Uuid::nil(),
        };
        executor.start_again().await;
        executor
    }

    /// Starts the process (again) and waits until it logged "executor running".
    pub(super) async fn start_again(&mut self) {
        let log = self
            .env
            .dir
            .join(format!("executor-{}-{}.log", self.name, self.starts));
        self.starts += 1;
        let lease_ms = self.lease.as_millis().to_string();
        let mut process = Process::spawn(
            &self.env,
            &[
                "execute",
                "--lease-ms",
                &lease_ms,
                "--tick-ms",
                "20",
                "--pg-pool-size",
                "8",
            ],
            &[
                ("SLUICE_EXECUTOR_RETRY_BASE_MS", "100"),
                ("SLUICE_EXECUTOR_RETRY_MAX_MS", "2000"),
            ],
            log,
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(owner) = running_owner(&process.log_text()) {
                self.owner = owner;
                self.process = Some(process);
                return;
            }
            assert!(
                process.is_running() && tokio::time::Instant::now() < deadline,
                "executor {} did not start within 20 s (running: {}):\n{}",
                self.name,
                process.is_running(),
                tail(&process.log_text(), 40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: whatever it holds is left to lease expiry and the other executor.
    pub(super) fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// SIGSTOP: its leases stop being renewed while it still believes it holds them.
    pub(super) fn freeze(&self) {
        self.process
            .as_ref()
            .expect("a running executor")
            .signal("STOP");
    }

    /// SIGCONT after [`freeze`](Self::freeze).
    pub(super) fn thaw(&self) {
        self.process.as_ref().expect("an executor").signal("CONT");
    }

    pub(super) fn is_running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::is_running)
    }

    pub(super) fn log_tail(&self, lines: usize) -> String {
        self.process
            .as_ref()
            .map(|p| tail(&p.log_text(), lines))
            .unwrap_or_default()
    }
}

/// The owner id an executor logged with "executor running".
fn running_owner(log: &str) -> Option<Uuid> {
    log.lines().find_map(|line| {
        let entry: serde_json::Value = serde_json::from_str(line).ok()?;
        if entry["fields"]["message"] != "executor running" {
            return None;
        }
        entry["fields"]["owner"].as_str()?.parse().ok()
    })
}
