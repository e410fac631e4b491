//! `POST /v1/commands/{command}:enqueue`: the body checked against the declaration, then the
//! intake transitions (`reserve` → `commit` → `accept`, [`lifecycle::enqueue`]), then the
//! answer: `202` with a signed ticket only once the command is durable.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{Map, Value};
use sluice_durable::declaration::CommandDecl;
use sluice_durable::declaration::render_limit_keys;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle;
use sluice_durable::lifecycle::enqueue::Limit;
use sluice_durable::lifecycle::enqueue::{Enqueued, Intent, Refusal};
use sluice_model::CommandStatus;
use sluice_redis::ticket::read_status;
use sluice_redis::{AppKeys, request_key_field};
use sluice_store::outbox::{CommandRow, rfc3339};
use sluice_store::secrets::sha256;
use sluice_store::tenancy::NamespaceConfig;

use super::Handled;
use super::answers::{QueuePlace, Receipt, to_data};
use super::record::sign_ticket;
use crate::http::error::{ApiError, ErrorCode};
use crate::http::strict_json::{
    ObjectReader, parse_object, validate_request_key, validate_subject,
};
use crate::identity::auth::{Caller, Principal};
use crate::identity::ticket::{QueueClaim, queue_tag};
use crate::polls::poll_policy;
use crate::state::Gateway;

/// A parsed, validated enqueue body.
struct EnqueueRequest {
    request_key: String,
    subject: String,
    input: Map<String, Value>,
    /// `input` in compact JSON with sorted keys (serde_json's map is ordered), measured
    /// against the size limit and hashed as the content: encoded once per request.
    encoded_input: Vec<u8>,
}

impl EnqueueRequest {
    fn parse(body: &[u8], caller: &Caller, max_input_bytes: usize) -> Result<Self, ApiError> {
        let mut reader = ObjectReader::new(parse_object(body)?, "");
        let request_key = reader.required_string("request_key")?;
        let input = reader.required_object("input")?;
        let named_subject = reader.optional_string("subject")?;
        reader.finish()?;
        validate_request_key(&request_key, "request_key")?;
        let encoded = serde_json::to_vec(&input)
            .map_err(|_| ApiError::invalid("input", "is not encodable"))?;
        if encoded.len() > max_input_bytes {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "is {} bytes encoded; at most {max_input_bytes} are allowed",
                    encoded.len()
                ),
            ));
        }
        let subject = match (&caller.principal, named_subject) {
            (Principal::Credential(_), Some(subject)) => subject,
            (Principal::Credential(_), None) => {
                return Err(ApiError::invalid(
                    "subject",
                    "is required when enqueueing with a credential",
                ));
            }
            (Principal::Subject { subject }, None) => subject.clone(),
            (Principal::Subject { subject }, Some(named)) if named == *subject => named,
            (Principal::Subject { .. }, Some(_)) => {
                return Err(ApiError::permission_denied(
                    "a subject token cannot enqueue for another subject",
                ));
            }
        };
        validate_subject(&subject, "subject")?;
        Ok(Self {
            request_key,
            subject,
            input,
            encoded_input: encoded,
        })
    }
}

/// The content a request key is bound to: the command and its input in canonical JSON (object
/// keys sorted), so the same intent always hashes the same.
fn content_digest(command: &str, encoded_input: &[u8]) -> [u8; 32] {
    let mut bytes = Vec::with_capacity(command.len() + 1 + encoded_input.len());
    bytes.extend_from_slice(command.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(encoded_input);
    sha256(&bytes)
}

/// Everything one enqueue's answer needs.
struct Attempt<'a> {
    gateway: &'a Gateway,
    namespace: &'a NamespaceConfig,
    decl: &'a CommandDecl,
    keys: AppKeys,
    resource_key: String,
}

