//! Fault-injection points between two steps of a transition, compiled in only with the
//! `fault-injection` feature (tests enable it; release binaries never carry it).
//!
//! A point armed to **crash** stops the work there the way a crashed process would: no cleanup
//! runs after it, so a test can prove that what a crash leaves behind is recovered and nothing
//! is lost. A point armed to **pause** holds the work there until the test releases it, so a
//! test can make an ordering happen that timing alone almost never produces (a claim after a
//! rebuild's snapshot, an accept between a rebuild's clearing and its counts).
//!
//! Points are armed per scope (the namespace of an enqueue, the application of a rebuild or an
//! admission), so tests running in parallel in one process never trip each other's work. A crash
//! stays armed until disarmed; a pause holds the first work that reaches it, once.

use uuid::Uuid;

use crate::DurableError;

/// Where work can be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// Enqueue: after `intake.lua` reserved, before the PostgreSQL commit (scope: namespace).
    AfterReservation,
    /// Enqueue: after the commit, before `accept.lua` projects the command (scope: namespace).
    AfterCommit,
    /// Executor: after `admit.lua` took permits, before the claim (scope: application).
    AfterAdmit,
    /// Executor: a further `admit.lua` call of one admission, after an earlier call of it started
    /// commands (scope: application). Armed to crash, that call fails as a call on a reset
    /// connection or past its timeout would, before it reaches Redis.
    LaterAdmitCall,
    /// Rebuild: after the projection was fenced and the epoch advanced, before the snapshot
    /// (scope: application).
    RebuildBeforeSnapshot,
    /// Rebuild: its snapshot of PostgreSQL taken, nothing of it written to Redis yet (scope:
    /// application).
    RebuildAfterSnapshot,
    /// Rebuild: after the application's keys were cleared and the rows written, before the
    /// counters are (scope: application).
    RebuildBeforeCounts,
}

#[cfg(feature = "fault-injection")]
mod armed {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};

    use tokio::sync::Notify;
    use uuid::Uuid;

    use super::Point;

    /// A pause: the work announces that it reached the point, then waits for the release.
    #[derive(Default)]
    pub struct Gate {
        reached: Notify,
        released: Notify,
        state: Mutex<(bool, bool)>,
    }

    impl Gate {
        pub async fn hold(&self) {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                state.0 = true;
                if state.1 {
                    return;
                }
            }
            self.reached.notify_waiters();
            released.await;
        }

        pub async fn reached(&self) {
            loop {
                let reached = self.reached.notified();
                tokio::pin!(reached);
                reached.as_mut().enable();
                if self.state.lock().unwrap_or_else(|p| p.into_inner()).0 {
                    return;
                }
                reached.await;
            }
        }

        pub fn release(&self) {
            self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
            self.released.notify_waiters();
        }
    }

    pub enum Arming {
        Crash,
        Pause(Arc<Gate>),
    }

    pub fn points() -> &'static Mutex<HashMap<(Point, Uuid), Arming>> {
        static POINTS: OnceLock<Mutex<HashMap<(Point, Uuid), Arming>>> = OnceLock::new();
        POINTS.get_or_init(|| Mutex::new(HashMap::new()))
    }
}

/// A paused point, as the test that armed it sees it.
#[cfg(feature = "fault-injection")]
#[derive(Clone)]
pub struct Pause(std::sync::Arc<armed::Gate>);

#[cfg(feature = "fault-injection")]
impl Pause {
    /// Returns once the work has reached the point (and waits there).
    pub async fn reached(&self) {
        self.0.reached().await;
    }

    /// Lets the work go on.
    pub fn release(&self) {
        self.0.release();
    }
}

/// Arms `point` of `scope` to crash the next work that reaches it (`on = false` disarms).
#[cfg(feature = "fault-injection")]
pub fn arm(point: Point, scope: impl Into<Uuid>, on: bool) {
    let scope = scope.into();
    let mut points = armed::points().lock().unwrap_or_else(|p| p.into_inner());
    if on {
        points.insert((point, scope), armed::Arming::Crash);
    } else {
        points.remove(&(point, scope));
    }
}

/// Arms `point` of `scope` to hold the next work that reaches it until released.
#[cfg(feature = "fault-injection")]
pub fn pause(point: Point, scope: impl Into<Uuid>) -> Pause {
    let scope = scope.into();
    let gate = std::sync::Arc::new(armed::Gate::default());
    armed::points()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert((point, scope), armed::Arming::Pause(gate.clone()));
    Pause(gate)
}

/// Passes `point` of `scope`: `Err(FaultInjected)` when it is armed to crash (crash points stay
/// armed until disarmed: every enqueue of the namespace stops there), after the release when it
/// is armed to pause (once). Without the feature it always passes at once.
pub async fn pass(point: Point, scope: impl Into<Uuid>) -> Result<(), DurableError> {
    let scope: Uuid = scope.into();
    #[cfg(feature = "fault-injection")]
    {
        let gate = {
            let mut points = armed::points().lock().unwrap_or_else(|p| p.into_inner());
            match points.get(&(point, scope)) {
                None => None,
                Some(armed::Arming::Crash) => {
                    return Err(DurableError::FaultInjected(format!("{point:?}")));
                }
                Some(armed::Arming::Pause(_)) => match points.remove(&(point, scope)) {
                    Some(armed::Arming::Pause(gate)) => Some(gate),
                    _ => None,
                },
            }
        };
        if let Some(gate) = gate {
            gate.hold().await;
        }
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = (point, scope);
    }
    Ok(())
}
