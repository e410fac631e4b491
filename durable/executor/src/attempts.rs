//! The attempts an executor holds, keyed by attempt (never by command: after a lease lapsed, the
//! same executor may hold a newer attempt of the same command beside the old one, and the old
//! one's end must not touch the new one's bookkeeping).
//!
//! Each attempt is renewed every third of the lease, in PostgreSQL and in Redis side by side, and
//! stopped — its work abandoned, so it can neither land nor act at its backend any more — as
//! soon as it is known lost (a renewal touched no row, or found a permit gone) or may be lost:
//! when its permits might lapse before the next renewal round has ended, they could be handed
//! to another command. That moment is the attempt's [`Fence`]: a request checks it as it goes
//! out, so an executor that was paused past it (and whose renewal round has not yet run to stop
//! the attempt) sends nothing. A lease that PostgreSQL alone could not renew (PostgreSQL out of reach)
//! does not stop it: the sweeper rescues a row only once its attempt's permits have lapsed too,
//! so an attempt that keeps them cannot be started twice, and its request at its backend keeps
//! counting against the limits it holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::fence::Fence;
use sluice_durable::ids::{ApplicationId, CommandId};
use sluice_durable::lifecycle::{AttemptId, Stores, held};
use sluice_redis::AppKeys;

/// One attempt in hand.
#[derive(Debug, Clone)]
struct Held {
    command_id: CommandId,
    application_id: ApplicationId,
    /// The lease zsets its permits are in, as the claimed row names them: passed to renew.lua
    /// up front, so a renewal round is one call.
    permits: Vec<String>,
    /// Cancelled when the attempt is stopped.
    stop: CancellationToken,
    /// Open while its permits in Redis are sure to outlive the next renewal round: until the
    /// send time of the last renewal that extended them all (or of the admission), plus the
    /// lease, less [`stop_margin`].
    fence: Fence,
}

/// What the holder of an attempt gets: the token that stops its work and the fence its requests
/// go through.
#[derive(Debug, Clone)]
pub struct Hold {
    pub stop: CancellationToken,
    pub fence: Fence,
}

/// The registry.
#[derive(Default)]
pub struct Attempts {
    held: Mutex<HashMap<AttemptId, Held>>,
}

impl Attempts {
    /// Takes `attempt` of `command_id` in hand; its permits (in the lease zsets `permits`) were
    /// taken at `admitted_at`.
    pub fn hold(
        &self,
        attempt: AttemptId,
        command_id: CommandId,
        application_id: ApplicationId,
        permits: Vec<String>,
        admitted_at: Instant,
        lease: Duration,
    ) -> Hold {
        let hold = Hold {
            stop: CancellationToken::new(),
            fence: Fence::until(fence_time(admitted_at, lease)),
        };
        self.lock().insert(
            attempt,
            Held {
                command_id,
                application_id,
                permits,
                stop: hold.stop.clone(),
                fence: hold.fence.clone(),
            },
        );
        hold
    }

