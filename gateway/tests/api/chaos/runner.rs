//! A chaos run: its own Redis and PostgreSQL, two `sluice serve` and two `sluice execute`
//! processes, a steady load, and five faults one at a time, each followed by a recovery wait.
//! Then the load stops, every command drains, and [`super::checks`] judges the records against
//! PostgreSQL.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use sluice_durable::projection::{self, AppKeys};
use sluice_durable::tenancy::BootstrapOutput;
use sluice_durable::testkit::{PgServer, RedisServer};
use sluice_gateway::ticket::TicketKeys;
use sqlx::PgPool;
use uuid::Uuid;

use super::checks::{self, Report};
use super::load::{self, Answer, Load, LoadConfig, Shared};
use super::processes::{Env, ExecutorProcess, GatewayProcess, run_cli};

/// The size and pace of a run.
#[derive(Debug, Clone)]
pub(super) struct ChaosConfig {
    pub(super) load: LoadConfig,
    /// Subjects added at once just before each fault, so every fault meets a backlog.
    pub(super) burst: u64,
    pub(super) capacity: i64,
    pub(super) admission_per_second: u32,
    pub(super) max_in_flight: i64,
    pub(super) warmup: Duration,
    /// How long a killed or stopped server or process stays down.
    pub(super) hold: Duration,
    /// Steady load after a recovery before the next fault.
    pub(super) settle: Duration,
    pub(super) recovery_limit: Duration,
    pub(super) drain_limit: Duration,
}

impl ChaosConfig {
    /// Small enough for CI on two cores (debug build).
    pub(super) fn ci() -> ChaosConfig {
        ChaosConfig {
            load: LoadConfig {
                subjects_per_second: 30,
                max_concurrency: 48,
                second_every: 4,
                replay_every: 10,
                max_attempts: 6,
                pollers: 2,
                polls_per_second: 20,
                offers: 4,
            },
            burst: 80,
            capacity: 700,
            admission_per_second: 50,
            max_in_flight: 4,
            warmup: Duration::from_secs(2),
            hold: Duration::from_secs(1),
            settle: Duration::from_millis(1500),
            recovery_limit: Duration::from_secs(30),
            drain_limit: Duration::from_secs(40),
        }
    }

    /// The longer run whose table `deploy/chaos/run.sh` prints (release build).
    pub(super) fn table() -> ChaosConfig {
        ChaosConfig {
            load: LoadConfig {
                subjects_per_second: 100,
                max_concurrency: 128,
                second_every: 4,
                replay_every: 10,
                max_attempts: 6,
                pollers: 4,
                polls_per_second: 100,
                offers: 8,
            },
            burst: 300,
            capacity: 4000,
            admission_per_second: 200,
            max_in_flight: 4,
            warmup: Duration::from_secs(3),
            hold: Duration::from_secs(2),
            settle: Duration::from_secs(4),
            recovery_limit: Duration::from_secs(60),
            drain_limit: Duration::from_secs(120),
        }
    }

    fn declaration(&self) -> String {
        format!(
            r#"
[[command]]
code = "claim"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
deadline_seconds = 600
intake = {{ per_second = 1000000, burst = 1000000, max_in_flight = 100000 }}
admission = {{ per_second = {rate}, burst = {burst}, max_in_flight = {max}, max_queue = 1000000 }}
handler = {{ kind = "quota", pool = "stock", mode = "committed" }}

[[quota_pool]]
code = "stock"
capacity = {capacity}
"#,
            rate = self.admission_per_second,
            burst = (self.admission_per_second / 5).max(1),
            max = self.max_in_flight,
            capacity = self.capacity,
        )
    }
}

/// The five faults, injected in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    FlushAll,
    RedisRestart,
    PostgresRestart,
    GatewayKill,
    ExecutorKill,
}

