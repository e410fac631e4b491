//! The start rate of one resource queue, behind ticket ETAs: how fast commands of the queue
//! have been starting lately, as `admit.lua` records it in `{a:ID}:starts` (field: the queue
//! suffix) and `ticket.lua` reads it back with one `HGET`.
//!
//! An ETA promises when a command starts, so the rate is that of starts (admissions) of its own
//! queue, the queue its position is a rank in, not of completions: completions lag starts by
//! the handler's time and mix the queues of the command. The record is
//! `"<decayed> <at_ms> <born_ms> <cap>"`:
//!
//! - `decayed`: the queue's starts since `born_ms`, each weighing `e^(−age/τ)`
//!   (τ = [`TIME_CONSTANT_MS`]) as of `at_ms`, the last admission that started something there;
//! - `born_ms`: the first of those admissions (since the queue last had nothing waiting);
//! - `cap`: the command's declared `per_second` at the last start (0: none): the queue cannot
//!   drain faster for long, however a burst read.
//!
//! The rate at `now` is `decayed · e^(−(now−at)/τ) / (τ · (1 − e^(−(now−born)/τ)))`, at most
//! `cap`: the decayed starts over the decayed time they were counted in, so a drain that began a
//! fraction of a second ago is not divided by a whole second, and one that began long ago weighs
//! its last τ or so. The first admission counts too: when a queue is held back by its in-flight
//! slots, the first batch fills them and the next starts wait for those to end, so `batch /
//! time since` is what the queue drains at once the first ones end; when it is held back by its
//! start rate, the first batch is the burst and the cap decides. Below half a start of recent
//! evidence (nothing started for a long while) there is no rate: an ETA would be a guess.
//! Approximations: starts are counted at their admission call's instant, and a rebuild or the
//! queue emptying forgets the record (its next start begins a new one).

/// τ of the exponential decay, in milliseconds. `admit.lua` decays with the same constant.
pub const TIME_CONSTANT_MS: f64 = 10_000.0;

/// Less recent evidence than this many starts gives no rate.
pub const MIN_EVIDENCE: f64 = 0.5;

/// One queue's start record, as `admit.lua` writes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartRecord {
    /// Starts since `born_ms`, decayed to `at_ms`.
    pub decayed: f64,
    pub at_ms: i64,
    pub born_ms: i64,
    /// The declared `per_second` (0 or less: no cap).
    pub cap: f64,
}

