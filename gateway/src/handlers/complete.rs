//! `POST /v1/commands/{command_id}:complete`: a webhook backend reports the authoritative result
//! of a command it answered `202` for. The first result wins; its repeat is a no-op; another is
//! `409 STATE_CONFLICT`.

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::json;
use sluice_durable::declaration::HandlerDecl;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle;
use sluice_durable::lifecycle::end::{Completion, MAX_ERROR_CODE_CHARS, Reported, is_error_code};
use sluice_model::CommandStatus;
use sluice_store::outbox::queries::CommandRecord;

use super::Handled;
use super::record::{caller_command, command_json};
use crate::http::error::{ApiError, ErrorCode};
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::identity::auth::Caller;
use crate::state::Gateway;

pub async fn complete(gateway: &Gateway, caller: &Caller, id: CommandId, body: Bytes) -> Handled {
    caller.require_scope("commands:complete")?;
    let reported = parse_report(&body)?;
    let record = caller_command(gateway, caller, id).await?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let is_webhook = namespace
        .declaration
        .command(&record.row.command)
        .is_some_and(|decl| matches!(decl.handler, HandlerDecl::Webhook { .. }));
    if !is_webhook {
        return Err(conflict(
            &record,
            format!(
                "command {:?} is not run by a webhook; only its backend's results can be completed",
                record.row.command
            ),
        ));
    }
    let completion = lifecycle::end::complete(
        gateway.stores(),
        caller.namespace_id,
        id,
        &reported,
        gateway.retention_ms(),
        gateway.projection_patience(),
    )
    .await?;
    let record = match completion {
        Completion::NotFound => {
            return Err(ApiError::not_found("no such command in this namespace"));
        }
        Completion::NotStarted(record) => {
            return Err(conflict(
                &record,
                "no backend holds this command (none reached, or refused): nothing to complete"
                    .into(),
            ));
        }
        Completion::Conflict(record) => {
            return Err(conflict(
                &record,
                format!(
                    "the command already ended {} with another result",
                    record.row.status
                ),
            ));
        }
        Completion::Repeated(record) | Completion::Landed(record) => record,
    };
    Ok((StatusCode::OK, command_json(gateway, &record)?))
}

/// `{"outcome": "succeeded"|"rejected"|"failed", "result": {…}?, "error_code": "…"?}`.
fn parse_report(body: &[u8]) -> Result<Reported, ApiError> {
    let mut reader = ObjectReader::new(parse_object(body)?, "");
    let outcome = reader.required_string("outcome")?;
    let status = CommandStatus::parse(&outcome)
        .filter(|s| {
            matches!(
                s,
                CommandStatus::Succeeded | CommandStatus::Rejected | CommandStatus::Failed
            )
        })
        .ok_or_else(|| {
            ApiError::invalid("outcome", "must be one of succeeded, rejected, failed")
        })?;
    let result = reader.optional_object("result")?;
    let error_code = reader.optional_string("error_code")?;
    reader.finish()?;
    if let Some(code) = &error_code {
        if status == CommandStatus::Succeeded {
            return Err(ApiError::invalid(
                "error_code",
                "only allowed with outcome rejected or failed",
            ));
        }
        if !is_error_code(code) {
            return Err(ApiError::invalid(
                "error_code",
                format!("must be 1 to {MAX_ERROR_CODE_CHARS} printable ASCII characters"),
            ));
        }
    }
    let result = result.map(serde_json::Value::Object);
    Ok(match status {
        CommandStatus::Succeeded => Reported {
            status,
            result: Some(result.unwrap_or_else(|| json!({}))),
            error: None,
            invalidate: Vec::new(),
        },
        _ => Reported {
            status,
            error: Some((
                error_code.unwrap_or_else(|| status.as_str().to_ascii_uppercase()),
                format!("the backend reported the command {status}"),
            )),
            result,
            invalidate: Vec::new(),
        },
    })
}

fn conflict(record: &CommandRecord, message: String) -> ApiError {
    ApiError::new(ErrorCode::StateConflict, message)
        .with_detail("status", record.row.status.as_str())
}
