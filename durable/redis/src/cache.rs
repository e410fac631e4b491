//! Typed callers of the read-cache scripts: look-up with the fill lease (`cache_read.lua`), fill
//! (`cache_fill.lua`), origin permits across gateways (`origin_permit.lua`) and invalidation by
//! dependency version (`cache_invalidate.lua`).
//!
//! Nothing here is durable: a lost cache costs origin calls, never a decision. The cache lives
//! under the application's hash tag like the rest of its projection, so a rebuild clears it.

use fred::prelude::*;

use super::AppKeys;
use crate::DurableError;
use crate::Projection;
use crate::ids::{ApplicationId, NamespaceId};

/// The channel on which invalidations are announced; gateways drop their in-process copies of
/// the namespace's reads when a message names it (`<application>:<namespace>`).
pub const INVALIDATION_CHANNEL: &str = "sluice:cache-invalidations";

/// The Redis keys of one cached read.
#[derive(Debug, Clone)]
pub struct EntryKeys {
    pub entry: String,
    pub lease: String,
    pub dependencies: Vec<String>,
}

impl EntryKeys {
    pub fn new(
        keys: &AppKeys,
        namespace_id: NamespaceId,
        read: &str,
        digest: &str,
        dependencies: &[String],
    ) -> Self {
        let entry = keys.cache_entry(namespace_id, read, digest);
        Self {
            lease: AppKeys::cache_lease(&entry),
            dependencies: dependencies
                .iter()
                .map(|d| keys.dependency(namespace_id, d))
                .collect(),
            entry,
        }
    }
}

/// What the origin said, as cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `200` with a usable body.
    Ok,
    /// `404`: cached briefly, answered `NOT_FOUND`.
    NotFound,
    /// An error, a timeout or an unusable body: cached briefly, answered `UNAVAILABLE`.
    Error,
}

impl Origin {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::NotFound => "not_found",
            Self::Error => "error",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "ok" => Self::Ok,
            "not_found" => Self::NotFound,
            _ => Self::Error,
        }
    }
}

/// A cached value with its times (Redis milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub body: String,
    pub origin: Origin,
    pub generated_ms: i64,
    pub fresh_until_ms: i64,
    pub stale_until_ms: i64,
    /// The dependency versions it was filled under, comma-separated.
    pub versions: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Fresh(Entry),
    Stale(Entry),
    Miss,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub state: State,
    /// This caller holds the fill lease and must fill (or let it lapse).
    pub lease_taken: bool,
    pub now_ms: i64,
    /// The dependency versions now; a fill presents them again.
    pub versions: String,
}

pub async fn lookup(
    redis: &Projection,
    keys: &EntryKeys,
    token: &str,
    lease_ms: i64,
) -> Result<Lookup, DurableError> {
    let mut script_keys = vec![keys.entry.clone(), keys.lease.clone()];
    script_keys.extend(keys.dependencies.iter().cloned());
    let answer: Vec<Value> = redis
        .cache_read(script_keys, vec![token.into(), lease_ms.into()])
        .await?;
    let text = |i: usize| answer.get(i).and_then(Value::as_string).unwrap_or_default();
    let int = |i: usize| answer.get(i).and_then(Value::as_i64).unwrap_or_default();
    let versions = text(3);
    let entry = || Entry {
        body: text(4),
        origin: Origin::parse(&text(5)),
        generated_ms: int(6),
        fresh_until_ms: int(7),
        stale_until_ms: int(8),
        versions: versions.clone(),
    };
    let state = match text(0).as_str() {
        "fresh" if answer.len() == 9 => State::Fresh(entry()),
        "stale" if answer.len() == 9 => State::Stale(entry()),
        "miss" => State::Miss,
        _ => return Err(DurableError::script("cache_read.lua", "unexpected answer")),
    };
    Ok(Lookup {
        state,
        lease_taken: int(1) == 1,
        now_ms: int(2),
        versions,
    })
}

/// The application's cache bounds.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_bytes: i64,
    pub max_keys: i64,
}

