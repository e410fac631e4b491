//! Waiting polls answered from memory: per application, a snapshot of the resource queues this
//! gateway was recently asked about, refreshed by one `waiting.lua` pull at most every
//! [`REFRESH`] while polls keep arriving, so the polls of commands deep in a queue (whose answer,
//! "accepted, position p, eta e", changes slowly) cost Redis nothing.
//!
//! Every position told, from Redis or from memory, is exact at its `observed_at`: the command's
//! `ZRANK` in its resource queue at that Redis instant. The pull reads each queue's first
//! entries as runs of consecutive sequences ([`Ranks`]: at most [`RUNS_ENTRIES`] entries within
//! [`reads_per_queue`], one run when the queue's sequences are contiguous), so the rank of a
//! sequence in them is found exactly by binary search; where memory cannot know the exact rank
//! (the sequence is not in the runs), Redis answers.
//!
//! A poll is answered from memory only when everything below holds, otherwise exactly as
//! before (`ticket.lua`):
//! - its ticket states the command's queue sequence `s` and queue tag (ticket version 3);
//! - the snapshot is at most [`MAX_AGE`] old, its projection was ready, and this gateway knows
//!   which queue the tag stands for and pulled it;
//! - `s` is above the watermark (no gone entry could have been missed for it, see below);
//! - `s` is above the highest sequence started from the queue (`admit.lua` keeps it: a waiting
//!   command above it has never started, and a requeued command is at or below it) and the
//!   command is not on the gone record (it did not leave the queue without starting);
//! - `s` is in the queue's runs: it was waiting at the pull's instant, at the rank the runs
//!   give (a sequence beyond them, or not waiting then, is not answered from memory);
//! - that rank is at least [`LOOKAHEAD`] plus what the queue can start before the snapshot is
//!   replaced, so it cannot have started meanwhile either.
//!
//! Such an answer is what Redis said at the snapshot's instant (`observed_at` is the pull's
//! Redis time): `accepted`, the position the runs give (its `ZRANK` then), the ETA and advice
//! from the same `poll_policy` functions. Since then the position can only have fallen, unless a
//! command ahead was put back (a retry requeued at its old sequence, a rebuild restoring one).
//!
//! A command that leaves its queue without starting (cancelled, expired) is on the gone record,
//! read incrementally (a cursor) by every pull: the first snapshot installed after its end
//! refuses memory for it. A pull that finds it missed entries (trimmed, or more than one pull
//! returns) or a new generation (a rebuild) sets the watermark to the application's sequence
//! then: no command at or below it is answered from memory again. Memory is bounded: queues
//! asked about in the last [`FORGET_AFTER`], at most [`RUNS_KEPT`] runs per queue, gone entries
//! up to [`GONE_CAP`] (the lowest sequences are dropped first, raising the watermark to them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sluice_durable::ids::{ApplicationId, CommandId};
use sluice_redis::start_rate::StartRecord;
use sluice_redis::waiting::{RunLimits, WaitingSnapshot, pull};
use sluice_redis::{AppKeys, Projection};

use crate::identity::ticket::{QueueClaim, queue_tag};

