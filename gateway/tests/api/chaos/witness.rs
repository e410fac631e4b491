//! What the chaos backend saw with its own eyes, independently of Redis and of the executors:
//! every call (when it arrived, whether it was signed, when it ended), how many calls and
//! accepted tasks each provider account had at once, and every result it decided.
//!
//! An account's count covers a call from the moment its request arrives until its response is
//! handed to hyper or its connection is dropped (a drop guard: hyper drops the service future
//! when the client disconnects), and a call answered `202` stays counted as a task until the
//! backend sends its first `:complete` (the provider is still working on it, and Sluice holds
//! the permit until the result lands). Ending a count at those moments, never later, keeps the
//! count a lower bound of the permits Sluice must hold: it can only miss an excess, never invent
//! one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// A result the backend decided: the `200` body it answered, or the `:complete` it sent after
/// a `202`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Decision {
    /// `succeeded`, `rejected` or `failed`.
    pub(super) outcome: String,
    pub(super) result: Value,
    pub(super) error_code: Option<String>,
    /// Decided by a `202` (and reported by `:complete`), not by a `200`.
    pub(super) by_complete: bool,
}

/// One request that reached the backend.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) command_id: Uuid,
    pub(super) provider: String,
    /// `account:{provider}:{account}`, the limit key's rendering.
    pub(super) account: String,
    /// Since the run's clock.
    pub(super) at: Duration,
    pub(super) wall: DateTime<Utc>,
    pub(super) signed: bool,
    /// The `attempt` of the body.
    pub(super) attempt: i64,
    /// The status answered (None: the connection was dropped first).
    pub(super) answer: Option<u16>,
    pub(super) ended: Option<Duration>,
}

/// A `:complete` the backend sent (with its retries).
#[derive(Debug, Clone)]
pub(super) struct Complete {
    pub(super) command_id: Uuid,
    pub(super) decision: Decision,
    pub(super) sent: Duration,
    /// Every answer: a status and code, or a failure.
    pub(super) answers: Vec<String>,
    /// The final answer: `200` (landed or repeated), a definite refusal, or None (every attempt
    /// unknown).
    pub(super) status: Option<u16>,
}

/// One moment an account's count went up.
#[derive(Debug, Clone)]
pub(super) struct Level {
    pub(super) at: Duration,
    pub(super) account: String,
    pub(super) level: usize,
    pub(super) commands: Vec<Uuid>,
}

/// What holds a place in an account's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Call(usize),
    Task,
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<Call>,
    holders: HashMap<String, Vec<(Uuid, Holder)>>,
    levels: Vec<Level>,
    /// Calls of one command in flight at the backend at once (index pairs).
    overlaps: Vec<(usize, usize)>,
    /// The first decision per command (what a re-delivery is answered with).
    decided: HashMap<Uuid, Decision>,
    /// Every decision made (a command decided by two calls at once has two).
    decisions: Vec<(Uuid, Duration, Decision)>,
    completes: Vec<Complete>,
}

/// The backend's records, shared by its connections and its completer.
pub(super) struct Records {
    clock: Instant,
    state: Mutex<State>,
}

impl Records {
    pub(super) fn new(clock: Instant) -> Arc<Records> {
        Arc::new(Records {
            clock,
            state: Mutex::new(State::default()),
        })
    }

