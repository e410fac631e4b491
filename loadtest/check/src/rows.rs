//! PostgreSQL as the witness of results: the rows of `commands`, `allocations` and
//! `room_places`, read by the checker's own queries (the truth a command's end is judged by).

use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::{PgPool, PgPoolOptions};

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CommandRow {
    pub id: String,
    pub command: String,
    pub subject: String,
    pub request_key: String,
    pub input: Value,
    pub resource_key: String,
    pub queue_seq: i64,
    pub status: String,
    pub accepted_ms: i64,
    /// When it first started: the Redis time of its admission, recorded by its claim.
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub attempts: i32,
    pub result: Option<Value>,
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AllocationRow {
    pub id: String,
    pub pool: String,
    pub subject: String,
    pub command_id: String,
    pub state: String,
    pub expires_ms: Option<i64>,
    pub updated_ms: i64,
}

/// A place in a waiting room, as PostgreSQL holds it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PlaceRow {
    pub id: String,
    pub room: String,
    pub subject: String,
    pub seq: i64,
    /// Queue order (`None`: a pre-queue place never drawn).
    #[serde(default)]
    pub ord: Option<i64>,
    pub state: String,
    pub joined_ms: i64,
    #[serde(default)]
    pub admitted_ms: Option<i64>,
    pub ended_ms: Option<i64>,
}

pub async fn connect(url: &str) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(std::time::Duration::from_secs(5))
        .connect(url)
        .await
}

pub async fn open_rows(pg: &PgPool, application_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1::uuid
            AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled', 'needs_review')",
    )
    .bind(application_id)
    .fetch_one(pg)
    .await
}

/// Reserved units not yet confirmed, released or expired.
pub async fn open_reservations(pg: &PgPool, namespace_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT count(*) FROM allocations WHERE namespace_id = $1::uuid AND state = 'reserved'",
    )
    .bind(namespace_id)
    .fetch_one(pg)
    .await
}

fn ms(t: Option<chrono::DateTime<chrono::Utc>>) -> Option<i64> {
    t.map(|t| t.timestamp_millis())
}

pub async fn commands(pg: &PgPool, application_id: &str) -> Result<Vec<CommandRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT id::text AS id, command, subject, request_key, input, resource_key, queue_seq,
                status, accepted_at, started_at, finished_at, attempts, result, error_code
           FROM commands WHERE application_id = $1::uuid ORDER BY queue_seq",
    )
    .bind(application_id)
    .fetch_all(pg)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(CommandRow {
                id: row.try_get("id")?,
                command: row.try_get("command")?,
                subject: row.try_get("subject")?,
                request_key: row.try_get("request_key")?,
                input: row.try_get("input")?,
                resource_key: row.try_get("resource_key")?,
                queue_seq: row.try_get("queue_seq")?,
                status: row.try_get("status")?,
                accepted_ms: ms(row.try_get("accepted_at")?).unwrap_or(0),
                started_ms: ms(row.try_get("started_at")?),
                finished_ms: ms(row.try_get("finished_at")?),
                attempts: row.try_get("attempts")?,
                result: row.try_get("result")?,
                error_code: row.try_get("error_code")?,
            })
        })
        .collect()
}

pub async fn allocations(
    pg: &PgPool,
    namespace_id: &str,
) -> Result<Vec<AllocationRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT id::text AS id, pool, subject, command_id::text AS command_id, state, expires_at,
                updated_at
           FROM allocations WHERE namespace_id = $1::uuid",
    )
    .bind(namespace_id)
    .fetch_all(pg)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(AllocationRow {
                id: row.try_get("id")?,
                pool: row.try_get("pool")?,
                subject: row.try_get("subject")?,
                command_id: row.try_get("command_id")?,
                state: row.try_get("state")?,
                expires_ms: ms(row.try_get("expires_at")?),
                updated_ms: ms(row.try_get("updated_at")?).unwrap_or(0),
            })
        })
        .collect()
}

pub async fn places(pg: &PgPool, namespace_id: &str) -> Result<Vec<PlaceRow>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT id::text AS id, room, subject, seq, ord, state, joined_at, admitted_at, ended_at
           FROM room_places WHERE namespace_id = $1::uuid ORDER BY room, seq",
    )
    .bind(namespace_id)
    .fetch_all(pg)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(PlaceRow {
                id: row.try_get("id")?,
                room: row.try_get("room")?,
                subject: row.try_get("subject")?,
                seq: row.try_get("seq")?,
                ord: row.try_get("ord")?,
                state: row.try_get("state")?,
                joined_ms: ms(row.try_get("joined_at")?).unwrap_or(0),
                admitted_ms: ms(row.try_get("admitted_at")?),
                ended_ms: ms(row.try_get("ended_at")?),
            })
        })
        .collect()
}
