//! `GET /v1/tickets/{ticket}`: the ticket is the capability (HMAC-verified with no I/O); the
//! status comes from one Redis script call. PostgreSQL is asked only when Redis cannot answer,
//! and then only within the per-process fallback budget.

use hyper::StatusCode;
use serde_json::Value;
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::ticket::{ProjectedStatus, read_status};
use sluice_store::outbox::{queries, rfc3339};

use super::Handled;
use super::answers::{QueuePlace, TicketAnswer, shown_error, shown_result, to_data};
use super::enqueue::millis_rfc3339;
use crate::http::error::ApiError;
use crate::identity::auth::now_unix;
use crate::identity::ticket::{QueueClaim, Ticket, TicketClaims};
use crate::polls::poll_policy;
use crate::polls::waiting_view::MemoryAnswer;
use crate::state::Gateway;

/// Checks the ticket's signature and expiry (no I/O): a command's or a waiting-room place's.
pub fn verify(gateway: &Gateway, ticket: &str) -> Result<Ticket, ApiError> {
    gateway
        .tickets
        .verify_any(ticket, now_unix())
        .map_err(|e| ApiError::unauthenticated(format!("the ticket is not valid: {e}")))
}

/// What a cache may keep of a poll's answer: a final status never changes again, so the browser
/// may keep it (privately: the answer is about one person's command) for an hour; anything
/// else is stale at once and is never stored.
pub fn cache_control(data: &Value) -> &'static str {
    let final_status = data["status"]
        .as_str()
        .and_then(CommandStatus::parse)
        .is_some_and(CommandStatus::is_final);
    if final_status {
        "private, max-age=3600, immutable"
    } else {
        "no-store"
    }
}

pub async fn poll(gateway: &Gateway, claims: &TicketClaims) -> Handled {
    if let Some(queue) = claims.queue
        && let Some(answer) =
            gateway
                .waiting
                .answer(claims.application_id, claims.command_id, queue)
    {
        sluice_metrics::ticket_poll("memory");
        return from_memory(claims, queue, &answer);
    }
    let keys = AppKeys::new(claims.application_id);
    let suffix = claims
        .queue
        .and_then(|queue| gateway.waiting.suffix_of(claims.application_id, queue.tag));
    match read_status(&gateway.redis, &keys, claims.command_id, suffix.as_deref()).await {
        Ok(projected) if projected.ready && projected.status.is_some() => {
            if let (Some(queue), Some(suffix)) = (claims.queue, projected.queue_suffix.as_deref()) {
                // Redis named the queue this ticket's tag stands for: later polls of its
                // waiters can be answered from memory.
                gateway
                    .waiting
                    .learn(claims.application_id, queue.tag, suffix);
            }
            match projected.generation {
                Some(generation) => {
                    sluice_metrics::ticket_poll("redis");
                    from_projection(claims, &projected, generation)
                }
                None => from_postgres(gateway, claims).await,
            }
        }
        Ok(_) => from_postgres(gateway, claims).await,
        Err(error) => {
            tracing::debug!(%error, "ticket poll falls back to PostgreSQL");
            from_postgres(gateway, claims).await
        }
    }
}

/// The answer from the gateway's memory of the command's queue: `accepted` (it cannot have
/// started), where it stood at the snapshot's Redis time, and its acceptance time as
/// `updated_at` (what Redis holds for a command that never started), in the same shape as
/// [`from_projection`]'s.
fn from_memory(claims: &TicketClaims, queue: QueueClaim, answer: &MemoryAnswer) -> Handled {
    let status = CommandStatus::Accepted;
    let position = Some(answer.position);
    let data = TicketAnswer {
        command_id: claims.command_id,
        status,
        queue: Some(QueuePlace {
            position: answer.position,
            observed_at: millis_rfc3339(answer.observed_at_ms),
        }),
        eta_seconds: poll_policy::eta_seconds(position, answer.starts_per_second),
        poll_after_ms: poll_policy::advice(
            status,
            position,
            answer.starts_per_second,
            rand::random::<f64>(),
        ),
        generation: answer.generation.to_string(),
        updated_at: millis_rfc3339(queue.accepted_at_ms),
        result: None,
        error: None,
    };
    Ok((StatusCode::OK, to_data(&data)?))
}

/// The answer from Redis: `generation` is the projection's, the one the status was read at.
fn from_projection(claims: &TicketClaims, projected: &ProjectedStatus, generation: i64) -> Handled {
    let status = projected.status.unwrap_or(CommandStatus::Accepted);
    let position = projected.position;
    let result: Option<Value> = projected
        .result
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok());
    let answer = TicketAnswer {
        command_id: claims.command_id,
        status,
        queue: position.map(|position| QueuePlace {
            position,
            observed_at: millis_rfc3339(projected.observed_at_ms),
        }),
        eta_seconds: poll_policy::eta_seconds(position, projected.starts_per_second),
        poll_after_ms: poll_policy::advice(
            status,
            position,
            projected.starts_per_second,
            rand::random::<f64>(),
        ),
        generation: generation.to_string(),
        updated_at: projected.updated_at.clone(),
        result: shown_result(status, result.as_ref()),
        error: shown_error(
            status,
            projected.error_code.as_deref(),
            projected.error_message.as_deref(),
        ),
    };
    Ok((StatusCode::OK, to_data(&answer)?))
}

async fn from_postgres(gateway: &Gateway, claims: &TicketClaims) -> Handled {
    sluice_metrics::ticket_poll("postgres");
    let _permit = gateway.fallback_permit()?;
    let record = queries::by_id(&gateway.pg, claims.namespace_id, claims.command_id)
        .await?
        .ok_or_else(|| ApiError::not_found("the ticket's command no longer exists"))?;
    let status = record.row.status;
    // PostgreSQL's generation of the projection, as this gateway last read the namespace.
    let generation = gateway.namespace(claims.namespace_id).await?.generation;
    let answer = TicketAnswer {
        command_id: record.row.id,
        status,
        queue: None,
        eta_seconds: None,
        poll_after_ms: poll_policy::advice(status, None, None, rand::random::<f64>()),
        generation: generation.to_string(),
        updated_at: Some(rfc3339(record.row.updated_at)),
        result: shown_result(status, record.result.as_ref()),
        error: shown_error(
            status,
            record.error_code.as_deref(),
            record.error_message.as_deref(),
        ),
    };
    Ok((StatusCode::OK, to_data(&answer)?))
}
