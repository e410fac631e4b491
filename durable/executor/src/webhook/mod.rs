//! The webhook handler: one command's attempts, from its claim to a terminal state, `running`
//! or `needs_review`.
//!
//! The command keeps every permit it was admitted with (command, resource, limit keys) from the
//! first attempt to its end, across retries: a provider counts a task that may be running on its
//! side, and a retry after a timeout may find it there. Each request holds a start token of every
//! rate-limited limit key, taken at most [`TOKEN_FRESHNESS`] before it goes out: a retry takes
//! them again, and so does a first request whose admission's tokens are older (the claim waited
//! on PostgreSQL), so requests held back together never reach their provider together.

mod backoff;
mod client;
mod fenced_body;
mod signature;

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[cfg(feature = "fuzzing")]
pub use client::classify_for_fuzzing;
pub use client::{Answer, Delivery, WebhookClient};
pub use fenced_body::{FenceClosed, FencedBody};
pub use signature::{WebhookSecrets, sign, verify as verify_signature};

use crate::fence::Fence;
use sluice_durable::DurableError;
use sluice_durable::lifecycle::Stores;
use sluice_durable::lifecycle::claim::Claimed;
use sluice_durable::lifecycle::claim::RateKey;
use sluice_durable::lifecycle::end::{
    Outcome, Place, Projecting, Reported, land_attempt, project_end,
};
use sluice_durable::lifecycle::held::{self, Running};
use sluice_durable::lifecycle::held::{Retake, take_start_tokens};
use sluice_metrics::HandlerKind;
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::Projection;
use sluice_store::outbox::rfc3339;

/// How old a request's start tokens may be when it goes out. A provider therefore sees at most
/// `burst + per_second × (window + TOKEN_FRESHNESS)` requests in any window.
pub const TOKEN_FRESHNESS: Duration = Duration::from_millis(200);

/// Where one command goes and what it may use.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: String,
    pub timeout: Duration,
    /// The namespace's live webhook secrets.
    pub secrets: WebhookSecrets,
    pub namespace: String,
    /// The start buckets a retry takes a token from.
    pub rate_keys: Vec<RateKey>,
    /// When the admission took the first request's start tokens.
    pub admitted_at: tokio::time::Instant,
    /// The attempt's fence: no request goes out once it has closed.
    pub fence: Fence,
}

/// What the executor lends the handler.
pub struct Deps<'a> {
    pub pg: &'a PgPool,
    pub redis: &'a Projection,
    pub client: &'a WebhookClient,
    pub keys: AppKeys,
    pub retention_seconds: i64,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// How long a Redis side is made again while the projection is not trusted.
    pub patience: Duration,
}

impl Deps<'_> {
    fn stores(&self) -> Stores<'_> {
        Stores {
            pg: self.pg,
            redis: self.redis,
        }
    }
}

/// How the handler let go of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Landed terminal or `needs_review` by this attempt.
    Landed,
    /// `running` until `:complete` or its deadline.
    Running,
    /// Someone else decided it (a `:complete`, a cancel, a sweeper that took over): the attempt
    /// lost the row.
    Elsewhere,
    /// Given back to its queue: the executor is shutting down.
    HandedBack,
    /// Its fence closed before a request went out: nothing was sent, nothing landed, and the
    /// row is left to whoever owns it now (or to the sweeper once its lease lapses).
    Withheld,
}

