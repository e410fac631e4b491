//! What a run is asked to do: the scenario, its callers and budgets, the stack, and the bounds
//! that keep a run finite.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::bench_stack::{BoxError, Servers};
use crate::stack::StackKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// N distinct subjects arrive within one window (default one second): each reads the offer,
    /// enqueues a claim, polls its ticket and reads its result.
    Drop,
    /// The same journey at a fixed arrival rate.
    Steady,
    /// Backend services enqueueing webhook commands with limit keys at a fixed rate.
    Backend,
    /// People queueing in a waiting room: some join its pre-queue before the start, the rest
    /// after; each polls its place, uses the room with a pass it verifies itself, then leaves,
    /// abandons its pass, or lets it run out.
    Room,
}

/// How the sale's quota command takes its unit (`drop` and `steady`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A won unit is the winner's for good.
    Committed,
    /// A won unit is held for `--reservation-seconds`: a share of winners confirm it, some
    /// release it, the rest let it expire.
    Reserved,
}

/// Every knob of a run; defaults reproduce the figures of `docs/performance.md`.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct Options {
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// `drop`: distinct subjects arriving within `--window-ms`; `room`: the people who join.
    #[arg(long, default_value_t = 10_000)]
    pub subjects: u64,
    /// `drop`: the window the arrivals are spread over, evenly.
    #[arg(long, default_value_t = 1_000)]
    pub window_ms: u64,
    /// `steady` and `backend`: arrivals per second.
    #[arg(long, default_value_t = 500.0)]
    pub rate: f64,
    /// `steady` and `backend`: seconds of arrivals.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Units in the quota pool of the sale.
    #[arg(long, default_value_t = 1_000)]
    pub capacity: i64,
    /// `drop` and `steady`: the quota mode of the sale's `claim`.
    #[arg(long, value_enum, default_value = "committed")]
    pub mode: Mode,
    /// `--mode reserved`: how long a won unit is held before the database's clock expires it.
    #[arg(long, default_value_t = 5)]
    pub reservation_seconds: u32,
    /// `--mode reserved`: the share of winners who confirm their reservation.
    #[arg(long, default_value_t = 0.6)]
    pub confirm_share: f64,
    /// `--mode reserved`: the share of winners who release theirs (the rest let it expire).
    #[arg(long, default_value_t = 0.1)]
    pub release_share: f64,
    /// `--mode reserved`: the longest a winner thinks before confirming or releasing (each
    /// waits a uniformly random time up to it, from reading its result).
    #[arg(long, default_value_t = 1_000)]
    pub think_ms: u64,
    /// The command's intake budget (the drop's protection: the rest is refused at once).
    #[arg(long, default_value_t = 2_000)]
    pub intake_per_second: u32,
    #[arg(long, default_value_t = 2_000)]
    pub intake_burst: u32,
    #[arg(long, default_value_t = 500)]
    pub intake_max_in_flight: u32,
    /// The command's admission budget (executions started per second, permits at once).
    #[arg(long, default_value_t = 2_000)]
    pub admission_per_second: u32,
    #[arg(long, default_value_t = 64)]
    pub admission_max_in_flight: u32,
    /// The command's deadline, also its `max_wait`.
    #[arg(long, default_value_t = 600)]
    pub deadline_seconds: u64,
    /// How long a caller keeps trying from its arrival before giving up (its outcome is then
    /// unknown unless it was refused).
    #[arg(long, default_value_t = 120)]
    pub patience_seconds: u64,
    /// Do not retry explicit retryable refusals of the enqueue: each caller takes the first
    /// answer to its admission (the result of an accepted command is still read again after a
    /// read budget's `503`, as a poll is).
    #[arg(long)]
    pub no_retry: bool,
    /// `backend`: providers and accounts the calls are spread over.
    #[arg(long, default_value_t = 4)]
    pub providers: u32,
    #[arg(long, default_value_t = 16)]
    pub accounts: u32,
    /// `backend`: the limit keys: starts per second per provider, requests at once per account.
    #[arg(long, default_value_t = 100)]
    pub provider_per_second: u32,
    #[arg(long, default_value_t = 2)]
    pub account_max_in_flight: u32,
    /// `backend`: how long the backend takes per call.
    #[arg(long, default_value_t = 20)]
    pub backend_delay_ms: u64,
    /// `room`: passes live at once (`max_active`).
    #[arg(long, default_value_t = 50)]
    pub room_max_active: u32,
    /// `room`: admissions per minute (`admit_per_minute`; unset: only `max_active` limits).
    #[arg(long)]
    pub room_admit_per_minute: Option<u32>,
    /// `room`: the longest a pass lives from admission, heartbeats or not.
    #[arg(long, default_value_t = 600)]
    pub pass_seconds: u32,
    /// `room`: a pass lives this long from admission or its last heartbeat (at least 5).
    #[arg(long, default_value_t = 5)]
    pub heartbeat_seconds: u32,
    /// `room`: the room's start (`opens_at`), this long after the first arrival (the pre-queue
    /// is open from the run's start).
    #[arg(long, default_value_t = 5)]
    pub opens_in_seconds: u64,
    /// `room`: the share of people who join the pre-queue, spread evenly before the start (the
    /// rest arrive after it, spread over `--after-start-seconds`).
    #[arg(long, default_value_t = 0.5)]
    pub prequeue_share: f64,
    /// `room`: the seconds after the start over which the later arrivals are spread.
    #[arg(long, default_value_t = 5.0)]
    pub after_start_seconds: f64,
    /// `room`: how long an admitted person uses the room, heartbeating as advised.
    #[arg(long, default_value_t = 3_000)]
    pub visit_ms: u64,
    /// `room`: the share of admitted people who give their pass back after their visit.
    #[arg(long, default_value_t = 0.6)]
    pub leave_share: f64,
    /// `room`: the share who abandon at admission: never heartbeat, never leave. The rest
    /// heartbeat through their visit and then let the pass run out without leaving.
    #[arg(long, default_value_t = 0.2)]
    pub abandon_share: f64,
    /// `room`: delete every Redis key of the run's application this many seconds after the
    /// start, with people waiting and admitted (to the application, what a `FLUSHALL` does;
    /// other users of a shared Redis keep theirs): every invariant must hold across it.
    #[arg(long)]
    pub flush_redis_after_seconds: Option<f64>,
    /// How long to wait after the last caller for every row to be terminal.
    #[arg(long, default_value_t = 120)]
    pub drain_seconds: u64,
    /// Connections to the gateway held at once (kept alive and reused; requests beyond them
    /// wait their turn, and the wait counts in their latency). By default one per caller up to
    /// 20,000: a drop's people each open their own. A room of 100,000 on one machine cannot
    /// hold one per person; fewer stand for the pooled connections of a load balancer in
    /// front of the gateway.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Refuse runs larger than this many callers (the generator is bounded in count).
    #[arg(long, default_value_t = 200_000)]
    pub max_callers: u64,
    #[command(flatten)]
    #[serde(skip)]
    pub servers: Servers,
    #[arg(long, value_enum, default_value = "dev")]
    #[serde(skip)]
    pub stack: StackKind,
    /// `--stack split`: how many `sluice serve` gateways (one set of ticket keys, one Redis,
    /// one executor); callers are spread over them by index.
    #[arg(long, default_value_t = 1)]
    pub gateways: usize,
    /// `drop`, `steady` or `backend` on several gateways (`--stack cluster`, or `split` with
    /// `--gateways 2` or more): SIGTERM the last gateway this many seconds after the first
    /// arrival, probe its public and admin `/readyz` every 50 ms until it exits, and witness
    /// from the callers' side what became of every request on its connections (see
    /// `loadtest/src/sigterm.rs`: new connections then go to the other gateways, as a load
    /// balancer's would).
    #[arg(long)]
    pub sigterm_gateway_after: Option<f64>,
    /// `--sigterm-gateway-after`'s signal: `kill` (SIGKILL) is the witness's control, whose
    /// requests in flight must show as transport failures (the run then exits 2).
    #[arg(long, value_enum, default_value = "term")]
    pub gateway_signal: crate::sigterm::GatewaySignal,
    /// The gateways' `gateway.shutdown_delay_ms` (`SLUICE_GATEWAY_SHUTDOWN_DELAY_MS`): how long
    /// a signalled gateway keeps accepting while its `/readyz` says `draining` (unset: the
    /// default, 0).
    #[arg(long)]
    pub shutdown_delay_ms: Option<u64>,
    /// The gateway of `--stack external` (its executor must be running too).
    #[arg(long)]
    pub gateway: Option<String>,
    /// The `sluice` binary for `dev` and `split` (default: next to this one).
    #[arg(long)]
    #[serde(skip)]
    pub sluice_bin: Option<PathBuf>,
    /// Where the reports (and the stack's logs) are written.
    #[arg(long, default_value = "target/loadtest")]
    #[serde(skip)]
    pub out: PathBuf,
    /// No progress bar (also off when stderr is not a terminal).
    #[arg(long)]
    #[serde(skip)]
    pub quiet: bool,
    /// Cancelled to stop a run early (Ctrl-C): the callers stop, the stack is stopped and the
    /// scratch database dropped, and the run ends with [`Interrupted`].
    #[arg(skip)]
    #[serde(skip)]
    pub interrupt: CancellationToken,
}

