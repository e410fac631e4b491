//! The outbox: the `commands` table. A command exists once its row is committed here.
//!
//! - [`days`]: the table's partitions, one per UTC day of acceptance.
//! - [`row`]: a command's row as every reader sees it.
//! - [`queries`]: the reads the API needs.
//!
//! Every write of a command, its commit included (the group commit's batch insert), is a
//! transition of the life cycle (`sluice_durable::lifecycle`); this module holds the table's shape and reads.

pub mod days;
pub mod queries;
pub mod row;

use chrono::{DateTime, SecondsFormat, Utc};

pub use queries::CommandRecord;
pub use row::CommandRow;

/// How long a finished command is kept (and its ticket stays valid) unless configured: a week,
/// long enough for a person to come back to a receipt.
pub const DEFAULT_RETENTION_SECONDS: i64 = 7 * 86_400;

/// Times in the API are RFC 3339 UTC with milliseconds.
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}
