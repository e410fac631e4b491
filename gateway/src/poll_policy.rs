//! How long a browser should wait before polling a command's status again.
//!
//! Polling is the gateway's main read load, so the hint grows with the expected wait (a client
//! far back in the queue gains nothing by asking every second), stays bounded so nobody waits
//! long after their turn, and is jittered so that clients admitted together do not keep polling
//! in lockstep.

/// Hint when there is no queue position (e.g. the command is executing).
pub const BASE_POLL_MS: u64 = 1000;
/// Extra wait per place in the queue when the drain rate is unknown.
pub const PER_POSITION_MS: u64 = 40;
/// Shortest hint before jitter: faster polling would not change what the client sees.
pub const MIN_POLL_MS: u64 = 500;
/// Longest hint before jitter: nobody should notice their turn more than ~5 s late.
///
/// A drain measured early in a drop is slow (the executor shares the machine with the surge of
/// intake) and speeds up once intake calms down, so long hints overshoot: with 15 s, people of
/// a 10,000-subject drop read results up to 11 s after their commands had finished. At 5 s,
/// 10,000 waiting people cost about 2,000 polls per second, a small share of what one gateway
/// answers from Redis.
pub const MAX_POLL_MS: u64 = 5_000;
/// Final lower bound; `MIN_POLL_MS × 0.8` already respects it, so it is only a safety net.
pub const MIN_JITTERED_POLL_MS: u64 = 400;
/// Final upper bound; `MAX_POLL_MS × 1.2` already respects it, so it is only a safety net.
pub const MAX_JITTERED_POLL_MS: u64 = 6_000;

/// A drain rate is usable only when it is a positive, finite number of completions/s.
fn usable_rate(drain_per_second: Option<f64>) -> Option<f64> {
    drain_per_second.filter(|r| r.is_finite() && *r > 0.0)
}

/// Expected seconds until a waiting command reaches the front: `ceil((position + 1) / rate)`.
///
/// `position` is 0-based, so the command itself counts as one completion still to come.
/// `None` when not waiting or when no usable drain rate is known: a guess would mislead users.
pub fn eta_seconds(position: Option<u64>, drain_per_second: Option<f64>) -> Option<u64> {
    let rate = usable_rate(drain_per_second)?;
    let ahead = position?.saturating_add(1) as f64;
    // `as` saturates for values beyond u64, which is the right answer for absurd inputs.
    Some((ahead / rate).ceil() as u64)
}

/// The hint of an answer about a command in `status`: none once it is final (nothing will
/// change, so a client has no reason to ask again), else [`poll_after_ms`].
pub fn advice(
    status: sluice_durable::lifecycle::CommandStatus,
    position: Option<u64>,
    drain_per_second: Option<f64>,
    jitter: f64,
) -> Option<u64> {
    (!status.is_final()).then(|| poll_after_ms(position, drain_per_second, jitter))
}