/// A run stopped by [`Options::interrupt`] before its report.
#[derive(Debug, thiserror::Error)]
#[error("interrupted: the stack was stopped and the scratch database dropped; no report")]
pub struct Interrupted;

impl Options {
    /// The callers of this run and when each arrives, relative to the first.
    pub(super) fn arrivals(&self) -> Result<Vec<Duration>, BoxError> {
        let (count, spacing) = match self.scenario {
            Scenario::Drop => (
                self.subjects,
                Duration::from_millis(self.window_ms).as_secs_f64() / self.subjects.max(1) as f64,
            ),
            Scenario::Room => {
                self.check_room()?;
                (self.subjects, 0.0)
            }
            Scenario::Steady | Scenario::Backend => {
                if !(self.rate > 0.0 && self.rate.is_finite() && self.seconds > 0.0) {
                    return Err("--rate and --seconds must be positive".into());
                }
                ((self.rate * self.seconds).round() as u64, 1.0 / self.rate)
            }
        };
        self.check_mode()?;
        self.check_sigterm()?;
        if self.scenario != Scenario::Room && self.flush_redis_after_seconds.is_some() {
            return Err("--flush-redis-after-seconds is the room scenario's".into());
        }
        if count == 0 {
            return Err("a run needs at least one caller".into());
        }
        if count > self.max_callers {
            return Err(format!(
                "{count} callers is more than --max-callers {}",
                self.max_callers
            )
            .into());
        }
        if self.scenario == Scenario::Room {
            return Ok(self.room_arrivals());
        }
        Ok((0..count)
            .map(|i| Duration::from_secs_f64(spacing * i as f64))
            .collect())
    }

