//! The reads the command endpoints need. Each is one indexed statement.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use crate::outbox::CommandRow;
use sluice_model::CommandStatus;

/// The full record of a command, as `GET /v1/commands/{id}` shows it: its row and its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRecord {
    pub row: CommandRow,
    pub finished_at: Option<DateTime<Utc>>,
    pub attempts: i32,
    pub cancel_requested: bool,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

/// The [`CommandRecord`] of a `sqlx::query!` record that has its columns (as `command_row!`).
#[macro_export]
macro_rules! command_record {
    ($record:ident) => {
        $crate::outbox::CommandRecord {
            row: $crate::command_row!($record),
            finished_at: $record.finished_at,
            attempts: $record.attempts,
            cancel_requested: $record.cancel_requested,
            result: $record.result,
            error_code: $record.error_code,
            error_message: $record.error_message,
        }
    };
}

/// A command of this namespace by id (another namespace's command is simply not found).
pub async fn by_id(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: CommandId,
) -> Result<Option<CommandRecord>, DurableError> {
    Ok(
        sqlx::query_file!("queries/command_by_id.sql", id as _, namespace_id as _)
            .fetch_optional(pg)
            .await?
            .map(|row| command_record!(row)),
    )
}

/// The command an original request key created.
pub async fn by_request_key(
    pg: &PgPool,
    namespace_id: NamespaceId,
    command: &str,
    subject: &str,
    request_key: &str,
) -> Result<Option<CommandRecord>, DurableError> {
    Ok(sqlx::query_file!(
        "queries/command_by_request_key.sql",
        namespace_id as _,
        command,
        subject,
        request_key
    )
    .fetch_optional(pg)
    .await?
    .map(|row| command_record!(row)))
}

/// A page of a subject's commands, newest first. `before` is the id the previous page ended
/// with (uuid v7 ids sort by creation time).
pub struct MinePage<'a> {
    pub namespace_id: NamespaceId,
    pub command: &'a str,
    pub subject: &'a str,
    pub resource_key: Option<&'a str>,
    pub before: Option<CommandId>,
    pub limit: i64,
}

pub async fn mine(pg: &PgPool, page: &MinePage<'_>) -> Result<Vec<CommandRecord>, DurableError> {
    Ok(sqlx::query_file!(
        "queries/commands_mine.sql",
        page.namespace_id as _,
        page.command,
        page.subject,
        page.before as _,
        page.resource_key,
        page.limit
    )
    .fetch_all(pg)
    .await?
    .into_iter()
    .map(|row| command_record!(row))
    .collect())
}
