//! The webhook handler: one command's attempts, from its claim to a terminal state, `running`
//! or `needs_review`.
//!
//! The command keeps every permit it was admitted with (command, resource, limit keys) from the
//! first attempt to its end, across retries: a provider counts a task that may be running on its
//! side, and a retry after a timeout may find it there. Each retry takes a start token from
//! every rate-limited limit key again, since each attempt is a request to the provider.

mod backoff;
mod client;
mod signature;
mod store;

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use fred::prelude::Pool;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use client::{Answer, HttpsClient, WebhookClient, https_client};
pub use signature::sign;
pub use store::Outcome;

use super::claim::Claimed;
use super::land::{Mirror, Waiting, mirror_terminal, mirror_waiting};
use crate::DurableError;
use crate::metrics::{self, HandlerKind};
use crate::outbox::complete::Reported;
use crate::outbox::rfc3339;
use crate::projection::execution::{RateKey, renew, retake};
use crate::projection::{AppKeys, Scripts};

/// How long a running command's permits outlive its deadline, so the deadline sweeper (not
/// the lease) ends it; if every sweeper is down they lapse anyway.
const RUNNING_GRACE_MS: i64 = 60_000;

/// Where one command goes and what it may use.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub timeout: Duration,
    /// The namespace's webhook secret.
    pub secret: String,
    pub namespace: String,
    /// The lease zsets of every permit the command holds.
    pub leases: Vec<String>,
    /// The start buckets a retry takes a token from.
    pub rate_keys: Vec<RateKey>,
}

/// What the executor lends the handler.
pub struct Deps<'a> {
    pub pg: &'a PgPool,
    pub redis: &'a Pool,
    pub scripts: &'a Scripts,
    pub client: &'a WebhookClient,
    pub owner: Uuid,
    pub keys: AppKeys,
    pub retention_seconds: i64,
    pub retry_base: Duration,
    pub retry_max: Duration,
}

/// How the handler let go of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Landed terminal or `needs_review` by this executor.
    Landed,
    /// `running` until `:complete` or its deadline.
    Running,
    /// Someone else decided it (a `:complete`, a cancel, a sweeper that took over).
    Elsewhere,
    /// Given back to its queue: the executor is shutting down.
    HandedBack,
}

/// Runs `row` to its end under `deps.owner`'s lease.
pub async fn run(
    deps: &Deps<'_>,
    row: &Claimed,
    target: &Target,
    shutdown: &CancellationToken,
) -> Result<End, DurableError> {
    let mut attempt = row.attempts;
    let mut in_doubt = row.was_in_doubt;
    loop {
        let remaining = (row.deadline_at - Utc::now()).to_std().unwrap_or_default();
        if remaining.is_zero() {
            return deadline(
                deps,
                row,
                in_doubt,
                "the deadline passed before the attempt",
            )
            .await;
        }
        let started = std::time::Instant::now();
        let answer = deps
            .client
            .deliver(client::Delivery {
                url: &target.url,
                secret: &target.secret,
                command_id: row.id,
                body: request_body(row, &target.namespace, attempt),
                timeout: target.timeout.min(remaining),
            })
            .await;
        metrics::handler_latency(HandlerKind::Webhook, started.elapsed());
        let (retry_after, doubtful, reason) = match answer {
            Answer::Decided(decided) => return decide(deps, row, &decided).await,
            Answer::Running => return running(deps, row, target).await,
            Answer::Retry {
                retry_after,
                in_doubt,
                reason,
            } => (retry_after, in_doubt, reason),
        };
        in_doubt |= doubtful;
        let wait = backoff::delay(
            u32::try_from(attempt).unwrap_or(1),
            retry_after,
            deps.retry_base,
            deps.retry_max,
            &mut rand::rng(),
        );
        let next_at = Utc::now() + wait;
        if next_at >= row.deadline_at {
            return deadline(deps, row, in_doubt, &reason).await;
        }
        tracing::info!(command_id = %row.id, attempt, %reason, ?wait, in_doubt, "webhook retry scheduled");
        let Some(cancel) =
            store::wait_for_retry(deps.pg, row.id, deps.owner, in_doubt, next_at, &reason).await?
        else {
            return Ok(End::Elsewhere);
        };
        if cancel && !in_doubt {
            return cancelled(deps, row).await;
        }
        set_status(deps, row.id, "retry_wait").await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return hand_back(deps, row).await,
        }
        // Each attempt is a request to the provider: it needs its start tokens again.
        while let Some(more) = retake(deps.redis, deps.scripts, &target.rate_keys).await? {
            if Utc::now() + more >= row.deadline_at {
                return deadline(deps, row, in_doubt, &reason).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(more) => {}
                _ = shutdown.cancelled() => return hand_back(deps, row).await,
            }
        }
        if !in_doubt && store::cancel_requested(deps.pg, row.id).await? {
            return cancelled(deps, row).await;
        }
        let Some(next) = store::start_retry(deps.pg, row.id, deps.owner).await? else {
            return Ok(End::Elsewhere);
        };
        attempt = next;
        set_status(deps, row.id, "executing").await;
    }
}