/// One enqueue, counted for `/metrics` here, where its final answer is known: exactly one
/// decision per request that reached the handler, whichever path answered it.
pub async fn enqueue(
    gateway: &Gateway,
    command: &str,
    caller: Caller,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> Handled {
    let started = Instant::now();
    let handled = decide(gateway, command, caller, headers, body).await;
    match &handled {
        Ok((status, _)) => {
            sluice_metrics::intake_decision(if *status == StatusCode::ACCEPTED {
                "accepted"
            } else {
                "replayed"
            });
            sluice_metrics::acceptance_latency(started.elapsed());
        }
        Err(error) => sluice_metrics::intake_decision(error.code.as_str()),
    }
    handled
}

async fn decide(
    gateway: &Gateway,
    command: &str,
    caller: Caller,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> Handled {
    if matches!(caller.principal, Principal::Credential(_)) {
        caller.require_scope("commands:enqueue")?;
    }
    let request = EnqueueRequest::parse(&body, &caller, gateway.config.max_input_bytes)?;
    // An enqueue's idempotency is its `request_key`: part of the command, kept with it and
    // looked up by it. A client that also sends the configure calls' `Idempotency-Key` header
    // may believe the header decides; one that differs is refused rather than ignored.
    if let Some(header) = super::optional_idempotency_key(headers)?
        && header != request.request_key
    {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            "an enqueue is idempotent by its body's request_key; this header, when sent, must \
             equal it",
        ));
    }
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let decl = namespace.declaration.command(command).ok_or_else(|| {
        ApiError::not_found(format!(
            "no command {command:?} is declared in this namespace"
        ))
    })?;
    decl.validate_input(&request.input)?;
    let attempt = Attempt {
        gateway,
        namespace: &namespace,
        decl,
        keys: AppKeys::new(namespace.application_id),
        resource_key: decl.resource_key_for(&request.input),
    };
    let limit_keys = render_limit_keys(&decl.limits, &request.input, &request.subject);
    let field = request_key_field(&request.subject, &request.request_key);
    let trace_parent = crate::http::trace_context::for_command(headers);
    let intent = Intent {
        keys: &attempt.keys,
        application_id: namespace.application_id,
        namespace_id: namespace.namespace_id,
        min_generation: namespace.generation,
        decl,
        max_unfinished: namespace.max_unfinished,
        max_waiting: namespace.declaration.namespace.max_waiting,
        subject: &request.subject,
        request_key: &request.request_key,
        input: &request.input,
        digest: content_digest(command, &request.encoded_input),
        resource_key: &attempt.resource_key,
        limit_keys: &limit_keys,
        field: &field,
        reservation_ttl: Duration::from_millis(gateway.config.reservation_ttl_ms),
        replay_wait: Duration::from_millis(gateway.config.replay_wait_ms),
        trace_parent: trace_parent.as_deref(),
    };
    let enqueued = lifecycle::enqueue::enqueue(
        gateway.stores(),
        &gateway.intake,
        &gateway.committer,
        gateway,
        &intent,
    )
    .await?;
    attempt.answer(enqueued, &intent.digest).await
}

