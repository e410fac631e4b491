//! Waiting polls answered from memory: per application, a snapshot of the resource queues this
//! gateway was recently asked about, refreshed by one `waiting.lua` pull at most every
//! [`REFRESH`] while polls keep arriving, so the polls of commands deep in a queue (whose answer
//! "accepted, position p, eta e" changes slowly) cost Redis nothing.
//!
//! A poll is answered from memory only when everything below holds, otherwise exactly as
//! before (`ticket.lua`):
//! - its ticket states the command's queue sequence `s` and queue tag (ticket version 3);
//! - the snapshot is at most [`MAX_AGE`] old, its projection was ready, and this gateway knows
//!   which queue the tag stands for and pulled it;
//! - `s` is above the watermark (no gone entry could have been missed for it, see below);
//! - `s` is above the highest sequence started from the queue (`admit.lua` keeps it: a waiting
//!   command above it has never started, and a requeued command is at or below it), the
//!   command is not on the gone record (it did not leave the queue without starting) and `s`
//!   lies between the queue's head and tail sequences;
//! - its estimated position is at least [`LOOKAHEAD`] plus what the queue can start before
//!   the snapshot is replaced, so it cannot have started meanwhile either.
//!
//! Such an answer is what Redis said at the snapshot's instant (`observed_at` is the pull's
//! Redis time): `accepted`, the position interpolated from the queue's head, tail and count
//! (exact when the queue's sequences are contiguous; see "Waiting polls" in lua/README.md for
//! the bound otherwise), the ETA and advice from the same `poll_policy` functions.
//!
//! A command that leaves its queue without starting (cancelled, expired) is on the gone record,
//! read incrementally (a cursor) by every pull: the first snapshot installed after its end
//! refuses memory for it. A pull that finds it missed entries (trimmed, or more than one pull
//! returns) or a new generation (a rebuild) sets the watermark to the application's sequence
//! then: no command at or below it is answered from memory again. Memory is bounded: queues
//! asked about in the last [`FORGET_AFTER`], gone entries up to [`GONE_CAP`] (the lowest
//! sequences are dropped first, raising the watermark to them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sluice_durable::ids::{ApplicationId, CommandId};
use sluice_durable::projection::waiting::{WaitingSnapshot, pull};
use sluice_durable::projection::{AppKeys, Projection};

use crate::ticket::{QueueClaim, queue_tag};

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
    queues: HashMap<u64, sluice_durable::projection::waiting::QueueView>,
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
        let started = view.started_seq?;
        let (head, tail) = (view.head_seq?, view.tail_seq?);
        if queue.seq <= started || queue.seq < head || queue.seq > tail || view.waiting == 0 {
            return None;
        }
        let position = interpolate(queue.seq, head, tail, view.waiting);
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
            queues: tags.iter().copied().zip(pulled.queues).collect(),
        });
    }
}

/// A waiting command's 0-based position from its sequence `seq` and its queue's head and tail
/// sequences and count: linear between the head (position 0) and the tail (`waiting − 1`).
/// Exact when the queue's sequences are contiguous; otherwise the true rank is within
/// `[max(0, waiting−1−(tail−seq)), min(waiting−1, seq−head)]`, an interval this lies in, of
/// width at most the number of sequences between head and tail that are not in this queue.
pub fn interpolate(seq: u64, head: u64, tail: u64, waiting: u64) -> u64 {
    if tail <= head || waiting <= 1 {
        return 0;
    }
    let span = u128::from(tail - head);
    let offset = u128::from(seq.clamp(head, tail) - head);
    let last = u128::from(waiting - 1);
    let position = (offset * last + span / 2) / span;
    u64::try_from(position).unwrap_or(u64::MAX)
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
        match pull(&redis, &app.keys, &suffixes, cursor, GONE_PER_PULL).await {
            Ok(pulled) => lock(&app.state).install(sent, &tags, pulled),
            Err(error) => {
                tracing::debug!(%error, "waiting pull failed; polls go to Redis");
                lock(&app.state).snapshot = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_sequences_interpolate_exactly() {
        for waiting in 1..40u64 {
            let head = 1000;
            let tail = head + waiting - 1;
            for rank in 0..waiting {
                assert_eq!(interpolate(head + rank, head, tail, waiting), rank);
            }
        }
    }

    #[test]
    fn interleaved_sequences_stay_within_the_bound() {
        // Two queues taking every other sequence, then a run of one queue only.
        let mine: Vec<u64> = (0..50).map(|i| 10 + 2 * i).chain(200..230).collect();
        let (head, tail, waiting) = (mine[0], mine[mine.len() - 1], mine.len() as u64);
        let others = (tail - head + 1) - waiting;
        for (rank, seq) in mine.iter().enumerate() {
            let estimate = interpolate(*seq, head, tail, waiting);
            assert!(
                estimate.abs_diff(rank as u64) <= others,
                "{seq}: {estimate} vs {rank}"
            );
        }
    }

    use sluice_durable::projection::waiting::{GoneEntry, QueueView};

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
    fn the_margin_covers_the_lookahead_and_the_rate() {
        assert_eq!(safety_margin(Some(100.0), None), LOOKAHEAD + 30 + 1);
        assert_eq!(safety_margin(Some(10.0), Some(50.0)), LOOKAHEAD + 30 + 1);
        assert_eq!(safety_margin(None, None), LOOKAHEAD * 4 + 1);
    }
}
