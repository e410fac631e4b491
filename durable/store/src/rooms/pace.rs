//! How fast a room can admit at most, so a waiting person can be told to come back later
//! without missing their turn.
//!
//! A room of 100,000 people polling every 5 s asks for 20,000 polls a second, most from people
//! whose turn is minutes away. The room's limits bound how soon a turn can come: every admission
//! holds a slot of `max_active` at least as long as its first pass (a leave keeps the slot until
//! the pass's `exp`, see [`super`]), and `admit_per_minute` admits no more than its rate and a
//! second's burst. So a place with `ahead` places waiting before it cannot be admitted sooner
//! than [`Pace::earliest_turn`], unless people ahead of it leave or an operator loosens the
//! limits. Gateways advise a poll at a share of that time ([`DEEP_SHARE`], so up to half of those
//! ahead may leave meanwhile), never later than [`Pace::longest_advice`]; an apply that loosens a
//! room records it (`rooms.loosened_at`), and for [`LOOSENED_WINDOW`] after it the admission step
//! gives first passes of [`LOOSENED_PICKUP`] (never past `pass_seconds`, which is why short passes
//! shorten the longest advice), long enough for anyone told to wait before it.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::FIRST_PASS_PICKUP;

/// The longest a waiting person is ever told to wait before polling again.
pub const LONGEST_POLL_ADVICE: Duration = Duration::from_secs(30);

/// The share of [`Pace::earliest_turn`] a waiting place is told to wait: its turn can come that
/// soon only if more than half of the places ahead of it leave meanwhile.
pub const DEEP_SHARE: f64 = 0.5;

/// The first pass of a place admitted within [`LOOSENED_WINDOW`] of an apply that loosened the
/// room lasts at least this long (never past `pass_seconds`): its holder may have been told,
/// under the old limits, to come back [`LONGEST_POLL_ADVICE`] later.
pub const LOOSENED_PICKUP: Duration =
    Duration::from_secs(LONGEST_POLL_ADVICE.as_secs() + FIRST_PASS_PICKUP.as_secs());

/// How long after a loosening first passes are [`LOOSENED_PICKUP`] long: the longest advice,
/// plus the age of the room's front a gateway may still answer from (5 s, the front read
/// before the apply), plus the apply's own time between its stamp and its commit (15 s).
pub const LOOSENED_WINDOW: Duration = Duration::from_secs(LONGEST_POLL_ADVICE.as_secs() + 20);

/// The least time over which a pre-queue is asked back at the start: those who come before
/// the draw is visible are asked back again over the same time.
pub const START_SPREAD: Duration = Duration::from_secs(3);

/// How many of a pre-queue are asked back a second at the start, at most: at the start everyone
/// in a pre-queue polls to learn their drawn place, and those admitted by the draw must reach
/// their first pass before it lapses. 100,000 people asked back over 3 s came at 33,000 polls a
/// second, three times what a 2-core machine answered beside its PostgreSQL and the admitted
/// people's heartbeats; every answer then took seconds, and first passes lapsed unseen.
pub const START_RETURNS_PER_SECOND: u64 = 10_000;

/// How much longer a first pass lasts than the longest wait advised before it: what the advice
/// near the front (at most 6 s) leaves of [`FIRST_PASS_PICKUP`], for the poll's own time.
pub const PICKUP_MARGIN: Duration = Duration::from_secs(4);

/// What bounds how fast a room admits, as declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub max_active: Option<i32>,
    pub admit_per_minute: Option<i32>,
    pub pass_seconds: i32,
    /// How often a holder must heartbeat (`None`: the pass runs `pass_seconds`).
    pub heartbeat_seconds: Option<i32>,
}

impl Pace {
    /// The shortest first pass an admission gives, in seconds: the earlier of `pass_seconds`
    /// and the later of `heartbeat_seconds` and [`FIRST_PASS_PICKUP`] (the admission step's
    /// formula; after a loosening it is longer, never shorter).
    pub fn first_pass_seconds(&self) -> i64 {
        let pass = i64::from(self.pass_seconds.max(0));
        let heartbeat = self.heartbeat_seconds.map_or(pass, i64::from);
        pass.min(heartbeat.max(FIRST_PASS_PICKUP.as_secs() as i64))
    }

