//! `GET /v1/status`: the status board of the caller's namespace. PostgreSQL's part is exact and
//! always there; the projection's part (live permits, busiest queues, outcomes per second) is
//! `null` while Redis cannot be read, so an operator still sees the truth during an outage.
//! Waiting rooms are PostgreSQL's alone, so they are always there.

use std::collections::{BTreeMap, HashMap};

use hyper::StatusCode;
use serde::Serialize;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_durable::status_board::{self, Board};
use sluice_model::CommandStatus;
use sluice_store::outbox::rfc3339;
use sluice_store::rooms::figures::RoomFigures;
use sluice_store::tenancy::NamespaceConfig;

use super::Handled;
use super::answers::to_data;
use crate::identity::auth::Caller;
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
    let board = status_board::read(
        &gateway.pg,
        &gateway.redis,
        namespace.application_id,
        caller.namespace_id,
        &namespace.declaration,
    )
    .await?;
    // This gateway process's read-cache figures (each process has its own L1 and counters).
    let cache: BTreeMap<&str, String> = gateway
        .reads
        .figures()
        .iter()
        .map(|(event, count)| (*event, count.to_string()))
        .collect();
    let answer = StatusBoard::of(&board, caller.namespace_id, &namespace, cache);
    Ok((StatusCode::OK, to_data(&answer)?))
}

/// `GET /v1/status`. Counts that may grow large are decimal strings (API conventions); limits
/// and live permits, bounded by their limits, are integers. The projection's parts are `null`
/// while Redis cannot be read.
#[derive(Serialize)]
struct StatusBoard<'a> {
    namespace: NamespaceId,
    namespace_name: &'a str,
    application_id: ApplicationId,
    generated_at: String,
    generation: String,
    ready: bool,
    projection_reachable: bool,
    paused: Paused<'a>,
    commands: Vec<CommandBoard<'a>>,
    queues: Option<Queues<'a>>,
    in_flight: InFlight<'a>,
    outcomes: Vec<OutcomeSecond>,
    quota_pools: Vec<PoolBoard<'a>>,
    rooms: Vec<RoomBoard<'a>>,
    cache: BTreeMap<&'a str, String>,
}

#[derive(Serialize)]
struct Paused<'a> {
    namespace: bool,
    commands: Vec<&'a str>,
}

#[derive(Serialize)]
struct CommandBoard<'a> {
    command: &'a str,
    handler: Option<&'static str>,
    paused: bool,
    statuses: Vec<StatusLine>,
    waiting: String,
    in_flight: Option<i64>,
    max_in_flight: Option<u32>,
}

#[derive(Serialize)]
struct StatusLine {
    status: CommandStatus,
    count: String,
    oldest_accepted_at: String,
}

#[derive(Serialize)]
struct Queues<'a> {
    resources_waiting: i64,
    scanned: i64,
    busiest: Vec<Busiest<'a>>,
}

#[derive(Serialize)]
struct Busiest<'a> {
    command: &'a str,
    resource_key: &'a str,
    waiting: i64,
    in_flight: i64,
}

#[derive(Serialize)]
struct InFlight<'a> {
    application: ApplicationInFlight,
    limit_keys: Vec<LimitKeyBoard<'a>>,
}

#[derive(Serialize)]
struct ApplicationInFlight {
    in_flight: Option<i64>,
    max_concurrency: i64,
}

#[derive(Serialize)]
struct LimitKeyBoard<'a> {
    key: &'a str,
    holders: i64,
    in_flight: Option<i64>,
}

#[derive(Serialize)]
struct OutcomeSecond {
    second: Option<String>,
    succeeded: i64,
    rejected: i64,
    failed: i64,
    expired: i64,
    cancelled: i64,
}

#[derive(Serialize)]
struct PoolBoard<'a> {
    code: &'a str,
    capacity: i64,
    allocated: i64,
    reserved: i64,
    available: i64,
}

/// A waiting room, exact from PostgreSQL. Its queue and its totals may grow without bound, so
/// they are decimal strings; its limits, and what its limits bound (live passes, slots held,
/// admissions of the last minute, which `max_active` or `admit_per_minute` caps), are integers.
#[derive(Serialize)]
struct RoomBoard<'a> {
    code: &'a str,
    declared: bool,
    waiting: String,
    active: i64,
    holding: i64,
    max_active: Option<i32>,
    admit_per_minute: Option<i32>,
    admitted_last_minute: i64,
    admitted_total: String,
    left_total: String,
    abandoned_total: String,
    opens_at: Option<String>,
    drawn_at: Option<String>,
}

