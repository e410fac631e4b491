//! How long a person waiting in a room should wait before polling their place again.
//!
//! Near the front this is the command tickets' advice ([`crate::polls::poll_policy`], at most 6 s), and
//! a first pass outlives it ([`sluice_store::rooms::FIRST_PASS_PICKUP`]). Further back the room's
//! limits say how soon the turn can come at the earliest ([`Pace::earliest_turn`]); the advice is
//! a share of that, up to [`Pace::longest_advice`] (30 s), so a crowd of 100,000 asks for a few thousand
//! polls a second instead of 20,000. In the pre-queue, nobody is admitted before the start:
//! people are told to come back at it, spread over its first seconds, longer for a larger crowd
//! ([`Pace::start_spread`]); those who come before the draw is visible are spread over it again.
//! Both bounds assume the
//! limits as declared; an apply that loosens them makes the next first passes long enough for
//! anyone told to wait before it (`sluice_store::rooms::pace`).

use std::time::Duration;

use sluice_store::rooms::Pace;
use sluice_store::rooms::pace::DEEP_SHARE;

use crate::polls::poll_policy;

/// Where a waiting place stands, as the advice needs it.
#[derive(Debug, Clone, Copy)]
pub struct Standing {
    /// Places waiting ahead (`None` before the draw).
    pub position: Option<u64>,
    /// Time left until the start, when it is ahead.
    pub until_open: Option<Duration>,
    /// How old the room's front the position was told from is.
    pub age: Duration,
    pub pace: Pace,
    /// Joins the room had (`next_seq`): before the draw, how many may come back at the start.
    pub crowd: i64,
}

