//! How long a browser should wait before polling a command's status again.
//!
//! Polling is the gateway's main read load, so the hint grows with the expected wait (a client
//! far back in the queue gains nothing by asking every second), stays bounded so nobody waits
//! long after their turn, and is jittered so that clients admitted together do not keep polling
//! in lockstep.

/// Hint when there is no queue position (e.g. the command is executing).
pub const BASE_POLL_MS: u64 = 1000;
/// Extra wait per place in the queue when the start rate is unknown.
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

/// A start rate is usable only when it is a positive, finite number of starts/s.
fn usable_rate(starts_per_second: Option<f64>) -> Option<f64> {
    starts_per_second.filter(|r| r.is_finite() && *r > 0.0)
}

/// Expected seconds until a waiting command starts: `(position + 1) / rate`, to the nearest
/// second.
///
/// `rate` is the start rate of the command's own queue (`ProjectedStatus::starts_per_second`),
/// since the ETA promises the start and the position is a rank in that queue. `position` is
/// 0-based, so the command's own start counts as one still to come. The nearest second, not the
/// next: an answer in whole seconds is then at most half a second off, where rounding up was
/// up to a whole second long, which for the short waits of a fast queue doubled the estimate
/// (`0` reads "any moment now"). `None` when not waiting or when no usable rate is known (its
/// queue started nothing yet): a guess would mislead users.
pub fn eta_seconds(position: Option<u64>, starts_per_second: Option<f64>) -> Option<u64> {
    let rate = usable_rate(starts_per_second)?;
    let ahead = position?.saturating_add(1) as f64;
    // `as` saturates for values beyond u64, which is the right answer for absurd inputs.
    Some((ahead / rate).round() as u64)
}

/// The hint of an answer about a command in `status`: none once it is final (nothing will
/// change, so a client has no reason to ask again), else [`poll_after_ms`].
pub fn advice(
    status: sluice_model::CommandStatus,
    position: Option<u64>,
    starts_per_second: Option<f64>,
    jitter: f64,
) -> Option<u64> {
    (!status.is_final()).then(|| poll_after_ms(position, starts_per_second, jitter))
}

