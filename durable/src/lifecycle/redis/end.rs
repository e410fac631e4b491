//! A command's end: `land`.

use fred::prelude::*;

use super::is_not_ready;
use crate::DurableError;
use crate::ids::{CommandId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_redis::asked_keys::call_asking;

/// A command's end that PostgreSQL committed, to project.
#[derive(Debug, Clone)]
pub struct Ending<'a> {
    pub command_id: CommandId,
    pub namespace_id: NamespaceId,
    pub command: &'a str,
    pub resource_key: &'a str,
    /// Its rendered limit keys, `[[template, key], ...]`, when known (else their permits are
    /// asked for).
    pub limit_keys: &'a [[String; 2]],
    /// A final status, or `needs_review`.
    pub status: CommandStatus,
    pub updated_at: String,
    pub result: Option<String>,
    pub error: Option<(&'a str, &'a str)>,
    /// How long the final status stays readable in Redis.
    pub retention_ms: i64,
}

/// `land.lua`: Some(true) when this call counted the command out of `unfinished`, None when the
/// projection is not trusted (land again once it is).
pub async fn land(
    redis: &Projection,
    keys: &AppKeys,
    end: &Ending<'_>,
) -> Result<Option<bool>, DurableError> {
    let mut script_keys = vec![
        keys.meta(),
        keys.count(),
        keys.command(end.command_id),
        keys.queue(end.namespace_id, end.command, end.resource_key),
        keys.gone(),
        keys.seq(),
        keys.outcomes(end.namespace_id),
    ];
    script_keys.extend(keys.command_permits(
        end.namespace_id,
        end.command,
        end.resource_key,
        end.limit_keys,
    ));
    let (code, message) = end.error.unwrap_or(("", ""));
    let args: Vec<Value> = vec![
        end.command_id.to_string().into(),
        end.namespace_id.to_string().into(),
        end.command.into(),
        end.status.as_str().into(),
        end.updated_at.clone().into(),
        end.result.clone().unwrap_or_default().into(),
        code.into(),
        message.into(),
        end.retention_ms.into(),
    ];
    let answer = call_asking("land.lua", script_keys, |keys| {
        redis.land(keys, args.clone())
    })
    .await?;
    if is_not_ready(&answer) {
        return Ok(None);
    }
    Ok(Some(answer.as_i64() == Some(1)))
}