    /// The longest wait this room's waiting people may be told: [`LONGEST_POLL_ADVICE`], less
    /// when `pass_seconds` caps the first pass a loosening gives below [`LOOSENED_PICKUP`] (a
    /// room of 10 s passes is told no more than 6 s, as near the front).
    pub fn longest_advice(&self) -> Duration {
        let pass = Duration::from_secs(u64::try_from(self.pass_seconds).unwrap_or(0));
        LONGEST_POLL_ADVICE.min(pass.min(LOOSENED_PICKUP).saturating_sub(PICKUP_MARGIN))
    }

    /// Over how long after the start a pre-queue is asked back, when `crowd` people had joined
    /// the room: [`START_SPREAD`], or longer at [`START_RETURNS_PER_SECOND`], never past
    /// [`Pace::longest_advice`]. Gateways spread the pre-queue's polls over it, and the
    /// admission step gives the first passes it admits meanwhile time to be picked up after it
    /// ([`first_pass_after_start`]). Monotone in `crowd`, which only grows before the draw, so a
    /// gateway's spread is never longer than the step's.
    pub fn start_spread(&self, crowd: i64) -> Duration {
        let crowd = u64::try_from(crowd).unwrap_or(0);
        let by_size = Duration::from_secs_f64(crowd as f64 / START_RETURNS_PER_SECOND as f64);
        START_SPREAD.max(by_size.min(self.longest_advice()))
    }

    /// Whether a room with these limits may admit sooner than it could with `before`: a larger
    /// or removed `max_active` or `admit_per_minute`, or a shorter first pass (a slot taken
    /// anew sooner). An apply that does so is recorded as a loosening (`rooms.loosened_at`).
    pub fn admits_sooner_than(&self, before: &Pace) -> bool {
        let raised = |now: Option<i32>, then: Option<i32>| {
            then.is_some_and(|then| now.is_none_or(|now| now > then))
        };
        raised(self.max_active, before.max_active)
            || raised(self.admit_per_minute, before.admit_per_minute)
            || self.first_pass_seconds() < before.first_pass_seconds()
    }

    /// The least time before a place with `ahead` places waiting before it can be admitted,
    /// if none of them leaves and the limits stay as they are: zero for a room without limits.
    ///
    /// Its admission is the `ahead + 1`-th from now. With `max_active` M, each slot takes a new
    /// admission at most once per first pass (a slot is held from the admission until the pass's
    /// `exp` plus a second's grace, and `exp` is the admission's second plus the first pass, so
    /// at least the first pass), so `n` admissions take at least `(⌈n / M⌉ − 1)` first passes.
    /// With `admit_per_minute` R (a bucket of at most one second's worth, at least one), `n`
    /// admissions take at least `(n − max(R/60, 1)) / (R/60)` seconds.
    pub fn earliest_turn(&self, ahead: u64) -> Duration {
        let admissions = ahead.saturating_add(1) as f64;
        let mut least: f64 = 0.0;
        if let Some(max_active) = self.max_active.filter(|m| *m > 0) {
            let rounds = (admissions / f64::from(max_active)).ceil() - 1.0;
            least = least.max(rounds * self.first_pass_seconds() as f64);
        }
        if let Some(per_minute) = self.admit_per_minute.filter(|r| *r > 0) {
            let per_second = f64::from(per_minute) / 60.0;
            least = least.max((admissions - per_second.max(1.0)) / per_second);
        }
        // A year is as good as forever, and keeps the conversion finite.
        Duration::from_secs_f64(least.clamp(0.0, 31_536_000.0))
    }
}

