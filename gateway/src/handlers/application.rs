//! `GET /v1/application/resources` and `POST /v1/application/resources:configure`: the budgets
//! every namespace of the caller's application shares. The application is the caller's
//! credential's; no URL or body can name another. Both need their own application scope, which
//! no other scope implies.
//!
//! Usage is read from the application's Redis projection. One that is missing or stale (a fresh
//! application nothing was enqueued to yet, Redis that lost its data) is rebuilt here, once, as
//! intake does, instead of answering `503` until some enqueue or executor rebuilds it.

use crate::handlers::answers::to_data;
use hyper::{HeaderMap, StatusCode};
use serde::Serialize;
use sluice_durable::DurableError;
use sluice_durable::budgets::{
    self, Budgets, Configure, MAX_CONCURRENCY_RANGE, MAX_UNFINISHED_RANGE, RATE_PER_SECOND_RANGE,
    Snapshot,
};
use sluice_durable::ids::ApplicationId;

use super::{Handled, RevisedChange, idempotency_key, require_json};
use crate::http::error::ApiError;
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::identity::auth::Caller;
use crate::state::Gateway;

pub async fn read(gateway: &Gateway, caller: &Caller) -> Handled {
    caller.require_scope("application:resources:read")?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let application_id = namespace.application_id;
    let read = || budgets::read(&gateway.pg, &gateway.redis, application_id);
    let snapshot = match read().await {
        Err(DurableError::Unavailable(_)) if gateway.ensure_projection(application_id).await => {
            read().await?
        }
        other => other?,
    };
    Ok((StatusCode::OK, to_data(&ResourcesAnswer::of(&snapshot))?))
}

pub async fn configure(
    gateway: &Gateway,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    caller.require_scope("application:resources:manage")?;
    require_json(headers)?;
    let key = idempotency_key(headers)?;
    let request = ConfigureRequest::parse(body)?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let actor = caller.actor();
    let call = Configure {
        application_id: namespace.application_id,
        namespace_id: caller.namespace_id,
        actor: &actor,
        idempotency_key: &key,
        expected_revision: request.expected_revision,
        reason: &request.reason,
        budgets: request.budgets,
    };
    let configure = || budgets::configure(&gateway.pg, &gateway.redis, &call);
    // Not ready: nothing was changed (usage is read before the transaction); rebuild, then again.
    let configured = match configure().await {
        Err(DurableError::Unavailable(_))
            if gateway.ensure_projection(namespace.application_id).await =>
        {
            configure().await?
        }
        other => other?,
    };
    Ok((
        StatusCode::OK,
        to_data(&Configured {
            resources: ResourcesAnswer::of(&configured.snapshot),
            deduplicated: configured.deduplicated,
        })?,
    ))
}

/// `GET /v1/application/resources`. Limits are JSON integers; revisions and usage decimal
/// strings (they may pass 2^53).
#[derive(Serialize)]
struct ResourcesAnswer {
    application_id: ApplicationId,
    revision: String,
    max_unfinished_tasks: u32,
    unfinished_tasks: String,
    max_concurrency: u32,
    active_attempts: String,
    pending_starts: String,
    rate_per_second: u32,
}

impl ResourcesAnswer {
    fn of(snapshot: &Snapshot) -> Self {
        Self {
            application_id: snapshot.application_id,
            revision: snapshot.revision.to_string(),
            max_unfinished_tasks: snapshot.budgets.max_unfinished_tasks,
            unfinished_tasks: snapshot.usage.unfinished_tasks.to_string(),
            max_concurrency: snapshot.budgets.max_concurrency,
            active_attempts: snapshot.usage.active_attempts.to_string(),
            pending_starts: snapshot.usage.pending_starts.to_string(),
            rate_per_second: snapshot.budgets.rate_per_second,
        }
    }
}

/// `POST /v1/application/resources:configure`.
#[derive(Serialize)]
struct Configured {
    resources: ResourcesAnswer,
    deduplicated: bool,
}

/// The body: a full replacement, every field required.
struct ConfigureRequest {
    expected_revision: i64,
    reason: String,
    budgets: Budgets,
}

impl ConfigureRequest {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut reader = ObjectReader::new(parse_object(body)?, "");
        let change = RevisedChange::read(&mut reader)?;
        let max_unfinished =
            reader.required_u64_in("max_unfinished_tasks", MAX_UNFINISHED_RANGE)?;
        let max_concurrency = reader.required_u64_in("max_concurrency", MAX_CONCURRENCY_RANGE)?;
        let rate = reader.required_u64_in("rate_per_second", RATE_PER_SECOND_RANGE)?;
        reader.finish()?;
        let (expected_revision, reason) = change.validated()?;
        let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(Self {
            expected_revision,
            reason,
            budgets: Budgets {
                max_unfinished_tasks: narrow(max_unfinished),
                max_concurrency: narrow(max_concurrency),
                rate_per_second: narrow(rate),
            },
        })
    }
}