/// How long a filled entry lives, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Lifetimes {
    pub fresh_ms: i64,
    pub stale_ms: i64,
    /// Added after the stale period before Redis expires the key, so that keys filled together
    /// do not all expire together.
    pub jitter_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filled {
    /// Stored; the entry's generation time (Redis ms).
    Stored { generated_ms: i64 },
    /// Not stored: the lease lapsed, a dependency changed meanwhile, or a bound would be passed.
    NotStored { reason: &'static str, now_ms: i64 },
}

#[allow(clippy::too_many_arguments)]
pub async fn fill(
    redis: &Projection,
    app: &AppKeys,
    keys: &EntryKeys,
    token: &str,
    versions: &str,
    body: &str,
    origin: Origin,
    lifetimes: Lifetimes,
    bounds: Bounds,
) -> Result<Filled, DurableError> {
    let mut script_keys = vec![
        keys.entry.clone(),
        keys.lease.clone(),
        app.cache_index(),
        app.cache_sizes(),
        app.cache_totals(),
    ];
    script_keys.extend(keys.dependencies.iter().cloned());
    let args: Vec<Value> = vec![
        token.into(),
        versions.into(),
        body.into(),
        origin.as_str().into(),
        lifetimes.fresh_ms.into(),
        lifetimes.stale_ms.into(),
        lifetimes.jitter_ms.into(),
        bounds.max_bytes.into(),
        bounds.max_keys.into(),
    ];
    let answer: Vec<Value> = redis.cache_fill(script_keys, args).await?;
    let now_ms = answer.get(2).and_then(Value::as_i64).unwrap_or_default();
    let reason = match answer.get(1).and_then(Value::as_string).as_deref() {
        Some("stored") => {
            return Ok(Filled::Stored {
                generated_ms: now_ms,
            });
        }
        Some("lease_lost") => "lease_lost",
        Some("invalidated") => "invalidated",
        Some("full") => "full",
        Some("given_back") => "given_back",
        _ => return Err(DurableError::script("cache_fill.lua", "unexpected answer")),
    };
    Ok(Filled::NotStored { reason, now_ms })
}

/// Gives a fill lease back without filling (this caller will not ask the origin: a budget
/// refused), so that the next caller of any gateway may fill at once instead of waiting for the
/// lease to lapse. A lease this caller no longer holds is left alone.
pub async fn release_fill_lease(
    redis: &Projection,
    app: &AppKeys,
    keys: &EntryKeys,
    token: &str,
) -> Result<(), DurableError> {
    let script_keys = vec![
        keys.entry.clone(),
        keys.lease.clone(),
        app.cache_index(),
        app.cache_sizes(),
        app.cache_totals(),
    ];
    let args: Vec<Value> = vec![
        token.into(),
        "".into(),
        "".into(),
        "none".into(),
        0.into(),
        0.into(),
        0.into(),
        0.into(),
        0.into(),
    ];
    let answer: Vec<Value> = redis.cache_fill(script_keys, args).await?;
    match answer.get(1).and_then(Value::as_string).as_deref() {
        Some("given_back" | "lease_lost") => Ok(()),
        _ => Err(DurableError::script("cache_fill.lua", "unexpected answer")),
    }
}

/// Why an origin permit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermitRefused {
    Concurrency,
    Rate { wait_ms: i64 },
}

/// The application's origin budgets across gateways.
#[derive(Debug, Clone, Copy)]
pub struct OriginBudget {
    pub max_concurrent: i64,
    pub per_second: i64,
}

pub async fn origin_permit(
    redis: &Projection,
    app: &AppKeys,
    permit: &str,
    budget: OriginBudget,
    lease_ms: i64,
) -> Result<Result<(), PermitRefused>, DurableError> {
    let answer: Vec<Value> = redis
        .origin_permit(
            vec![app.origin_leases(), app.origin_bucket()],
            vec![
                permit.into(),
                budget.max_concurrent.into(),
                budget.per_second.into(),
                lease_ms.into(),
            ],
        )
        .await?;
    match (
        answer.first().and_then(Value::as_i64),
        answer.get(1).and_then(Value::as_string).as_deref(),
    ) {
        (Some(1), _) => Ok(Ok(())),
        (Some(0), Some("concurrency")) => Ok(Err(PermitRefused::Concurrency)),
        (Some(0), Some("rate")) => Ok(Err(PermitRefused::Rate {
            wait_ms: answer.get(2).and_then(Value::as_i64).unwrap_or(1_000),
        })),
        _ => Err(DurableError::script(
            "origin_permit.lua",
            "unexpected answer",
        )),
    }
}

pub async fn release_origin_permit(
    redis: &Projection,
    app: &AppKeys,
    permit: &str,
) -> Result<(), DurableError> {
    let _: i64 = redis
        .pool()
        .next()
        .zrem(app.origin_leases(), permit)
        .await?;
    Ok(())
}

/// Bumps the versions of `dependencies` of a namespace's reads and announces it; returns the
/// new versions in order.
pub async fn invalidate(
    redis: &Projection,
    application_id: ApplicationId,
    namespace_id: NamespaceId,
    dependencies: &[String],
) -> Result<Vec<i64>, DurableError> {
    if dependencies.is_empty() {
        return Ok(Vec::new());
    }
    let app = AppKeys::new(application_id);
    let keys: Vec<String> = dependencies
        .iter()
        .map(|d| app.dependency(namespace_id, d))
        .collect();
    let versions: Vec<i64> = redis
        .cache_invalidate(
            keys,
            vec![
                INVALIDATION_CHANNEL.into(),
                format!("{application_id}:{namespace_id}").into(),
            ],
        )
        .await?;
    Ok(versions)
}
