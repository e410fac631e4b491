//! The attempt token: which start of a command a write belongs to.

use std::fmt;

use uuid::Uuid;

/// Minted with a command's permits (one per start, passed to `admit.lua`), recorded by the
/// claim, and required by every later write of that start, in PostgreSQL (`attempt_id`) and in
/// Redis (field `attempt` of the status hash). Two starts of one command — after a lease lapsed,
/// by another executor or the same one — never share a token, so the first can neither land nor
/// release the second's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, sqlx::Type)]
#[sqlx(transparent)]
pub struct AttemptId(Uuid);

impl AttemptId {
    /// A fresh token (random: unguessable, and never reused by a Redis that rolled back).
    pub fn mint() -> Self {
        Self(Uuid::new_v4())
    }

    pub fn from_uuid(id: Uuid) -> Self {
        Self(id)
    }

    pub fn as_uuid(self) -> Uuid {
        self.0
    }

    pub fn parse(text: &str) -> Option<Self> {
        Uuid::parse_str(text).ok().map(Self)
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
