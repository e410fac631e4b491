//! `POST /v1/commands/{command}:enqueue`: decide in one Redis script call, commit durably in a
//! group commit, project, and only then answer `202` with a signed ticket.
//!
//! Every path that reserved something settles it: the commit turns the reservation into the
//! accepted command (`accept.lua`); a refusal or failure of PostgreSQL gives it back
//! (`release.lua`); a gateway that dies in between leaves a reservation that expires by itself.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use serde_json::{Map, Value, json};
use sluice_durable::declaration::CommandDecl;
use sluice_durable::declaration::render_limit_keys;
use sluice_durable::metrics;
use sluice_durable::outbox::{ExistingCommand, InsertOutcome, NewCommand, rfc3339};
use sluice_durable::projection::intake::{IntakeRequest, IntakeVerdict, intake};
use sluice_durable::projection::settle::{Accepted, Release, accept, release};
use sluice_durable::projection::ticket::read_status;
use sluice_durable::projection::{AppKeys, request_key_field};
use sluice_durable::secrets::sha256;
use sluice_durable::tenancy::NamespaceConfig;
use uuid::Uuid;

use super::Handled;
use super::record::sign_ticket;
use crate::auth::{Caller, Principal};
use crate::error::{ApiError, ErrorCode};
use crate::faults::{self, Point};
use crate::poll_policy;
use crate::state::Gateway;
use crate::strict_json::{ObjectReader, parse_object, validate_request_key, validate_subject};

/// A parsed, validated enqueue body.
struct EnqueueRequest {
    request_key: String,
    subject: String,
    input: Map<String, Value>,
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
            (Principal::Credential { .. }, Some(subject)) => subject,
            (Principal::Credential { .. }, None) => {
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
        })
    }
}

/// The content a request key is bound to: the command and its input in canonical JSON (object
/// keys sorted), so the same intent always hashes the same.
fn content_digest(command: &str, input: &Map<String, Value>) -> [u8; 32] {
    let mut bytes = Vec::with_capacity(64);
    bytes.extend_from_slice(command.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(Value::Object(input.clone()).to_string().as_bytes());
    sha256(&bytes)
}

/// Everything one enqueue carries through its steps.
struct Attempt<'a> {
    gateway: &'a Gateway,
    namespace: &'a NamespaceConfig,
    decl: &'a CommandDecl,
    keys: AppKeys,
    request: EnqueueRequest,
    resource_key: String,
    /// Rendered limit keys, fixed at acceptance like the deadline.
    limit_keys: Vec<[String; 2]>,
    field: String,
    digest_hex: String,
    digest: [u8; 32],
}

/// One enqueue, counted for `/metrics` here, where its final answer is known: exactly one
/// decision per request that reached the handler, whichever path answered it.
pub async fn enqueue(gateway: &Gateway, command: &str, caller: Caller, body: Bytes) -> Handled {
    let started = Instant::now();
    let handled = decide(gateway, command, caller, body).await;
    match &handled {
        Ok((status, _)) => {
            metrics::intake_decision(if *status == StatusCode::ACCEPTED {
                "accepted"
            } else {
                "replayed"
            });
            metrics::acceptance_latency(started.elapsed());
        }
        Err(error) => metrics::intake_decision(error.code.as_str()),
    }
    handled
}

async fn decide(gateway: &Gateway, command: &str, caller: Caller, body: Bytes) -> Handled {
    if matches!(caller.principal, Principal::Credential { .. }) {
        caller.require_scope("commands:enqueue")?;
    }
    let request = EnqueueRequest::parse(&body, &caller, gateway.config.max_input_bytes)?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let decl = namespace.declaration.command(command).ok_or_else(|| {
        ApiError::not_found(format!(
            "no command {command:?} is declared in this namespace"
        ))
    })?;
    decl.validate_input(&request.input)?;
    let digest = content_digest(command, &request.input);
    let attempt = Attempt {
        gateway,
        namespace: &namespace,
        decl,
        keys: AppKeys::new(namespace.application_id),
        resource_key: decl.resource_key_for(&request.input),
        limit_keys: render_limit_keys(&decl.limits, &request.input),
        field: request_key_field(&request.subject, &request.request_key),
        digest_hex: hex::encode(digest),
        digest,
        request,
    };
    attempt.run().await
}

