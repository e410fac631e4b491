//! What the holders of reserved units did and were answered (`--mode reserved`), kept per
//! allocation so the invariants can hold each answer against the allocation's row in
//! PostgreSQL afterwards: a tally of answers could not say which row contradicts which answer.

use std::sync::Mutex;

use uuid::Uuid;

/// What a winner does with its reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Confirm,
    Release,
    /// Does nothing: the database's clock expires it.
    Lapse,
}

/// The last answer a holder got to its confirm or release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `200` with the allocation's `state` and whether this call `changed` it.
    Decided { changed: bool, state: String },
    /// `409 STATE_CONFLICT` with the `error.details.state` that forbade the action.
    Conflict { state: Option<String> },
    /// Anything else once retries ran out: another refusal's code, or `no answer`.
    Unanswered(String),
}

/// One winner's reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub allocation: Uuid,
    pub choice: Choice,
    /// `None` when the holder let it lapse.
    pub answer: Option<Answer>,
    /// An attempt before the last had no answer (or `503 UNAVAILABLE`, which the API says may
    /// leave a write's outcome unknown), so it may have acted already: the last answer may then
    /// be a `200` repeat (`changed: false`) of what that one did.
    pub lost_attempt: bool,
}

/// Every holder's reservation, and the winners whose result named no allocation.
#[derive(Debug, Default)]
pub struct HolderLog {
    inner: Mutex<Logged>,
}

/// The log's contents once the run is over.
#[derive(Debug, Clone, Default)]
pub struct Logged {
    pub held: Vec<Held>,
    /// Winners whose `succeeded` result had no `allocation_id`.
    pub without_allocation: u64,
}

impl HolderLog {
    fn with<T>(&self, f: impl FnOnce(&mut Logged) -> T) -> T {
        // A panicking holder poisons the lock; what was logged stays usable for the report.
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    pub fn held(&self, held: Held) {
        self.with(|l| l.held.push(held));
    }

    pub fn without_allocation(&self) {
        self.with(|l| l.without_allocation += 1);
    }

    pub fn finish(&self) -> Logged {
        self.with(|l| l.clone())
    }
}
