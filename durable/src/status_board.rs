//! The status board: what an operator needs to see of one namespace during a drop, read in a
//! bounded number of indexed queries and one script call, whatever the size of the backlog.
//!
//! PostgreSQL answers what must be exact (unfinished counts per command and status, the oldest
//! of each, quota pools, pauses, waiting rooms); the projection answers what only it knows or
//! what would cost a scan in PostgreSQL (live permits, the busiest queues, outcomes per
//! second).

use chrono::{DateTime, Utc};
use fred::prelude::*;
use sqlx::PgPool;

use crate::DurableError;
use crate::control::{self, PauseState};
use crate::declaration::Declaration;
use crate::ids::{ApplicationId, NamespaceId};
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_redis::asked_keys::call_asking;
use sluice_store::rooms::figures::{self as room_figures, RoomFigures};

/// Ready resources looked at for the busiest queues, at most. `status_board.lua` blocks Redis (every
/// admission and intake of the shard waits) for about one `ZCARD` per resource looked at, and
/// a dashboard reads the board every second: 10,000 cost 40 to 80 ms of blocked Redis per read
/// on the 2-core development machine, 1,000 cost 2 to 4 ms.
pub const RESOURCES_SCANNED: i64 = 1_000;
/// Busiest resources and limit keys returned.
pub const TOP: i64 = 20;
/// Whole seconds of outcomes returned.
pub const OUTCOME_SECONDS: i64 = 10;
/// Quota pools returned.
pub const QUOTA_POOLS: i64 = 100;

/// Unfinished commands of one command in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    pub command: String,
    pub status: CommandStatus,
    pub count: i64,
    pub oldest_accepted_at: DateTime<Utc>,
}

/// A queue with waiting work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusyResource {
    pub command: String,
    pub resource_key: String,
    pub waiting: i64,
    pub in_flight: i64,
}

/// Commands that reached a final status during one second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcomes {
    pub unix_second: i64,
    pub succeeded: i64,
    pub rejected: i64,
    pub failed: i64,
    pub expired: i64,
    pub cancelled: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaPool {
    pub code: String,
    pub capacity: i64,
    pub allocated: i64,
    pub reserved: i64,
}

/// What the projection said; `None` in [`Board::projection`] when Redis could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionFigures {
    pub generation: Option<i64>,
    pub ready: bool,
    pub resources_waiting: i64,
    pub resources_scanned: i64,
    pub application_in_flight: i64,
    /// Live permits per command, in the order of [`Board::commands`].
    pub command_in_flight: Vec<i64>,
    pub busiest: Vec<BusyResource>,
    pub outcomes: Vec<Outcomes>,
    /// Live permits per limit key, in the order of [`Board::limit_keys`].
    pub limit_key_in_flight: Vec<i64>,
}

/// One command as the board shows it: every declared command, then any command no longer
/// declared that still has unfinished work (its handler and limit are then unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInfo {
    pub code: String,
    pub handler: Option<&'static str>,
    pub max_in_flight: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Board {
    pub generated_at: DateTime<Utc>,
    /// PostgreSQL's generation: the projection is trusted only at this generation.
    pub expected_generation: i64,
    pub max_concurrency: i64,
    pub commands: Vec<CommandInfo>,
    pub counts: Vec<StatusCount>,
    pub pauses: Vec<PauseState>,
    pub quota_pools: Vec<QuotaPool>,
    /// The namespace's waiting rooms, declared first.
    pub rooms: Vec<RoomFigures>,
    /// Limit keys held by work in hand, busiest first, with how many commands in hand hold each.
    pub limit_keys: Vec<(String, i64)>,
    pub projection: Option<ProjectionFigures>,
}

