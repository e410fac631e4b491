//! Waiting rooms: people queue for a pass to a protected page or API.
//!
//! PostgreSQL is the authority for every place. A pass is signed only for a place whose
//! admission, and every heartbeat that extended it, is committed; the pass's `exp` is the
//! place's `pass_until`, and a place is freed only once that instant has passed. So an origin
//! that verifies passes on its own never sees more than `max_active` live at once, whatever
//! happens to Redis or to a gateway.
//!
//! - [`declare`]: a declaration's `[[room]]`s become rows (the seed is drawn once, at the first).
//! - [`join`]: one live place per subject; concurrent joins share a transaction, which takes
//!   each room's row once (arrival order, pause).
//! - [`admission`]: the ticker's step: the fair draw at `opens_at`, lapsed passes freed, the
//!   next places admitted within `max_active` and `admit_per_minute`.
//! - [`places`]: a place as a poll sees it.
//! - [`leaves`]: places given back, concurrent leaves in one transaction.
//! - [`heartbeats`]: passes extended, concurrent heartbeats in one statement.
//! - [`pace`]: how soon a waiting place's turn can come at the earliest, so its holder can be
//!   told to poll later the further back it is.
//! - [`board`]: what a gateway keeps in memory to answer waiting places' polls without a query
//!   each: the room's admission front, its drawn order, and who left the queue.
//! - [`fair_order`]: the documented order of the pre-queue, and the room as the public sees it.
//! - [`figures`]: a namespace's rooms as the status board shows them to an operator.
//!
//! A pass is a bearer token: once signed, an origin accepts it until its `exp`, whatever its
//! holder does. So a place holds its slot of `max_active` until its last pass's `exp` plus
//! [`PASS_GRACE`], even after a leave: the grace covers verifiers that compare whole seconds
//! (`exp < now`, as the `jsonwebtoken` crate does, accepts a pass through its `exp` second).
//!
//! Lock order, everywhere: the room's row, then place rows. Heartbeats and leaves lock only their
//! places (the ticker counts leaves into the room's row at its next step). A batch of them
//! finds its places through the primary key (`id = ANY`), which visits them in id order, so
//! two batches sharing places lock them in the same order; were a plan ever to visit them
//! otherwise, PostgreSQL would refuse one of two batches waiting on each other in a cycle after
//! its deadlock timeout (`503`, retried by the holders like any unavailable answer).

/// How long after a pass's `exp` its place still holds its slot (see the module's notes).
pub const PASS_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The first pass of a place lasts at least this long from its admission (never past
/// `pass_seconds`), whatever `heartbeat_seconds` says: the pass reaches its holder only on their
/// next poll, and a waiting person whose turn may come within their next wait is advised to poll
/// at most every 6 s (the gateway's longest jittered advice near the front; further back, no
/// later than their turn can come, see [`pace`]), so a pass that lasted a 5 s heartbeat from
/// admission could lapse before its holder ever saw it. Admitted while a pre-queue is still
/// coming back at the start, it lasts this long past the end of that return
/// ([`pace::first_pass_after_start`]). Heartbeats then extend it by `heartbeat_seconds` as
/// declared.
pub const FIRST_PASS_PICKUP: std::time::Duration = std::time::Duration::from_secs(10);

pub mod admission;
pub mod board;
pub mod declare;
pub mod fair_order;
pub mod figures;
pub mod heartbeats;
pub mod join;
pub mod leaves;
pub mod pace;
pub mod places;
pub mod statistics;

pub use pace::Pace;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::ids::NamespaceId;

/// Where a place is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceState {
    /// In the queue (or the pre-queue, before the draw).
    Waiting,
    /// Holding a pass until `pass_until`.
    Admitted,
    /// Its holder gave the pass back.
    Left,
    /// Its pass ran out (heartbeats stopped, or `pass_seconds` reached).
    Expired,
}

impl PlaceState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Admitted => "admitted",
            Self::Left => "left",
            Self::Expired => "expired",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "waiting" => Self::Waiting,
            "admitted" => Self::Admitted,
            "left" => Self::Left,
            // The schema allows nothing else.
            _ => Self::Expired,
        }
    }

    /// Whether nothing will change any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Left | Self::Expired)
    }
}

/// One place in a room, as stored, with what a poll needs of its room.
#[derive(Debug, Clone)]
pub struct Place {
    pub id: Uuid,
    pub namespace_id: NamespaceId,
    pub room: String,
    pub subject: String,
    /// The current truth: an admitted place whose `pass_until` has passed reads `Expired` even
    /// before the ticker records it.
    pub state: PlaceState,
    pub prequeue: bool,
    /// Its queue order: `seq` after the start, the drawn rank for the pre-queue (`None` until
    /// the draw).
    pub ord: Option<i64>,
    pub joined_at: DateTime<Utc>,
    /// The live pass's `iat` and `exp` while admitted (and the last ones after).
    pub renewed_at: Option<DateTime<Utc>>,
    pub pass_until: Option<DateTime<Utc>>,
    /// Places still waiting ahead, when the order is known (not before the draw). Counts those
    /// who left the queue ahead of it, so it is never less than the truth.
    pub position: Option<u64>,
    pub opens_at: Option<DateTime<Utc>>,
    /// The room's limits, as declared.
    pub pace: Pace,
    /// Joins the room had when read (`next_seq`): before the draw, how many may come back at
    /// the start ([`Pace::start_spread`]).
    pub crowd: i64,
    /// The database's clock when the place was read.
    pub observed_at: DateTime<Utc>,
}

/// The position of a place with queue order `ord` in a room admitted through `admitted_through`.
fn position(state: PlaceState, ord: Option<i64>, admitted_through: i64) -> Option<u64> {
    if state != PlaceState::Waiting {
        return None;
    }
    ord.map(|ord| u64::try_from(ord - admitted_through - 1).unwrap_or(0))
}

/// The state a stored row stands for at `now`.
fn current_state(
    stored: &str,
    pass_until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> PlaceState {
    let state = PlaceState::parse(stored);
    match (state, pass_until) {
        (PlaceState::Admitted, Some(until)) if until <= now => PlaceState::Expired,
        _ => state,
    }
}

/// What joining, reading or leaving found wrong with the room itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoomRefusal {
    /// No such room in the namespace's declaration.
    NoRoom,
    /// The pre-queue has not opened yet.
    NotOpenYet { prequeue_opens_at: DateTime<Utc> },
    /// An operator paused intake for the namespace.
    Paused,
    /// The proof-of-work challenge shown was already spent on a place.
    ChallengeUsed,
}
