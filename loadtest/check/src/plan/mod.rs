//! A plan: everything one checked run does, drawn from a seed and written to a file, so a failing
//! run is replayed (`sluice-check replay <file>`) and shrunk without its seed's generator.
//!
//! The plan holds the declaration in the checker's own terms (rendered to TOML here, never parsed
//! by Sluice's code) and a list of timed operations: enqueues with the answers the backend will
//! give each attempt, cancels, reservation follow-ups, room visits and faults.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod toml;

/// One run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub seed: u64,
    pub declaration: Declaration,
    /// Settings of the processes (executor lease, …) the plan was drawn for.
    pub timing: Timing,
    pub ops: Vec<Op>,
}

/// Timings of the stack, chosen so that faults resolve within a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timing {
    pub lease_ms: u64,
    pub sweep_interval_ms: u64,
    /// Gateways and executors started (each behind its own proxies).
    pub gateways: usize,
    pub executors: usize,
}

/// The namespace's declaration, as the checker drew it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Declaration {
    pub commands: Vec<CommandDecl>,
    pub pools: Vec<PoolDecl>,
    pub rooms: Vec<RoomDecl>,
    /// The application's shared budgets (`POST /v1/application/resources:configure`).
    pub application: Option<AppBudget>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CommandDecl {
    pub code: String,
    pub handler: Handler,
    /// Values of the `res` parameter (the resource key).
    pub resources: Vec<String>,
    /// Values of the `region` and `account` parameters (limit templates name them).
    pub regions: Vec<String>,
    pub accounts: Vec<String>,
    pub limits: Vec<Limit>,
    pub intake: Intake,
    pub admission: Admission,
    pub deadline_seconds: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum Handler {
    Webhook { timeout_ms: u64 },
    Quota { pool: String },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Limit {
    pub key: String,
    pub max_in_flight: Option<u32>,
    pub per_second: Option<u32>,
    pub burst: Option<u32>,
}

impl Limit {
    /// The numbers a key's budget is made of (two templates with the same numbers share a key
    /// consistently).
    pub fn numbers(&self) -> (Option<u32>, Option<u32>, Option<u32>) {
        (
            self.max_in_flight,
            self.per_second,
            self.burst.or(self.per_second),
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Intake {
    pub per_second: u32,
    pub burst: u32,
    pub max_in_flight: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Admission {
    pub per_second: u32,
    pub burst: u32,
    pub max_in_flight: u32,
    pub max_queue: u32,
    pub max_wait_seconds: u32,
    pub per_resource: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolDecl {
    pub code: String,
    pub capacity: u32,
    /// `None`: committed; `Some(s)`: reserved for `s` seconds.
    pub reservation_seconds: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoomDecl {
    pub code: String,
    pub max_active: u32,
    pub admit_per_minute: Option<u32>,
    pub pass_seconds: u32,
    pub heartbeat_seconds: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AppBudget {
    pub max_concurrency: u32,
    pub rate_per_second: u32,
}

/// One operation at `at_ms` after the run's start.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Op {
    pub at_ms: u64,
    pub kind: OpKind,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum OpKind {
    /// A new intent (`n` names it in its input and in every later op).
    Enqueue(Enqueue),
    /// The same request key sent again: same input (a replay), or `other_input` (a conflict).
    Replay {
        n: u32,
        other_input: bool,
        gateway: usize,
    },
    /// `:cancel` of intent `n`, whatever its state.
    Cancel {
        n: u32,
        gateway: usize,
    },
    /// A person's visit to a waiting room.
    Visit(Visit),
    /// An operator raises a room's `max_active` while people wait: the declaration applied
    /// again with the room's new limit (`sluice apply`).
    RaiseRoom {
        room: String,
        max_active: u32,
    },
    Fault(Fault),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Enqueue {
    pub n: u32,
    pub command: String,
    pub subject: String,
    pub resource: String,
    pub region: String,
    pub account: String,
    pub gateway: usize,
    /// A value outside the declared enum: the answer must be `400` naming the field.
    pub invalid: bool,
    /// What the webhook backend answers each attempt (the last one repeats).
    pub answers: Vec<Answer>,
    /// What the holder of a reserved unit does once the command succeeded.
    pub reservation: Reservation,
}

/// One webhook answer of the backend.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum Answer {
    /// `200` with the outcome, after `latency_ms`.
    Decide { latency_ms: u64, succeeded: bool },
    /// `202`; the checker sends `:complete` `complete_after_ms` after the `202` (0: at once,
    /// racing the answer) and, if `late`, a second conflicting one after the command ended.
    Running {
        latency_ms: u64,
        complete_after_ms: u64,
        succeeded: bool,
        late: bool,
    },
    /// `429` with `Retry-After`.
    TooMany { latency_ms: u64, retry_after_s: u64 },
    /// `503`.
    Unavailable { latency_ms: u64 },
    /// `400`: a decided failure.
    Refuse { latency_ms: u64 },
}

impl Answer {
    pub fn latency_ms(&self) -> u64 {
        match self {
            Answer::Decide { latency_ms, .. }
            | Answer::Running { latency_ms, .. }
            | Answer::TooMany { latency_ms, .. }
            | Answer::Unavailable { latency_ms }
            | Answer::Refuse { latency_ms } => *latency_ms,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum Reservation {
    Confirm { after_ms: u64 },
    Release { after_ms: u64 },
    Lapse,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Visit {
    pub person: u32,
    pub room: String,
    pub gateway: usize,
    /// What the person does once admitted.
    pub after: RoomExit,
    /// Sends the first join twice at once (as a double click or a retry racing its original
    /// does): both answers must name one place.
    #[serde(default)]
    pub twice: bool,
    /// Leaves the queue with the ticket after this many polls that found the place waiting,
    /// then polls once more at the other gateway.
    #[serde(default)]
    pub quit_after_polls: Option<u32>,
    /// Once the place has ended (left, or left the queue), sends the first join again with its
    /// key, as a retry whose original's answer was lost: it must name the ended place.
    #[serde(default)]
    pub rejoin_after_end: bool,
}

/// The subject a visiting person joins as (their subject token's `sub`, and `room_places`'
/// `subject`).
pub fn visitor_subject(person: u32) -> String {
    format!("person-{person}")
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum RoomExit {
    /// Heartbeats `beats` times, then leaves.
    Leave { stay_ms: u64, beats: u32 },
    /// Stops heartbeating and walks away (the pass runs out).
    Abandon,
}

/// A fault, held for `hold_ms` (instant faults ignore it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    pub hold_ms: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// `FLUSHALL`: every projection lost at once.
    RedisFlush,
    /// Redis killed, restarted empty after the hold.
    RedisRestart,
    /// Redis restarted from a snapshot taken `hold_ms` earlier.
    RedisRollback,
    /// PostgreSQL stopped for the hold, then started again.
    PostgresRestart,
    /// SIGKILL, started again after the hold.
    KillGateway(usize),
    KillExecutor(usize),
    /// SIGSTOP for the hold, then SIGCONT.
    StopExecutor(usize),
    /// The link of a process to Redis or PostgreSQL (see [`Link`]).
    Link(Link, LinkFault),
}

/// A process's connection to a store, through its own proxy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Link {
    pub process: Process,
    pub store: Store,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Process {
    Gateway(usize),
    Executor(usize),
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Store {
    Redis,
    Postgres,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkFault {
    /// Every byte each way delayed by this many milliseconds.
    Delay(u64),
    /// Bytes to the store held back for the hold, then delivered (a request may run after its
    /// caller gave up: a lost answer).
    Stall,
    /// Bytes to the store thrown away for the hold, then every connection reset: a request sent
    /// meanwhile never runs, and every answer of a request that ran is delivered first.
    Blackhole,
    /// Every connection reset at once (an answer on its way is lost).
    Reset,
    /// A flapping link: one black hole per `period_ms` for the hold, each opening right after an
    /// answer goes back to the caller (so the caller's next request is the one lost, between two
    /// steps of what it does) and ended by a reset once every answer came back (so none is
    /// lost). A request caught in one fails cleanly; what the caller does next is what it shows.
    Flap { period_ms: u64 },
}

impl FaultKind {
    /// Whether the fault can stop a process between a store's answer and what it does next, or
    /// lose an answer of a request that ran: what may legitimately leave a command admitted and
    /// unclaimed until its lease lapses.
    pub fn may_strand_work(&self) -> bool {
        match self {
            FaultKind::KillExecutor(_) | FaultKind::StopExecutor(_) => true,
            FaultKind::PostgresRestart => true,
            FaultKind::Link(link, fault) => {
                matches!(link.process, Process::Executor(_))
                    && match (link.store, fault) {
                        (Store::Postgres, _) => true,
                        (Store::Redis, LinkFault::Stall | LinkFault::Reset) => true,
                        (Store::Redis, LinkFault::Delay(ms)) => *ms >= 500,
                        (Store::Redis, LinkFault::Blackhole | LinkFault::Flap { .. }) => false,
                    }
            }
            FaultKind::RedisFlush | FaultKind::RedisRestart | FaultKind::RedisRollback => true,
            FaultKind::KillGateway(_) => false,
        }
    }

    /// Whether an attempt's outcome can become unknown during the fault: what may strand work,
    /// and any fault on an executor's link (a black hole or a flapping link too), which can keep
    /// it from renewing its lease while a request may be out.
    pub fn may_leave_outcome_unknown(&self) -> bool {
        self.may_strand_work()
            || matches!(self, FaultKind::Link(link, _) if matches!(link.process, Process::Executor(_)))
    }

    /// Whether an executor's claims can fail during the fault (PostgreSQL out of its reach): it
    /// then gives the heads it admitted straight back to their queues.
    pub fn fails_claims(&self) -> bool {
        match self {
            FaultKind::PostgresRestart => true,
            FaultKind::Link(link, _) => {
                matches!(link.process, Process::Executor(_)) && link.store == Store::Postgres
            }
            _ => false,
        }
    }

    /// Whether gateway `gateway` may be unable to read PostgreSQL during the fault.
    pub fn cuts_gateway_from_postgres(&self, gateway: usize) -> bool {
        match self {
            FaultKind::PostgresRestart => true,
            FaultKind::Link(link, _) => {
                link.process == Process::Gateway(gateway) && link.store == Store::Postgres
            }
            _ => false,
        }
    }

    /// Whether Redis loses what it held (and a rebuild restores it from PostgreSQL).
    pub fn loses_redis_data(&self) -> bool {
        matches!(
            self,
            FaultKind::RedisFlush | FaultKind::RedisRestart | FaultKind::RedisRollback
        )
    }

    pub fn label(&self) -> String {
        match self {
            FaultKind::Link(link, fault) => {
                let process = match link.process {
                    Process::Gateway(i) => format!("gateway {i}"),
                    Process::Executor(i) => format!("executor {i}"),
                };
                format!("{fault:?} {process}→{:?}", link.store)
            }
            other => format!("{other:?}"),
        }
    }
}

impl Declaration {
    pub fn command(&self, code: &str) -> Option<&CommandDecl> {
        self.commands.iter().find(|c| c.code == code)
    }

    pub fn pool(&self, code: &str) -> Option<&PoolDecl> {
        self.pools.iter().find(|p| p.code == code)
    }
}

impl Enqueue {
    /// The input the enqueue sends (`n` tags it, so the backend knows which intent it serves).
    pub fn input(&self, decl: &CommandDecl) -> serde_json::Map<String, serde_json::Value> {
        let mut input = serde_json::Map::new();
        input.insert("n".into(), self.n.to_string().into());
        let resource = if self.invalid {
            "not-declared".to_string()
        } else {
            self.resource.clone()
        };
        input.insert("res".into(), resource.into());
        if !decl.regions.is_empty() {
            input.insert("region".into(), self.region.clone().into());
        }
        if !decl.accounts.is_empty() {
            input.insert("account".into(), self.account.clone().into());
        }
        input
    }

    /// The request key of intent `n`.
    pub fn request_key(&self) -> String {
        format!("intent-{}", self.n)
    }
}

/// Plans are written as pretty JSON (a reader can edit one by hand to try a variant).
pub fn save(plan: &Plan, path: &std::path::Path) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(plan).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

pub fn load(path: &std::path::Path) -> Result<Plan, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: not a plan: {e}", path.display()))
}

/// Counts of what a plan does, for the report.
pub fn summary(plan: &Plan) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for op in &plan.ops {
        let name = match &op.kind {
            OpKind::Enqueue(e) if e.invalid => "enqueue (invalid)".to_string(),
            OpKind::Enqueue(_) => "enqueue".to_string(),
            OpKind::Replay { other_input, .. } => {
                if *other_input {
                    "replay (other input)".to_string()
                } else {
                    "replay".to_string()
                }
            }
            OpKind::Cancel { .. } => "cancel".to_string(),
            OpKind::Visit(_) => "room visit".to_string(),
            OpKind::RaiseRoom { .. } => "room max_active raised".to_string(),
            OpKind::Fault(f) => format!("fault {}", f.kind.label()),
        };
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}