/// Reads the board of one namespace. PostgreSQL failing is an error; Redis failing leaves
/// [`Board::projection`] empty, so an operator still sees the truth during an outage.
pub async fn read(
    pg: &PgPool,
    redis: &Projection,
    application_id: ApplicationId,
    namespace_id: NamespaceId,
    declaration: &Declaration,
) -> Result<Board, DurableError> {
    let mut commands: Vec<CommandInfo> = declaration
        .commands
        .iter()
        .map(|c| CommandInfo {
            code: c.code.clone(),
            handler: Some(match c.handler {
                crate::declaration::HandlerDecl::Quota { .. } => "quota",
                crate::declaration::HandlerDecl::Webhook { .. } => "webhook",
            }),
            max_in_flight: Some(c.admission.max_in_flight),
        })
        .collect();
    let (head, counts, pauses, quota_pools, rooms, limit_keys) = tokio::try_join!(
        head(pg, application_id),
        counts(pg, namespace_id),
        control::namespace_pauses(pg, namespace_id),
        quota_pools(pg, namespace_id),
        room_figures::of_namespace(pg, namespace_id),
        limit_keys_in_hand(pg, namespace_id),
    )?;
    // Work of a command removed from the declaration is still work: it stays on the board.
    for count in &counts {
        if !commands.iter().any(|c| c.code == count.command) {
            commands.push(CommandInfo {
                code: count.command.clone(),
                handler: None,
                max_in_flight: None,
            });
        }
    }
    let (generated_at, expected_generation, max_concurrency) = head;
    let codes: Vec<&str> = commands.iter().map(|c| c.code.as_str()).collect();
    let keys: Vec<&str> = limit_keys.iter().map(|(key, _)| key.as_str()).collect();
    let projection = match projection(
        redis,
        &AppKeys::new(application_id),
        namespace_id,
        &codes,
        &keys,
        RESOURCES_SCANNED,
    )
    .await
    {
        Ok(figures) => Some(figures),
        Err(error) => {
            tracing::warn!(%application_id, %error, "status board without the projection");
            None
        }
    };
    Ok(Board {
        generated_at,
        expected_generation,
        max_concurrency,
        commands,
        counts,
        pauses,
        quota_pools,
        rooms,
        limit_keys,
        projection,
    })
}

/// Unfinished commands per command and status with the oldest of each: one range of the
/// partial index `commands_status_board` (whose predicate is this very `IN` list), never a
/// visit to finished rows. `$1` namespace. The text of the file [`counts`] runs, for plan checks.
pub const COUNTS_SQL: &str = include_str!("../queries/status_counts.sql");

/// Limit keys held by work in hand, busiest first, at most `$2`: rows of the partial index
/// `commands_in_hand` only. `$1` namespace. The text of the file [`limit_keys_in_hand`] runs.
pub const LIMIT_KEYS_SQL: &str = include_str!("../queries/status_limit_keys.sql");

/// Every query of the board that reads `commands` with its number of parameters: `$1` is the
/// namespace, `$2` (where there is one) a row limit. For plan checks.
pub const COMMANDS_QUERIES: [(&str, usize); 2] = [(COUNTS_SQL, 1), (LIMIT_KEYS_SQL, 2)];

/// The clock, the trusted generation and the application's concurrency budget.
async fn head(
    pg: &PgPool,
    application_id: ApplicationId,
) -> Result<(DateTime<Utc>, i64, i64), DurableError> {
    let row = sqlx::query!(
        r#"SELECT now() AS "now!", coalesce(p.generation, 0) AS "generation!",
                  a.max_concurrency::bigint AS "max_concurrency!"
             FROM applications a LEFT JOIN projections p ON p.application_id = a.id
            WHERE a.id = $1"#,
        application_id as _,
    )
    .fetch_one(pg)
    .await?;
    Ok((row.now, row.generation, row.max_concurrency))
}

/// One index-only range of `commands_status_board`: unfinished rows only.
async fn counts(pg: &PgPool, namespace_id: NamespaceId) -> Result<Vec<StatusCount>, DurableError> {
    let rows = sqlx::query_file!("queries/status_counts.sql", namespace_id as _)
        .fetch_all(pg)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| StatusCount {
            command: row.command,
            status: row.status,
            count: row.count,
            oldest_accepted_at: row.oldest,
        })
        .collect())
}

/// The namespace's quota pools, at most [`QUOTA_POOLS`].
async fn quota_pools(
    pg: &PgPool,
    namespace_id: NamespaceId,
) -> Result<Vec<QuotaPool>, DurableError> {
    Ok(sqlx::query_as!(
        QuotaPool,
        "SELECT code, capacity, allocated, reserved FROM quota_pools
          WHERE namespace_id = $1 ORDER BY code LIMIT $2",
        namespace_id as _,
        QUOTA_POOLS,
    )
    .fetch_all(pg)
    .await?)
}