impl Fault {
    pub(super) const ALL: [Fault; 5] = [
        Fault::FlushAll,
        Fault::RedisRestart,
        Fault::PostgresRestart,
        Fault::GatewayKill,
        Fault::ExecutorKill,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            Fault::FlushAll => "(a) Redis FLUSHALL",
            Fault::RedisRestart => "(b) Redis killed, restarted empty",
            Fault::PostgresRestart => "(c) PostgreSQL restarted",
            Fault::GatewayKill => "(d) gateway SIGKILL, started again",
            Fault::ExecutorKill => "(e) executor SIGKILL, started again",
        }
    }

    /// Redis loses the projection: a rebuild follows.
    fn loses_redis(self) -> bool {
        matches!(self, Fault::FlushAll | Fault::RedisRestart)
    }
}

/// One fault as it happened (times since the start of the run).
#[derive(Debug, Clone)]
pub(super) struct FaultRun {
    pub(super) fault: Fault,
    /// Just before the fault.
    pub(super) injected: Duration,
    /// The fault is in effect: FLUSHALL answered, the server or process is dead.
    pub(super) effective: Duration,
    /// The server or process is back (= `effective` for FLUSHALL).
    pub(super) cleared: Duration,
    /// An enqueue sent after `effective` was accepted (checked live; the exact time comes from
    /// the records).
    pub(super) recovered_live: bool,
    pub(super) note: String,
    pub(super) positions: Option<PositionCheck>,
}

/// What [`Stack::inject`] reports.
struct Injected {
    injected: Duration,
    effective: Duration,
    note: String,
}

/// Ticket positions of commands still waiting right after a rebuild, polled in descending
/// queue order (positions only shrink over time, so a later poll of an earlier command can
/// only show a smaller position): per resource they must increase with `queue_seq`.
#[derive(Debug, Clone, Default)]
pub(super) struct PositionCheck {
    pub(super) waiting: usize,
    pub(super) compared: usize,
    pub(super) violations: Vec<String>,
}

/// Live permits of the command's lease zset (members scored by expiry, Redis time), as
/// `admit.lua` counts them.
const LIVE_PERMITS: &str = "local t = redis.call('TIME') \
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
    return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')";

/// What the permit sampler saw.
#[derive(Debug, Clone, Default)]
pub(super) struct Sampled {
    pub(super) max: i64,
    pub(super) samples: u64,
    pub(super) non_zero: u64,
    pub(super) errors: u64,
}

/// Everything a finished run hands to the checks.
pub(super) struct Finished {
    pub(super) config: ChaosConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) faults: Vec<FaultRun>,
    pub(super) sampled: Sampled,
    pub(super) pg: PgPool,
    pub(super) creds: BootstrapOutput,
    pub(super) load_stopped: Duration,
    pub(super) drained: Option<Duration>,
    pub(super) counters: HashMap<String, i64>,
    /// Intake reservations still in Redis at the end (a killed gateway's last ones live on
    /// until they expire, and count meanwhile).
    pub(super) reservations: Option<i64>,
    pub(super) logs: String,
}

/// The run's servers and processes (dropped in this order: the processes before the servers).
struct Stack {
    gateways: Vec<GatewayProcess>,
    executors: Vec<ExecutorProcess>,
    creds: BootstrapOutput,
    pg: PgPool,
    redis: Pool,
    redis_server: Option<RedisServer>,
    pg_server: Option<PgServer>,
}

