//! When to try a webhook again: exponential backoff with jitter, never earlier than the
//! backend's `Retry-After`.

use std::time::Duration;

use rand::Rng;

/// Delay before attempt `attempt + 1`, after `attempt` (1-based) attempts failed: a random
/// point in the upper half of `base × 2^(attempt-1)` (capped at `max`), so a crowd of retries
/// spreads out instead of returning together; at least `retry_after` when the backend said so.
pub fn delay(
    attempt: u32,
    retry_after: Option<Duration>,
    base: Duration,
    max: Duration,
    rng: &mut impl Rng,
) -> Duration {
    let exponent = attempt.saturating_sub(1).min(30);
    let full = base.saturating_mul(1u32 << exponent).min(max);
    let half = full / 2;
    let jittered = half + full.saturating_sub(half).mul_f64(rng.random::<f64>());
    retry_after.map_or(jittered, |wait| wait.max(jittered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_bounds_and_caps() {
        let mut rng = rand::rng();
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(5);
        for attempt in 1..=12u32 {
            let full = (base * 2u32.pow(attempt - 1)).min(max);
            for _ in 0..50 {
                let d = delay(attempt, None, base, max, &mut rng);
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempt}: {d:?} not in [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
    }

    #[test]
    fn never_earlier_than_retry_after() {
        let mut rng = rand::rng();
        let d = delay(
            1,
            Some(Duration::from_secs(3)),
            Duration::from_millis(100),
            Duration::from_secs(5),
            &mut rng,
        );
        assert_eq!(d, Duration::from_secs(3));
        let d = delay(
            10,
            Some(Duration::from_millis(1)),
            Duration::from_millis(100),
            Duration::from_secs(5),
            &mut rng,
        );
        assert!(d >= Duration::from_millis(2_500));
    }
}
