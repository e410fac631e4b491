//! The reads the command endpoints need. Each is one indexed statement.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use crate::DurableError;
use crate::ids::{CommandId, NamespaceId};
use crate::outbox::CommandRow;

/// The full record of a command, as `GET /v1/commands/{id}` shows it: its row and its outcome.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CommandRecord {
    #[sqlx(flatten)]
    pub row: CommandRow,
    pub finished_at: Option<DateTime<Utc>>,
    pub attempts: i32,
    pub cancel_requested: bool,
    pub result: Option<serde_json::Value>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
}

/// The columns [`CommandRecord`] reads (see [`crate::row_columns`]).
#[macro_export]
#[doc(hidden)]
macro_rules! record_columns {
    ($p:literal) => {
        concat!(
            $crate::row_columns!($p),
            ", ",
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
    namespace_id: NamespaceId,
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
    pub namespace_id: NamespaceId,
    pub command: &'a str,
    pub subject: &'a str,
    pub resource_key: Option<&'a str>,
    pub before: Option<CommandId>,
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
