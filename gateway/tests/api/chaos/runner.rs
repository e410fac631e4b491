//! A chaos run: the backend and the stack, a steady load, the seeded schedule of faults (each
//! after its gap of steady load, most after a burst, each followed by a recovery wait), then
//! the load stops, every command drains, and [`super::checks`] judges the records of the
//! clients and of the backend against PostgreSQL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_store::tenancy::BootstrapOutput;
use sqlx::PgPool;

use super::backend::Backend;
use super::checks;
use super::config::{ChaosConfig, Length};
use super::http;
use super::load::{Load, Shared};
use super::positions::PositionCheck;
use super::report::Report;
use super::schedule::{FaultKind, Planned, Schedule};
use super::stack::{Stack, open_rows};
use super::witness::{Records, Witnessed};

/// One fault as it happened (times since the start of the run).
#[derive(Debug, Clone)]
pub(super) struct FaultRun {
    pub(super) planned: Planned,
    /// Just before the fault.
    pub(super) injected: Duration,
    /// The fault is in effect: FLUSHALL answered, the server or process is dead or stopped.
    pub(super) effective: Duration,
    /// The server or process is back (= `effective` for FLUSHALL).
    pub(super) cleared: Duration,
    /// An enqueue sent after `effective` was accepted (checked live; the exact time comes from
    /// the records).
    pub(super) recovered_live: bool,
    pub(super) note: String,
    pub(super) positions: Option<PositionCheck>,
}

/// Everything a finished run hands to the checks.
pub(super) struct Finished {
    pub(super) config: ChaosConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) faults: Vec<FaultRun>,
    pub(super) witnessed: Witnessed,
    pub(super) pg: PgPool,
    pub(super) creds: BootstrapOutput,
    pub(super) load_stopped: Duration,
    pub(super) drained: Option<Duration>,
    /// `:complete` calls of the backend still unfinished when the drain ended.
    pub(super) completes_pending: usize,
    pub(super) end: Duration,
    pub(super) logs: String,
}

/// Runs the whole thing and judges it.
pub(super) async fn run(config: ChaosConfig) -> Report {
    let clock = Instant::now();
    eprintln!(
        "chaos: seed {} ({}), length {:?}; first faults: {:?}",
        config.seed,
        super::schedule::SEED_VARIABLE,
        config.length,
        Schedule::take(config.seed, config.timing.clone(), FaultKind::ALL.len())
            .iter()
            .map(|p| p.kind.label())
            .collect::<Vec<_>>()
    );
    let dir = tempfile::Builder::new()
        .prefix("sluice-chaos-")
        .tempdir()
        .expect("tempdir");
    let client = http::client();
    let records = Records::new(clock);
    // The backend's answers draw from the seed too (another stream than the schedule's).
    let backend = Backend::start(
        records.clone(),
        config.behaviour.clone(),
        config.seed ^ 0x9e37_79b9_7f4a_7c15,
    )
    .await;
    let mut stack = Stack::start(&config, &backend.url(), dir.path(), &client).await;
    let bases: Vec<_> = stack.gateways.iter().map(|g| g.base.clone()).collect();
    backend.connect(
        client.clone(),
        bases.clone(),
        stack.creds.credential.clone(),
        stack.creds.webhook_secret.clone(),
    );
    let set_up = clock.elapsed();

    let load = Load::start(
        config.load.clone(),
        clock,
        client,
        bases,
        stack.creds.credential.clone(),
    );
    let shared = load.shared.clone();
    tokio::time::sleep(config.warmup).await;

    let mut schedule = Schedule::new(config.seed, config.timing.clone());
    let mut faults: Vec<FaultRun> = Vec::new();
    let first_fault = Instant::now();
    while more_faults(&config.length, faults.len(), first_fault.elapsed()) {
        let planned = schedule.next_fault();
        tokio::time::sleep(planned.gap).await;
        if planned.burst || planned.kind.loses_redis() {
            load.burst(config.burst, config.call_burst);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        eprintln!(
            "chaos: fault {} at {:.1} s: {} (hold {:.2} s, target {})",
            faults.len() + 1,
            shared.now().as_secs_f64(),
            planned.kind.label(),
            planned.hold.as_secs_f64(),
            planned.target
        );
        let injected = stack.inject(&planned, &shared).await;
        let deadline = tokio::time::Instant::now() + config.recovery_limit;
        while !shared.accepted_since(injected.effective) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let recovered_live = shared.accepted_since(injected.effective);
        let phase = format!(
            "fault {} ({} at {:.2} s)",
            faults.len() + 1,
            planned.kind.label(),
            injected.injected.as_secs_f64()
        );
        let positions = if planned.kind.loses_redis() && recovered_live {
            Some(stack.check_positions(&shared, &phase).await)
        } else {
            None
        };
        faults.push(FaultRun {
            planned,
            injected: injected.injected,
            effective: injected.effective,
            cleared: injected.cleared,
            recovered_live,
            note: injected.note,
            positions,
        });
    }
    tokio::time::sleep(config.timing.gap.0).await;

    let shared = load.stop().await;
    let load_stopped = shared.now();
    let deadline = tokio::time::Instant::now() + config.drain_limit;
    let mut drained = None;
    while tokio::time::Instant::now() < deadline {
        if open_rows(&stack.pg, stack.creds.application_id.as_uuid()).await == Some(0)
            && backend.completes_pending() == 0
        {
            drained = Some(shared.now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let finished = Finished {
        completes_pending: backend.completes_pending(),
        witnessed: records.snapshot(),
        config,
        shared,
        faults,
        pg: stack.pg.clone(),
        creds: stack.creds.clone(),
        load_stopped,
        drained,
        end: clock.elapsed(),
        logs: stack.log_tails(),
    };
    let mut report = checks::judge(&finished).await;
    report.set_up = set_up;
    report.total = clock.elapsed();
    if !report.violations.is_empty() {
        // Keep the process logs for whoever reads the failure.
        report.log_dir = Some(dir.keep().display().to_string());
    }
    drop(stack);
    drop(backend);
    report
}

/// Whether the schedule goes on: a fixed count, or at least one round and then until the
/// minutes are spent.
fn more_faults(length: &Length, done: usize, elapsed: Duration) -> bool {
    match *length {
        Length::Faults(n) => done < n,
        Length::Minutes(minutes) => {
            done < FaultKind::ALL.len() || elapsed.as_secs_f64() < minutes * 60.0
        }
    }
}