/// At most one pull per application per this period.
pub const REFRESH: Duration = Duration::from_millis(100);
/// A snapshot older than this answers nothing.
pub const MAX_AGE: Duration = Duration::from_millis(200);
/// Pulls continue while at least this many polls per second arrive for the application (fewer
/// polls than pulls would cost Redis more than answering them).
pub const MIN_POLLS_PER_SECOND: u32 = 20;
/// A queue not asked about for this long is no longer pulled.
pub const FORGET_AFTER: Duration = Duration::from_secs(5);
/// The admission lookahead (`admit.lua`, executor default 16): a call may start any of the
/// first this many of a queue.
pub const LOOKAHEAD: u64 = 16;
/// Gone entries read per pull; more means entries were missed (watermark).
pub const GONE_PER_PULL: u64 = 1024;
/// Gone entries kept per application.
pub const GONE_CAP: usize = 16_384;
/// Queue suffixes remembered per application (learned from tickets minted and Redis answers).
pub const SUFFIX_CAP: usize = 10_000;
/// A queue's runs cover at most this many of its first entries: a drop of 10,000 people on
/// one offer is answered from memory to its last waiter, and a contiguous queue costs the pull
/// about the same however deep (it finds a run's end by doubling and halving, not by reading
/// it; see `waiting.lua` and `sluice-bench-waiting`).
pub const RUNS_ENTRIES: u64 = 16_384;
/// Reads per queue per pull for its runs, at most (a `ZRANGE` counts 4 plus the entries it
/// returns): what bounds the pull's cost where sequences interleave. Two queues taking turns
/// give runs of one; about 1,600 of them are covered, for about 1.5 ms of Redis (about 55
/// times the pull without runs), where a contiguous queue costs 54–77 µs
/// (`sluice-bench-waiting`).
pub const RUNS_READS: u64 = 2_048;
/// Reads for the runs of all the queues of one pull: a pull of many queues gives each its
/// share, at least [`RUNS_READS_MIN`] (a contiguous queue's run needs about 60).
pub const PULL_READS: u64 = 4_096;
/// The least reads a queue is given however many are pulled.
pub const RUNS_READS_MIN: u64 = 64;
/// Runs kept per queue (the pull returns fewer within [`RUNS_READS`]; a prefix of the runs
/// still covers a prefix of the ranks exactly).
pub const RUNS_KEPT: usize = 2_048;

/// The reads each queue's runs are given when `queues` are pulled at once.
pub fn reads_per_queue(queues: usize) -> u64 {
    (PULL_READS / queues.max(1) as u64).clamp(RUNS_READS_MIN, RUNS_READS)
}

/// What memory answers for a waiting command.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryAnswer {
    pub position: u64,
    /// Starts per second of its queue at the snapshot's instant (for the ETA).
    pub starts_per_second: Option<f64>,
    pub observed_at_ms: i64,
    pub generation: i64,
}

/// Every application's view. One per gateway.
pub struct WaitingView {
    redis: Projection,
    /// `gateway.polls_from_memory`: off, nothing is answered from memory.
    enabled: bool,
    apps: Mutex<HashMap<ApplicationId, Arc<AppView>>>,
}

struct AppView {
    keys: AppKeys,
    /// Single flight: one refresh loop per application at a time.
    running: AtomicBool,
    state: Mutex<AppState>,
}

#[derive(Default)]
struct AppState {
    /// Queue tag → suffix.
    suffixes: HashMap<u64, Arc<str>>,
    /// Queue tag → last poll that asked about it.
    asked: HashMap<u64, Instant>,
    /// Polls since `window_start` (decides whether pulls continue).
    polls: u32,
    window_start: Option<Instant>,
    snapshot: Option<Snapshot>,
    gone_cursor: u64,
    /// Command → its sequence (or an upper bound), for commands that left a queue unstarted.
    gone: HashMap<CommandId, u64>,
    /// No command at or below this sequence is answered from memory.
    watermark: u64,
    generation: Option<i64>,
}

struct Snapshot {
    /// When the pull was sent (so its age is never understated).
    sent: Instant,
    ready: bool,
    generation: Option<i64>,
    now_ms: i64,
    /// Queue tag → its state.
    queues: HashMap<u64, PulledQueue>,
}

/// What a snapshot keeps of one queue.
struct PulledQueue {
    /// The highest sequence started from it (None: no start on record, nothing is answered).
    started_seq: Option<u64>,
    start_record: Option<StartRecord>,
    ranks: Ranks,
}

/// A queue's first entries as runs of consecutive sequences, each with the rank it starts at:
/// the exact rank (`ZRANK` at the pull's instant) of any sequence in them by binary search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranks {
    /// `(first sequence, length, rank of the first sequence)`, ascending.
    runs: Vec<(u64, u64, u64)>,
}

