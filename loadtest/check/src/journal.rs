//! What a run observed, as it happened: every answer the checker got, every fault it made, and
//! when (this machine's clock, the one Redis and PostgreSQL read too). The checks read it after
//! the run together with PostgreSQL's rows and the witnesses' own records.

use std::sync::Mutex;

use serde_json::Value;

use crate::plan::FaultKind;

#[derive(Default)]
pub struct Journal {
    inner: Mutex<Records>,
}

#[derive(Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Records {
    pub enqueues: Vec<EnqueueRecord>,
    pub polls: Vec<PollRecord>,
    pub cancels: Vec<CancelRecord>,
    pub completes: Vec<CompleteRecord>,
    pub reservations: Vec<ReservationRecord>,
    pub faults: Vec<FaultRecord>,
    pub rooms: Vec<RoomRecord>,
    /// Every answered poll of a place's ticket, and every leave of a place still waiting.
    #[serde(default)]
    pub place_polls: Vec<PlacePollRecord>,
    #[serde(default)]
    pub quits: Vec<QuitRecord>,
    pub applies: Vec<ApplyRecord>,
    #[serde(default)]
    pub raises: Vec<RaiseRecord>,
    /// Joins sent again, with the first join's key, after the place it made had ended.
    #[serde(default)]
    pub rejoins: Vec<RejoinRecord>,
    /// Answers no check expects at all (a `500`, a body that is not the contract's shape).
    pub strays: Vec<String>,
    /// Processes that exited by themselves, as the supervisor found them.
    pub exits: Vec<String>,
}

/// One enqueue request (an intent may take several: unknown outcomes are sent again).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EnqueueRecord {
    pub n: u32,
    pub replay: bool,
    pub other_input: bool,
    pub sent_ms: i64,
    pub answered_ms: i64,
    pub status: Option<u16>,
    pub code: Option<String>,
    pub retry_after: Option<String>,
    pub command_id: Option<String>,
    pub deduplicated: Option<bool>,
    pub position: Option<u64>,
    pub observed_ms: Option<i64>,
    pub resource_key: Option<String>,
    pub body: Value,
    /// Which gateway was asked (its index) and, when none answered, why.
    #[serde(default)]
    pub gateway: usize,
    #[serde(default)]
    pub unanswered: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PollRecord {
    pub n: u32,
    pub command_id: String,
    pub sent_ms: i64,
    pub answered_ms: i64,
    pub status: Option<u16>,
    /// The command's status in the answer.
    pub state: Option<String>,
    pub position: Option<u64>,
    pub observed_ms: Option<i64>,
    pub generation: Option<String>,
    pub code: Option<String>,
    /// Which gateway was asked (its index) and, when none answered, why.
    #[serde(default)]
    pub gateway: usize,
    #[serde(default)]
    pub unanswered: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CancelRecord {
    pub n: u32,
    pub sent_ms: i64,
    pub answered_ms: i64,
    pub status: Option<u16>,
    pub state: Option<String>,
    pub code: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CompleteRecord {
    pub n: u32,
    pub command_id: String,
    pub succeeded: bool,
    /// A second, conflicting `:complete` sent after the command ended.
    pub late: bool,
    pub sent_ms: i64,
    pub status: Option<u16>,
    pub code: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReservationRecord {
    pub n: u32,
    pub allocation_id: String,
    pub action: String,
    pub sent_ms: i64,
    pub status: Option<u16>,
    pub state: Option<String>,
    pub code: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    pub started_ms: i64,
    pub ended_ms: i64,
}

/// A pass a person received, verified by the origin witness.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RoomRecord {
    pub person: u32,
    pub room: String,
    pub place: String,
    pub iat: i64,
    pub exp: i64,
    pub verified: bool,
    pub received_ms: i64,
    /// When the person left (`:leave` answered), if they did.
    pub left_ms: Option<i64>,
}

/// A poll of a place's ticket that was answered `200`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PlacePollRecord {
    pub person: u32,
    pub room: String,
    pub place: String,
    pub gateway: usize,
    pub sent_ms: i64,
    pub answered_ms: i64,
    pub status: String,
    pub position: Option<u64>,
    /// The wait advised before the next poll (`poll_after_ms`), while waiting.
    #[serde(default)]
    pub advice_ms: Option<u64>,
}

/// A room's `max_active` raised by an apply during the run, from when the apply was started
/// (an origin may see the new limit from then on).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RaiseRecord {
    pub room: String,
    pub max_active: u32,
    pub started_ms: i64,
    pub applied: bool,
    /// What `sluice apply` printed.
    pub output: String,
}

/// A person leaving the queue with their ticket before their turn (`:leave` answered `200`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct QuitRecord {
    pub person: u32,
    pub room: String,
    pub place: String,
    pub answered_ms: i64,
    /// What the leave found: `left` (it took the place out of the queue), or the place's state
    /// when its turn had come meanwhile.
    pub status: String,
}

/// A join sent again with the key of the person's first join once the place that join made
/// had ended (an answer lost in the rush, retried late): it must be answered that place.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RejoinRecord {
    pub person: u32,
    pub room: String,
    /// The place the first join made.
    pub place: String,
    /// The answer's status and the place it named (`None`: no answer, or none named).
    pub status: Option<u16>,
    pub answered_place: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ApplyRecord {
    pub refused: bool,
    pub output: String,
    /// The refusals the model predicted for this declaration (fields).
    pub expected_fields: Vec<String>,
}

impl Journal {
    pub fn with<R>(&self, f: impl FnOnce(&mut Records) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut inner)
    }

    pub fn snapshot(&self) -> Records {
        self.with(|r| r.clone())
    }

    pub fn stray(&self, text: String) {
        self.with(|r| r.strays.push(text));
    }
}
