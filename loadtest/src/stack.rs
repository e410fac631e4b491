//! The Sluice processes a load run measures: started by the run itself (`sluice dev`,
//! `sluice serve` and `sluice execute` as two processes, or three of each over a Redis Cluster)
//! on free loopback ports, or an external gateway that is already running.
//!
//! Started processes log to files in the run's output directory, so their output never mixes
//! with the progress bar, and are stopped with SIGTERM (a graceful drain) when the run ends;
//! `kill_on_drop` covers a run that fails half way.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

use crate::bench_stack::BoxError;
use crate::driver::HttpClient;
use crate::report::PollSources;

/// How the stack is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StackKind {
    /// `sluice dev`: gateway and executor in one process, as `deploy/local.sh` runs them.
    Dev,
    /// `sluice serve` and `sluice execute`: gateway and executor measured separately.
    Split,
    /// A gateway that is already running at `--gateway` (with its executor), on the database
    /// given by `--database-url`.
    External,
    /// Three `sluice serve` gateways sharing their ticket keys and three `sluice execute`
    /// executors, over a Redis Cluster (`--redis-url` listing its nodes, or three masters with a
    /// replica each that the run starts itself): the multi-node deployment on one machine.
    Cluster,
}

/// Gateways and executors of a `cluster` stack.
const CLUSTER_NODES: usize = 3;

/// A process of the stack, for CPU and memory sampling.
#[derive(Debug, Clone)]
pub struct Watched {
    pub name: String,
    pub pid: u32,
}

pub struct Stack {
    pub kind: StackKind,
    /// The first gateway: where the run's own reads (status, the offer's warm-up) go.
    pub base: String,
    /// Every gateway; callers are spread over them by their index.
    pub bases: Vec<String>,
    /// Where readiness is asked: the admin listener's detailed `/readyz` (every projection
    /// ready) of each gateway this stack starts, the public one of an external gateway.
    ready_urls: Vec<String>,
    pub description: String,
    children: Vec<(String, Child)>,
}

/// What starting a stack needs.
pub struct StackSpec<'a> {
    pub kind: StackKind,
    pub sluice_bin: &'a Path,
    pub database_url: &'a str,
    pub redis_url: &'a str,
    pub external_gateway: Option<&'a str>,
    /// Logs and `sluice dev`'s state directory.
    pub dir: &'a Path,
    /// Extra environment of the gateway process (`sluice serve`, or `sluice dev`), e.g. a
    /// setting a benchmark needs other than its default.
    pub gateway_env: &'a [(&'a str, &'a str)],
    /// `split`: how many `sluice serve` processes (one set of ticket keys); 1 otherwise.
    pub gateways: usize,
}

/// A gateway taken out of a stack ([`Stack::take_gateway`]): its process is the taker's.
pub struct TakenGateway {
    /// `gateway 2`.
    pub name: String,
    pub child: Child,
    /// `http://host:port`: its public listener.
    pub base: String,
    /// `http://host:port`: its admin listener.
    pub admin: String,
}

