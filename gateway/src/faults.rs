//! Fault-injection points between two steps of an enqueue, compiled only with the
//! `fault-injection` feature (tests enable it; release binaries never carry it). A tripped point
//! stops the request there the way a crashed gateway would: no cleanup runs after it, so tests
//! can prove that what a crash leaves behind (a reservation, a committed row without its
//! projection) is recovered by expiry and by the reconciler, and that nothing is lost.
//!
//! Points are armed per namespace, so tests running in parallel in one process never trip each
//! other's requests.

use uuid::Uuid;

/// Where an enqueue can be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// After `intake.lua` reserved, before the PostgreSQL commit.
    AfterReservation,
    /// After the commit, before `accept.lua` projects the command.
    AfterCommit,
}

#[cfg(feature = "fault-injection")]
mod armed {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};

    use uuid::Uuid;

    use super::Point;

    fn points() -> &'static Mutex<HashSet<(Point, Uuid)>> {
        static POINTS: OnceLock<Mutex<HashSet<(Point, Uuid)>>> = OnceLock::new();
        POINTS.get_or_init(|| Mutex::new(HashSet::new()))
    }

    pub fn set(point: Point, namespace_id: Uuid, on: bool) {
        let mut points = points().lock().unwrap_or_else(|p| p.into_inner());
        if on {
            points.insert((point, namespace_id));
        } else {
            points.remove(&(point, namespace_id));
        }
    }

    pub fn contains(point: Point, namespace_id: Uuid) -> bool {
        points()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(point, namespace_id))
    }
}

/// Arms (or disarms) `point` for the enqueues of one namespace.
#[cfg(feature = "fault-injection")]
pub fn arm(point: Point, namespace_id: Uuid, on: bool) {
    armed::set(point, namespace_id, on);
}

/// Whether an enqueue of `namespace_id` must stop at `point`. Always false without the feature.
pub fn tripped(point: Point, namespace_id: Uuid) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        armed::contains(point, namespace_id)
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (point, namespace_id);
        false
    }
}

/// The answer of a request stopped by a fault: what its client would see of a gateway that died
/// (the outcome is unknown; retry with the same key).
pub fn crashed() -> crate::error::ApiError {
    crate::error::ApiError::unavailable("fault injected: the gateway stopped here")
}
