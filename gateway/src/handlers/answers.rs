//! The answers about one command, as types: the receipt of an enqueue, the record of the command
//! endpoints and the ticket poll. Each field is declared once here, in the API's order and with
//! its API name; `docs/openapi.json` is kept equal to what these produce by the contract tests.

use serde::Serialize;
use serde_json::Value;
use sluice_durable::ids::CommandId;
use sluice_model::CommandStatus;

use crate::http::error::ApiError;

/// `202` to an enqueue (and `200` to its replay).
#[derive(Debug, Serialize)]
pub struct Receipt<'a> {
    pub command_id: CommandId,
    pub ticket: String,
    pub command: &'a str,
    pub resource_key: &'a str,
    pub status: CommandStatus,
    pub accepted_at: &'a str,
    pub deadline_at: &'a str,
    pub queue: Option<QueuePlace>,
    /// None (`null`) once the command is final: there is nothing more to poll for.
    pub poll_after_ms: Option<u64>,
    pub deduplicated: bool,
}

/// `GET /v1/commands/{id}`, `requests/{key}`, `mine`, cancel and `:complete`.
#[derive(Debug, Serialize)]
pub struct CommandAnswer<'a> {
    pub command_id: CommandId,
    pub ticket: String,
    pub command: &'a str,
    pub subject: &'a str,
    pub request_key: &'a str,
    pub resource_key: &'a str,
    pub status: CommandStatus,
    pub accepted_at: String,
    pub deadline_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    pub attempts: i32,
    pub cancel_requested: bool,
    pub result: Option<&'a Value>,
    pub error: Option<CommandError<'a>>,
}

/// `GET /v1/tickets/{ticket}`, from Redis or from PostgreSQL.
#[derive(Debug, Serialize)]
pub struct TicketAnswer<'a> {
    pub command_id: CommandId,
    pub status: CommandStatus,
    pub queue: Option<QueuePlace>,
    pub eta_seconds: Option<u64>,
    /// None (`null`) once the command is final: there is nothing more to poll for.
    pub poll_after_ms: Option<u64>,
    /// A decimal string: generations are 64-bit and JavaScript numbers are not.
    pub generation: String,
    pub updated_at: Option<String>,
    pub result: Option<&'a Value>,
    pub error: Option<CommandError<'a>>,
}

/// Where a waiting command stands, and when Redis saw it so.
#[derive(Debug, Serialize)]
pub struct QueuePlace {
    pub position: u64,
    pub observed_at: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CommandError<'a> {
    pub code: &'a str,
    pub message: &'a str,
}

/// `result` is shown only for `succeeded`.
pub fn shown_result(status: CommandStatus, result: Option<&Value>) -> Option<&Value> {
    result.filter(|_| status == CommandStatus::Succeeded)
}

/// `error` is shown for `rejected`, `failed` and `expired`.
pub fn shown_error<'a>(
    status: CommandStatus,
    code: Option<&'a str>,
    message: Option<&'a str>,
) -> Option<CommandError<'a>> {
    matches!(
        status,
        CommandStatus::Rejected | CommandStatus::Failed | CommandStatus::Expired
    )
    .then(|| CommandError {
        code: code.unwrap_or("UNKNOWN"),
        message: message.unwrap_or(""),
    })
}

/// The answer as the JSON the envelope carries. These types have only string keys and plain
/// values, so encoding cannot fail; if a future field made it fail, the caller is told the
/// gateway cannot answer (and the failure is logged), never given a partial answer.
pub fn to_data(answer: &impl Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(answer).map_err(|error| {
        tracing::error!(%error, "an answer could not be encoded");
        ApiError::unavailable("the gateway cannot serve this request right now")
    })
}