impl Ranks {
    /// The first `kept` of a pull's runs `(start, length)`, in rank order. A pull returns them
    /// ascending and apart; should one not be, it and everything after it is dropped (what is
    /// kept still covers a prefix of the ranks exactly).
    pub fn new(runs: &[(u64, u64)], kept: usize) -> Ranks {
        let mut kept_runs = Vec::with_capacity(runs.len().min(kept));
        let mut rank = 0u64;
        let mut next = 0u64;
        for &(start, length) in runs.iter().take(kept) {
            if length == 0 || start < next {
                break;
            }
            let Some(end) = start.checked_add(length) else {
                break;
            };
            kept_runs.push((start, length, rank));
            rank += length;
            next = end;
        }
        Ranks { runs: kept_runs }
    }

    /// The rank of `seq`, or None when it is not in the runs (not waiting at the pull's
    /// instant, or beyond what the runs cover).
    pub fn rank_of(&self, seq: u64) -> Option<u64> {
        let after = self.runs.partition_point(|&(start, _, _)| start <= seq);
        let (start, length, rank) = *self.runs.get(after.checked_sub(1)?)?;
        (seq - start < length).then(|| rank + (seq - start))
    }

    /// How many of the queue's first entries the runs cover.
    pub fn covered(&self) -> u64 {
        self.runs
            .last()
            .map_or(0, |&(_, length, rank)| rank + length)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state is rebuilt by the next pull whatever a panicking holder left: never poisoned.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WaitingView {
    pub fn new(redis: Projection, enabled: bool) -> Self {
        Self {
            redis,
            enabled,
            apps: Mutex::default(),
        }
    }

    fn app(&self, application_id: ApplicationId) -> Arc<AppView> {
        let mut apps = lock(&self.apps);
        Arc::clone(apps.entry(application_id).or_insert_with(|| {
            Arc::new(AppView {
                keys: AppKeys::new(application_id),
                running: AtomicBool::new(false),
                state: Mutex::default(),
            })
        }))
    }

    /// Remembers which queue `tag` stands for (a ticket minted here, or Redis naming the queue
    /// of a polled command); a suffix whose tag differs is ignored.
    pub fn learn(&self, application_id: ApplicationId, tag: u64, suffix: &str) {
        let app = self.app(application_id);
        let mut state = lock(&app.state);
        if state.suffixes.contains_key(&tag) || queue_tag(suffix) != tag {
            return;
        }
        if state.suffixes.len() >= SUFFIX_CAP {
            let asked = std::mem::take(&mut state.asked);
            state.suffixes.retain(|tag, _| asked.contains_key(tag));
            state.asked = asked;
        }
        state.suffixes.insert(tag, Arc::from(suffix));
    }

    /// The queue suffix `tag` stands for, once learnt: what a poll that Redis answers passes to
    /// `ticket.lua`, which reads only the queue it is given.
    pub fn suffix_of(&self, application_id: ApplicationId, tag: u64) -> Option<Arc<str>> {
        lock(&self.app(application_id).state)
            .suffixes
            .get(&tag)
            .cloned()
    }

    /// The application's watermark: no command at or below this sequence is answered from
    /// memory (0 until a pull missed gone entries or saw a rebuild).
    pub fn watermark(&self, application_id: ApplicationId) -> u64 {
        lock(&self.app(application_id).state).watermark
    }

    /// Whether polls are answered from memory at all (`gateway.polls_from_memory`); tickets
    /// state their queue only then.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The answer from memory for a poll of `command_id`, or None (then Redis answers). Counts
    /// the poll toward keeping the application's snapshot fresh, and starts its refresh loop
    /// when polls come often enough.
    pub fn answer(
        &self,
        application_id: ApplicationId,
        command_id: CommandId,
        queue: QueueClaim,
    ) -> Option<MemoryAnswer> {
        if !self.enabled {
            return None;
        }
        let app = self.app(application_id);
        let now = Instant::now();
        let (answer, start) = {
            let mut state = lock(&app.state);
            if state.asked.len() >= SUFFIX_CAP && !state.asked.contains_key(&queue.tag) {
                // Polls too few to start the refresh loop (which forgets old queues) but for
                // ever more queues: forget here too.
                state
                    .asked
                    .retain(|_, at| now.duration_since(*at) < FORGET_AFTER);
            }
            state.asked.insert(queue.tag, now);
            let window_start = *state.window_start.get_or_insert(now);
            if now.duration_since(window_start) >= Duration::from_secs(1) {
                state.window_start = Some(now);
                state.polls = 0;
            }
            state.polls = state.polls.saturating_add(1);
            let start = state.polls >= MIN_POLLS_PER_SECOND;
            (state.answer(command_id, queue, now), start)
        };
        if start && !app.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(refresh_loop(self.redis.clone(), app));
        }
        answer
    }
}

impl AppState {
    fn answer(
        &self,
        command_id: CommandId,
        queue: QueueClaim,
        now: Instant,
    ) -> Option<MemoryAnswer> {
        let snapshot = self.snapshot.as_ref()?;
        if !snapshot.ready || now.duration_since(snapshot.sent) > MAX_AGE {
            return None;
        }
        let generation = snapshot.generation?;
        if queue.seq <= self.watermark || self.gone.contains_key(&command_id) {
            return None;
        }
        let view = snapshot.queues.get(&queue.tag)?;
        if queue.seq <= view.started_seq? {
            return None;
        }
        // Its exact rank at the pull's instant; not in the runs: not known here.
        let position = view.ranks.rank_of(queue.seq)?;
        let rate = view
            .start_record
            .and_then(|record| record.per_second(snapshot.now_ms));
        if position < safety_margin(view.start_record.map(|r| r.cap), rate) {
            return None;
        }
        Some(MemoryAnswer {
            position,
            starts_per_second: rate,
            observed_at_ms: snapshot.now_ms,
            generation,
        })
    }