/// The body API.md fixes.
fn request_body(row: &Claimed, namespace: &str, attempt: i32) -> Bytes {
    Bytes::from(
        json!({
            "command_id": row.id,
            "command": row.command,
            "namespace": namespace,
            "subject": row.subject,
            "resource_key": row.resource_key,
            "input": row.input,
            "attempt": attempt,
            "accepted_at": rfc3339(row.accepted_at),
            "deadline_at": rfc3339(row.deadline_at),
        })
        .to_string(),
    )
}

async fn decide(deps: &Deps<'_>, row: &Claimed, decided: &Reported) -> Result<End, DurableError> {
    let error = decided
        .error
        .as_ref()
        .map(|(code, message)| (code.as_str(), message.as_str()));
    let outcome = Outcome {
        status: decided.status,
        result: decided.result.as_ref(),
        error,
    };
    land(deps, row, &outcome, &decided.invalidate).await
}

/// Out of time: unknown if an attempt may have reached the backend unanswered, else expired.
async fn deadline(
    deps: &Deps<'_>,
    row: &Claimed,
    in_doubt: bool,
    last: &str,
) -> Result<End, DurableError> {
    let (status, code, message) = if in_doubt {
        (
            "needs_review",
            "OUTCOME_UNKNOWN",
            format!(
                "the deadline passed and an attempt may have reached the backend unanswered ({last})"
            ),
        )
    } else {
        (
            "expired",
            "DEADLINE_EXCEEDED",
            format!("the deadline passed before the backend answered decisively ({last})"),
        )
    };
    let outcome = Outcome {
        status,
        result: None,
        error: Some((code, &message)),
    };
    land(deps, row, &outcome, &[]).await
}

async fn cancelled(deps: &Deps<'_>, row: &Claimed) -> Result<End, DurableError> {
    let outcome = Outcome {
        status: "cancelled",
        result: None,
        error: Some(("CANCELLED", "cancelled before the backend acted on it")),
    };
    land(deps, row, &outcome, &[]).await
}

/// Lands a result; the dependencies a backend's answer names are invalidated before the result
/// shows, so whoever sees it and reads the dependent views again finds the old values gone.
async fn land(
    deps: &Deps<'_>,
    row: &Claimed,
    outcome: &Outcome<'_>,
    invalidate: &[String],
) -> Result<End, DurableError> {
    let Some(updated_at) = store::land(deps.pg, row.id, deps.owner, outcome).await? else {
        return Ok(End::Elsewhere);
    };
    // Counted once it landed: a row decided elsewhere is counted by whoever decided it.
    metrics::execution_landed(outcome.status);
    if let Err(error) = crate::projection::cache::invalidate(
        deps.redis,
        deps.scripts,
        deps.keys.application_id(),
        row.namespace_id,
        invalidate,
    )
    .await
    {
        tracing::warn!(%error, command_id = %row.id, "cached views the backend named not invalidated; they expire by age");
    }
    mirror(deps, row, outcome, updated_at).await;
    Ok(End::Landed)
}

async fn mirror(deps: &Deps<'_>, row: &Claimed, outcome: &Outcome<'_>, at: DateTime<Utc>) {
    mirror_terminal(
        deps.redis,
        deps.scripts,
        &deps.keys,
        deps.retention_seconds,
        Mirror {
            id: row.id,
            namespace_id: row.namespace_id,
            command: &row.command,
            resource_key: &row.resource_key,
            status: outcome.status,
            updated_at: at,
            result: outcome.result,
            error: outcome.error,
        },
    )
    .await;
}

/// `202`: the permits now last until the deadline (plus a grace), nobody renews them.
async fn running(deps: &Deps<'_>, row: &Claimed, target: &Target) -> Result<End, DurableError> {
    if store::mark_running(deps.pg, row.id, deps.owner)
        .await?
        .is_none()
    {
        return Ok(End::Elsewhere);
    }
    let until_deadline =
        (row.deadline_at - Utc::now()).num_milliseconds().max(0) + RUNNING_GRACE_MS;
    let held: Vec<(String, Uuid)> = target.leases.iter().map(|l| (l.clone(), row.id)).collect();
    if let Err(error) = renew(deps.redis, deps.scripts, &held, until_deadline as u64).await {
        crate::metrics::storage_error(&error);
        tracing::warn!(command_id = %row.id, %error, "running permits not extended; they lapse with their lease");
    }
    set_status(deps, row.id, "running").await;
    Ok(End::Running)
}

async fn hand_back(deps: &Deps<'_>, row: &Claimed) -> Result<End, DurableError> {
    if !store::hand_back(deps.pg, row.id, deps.owner).await? {
        return Ok(End::Elsewhere);
    }
    mirror_waiting(deps.redis, deps.scripts, &deps.keys, Waiting::retry_of(row)).await;
    Ok(End::HandedBack)
}

/// The status a ticket poll shows while the command is still held.
async fn set_status(deps: &Deps<'_>, id: Uuid, status: &str) {
    let result: Result<(), _> = fred::interfaces::HashesInterface::hset(
        deps.redis.next(),
        deps.keys.command(id),
        [
            ("status", status.to_string()),
            ("updated_at", rfc3339(Utc::now())),
        ],
    )
    .await;
    if let Err(error) = result {
        tracing::debug!(command_id = %id, %error, "status not mirrored; PostgreSQL holds it");
    }
}
