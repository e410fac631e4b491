//! What PostgreSQL says of a command's row when its Redis side must follow it, the shape the
//! claim, the sweepers, the queue repair and the ends share (its own module, so none of them
//! imports another for it).

use chrono::{DateTime, Utc};

use super::attempt::AttemptId;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;

/// What PostgreSQL says of a row whose Redis side must follow: a head that could not be claimed,
/// a permit that lapsed, a row a sweeper just changed.
#[derive(Debug, Clone)]
pub struct RowState {
    pub id: CommandId,
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub command: String,
    pub resource_key: String,
    pub queue_seq: i64,
    pub status: CommandStatus,
    pub updated_at: DateTime<Utc>,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// An executor holds it (executing, or `retry_wait` between two webhook attempts).
    pub held: bool,
    /// The attempt that holds it, if any (also on `running` rows).
    pub attempt: Option<AttemptId>,
}
