//! `GET /v1/status`: the status board of the caller's namespace. PostgreSQL's part is exact and
//! always there; the projection's part (live permits, busiest queues, outcomes per second) is
//! `null` while Redis cannot be read, so an operator still sees the truth during an outage.

use std::collections::HashMap;

use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_durable::lifecycle::CommandStatus;
use sluice_durable::outbox::rfc3339;
use sluice_durable::status::{self, Board};

use super::Handled;
use crate::auth::Caller;
use crate::state::Gateway;

/// Unfinished statuses, in the order of a command's life.
const UNFINISHED: [CommandStatus; 5] = [
    CommandStatus::Accepted,
    CommandStatus::Executing,
    CommandStatus::Running,
    CommandStatus::RetryWait,
    CommandStatus::NeedsReview,
];

pub async fn status(gateway: &Gateway, caller: &Caller) -> Handled {
    caller.require_scope("status:read")?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let board = status::read(
        &gateway.pg,
        &gateway.redis,
        namespace.application_id,
        caller.namespace_id,
        &namespace.declaration,
    )
    .await?;
    let mut data = board_json(&board);
    data["namespace"] = json!(caller.namespace_id);
    data["namespace_name"] = json!(namespace.namespace);
    data["application_id"] = json!(namespace.application_id);
    // This gateway process's read-cache figures (each process has its own L1 and counters).
    data["cache"] = gateway
        .reads
        .figures()
        .iter()
        .map(|(event, count)| (event.to_string(), json!(count.to_string())))
        .collect::<serde_json::Map<_, _>>()
        .into();
    Ok((StatusCode::OK, data))
}

/// Counts that may grow large are decimal strings (API conventions); limits and live permits,
/// bounded by their limits, are integers.
fn board_json(board: &Board) -> Value {
    let projection = board.projection.as_ref();
    let paused_namespace = board.pauses.iter().any(|p| p.command.is_none() && p.paused);
    let paused_commands: Vec<&str> = board
        .pauses
        .iter()
        .filter(|p| p.paused)
        .filter_map(|p| p.command.as_deref())
        .collect();
    let mut by_command: HashMap<&str, Vec<Value>> = HashMap::new();
    for status in UNFINISHED {
        for count in board.counts.iter().filter(|c| c.status == status) {
            by_command
                .entry(count.command.as_str())
                .or_default()
                .push(json!({
                    "status": count.status,
                    "count": count.count.to_string(),
                    "oldest_accepted_at": rfc3339(count.oldest_accepted_at),
                }));
        }
    }
    let commands: Vec<Value> = board
        .commands
        .iter()
        .enumerate()
        .map(|(i, command)| {
            let waiting: i64 = board
                .counts
                .iter()
                .filter(|c| c.command == command.code && c.status == CommandStatus::Accepted)
                .map(|c| c.count)
                .sum();
            json!({
                "command": command.code,
                "handler": command.handler,
                "paused": paused_commands.contains(&command.code.as_str()),
                "statuses": by_command.remove(command.code.as_str()).unwrap_or_default(),
                "waiting": waiting.to_string(),
                "in_flight": projection.and_then(|p| p.command_in_flight.get(i)),
                "max_in_flight": command.max_in_flight,
            })
        })
        .collect();
    let queues = projection.map(|p| {
        json!({
            "resources_waiting": p.resources_waiting,
            "scanned": p.resources_scanned,
            "busiest": p.busiest.iter().map(|b| json!({
                "command": b.command,
                "resource_key": b.resource_key,
                "waiting": b.waiting,
                "in_flight": b.in_flight,
            })).collect::<Vec<_>>(),
        })
    });
    let limit_keys: Vec<Value> = board
        .limit_keys
        .iter()
        .enumerate()
        .map(|(i, (key, holders))| {
            json!({
                "key": key,
                "holders": holders,
                "in_flight": projection.and_then(|p| p.limit_key_in_flight.get(i)),
            })
        })
        .collect();
    let outcomes: Vec<Value> = projection
        .map(|p| {
            p.outcomes
                .iter()
                .map(|o| {
                    json!({
                        "second": chrono::DateTime::from_timestamp(o.unix_second, 0).map(rfc3339),
                        "succeeded": o.succeeded,
                        "rejected": o.rejected,
                        "failed": o.failed,
                        "expired": o.expired,
                        "cancelled": o.cancelled,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let quota_pools: Vec<Value> = board
        .quota_pools
        .iter()
        .map(|q| {
            json!({
                "code": q.code,
                "capacity": q.capacity,
                "allocated": q.allocated,
                "reserved": q.reserved,
                "available": (q.capacity - q.allocated - q.reserved).max(0),
            })
        })
        .collect();
    let generation = projection.and_then(|p| p.generation);
    json!({
        "generated_at": rfc3339(board.generated_at),
        "generation": board.expected_generation.to_string(),
        "ready": projection.is_some_and(|p| p.ready) && generation == Some(board.expected_generation),
        "projection_reachable": projection.is_some(),
        "paused": {"namespace": paused_namespace, "commands": paused_commands},
        "commands": commands,
        "queues": queues,
        "in_flight": {
            "application": {
                "in_flight": projection.map(|p| p.application_in_flight),
                "max_concurrency": board.max_concurrency,
            },
            "limit_keys": limit_keys,
        },
        "outcomes": outcomes,
        "quota_pools": quota_pools,
    })
}