impl<'a> RoomBoard<'a> {
    fn of(room: &'a RoomFigures) -> Self {
        Self {
            code: &room.code,
            declared: room.declared,
            waiting: room.waiting.to_string(),
            active: room.active,
            holding: room.holding,
            max_active: room.max_active,
            admit_per_minute: room.admit_per_minute,
            admitted_last_minute: room.admitted_last_minute,
            admitted_total: room.admitted_total.to_string(),
            left_total: room.left_total.to_string(),
            abandoned_total: room.abandoned_total.to_string(),
            opens_at: room.opens_at.map(rfc3339),
            drawn_at: room.drawn_at.map(rfc3339),
        }
    }
}

impl<'a> StatusBoard<'a> {
    fn of(
        board: &'a Board,
        namespace_id: NamespaceId,
        namespace: &'a NamespaceConfig,
        cache: BTreeMap<&'a str, String>,
    ) -> Self {
        let projection = board.projection.as_ref();
        let paused_commands: Vec<&str> = board
            .pauses
            .iter()
            .filter(|p| p.paused)
            .filter_map(|p| p.command.as_deref())
            .collect();
        let mut by_command: HashMap<&str, Vec<StatusLine>> = HashMap::new();
        for status in UNFINISHED {
            for count in board.counts.iter().filter(|c| c.status == status) {
                by_command
                    .entry(count.command.as_str())
                    .or_default()
                    .push(StatusLine {
                        status: count.status,
                        count: count.count.to_string(),
                        oldest_accepted_at: rfc3339(count.oldest_accepted_at),
                    });
            }
        }
        let commands = board
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
                CommandBoard {
                    command: &command.code,
                    handler: command.handler,
                    paused: paused_commands.contains(&command.code.as_str()),
                    statuses: by_command.remove(command.code.as_str()).unwrap_or_default(),
                    waiting: waiting.to_string(),
                    in_flight: projection.and_then(|p| p.command_in_flight.get(i).copied()),
                    max_in_flight: command.max_in_flight,
                }
            })
            .collect();
        let queues = projection.map(|p| Queues {
            resources_waiting: p.resources_waiting,
            scanned: p.resources_scanned,
            busiest: p
                .busiest
                .iter()
                .map(|b| Busiest {
                    command: &b.command,
                    resource_key: &b.resource_key,
                    waiting: b.waiting,
                    in_flight: b.in_flight,
                })
                .collect(),
        });
        let limit_keys = board
            .limit_keys
            .iter()
            .enumerate()
            .map(|(i, (key, holders))| LimitKeyBoard {
                key,
                holders: *holders,
                in_flight: projection.and_then(|p| p.limit_key_in_flight.get(i).copied()),
            })
            .collect();
        let outcomes = projection
            .map(|p| {
                p.outcomes
                    .iter()
                    .map(|o| OutcomeSecond {
                        second: chrono::DateTime::from_timestamp(o.unix_second, 0).map(rfc3339),
                        succeeded: o.succeeded,
                        rejected: o.rejected,
                        failed: o.failed,
                        expired: o.expired,
                        cancelled: o.cancelled,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let quota_pools = board
            .quota_pools
            .iter()
            .map(|q| PoolBoard {
                code: &q.code,
                capacity: q.capacity,
                allocated: q.allocated,
                reserved: q.reserved,
                available: sluice_durable::quotas::pools::available(
                    q.capacity,
                    q.allocated,
                    q.reserved,
                ),
            })
            .collect();
        let generation = projection.and_then(|p| p.generation);
        Self {
            namespace: namespace_id,
            namespace_name: &namespace.namespace,
            application_id: namespace.application_id,
            generated_at: rfc3339(board.generated_at),
            generation: board.expected_generation.to_string(),
            ready: projection.is_some_and(|p| p.ready)
                && generation == Some(board.expected_generation),
            projection_reachable: projection.is_some(),
            paused: Paused {
                namespace: board.pauses.iter().any(|p| p.command.is_none() && p.paused),
                commands: paused_commands,
            },
            commands,
            queues,
            in_flight: InFlight {
                application: ApplicationInFlight {
                    in_flight: projection.map(|p| p.application_in_flight),
                    max_concurrency: board.max_concurrency,
                },
                limit_keys,
            },
            outcomes,
            quota_pools,
            rooms: board.rooms.iter().map(RoomBoard::of).collect(),
            cache,
        }
    }
}
