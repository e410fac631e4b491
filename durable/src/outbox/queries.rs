//! The reads the command endpoints need. Each is one indexed statement.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgRow;
use sqlx::{FromRow, Row};
use uuid::Uuid;

use crate::DurableError;
use crate::ids::{CommandId, NamespaceId};
use crate::lifecycle::CommandStatus;

/// The full record of a command, as `GET /v1/commands/{id}` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRecord {
    pub id: Uuid,
    pub application_id: Uuid,
    pub namespace_id: Uuid,
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
    pub finished_at: Option<DateTime<Utc>>,
    pub attempts: i32,
    pub cancel_requested: bool,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

impl<'r> FromRow<'r, PgRow> for CommandRecord {
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            id: row.try_get("id")?,
            application_id: row.try_get("application_id")?,
            namespace_id: row.try_get("namespace_id")?,
            command: row.try_get("command")?,
            subject: row.try_get("subject")?,
            request_key: row.try_get("request_key")?,
            content_sha256: row.try_get("content_sha256")?,
            resource_key: row.try_get("resource_key")?,
            queue_seq: row.try_get("queue_seq")?,
            status: row.try_get("status")?,
            accepted_at: row.try_get("accepted_at")?,
            deadline_at: row.try_get("deadline_at")?,
            updated_at: row.try_get("updated_at")?,
            finished_at: row.try_get("finished_at")?,
            attempts: row.try_get("attempts")?,
            cancel_requested: row.try_get("cancel_requested")?,
            result: row.try_get("result")?,
            error_code: row.try_get("error_code")?,
            error_message: row.try_get("error_message")?,
        })
    }
}

impl CommandRecord {
    pub fn is_waiting(&self) -> bool {
        self.status.is_waiting()
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_final()
    }
}

/// The columns [`CommandRecord`] reads, spliced into statements at compile time with `concat!`
/// (SQL is never built at run time).
#[macro_export]
#[doc(hidden)]
macro_rules! record_columns {
    ($p:literal) => {
        concat!(
            $p,
            "id, ",
            $p,
            "application_id, ",
            $p,
            "namespace_id, ",
            $p,
            "command, ",
            $p,
            "subject, ",
            $p,
            "request_key, ",
            $p,
            "content_sha256, ",
            $p,
            "resource_key, ",
            $p,
            "queue_seq, ",
            $p,
            "status, ",
            $p,
            "accepted_at, ",
            $p,
            "deadline_at, ",
            $p,
            "updated_at, ",
            $p,
            "finished_at, ",
            $p,
            "attempts, ",
            $p,
            "cancel_requested, ",
            $p,
            "result, ",
            $p,
            "error_code, ",
            $p,
            "error_message"
        )
    };
}

/// A command of this namespace by id (another namespace's command is simply not found).
pub async fn by_id(
    pg: &PgPool,
    namespace_id: NamespaceId,
    id: CommandId,
) -> Result<Option<CommandRecord>, DurableError> {
    let (namespace_id, id) = (namespace_id.as_uuid(), id.as_uuid());
    const SQL: &str = concat!(
        "SELECT ",
        record_columns!(""),
        " FROM commands WHERE id = $1 AND namespace_id = $2"
    );
    Ok(sqlx::query_as(SQL)
        .bind(id)
        .bind(namespace_id)
        .fetch_optional(pg)
        .await?)
}

/// The command an original request key created.
pub async fn by_request_key(
    pg: &PgPool,
    namespace_id: Uuid,
    command: &str,
    subject: &str,
    request_key: &str,
) -> Result<Option<CommandRecord>, DurableError> {
    const SQL: &str = concat!(
        "SELECT ",
        record_columns!(""),
        " FROM commands
          WHERE namespace_id = $1 AND command = $2 AND subject = $3 AND request_key = $4"
    );
    Ok(sqlx::query_as(SQL)
        .bind(namespace_id)
        .bind(command)
        .bind(subject)
        .bind(request_key)
        .fetch_optional(pg)
        .await?)
}

/// A page of a subject's commands, newest first. `before` is the id the previous page ended
/// with (uuid v7 ids sort by creation time).
pub struct MinePage<'a> {
    pub namespace_id: Uuid,
    pub command: &'a str,
    pub subject: &'a str,
    pub resource_key: Option<&'a str>,
    pub before: Option<Uuid>,
    pub limit: i64,
}

pub async fn mine(pg: &PgPool, page: &MinePage<'_>) -> Result<Vec<CommandRecord>, DurableError> {
    const SQL: &str = concat!(
        "SELECT ",
        record_columns!(""),
        " FROM commands
          WHERE namespace_id = $1 AND command = $2 AND subject = $3
            AND ($4::uuid IS NULL OR id < $4)
            AND ($5::text IS NULL OR resource_key = $5)
          ORDER BY id DESC
          LIMIT $6"
    );
    Ok(sqlx::query_as(SQL)
        .bind(page.namespace_id)
        .bind(page.command)
        .bind(page.subject)
        .bind(page.before)
        .bind(page.resource_key)
        .bind(page.limit)
        .fetch_all(pg)
        .await?)
}