    pub(super) fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("backend records lock")
    }

    /// A call arrived: it counts in its account until the returned guard is dropped.
    pub(super) fn arrive(self: &Arc<Self>, call: Call) -> CallGuard {
        let mut state = self.state();
        let index = state.calls.len();
        let (account, command_id, at) = (call.account.clone(), call.command_id, call.at);
        let overlapping: Vec<(usize, usize)> = state
            .holders
            .get(&account)
            .into_iter()
            .flatten()
            .filter_map(|(other, holder)| match holder {
                Holder::Call(j) if *other == command_id => Some((*j, index)),
                _ => None,
            })
            .collect();
        state.overlaps.extend(overlapping);
        state.calls.push(call);
        let holders = state.holders.entry(account.clone()).or_default();
        holders.push((command_id, Holder::Call(index)));
        let level = Level {
            at,
            account: account.clone(),
            level: holders.len(),
            commands: holders.iter().map(|(id, _)| *id).collect(),
        };
        state.levels.push(level);
        CallGuard {
            records: self.clone(),
            index,
            answered: None,
            as_task: false,
        }
    }

    /// The decision a re-delivery of `command_id` is answered with, if there is one.
    pub(super) fn decided(&self, command_id: Uuid) -> Option<Decision> {
        self.state().decided.get(&command_id).cloned()
    }

    /// Records a decision (the first one per command is what re-deliveries get).
    pub(super) fn decide(&self, command_id: Uuid, decision: Decision) {
        let at = self.now();
        let mut state = self.state();
        state
            .decided
            .entry(command_id)
            .or_insert_with(|| decision.clone());
        state.decisions.push((command_id, at, decision));
    }

    /// The backend starts reporting the task's result: it no longer counts in its account.
    pub(super) fn task_done(&self, account: &str, command_id: Uuid) {
        let mut state = self.state();
        if let Some(holders) = state.holders.get_mut(account)
            && let Some(i) = holders
                .iter()
                .position(|h| *h == (command_id, Holder::Task))
        {
            holders.remove(i);
        }
    }

    pub(super) fn completed(&self, complete: Complete) {
        self.state().completes.push(complete);
    }

    fn end_call(&self, index: usize, answered: Option<u16>, as_task: bool) {
        let at = self.now();
        let mut state = self.state();
        let call = &mut state.calls[index];
        call.answer = answered;
        call.ended = Some(at);
        let (account, command_id) = (call.account.clone(), call.command_id);
        if let Some(holders) = state.holders.get_mut(&account)
            && let Some(i) = holders
                .iter()
                .position(|h| *h == (command_id, Holder::Call(index)))
        {
            // A `202` hands its place over to the task without a gap.
            if as_task {
                holders[i].1 = Holder::Task;
            } else {
                holders.remove(i);
            }
        }
    }

    /// Everything recorded, once the run is over.
    pub(super) fn snapshot(&self) -> Witnessed {
        let state = self.state();
        Witnessed {
            calls: state.calls.clone(),
            levels: state.levels.clone(),
            overlaps: state.overlaps.clone(),
            decisions: state.decisions.clone(),
            completes: state.completes.clone(),
        }
    }
}

/// Holds a call's place in its account's count; dropping it (answer handed over, or the
/// connection gone) gives the place back, or hands it to the task after a `202`.
pub(super) struct CallGuard {
    records: Arc<Records>,
    index: usize,
    answered: Option<u16>,
    as_task: bool,
}

impl CallGuard {
    /// The answer about to be returned; a `202` keeps the account's place as a task.
    pub(super) fn answer(&mut self, status: u16) {
        self.answered = Some(status);
        self.as_task = status == 202;
    }

    /// The answer to a re-delivery of a command already decided: a `202` names the task that
    /// the first one started, which holds its own place.
    pub(super) fn answer_again(&mut self, status: u16) {
        self.answered = Some(status);
        self.as_task = false;
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.records
            .end_call(self.index, self.answered, self.as_task);
    }
}

/// The backend's records at the end of a run.
#[derive(Debug, Clone, Default)]
pub(super) struct Witnessed {
    pub(super) calls: Vec<Call>,
    pub(super) levels: Vec<Level>,
    pub(super) overlaps: Vec<(usize, usize)>,
    pub(super) decisions: Vec<(Uuid, Duration, Decision)>,
    pub(super) completes: Vec<Complete>,
}

impl Witnessed {
    /// The highest account count within `[from, to)`, and its moment.
    pub(super) fn peak(&self, from: Duration, to: Duration) -> Option<&Level> {
        self.levels
            .iter()
            .filter(|l| l.at >= from && l.at < to)
            .max_by_key(|l| l.level)
    }
}

/// The window of one provider's calls that comes closest to (or beyond) its token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Window {
    /// Indexes into the provider's calls sorted by arrival, both included.
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) count: usize,
    pub(super) span: Duration,
    /// `count − (burst + rate × (span + slack))`: above 0 is a violation.
    pub(super) excess: f64,
}