impl StartRecord {
    /// Reads `"<decayed> <at_ms> <born_ms> <cap>"`; None for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut fields = text.split_ascii_whitespace();
        let record = Self {
            decayed: fields.next()?.parse().ok()?,
            at_ms: fields.next()?.parse().ok()?,
            born_ms: fields.next()?.parse().ok()?,
            cap: fields.next()?.parse().ok()?,
        };
        let sane = fields.next().is_none()
            && record.decayed.is_finite()
            && record.decayed >= 0.0
            && record.cap.is_finite()
            && record.born_ms <= record.at_ms;
        sane.then_some(record)
    }

    /// Starts per second of the queue at `now_ms` (Redis time); None when no positive, finite
    /// rate follows (a record from the future, too little recent evidence, or no time at all
    /// has passed since its birth and nothing caps it).
    pub fn per_second(&self, now_ms: i64) -> Option<f64> {
        let since_last = (now_ms - self.at_ms).max(0) as f64;
        let age = (now_ms - self.born_ms) as f64;
        if age < 0.0 {
            return None;
        }
        let starts = self.decayed * (-since_last / TIME_CONSTANT_MS).exp();
        if starts < MIN_EVIDENCE {
            return None;
        }
        // The decayed time counted in, seconds: `∫ e^(−s/τ) ds` over the record's age.
        let window = TIME_CONSTANT_MS * -(-age / TIME_CONSTANT_MS).exp_m1() / 1000.0;
        let measured = if window > 0.0 {
            starts / window
        } else {
            f64::INFINITY
        };
        let rate = if self.cap > 0.0 {
            measured.min(self.cap)
        } else {
            measured
        };
        (rate.is_finite() && rate > 0.0).then_some(rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(decayed: f64, at_ms: i64, born_ms: i64, cap: f64) -> StartRecord {
        StartRecord {
            decayed,
            at_ms,
            born_ms,
            cap,
        }
    }

    #[test]
    fn parses_what_admit_lua_writes_and_nothing_else() {
        assert_eq!(
            StartRecord::parse("12.5000 1700000001000 1700000000000 100"),
            Some(record(12.5, 1_700_000_001_000, 1_700_000_000_000, 100.0))
        );
        assert_eq!(StartRecord::parse("0 5 5 0"), Some(record(0.0, 5, 5, 0.0)));
        for bad in [
            "",
            "1 2 3",
            "1 2 3 4 5",
            "x 2 1 4",
            "-1 2 1 4",
            "nan 2 1 4",
            "1 1 2 4",
            "1 2 1 inf",
        ] {
            assert_eq!(StartRecord::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_steady_drain_reads_as_its_rate() {
        // 20 starts per second for 30 s, as admit.lua would have decayed them: the sum of
        // e^(−k·50ms/τ) over 600 starts, the first at the record's birth.
        let step = 50.0;
        let decayed: f64 = (0..600)
            .map(|k| (-(k as f64) * step / TIME_CONSTANT_MS).exp())
            .sum();
        let rate = record(decayed, 29_950, 0, 0.0)
            .per_second(29_950)
            .expect("a rate");
        assert!((rate - 20.0).abs() < 0.2, "{rate}");
    }

    #[test]
    fn an_early_drain_is_not_diluted_by_a_whole_second() {
        // 20 starts in the first 200 ms: about 100 per second, not 20.
        let rate = record(20.0, 200, 0, 0.0).per_second(200).expect("a rate");
        assert!((100.0..102.0).contains(&rate), "{rate}");
    }

    #[test]
    fn a_first_batch_held_by_its_slots_reads_as_batch_over_time() {
        // 64 started at once and hold every slot: two seconds later, about 64 per 2 s.
        let rate = record(64.0, 0, 0, 1_000.0)
            .per_second(2_000)
            .expect("a rate");
        assert!((28.0..32.0).contains(&rate), "{rate}");
    }

    #[test]
    fn the_declared_rate_caps_a_burst() {
        assert_eq!(record(500.0, 100, 0, 100.0).per_second(100), Some(100.0));
        // Just after the first admission: the cap is the estimate.
        assert_eq!(record(64.0, 0, 0, 100.0).per_second(0), Some(100.0));
        assert_eq!(record(64.0, 0, 0, 100.0).per_second(5), Some(100.0));
        // Without a cap, no time at all gives no rate.
        assert_eq!(record(64.0, 0, 0, 0.0).per_second(0), None);
    }

    #[test]
    fn a_queue_where_nothing_starts_reads_ever_slower_then_unknown() {
        let mut last = f64::INFINITY;
        for now in [1_000, 5_000, 20_000, 40_000] {
            let rate = record(50.0, 500, 0, 100.0).per_second(now).expect("a rate");
            assert!(rate < last, "{rate} at {now}");
            last = rate;
        }
        // 50 starts decay below half a start after τ·ln 100 ≈ 46 s: no rate any more.
        assert_eq!(record(50.0, 500, 0, 100.0).per_second(48_000), None);
        assert_eq!(record(0.4, 500, 0, 100.0).per_second(500), None);
    }

    #[test]
    fn a_record_from_the_future_gives_no_rate() {
        assert_eq!(record(3.0, 1_000, 900, 10.0).per_second(800), None);
        // Read between its birth and its last update (another clock reading): still a rate.
        assert!(record(3.0, 1_000, 0, 10.0).per_second(500).is_some());
    }
}
