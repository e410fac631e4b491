//! What PostgreSQL says of a command's row when its Redis side must follow it, the shape the
//! claim, the sweepers, the queue repair and the ends share (its own module, so none of them
//! imports another for it).

use sluice_store::outbox::CommandRow;

use super::attempt::AttemptId;

/// What PostgreSQL says of a row whose Redis side must follow: a head that could not be claimed,
/// a permit that lapsed, a row a sweeper just changed. The row itself is the table's one row type
/// ([`CommandRow`]); beside it, what only the Redis side of an end needs.
#[derive(Debug, Clone)]
pub struct RowState {
    pub row: CommandRow,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// An executor holds it (executing, or `retry_wait` between two webhook attempts).
    pub held: bool,
    /// The attempt that holds it, if any (also on `running` rows).
    pub attempt: Option<AttemptId>,
}

/// The [`RowState`] of a `sqlx::query!` record that has its columns: every column of
/// [`CommandRow`] (as `sluice_store::command_row!` reads them), `result`, `error_code`,
/// `error_message`, `held` and `attempt`, by those names.
macro_rules! row_state {
    ($record:ident) => {
        $crate::lifecycle::row_state::RowState {
            row: sluice_store::command_row!($record),
            result: $record.result,
            error_code: $record.error_code,
            error_message: $record.error_message,
            held: $record.held,
            attempt: $record.attempt,
        }
    };
}
pub(crate) use row_state;