/// For each call `j` of `times` (sorted), the window ending at it that comes closest to (or
/// beyond) a bucket of `rate` per second holding `burst` tokens, refilled continuously: any `n`
/// calls from `t_i` to `t_j` need `n ≤ burst + rate × (t_j − t_i + slack)`. `slack` is the
/// delay between the moment a token is taken (in `admit.lua`, or before a retry) and the moment
/// the request reaches the backend, which can squeeze calls whose tokens were taken apart.
/// O(n): the excess of (i, j) is `g(j) + f(i)` with `f(i) = rate·t_i − i` and
/// `g(j) = j + 1 − rate·t_j − burst − rate·slack`, so the best i for each j is the prefix
/// maximum of `f`.
pub(super) fn windows(times: &[Duration], rate: f64, burst: f64, slack: Duration) -> Vec<Window> {
    let mut best: Option<(f64, usize)> = None;
    let mut found = Vec::with_capacity(times.len());
    for (j, t) in times.iter().enumerate() {
        let f = rate * t.as_secs_f64() - j as f64;
        if best.is_none_or(|(b, _)| f > b) {
            best = Some((f, j));
        }
        let (f_i, i) = best.expect("set above");
        let g = (j + 1) as f64 - rate * t.as_secs_f64() - burst - rate * slack.as_secs_f64();
        found.push(Window {
            from: i,
            to: j,
            count: j - i + 1,
            span: *t - times[i],
            excess: g + f_i,
        });
    }
    found
}

/// The worst of [`windows`].
pub(super) fn worst_window(times: &[Duration], rate: f64, burst: f64, slack: Duration) -> Window {
    windows(times, rate, burst, slack)
        .into_iter()
        .max_by(|a, b| a.excess.total_cmp(&b.excess))
        .unwrap_or(Window {
            from: 0,
            to: 0,
            count: 0,
            span: Duration::ZERO,
            excess: f64::NEG_INFINITY,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(list: &[u64]) -> Vec<Duration> {
        list.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    /// The O(n) scan finds what the O(n²) definition finds.
    #[test]
    fn worst_window_matches_every_pair() {
        let times = ms(&[0, 10, 20, 30, 400, 410, 420, 430, 440, 1500, 1501, 1502]);
        let (rate, burst, slack) = (5.0, 5.0, Duration::from_millis(50));
        let found = worst_window(&times, rate, burst, slack);
        let mut best = f64::NEG_INFINITY;
        for i in 0..times.len() {
            for j in i..times.len() {
                let span = (times[j] - times[i] + slack).as_secs_f64();
                best = best.max((j - i + 1) as f64 - burst - rate * span);
            }
        }
        assert!((found.excess - best).abs() < 1e-9, "{found:?} vs {best}");
        // Nine calls within 440 ms: 9 − (5 + 5 × 0.49) = 1.55 over.
        assert_eq!((found.from, found.to, found.count), (0, 8, 9));
        assert!(found.excess > 1.5);
    }

    /// Calls exactly at the rate after one burst never exceed the bucket.
    #[test]
    fn a_paced_provider_stays_within_its_bucket() {
        let mut times = ms(&[0, 0, 0, 0, 0]);
        times.extend((1..=50).map(|k| Duration::from_millis(200 * k)));
        let found = worst_window(&times, 5.0, 5.0, Duration::ZERO);
        assert!(found.excess <= 0.0, "{found:?}");
    }

    /// The account count: a 202 keeps its place until the task is done; a dropped connection
    /// gives it back.
    #[test]
    fn accounts_count_calls_and_accepted_tasks() {
        let records = Records::new(Instant::now());
        let call = |id: Uuid| Call {
            command_id: id,
            provider: "p".into(),
            account: "account:p:a".into(),
            at: records.now(),
            wall: Utc::now(),
            signed: true,
            attempt: 1,
            answer: None,
            ended: None,
        };
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut first = records.arrive(call(a));
        first.answer(202);
        drop(first);
        let second = records.arrive(call(b));
        drop(second);
        let third = records.arrive(call(c));
        let levels: Vec<usize> = records.snapshot().levels.iter().map(|l| l.level).collect();
        assert_eq!(levels, vec![1, 2, 2]);
        records.task_done("account:p:a", a);
        drop(third);
        let again = records.arrive(call(a));
        let fourth = records.arrive(call(a));
        let seen = records.snapshot();
        assert_eq!(seen.levels.last().map(|l| l.level), Some(2));
        assert_eq!(seen.overlaps, vec![(3, 4)]);
        drop((again, fourth));
        assert_eq!(records.snapshot().calls[4].answer, None);
    }
}
