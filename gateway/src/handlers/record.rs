//! The JSON shapes of a command shared by several endpoints.

use serde_json::{Value, json};
use sluice_durable::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_durable::lifecycle::CommandStatus;
use sluice_durable::outbox::{CommandRecord, queries, rfc3339};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::Gateway;
use crate::ticket::TicketClaims;

/// Command `command_id` of the caller's namespace, or `404 NOT_FOUND` (a command of another
/// namespace is not found either).
pub async fn caller_command(
    gateway: &Gateway,
    caller: &Caller,
    command_id: CommandId,
) -> Result<CommandRecord, ApiError> {
    queries::by_id(&gateway.pg, caller.namespace_id, command_id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such command in this namespace"))
}

/// The full record of `GET /v1/commands/{id}`, `requests/{key}`, `mine` and cancel, with a fresh
/// ticket so a browser can resume polling after a refresh.
pub fn command_json(gateway: &Gateway, record: &CommandRecord, generation: i64) -> Value {
    json!({
        "command_id": record.row.id,
        "ticket": ticket_for(gateway, record, generation),
        "command": record.row.command,
        "subject": record.row.subject,
        "request_key": record.row.request_key,
        "resource_key": record.row.resource_key,
        "status": record.row.status,
        "accepted_at": rfc3339(record.row.accepted_at),
        "deadline_at": rfc3339(record.row.deadline_at),
        "updated_at": rfc3339(record.row.updated_at),
        "finished_at": record.finished_at.map(rfc3339),
        "attempts": record.attempts,
        "cancel_requested": record.cancel_requested,
        "result": result_json(record.row.status, record.result.clone()),
        "error": error_json(record.row.status, record.error_code.as_deref(), record.error_message.as_deref()),
    })
}

pub fn ticket_for(gateway: &Gateway, record: &CommandRecord, generation: i64) -> String {
    sign_ticket(
        gateway,
        record.row.application_id,
        record.row.namespace_id,
        record.row.id,
        generation,
        record.row.deadline_at.timestamp(),
    )
}

/// A ticket for one command, valid for the retention period after the command's deadline (as
/// long as its result can be read).
pub fn sign_ticket(
    gateway: &Gateway,
    application_id: ApplicationId,
    namespace_id: NamespaceId,
    command_id: CommandId,
    generation: i64,
    deadline_unix: i64,
) -> String {
    gateway.tickets.sign(&TicketClaims {
        application_id,
        namespace_id,
        command_id,
        generation: u64::try_from(generation).unwrap_or(0),
        expires_at_unix: deadline_unix + gateway.config.ticket_retention_seconds,
    })
}

/// `result` is shown only for `succeeded`.
pub fn result_json(status: CommandStatus, result: Option<Value>) -> Value {
    match (status, result) {
        (CommandStatus::Succeeded, Some(result)) => result,
        _ => Value::Null,
    }
}

/// `error` is shown for `rejected`, `failed` and `expired`.
pub fn error_json(status: CommandStatus, code: Option<&str>, message: Option<&str>) -> Value {
    if !matches!(
        status,
        CommandStatus::Rejected | CommandStatus::Failed | CommandStatus::Expired
    ) {
        return Value::Null;
    }
    json!({
        "code": code.unwrap_or("UNKNOWN"),
        "message": message.unwrap_or(""),
    })
}