    /// Installs a pull's result (sent at `sent`, for `tags` in order).
    fn install(&mut self, sent: Instant, tags: &[u64], pulled: WaitingSnapshot) {
        // A projection being rebuilt (or flushed) shows no generation: nothing is answered
        // then, and the one it opens at is compared with the last one seen.
        let generation_changed = match (self.generation, pulled.generation) {
            (Some(old), Some(new)) => old != new,
            _ => false,
        };
        if generation_changed {
            // A rebuild: its gone record starts again, and anything before it may be missing.
            self.gone.clear();
            self.gone_cursor = 0;
        }
        if generation_changed || pulled.missed_gone(self.gone_cursor) {
            self.watermark = self.watermark.max(pulled.app_seq);
            self.gone_cursor = pulled.gone_high;
        }
        if pulled.generation.is_some() {
            self.generation = pulled.generation;
        }
        for entry in &pulled.gone {
            if entry.seq > self.watermark {
                self.gone.insert(entry.command_id, entry.seq);
            }
            self.gone_cursor = self.gone_cursor.max(entry.number);
        }
        if self.gone.len() > GONE_CAP {
            let mut seqs: Vec<u64> = self.gone.values().copied().collect();
            seqs.sort_unstable();
            let cut = seqs[self.gone.len() - GONE_CAP / 2];
            self.watermark = self.watermark.max(cut);
            let watermark = self.watermark;
            self.gone.retain(|_, seq| *seq > watermark);
        }
        let watermark = self.watermark;
        self.gone.retain(|_, seq| *seq > watermark);
        self.snapshot = Some(Snapshot {
            sent,
            ready: pulled.ready,
            generation: pulled.generation,
            now_ms: pulled.now_ms,
            queues: tags
                .iter()
                .copied()
                .zip(pulled.queues)
                .map(|(tag, view)| {
                    let queue = PulledQueue {
                        started_seq: view.started_seq,
                        start_record: view.start_record,
                        ranks: Ranks::new(&view.runs, RUNS_KEPT),
                    };
                    (tag, queue)
                })
                .collect(),
        });
    }
}

/// The smallest position answered from memory: the lookahead, plus the starts the queue can
/// make while the snapshot may still answer (its age limit plus a refresh), at the faster of
/// its declared cap and twice its measured rate; with neither known, one more lookahead per
/// refresh.
pub fn safety_margin(cap: Option<f64>, measured: Option<f64>) -> u64 {
    let bound = cap
        .filter(|c| c.is_finite() && *c > 0.0)
        .unwrap_or(0.0)
        .max(measured.filter(|r| r.is_finite()).unwrap_or(0.0) * 2.0);
    let window = (MAX_AGE + REFRESH).as_secs_f64();
    let during = if bound > 0.0 {
        (bound * window).ceil() as u64
    } else {
        LOOKAHEAD * 3
    };
    LOOKAHEAD + during + 1
}

/// Pulls every [`REFRESH`] while polls keep coming, then stops (the next busy poll starts it
/// again).
async fn refresh_loop(redis: Projection, app: Arc<AppView>) {
    let mut tick = tokio::time::interval(REFRESH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (suffixes, tags, cursor) = {
            let mut state = lock(&app.state);
            let now = Instant::now();
            let quiet = state.window_start.is_none_or(|start| {
                now.duration_since(start) >= Duration::from_secs(2)
                    || (now.duration_since(start) >= Duration::from_secs(1)
                        && state.polls < MIN_POLLS_PER_SECOND)
            });
            if quiet {
                state.snapshot = None;
                app.running.store(false, Ordering::Release);
                return;
            }
            state
                .asked
                .retain(|_, at| now.duration_since(*at) < FORGET_AFTER);
            let mut suffixes = Vec::new();
            let mut tags = Vec::new();
            for tag in state.asked.keys() {
                if let Some(suffix) = state.suffixes.get(tag) {
                    suffixes.push(suffix.to_string());
                    tags.push(*tag);
                }
            }
            (suffixes, tags, state.gone_cursor)
        };
        let sent = Instant::now();
        let runs = RunLimits {
            entries: RUNS_ENTRIES,
            reads: reads_per_queue(suffixes.len()),
        };
        match pull(&redis, &app.keys, &suffixes, cursor, GONE_PER_PULL, runs).await {
            Ok(pulled) => lock(&app.state).install(sent, &tags, pulled),
            Err(error) => {
                tracing::debug!(%error, "waiting pull failed; polls go to Redis");
                lock(&app.state).snapshot = None;
            }
        }
    }
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of a sorted set of unique sequences.
    pub(super) fn runs_of(seqs: &[u64]) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &seq in seqs {
            match runs.last_mut() {
                Some((start, length)) if *start + *length == seq => *length += 1,
                _ => runs.push((seq, 1)),
            }
        }
        runs
    }

