//! A command's row in `commands`, as every reader of it sees it: who asked for what, where it
//! stands in its queue, its status and its clock. The API's record, the rebuild and the queue
//! repair each add the few columns only they need around this one struct.

use chrono::{DateTime, Utc};

use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_model::CommandStatus;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub id: CommandId,
    pub application_id: ApplicationId,
    pub namespace_id: NamespaceId,
    pub command: String,
    pub subject: String,
    pub request_key: String,
    pub content_sha256: Vec<u8>,
    pub resource_key: String,
    pub queue_seq: i64,
    pub status: CommandStatus,
    pub accepted_at: DateTime<Utc>,
    pub deadline_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl CommandRow {
    pub fn is_waiting(&self) -> bool {
        self.status.is_waiting()
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_final()
    }
}

/// The [`CommandRow`] of a `sqlx::query!` record that has its columns, by name and type (each
/// statement lists them in its file under `durable/queries/`): one mapping for every statement
/// that reads a row (the macros' records are types of their own, one per statement).
#[macro_export]
macro_rules! command_row {
    ($record:ident) => {
        $crate::outbox::CommandRow {
            id: $record.id,
            application_id: $record.application_id,
            namespace_id: $record.namespace_id,
            command: $record.command,
            subject: $record.subject,
            request_key: $record.request_key,
            content_sha256: $record.content_sha256,
            resource_key: $record.resource_key,
            queue_seq: $record.queue_seq,
            status: $record.status,
            accepted_at: $record.accepted_at,
            deadline_at: $record.deadline_at,
            updated_at: $record.updated_at,
        }
    };
}