impl Stack {
    async fn start(config: &ChaosConfig, dir: &std::path::Path, client: &load::Client) -> Stack {
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
        std::fs::write(&declaration, config.declaration()).expect("write the declaration");
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
        let pg = sluice_durable::db::connect(&database_url, 4)
            .await
            .expect("connect PostgreSQL");
        let redis = projection::connect_redis(&env.redis_url, 2)
            .await
            .expect("connect Redis");
        let gateways = vec![
            GatewayProcess::start(&env, "0", client.clone()).await,
            GatewayProcess::start(&env, "1", client.clone()).await,
        ];
        let executors = vec![
            ExecutorProcess::start(&env, "0").await,
            ExecutorProcess::start(&env, "1").await,
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

    /// Injects `fault` and brings the server or process back after `hold`; returns once it is
    /// back.
    async fn inject(&mut self, fault: Fault, hold: Duration, shared: &Shared) -> Injected {
        let since = |at: Instant| at.saturating_duration_since(shared.clock);
        let injected = shared.now();
        let (effective, note) = match fault {
            Fault::FlushAll => {
                let _: () = self.redis.next().flushall(false).await.expect("FLUSHALL");
                (shared.now(), String::new())
            }
            Fault::RedisRestart => {
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
                (since(dead), String::new())
            }
            Fault::PostgresRestart => {
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
                (since(stopped), String::new())
            }
            Fault::GatewayKill => {
                self.gateways[0].kill();
                let dead = shared.now();
                tokio::time::sleep(hold).await;
                self.gateways[0].start_again().await;
                (dead, String::new())
            }
            Fault::ExecutorKill => {
                self.executors[1].kill();
                let dead = shared.now();
                tokio::time::sleep(hold).await;
                self.executors[1].start_again().await;
                (dead, String::new())
            }
        };
        Injected {
            injected,
            effective,
            note,
        }
    }

    /// Waits up to 3 s until the executor about to be killed holds claimed rows; returns how
    /// many it holds.
    async fn executor_holding_work(&self) -> i64 {
        let owner = self.executors[1].owner;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        loop {
            let holding = self.held_by(owner).await;
            if holding > 0 || tokio::time::Instant::now() >= deadline {
                return holding;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Rows `executing` under `owner`'s lease.
    async fn held_by(&self, owner: Uuid) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM commands WHERE application_id = $1 AND status = 'executing'
               AND lease_owner = $2",
        )
        .bind(self.creds.application_id)
        .bind(owner)
        .fetch_one(&self.pg)
        .await
        .unwrap_or(0)
    }

    /// The positions check right after a rebuild (see [`PositionCheck`]).
    async fn check_positions(&self, shared: &Shared, fault: Fault) -> PositionCheck {
        let waiting: Vec<(Uuid, String, i64)> = sqlx::query_as(
            "SELECT id, resource_key, queue_seq FROM commands
              WHERE application_id = $1 AND status = 'accepted'
                AND accepted_at < now() - interval '200 milliseconds'
              ORDER BY queue_seq DESC LIMIT 400",
        )
        .bind(self.creds.application_id)
        .fetch_all(&self.pg)
        .await
        .expect("waiting commands");
        let tickets = shared.ticket_map();
        let mut seen: HashMap<String, Vec<(i64, u64, Uuid)>> = HashMap::new();
        let mut check = PositionCheck {
            waiting: waiting.len(),
            ..PositionCheck::default()
        };
        for (id, resource, seq) in &waiting {
            let Some(ticket) = tickets.get(id) else {
                continue;
            };
            let answer = shared.poll(1, *id, ticket).await;
            if let Answer::Http {
                status: 200, body, ..
            } = answer
                && body["data"]["status"] == "accepted"
                && let Some(position) = body["data"]["queue"]["position"].as_u64()
            {
                seen.entry(resource.clone())
                    .or_default()
                    .push((*seq, position, *id));
            }
        }
        for (resource, mut polled) in seen {
            polled.sort();
            check.compared += polled.len();
            for pair in polled.windows(2) {
                let ((seq_a, pos_a, id_a), (seq_b, pos_b, id_b)) = (pair[0], pair[1]);
                if pos_a >= pos_b {
                    check.violations.push(format!(
                        "{}: resource {resource}: command {id_a} (queue_seq {seq_a}) at position \
                         {pos_a}, command {id_b} (queue_seq {seq_b}) at position {pos_b}",
                        fault.label()
                    ));
                }
            }
        }
        check
    }

    fn log_tails(&self) -> String {
        let mut text = String::new();
        for (i, gateway) in self.gateways.iter().enumerate() {
            text.push_str(&format!("--- gateway {i} ---\n{}\n", gateway.log_tail(15)));
        }
        for (i, executor) in self.executors.iter().enumerate() {
            text.push_str(&format!(
                "--- executor {i} ---\n{}\n",
                executor.log_tail(15)
            ));
        }
        text
    }
}

/// Samples the live permits of `key` until `stop`.
async fn sample_permits(redis: Pool, key: String, stop: Arc<AtomicBool>) -> Sampled {
    let mut sampled = Sampled::default();
    while !stop.load(Ordering::Relaxed) {
        let live: Result<i64, _> = redis
            .next()
            .eval(LIVE_PERMITS, vec![key.clone()], Vec::<String>::new())
            .await;
        match live {
            Ok(live) => {
                sampled.samples += 1;
                sampled.max = sampled.max.max(live);
                sampled.non_zero += u64::from(live > 0);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(_) => {
                sampled.errors += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    sampled
}

/// Rows of the application that are not terminal.
async fn open_rows(pg: &PgPool, application_id: Uuid) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1
            AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')",
    )
    .bind(application_id)
    .fetch_one(pg)
    .await
    .ok()
}

/// Runs the whole thing and judges it.
pub(super) async fn run(config: ChaosConfig) -> Report {
    let clock = Instant::now();
    let dir = tempfile::Builder::new()
        .prefix("sluice-chaos-")
        .tempdir()
        .expect("tempdir");
    let client = load::client();
    let mut stack = Stack::start(&config, dir.path(), &client).await;
    let set_up = clock.elapsed();

    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_permits(
        stack.redis.clone(),
        AppKeys::new(stack.creds.application_id).command_leases(stack.creds.namespace_id, "claim"),
        stop_sampler.clone(),
    ));
    let load = Load::start(
        config.load.clone(),
        clock,
        client,
        stack.gateways.iter().map(|g| g.base.clone()).collect(),
        stack.creds.credential.clone(),
    );
    let shared = load.shared.clone();
    tokio::time::sleep(config.warmup).await;

    let mut faults = Vec::new();
    for fault in Fault::ALL {
        load.burst(config.burst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let holding = if fault == Fault::ExecutorKill {
            Some(stack.executor_holding_work().await)
        } else {
            None
        };
        let Injected {
            injected,
            effective,
            mut note,
        } = stack.inject(fault, config.hold, &shared).await;
        if let Some(holding) = holding {
            note = format!("killed holding {holding} executing rows");
        }
        let cleared = shared.now();
        let deadline = tokio::time::Instant::now() + config.recovery_limit;
        while !shared.accepted_since(effective) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let recovered_live = shared.accepted_since(effective);
        let positions = if fault.loses_redis() && recovered_live {
            Some(stack.check_positions(&shared, fault).await)
        } else {
            None
        };
        faults.push(FaultRun {
            fault,
            injected,
            effective,
            cleared,
            recovered_live,
            note,
            positions,
        });
        tokio::time::sleep(config.settle).await;
    }

    let shared = load.stop().await;
    let load_stopped = shared.now();
    let deadline = tokio::time::Instant::now() + config.drain_limit;
    let mut drained = None;
    while tokio::time::Instant::now() < deadline {
        if open_rows(&stack.pg, stack.creds.application_id).await == Some(0) {
            drained = Some(shared.now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_sampler.store(true, Ordering::Relaxed);
    let sampled = sampler.await.expect("permit sampler");
    let counters: HashMap<String, i64> = stack
        .redis
        .next()
        .hgetall(AppKeys::new(stack.creds.application_id).count())
        .await
        .unwrap_or_default();
    let reservations: Option<i64> = stack
        .redis
        .next()
        .zcard(
            AppKeys::new(stack.creds.application_id)
                .reservations(stack.creds.namespace_id, "claim"),
        )
        .await
        .ok();
    let mut logs = stack.log_tails();
    for (i, gateway) in stack.gateways.iter_mut().enumerate() {
        if !gateway.is_running() {
            logs.push_str(&format!("gateway {i} is not running at the end\n"));
        }
    }
    for (i, executor) in stack.executors.iter_mut().enumerate() {
        if !executor.is_running() {
            logs.push_str(&format!("executor {i} is not running at the end\n"));
        }
    }
    let finished = Finished {
        config,
        shared,
        faults,
        sampled,
        pg: stack.pg.clone(),
        creds: stack.creds.clone(),
        load_stopped,
        drained,
        counters,
        reservations,
        logs,
    };
    let mut report = checks::judge(&finished).await;
    report.set_up = set_up;
    report.total = clock.elapsed();
    if !report.violations.is_empty() {
        // Keep the process logs for whoever reads the failure.
        report.log_dir = Some(dir.keep().display().to_string());
    }
    drop(stack);
    report
}
