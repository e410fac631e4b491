//! What a ticket poll reads from Redis: one script call, no PostgreSQL.

use fred::prelude::*;

use super::AppKeys;
use crate::DurableError;
use crate::Projection;
use crate::asked_keys::call_asking;
use crate::ids::CommandId;
use crate::start_rate::StartRecord;
use sluice_model::CommandStatus;

/// The projected state of one command, as `ticket.lua` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectedStatus {
    pub ready: bool,
    pub generation: Option<i64>,
    /// None when the command is not (or no longer) projected (or Redis shows no status it
    /// knows: then PostgreSQL answers).
    pub status: Option<CommandStatus>,
    pub position: Option<u64>,
    pub updated_at: Option<String>,
    pub accepted_at: Option<String>,
    pub deadline_at: Option<String>,
    /// The result as stored JSON text.
    pub result: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// Redis time of the observation, in Unix milliseconds.
    pub observed_at_ms: i64,
    /// Starts per second of the command's own queue lately ([`StartRecord::per_second`]),
    /// when it waits and its queue started something since it last had none waiting.
    pub starts_per_second: Option<f64>,
    /// The suffix of the queue the command waits in (`<ns>:<cmd>:<resource>`), while it waits:
    /// what a ticket's queue tag stands for (gateway/src/polls/waiting_view.rs).
    pub queue_suffix: Option<String>,
}

/// `ticket.lua` for `command_id`. `queue_suffix` is the queue the caller expects the command
/// to wait in, when it knows (a ticket's queue tag the gateway has learnt, an enqueue's own
/// resource): the script reads a queue only when it is given its key, and names the one it
/// needs otherwise, so a guess that is missing or wrong costs a second call.
pub async fn read_status(
    redis: &Projection,
    keys: &AppKeys,
    command_id: CommandId,
    queue_suffix: Option<&str>,
) -> Result<ProjectedStatus, DurableError> {
    let mut script_keys = vec![keys.meta(), keys.command(command_id), keys.starts()];
    script_keys.extend(queue_suffix.map(|suffix| keys.queue_by_suffix(suffix)));
    let answer = call_asking("ticket.lua", script_keys, |script_keys| {
        redis.ticket(script_keys, vec![])
    })
    .await?;
    match answer {
        Value::Array(items) if items.len() == 13 => Ok(projected(&items)),
        Value::Array(items) => Err(DurableError::script(
            "ticket.lua",
            format!("{} elements", items.len()),
        )),
        _ => Err(DurableError::script("ticket.lua", "not a list")),
    }
}

/// The status of a 13-element `ticket.lua` answer.
fn projected(answer: &[Value]) -> ProjectedStatus {
    let text = |i: usize| answer[i].as_string();
    let observed_at_ms = answer[10].as_i64().unwrap_or_default();
    ProjectedStatus {
        ready: text(0).as_deref() == Some("1"),
        generation: answer[1].as_i64(),
        status: text(2).and_then(|s| CommandStatus::parse(&s)),
        position: answer[3].as_u64(),
        updated_at: text(4),
        accepted_at: text(5),
        deadline_at: text(6),
        result: text(7),
        error_code: text(8),
        error_message: text(9),
        observed_at_ms,
        starts_per_second: text(11)
            .as_deref()
            .and_then(StartRecord::parse)
            .and_then(|record| record.per_second(observed_at_ms)),
        queue_suffix: text(12),
    }
}
