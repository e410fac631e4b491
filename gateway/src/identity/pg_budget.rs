//! What requests that must ask PostgreSQL may cost it: a per-process budget (a rate and a number
//! at once), and optionally a rate per subject within it.
//!
//! Two kinds of request use one: ticket polls and look-ups that fall back to PostgreSQL while
//! Redis cannot answer (`gateway.fallback_*`), and the command reads that only PostgreSQL can
//! answer (`GET /v1/commands/{id}`, `…/requests/{key}`, `…/mine` and `:cancel`,
//! `gateway.command_reads_*`). Without a budget anyone with a subject token could load the
//! database at the rate they can send; without the per-subject rate one person could spend the
//! whole budget and leave everyone else refused. Nothing waits: past a budget the answer is
//! immediate, with the wait in `Retry-After`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use sluice_durable::ids::NamespaceId;

/// Subjects whose rate state is kept before the idle ones are forgotten (each about 100 bytes).
const SUBJECTS_BEFORE_SWEEP: usize = 10_000;

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This subject asked faster than its own rate: wait this long.
    Subject { retry_after: Duration },
    /// The process's budget is spent (for everyone, for now).
    Process,
}

pub struct PgBudget {
    rate: DefaultDirectRateLimiter,
    slots: Arc<Semaphore>,
    per_subject: Option<DefaultKeyedRateLimiter<(NamespaceId, String)>>,
    /// When idle subjects were last forgotten, in ms since `started`.
    swept_at_ms: AtomicU64,
    started: Instant,
}

impl PgBudget {
    /// `per_second` and `concurrency` for the whole process; `per_subject_per_second` (with a
    /// burst of twice that, for a page that reloads) for each subject, if any.
    pub fn new(per_second: u32, concurrency: usize, per_subject_per_second: Option<u32>) -> Self {
        let quota = |n: u32| Quota::per_second(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN));
        Self {
            rate: RateLimiter::direct(quota(per_second)),
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            per_subject: per_subject_per_second.map(|n| {
                let burst = NonZeroU32::new(n.saturating_mul(2)).unwrap_or(NonZeroU32::MIN);
                RateLimiter::keyed(quota(n).allow_burst(burst))
            }),
            swept_at_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// A permit to ask PostgreSQL, held until the answer is read; refused at once otherwise.
    /// The subject's own rate is checked first, so a refused subject spends nothing of the
    /// process's budget.
    pub fn permit(
        &self,
        subject: Option<(NamespaceId, &str)>,
    ) -> Result<OwnedSemaphorePermit, Refused> {
        if let (Some(limiter), Some((namespace, subject))) = (&self.per_subject, subject) {
            self.forget_idle_subjects(limiter);
            if let Err(not_until) = limiter.check_key(&(namespace, subject.to_owned())) {
                let retry_after = not_until.wait_time_from(DefaultClock::default().now());
                return Err(Refused::Subject { retry_after });
            }
        }
        let permit = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refused::Process)?;
        self.rate.check().map_err(|_| Refused::Process)?;
        Ok(permit)
    }

    /// Bounds the per-subject state: past [`SUBJECTS_BEFORE_SWEEP`] subjects, at most once a
    /// second, the subjects whose buckets are full again are forgotten (governor's
    /// `retain_recent`), which changes no decision.
    fn forget_idle_subjects(&self, limiter: &DefaultKeyedRateLimiter<(NamespaceId, String)>) {
        if limiter.len() < SUBJECTS_BEFORE_SWEEP {
            return;
        }
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.swept_at_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(last) >= 1_000
            && self
                .swept_at_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> NamespaceId {
        NamespaceId::from_uuid(uuid::Uuid::nil())
    }

    #[test]
    fn a_subject_over_its_rate_is_refused_and_spends_nothing_of_the_process_budget() {
        let budget = PgBudget::new(5, 100, Some(1));
        // Burst of two for one subject, then refused with a wait of under a second.
        assert!(budget.permit(Some((ns(), "a"))).is_ok());
        assert!(budget.permit(Some((ns(), "a"))).is_ok());
        match budget.permit(Some((ns(), "a"))) {
            Err(Refused::Subject { retry_after }) => {
                assert!(retry_after <= Duration::from_secs(1), "{retry_after:?}")
            }
            other => panic!("expected the subject's refusal: {other:?}"),
        }
        // The process had 5: two spent, three left for others.
        for n in 0..3 {
            assert!(
                budget.permit(Some((ns(), &format!("other-{n}")))).is_ok(),
                "{n}"
            );
        }
        assert_eq!(
            budget.permit(Some((ns(), "late"))).err(),
            Some(Refused::Process)
        );
    }

    #[test]
    fn permits_in_hand_bound_the_concurrency() {
        let budget = PgBudget::new(1_000, 2, None);
        let first = budget.permit(None).expect("first");
        let _second = budget.permit(None).expect("second");
        assert_eq!(budget.permit(None).err(), Some(Refused::Process));
        drop(first);
        assert!(budget.permit(None).is_ok());
    }
}