    /// The attempt ended (landed, given back, handed to its backend, or stopped).
    pub fn release(&self, attempt: AttemptId) {
        self.lock().remove(&attempt);
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AttemptId, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops `attempt`: its work is abandoned and its bookkeeping dropped.
    fn stop(&self, attempt: AttemptId, why: &str) {
        if let Some(held) = self.lock().remove(&attempt) {
            tracing::warn!(command_id = %held.command_id, %attempt, why, "attempt stopped");
            sluice_metrics::attempt_stopped();
            held.fence.close();
            held.stop.cancel();
        }
    }

    /// One renewal round: PostgreSQL's leases and each application's permits, side by side and
    /// each bounded by [`call_bound`] (a PostgreSQL out of reach must not hold the permits'
    /// renewal back until they lapse); then every attempt that is lost, or may lose its permits
    /// before the next round ends, is stopped.
    pub async fn renew(&self, stores: Stores<'_>, lease: Duration) {
        let snapshot: Vec<(AttemptId, Held)> = self
            .lock()
            .iter()
            .map(|(attempt, held)| (*attempt, held.clone()))
            .collect();
        if snapshot.is_empty() {
            return;
        }
        let bound = call_bound(lease);
        tokio::join!(
            self.renew_in_postgres(stores, &snapshot, lease, bound),
            self.renew_in_redis(stores, &snapshot, lease, bound),
        );
        let doomed: Vec<AttemptId> = self
            .lock()
            .iter()
            .filter(|(_, held)| !held.fence.is_open())
            .map(|(attempt, _)| *attempt)
            .collect();
        for attempt in doomed {
            self.stop(attempt, "its lease could not be renewed in time");
        }
    }

    async fn renew_in_postgres(
        &self,
        stores: Stores<'_>,
        snapshot: &[(AttemptId, Held)],
        lease: Duration,
        bound: Duration,
    ) {
        let pairs: Vec<(CommandId, AttemptId)> = snapshot
            .iter()
            .map(|(attempt, held)| (held.command_id, *attempt))
            .collect();
        match tokio::time::timeout(bound, held::renew_leases(stores, &pairs, lease)).await {
            Ok(Ok(renewed)) => {
                for (attempt, _) in snapshot {
                    if !renewed.contains(attempt) {
                        self.stop(*attempt, "its row is not ours any more");
                    }
                }
            }
            // The row stays ours while the permits do (see the module's doc).
            Ok(Err(error)) => {
                sluice_metrics::storage_error(&error);
                tracing::warn!(%error, "lease renewal failed in PostgreSQL");
            }
            Err(_) => tracing::warn!(?bound, "lease renewal in PostgreSQL timed out"),
        }
    }

    async fn renew_in_redis(
        &self,
        stores: Stores<'_>,
        snapshot: &[(AttemptId, Held)],
        lease: Duration,
        bound: Duration,
    ) {
        // Per application: its attempts, and the lease zsets their permits are in.
        type Round = (Vec<(CommandId, AttemptId)>, Vec<String>);
        let mut by_app: HashMap<ApplicationId, Round> = HashMap::new();
        for (attempt, held) in snapshot {
            let (attempts, permits) = by_app.entry(held.application_id).or_default();
            attempts.push((held.command_id, *attempt));
            permits.extend(held.permits.iter().cloned());
        }
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        for (application_id, (attempts, permits)) in by_app {
            let keys = AppKeys::new(application_id);
            let sent = Instant::now();
            let renewal = held::renew_permits(stores, &keys, &attempts, &permits, lease_ms);
            match tokio::time::timeout(bound, renewal).await {
                Ok(Ok(Some(renewed))) => {
                    for ((_, attempt), ok) in attempts.iter().zip(renewed) {
                        if ok {
                            if let Some(held) = self.lock().get(attempt) {
                                held.fence.extend_to(fence_time(sent, lease));
                            }
                        } else {
                            self.stop(*attempt, "a permit lapsed or the attempt is not on record");
                        }
                    }
                }
                // Being rebuilt: the rebuild restores the permits of every row in hand under its
                // attempt; until then they are not renewed.
                Ok(Ok(None)) => {}
                Ok(Err(error)) => {
                    sluice_metrics::storage_error(&error);
                    tracing::warn!(%error, "lease renewal failed in Redis");
                }
                Err(_) => tracing::warn!(?bound, "lease renewal in Redis timed out"),
            }
        }
    }
}

/// How long one renewal call may take: a sixth of the lease, so that a round (a third of the
/// lease apart from the previous one) with its slowest call still ends, and can stop what it
/// could not renew, before permits renewed two rounds earlier lapse.
fn call_bound(lease: Duration) -> Duration {
    lease / 6
}

/// How long before its permits may lapse an attempt is stopped: the next renewal round starts a
/// third of the lease from now and its call may take [`call_bound`], and only then could it stop
/// the attempt.
fn stop_margin(lease: Duration) -> Duration {
    lease / 3 + call_bound(lease)
}

/// When the fence of permits extended at `sent` for `lease` closes.
fn fence_time(sent: Instant, lease: Duration) -> std::time::Instant {
    (sent + lease.saturating_sub(stop_margin(lease))).into_std()
}