/// Work in hand is bounded by the concurrency budgets, so this reads few rows
/// (`commands_in_hand`) however long the waiting backlog is.
async fn limit_keys_in_hand(
    pg: &PgPool,
    namespace_id: NamespaceId,
) -> Result<Vec<(String, i64)>, DurableError> {
    let rows = sqlx::query_file!("queries/status_limit_keys.sql", namespace_id as _, TOP)
        .fetch_all(pg)
        .await?;
    Ok(rows.into_iter().map(|row| (row.key, row.holders)).collect())
}

/// The projection's figures of one namespace (one `status_board.lua` call): live permits of each of
/// `commands` and `limit_keys` (in their order), the busiest queues among the first `scan`
/// resources with waiting work of those commands, and the outcomes of the last [`OUTCOME_SECONDS`] whole seconds.
pub async fn projection(
    redis: &Projection,
    keys: &AppKeys,
    namespace_id: NamespaceId,
    commands: &[&str],
    limit_keys: &[&str],
    scan: i64,
) -> Result<ProjectionFigures, DurableError> {
    let mut args: Vec<Value> = vec![
        namespace_id.to_string().into(),
        scan.into(),
        TOP.into(),
        OUTCOME_SECONDS.into(),
        (commands.len() as i64).into(),
        "ask".into(),
    ];
    args.extend(commands.iter().map(|code| Value::from(*code)));
    args.extend(limit_keys.iter().map(|key| Value::from(*key)));
    let mut script_keys = vec![
        keys.meta(),
        keys.application_leases(),
        keys.outcomes(namespace_id),
    ];
    for command in commands {
        script_keys.push(keys.command_leases(namespace_id, command));
        script_keys.push(keys.resource_ready(namespace_id, command));
    }
    script_keys.extend(
        limit_keys
            .iter()
            .map(|key| keys.limit_leases(namespace_id, key)),
    );
    // The resources with waiting work are read by the script: the first call names their
    // queues and lease zsets, and the second looks at those it was given (status_board.lua).
    let given = script_keys.len();
    let answer = call_asking("status_board.lua", script_keys, |script_keys| {
        let mut args = args.clone();
        if script_keys.len() > given {
            args[5] = "partial".into();
        }
        redis.status_board(script_keys, args)
    })
    .await?;
    let answer = match answer {
        Value::Array(items) => items,
        _ => return Err(DurableError::script("status_board.lua", "not a list")),
    };
    let bad = |what: &str| DurableError::script("status_board.lua", what);
    let int = |v: Option<&Value>| v.and_then(Value::as_i64).unwrap_or(0);
    let list = |v: Option<&Value>| -> Vec<Value> {
        match v {
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        }
    };
    if answer.len() != 9 {
        return Err(bad("expected 9 fields"));
    }
    let own = format!("{namespace_id}:");
    let busiest = list(answer.get(6))
        .chunks(3)
        .filter_map(|chunk| {
            let suffix = chunk.first()?.as_string()?;
            let (command, resource_key) = suffix.strip_prefix(&own)?.split_once(':')?;
            Some(BusyResource {
                command: command.to_string(),
                resource_key: resource_key.to_string(),
                waiting: int(chunk.get(1)),
                in_flight: int(chunk.get(2)),
            })
        })
        .collect();
    let outcomes = list(answer.get(7))
        .chunks(6)
        .map(|c| Outcomes {
            unix_second: int(c.first()),
            succeeded: int(c.get(1)),
            rejected: int(c.get(2)),
            failed: int(c.get(3)),
            expired: int(c.get(4)),
            cancelled: int(c.get(5)),
        })
        .collect();
    Ok(ProjectionFigures {
        generation: answer.first().and_then(Value::as_i64),
        ready: answer.get(1).and_then(Value::as_i64) == Some(1),
        resources_waiting: int(answer.get(2)),
        resources_scanned: int(answer.get(3)),
        application_in_flight: int(answer.get(4)),
        command_in_flight: list(answer.get(5)).iter().map(|v| int(Some(v))).collect(),
        busiest,
        outcomes,
        limit_key_in_flight: list(answer.get(8)).iter().map(|v| int(Some(v))).collect(),
    })
}