impl Attempt<'_> {
    /// Asks `intake.lua` until it decides. Two answers are worth asking again, within bounds:
    /// the projection is being rebuilt, and the same key is still being committed by a
    /// concurrent call (so all concurrent calls of one key answer with one command id).
    async fn run(&self) -> Handled {
        let started = Instant::now();
        let replay_wait = Duration::from_millis(self.gateway.config.replay_wait_ms);
        let mut rebuilt = false;
        let mut pause = Duration::from_millis(2);
        loop {
            let command_id = Uuid::now_v7();
            match self.intake(command_id).await? {
                IntakeVerdict::NotReady if !rebuilt => {
                    rebuilt = true;
                    if !self
                        .gateway
                        .ensure_projection(self.namespace.application_id)
                        .await
                    {
                        return Err(not_ready());
                    }
                }
                IntakeVerdict::NotReady => return Err(not_ready()),
                IntakeVerdict::Replay {
                    command_id,
                    committed: true,
                } => {
                    return self.answer_replay(command_id).await;
                }
                IntakeVerdict::Replay {
                    committed: false, ..
                } => {
                    if started.elapsed() >= replay_wait {
                        return Err(ApiError::unavailable(
                            "the first request with this key is still being committed; retry with the same key",
                        ));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                IntakeVerdict::Conflict { .. } => return Err(idempotency_conflict()),
                IntakeVerdict::Paused { whole_namespace } => return Err(paused(whole_namespace)),
                IntakeVerdict::ApplicationFull => {
                    return Err(ApiError::new(
                        ErrorCode::ApplicationFull,
                        "the application's backlog is full; retry later with the same request key",
                    ));
                }
                IntakeVerdict::QueueFull => {
                    return Err(ApiError::new(
                        ErrorCode::QueueFull,
                        "the queue is full; retry later with the same request key",
                    ));
                }
                IntakeVerdict::RateLimited { retry_after_ms } => {
                    return Err(ApiError::new(
                        ErrorCode::RateLimited,
                        "intake rate limit reached; retry later with the same request key",
                    )
                    .with_retry_after_ms(retry_after_ms.max(1)));
                }
                IntakeVerdict::Reserved {
                    queue_seq,
                    generation,
                    ..
                } => {
                    if faults::tripped(Point::AfterReservation, self.namespace.namespace_id) {
                        return Err(faults::crashed());
                    }
                    return self.commit(command_id, queue_seq, generation).await;
                }
            }
        }
    }

    async fn intake(&self, command_id: Uuid) -> Result<IntakeVerdict, ApiError> {
        let request = IntakeRequest {
            keys: &self.keys,
            min_generation: self.namespace.generation,
            namespace_id: self.namespace.namespace_id,
            command: &self.decl.code,
            request_key_field: &self.field,
            content_sha256_hex: &self.digest_hex,
            command_id,
            max_unfinished: self.namespace.max_unfinished,
            max_waiting: self.namespace.declaration.namespace.max_waiting,
            max_queue: self.decl.admission.max_queue,
            intake: &self.decl.intake,
            reservation_ttl_ms: self.gateway.config.reservation_ttl_ms,
        };
        Ok(intake(&self.gateway.redis, &self.gateway.scripts, &request).await?)
    }

    /// The reservation is ours: commit it, then settle it whatever PostgreSQL said.
    async fn commit(&self, command_id: Uuid, queue_seq: i64, generation: i64) -> Handled {
        let new = NewCommand {
            id: command_id,
            application_id: self.namespace.application_id,
            namespace_id: self.namespace.namespace_id,
            command: self.decl.code.clone(),
            subject: self.request.subject.clone(),
            request_key: self.request.request_key.clone(),
            content_sha256: self.digest,
            input: Value::Object(self.request.input.clone()),
            resource_key: self.resource_key.clone(),
            queue_seq,
            deadline_seconds: i32::try_from(self.decl.deadline_seconds).unwrap_or(i32::MAX),
            max_wait_seconds: i32::try_from(self.decl.admission.max_wait_seconds)
                .unwrap_or(i32::MAX),
            limit_keys: serde_json::json!(self.limit_keys),
        };
        match self.gateway.committer.submit(new).await {
            Ok(InsertOutcome::Inserted {
                accepted_at,
                deadline_at,
            }) => {
                if faults::tripped(Point::AfterCommit, self.namespace.namespace_id) {
                    return Err(faults::crashed());
                }
                self.project(
                    command_id,
                    queue_seq,
                    generation,
                    rfc3339(accepted_at),
                    rfc3339(deadline_at),
                    deadline_at.timestamp(),
                )
                .await
            }
            Ok(InsertOutcome::Existing(existing)) => {
                let same = existing.content_sha256 == self.digest;
                self.give_back(command_id, same.then_some(&existing)).await;
                if same {
                    Ok((StatusCode::OK, self.receipt_from_row(&existing, generation)))
                } else {
                    Err(idempotency_conflict())
                }
            }
            Ok(InsertOutcome::Paused) => {
                self.give_back(command_id, None).await;
                Err(paused(true))
            }
            Err(error) => {
                self.give_back(command_id, None).await;
                Err(error.into())
            }
        }
    }

    /// Committed: project it. If Redis fails now the command is still accepted (PostgreSQL
    /// holds it); the answer says so with `queue: null` and the reconciler repairs the
    /// projection.
    async fn project(
        &self,
        command_id: Uuid,
        queue_seq: i64,
        generation: i64,
        accepted_at: String,
        deadline_at: String,
        deadline_unix: i64,
    ) -> Handled {
        let accepted = Accepted {
            command_id,
            namespace_id: self.namespace.namespace_id,
            command: self.decl.code.clone(),
            resource_key: self.resource_key.clone(),
            request_key_field: self.field.clone(),
            content_sha256_hex: self.digest_hex.clone(),
            queue_seq,
            accepted_at: accepted_at.clone(),
            deadline_at: deadline_at.clone(),
            limit_keys: if self.limit_keys.is_empty() {
                String::new()
            } else {
                serde_json::json!(self.limit_keys).to_string()
            },
        };
        let queue = match accept(
            &self.gateway.redis,
            &self.gateway.scripts,
            &self.keys,
            &[accepted],
        )
        .await
        {
            Ok(positions) => positions
                .positions
                .first()
                .copied()
                .flatten()
                .map(|p| (p, positions.observed_at_ms)),
            Err(error) => {
                metrics::storage_error(&error);
                tracing::warn!(%command_id, %error, "committed command not projected; the reconciler will repair it");
                None
            }
        };
        let ticket = self.ticket(command_id, generation, deadline_unix);
        Ok((
            StatusCode::ACCEPTED,
            receipt_json(
                self,
                command_id,
                ticket,
                "accepted",
                &accepted_at,
                &deadline_at,
                queue,
                false,
            ),
        ))
    }

    /// Gives a reservation back. If Redis is unreachable now the reservation simply expires.
    async fn give_back(&self, command_id: Uuid, existing: Option<&ExistingCommand>) {
        let give = Release {
            command_id,
            namespace_id: self.namespace.namespace_id,
            command: &self.decl.code,
            request_key_field: &self.field,
            existing: existing.map(|e| (e.id, hex::encode(&e.content_sha256))),
        };
        if let Err(error) = release(
            &self.gateway.redis,
            &self.gateway.scripts,
            &self.keys,
            &give,
        )
        .await
        {
            metrics::storage_error(&error);
            tracing::warn!(%command_id, %error, "reservation not released; it will expire");
        }
    }

    /// A replay of a committed key: answered from the projection, or from PostgreSQL when the
    /// projection no longer holds the command.
    async fn answer_replay(&self, command_id: Uuid) -> Handled {
        let projected = read_status(
            &self.gateway.redis,
            &self.gateway.scripts,
            &self.keys,
            command_id,
        )
        .await?;
        if let (Some(status), Some(accepted_at), Some(deadline_at)) = (
            projected.status.as_deref(),
            projected.accepted_at.as_deref(),
            projected.deadline_at.as_deref(),
        ) {
            let deadline_unix = chrono::DateTime::parse_from_rfc3339(deadline_at)
                .map(|d| d.timestamp())
                .unwrap_or_default();
            let generation = projected.generation.unwrap_or(self.namespace.generation);
            let ticket = self.ticket(command_id, generation, deadline_unix);
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
                ),
            ));
        }
        let _permit = self.gateway.fallback_permit()?;
        let record = sluice_durable::outbox::queries::by_id(
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
        let existing = ExistingCommand {
            id: record.id,
            content_sha256: record.content_sha256.clone(),
            status: record.status.clone(),
            accepted_at: record.accepted_at,
            deadline_at: record.deadline_at,
            resource_key: record.resource_key.clone(),
        };
        Ok((
            StatusCode::OK,
            self.receipt_from_row(&existing, self.namespace.generation),
        ))
    }

    fn receipt_from_row(&self, existing: &ExistingCommand, generation: i64) -> Value {
        let ticket = self.ticket(existing.id, generation, existing.deadline_at.timestamp());
        receipt_json(
            self,
            existing.id,
            ticket,
            &existing.status,
            &rfc3339(existing.accepted_at),
            &rfc3339(existing.deadline_at),
            None,
            true,
        )
    }

    fn ticket(&self, command_id: Uuid, generation: i64, deadline_unix: i64) -> String {
        sign_ticket(
            self.gateway,
            self.namespace.application_id,
            self.namespace.namespace_id,
            command_id,
            generation,
            deadline_unix,
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn receipt_json(
    attempt: &Attempt<'_>,
    command_id: Uuid,
    ticket: String,
    status: &str,
    accepted_at: &str,
    deadline_at: &str,
    queue: Option<(u64, i64)>,
    deduplicated: bool,
) -> Value {
    let position = queue.map(|(p, _)| p);
    json!({
        "command_id": command_id,
        "ticket": ticket,
        "command": attempt.decl.code,
        "resource_key": attempt.resource_key,
        "status": status,
        "accepted_at": accepted_at,
        "deadline_at": deadline_at,
        "queue": queue.map(|(position, observed_ms)| json!({
            "position": position,
            "observed_at": millis_rfc3339(observed_ms),
        })),
        // No drain has been measured for a fresh acceptance; the declared start rate is the
        // fastest its queue can drain, so the first hint is never later than the turn can come
        // (a 10,000-subject drop measured 15 s hints for turns that came within 8 s).
        "poll_after_ms": poll_policy::poll_after_ms(
            position,
            Some(f64::from(attempt.decl.admission.per_second)),
            rand::random::<f64>(),
        ),
        "deduplicated": deduplicated,
    })
}

pub fn millis_rfc3339(ms: i64) -> Value {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|at| Value::from(rfc3339(at)))
        .unwrap_or(Value::Null)
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
