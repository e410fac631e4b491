//! The outbox: the `commands` table. A command exists once its row is committed here.
//!
//! - [`insert`]: the multi-row insert of one batch (idempotent by request key, pause re-checked).
//! - [`days`]: the table's partitions, one per UTC day of acceptance.
//! - [`group_commit`]: batches concurrent enqueues into one transaction each.
//! - [`row`]: a command's row as every reader sees it.
//! - [`queries`]: the reads the API needs.
//!
//! (Every change of a command after its commit is a transition of [`crate::lifecycle`].)

pub mod days;
pub mod group_commit;
pub mod insert;
pub mod queries;
pub mod row;

use chrono::{DateTime, SecondsFormat, Utc};

pub use group_commit::{GroupCommitConfig, GroupCommitter};
pub use insert::{ExistingCommand, IdempotencyKey, InsertOutcome, NewCommand};
pub use queries::CommandRecord;
pub use row::CommandRow;

/// How long a finished command is kept (and its ticket stays valid) unless configured: a week,
/// long enough for a person to come back to a receipt.
pub const DEFAULT_RETENTION_SECONDS: i64 = 7 * 86_400;

/// Times in the API are RFC 3339 UTC with milliseconds.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}