    fn ranks_of(seqs: &[u64]) -> Ranks {
        Ranks::new(&runs_of(seqs), RUNS_KEPT)
    }

    #[test]
    fn a_contiguous_queue_is_one_run_and_ranks_from_its_start() {
        let seqs: Vec<u64> = (1000..1900).collect();
        let ranks = ranks_of(&seqs);
        assert_eq!(ranks.runs.len(), 1);
        for (rank, seq) in seqs.iter().enumerate() {
            assert_eq!(ranks.rank_of(*seq), Some(rank as u64));
        }
        assert_eq!(ranks.rank_of(999), None, "before the head");
        assert_eq!(ranks.rank_of(1900), None, "after the tail");
        assert_eq!(ranks.covered(), 900);
    }

    #[test]
    fn interleaved_queues_with_holes_rank_exactly() {
        // Two queues took turns, a block behind this one's front left, then it took intake
        // alone: what interpolation between head and tail got wrong by hundreds.
        let mut mine: Vec<u64> = (0..400).map(|i| 10 + 2 * i).collect();
        mine.drain(8..288);
        mine.extend(1000..1160);
        let ranks = ranks_of(&mine);
        for (rank, seq) in mine.iter().enumerate() {
            assert_eq!(ranks.rank_of(*seq), Some(rank as u64), "{seq}");
        }
        for absent in [11, 27, 30, 300, 809, 999, 1160, u64::MAX] {
            assert_eq!(ranks.rank_of(absent), None, "{absent} is not waiting");
        }
    }

