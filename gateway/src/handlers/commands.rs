//! The command endpoints besides enqueue: read by id, resume by request key, a subject's own
//! commands, and cancel.

use hyper::StatusCode;
use serde_json::Value;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle;
use sluice_store::outbox::queries::{self, CommandRecord, MinePage};

use super::answers::to_data;
use super::record::{caller_command, command_json};
use super::{Handled, pages};
use crate::http::error::ApiError;
use crate::http::strict_json::{validate_request_key, validate_subject};
use crate::http::url::query_value;
use crate::identity::auth::Caller;
use crate::state::Gateway;
use serde::Serialize;

pub fn parse_command_id(text: &str) -> Result<CommandId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::invalid("command_id", "must be a uuid"))
}

/// `GET /v1/commands/{command_id}`: the owner subject, or `commands:read`.
pub async fn get(gateway: &Gateway, caller: &Caller, command_id: CommandId) -> Handled {
    let _permit = gateway.command_read_permit(caller)?;
    let record = caller_command(gateway, caller, command_id).await?;
    readable_record(gateway, caller, &record).await
}

/// `GET /v1/commands/{command}/requests/{request_key}`: resume after a refresh.
pub async fn by_request_key(
    gateway: &Gateway,
    caller: &Caller,
    command: &str,
    request_key: &str,
    query: &[(String, String)],
) -> Handled {
    validate_request_key(request_key, "request_key")?;
    let subject = match (caller.subject(), query_value(query, "subject")) {
        (Some(own), None) => own.to_string(),
        (Some(own), Some(named)) if named == own => own.to_string(),
        (Some(_), Some(_)) => {
            return Err(ApiError::permission_denied(
                "a subject token can only look up its own requests",
            ));
        }
        (None, Some(named)) => {
            caller.require_scope("commands:read")?;
            validate_subject(named, "subject")?;
            named.to_string()
        }
        (None, None) => {
            return Err(ApiError::invalid(
                "subject",
                "is required with a credential",
            ));
        }
    };
    let _permit = gateway.command_read_permit(caller)?;
    let record = queries::by_request_key(
        &gateway.pg,
        caller.namespace_id,
        command,
        &subject,
        request_key,
    )
    .await?
    .ok_or_else(|| ApiError::not_found("no command was created with this request key"))?;
    readable_record(gateway, caller, &record).await
}

/// A command's record as its owner subject, or a caller with `commands:read`, sees it.
async fn readable_record(gateway: &Gateway, caller: &Caller, record: &CommandRecord) -> Handled {
    caller.require_owner_or_scope(&record.row.subject, "commands:read")?;
    Ok((StatusCode::OK, command_json(gateway, record)?))
}

/// `GET /v1/commands/{command}/mine`: the subject's own commands, newest first.
pub async fn mine(
    gateway: &Gateway,
    caller: &Caller,
    command: &str,
    query: &[(String, String)],
) -> Handled {
    let subject = caller.subject().ok_or_else(|| {
        ApiError::permission_denied(
            "mine is for subject tokens; use requests/{key}?subject= with a credential",
        )
    })?;
    let limit = pages::limit(query, 20, 20)?;
    let before = pages::cursor(query)?.map(CommandId::from_uuid);
    let resource_key = query_value(query, "resource_key").filter(|r| !r.is_empty());
    // An undeclared command is a wrong path, as it is for enqueue, not an empty list: a client
    // with a typo in the code would otherwise believe the subject has no commands.
    let namespace = gateway.namespace(caller.namespace_id).await?;
    if namespace.declaration.command(command).is_none() {
        return Err(ApiError::not_found(format!(
            "no command {command:?} is declared in this namespace"
        )));
    }
    let page = MinePage {
        namespace_id: caller.namespace_id,
        command,
        subject,
        resource_key,
        before,
        limit: limit + 1,
    };
    let _permit = gateway.command_read_permit(caller)?;
    let mut records = queries::mine(&gateway.pg, &page).await?;
    let more = records.len() as i64 > limit;
    records.truncate(limit as usize);
    let next_cursor = if more {
        records.last().map(|r| pages::encode(r.row.id.as_uuid()))
    } else {
        None
    };
    let items: Vec<Value> = records
        .iter()
        .map(|r| command_json(gateway, r))
        .collect::<Result<_, _>>()?;
    Ok((StatusCode::OK, to_data(&Page { items, next_cursor })?))
}

/// `POST /v1/commands/{command_id}:cancel`: waiting → `cancelled` at once; executing or running →
/// the intent is recorded; terminal → unchanged. Always answers the current record.
pub async fn cancel(gateway: &Gateway, caller: &Caller, command_id: CommandId) -> Handled {
    let _permit = gateway.command_read_permit(caller)?;
    let record = caller_command(gateway, caller, command_id).await?;
    caller.require_owner_or_scope(&record.row.subject, "commands:cancel")?;
    let cancelled = lifecycle::end::cancel(
        gateway.stores(),
        caller.namespace_id,
        command_id,
        gateway.retention_ms(),
        gateway.projection_patience(),
    )
    .await?
    .ok_or_else(|| ApiError::not_found("no such command in this namespace"))?;
    Ok((StatusCode::OK, command_json(gateway, &cancelled.record)?))
}

/// A page of `GET /v1/commands/mine`: the records, and the cursor of the next page if any.
#[derive(Serialize)]
struct Page {
    items: Vec<Value>,
    next_cursor: Option<String>,
}