/// Milliseconds the client should wait before its next poll.
///
/// The enqueue answer passes the command's declared start rate as `starts_per_second` (nothing
/// is measured yet, and the queue cannot drain faster); ticket polls pass the measured rate.
///
/// Waiting with a known start rate: about a quarter of the (unrounded) ETA, so the client
/// checks a few times before its turn. Waiting without one: `1000 + 40 × position`. Not
/// waiting: 1000. The result is clamped to [500, 15000], multiplied by `0.8 + 0.4 ×
/// jitter_unit` and clamped to [400, 18000]. For a fixed jitter the hint never decreases as
/// the position grows. `jitter_unit` should be uniform in [0, 1); values outside are clamped
/// and NaN counts as 0.5 (no jitter), so a bad caller cannot produce a zero or huge hint.
pub fn poll_after_ms(
    position: Option<u64>,
    starts_per_second: Option<f64>,
    jitter_unit: f64,
) -> u64 {
    let base_ms = match (position, usable_rate(starts_per_second)) {
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
    use sluice_redis::start_rate::{self, StartRecord};

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
        // The nearest second: 0.1 s is "any moment now", 1.1 s is 1, 1.5 s is 2.
        assert_eq!(eta_seconds(Some(0), Some(10.0)), Some(0));
        assert_eq!(eta_seconds(Some(4), Some(10.0)), Some(1));
        assert_eq!(eta_seconds(Some(9), Some(10.0)), Some(1));
        assert_eq!(eta_seconds(Some(10), Some(10.0)), Some(1));
        assert_eq!(eta_seconds(Some(14), Some(10.0)), Some(2));
        assert_eq!(eta_seconds(Some(0), Some(0.5)), Some(2));
        assert_eq!(eta_seconds(Some(99), Some(3.0)), Some(33));
        // A drop of 1,000 claims drained at 100 per second, the last one 10 s away.
        assert_eq!(eta_seconds(Some(999), Some(100.0)), Some(10));
        assert_eq!(eta_seconds(Some(449), Some(100.0)), Some(5));
        assert_eq!(eta_seconds(Some(u64::MAX), Some(1e-300)), Some(u64::MAX));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(eta_seconds(Some(3), Some(bad)), None, "{bad}");
        }
    }

    /// `admit.lua`'s update of a queue's start record after an admission that started `k` of its
    /// commands at `now_ms` (mirrored here to simulate drains).
    fn admitted(record: Option<StartRecord>, now_ms: i64, k: u32, cap: f64) -> StartRecord {
        match record {
            None => StartRecord {
                decayed: f64::from(k),
                at_ms: now_ms,
                born_ms: now_ms,
                cap,
            },
            Some(r) => StartRecord {
                decayed: r.decayed
                    * (-((now_ms - r.at_ms) as f64) / start_rate::TIME_CONSTANT_MS).exp()
                    + f64::from(k),
                at_ms: now_ms,
                born_ms: r.born_ms,
                cap,
            },
        }
    }

    /// A simulated drain of 1,000 commands of one queue, admitted `(at_ms, how many)`: every
    /// command still waiting at `observed_ms` gets the ETA a poll would show then; returns the
    /// relative errors `|told − actual| / actual` of those that wait at least `min_wait_s`.
    fn eta_errors(
        admissions: &[(i64, u32)],
        cap: f64,
        observed_ms: i64,
        min_wait_s: f64,
    ) -> Vec<f64> {
        let mut record = None;
        let mut start_of = Vec::new();
        for &(at, k) in admissions {
            if at <= observed_ms {
                record = Some(admitted(record, at, k, cap));
            }
            start_of.extend(std::iter::repeat_n(at, k as usize));
        }
        let rate = record.and_then(|r| r.per_second(observed_ms));
        let started = start_of.iter().filter(|at| **at <= observed_ms).count();
        start_of[started..]
            .iter()
            .enumerate()
            .filter_map(|(position, at)| {
                let actual = (at - observed_ms) as f64 / 1000.0;
                let told = eta_seconds(Some(position as u64), rate)? as f64;
                (actual >= min_wait_s).then(|| (told - actual).abs() / actual)
            })
            .collect()
    }

    fn p90(mut errors: Vec<f64>) -> f64 {
        assert!(!errors.is_empty());
        errors.sort_by(f64::total_cmp);
        errors[(errors.len() * 9).div_ceil(10) - 1]
    }

    #[test]
    fn a_paced_drain_is_estimated_from_its_starts() {
        // A drop of 1,000 claims at per_second = 100 (burst 100, 64 in flight): 64 at
        // once, the rest of the burst as the first ones end, then one every 10 ms.
        let mut paced = vec![(0, 64), (30, 36)];
        paced.extend((1..=900).map(|i| (30 + 10 * i, 1)));
        for observed in [50, 500, 2_000, 5_000] {
            let error = p90(eta_errors(&paced, 100.0, observed, 2.0));
            // Whole seconds cost up to 0.5 s over a wait of at least 2 s: 25 % at most.
            assert!(error <= 0.25, "p90 {error} observed at {observed} ms");
        }
        // Held back by its 64 slots instead (a handler of 1.6 s): the first 64 at once, then one
        // every 25 ms as they end, 40 per second, well under the declared 100. Once the first
        // ones ended, the rate measured from the starts follows it. (Within the first 1.6 s
        // nothing says how long the handler takes: 64 over the time since is optimistic.)
        let mut slow = vec![(0, 64)];
        slow.extend((1..=936).map(|i| (1_600 + 25 * i, 1)));
        for observed in [3_000, 8_000, 20_000] {
            let error = p90(eta_errors(&slow, 100.0, observed, 2.0));
            assert!(error <= 0.25, "p90 {error} observed at {observed} ms");
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