    #[test]
    fn sequences_beyond_the_runs_kept_are_not_known() {
        // Every other sequence: one run each. Keeping 100 runs covers the first 100 entries.
        let seqs: Vec<u64> = (0..500).map(|i| 2 * i + 1).collect();
        let ranks = Ranks::new(&runs_of(&seqs), 100);
        assert_eq!(ranks.covered(), 100);
        assert_eq!(ranks.rank_of(seqs[99]), Some(99));
        assert_eq!(
            ranks.rank_of(seqs[100]),
            None,
            "waiting, but beyond the runs"
        );
        // A pull's runs cover a prefix too: what lies beyond is simply absent.
        let prefix = ranks_of(&seqs[..300]);
        assert_eq!(prefix.rank_of(seqs[299]), Some(299));
        assert_eq!(prefix.rank_of(seqs[300]), None);
    }

    #[test]
    fn runs_out_of_order_end_the_index() {
        let ranks = Ranks::new(&[(10, 5), (20, 3), (18, 4), (40, 1)], RUNS_KEPT);
        assert_eq!(
            ranks.covered(),
            8,
            "the run overlapping its predecessor and later ones"
        );
        assert_eq!(ranks.rank_of(22), Some(7));
        assert_eq!(ranks.rank_of(40), None);
        assert_eq!(Ranks::new(&[(5, 0), (9, 2)], RUNS_KEPT).covered(), 0);
        assert_eq!(Ranks::new(&[], RUNS_KEPT).rank_of(0), None);
        // A run whose end does not fit in 64 bits (no sequence comes near) ends the index too.
        let top = Ranks::new(&[(u64::MAX - 2, 1), (u64::MAX - 1, 1), (u64::MAX, 1)], 9);
        assert_eq!(top.rank_of(u64::MAX - 1), Some(1));
        assert_eq!(top.rank_of(u64::MAX), None);
    }

    use sluice_redis::waiting::{GoneEntry, QueueView};

    const TAG: u64 = 7;

    fn pulled(generation: i64, app_seq: u64, gone: Vec<GoneEntry>, high: u64) -> WaitingSnapshot {
        WaitingSnapshot {
            ready: true,
            generation: Some(generation),
            now_ms: 1_000,
            app_seq,
            gone_low: gone.first().map_or(0, |e| e.number),
            gone_high: high,
            gone,
            queues: vec![QueueView {
                started_seq: Some(100),
                waiting: 900,
                head_seq: Some(101),
                tail_seq: Some(1000),
                start_record: None,
                runs: vec![(101, 900)],
                more: false,
            }],
        }
    }

    fn claim(seq: u64) -> QueueClaim {
        QueueClaim {
            seq,
            tag: TAG,
            accepted_at_ms: 0,
        }
    }

    #[test]
    fn memory_answers_only_deep_waiting_commands_of_a_fresh_snapshot() {
        let mut state = AppState::default();
        let now = Instant::now();
        let id = CommandId::new_v7();
        assert_eq!(state.answer(id, claim(500), now), None, "no snapshot");
        state.install(now, &[TAG], pulled(3, 1000, vec![], 0));
        let answer = state.answer(id, claim(500), now).expect("from memory");
        assert_eq!((answer.position, answer.generation), (399, 3));
        assert_eq!(state.answer(id, claim(100), now), None, "may have started");
        assert_eq!(state.answer(id, claim(1001), now), None, "past the tail");
        assert_eq!(state.answer(id, claim(110), now), None, "within the margin");
        let other = QueueClaim {
            tag: 8,
            ..claim(500)
        };
        assert_eq!(state.answer(id, other, now), None, "a queue not pulled");
        assert_eq!(
            state.answer(id, claim(500), now + MAX_AGE * 2),
            None,
            "stale"
        );
    }

