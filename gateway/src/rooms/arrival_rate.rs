//! The recent arrival rate of each room, for proof of work that follows it.
//!
//! Every gateway reads the room's arrival counter (`rooms.next_seq`, one primary-key read) at
//! most once a second per room, and keeps the readings of the last [`WINDOW`]; the rate is the
//! counter's growth over them. Every gateway reads the same counter, so all ask for the same
//! work whatever the load balancer does, and a burst shows within a second of starting.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_durable::DurableError;
use sluice_durable::ids::NamespaceId;
use sluice_store::rooms::join;
use sqlx::PgPool;

/// The span the rate is measured over.
const WINDOW: Duration = Duration::from_secs(10);
/// The least time between two reads of one room's counter.
const READ_EVERY: Duration = Duration::from_secs(1);

/// Readings of one room's arrival counter, oldest first.
type Readings = VecDeque<(Instant, i64)>;

#[derive(Debug, Default)]
pub struct ArrivalRates {
    rooms: Mutex<HashMap<(NamespaceId, String), Readings>>,
}

impl ArrivalRates {
    /// Joins per second in `room` over the last [`WINDOW`] (0 until two readings a second apart
    /// exist, and for a room that does not exist).
    pub async fn joins_per_second(
        &self,
        pg: &PgPool,
        namespace_id: NamespaceId,
        room: &str,
    ) -> Result<f64, DurableError> {
        let key = (namespace_id, room.to_owned());
        let now = Instant::now();
        let fresh = self
            .lock()
            .get(&key)
            .and_then(|readings| readings.back())
            .is_some_and(|(at, _)| now.duration_since(*at) < READ_EVERY);
        if !fresh {
            let Some(count) = join::arrivals(pg, namespace_id, room).await? else {
                return Ok(0.0);
            };
            let mut rooms = self.lock();
            let readings = rooms.entry(key.clone()).or_default();
            readings.push_back((Instant::now(), count));
            // Keep one reading at least WINDOW old, so the rate spans the whole window.
            while readings
                .get(1)
                .is_some_and(|(at, _)| now.duration_since(*at) >= WINDOW)
            {
                readings.pop_front();
            }
        }
        Ok(self.lock().get(&key).map_or(0.0, rate))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(NamespaceId, String), Readings>> {
        // A panic while holding the lock leaves readings that are still readings.
        self.rooms.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The counter's growth per second between the oldest and the newest reading.
fn rate(readings: &Readings) -> f64 {
    match (readings.front(), readings.back()) {
        (Some((from, first)), Some((to, last))) => {
            let seconds = to.duration_since(*from).as_secs_f64();
            if seconds < READ_EVERY.as_secs_f64() {
                0.0
            } else {
                (last - first).max(0) as f64 / seconds
            }
        }
        _ => 0.0,
    }
}