    /// `room`: the pre-queue's share spread evenly over the time before the start, less a
    /// second (so every one of them has joined before the draw), then the rest spread evenly
    /// over `--after-start-seconds` from the start.
    fn room_arrivals(&self) -> Vec<Duration> {
        let early = ((self.subjects as f64) * self.prequeue_share).round() as u64;
        let late = self.subjects - early.min(self.subjects);
        let before = self.opens_in_seconds.saturating_sub(1) as f64;
        let spread = |n: u64, over: f64, from: f64| {
            (0..n).map(move |i| Duration::from_secs_f64(from + over * i as f64 / n.max(1) as f64))
        };
        spread(early, before, 0.0)
            .chain(spread(
                late,
                self.after_start_seconds,
                self.opens_in_seconds as f64,
            ))
            .collect()
    }

    /// The room's knobs make sense together.
    fn check_room(&self) -> Result<(), BoxError> {
        let share = |s: f64| (0.0..=1.0).contains(&s);
        if !(share(self.leave_share)
            && share(self.abandon_share)
            && self.leave_share + self.abandon_share <= 1.0
            && share(self.prequeue_share))
        {
            return Err(
                "--leave-share and --abandon-share must be within 0..=1 and sum to at \
                        most 1, and --prequeue-share within 0..=1"
                    .into(),
            );
        }
        if !(5..=86_400).contains(&self.heartbeat_seconds)
            || !(10..=86_400).contains(&self.pass_seconds)
            || self.heartbeat_seconds > self.pass_seconds
        {
            return Err(
                "--heartbeat-seconds must be within 5..=86400, --pass-seconds within \
                        10..=86400, and a heartbeat no longer than the pass"
                    .into(),
            );
        }
        if self.room_max_active == 0 || self.room_admit_per_minute == Some(0) {
            return Err("--room-max-active and --room-admit-per-minute must be positive".into());
        }
        if !(3..=86_400).contains(&self.opens_in_seconds) {
            return Err(
                "--opens-in-seconds must be within 3..=86400: the pre-queue needs a \
                        moment before the start"
                    .into(),
            );
        }
        if !(self.after_start_seconds >= 0.0 && self.after_start_seconds.is_finite()) {
            return Err("--after-start-seconds must be zero or more".into());
        }
        if self
            .flush_redis_after_seconds
            .is_some_and(|after| !(after >= 0.0 && after.is_finite()))
        {
            return Err("--flush-redis-after-seconds must be zero or more".into());
        }
        // A slot is held at least as long as the first pass lives (a pass cannot be recalled,
        // so a leave frees nothing earlier): a run whose last person would wait past its
        // patience would report people lost that the room never lost.
        let first_pass = (self.heartbeat_seconds as u64)
            .max(sluice_store::rooms::FIRST_PASS_PICKUP.as_secs())
            .min(self.pass_seconds as u64);
        let by_slots = self.subjects as f64 / f64::from(self.room_max_active) * first_pass as f64;
        let by_rate = self
            .room_admit_per_minute
            .map_or(0.0, |n| self.subjects as f64 * 60.0 / f64::from(n));
        let last_wait = by_slots.max(by_rate);
        if last_wait > self.patience_seconds as f64 {
            return Err(format!(
                "{} people through this room take at least {last_wait:.0} s, more than \
                 --patience-seconds {}: raise it, or lower --subjects",
                self.subjects, self.patience_seconds
            )
            .into());
        }
        Ok(())
    }
}

