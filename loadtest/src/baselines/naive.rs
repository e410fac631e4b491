//! The admission users write today, the baseline of pair 2: one transaction per request that
//! takes a unit from a counter row and inserts the claim. It is what the group commit claims to
//! beat, so it gets what a careful user would give it: a uniqueness constraint for idempotency
//! and a pool as large as the gateway's.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use super::server::json_response;
use crate::bench_stack::BoxError;

/// The naive admission's tables: one counter row, one claims table with the uniqueness an
/// idempotent API needs (the `commands` table has its own).
const SCHEMA: [&str; 3] = [
    "CREATE TABLE naive_stock (id int PRIMARY KEY, used bigint NOT NULL, cap bigint NOT NULL)",
    "INSERT INTO naive_stock (id, used, cap) VALUES (1, 0, 1000000000000)",
    "CREATE TABLE naive_claims (id uuid PRIMARY KEY, subject text NOT NULL,
                                request_key text NOT NULL, offer uuid NOT NULL,
                                created_at timestamptz NOT NULL, UNIQUE (subject, request_key))",
];

/// Creates the naive tables in the scratch database.
pub(super) async fn create_schema(pool: &PgPool) -> Result<(), BoxError> {
    for statement in SCHEMA {
        sqlx::query(statement).execute(pool).await?;
    }
    Ok(())
}

/// The enqueue body as the naive handler reads it.
struct NaiveClaim {
    request_key: String,
    subject: String,
    offer: Uuid,
}

impl NaiveClaim {
    fn parse(body: &[u8]) -> Result<Self, String> {
        let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let text = |field: &str| -> Result<String, String> {
            value[field]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{field} must be a string"))
        };
        let offer = value["input"]["offer"]
            .as_str()
            .and_then(|offer| Uuid::parse_str(offer).ok())
            .ok_or("input.offer must be a uuid")?;
        Ok(Self {
            request_key: text("request_key")?,
            subject: text("subject")?,
            offer,
        })
    }
}

/// The naive `POST`: `202` with the claim, `400` for a body it cannot read, `429` once the
/// counter row is used up, `500` when PostgreSQL failed.
pub(super) async fn answer(pool: &PgPool, request: Request<Incoming>) -> Response<Full<Bytes>> {
    enqueue(pool, request).await.unwrap_or_else(|error| {
        json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({ "error": { "code": "INTERNAL", "message": error.to_string() } }),
        )
    })
}

/// One transaction that takes a unit from the counter row (every request queues on that row's
/// lock until the previous one committed) and inserts the claim.
async fn enqueue(
    pool: &PgPool,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, BoxError> {
    let body = request.into_body().collect().await?.to_bytes();
    let claim = match NaiveClaim::parse(&body) {
        Ok(claim) => claim,
        Err(message) => {
            return Ok(json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": { "code": "INVALID_ARGUMENT", "message": message } }),
            ));
        }
    };
    let mut tx = pool.begin().await?;
    let used: Option<i64> = sqlx::query_scalar(
        "UPDATE naive_stock SET used = used + 1 WHERE id = 1 AND used < cap RETURNING used",
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(used) = used else {
        tx.rollback().await?;
        return Ok(json_response(
            StatusCode::TOO_MANY_REQUESTS,
            &json!({ "error": { "code": "SOLD_OUT", "message": "no stock left" } }),
        ));
    };
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO naive_claims (id, subject, request_key, offer, created_at)
         VALUES ($1, $2, $3, $4, now())",
    )
    .bind(id)
    .bind(&claim.subject)
    .bind(&claim.request_key)
    .bind(claim.offer)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &json!({ "data": { "claim_id": id, "used": used } }),
    ))
}