/// The pick-up time of a first pass admitted at `now` in a room drawn at `drawn_at` from a
/// crowd of `drawn_crowd`: [`FIRST_PASS_PICKUP`], plus what is left of the start's spread. The
/// pre-queue was asked back over the spread after the start, and those who came before the draw
/// was visible over the spread again, so all of it has polled by `drawn_at` plus the spread; a
/// place admitted before then must not lapse before its holder's poll.
pub fn first_pass_after_start(
    pace: &Pace,
    drawn_at: Option<DateTime<Utc>>,
    drawn_crowd: Option<i64>,
    now: DateTime<Utc>,
) -> Duration {
    let (Some(drawn_at), Some(crowd)) = (drawn_at, drawn_crowd) else {
        return FIRST_PASS_PICKUP;
    };
    let returns_until = drawn_at
        + chrono::Duration::from_std(pace.start_spread(crowd)).unwrap_or(chrono::Duration::zero());
    let left = (returns_until - now).to_std().unwrap_or(Duration::ZERO);
    // Whole seconds, rounded up: the pass's times are whole seconds.
    FIRST_PASS_PICKUP + Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(max_active: Option<i32>, admit_per_minute: Option<i32>) -> Pace {
        Pace {
            max_active,
            admit_per_minute,
            pass_seconds: 300,
            heartbeat_seconds: Some(5),
        }
    }

    #[test]
    fn a_first_pass_lasts_the_pickup_unless_the_pass_is_shorter() {
        assert_eq!(pace(None, None).first_pass_seconds(), 10);
        let long_heartbeat = Pace {
            heartbeat_seconds: Some(60),
            ..pace(None, None)
        };
        assert_eq!(long_heartbeat.first_pass_seconds(), 60);
        let without_heartbeats = Pace {
            heartbeat_seconds: None,
            ..pace(None, None)
        };
        assert_eq!(without_heartbeats.first_pass_seconds(), 300);
        let short_pass = Pace {
            pass_seconds: 3,
            ..pace(None, None)
        };
        assert_eq!(short_pass.first_pass_seconds(), 3);
    }

    #[test]
    fn the_first_max_active_places_can_be_admitted_at_once() {
        let room = pace(Some(100), None);
        assert_eq!(room.earliest_turn(0), Duration::ZERO);
        assert_eq!(room.earliest_turn(99), Duration::ZERO);
        // The 101st admission waits for a slot, held at least a first pass (10 s).
        assert_eq!(room.earliest_turn(100), Duration::from_secs(10));
        assert_eq!(room.earliest_turn(199), Duration::from_secs(10));
        assert_eq!(room.earliest_turn(200), Duration::from_secs(20));
        assert_eq!(pace(None, None).earliest_turn(1_000_000), Duration::ZERO);
    }

    #[test]
    fn the_rate_bounds_what_the_slots_do_not() {
        // 600 a minute: 10 a second, a burst of 10.
        let room = pace(Some(1_000), Some(600));
        assert_eq!(room.earliest_turn(9), Duration::ZERO);
        assert_eq!(room.earliest_turn(109), Duration::from_secs(10));
        // 20 a minute: a third of one a second, a burst of one.
        let slow = pace(None, Some(20));
        assert_eq!(slow.earliest_turn(0), Duration::ZERO);
        assert_eq!(slow.earliest_turn(1), Duration::from_secs(3));
    }

    #[test]
    fn a_larger_pre_queue_comes_back_over_longer_never_past_the_longest_advice() {
        let room = pace(Some(20_000), None);
        assert_eq!(room.start_spread(0), START_SPREAD);
        assert_eq!(room.start_spread(10_000), START_SPREAD);
        assert_eq!(room.start_spread(100_000), Duration::from_secs(10));
        assert_eq!(room.start_spread(10_000_000), LONGEST_POLL_ADVICE);
        assert_eq!(room.start_spread(-1), START_SPREAD);
        let mut last = Duration::ZERO;
        for crowd in (0..1_000_000).step_by(997) {
            let spread = room.start_spread(crowd);
            assert!(spread >= last, "{crowd}: {spread:?} after {last:?}");
            last = spread;
        }
        let short_pass = Pace {
            pass_seconds: 20,
            ..room
        };
        assert_eq!(short_pass.start_spread(1_000_000), Duration::from_secs(16));
    }

    #[test]
    fn first_passes_admitted_while_the_pre_queue_comes_back_outlast_its_return() {
        let room = pace(Some(20_000), None);
        let drawn_at = DateTime::from_timestamp(1_800_000_000, 0).expect("an instant");
        let at = |millis: i64| drawn_at + chrono::Duration::milliseconds(millis);
        // No draw (a room without a start), or one of an old build: the pickup.
        assert_eq!(
            first_pass_after_start(&room, None, None, at(0)),
            FIRST_PASS_PICKUP
        );
        assert_eq!(
            first_pass_after_start(&room, Some(drawn_at), None, at(0)),
            FIRST_PASS_PICKUP
        );
        // 100,000 come back over 10 s from the draw: a pass admitted then lasts past it.
        let crowd = Some(100_000);
        assert_eq!(
            first_pass_after_start(&room, Some(drawn_at), crowd, at(0)),
            Duration::from_secs(20)
        );
        assert_eq!(
            first_pass_after_start(&room, Some(drawn_at), crowd, at(2_500)),
            Duration::from_secs(18)
        );
        assert_eq!(
            first_pass_after_start(&room, Some(drawn_at), crowd, at(10_000)),
            FIRST_PASS_PICKUP
        );
        assert_eq!(
            first_pass_after_start(&room, Some(drawn_at), crowd, at(60_000)),
            FIRST_PASS_PICKUP
        );
        // Whatever the instant of the admission, its pass ends no sooner than the pickup after
        // the last return.
        for millis in (0..12_000).step_by(37) {
            let pickup = first_pass_after_start(&room, Some(drawn_at), crowd, at(millis));
            let ends = at(millis) + chrono::Duration::from_std(pickup).expect("short");
            assert!(
                ends >= at(10_000) + chrono::Duration::seconds(10),
                "{millis}"
            );
        }
    }

    #[test]
    fn short_passes_shorten_the_longest_advice() {
        let with_pass = |pass_seconds| Pace {
            pass_seconds,
            ..pace(None, None)
        };
        assert_eq!(with_pass(10).longest_advice(), Duration::from_secs(6));
        assert_eq!(with_pass(20).longest_advice(), Duration::from_secs(16));
        assert_eq!(with_pass(300).longest_advice(), LONGEST_POLL_ADVICE);
        assert_eq!(with_pass(0).longest_advice(), Duration::ZERO);
    }

    #[test]
    fn larger_or_removed_limits_and_shorter_first_passes_admit_sooner() {
        let base = pace(Some(10), Some(60));
        assert!(!base.admits_sooner_than(&base));
        for (sooner, limits) in [
            (true, pace(Some(11), Some(60))),
            (true, pace(None, Some(60))),
            (true, pace(Some(10), Some(61))),
            (true, pace(Some(10), None)),
            (false, pace(Some(9), Some(59))),
            (false, pace(Some(10), Some(60))),
        ] {
            assert_eq!(limits.admits_sooner_than(&base), sooner, "{limits:?}");
        }
        // Limits added where there were none admit later, never sooner.
        assert!(!base.admits_sooner_than(&pace(None, None)));
        // First passes: 30 s heartbeats make them 30 s, 20 s ones 20 s; 8 s and 5 s ones both
        // leave the 10 s pickup.
        let heartbeat = |seconds| Pace {
            heartbeat_seconds: Some(seconds),
            ..base
        };
        assert!(heartbeat(20).admits_sooner_than(&heartbeat(30)));
        assert!(!heartbeat(5).admits_sooner_than(&heartbeat(8)));
        assert!(!heartbeat(30).admits_sooner_than(&heartbeat(20)));
    }

    /// The bound never shrinks as a place is further back, and never exceeds a year.
    #[test]
    fn further_back_is_never_sooner() {
        for room in [
            pace(Some(1), None),
            pace(Some(7), Some(1)),
            pace(None, Some(i32::MAX)),
            pace(Some(i32::MAX), Some(60)),
        ] {
            let mut last = Duration::ZERO;
            for ahead in (0..2_000).chain([1 << 20, 1 << 40, u64::MAX]) {
                let turn = room.earliest_turn(ahead);
                assert!(turn >= last, "{room:?} at {ahead}: {turn:?} < {last:?}");
                assert!(turn <= Duration::from_secs(31_536_000));
                last = turn;
            }
        }
    }
}
