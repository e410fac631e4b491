//! The seeded fault schedule: which faults, in what order, held how long, with how much steady
//! load between them. One `u64` seed decides it all (`StdRng`), so a failing run is replayed by
//! its seed (`SLUICE_CHAOS_SEED`); process timing still varies between replays, the faults and
//! their timings do not.
//!
//! The schedule is drawn in rounds: each round is every fault kind once, in a random order, so
//! any run of at least one round (the CI run is exactly one) meets every kind.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The seed of the CI run: fixed, so CI is reproducible.
pub(super) const CI_SEED: u64 = 15;

/// The variable that replays a run with another seed.
pub(super) const SEED_VARIABLE: &str = "SLUICE_CHAOS_SEED";

/// The seed from `SLUICE_CHAOS_SEED` (decimal or `0x` hex), else `default`.
///
/// # Panics
/// If the variable is set but is not a number: a mistyped replay must not run another seed.
pub(super) fn seed_from_env(default: impl FnOnce() -> u64) -> u64 {
    match std::env::var(SEED_VARIABLE) {
        Ok(text) if !text.trim().is_empty() => parse_seed(text.trim())
            .unwrap_or_else(|| panic!("{SEED_VARIABLE}={text:?} is not a u64 (decimal or 0x…)")),
        _ => default(),
    }
}

fn parse_seed(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// The kinds of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum FaultKind {
    /// `FLUSHALL`: every key gone, the server stays up.
    FlushAll,
    /// Redis SIGKILLed, down for the hold, restarted with no data.
    RedisRestart,
    /// `BGSAVE`, load for the hold, then Redis SIGKILLed and restarted from that older dump: it
    /// comes back with a consistent-looking state that lacks the last seconds of writes.
    RedisRollback,
    /// PostgreSQL stopped (fast shutdown) for the hold, then started on the same data.
    PostgresRestart,
    /// A gateway SIGKILLed, down for the hold, started again.
    GatewayKill,
    /// A gateway SIGSTOPped for the hold (its connections hang), then SIGCONTed.
    GatewayStop,
    /// An executor SIGKILLed, down for the hold, started again.
    ExecutorKill,
    /// An executor SIGSTOPped for longer than its lease (its leases lapse and the other
    /// executor takes its work over), then SIGCONTed: it wakes up believing it still holds it.
    ExecutorStop,
}

impl FaultKind {
    pub(super) const ALL: [FaultKind; 8] = [
        FaultKind::FlushAll,
        FaultKind::RedisRestart,
        FaultKind::RedisRollback,
        FaultKind::PostgresRestart,
        FaultKind::GatewayKill,
        FaultKind::GatewayStop,
        FaultKind::ExecutorKill,
        FaultKind::ExecutorStop,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            FaultKind::FlushAll => "Redis FLUSHALL",
            FaultKind::RedisRestart => "Redis killed, restarted empty",
            FaultKind::RedisRollback => "Redis killed, restarted from an older RDB",
            FaultKind::PostgresRestart => "PostgreSQL stopped and started",
            FaultKind::GatewayKill => "gateway SIGKILL, started again",
            FaultKind::GatewayStop => "gateway SIGSTOP, then SIGCONT",
            FaultKind::ExecutorKill => "executor SIGKILL, started again",
            FaultKind::ExecutorStop => "executor SIGSTOP past its lease, then SIGCONT",
        }
    }

    /// Redis loses (part of) the projection: a rebuild should follow, and the ticket positions
    /// right after it are checked.
    pub(super) fn loses_redis(self) -> bool {
        matches!(
            self,
            FaultKind::FlushAll | FaultKind::RedisRestart | FaultKind::RedisRollback
        )
    }
}

/// The ranges a schedule draws its timings from.
#[derive(Debug, Clone)]
pub(super) struct Timing {
    /// Steady load before each fault (after the previous one recovered).
    pub(super) gap: (Duration, Duration),
    /// How long a server or process stays down or stopped.
    pub(super) down: (Duration, Duration),
    /// Load between the `BGSAVE` and the kill of a rollback: writes the dump will lack.
    pub(super) rollback_age: (Duration, Duration),
    /// The executors' lease: an executor stop lasts longer than this, so its leases lapse.
    pub(super) lease: Duration,
}

/// One fault as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Planned {
    pub(super) kind: FaultKind,
    /// Down or stopped for this long; for a rollback, the age of the dump at the kill.
    pub(super) hold: Duration,
    /// Steady load before it.
    pub(super) gap: Duration,
    /// Which of the two gateways or executors (0 or 1); unused by the server faults.
    pub(super) target: usize,
    /// Whether a burst of work is added just before it, so it meets a backlog.
    pub(super) burst: bool,
}