/// Runs `row` to its end under its attempt.
pub async fn run(
    deps: &Deps<'_>,
    claimed: &Claimed,
    target: &Target,
    shutdown: &CancellationToken,
) -> Result<End, DurableError> {
    let mut attempt = claimed.attempts;
    let mut in_doubt = claimed.was_in_doubt;
    let mut tokens_taken = target.admitted_at;
    loop {
        if tokens_taken.elapsed() > TOKEN_FRESHNESS {
            match take_tokens(deps, claimed, target, shutdown).await? {
                Tokens::Taken => {}
                Tokens::PastDeadline => {
                    return deadline(
                        deps,
                        claimed,
                        in_doubt,
                        "no start token before the deadline",
                    )
                    .await;
                }
                Tokens::ShuttingDown => return hand_back(deps, claimed).await,
            }
        }
        let remaining = (claimed.row.deadline_at - Utc::now())
            .to_std()
            .unwrap_or_default();
        if remaining.is_zero() {
            return deadline(
                deps,
                claimed,
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
                secrets: &target.secrets,
                command_id: claimed.row.id,
                body: request_body(claimed, &target.namespace, attempt),
                timeout: target.timeout.min(remaining),
                fence: &target.fence,
                trace_parent: claimed.trace_parent.as_deref(),
            })
            .await;
        sluice_metrics::handler_latency(HandlerKind::Webhook, started.elapsed());
        let (retry_after, doubtful, reason) = match answer {
            Answer::Decided(decided) => return decide(deps, claimed, &decided).await,
            Answer::Running => return running(deps, claimed).await,
            Answer::Withheld => return Ok(End::Withheld),
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
        // A wait that does not end before the deadline (a backend's Retry-After may name any
        // time at all) ends the command now, as the deadline would.
        let Some(next_at) = before_deadline(wait, claimed.row.deadline_at) else {
            return deadline(deps, claimed, in_doubt, &reason).await;
        };
        tracing::info!(command_id = %claimed.row.id, attempt, %reason, ?wait, in_doubt, "webhook retry scheduled");
        let stores = deps.stores();
        let Some(cancel) = persist(claimed, "retry_wait", || {
            held::wait_for_retry(stores, &deps.keys, claimed, in_doubt, next_at, &reason)
        })
        .await?
        else {
            return Ok(End::Elsewhere);
        };
        if cancel && !in_doubt {
            return cancelled(deps, claimed).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => return hand_back(deps, claimed).await,
        }
        // Each attempt is a request to the provider: it needs its start tokens again.
        match take_tokens(deps, claimed, target, shutdown).await? {
            Tokens::Taken => tokens_taken = tokio::time::Instant::now(),
            Tokens::PastDeadline => return deadline(deps, claimed, in_doubt, &reason).await,
            Tokens::ShuttingDown => return hand_back(deps, claimed).await,
        }
        if !in_doubt
            && persist(claimed, "cancel check", || {
                held::cancel_requested(stores, claimed.row.id)
            })
            .await?
        {
            return cancelled(deps, claimed).await;
        }
        let Some(next) = persist(claimed, "retry", || {
            held::start_retry(stores, &deps.keys, claimed)
        })
        .await?
        else {
            return Ok(End::Elsewhere);
        };
        attempt = next;
    }
}

/// Runs one PostgreSQL write of the attempt until PostgreSQL takes it: an outage must not drop
/// a result the backend decided or a request it has. The attempt holds its command meanwhile
/// (its permits are renewed in Redis, so no sweeper takes the command from it), and its executor
/// stops it if it loses them.
async fn persist<T, F, Fut>(claimed: &Claimed, what: &str, mut write: F) -> Result<T, DurableError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DurableError>>,
{
    let mut pause = Duration::from_millis(50);
    loop {
        match write().await {
            Err(error) if error.postgres_is_unreachable() => {
                sluice_metrics::storage_error(&error);
                tracing::warn!(command_id = %claimed.row.id, %error, what, "PostgreSQL unreachable; the attempt keeps its command and writes again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// What waiting for start tokens came to.
enum Tokens {
    Taken,
    PastDeadline,
    ShuttingDown,
}

/// One start token from every rate-limited limit key of the command (`start_tokens.lua`), waiting as
/// long as the buckets say, within the deadline.
async fn take_tokens(
    deps: &Deps<'_>,
    claimed: &Claimed,
    target: &Target,
    shutdown: &CancellationToken,
) -> Result<Tokens, DurableError> {
    loop {
        let more = match take_start_tokens(deps.stores(), &deps.keys, &target.rate_keys).await? {
            Retake::Taken => return Ok(Tokens::Taken),
            Retake::Wait(more) => more,
            // Being rebuilt (a rolled-back bucket would have refilled): ask again shortly.
            Retake::NotReady => Duration::from_millis(100),
        };
        if before_deadline(more, claimed.row.deadline_at).is_none() {
            return Ok(Tokens::PastDeadline);
        }
        tokio::select! {
            _ = tokio::time::sleep(more) => {}
            _ = shutdown.cancelled() => return Ok(Tokens::ShuttingDown),
        }
    }
}

/// `now + wait`, if that is before `deadline` (and representable at all).
fn before_deadline(wait: Duration, deadline: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let wait = chrono::Duration::from_std(wait).ok()?;
    Utc::now()
        .checked_add_signed(wait)
        .filter(|at| *at < deadline)
}

/// The body API.md fixes.
fn request_body(claimed: &Claimed, namespace: &str, attempt: i32) -> Bytes {
    Bytes::from(
        json!({
            "command_id": claimed.row.id,
            "command": claimed.row.command,
            "namespace": namespace,
            "subject": claimed.row.subject,
            "resource_key": claimed.row.resource_key,
            "input": claimed.input,
            "attempt": attempt,
            "accepted_at": rfc3339(claimed.row.accepted_at),
            "deadline_at": rfc3339(claimed.row.deadline_at),
        })
        .to_string(),
    )
}

async fn decide(
    deps: &Deps<'_>,
    claimed: &Claimed,
    decided: &Reported,
) -> Result<End, DurableError> {
    let error = decided
        .error
        .as_ref()
        .map(|(code, message)| (code.as_str(), message.as_str()));
    let outcome = Outcome {
        status: decided.status,
        result: decided.result.as_ref(),
        error,
    };
    land(deps, claimed, &outcome, &decided.invalidate).await
}

/// Out of time: unknown if an attempt may have reached the backend unanswered, else expired.
async fn deadline(
    deps: &Deps<'_>,
    claimed: &Claimed,
    in_doubt: bool,
    last: &str,
) -> Result<End, DurableError> {
    let (status, code, message) = if in_doubt {
        (
            CommandStatus::NeedsReview,
            "OUTCOME_UNKNOWN",
            format!(
                "the deadline passed and an attempt may have reached the backend unanswered ({last})"
            ),
        )
    } else {
        (
            CommandStatus::Expired,
            "DEADLINE_EXCEEDED",
            format!("the deadline passed before the backend answered decisively ({last})"),
        )
    };
    let outcome = Outcome {
        status,
        result: None,
        error: Some((code, &message)),
    };
    land(deps, claimed, &outcome, &[]).await
}

async fn cancelled(deps: &Deps<'_>, claimed: &Claimed) -> Result<End, DurableError> {
    let outcome = Outcome {
        status: CommandStatus::Cancelled,
        result: None,
        error: Some(("CANCELLED", "cancelled before the backend acted on it")),
    };
    land(deps, claimed, &outcome, &[]).await
}

/// `land`: the result, fenced by the attempt. The dependencies a backend's answer names are
/// invalidated before the result shows, so whoever sees it and reads the dependent views again
/// finds the old values gone.
async fn land(
    deps: &Deps<'_>,
    claimed: &Claimed,
    outcome: &Outcome<'_>,
    invalidate: &[String],
) -> Result<End, DurableError> {
    let stores = deps.stores();
    let Some(updated_at) = persist(claimed, "land", || {
        land_attempt(stores, claimed.row.id, claimed.attempt, outcome)
    })
    .await?
    else {
        return Ok(End::Elsewhere);
    };
    // Counted once it landed: a claimed decided elsewhere is counted by whoever decided it.
    sluice_metrics::execution_landed(outcome.status);
    if let Err(error) = sluice_redis::cache::invalidate(
        deps.redis,
        deps.keys.application_id(),
        claimed.row.namespace_id,
        invalidate,
    )
    .await
    {
        tracing::warn!(%error, command_id = %claimed.row.id, "cached views the backend named not invalidated; they expire by age");
    }
    project_end(
        stores,
        &deps.keys,
        Place {
            id: claimed.row.id,
            namespace_id: claimed.row.namespace_id,
            command: &claimed.row.command,
            resource_key: &claimed.row.resource_key,
            limit_keys: &claimed.limit_keys,
        },
        outcome,
        updated_at,
        Projecting {
            retention_ms: deps.retention_seconds.saturating_mul(1_000),
            patience: deps.patience,
        },
    )
    .await;
    Ok(End::Landed)
}

/// `202`: `running`, its permits extended to the deadline first.
async fn running(deps: &Deps<'_>, claimed: &Claimed) -> Result<End, DurableError> {
    let stores = deps.stores();
    Ok(
        match persist(claimed, "running", || {
            held::running(stores, &deps.keys, claimed, deps.patience)
        })
        .await?
        {
            Running::Running => End::Running,
            Running::Elsewhere => End::Elsewhere,
        },
    )
}

async fn hand_back(deps: &Deps<'_>, claimed: &Claimed) -> Result<End, DurableError> {
    let stores = deps.stores();
    Ok(
        if persist(claimed, "hand back", || {
            held::requeue_held(stores, &deps.keys, claimed, deps.patience)
        })
        .await?
        {
            End::HandedBack
        } else {
            End::Elsewhere
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_past_the_deadline_or_past_any_date_ends_now() {
        let deadline = Utc::now() + chrono::Duration::seconds(60);
        assert!(before_deadline(Duration::from_secs(1), deadline).is_some());
        assert!(before_deadline(Duration::from_secs(61), deadline).is_none());
        // A backend's `Retry-After: 10000000000000` must not overflow the date arithmetic.
        assert!(before_deadline(Duration::from_secs(10_000_000_000_000), deadline).is_none());
        assert!(before_deadline(Duration::MAX, deadline).is_none());
    }
}
