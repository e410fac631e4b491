//! The attempts an executor holds, keyed by attempt (never by command: after a lease lapsed, the
//! same executor may hold a newer attempt of the same command beside the old one, and the old
//! one's end must not touch the new one's bookkeeping).
//!
//! Each attempt is renewed every third of the lease, in PostgreSQL and in Redis, and stopped —
//! its work abandoned, so it can neither land nor act at its backend any more — as soon as it is
//! known lost (a renewal touched no row, or found a permit gone) or may be lost: when neither
//! side could be renewed for two thirds of the lease, the lease may lapse before the next
//! renewal, and another executor may then start the command again.

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
    /// Until when the row's lease is known to be ours: the send time of the last renewal that
    /// touched it (or of the claim), plus the lease.
    pg_until: Instant,
    /// The same for the permits in Redis (the last renewal, or the admission).
    redis_until: Instant,
}

/// The registry.
#[derive(Default)]
pub struct Attempts {
    held: Mutex<HashMap<AttemptId, Held>>,
}

impl Attempts {
    /// Takes `attempt` of `command_id` in hand; its row was claimed at `claimed_at` and its
    /// permits taken at `admitted_at`. Returns the token that stops it.
    pub fn hold(
        &self,
        attempt: AttemptId,
        command_id: Uuid,
        application_id: Uuid,
        admitted_at: Instant,
        claimed_at: Instant,
        lease: Duration,
    ) -> CancellationToken {
        let stop = CancellationToken::new();
        self.lock().insert(
            attempt,
            Held {
                command_id,
                application_id,
                stop: stop.clone(),
                pg_until: claimed_at + lease,
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

    /// One renewal round: PostgreSQL's leases, then each application's permits; then every
    /// attempt that is lost, or may lose its lease before the next round, is stopped.
    pub async fn renew(&self, stores: Stores<'_>, lease: Duration) {
        let snapshot: Vec<(AttemptId, Held)> = self
            .lock()
            .iter()
            .map(|(attempt, held)| (*attempt, held.clone()))
            .collect();
        if snapshot.is_empty() {
            return;
        }
        let pairs: Vec<(Uuid, AttemptId)> = snapshot
            .iter()
            .map(|(attempt, held)| (held.command_id, *attempt))
            .collect();
        let sent = Instant::now();
        match held::renew_leases(stores, &pairs, lease).await {
            Ok(renewed) => {
                let mut map = self.lock();
                for attempt in &renewed {
                    if let Some(held) = map.get_mut(attempt) {
                        held.pg_until = sent + lease;
                    }
                }
                drop(map);
                for (attempt, _) in &snapshot {
                    if !renewed.contains(attempt) {
                        self.stop(*attempt, "its row is not ours any more");
                    }
                }
            }
            Err(error) => {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "lease renewal failed in PostgreSQL");
            }
        }
        let mut by_app: HashMap<Uuid, Vec<(Uuid, AttemptId)>> = HashMap::new();
        for (attempt, held) in &snapshot {
            by_app
                .entry(held.application_id)
                .or_default()
                .push((held.command_id, *attempt));
        }
        for (application_id, attempts) in by_app {
            let keys = AppKeys::new(application_id);
            let sent = Instant::now();
            let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
            match redis::renew(stores.redis, stores.scripts, &keys, &attempts, lease_ms).await {
                Ok(Some(renewed)) => {
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
                Ok(None) => {}
                Err(error) => {
                    crate::metrics::storage_error(&error);
                    tracing::warn!(%error, "lease renewal failed in Redis");
                }
            }
        }
        // Not renewed for two thirds of the lease: the next round may come after it lapsed.
        let margin = lease / 3;
        let doomed: Vec<AttemptId> = self
            .lock()
            .iter()
            .filter(|(_, held)| Instant::now() + margin >= held.pg_until.min(held.redis_until))
            .map(|(attempt, _)| *attempt)
            .collect();
        for attempt in doomed {
            self.stop(attempt, "its lease could not be renewed in time");
        }
    }
}