impl Attempt<'_> {
    /// The HTTP answer of an enqueue's end.
    async fn answer(&self, enqueued: Enqueued, digest: &[u8; 32]) -> Handled {
        match enqueued {
            Enqueued::Accepted {
                command_id,
                accepted_at,
                deadline_at,
                queue,
                queue_seq,
                ..
            } => {
                let ticket = self.fresh_ticket(
                    command_id,
                    deadline_at.timestamp(),
                    queue_seq,
                    accepted_at.timestamp_millis(),
                );
                Ok((
                    StatusCode::ACCEPTED,
                    receipt_json(
                        self,
                        command_id,
                        ticket,
                        CommandStatus::Accepted,
                        &rfc3339(accepted_at),
                        &rfc3339(deadline_at),
                        queue,
                        false,
                    )?,
                ))
            }
            Enqueued::Replayed { command_id } => self.answer_replay(command_id).await,
            Enqueued::Existing { row, .. } => {
                if row.content_sha256 == digest {
                    Ok((StatusCode::OK, self.receipt_from_row(&row)?))
                } else {
                    Err(idempotency_conflict())
                }
            }
            Enqueued::Refused(refusal) => Err(match refusal {
                Refusal::NotReady => not_ready(),
                Refusal::StillCommitting => ApiError::unavailable(
                    "the first request with this key is still being committed; retry with the same key",
                ),
                Refusal::Conflict => idempotency_conflict(),
                Refusal::Limited(Limit::Paused { whole_namespace }) => paused(whole_namespace),
                Refusal::Limited(Limit::ApplicationFull) => ApiError::new(
                    ErrorCode::ApplicationFull,
                    "the application's backlog is full; retry later with the same request key",
                ),
                Refusal::Limited(Limit::QueueFull) => ApiError::new(
                    ErrorCode::QueueFull,
                    "the queue is full; retry later with the same request key",
                ),
                Refusal::Limited(Limit::RateLimited { retry_after_ms }) => ApiError::new(
                    ErrorCode::RateLimited,
                    "intake rate limit reached; retry later with the same request key",
                )
                .with_retry_after_ms(retry_after_ms.max(1)),
            }),
        }
    }

    /// A replay of a committed key: answered from the projection, or from PostgreSQL when the
    /// projection no longer holds the command.
    async fn answer_replay(&self, command_id: CommandId) -> Handled {
        let suffix = AppKeys::queue_suffix(
            self.namespace.namespace_id,
            &self.decl.code,
            &self.resource_key,
        );
        let projected =
            read_status(&self.gateway.redis, &self.keys, command_id, Some(&suffix)).await?;
        if let (Some(status), Some(accepted_at), Some(deadline_at)) = (
            projected.status,
            projected.accepted_at.as_deref(),
            projected.deadline_at.as_deref(),
        ) {
            let deadline_unix = chrono::DateTime::parse_from_rfc3339(deadline_at)
                .map(|d| d.timestamp())
                .unwrap_or_default();
            let ticket = self.ticket(command_id, deadline_unix);
            let queue = projected.position.map(|p| (p, projected.observed_at_ms));
            return Ok((
                StatusCode::OK,
                receipt_json(
                    self,
                    command_id,
                    ticket,
                    status,
                    accepted_at,
                    deadline_at,
                    queue,
                    true,
                )?,
            ));
        }
        let _permit = self.gateway.fallback_permit()?;
        let record = sluice_store::outbox::queries::by_id(
            &self.gateway.pg,
            self.namespace.namespace_id,
            command_id,
        )
        .await?
        .ok_or_else(|| {
            ApiError::unavailable(
                "the command of this key is not visible yet; retry with the same key",
            )
        })?;
        Ok((StatusCode::OK, self.receipt_from_row(&record.row)?))
    }

    fn receipt_from_row(&self, existing: &CommandRow) -> Result<Value, ApiError> {
        let ticket = self.ticket(existing.id, existing.deadline_at.timestamp());
        receipt_json(
            self,
            existing.id,
            ticket,
            existing.status,
            &rfc3339(existing.accepted_at),
            &rfc3339(existing.deadline_at),
            None,
            true,
        )
    }

    fn ticket(&self, command_id: CommandId, deadline_unix: i64) -> String {
        sign_ticket(
            self.gateway,
            self.namespace.application_id,
            self.namespace.namespace_id,
            command_id,
            deadline_unix,
            None,
        )
    }

    /// The ticket of a command accepted now: it states its queue sequence and queue, so its
    /// polls can be answered from memory while it cannot have started
    /// ([`crate::polls::waiting_view`]); this gateway learns the queue its tag stands for.
    fn fresh_ticket(
        &self,
        command_id: CommandId,
        deadline_unix: i64,
        queue_seq: i64,
        accepted_at_ms: i64,
    ) -> String {
        if !self.gateway.waiting.enabled() {
            return self.ticket(command_id, deadline_unix);
        }
        let suffix = AppKeys::queue_suffix(
            self.namespace.namespace_id,
            &self.decl.code,
            &self.resource_key,
        );
        let tag = queue_tag(&suffix);
        let application_id = self.namespace.application_id;
        self.gateway.waiting.learn(application_id, tag, &suffix);
        sign_ticket(
            self.gateway,
            application_id,
            self.namespace.namespace_id,
            command_id,
            deadline_unix,
            u64::try_from(queue_seq).ok().map(|seq| QueueClaim {
                seq,
                tag,
                accepted_at_ms,
            }),
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn receipt_json(
    attempt: &Attempt<'_>,
    command_id: CommandId,
    ticket: String,
    status: CommandStatus,
    accepted_at: &str,
    deadline_at: &str,
    queue: Option<(u64, i64)>,
    deduplicated: bool,
) -> Result<Value, ApiError> {
    let position = queue.map(|(p, _)| p);
    to_data(&Receipt {
        command_id,
        ticket,
        command: &attempt.decl.code,
        resource_key: &attempt.resource_key,
        status,
        accepted_at,
        deadline_at,
        queue: queue.map(|(position, observed_ms)| QueuePlace {
            position,
            observed_at: millis_rfc3339(observed_ms),
        }),
        // No drain has been measured for a fresh acceptance; the declared start rate is the
        // fastest its queue can drain, so the first hint is never later than the turn can come
        // (a 10,000-subject drop measured 15 s hints for turns that came within 8 s).
        poll_after_ms: poll_policy::advice(
            status,
            position,
            Some(f64::from(attempt.decl.admission.per_second)),
            rand::random::<f64>(),
        ),
        deduplicated,
    })
}

/// A Redis time in Unix milliseconds as the API writes times (none if out of range).
pub fn millis_rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms).map(rfc3339)
}

fn not_ready() -> ApiError {
    ApiError::unavailable("the admission projection is being rebuilt; retry with the same key")
}

fn idempotency_conflict() -> ApiError {
    ApiError::new(
        ErrorCode::IdempotencyConflict,
        "this request key was already used with different content",
    )
}

fn paused(whole_namespace: bool) -> ApiError {
    let what = if whole_namespace {
        "the namespace"
    } else {
        "this command"
    };
    ApiError::new(
        ErrorCode::IntakePaused,
        format!("an operator paused intake for {what}; retry later"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows already committed hold the digest of `Value::to_string()`; hashing the bytes
    /// encoded for the size check must give the same digest, or a replay across an upgrade
    /// would be refused as another content.
    #[test]
    fn the_digest_of_the_encoded_input_is_the_digest_rows_hold() {
        let inputs = [
            serde_json::json!({}),
            serde_json::json!({"offer": "0b0c8f5e-3c1d-4c4e-9d7e-2f7a1b6c9d10", "qty": 2}),
            serde_json::json!({"z": [1, 2.5, null, true], "a": {"y": "é\"\\\n\u{1}", "b": -0}}),
        ];
        for input in inputs {
            let Value::Object(map) = input else {
                unreachable!("objects only")
            };
            let mut expected = b"claim\0".to_vec();
            expected.extend_from_slice(Value::Object(map.clone()).to_string().as_bytes());
            let encoded = serde_json::to_vec(&map).expect("encodable");
            assert_eq!(
                content_digest("claim", &encoded),
                sha256(&expected),
                "{map:?}"
            );
        }
    }
}
