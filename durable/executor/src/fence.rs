//! The fence of one attempt: until when, on this process's monotonic clock, the attempt may still
//! act at its backend.
//!
//! An attempt's work can be taken over once its permits lapse (the sweeper rescues a row only
//! then), so a request must leave before they may lapse. Checking a deadline before a request is
//! not enough: a process paused (SIGSTOP, a stalled VM, a long GC-like stall of the runtime)
//! between the check and the write resumes and sends a request whose command another executor
//! has since run to its end. The fence is therefore checked by the request body itself
//! ([`super::webhook::FencedBody`]), in the same poll that hands the request to the socket: the
//! monotonic clock runs on while a process is stopped, so a resumed process finds its fence
//! closed and writes nothing. What is left is the span between that check and the `writev`
//! (microseconds, no await point between them); closing it needs a backend that refuses stale
//! attempts (the body names its attempt number).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shared by an attempt's holder (who extends it when a renewal succeeds) and its requests (who
/// check it). Cloning shares it.
#[derive(Debug, Clone)]
pub struct Fence {
    origin: Instant,
    /// Nanoseconds after `origin` at which the fence closes.
    closes_at: Arc<AtomicU64>,
    /// Closed for good: no renewal opens it again.
    closed: Arc<AtomicBool>,
}

impl Fence {
    /// A fence open until `until`.
    pub fn until(until: Instant) -> Self {
        let origin = Instant::now();
        let fence = Self {
            origin,
            closes_at: Arc::new(AtomicU64::new(0)),
            closed: Arc::new(AtomicBool::new(false)),
        };
        fence.extend_to(until);
        fence
    }

    /// Moves the closing time to `until` if that is later: renewals may finish out of order.
    pub fn extend_to(&self, until: Instant) {
        let nanos = until.saturating_duration_since(self.origin).as_nanos();
        self.closes_at
            .fetch_max(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::AcqRel);
    }

    /// Closes the fence now, for good: the attempt is stopped.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether the attempt may still act.
    pub fn is_open(&self) -> bool {
        self.remaining() > Duration::ZERO
    }

    /// How long it stays open unless extended.
    pub fn remaining(&self) -> Duration {
        if self.closed.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        let closes_at = Duration::from_nanos(self.closes_at.load(Ordering::Acquire));
        closes_at.saturating_sub(self.origin.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_until_its_time_extends_only_forward_and_closes_for_good() {
        let now = Instant::now();
        let fence = Fence::until(now + Duration::from_secs(60));
        assert!(fence.is_open());
        fence.extend_to(now + Duration::from_secs(1));
        assert!(
            fence.remaining() > Duration::from_secs(30),
            "an earlier time must not shorten it"
        );
        fence.extend_to(now + Duration::from_secs(120));
        assert!(fence.remaining() > Duration::from_secs(90));
        fence.close();
        assert!(!fence.is_open());
        fence.extend_to(now + Duration::from_secs(300));
        assert!(!fence.is_open(), "a closed fence stays closed");
        assert!(
            !Fence::until(now).is_open(),
            "a time already past is closed"
        );
    }
}