impl Stack {
    pub async fn start(spec: StackSpec<'_>, client: &HttpClient) -> Result<Self, BoxError> {
        let stack = match spec.kind {
            StackKind::External => {
                let base = spec
                    .external_gateway
                    .ok_or("--stack external needs --gateway URL")?
                    .trim_end_matches('/')
                    .to_string();
                crate::bench_stack::ensure_loopback(&base)?;
                Self {
                    kind: spec.kind,
                    description: format!("external gateway at {base}"),
                    ready_urls: vec![format!("{base}/readyz")],
                    bases: vec![base.clone()],
                    base,
                    children: Vec::new(),
                }
            }
            StackKind::Dev => {
                let listen = free_loopback_addr()?;
                let admin = free_loopback_addr()?;
                let child = spawn(
                    &spec,
                    "sluice-dev",
                    &[
                        "dev",
                        "--listen",
                        &listen,
                        "--admin-listen",
                        &admin,
                        "--dir",
                        &spec.dir.join("sluice-dev").display().to_string(),
                    ],
                    spec.gateway_env,
                )?;
                Self {
                    kind: spec.kind,
                    base: format!("http://{listen}"),
                    bases: vec![format!("http://{listen}")],
                    ready_urls: vec![format!("http://{admin}/readyz")],
                    description: "sluice dev (gateway and executor in one process)".into(),
                    children: vec![("sluice dev".into(), child)],
                }
            }
            StackKind::Split => {
                run_to_end(&spec, "sluice-migrate", &["migrate"]).await?;
                let (ticket_keys, _) = sluice_gateway::identity::ticket::TicketKeys::generate();
                let mut env = vec![("SLUICE_TICKET_KEYS", ticket_keys.as_str())];
                env.extend_from_slice(spec.gateway_env);
                let count = spec.gateways.max(1);
                let (mut bases, mut ready_urls, mut children) =
                    (Vec::new(), Vec::new(), Vec::new());
                for n in 1..=count {
                    let listen = free_loopback_addr()?;
                    let admin = free_loopback_addr()?;
                    // One gateway keeps the names of the runs before several were possible.
                    let (log, name) = if count == 1 {
                        ("sluice-serve".to_string(), "gateway".to_string())
                    } else {
                        (format!("sluice-serve-{n}"), format!("gateway {n}"))
                    };
                    let gateway = spawn(
                        &spec,
                        &log,
                        &["serve", "--listen", &listen, "--admin-listen", &admin],
                        &env,
                    )?;
                    bases.push(format!("http://{listen}"));
                    ready_urls.push(format!("http://{admin}/readyz"));
                    children.push((name, gateway));
                }
                let executor = spawn(&spec, "sluice-execute", &["execute"], &[])?;
                children.push(("executor".into(), executor));
                Self {
                    kind: spec.kind,
                    base: bases[0].clone(),
                    bases,
                    ready_urls,
                    description: if count == 1 {
                        "sluice serve + sluice execute (two processes)".into()
                    } else {
                        format!(
                            "{count} sluice serve (one set of ticket keys) + sluice execute, \
                             on one Redis"
                        )
                    },
                    children,
                }
            }
            StackKind::Cluster => {
                if !spec.redis_url.contains(',') {
                    return Err(
                        "--stack cluster runs over a Redis Cluster: --redis-url must list \
                                its nodes (comma-separated), or be left to the run"
                            .into(),
                    );
                }
                run_to_end(&spec, "sluice-migrate", &["migrate"]).await?;
                // One set of ticket keys for every gateway: a ticket issued by one is polled at
                // any other.
                let (ticket_keys, _) = sluice_gateway::identity::ticket::TicketKeys::generate();
                let mut env = vec![("SLUICE_TICKET_KEYS", ticket_keys.as_str())];
                env.extend_from_slice(spec.gateway_env);
                let (mut bases, mut ready_urls, mut children) =
                    (Vec::new(), Vec::new(), Vec::new());
                for n in 1..=CLUSTER_NODES {
                    let listen = free_loopback_addr()?;
                    let admin = free_loopback_addr()?;
                    let gateway = spawn(
                        &spec,
                        &format!("sluice-serve-{n}"),
                        &["serve", "--listen", &listen, "--admin-listen", &admin],
                        &env,
                    )?;
                    bases.push(format!("http://{listen}"));
                    ready_urls.push(format!("http://{admin}/readyz"));
                    children.push((format!("gateway {n}"), gateway));
                }
                for n in 1..=CLUSTER_NODES {
                    let executor = spawn(&spec, &format!("sluice-execute-{n}"), &["execute"], &[])?;
                    children.push((format!("executor {n}"), executor));
                }
                Self {
                    kind: spec.kind,
                    base: bases[0].clone(),
                    bases,
                    ready_urls,
                    description: format!(
                        "{CLUSTER_NODES} sluice serve + {CLUSTER_NODES} sluice execute over a \
                         Redis Cluster"
                    ),
                    children,
                }
            }
        };
        stack.wait_healthy(client, spec.dir).await?;
        Ok(stack)
    }

    /// Takes gateway `index` (0-based, as in [`Self::bases`]) out of the stack: its process is
    /// then the caller's to signal and wait for, and [`Self::stop`] leaves it alone. Only a
    /// `split` or `cluster` gateway (a `dev` process is the executor too); the gateways are the
    /// first children, in the order of `bases`.
    pub fn take_gateway(&mut self, index: usize) -> Option<TakenGateway> {
        if !matches!(self.kind, StackKind::Split | StackKind::Cluster)
            || index >= self.bases.len()
            || self.children.len() <= index
        {
            return None;
        }
        let admin = self
            .ready_urls
            .get(index)?
            .strip_suffix("/readyz")?
            .to_string();
        let (name, child) = self.children.remove(index);
        Some(TakenGateway {
            name,
            child,
            base: self.bases[index].clone(),
            admin,
        })
    }

