//! An allocation's current truth, and its holder's two decisions on a reservation: confirm
//! (the unit stays, counted as allocated) and release (the unit goes back to the pool).
//!
//! The receipt a quota command landed with is immutable; the row here is what counts. A
//! reservation races its expiry: [`decide`] takes the pool's row, then the allocation's (the
//! order [`super::expiry`] takes), and reads the database's clock only once it holds both, so
//! whichever of the two comes first decides and the other finds that decision. A confirm that
//! finds the reservation overdue but not yet swept expires it itself: the answer and the row
//! always agree.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;
use crate::ids::{CommandId, NamespaceId};

/// An allocation's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocationState {
    Reserved,
    Confirmed,
    Released,
    Expired,
}

impl AllocationState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Confirmed => "confirmed",
            Self::Released => "released",
            Self::Expired => "expired",
        }
    }

    fn parse(text: &str) -> Result<Self, DurableError> {
        match text {
            "reserved" => Ok(Self::Reserved),
            "confirmed" => Ok(Self::Confirmed),
            "released" => Ok(Self::Released),
            "expired" => Ok(Self::Expired),
            other => Err(DurableError::StateConflict(format!(
                "an allocation row holds the unknown state {other:?}"
            ))),
        }
    }
}

/// One allocation as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub id: Uuid,
    pub pool: String,
    pub subject: String,
    pub command_id: CommandId,
    pub state: AllocationState,
    /// When a reservation lapses (kept after it is decided: when it would have).
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// When the state last changed.
    pub updated_at: DateTime<Utc>,
}

/// The holder's decision on a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Confirm,
    Release,
}

impl Action {
    /// The state the action leaves a reservation in.
    fn target(self) -> AllocationState {
        match self {
            Self::Confirm => AllocationState::Confirmed,
            Self::Release => AllocationState::Released,
        }
    }
}

/// What [`decide`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// The action took effect now.
    Changed(Allocation),
    /// The allocation was already in the action's state: a repeat, nothing changed.
    Repeated(Allocation),
    /// The allocation's state forbids the action (decided otherwise, or expired); the row as it
    /// stands, which may have just expired by this call.
    Refused(Allocation),
}

struct Row {
    id: Uuid,
    pool: String,
    subject: String,
    command_id: CommandId,
    state: String,
    expires_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    overdue: bool,
}

impl Row {
    fn into_allocation(self) -> Result<Allocation, DurableError> {
        Ok(Allocation {
            id: self.id,
            pool: self.pool,
            subject: self.subject,
            command_id: self.command_id,
            state: AllocationState::parse(&self.state)?,
            expires_at: self.expires_at,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

fn not_found() -> DurableError {
    DurableError::NotFound("no such allocation in this namespace".into())
}

/// An allocation as its row stands, unlocked, and whether the database's clock has passed it
/// while it is still reserved: what [`decide`] starts from, and what [`Stored::current`] shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub allocation: Allocation,
    overdue: bool,
}

impl Stored {
    /// The allocation as it stands by the database's clock: a reservation past `expires_at` is
    /// `expired` even before the sweeper writes it (nothing can confirm it any more).
    pub fn current(self) -> Allocation {
        let mut allocation = self.allocation;
        if self.overdue {
            allocation.state = AllocationState::Expired;
        }
        allocation
    }
}

/// The allocation's row, unlocked.
pub async fn read(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: Uuid,
) -> Result<Stored, DurableError> {
    let row = read_row(pg, namespace_id, id).await?;
    let overdue = row.overdue;
    Ok(Stored {
        allocation: row.into_allocation()?,
        overdue,
    })
}

/// The allocation as it stands by the database's clock ([`Stored::current`]).
pub async fn get(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: Uuid,
) -> Result<Allocation, DurableError> {
    Ok(read(pg, namespace_id, id).await?.current())
}

/// The row as stored, unlocked, with whether the database's clock has passed a reservation.
async fn read_row(pg: &PgPool, namespace_id: NamespaceId, id: Uuid) -> Result<Row, DurableError> {
    sqlx::query_as!(
        Row,
        r#"SELECT id, pool, subject, command_id AS "command_id: CommandId", state, expires_at,
                  created_at, updated_at,
                  (state = 'reserved' AND expires_at <= clock_timestamp()) AS "overdue!"
             FROM allocations WHERE namespace_id = $1 AND id = $2"#,
        namespace_id as _,
        id,
    )
    .fetch_optional(pg)
    .await?
    .ok_or_else(not_found)
}

/// Confirms or releases the reservation `stored` (as [`read`] found it) for its holder (the
/// caller has checked who that is). A repeat of the action that decided it is [`Decided::Repeated`]; any other decided state is
/// [`Decided::Refused`], as is a reservation the database's clock has passed, which this call
/// then expires (the sweeper's write, under the same locks).
pub async fn decide(
    pg: &PgPool,
    namespace_id: NamespaceId,
    stored: Stored,
    action: Action,
) -> Result<Decided, DurableError> {
    // A decided allocation never changes again: it is answered without a lock, so repeats
    // cost the pool nothing. Only a reservation takes the locks, the pool's row first (its code
    // never changes, so reading it unlocked is safe).
    let seen = stored.allocation;
    let id = seen.id;
    if seen.state != AllocationState::Reserved {
        return Ok(verdict_on_decided(seen, action));
    }
    // One statement, so the pool's row is held for microseconds, not for round trips: the
    // pool's row is locked (the join needs it), then the allocation's as it is updated; the
    // clock is read once both are held. A reservation found overdue is expired instead.
    let decided = sqlx::query!(
        r#"WITH pool AS (
               SELECT code FROM quota_pools WHERE namespace_id = $1 AND code = $2 FOR UPDATE
           ), decided AS (
               UPDATE allocations a
                  SET state = CASE WHEN a.expires_at <= clock_timestamp() THEN 'expired'
                                   ELSE $4 END,
                      updated_at = clock_timestamp()
                 FROM pool
                WHERE a.namespace_id = $1 AND a.id = $3 AND a.state = 'reserved'
               RETURNING a.state, a.updated_at
           ), counted AS (
               UPDATE quota_pools q
                  SET reserved = q.reserved - 1,
                      allocated = q.allocated + CASE WHEN d.state = 'confirmed' THEN 1 ELSE 0 END
                 FROM decided d
                WHERE q.namespace_id = $1 AND q.code = $2
               RETURNING 1 AS counted
           )
           SELECT d.state AS "state!", d.updated_at AS "updated_at!"
             FROM decided d, counted"#,
        namespace_id as _,
        &seen.pool,
        id,
        action.target().as_str(),
    )
    .fetch_optional(pg)
    .await?;
    let Some(decided) = decided else {
        // Decided by someone else between the read and the lock: final now, so read it again.
        let now = read_row(pg, namespace_id, id).await?.into_allocation()?;
        return Ok(verdict_on_decided(now, action));
    };
    let state = AllocationState::parse(&decided.state)?;
    let allocation = Allocation {
        state,
        updated_at: decided.updated_at,
        ..seen
    };
    Ok(if state == action.target() {
        Decided::Changed(allocation)
    } else {
        Decided::Refused(allocation)
    })
}

/// The answer to `action` on an allocation already decided: a repeat, or refused.
fn verdict_on_decided(allocation: Allocation, action: Action) -> Decided {
    if allocation.state == action.target() {
        Decided::Repeated(allocation)
    } else {
        Decided::Refused(allocation)
    }
}