/// Milliseconds the client should wait before its next poll.
///
/// The enqueue answer passes the command's declared start rate as `drain_per_second` (no drain
/// is measured yet, and the queue cannot drain faster); ticket polls pass the measured rate.
///
/// Waiting with a known drain rate: about a quarter of the (unrounded) ETA, so the client
/// checks a few times before its turn. Waiting without one: `1000 + 40 × position`. Not
/// waiting: 1000. The result is clamped to [500, 15000], multiplied by `0.8 + 0.4 ×
/// jitter_unit` and clamped to [400, 18000]. For a fixed jitter the hint never decreases as
/// the position grows. `jitter_unit` should be uniform in [0, 1); values outside are clamped
/// and NaN counts as 0.5 (no jitter), so a bad caller cannot produce a zero or huge hint.
pub fn poll_after_ms(
    position: Option<u64>,
    drain_per_second: Option<f64>,
    jitter_unit: f64,
) -> u64 {
    let base_ms = match (position, usable_rate(drain_per_second)) {
        (None, _) => BASE_POLL_MS as f64,
        (Some(p), Some(rate)) => (p.saturating_add(1) as f64 / rate) * 1000.0 / 4.0,
        (Some(p), None) => p
            .saturating_mul(PER_POSITION_MS)
            .saturating_add(BASE_POLL_MS) as f64,
    };
    let clamped = base_ms.clamp(MIN_POLL_MS as f64, MAX_POLL_MS as f64);
    let unit = if jitter_unit.is_nan() {
        0.5
    } else {
        jitter_unit.clamp(0.0, 1.0)
    };
    let jittered = clamped * (0.8 + 0.4 * unit);
    jittered
        .round()
        .clamp(MIN_JITTERED_POLL_MS as f64, MAX_JITTERED_POLL_MS as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const JITTERS: [f64; 6] = [0.0, 0.1, 0.25, 0.5, 0.75, 0.999_999];

    fn positions() -> Vec<u64> {
        let mut p: Vec<u64> = (0..500).collect();
        p.extend([1_000, 10_000, 1 << 20, 1 << 40, u64::MAX - 1, u64::MAX]);
        p
    }

    #[test]
    fn eta() {
        assert_eq!(eta_seconds(None, Some(10.0)), None);
        assert_eq!(eta_seconds(Some(5), None), None);
        assert_eq!(eta_seconds(Some(0), Some(10.0)), Some(1));
        assert_eq!(eta_seconds(Some(9), Some(10.0)), Some(1));
        assert_eq!(eta_seconds(Some(10), Some(10.0)), Some(2));
        assert_eq!(eta_seconds(Some(0), Some(0.5)), Some(2));
        assert_eq!(eta_seconds(Some(99), Some(3.0)), Some(34));
        assert_eq!(eta_seconds(Some(u64::MAX), Some(1e-300)), Some(u64::MAX));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(eta_seconds(Some(3), Some(bad)), None, "{bad}");
        }
    }

    #[test]
    fn unknown_position_uses_base() {
        assert_eq!(poll_after_ms(None, None, 0.5), 1000);
        assert_eq!(poll_after_ms(None, Some(100.0), 0.5), 1000);
        assert_eq!(poll_after_ms(None, None, 0.0), 800);
    }

    #[test]
    fn without_rate_grows_linearly_then_clamps() {
        assert_eq!(poll_after_ms(Some(0), None, 0.5), 1000);
        assert_eq!(poll_after_ms(Some(10), None, 0.5), 1400);
        assert_eq!(poll_after_ms(Some(50), None, 0.5), 3000);
        assert_eq!(poll_after_ms(Some(100), None, 0.5), 5000);
        assert_eq!(poll_after_ms(Some(350), None, 0.5), 5000);
        assert_eq!(poll_after_ms(Some(u64::MAX), None, 0.5), 5000);
    }

    #[test]
    fn with_rate_aims_at_a_quarter_of_the_eta() {
        // 399 ahead of 1/s: ETA 400 s, a quarter is 100 s, clamped to 5 s.
        assert_eq!(poll_after_ms(Some(399), Some(1.0), 0.5), 5000);
        // ETA 8 s -> 2 s.
        assert_eq!(poll_after_ms(Some(7), Some(1.0), 0.5), 2000);
        // Fast queue: ETA 0.01 s -> clamped up to 500 ms.
        assert_eq!(poll_after_ms(Some(0), Some(100.0), 0.5), 500);
        // Unusable rates fall back to the linear rule.
        assert_eq!(poll_after_ms(Some(10), Some(f64::NAN), 0.5), 1400);
        assert_eq!(poll_after_ms(Some(10), Some(0.0), 0.5), 1400);
    }

    #[test]
    fn monotone_in_position_for_fixed_jitter() {
        for rate in [None, Some(0.01), Some(0.5), Some(3.0), Some(1000.0)] {
            for jitter in JITTERS {
                let mut last = 0;
                for p in positions() {
                    let ms = poll_after_ms(Some(p), rate, jitter);
                    assert!(ms >= last, "rate {rate:?} jitter {jitter} position {p}");
                    last = ms;
                }
            }
        }
    }

    #[test]
    fn jitter_stays_within_twenty_percent_and_bounds() {
        for rate in [None, Some(0.2), Some(50.0)] {
            for p in positions().into_iter().map(Some).chain([None]) {
                let center = poll_after_ms(p, rate, 0.5) as f64;
                for jitter in JITTERS {
                    let ms = poll_after_ms(p, rate, jitter);
                    assert!((400..=6_000).contains(&ms));
                    assert!(
                        ms as f64 >= (center * 0.8).floor() && ms as f64 <= (center * 1.2).ceil()
                    );
                }
            }
        }
        assert_eq!(poll_after_ms(Some(0), Some(100.0), 0.0), 400);
        assert_eq!(poll_after_ms(Some(u64::MAX), None, 0.999_999), 6_000);
    }

    #[test]
    fn out_of_contract_jitter_is_contained() {
        assert_eq!(poll_after_ms(None, None, f64::NAN), 1000);
        assert_eq!(poll_after_ms(None, None, -5.0), 800);
        assert_eq!(poll_after_ms(None, None, 7.0), 1200);
        assert_eq!(poll_after_ms(None, None, f64::INFINITY), 1200);
        assert_eq!(
            poll_after_ms(Some(u64::MAX), None, f64::NEG_INFINITY),
            4_000
        );
    }
}
