//! Quota pools and allocations: `GET /v1/quota-pools/{pool}`, `POST …:configure`,
//! `GET /v1/allocations/{id}`, `POST …:confirm` and `:release`.
//!
//! An allocation is its holder's: only a subject token of the subject that holds it confirms or
//! releases it (a backend that learns of a payment signs a subject token for that subject, as
//! it does to let the browser enqueue). Reading one is also open to `quotas:manage`. Every
//! change of a pool's counts or capacity drops the cached reads depending on `pool:<code>`
//! before it is answered.

use hyper::{HeaderMap, StatusCode};
use serde::Serialize;
use sluice_durable::quotas::allocations::{self, Action, Allocation, AllocationState, Decided};
use sluice_durable::quotas::invalidate_pool;
use sluice_durable::quotas::pools::{self, Configure, MAX_CAPACITY, PoolSnapshot};
use sluice_store::outbox::rfc3339;
use uuid::Uuid;

use super::answers::to_data;
use super::{Handled, RevisedChange, check_declared_code, idempotency_key, require_json};
use crate::http::error::{ApiError, ErrorCode};
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::identity::auth::{Caller, Principal};
use crate::state::Gateway;

/// A pool code as declarations allow it; anything else cannot exist.
pub fn check_pool_code(code: &str) -> Result<(), ApiError> {
    check_declared_code("quota pool", code)
}

/// An allocation id in a path.
pub fn parse_allocation_id(text: &str) -> Result<Uuid, ApiError> {
    text.parse()
        .map_err(|_| ApiError::invalid("allocation_id", "must be a uuid"))
}

/// `GET /v1/quota-pools/{pool}`: `quotas:manage` or `status:read`.
pub async fn read_pool(gateway: &Gateway, caller: &Caller, pool: &str) -> Handled {
    if caller.require_scope("quotas:manage").is_err() {
        caller.require_scope("status:read").map_err(|_| {
            ApiError::permission_denied(
                "reading a quota pool needs a credential with quotas:manage or status:read",
            )
        })?;
    }
    let snapshot = pools::read(&gateway.pg, caller.namespace_id, pool).await?;
    Ok((StatusCode::OK, to_data(&PoolAnswer::of(&snapshot))?))
}

/// `POST /v1/quota-pools/{pool}:configure`: `quotas:manage` and `Idempotency-Key`.
pub async fn configure_pool(
    gateway: &Gateway,
    caller: &Caller,
    pool: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    caller.require_scope("quotas:manage")?;
    require_json(headers)?;
    let key = idempotency_key(headers)?;
    let request = ConfigureRequest::parse(body)?;
    let namespace = gateway.namespace(caller.namespace_id).await?;
    let actor = caller.actor();
    let configured = pools::configure(
        &gateway.pg,
        &Configure {
            application_id: namespace.application_id,
            namespace_id: caller.namespace_id,
            pool,
            actor: &actor,
            idempotency_key: &key,
            expected_revision: request.expected_revision,
            reason: &request.reason,
            capacity: request.capacity,
        },
    )
    .await?;
    if !configured.deduplicated {
        pool_changed(gateway, caller, pool).await?;
    }
    Ok((
        StatusCode::OK,
        to_data(&PoolConfigured {
            pool: PoolAnswer::of(&configured.snapshot),
            deduplicated: configured.deduplicated,
        })?,
    ))
}

/// `GET /v1/allocations/{id}`: the holder's subject token, or `quotas:manage`.
pub async fn get_allocation(gateway: &Gateway, caller: &Caller, id: Uuid) -> Handled {
    let _permit = gateway.command_read_permit(caller)?;
    let allocation = allocations::get(&gateway.pg, caller.namespace_id, id).await?;
    caller.require_owner_or_scope(&allocation.subject, "quotas:manage")?;
    Ok((
        StatusCode::OK,
        to_data(&AllocationAnswer::of(&allocation, None))?,
    ))
}

