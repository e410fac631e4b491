//! `POST /v1/control`: an operator pauses or resumes intake of the caller's namespace, or of one
//! of its commands. The value is absolute, so a repeat (after a timeout or a `503`) is safe and
//! changes nothing. Polls, results and execution of accepted work go on while intake is paused.

use crate::handlers::answers::to_data;
use hyper::{HeaderMap, StatusCode};
use serde::Serialize;
use sluice_durable::control::{self, SetPause};
use sluice_durable::ids::NamespaceId;

use super::{Handled, require_json, validate_reason};
use crate::http::error::ApiError;
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::identity::auth::Caller;
use crate::state::Gateway;

pub async fn control(
    gateway: &Gateway,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    caller.require_scope("control:manage")?;
    require_json(headers)?;
    let request = ControlRequest::parse(body)?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    if let Some(command) = &request.command
        && !namespace
            .declaration
            .commands
            .iter()
            .any(|c| &c.code == command)
    {
        return Err(ApiError::not_found(format!(
            "no command {command:?} is declared in this namespace"
        )));
    }
    let actor = caller.actor();
    let state = control::set_pause(
        &gateway.pg,
        &gateway.redis,
        &SetPause {
            application_id: namespace.application_id,
            namespace_id: caller.namespace_id,
            command: request.command.as_deref(),
            paused: request.paused,
            reason: &request.reason,
            actor: &actor,
        },
    )
    .await?;
    tracing::info!(
        namespace = %state.namespace_id,
        command = state.command.as_deref().unwrap_or(""),
        paused = state.paused,
        revision = state.revision,
        %actor,
        "intake control set"
    );
    Ok((
        StatusCode::OK,
        to_data(&ControlAnswer {
            namespace: state.namespace_id,
            command: state.command.as_deref(),
            paused: state.paused,
            revision: state.revision.to_string(),
        })?,
    ))
}

/// The pause state after `POST /v1/control`.
#[derive(Serialize)]
struct ControlAnswer<'a> {
    namespace: NamespaceId,
    command: Option<&'a str>,
    paused: bool,
    revision: String,
}

/// `{"paused": bool, "reason": "…", "command": "…"?}`, strictly.
struct ControlRequest {
    paused: bool,
    reason: String,
    command: Option<String>,
}

impl ControlRequest {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut reader = ObjectReader::new(parse_object(body)?, "");
        let paused = reader.required_bool("paused")?;
        let reason = reader.required_string("reason")?;
        let command = reader.optional_string("command")?;
        reader.finish()?;
        validate_reason(&reason)?;
        if let Some(code) = &command
            && !super::is_command_code(code)
        {
            return Err(ApiError::invalid(
                "command",
                "must be a command code: a lowercase letter, then lowercase letters, digits, '_' or '-' (at most 64)",
            ));
        }
        Ok(Self {
            paused,
            reason,
            command,
        })
    }
}