    #[test]
    fn gone_entries_rebuilds_and_missed_entries_refuse_memory() {
        let mut state = AppState::default();
        let now = Instant::now();
        let (gone, kept) = (CommandId::new_v7(), CommandId::new_v7());
        let entry = GoneEntry {
            command_id: gone,
            seq: 600,
            number: 1,
        };
        state.install(now, &[TAG], pulled(3, 1000, vec![entry], 1));
        assert_eq!(state.answer(gone, claim(600), now), None, "gone");
        assert!(state.answer(kept, claim(601), now).is_some());
        assert_eq!((state.watermark, state.gone_cursor), (0, 1));

        // Entries 2..=5 trimmed before this gateway read them: watermark at the sequence then.
        let late = GoneEntry {
            command_id: CommandId::new_v7(),
            seq: 990,
            number: 6,
        };
        state.install(now, &[TAG], pulled(3, 1000, vec![late], 6));
        assert_eq!(state.watermark, 1000);
        assert_eq!(state.answer(kept, claim(601), now), None);

        // A rebuild (new generation): the watermark moves to the sequence at that pull.
        let mut fresh = pulled(4, 2000, vec![], 0);
        fresh.queues[0].tail_seq = Some(2000);
        fresh.queues[0].runs = vec![(101, 900), (1500, 501)];
        state.install(now, &[TAG], fresh);
        assert_eq!(state.watermark, 2000);
        assert_eq!((state.gone_cursor, state.gone.len()), (0, 0));
    }

    #[test]
    fn the_gone_set_is_bounded_by_raising_the_watermark() {
        let mut state = AppState::default();
        let now = Instant::now();
        let entries: Vec<GoneEntry> = (1..=GONE_CAP as u64 + 10)
            .map(|n| GoneEntry {
                command_id: CommandId::new_v7(),
                seq: n,
                number: n,
            })
            .collect();
        let high = entries.len() as u64;
        state.install(now, &[TAG], pulled(1, high, entries, high));
        assert!(state.gone.len() <= GONE_CAP);
        assert!(state.gone.values().all(|seq| *seq > state.watermark));
        assert!(state.watermark > 0);
    }

    #[test]
    fn the_margin_is_compared_with_the_exact_rank() {
        // Five waiters at the front, a hole of 894 sequences (another queue's, or cancelled),
        // then a long run: the head of that run is 5th in line, whatever its distance from the
        // head in sequences (interpolation put it at about 450, far past the margin).
        let mut state = AppState::default();
        let now = Instant::now();
        let mut view = pulled(1, 2000, vec![], 0);
        view.queues[0].waiting = 905;
        view.queues[0].tail_seq = Some(1899);
        view.queues[0].runs = vec![(101, 5), (1000, 900)];
        state.install(now, &[TAG], view);
        let id = CommandId::new_v7();
        let margin = safety_margin(None, None);
        assert_eq!(
            state.answer(id, claim(1000), now),
            None,
            "5th: within the margin"
        );
        assert_eq!(state.answer(id, claim(103), now), None, "3rd");
        assert_eq!(
            state.answer(id, claim(500), now),
            None,
            "in the hole: not waiting"
        );
        let first_deep = 1000 + margin - 5;
        assert_eq!(state.answer(id, claim(first_deep - 1), now), None);
        let answer = state
            .answer(id, claim(first_deep), now)
            .expect("deep enough");
        assert_eq!(answer.position, margin);
        assert_eq!(
            state.answer(id, claim(1899), now).map(|a| a.position),
            Some(904)
        );
    }

    #[test]
    fn a_pull_of_many_queues_shares_its_reads() {
        assert_eq!(reads_per_queue(0), RUNS_READS);
        assert_eq!(reads_per_queue(2), RUNS_READS);
        assert_eq!(reads_per_queue(8), 512);
        assert_eq!(reads_per_queue(1_000), RUNS_READS_MIN);
    }

    #[test]
    fn the_margin_covers_the_lookahead_and_the_rate() {
        assert_eq!(safety_margin(Some(100.0), None), LOOKAHEAD + 30 + 1);
        assert_eq!(safety_margin(Some(10.0), Some(50.0)), LOOKAHEAD + 30 + 1);
        assert_eq!(safety_margin(None, None), LOOKAHEAD * 4 + 1);
    }
}