/// The faults of one seed, drawn on demand, a round of every kind at a time.
pub(super) struct Schedule {
    rng: StdRng,
    timing: Timing,
    round: Vec<FaultKind>,
}

impl Schedule {
    pub(super) fn new(seed: u64, timing: Timing) -> Schedule {
        Schedule {
            rng: StdRng::seed_from_u64(seed),
            timing,
            round: Vec::new(),
        }
    }

    /// The first `n` faults (for printing the plan of a run and for the tests of the schedule).
    pub(super) fn take(seed: u64, timing: Timing, n: usize) -> Vec<Planned> {
        let mut schedule = Schedule::new(seed, timing);
        (0..n).map(|_| schedule.next_fault()).collect()
    }

    /// The next fault: the next of the current round, a new shuffled round once it is spent.
    pub(super) fn next_fault(&mut self) -> Planned {
        if self.round.is_empty() {
            self.round = FaultKind::ALL.to_vec();
            self.round.shuffle(&mut self.rng);
            // Popped from the back.
            self.round.reverse();
        }
        let kind = self.round.pop().expect("a round is never empty here");
        let timing = self.timing.clone();
        let hold = match kind {
            FaultKind::FlushAll => Duration::ZERO,
            FaultKind::RedisRollback => self.between(timing.rollback_age),
            FaultKind::ExecutorStop => {
                // Past the lease by at least a third of it, so every lease it holds has lapsed
                // and been taken over before it wakes.
                let least = timing.lease + timing.lease / 3;
                self.between((least, least.max(timing.down.1) + timing.lease))
            }
            _ => self.between(timing.down),
        };
        let gap = self.between(timing.gap);
        let target = self.rng.random_range(0..2);
        let drawn = self.rng.random_bool(0.75);
        Planned {
            kind,
            hold,
            gap,
            target,
            // A Redis loss always meets a backlog, so the positions after its rebuild have
            // queues to compare.
            burst: kind.loses_redis() || drawn,
        }
    }

    fn between(&mut self, (low, high): (Duration, Duration)) -> Duration {
        if high <= low {
            return low;
        }
        let ms = self
            .rng
            .random_range(low.as_millis() as u64..=high.as_millis() as u64);
        Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            gap: (Duration::from_millis(500), Duration::from_secs(2)),
            down: (Duration::from_millis(300), Duration::from_secs(2)),
            rollback_age: (Duration::from_secs(2), Duration::from_secs(3)),
            lease: Duration::from_millis(1500),
        }
    }

    /// Every round holds every kind once; the CI run (one round) therefore meets all eight.
    #[test]
    fn every_round_holds_every_kind_once() {
        for seed in [CI_SEED, 0, 1, 42, u64::MAX] {
            let planned = Schedule::take(seed, timing(), 3 * FaultKind::ALL.len());
            for round in planned.chunks(FaultKind::ALL.len()) {
                let mut kinds: Vec<FaultKind> = round.iter().map(|p| p.kind).collect();
                kinds.sort();
                assert_eq!(kinds, FaultKind::ALL.to_vec(), "seed {seed}: {round:?}");
            }
        }
    }

    /// One seed, one schedule; other seeds, other orders.
    #[test]
    fn the_seed_decides_the_schedule() {
        let n = 2 * FaultKind::ALL.len();
        assert_eq!(
            Schedule::take(7, timing(), n),
            Schedule::take(7, timing(), n)
        );
        let orders: std::collections::HashSet<Vec<FaultKind>> = (0..8)
            .map(|seed| {
                Schedule::take(seed, timing(), n)
                    .iter()
                    .map(|p| p.kind)
                    .collect()
            })
            .collect();
        assert!(orders.len() > 1, "eight seeds drew one order: {orders:?}");
    }

    /// Holds stay within their ranges, and an executor stop outlasts the lease.
    #[test]
    fn holds_follow_the_timing() {
        let timing = timing();
        for planned in Schedule::take(99, timing.clone(), 40) {
            assert!(planned.gap >= timing.gap.0 && planned.gap <= timing.gap.1);
            assert!(planned.target < 2);
            match planned.kind {
                FaultKind::FlushAll => assert_eq!(planned.hold, Duration::ZERO),
                FaultKind::ExecutorStop => assert!(
                    planned.hold > timing.lease,
                    "{planned:?} does not outlast the lease"
                ),
                FaultKind::RedisRollback => assert!(planned.hold >= timing.rollback_age.0),
                _ => assert!(planned.hold >= timing.down.0 && planned.hold <= timing.down.1),
            }
        }
    }

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed("0x2a"), Some(42));
        assert_eq!(parse_seed("x"), None);
    }
}