/// `POST /v1/allocations/{id}:confirm` and `:release`: the holder's subject token only, with an
/// empty body or `{}`. A repeat of the action that decided it is answered `200` with
/// `changed: false`; any other decided state (the other action, or expiry) is `409`.
pub async fn decide(
    gateway: &Gateway,
    caller: &Caller,
    id: Uuid,
    action: Action,
    body: &[u8],
) -> Handled {
    let (verb, done) = match action {
        Action::Confirm => ("confirm", "confirmed"),
        Action::Release => ("release", "released"),
    };
    let Principal::Subject { subject } = &caller.principal else {
        return Err(ApiError::permission_denied(format!(
            "only the subject holding the allocation may {verb} it: send its subject token"
        )));
    };
    if !body.is_empty() {
        ObjectReader::new(parse_object(body)?, "").finish()?;
    }
    let _permit = gateway.command_read_permit(caller)?;
    // Whose it is never changes, so checking before deciding is safe; `decide` starts from
    // the same read.
    let held = allocations::read(&gateway.pg, caller.namespace_id, id).await?;
    if &held.allocation.subject != subject {
        return Err(ApiError::permission_denied(
            "the allocation belongs to another subject",
        ));
    }
    let decided = allocations::decide(&gateway.pg, caller.namespace_id, held, action).await?;
    match decided {
        Decided::Changed(allocation) => {
            pool_changed(gateway, caller, &allocation.pool).await?;
            Ok((
                StatusCode::OK,
                to_data(&AllocationAnswer::of(&allocation, Some(true)))?,
            ))
        }
        Decided::Repeated(allocation) => Ok((
            StatusCode::OK,
            to_data(&AllocationAnswer::of(&allocation, Some(false)))?,
        )),
        Decided::Refused(allocation) => {
            if allocation.state == AllocationState::Expired {
                // This call may have been the one to expire it.
                pool_changed(gateway, caller, &allocation.pool).await?;
            }
            Err(ApiError::new(
                ErrorCode::StateConflict,
                format!(
                    "the allocation is {}; it can no longer be {done}",
                    allocation.state.as_str()
                ),
            )
            .with_detail("state", allocation.state.as_str()))
        }
    }
}

/// Drops the cached reads of the caller's `pool` after a change of its counts committed.
async fn pool_changed(gateway: &Gateway, caller: &Caller, pool: &str) -> Result<(), ApiError> {
    let namespace = gateway.namespace(caller.namespace_id).await?;
    invalidate_pool(
        &gateway.redis,
        namespace.application_id,
        caller.namespace_id,
        pool,
    )
    .await;
    Ok(())
}

/// A pool as the API shows it (the status board's fields, and the revision, a decimal string).
#[derive(Serialize)]
struct PoolAnswer<'a> {
    code: &'a str,
    capacity: i64,
    allocated: i64,
    reserved: i64,
    available: i64,
    revision: String,
}

impl<'a> PoolAnswer<'a> {
    fn of(pool: &'a PoolSnapshot) -> Self {
        Self {
            code: &pool.code,
            capacity: pool.capacity,
            allocated: pool.allocated,
            reserved: pool.reserved,
            available: pool.available(),
            revision: pool.revision.to_string(),
        }
    }
}

#[derive(Serialize)]
struct PoolConfigured<'a> {
    pool: PoolAnswer<'a>,
    deduplicated: bool,
}

/// An allocation as the API shows it: its current truth. `expires_at` while it is reserved (and
/// once expired: when it did); `changed` only in answers to confirm and release.
#[derive(Serialize)]
struct AllocationAnswer<'a> {
    allocation_id: Uuid,
    pool: &'a str,
    subject: &'a str,
    command_id: sluice_durable::ids::CommandId,
    state: AllocationState,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
    created_at: String,
    updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed: Option<bool>,
}

impl<'a> AllocationAnswer<'a> {
    fn of(allocation: &'a Allocation, changed: Option<bool>) -> Self {
        let shows_expiry = matches!(
            allocation.state,
            AllocationState::Reserved | AllocationState::Expired
        );
        Self {
            allocation_id: allocation.id,
            pool: &allocation.pool,
            subject: &allocation.subject,
            command_id: allocation.command_id,
            state: allocation.state,
            expires_at: allocation.expires_at.filter(|_| shows_expiry).map(rfc3339),
            created_at: rfc3339(allocation.created_at),
            updated_at: rfc3339(allocation.updated_at),
            changed,
        }
    }
}

/// The configure body: every field required.
struct ConfigureRequest {
    expected_revision: i64,
    reason: String,
    capacity: i64,
}

impl ConfigureRequest {
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut reader = ObjectReader::new(parse_object(body)?, "");
        let change = RevisedChange::read(&mut reader)?;
        let capacity = reader.required_u64_in("capacity", 0..=MAX_CAPACITY)?;
        reader.finish()?;
        let (expected_revision, reason) = change.validated()?;
        Ok(Self {
            expected_revision,
            reason,
            capacity: i64::try_from(capacity).unwrap_or(i64::MAX),
        })
    }
}