/// Milliseconds the holder of a waiting place should wait before polling again. `jitter` is
/// uniform in [0, 1) (clamped; NaN counts as 0.5); it only ever shortens the deep advice, which
/// must not pass the earliest turn, and spreads the pre-queue over [`Pace::start_spread`].
pub fn place_poll_after_ms(standing: &Standing, jitter: f64) -> u64 {
    let unit = if jitter.is_nan() {
        0.5
    } else {
        jitter.clamp(0.0, 1.0)
    };
    let longest = standing.pace.longest_advice().as_secs_f64() * 1000.0;
    let start_spread = standing.pace.start_spread(standing.crowd).as_secs_f64() * 1000.0;
    match (standing.position, standing.until_open) {
        (None, Some(until_open)) => {
            let until_open = until_open.saturating_sub(standing.age).as_secs_f64() * 1000.0;
            let spread = start_spread * unit;
            let wait = if until_open + spread <= longest {
                until_open + spread
            } else {
                // Far from the start: at most the longest advice, spread so the next polls
                // do not come all together either.
                (longest * (0.8 + 0.2 * unit)).min(until_open + spread)
            };
            wait.round().max(poll_policy::MIN_JITTERED_POLL_MS as f64) as u64
        }
        // Past the start and not drawn yet (the draw of a large pre-queue takes seconds): back
        // over the start's spread again, not all within the next second.
        (None, None) => (start_spread * unit)
            .round()
            .max(poll_policy::MIN_JITTERED_POLL_MS as f64) as u64,
        (position, _) => {
            let rate = standing
                .pace
                .admit_per_minute
                .map(|per_minute| f64::from(per_minute) / 60.0);
            let near = poll_policy::poll_after_ms(position, rate, unit);
            let Some(ahead) = position else {
                return near;
            };
            let earliest = standing
                .pace
                .earliest_turn(ahead)
                .saturating_sub(standing.age)
                .as_secs_f64()
                * 1000.0;
            let deep = (earliest * DEEP_SHARE * (0.8 + 0.2 * unit)).min(longest);
            near.max(deep.round() as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JITTERS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 0.999_999];

    fn standing(position: Option<u64>, until_open: Option<u64>, pace: Pace) -> Standing {
        Standing {
            position,
            until_open: until_open.map(Duration::from_secs),
            age: Duration::ZERO,
            pace,
            crowd: 1_000,
        }
    }

    fn room(max_active: Option<i32>, admit_per_minute: Option<i32>) -> Pace {
        Pace {
            max_active,
            admit_per_minute,
            pass_seconds: 600,
            heartbeat_seconds: Some(5),
        }
    }

    /// Whatever the position, the advice never passes half the earliest turn when it is longer
    /// than the advice near the front, and never the longest advice.
    #[test]
    fn deep_advice_stays_inside_half_the_earliest_turn() {
        for pace in [
            room(Some(20_000), None),
            room(Some(1), None),
            room(Some(50), Some(120)),
            room(None, Some(6)),
            Pace {
                pass_seconds: 10,
                ..room(Some(2), None)
            },
        ] {
            for ahead in (0..5_000).step_by(7).chain([100_000, u64::MAX]) {
                for jitter in JITTERS {
                    let advice = place_poll_after_ms(&standing(Some(ahead), None, pace), jitter);
                    let earliest = pace.earliest_turn(ahead).as_secs_f64() * 1000.0;
                    let near = poll_policy::poll_after_ms(
                        Some(ahead),
                        pace.admit_per_minute.map(|r| f64::from(r) / 60.0),
                        jitter,
                    );
                    let longest = pace.longest_advice().as_millis() as u64;
                    assert!(advice <= longest.max(near), "{pace:?} {ahead}: {advice}");
                    assert!(advice >= near, "{pace:?} {ahead}: {advice} < {near}");
                    if advice > near {
                        assert!(
                            advice as f64 <= earliest * DEEP_SHARE + 0.5,
                            "{pace:?} {ahead}: {advice} ms against an earliest turn of {earliest} ms"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_crowd_behind_max_active_polls_rarely() {
        let pace = room(Some(20_000), None);
        // Within the first 20,000: the advice near the front (at most 6 s).
        assert!(place_poll_after_ms(&standing(Some(19_999), None, pace), 0.5) <= 6_000);
        // 60,000 back: three first passes (30 s) at the earliest, told half.
        assert_eq!(
            place_poll_after_ms(&standing(Some(60_000), None, pace), 1.0),
            15_000
        );
        assert_eq!(
            place_poll_after_ms(&standing(Some(60_000), None, pace), 0.0),
            12_000
        );
        // The front's age is taken off.
        let old = Standing {
            age: Duration::from_secs(4),
            ..standing(Some(60_000), None, pace)
        };
        assert_eq!(place_poll_after_ms(&old, 1.0), 13_000);
        // Never beyond the longest advice.
        assert_eq!(
            place_poll_after_ms(&standing(Some(10_000_000), None, pace), 1.0),
            30_000
        );
    }

    #[test]
    fn the_pre_queue_comes_back_at_the_start_spread_over_its_first_seconds() {
        let pace = room(Some(20_000), None);
        assert_eq!(
            place_poll_after_ms(&standing(None, Some(12), pace), 0.0),
            12_000
        );
        assert_eq!(
            place_poll_after_ms(&standing(None, Some(12), pace), 0.5),
            13_500
        );
        // Far from the start: at most the longest advice.
        let far = place_poll_after_ms(&standing(None, Some(3_600), pace), 0.5);
        assert_eq!(far, 27_000);
        // Never below the shortest advice, even at the start itself.
        assert_eq!(
            place_poll_after_ms(&standing(None, Some(0), pace), 0.0),
            400
        );
        // Past the start and not drawn yet: over the start's spread again.
        assert_eq!(place_poll_after_ms(&standing(None, None, pace), 0.5), 1_500);
        assert_eq!(place_poll_after_ms(&standing(None, None, pace), 0.0), 400);
        // A crowd of 100,000 comes back over 10 s, before the draw and again after the start.
        let crowd = |position, until_open| Standing {
            crowd: 100_000,
            ..standing(position, until_open, pace)
        };
        assert_eq!(place_poll_after_ms(&crowd(None, Some(12)), 0.5), 17_000);
        assert_eq!(place_poll_after_ms(&crowd(None, Some(12)), 1.0), 22_000);
        assert_eq!(place_poll_after_ms(&crowd(None, None), 0.5), 5_000);
    }

    #[test]
    fn a_bad_jitter_gives_a_bounded_advice() {
        let pace = room(Some(100), None);
        for jitter in [f64::NAN, -1.0, 2.0, f64::INFINITY] {
            let advice = place_poll_after_ms(&standing(Some(1_000), None, pace), jitter);
            assert!((400..=30_000).contains(&advice), "{jitter}: {advice}");
        }
    }
}
