//! The attempts an executor holds, keyed by attempt (never by command: after a lease lapsed, the
//! same executor may hold a newer attempt of the same command beside the old one, and the old
//! one's end must not touch the new one's bookkeeping).
//!
//! Each attempt is renewed every third of the lease, in PostgreSQL and in Redis side by side, and
//! stopped — its work abandoned, so it can neither land nor act at its backend any more — as
//! soon as it is known lost (a renewal touched no row, or found a permit gone) or may be lost:
//! when its permits might lapse before the next renewal round has ended, they could be handed
//! to another command. A lease that PostgreSQL alone could not renew (PostgreSQL out of reach)
//! does not stop it: the sweeper rescues a row only once its attempt's permits have lapsed too,
//! so an attempt that keeps them cannot be started twice, and its request at its backend keeps
//! counting against the limits it holds.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::lifecycle::{AttemptId, Stores, held, redis};
use crate::projection::AppKeys;

/// One attempt in hand.
#[derive(Debug, Clone)]
struct Held {
    command_id: Uuid,
    application_id: Uuid,
    /// Cancelled when the attempt is stopped.
    stop: CancellationToken,
    /// Until when its permits in Redis are known to be live: the send time of the last renewal
    /// that extended them all (or of the admission), plus the lease.
    redis_until: Instant,
}

/// The registry.
#[derive(Default)]
pub struct Attempts {
    held: Mutex<HashMap<AttemptId, Held>>,
}

impl Attempts {
    /// Takes `attempt` of `command_id` in hand; its permits were taken at `admitted_at`.
    /// Returns the token that stops it.
    pub fn hold(
        &self,
        attempt: AttemptId,
        command_id: Uuid,
        application_id: Uuid,
        admitted_at: Instant,
        lease: Duration,
    ) -> CancellationToken {
        let stop = CancellationToken::new();
        self.lock().insert(
            attempt,
            Held {
                command_id,
                application_id,
                stop: stop.clone(),
                redis_until: admitted_at + lease,
            },
        );
        stop
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
            crate::metrics::attempt_stopped();
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
        // Permits that might lapse before the next round's end: it starts a third of the lease
        // from now and its call may take `bound`, and only then could it stop them.
        let margin = lease / 3 + bound;
        let doomed: Vec<AttemptId> = self
            .lock()
            .iter()
            .filter(|(_, held)| Instant::now() + margin >= held.redis_until)
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
        let pairs: Vec<(Uuid, AttemptId)> = snapshot
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
                crate::metrics::storage_error(&error);
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
        let mut by_app: HashMap<Uuid, Vec<(Uuid, AttemptId)>> = HashMap::new();
        for (attempt, held) in snapshot {
            by_app
                .entry(held.application_id)
                .or_default()
                .push((held.command_id, *attempt));
        }
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        for (application_id, attempts) in by_app {
            let keys = AppKeys::new(application_id);
            let sent = Instant::now();
            let renewal = redis::renew(stores.redis, stores.scripts, &keys, &attempts, lease_ms);
            match tokio::time::timeout(bound, renewal).await {
                Ok(Ok(Some(renewed))) => {
                    for ((_, attempt), ok) in attempts.iter().zip(renewed) {
                        if ok {
                            if let Some(held) = self.lock().get_mut(attempt) {
                                held.redis_until = sent + lease;
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
                    crate::metrics::storage_error(&error);
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
