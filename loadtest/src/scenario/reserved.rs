//! The part of a run that `--mode reserved` adds: the holders' plan the callers share, the
//! pool's row sampled from the first arrival until every reservation is decided, and at the
//! end the wait for the last expiry, the checks and the figures of the report.

use std::sync::Arc;
use std::time::Duration;

use sluice_durable::ids::NamespaceId;
use sqlx::PgPool;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::holder::{CONFIRM, Holding};
use super::options::{Interrupted, Mode, Options};
use crate::bench_stack::BoxError;
use crate::holders::{Answer, Choice, Held, Logged};
use crate::invariants::States;
use crate::record::Recorded;
use crate::report::{Check, Reservations, Target};
use crate::sampler::{self, PoolSamples};

/// How long after the last reservation's `expires_at` (database time) a reservation may still
/// be held before that counts against the run: the sweeper's rounds are a second apart in every
/// executor, and a loaded machine delays them.
const EXPIRY_MARGIN: Duration = Duration::from_secs(5);

/// A reserved run's own state while it goes on.
pub(super) struct Reserved {
    pub(super) holding: Arc<Holding>,
    /// Stops the pool sampler when dropped, including when the run ends early.
    stop: DropGuard,
    samples: tokio::task::JoinHandle<PoolSamples>,
    reservation_seconds: u32,
}

/// What a reserved run adds to the report.
pub(super) struct Verdict {
    pub(super) checks: Vec<Check>,
    pub(super) figures: Reservations,
    pub(super) target: Target,
}

impl Reserved {
    /// `None` unless the run is `--mode reserved`.
    pub(super) fn start(
        options: &Options,
        pg: &PgPool,
        namespace: NamespaceId,
        pool: &'static str,
    ) -> Option<Self> {
        if options.mode != Mode::Reserved {
            return None;
        }
        let stop = CancellationToken::new();
        Some(Self {
            holding: Arc::new(Holding::new(options)),
            samples: sampler::pool(pg.clone(), namespace, pool, stop.clone()),
            stop: stop.drop_guard(),
            reservation_seconds: options.reservation_seconds,
        })
    }

    /// Once every command is terminal: waits for the last reservation to expire (or the
    /// margin to pass), then checks the rows and reports the figures.
    pub(super) async fn finish(
        self,
        pg: &PgPool,
        namespace: NamespaceId,
        pool: &str,
        recorded: &Recorded,
        interrupt: &CancellationToken,
    ) -> Result<Verdict, BoxError> {
        tokio::select! {
            settled = crate::invariants::await_settled(pg, namespace, pool, EXPIRY_MARGIN) => {
                settled?;
            }
            () = interrupt.cancelled() => return Err(Interrupted.into()),
        }
        drop(self.stop);
        let samples = self.samples.await?;
        let logged = self.holding.log.finish();
        let (checks, states) =
            crate::invariants::reserved(pg, namespace, pool, &logged, &samples).await?;
        let figures = figures(
            self.reservation_seconds,
            &states,
            &logged,
            &samples,
            recorded,
        );
        let target = Target {
            name: "confirms and releases without an answer".into(),
            measured: figures.unanswered.to_string(),
            goal: "0".into(),
            met: figures.unanswered == 0,
        };
        Ok(Verdict {
            checks,
            figures,
            target,
        })
    }
}

fn figures(
    reservation_seconds: u32,
    states: &States,
    logged: &Logged,
    samples: &PoolSamples,
    recorded: &Recorded,
) -> Reservations {
    let count = |f: &dyn Fn(&Held) -> bool| logged.held.iter().filter(|h| f(h)).count() as u64;
    let changed = |choice: Choice| {
        count(&|h| {
            h.choice == choice && matches!(h.answer, Some(Answer::Decided { changed: true, .. }))
        })
    };
    let refused = |choice: Choice| {
        count(&|h| h.choice == choice && matches!(h.answer, Some(Answer::Conflict { .. })))
    };
    Reservations {
        reservation_seconds,
        reserved: states.rows,
        confirmed: states.confirmed,
        released: states.released,
        expired: states.expired,
        still_reserved: states.reserved,
        chose_confirm: count(&|h| h.choice == Choice::Confirm),
        chose_release: count(&|h| h.choice == Choice::Release),
        let_lapse: count(&|h| h.choice == Choice::Lapse),
        confirms_changed: changed(Choice::Confirm),
        confirms_refused: refused(Choice::Confirm),
        releases_changed: changed(Choice::Release),
        releases_refused: refused(Choice::Release),
        unanswered: count(&|h| matches!(h.answer, Some(Answer::Unanswered(_)))),
        confirm_latency: recorded
            .endpoints
            .get(CONFIRM)
            .map(|e| e.latency.clone())
            .unwrap_or_default(),
        pool_samples: samples.samples,
        capacity: samples.capacity,
        peak_held: samples.peak_held,
        peak_reserved: samples.peak_reserved,
    }
}
