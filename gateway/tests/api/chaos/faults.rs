//! Injecting one planned fault into the stack and bringing the server or process back.

use std::time::{Duration, Instant};

use fred::prelude::*;

use super::load::Shared;
use super::schedule::{FaultKind, Planned};
use super::stack::Stack;

/// What an injection reports (times since the start of the run).
pub(super) struct Injected {
    /// Just before the fault.
    pub(super) injected: Duration,
    /// The fault is in effect: FLUSHALL answered, the server or process is dead or stopped.
    pub(super) effective: Duration,
    /// The server or process is back (= `effective` for FLUSHALL).
    pub(super) cleared: Duration,
    pub(super) note: String,
}

impl Stack {
    /// Injects `planned` and brings the server or process back after its hold; returns once it
    /// is back.
    pub(super) async fn inject(&mut self, planned: &Planned, shared: &Shared) -> Injected {
        let since = |at: Instant| at.saturating_duration_since(shared.clock);
        let injected = shared.now();
        let hold = planned.hold;
        let target = planned.target;
        let (effective, note) = match planned.kind {
            FaultKind::FlushAll => {
                let _: () = self
                    .redis
                    .pool()
                    .next()
                    .flushall(false)
                    .await
                    .expect("FLUSHALL");
                (shared.now(), String::new())
            }
            FaultKind::RedisRestart => {
                let mut server = self.redis_server.take().expect("redis server");
                let (server, dead) = tokio::task::spawn_blocking(move || {
                    server.kill();
                    let dead = Instant::now();
                    std::thread::sleep(hold);
                    server.restart();
                    (server, dead)
                })
                .await
                .expect("restart redis");
                self.redis_server = Some(server);
                (since(dead), format!("down {:.2} s", hold.as_secs_f64()))
            }
            FaultKind::RedisRollback => {
                let mut server = self.redis_server.take().expect("redis server");
                let (mut server, snapshot) = tokio::task::spawn_blocking(move || {
                    let snapshot = server.snapshot();
                    (server, snapshot)
                })
                .await
                .expect("BGSAVE");
                let taken = snapshot.taken;
                // The load goes on: Redis takes writes the dump lacks.
                tokio::time::sleep(hold).await;
                let (server, dead) = tokio::task::spawn_blocking(move || {
                    server.kill();
                    let dead = Instant::now();
                    server.restart_from(&snapshot);
                    (server, dead)
                })
                .await
                .expect("restart redis from the dump");
                self.redis_server = Some(server);
                (
                    since(dead),
                    format!(
                        "the dump was {:.2} s old at the kill",
                        dead.saturating_duration_since(taken).as_secs_f64()
                    ),
                )
            }
            FaultKind::PostgresRestart => {
                let mut server = self.pg_server.take().expect("postgres server");
                let (server, stopped) = tokio::task::spawn_blocking(move || {
                    server.stop();
                    let stopped = Instant::now();
                    std::thread::sleep(hold);
                    server.start_again();
                    (server, stopped)
                })
                .await
                .expect("restart postgres");
                self.pg_server = Some(server);
                (since(stopped), format!("down {:.2} s", hold.as_secs_f64()))
            }
            FaultKind::GatewayKill => {
                self.gateways[target].kill();
                let dead = shared.now();
                tokio::time::sleep(hold).await;
                self.gateways[target].start_again().await;
                (dead, format!("gateway {target}"))
            }
            FaultKind::GatewayStop => {
                self.gateways[target].freeze();
                let stopped = shared.now();
                tokio::time::sleep(hold).await;
                self.gateways[target].thaw();
                (
                    stopped,
                    format!("gateway {target} stopped {:.2} s", hold.as_secs_f64()),
                )
            }
            FaultKind::ExecutorKill => {
                let holding = self.executor_holding_work(target, None).await;
                self.executors[target].kill();
                let dead = shared.now();
                tokio::time::sleep(hold).await;
                self.executors[target].start_again().await;
                (
                    dead,
                    format!("executor {target} killed holding {holding} executing rows"),
                )
            }
            FaultKind::ExecutorStop => {
                // Webhook calls in hand: what a stopped executor may still deliver or land
                // after its leases lapsed and the other executor took the calls over.
                let holding = self.executor_holding_work(target, Some("call")).await;
                self.executors[target].freeze();
                let stopped = shared.now();
                tokio::time::sleep(hold).await;
                self.executors[target].thaw();
                (
                    stopped,
                    format!(
                        "executor {target} stopped {:.2} s holding {holding} call rows",
                        hold.as_secs_f64()
                    ),
                )
            }
        };
        Injected {
            injected,
            effective,
            cleared: shared.now(),
            note,
        }
    }
}