impl Options {
    /// `--gateways` and `--sigterm-gateway-after` only where they mean something.
    fn check_sigterm(&self) -> Result<(), BoxError> {
        if self.gateways == 0 || (self.gateways > 1 && self.stack != StackKind::Split) {
            return Err("--gateways is the split stack's (at least 1)".into());
        }
        let Some(after) = self.sigterm_gateway_after else {
            return Ok(());
        };
        if !(after >= 0.0 && after.is_finite()) {
            return Err("--sigterm-gateway-after must be zero or more".into());
        }
        if self.scenario == Scenario::Room {
            return Err("--sigterm-gateway-after is for drop, steady and backend runs".into());
        }
        let several = match self.stack {
            StackKind::Cluster => true,
            StackKind::Split => self.gateways >= 2,
            StackKind::Dev | StackKind::External => false,
        };
        if !several {
            return Err(
                "--sigterm-gateway-after needs gateways to carry on: --stack cluster, or \
                 --stack split --gateways 2 (or more)"
                    .into(),
            );
        }
        Ok(())
    }

    /// The reserved-mode knobs make sense together, and only for a sale.
    fn check_mode(&self) -> Result<(), BoxError> {
        if self.mode == Mode::Committed {
            return Ok(());
        }
        if self.scenario == Scenario::Backend {
            return Err("--mode reserved is a sale's (drop or steady), not backend's".into());
        }
        if !(1..=86_400).contains(&self.reservation_seconds) {
            return Err("--reservation-seconds must be within 1..=86400".into());
        }
        let share = |s: f64| (0.0..=1.0).contains(&s);
        if !(share(self.confirm_share)
            && share(self.release_share)
            && self.confirm_share + self.release_share <= 1.0)
        {
            return Err(
                "--confirm-share and --release-share must be within 0..=1 and sum to at most 1"
                    .into(),
            );
        }
        Ok(())
    }
}

impl Scenario {
    /// The scenario's name in reports and directory names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Drop => "drop",
            Scenario::Steady => "steady",
            Scenario::Backend => "backend",
            Scenario::Room => "room",
        }
    }
}

/// Every caller may hold a connection, and so may the gateway for each of them (a started stack
/// inherits this process's limit): a run that would hit the limit mid-drop is refused up front,
/// naming the fix, instead of reporting the refused connections as unknown outcomes.
pub(super) fn check_open_files(callers: u64) -> Result<(), BoxError> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft: Option<u64> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok());
    let needed = callers.min(crate::api::MAX_IN_FLIGHT as u64) + 1_024;
    match soft {
        Some(soft) if soft < needed => Err(format!(
            "{callers} callers need about {needed} open files, the limit is {soft}: raise it \
             first (`ulimit -n {needed}`, up to `ulimit -Hn`)"
        )
        .into()),
        _ => Ok(()),
    }
}
