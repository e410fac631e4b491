//! The JSON shapes of a command shared by several endpoints.

use serde_json::Value;
use sluice_durable::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_store::outbox::{CommandRecord, queries, rfc3339};

use super::answers::{CommandAnswer, shown_error, shown_result, to_data};
use crate::http::error::ApiError;
use crate::identity::auth::Caller;
use crate::identity::ticket::{QueueClaim, TicketClaims};
use crate::state::Gateway;

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
pub fn command_json(gateway: &Gateway, record: &CommandRecord) -> Result<Value, ApiError> {
    let row = &record.row;
    to_data(&CommandAnswer {
        command_id: row.id,
        ticket: ticket_for(gateway, record),
        command: &row.command,
        subject: &row.subject,
        request_key: &row.request_key,
        resource_key: &row.resource_key,
        status: row.status,
        accepted_at: rfc3339(row.accepted_at),
        deadline_at: rfc3339(row.deadline_at),
        updated_at: rfc3339(row.updated_at),
        finished_at: record.finished_at.map(rfc3339),
        attempts: record.attempts,
        cancel_requested: record.cancel_requested,
        result: shown_result(row.status, record.result.as_ref()),
        error: shown_error(
            row.status,
            record.error_code.as_deref(),
            record.error_message.as_deref(),
        ),
    })
}

pub fn ticket_for(gateway: &Gateway, record: &CommandRecord) -> String {
    sign_ticket(
        gateway,
        record.row.application_id,
        record.row.namespace_id,
        record.row.id,
        record.row.deadline_at.timestamp(),
        None,
    )
}

/// A ticket for one command, valid for the retention period after the command's deadline (as
/// long as its result can be read). `queue`: where it waits, when known (a fresh acceptance),
/// so its polls can be answered from memory while it cannot have started
/// ([`crate::polls::waiting_view`]); None everywhere else (replays, reads): Redis answers.
pub fn sign_ticket(
    gateway: &Gateway,
    application_id: ApplicationId,
    namespace_id: NamespaceId,
    command_id: CommandId,
    deadline_unix: i64,
    queue: Option<QueueClaim>,
) -> String {
    gateway.tickets.sign(&TicketClaims {
        application_id,
        namespace_id,
        command_id,
        expires_at_unix: deadline_unix + gateway.config.ticket_retention_seconds,
        queue,
    })
}
