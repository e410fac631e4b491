//! The faults a plan schedules, as the stack carries them out: begun, then ended after the hold
//! (instant faults end at once).

use std::sync::Arc;
use std::time::Duration;

use super::{Node, Stack, StackError, blocking, redis_command};
use crate::plan::{FaultKind, Link, LinkFault, Process, Store};
use crate::proxy::{Mode, Proxy};

impl Stack {
    /// The process a fault names.
    fn node(&mut self, process: Process) -> Option<&mut Node> {
        match process {
            Process::Gateway(i) => self.gateways.get_mut(i),
            Process::Executor(i) => self.executors.get_mut(i),
        }
    }

    /// Begins a fault; [`Stack::end_fault`] ends it (instant faults end at once).
    ///
    /// Returns false, doing nothing, for a fault that cannot begin now: one on a store or a
    /// process that another fault already holds (a Redis being restarted cannot be rolled back,
    /// a killed executor cannot be stopped).
    pub async fn begin_fault(&mut self, kind: FaultKind) -> Result<bool, StackError> {
        let Some(target) = target(kind) else {
            return Ok(true);
        };
        if !self.held.insert(target) {
            return Ok(false);
        }
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
        Ok(true)
    }

    /// Ends a fault [`Stack::begin_fault`] began.
    pub async fn end_fault(&mut self, kind: FaultKind) -> Result<(), StackError> {
        if let Some(target) = target(kind) {
            self.held.remove(&target);
        }
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
                    // Not started at once (a store it needs is away): the supervisor goes on.
                    let _ = node.spawn(&env, &http, Duration::from_secs(3)).await;
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
}

/// What a fault holds while it lasts: a store (a whole-server fault) or a process (a kill or a
/// stop). Link faults hold nothing: they change a proxy, which a later one simply changes again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Held {
    Redis,
    Postgres,
    Process(Process),
}

fn target(kind: FaultKind) -> Option<Held> {
    match kind {
        FaultKind::RedisFlush | FaultKind::RedisRestart | FaultKind::RedisRollback => {
            Some(Held::Redis)
        }
        FaultKind::PostgresRestart => Some(Held::Postgres),
        FaultKind::KillGateway(i) => Some(Held::Process(Process::Gateway(i))),
        FaultKind::KillExecutor(i) | FaultKind::StopExecutor(i) => {
            Some(Held::Process(Process::Executor(i)))
        }
        FaultKind::Link(..) => None,
    }
}