    /// The started processes (none for an external stack).
    pub fn watched(&self) -> Vec<Watched> {
        self.children
            .iter()
            .filter_map(|(name, child)| {
                child.id().map(|pid| Watched {
                    name: name.clone(),
                    pid,
                })
            })
            .collect()
    }

    async fn wait_healthy(&self, client: &HttpClient, dir: &Path) -> Result<(), BoxError> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // What the first probe that is not ready said: why the stack is not ready yet.
            let mut not_ready = None;
            for url in &self.ready_urls {
                match crate::api::answer_of(client, url).await {
                    Some((200, _)) => {}
                    Some((status, body)) => {
                        not_ready.get_or_insert_with(|| format!("{url}: {status} {}", body.trim()));
                    }
                    None => {
                        not_ready.get_or_insert_with(|| format!("{url}: no answer"));
                    }
                }
            }
            let Some(why) = not_ready else {
                return Ok(());
            };
            if Instant::now() > deadline {
                return Err(format!(
                    "the stack at {} was not ready within 60 s ({why}; logs in {})",
                    self.base,
                    dir.display()
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Writes each gateway's `/metrics` as the run left it to `gateway-<i>.metrics` in `dir`:
    /// the phases of its acceptances, its batches, its refusals, to read after the run. A
    /// gateway whose admin listener this stack does not know (an external one is probed on its
    /// public port, which serves no `/metrics`) is skipped. Returns the ticket polls the
    /// gateways read answered, by source (None when none was read).
    pub async fn save_metrics(&self, client: &HttpClient, dir: &Path) -> Option<PollSources> {
        let mut polls: Option<PollSources> = None;
        for (i, ready) in self.ready_urls.iter().enumerate() {
            let Some(admin) = ready.strip_suffix("/readyz") else {
                continue;
            };
            if let Some((200, text)) =
                crate::api::answer_of(client, &format!("{admin}/metrics")).await
            {
                polls.get_or_insert_default().add_exposition(&text);
                let _ = std::fs::write(dir.join(format!("gateway-{}.metrics", i + 1)), text);
            }
        }
        polls
    }

    /// SIGTERM to every started process, then waits (10 s at most each) for the drain.
    pub async fn stop(mut self) -> Result<(), BoxError> {
        let mut failures = Vec::new();
        for (name, child) in &mut self.children {
            if let Some(pid) = child.id() {
                let _ = std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
            }
            match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => failures.push(format!("{name} exited with {status}")),
                Ok(Err(e)) => failures.push(format!("{name}: {e}")),
                Err(_) => {
                    let _ = child.start_kill();
                    failures.push(format!("{name} did not stop within 10 s of SIGTERM"));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; ").into())
        }
    }
}

/// A loopback address that was free a moment ago (the child binds it).
fn free_loopback_addr() -> Result<String, BoxError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

fn command(spec: &StackSpec<'_>, log: &str, args: &[&str]) -> Result<Command, BoxError> {
    let out = std::fs::File::create(spec.dir.join(format!("{log}.log")))?;
    let mut command = Command::new(spec.sluice_bin);
    command
        .args(args)
        .env("SLUICE_DATABASE_URL", spec.database_url)
        .env("SLUICE_REDIS_URL", spec.redis_url)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .kill_on_drop(true);
    Ok(command)
}

fn spawn(
    spec: &StackSpec<'_>,
    log: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<Child, BoxError> {
    let mut command = command(spec, log, args)?;
    for (key, value) in env {
        command.env(key, value);
    }
    command.spawn().map_err(|e| {
        format!(
            "could not start {} {}: {e} (build it with `cargo build --release -p sluice-gateway`)",
            spec.sluice_bin.display(),
            args.join(" ")
        )
        .into()
    })
}

async fn run_to_end(spec: &StackSpec<'_>, log: &str, args: &[&str]) -> Result<(), BoxError> {
    let status = command(spec, log, args)?.status().await?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("sluice {} failed: {status}", args.join(" ")).into())
    }
}

/// `sluice` next to this binary (both are built into the same target directory).
pub fn default_sluice_bin() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("sluice")))
        .unwrap_or_else(|| PathBuf::from("target/release/sluice"))
}
