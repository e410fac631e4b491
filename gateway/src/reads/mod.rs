//! The read-through cache behind `GET /v1/reads/{name}`: in-process L1 → Redis → origin.
//!
//! - **L1**: a small bounded map of recent fresh values, each kept at most `l1_ms` (shorter
//!   than fresh). Invalidations announced on Redis pub/sub drop the namespace's copies.
//! - **Redis**: `cache_read.lua` answers fresh / stale / miss against the dependency versions
//!   and hands the key's fill lease to exactly one caller across every gateway. Stale values are
//!   served while that one caller refreshes; on a miss the others wait a bounded time for its
//!   fill, then get `503 UNAVAILABLE` with `details.reason = "filling"`.
//! - **Single flight**: inside one process, concurrent lookups of a key share one lookup (and
//!   so at most one origin call).
//! - **Origin budgets**: calls at once per process (a semaphore), calls at once per application
//!   across gateways (`origin_permit.lua` leases) and calls per second per application (its
//!   token bucket). Errors and `404`s are cached `negative_seconds` (≤ 5 s). TTLs carry jitter;
//!   a value over the read's `max_bytes` is served but not cached; the application's cache is
//!   bounded in bytes and keys (`cache_fill.lua`).
//! - **Redis unreachable**: L1 serves within its period; otherwise the origin is called only
//!   within the per-process budget, and everything else is `503`.

mod call;
mod flights;
pub mod origin;

pub use call::ReadCall;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use moka::future::Cache;
use rand::Rng;
use sluice_durable::DurableError;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_redis::AppKeys;
use sluice_redis::cache::{
    self, Bounds, Entry, EntryKeys, Filled, Lifetimes, Origin, OriginBudget, PermitRefused, State,
};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::http::error::ApiError;
use origin::{Fetched, OriginClient};
use sluice_redis::Projection;

/// Settings of a gateway's read-through cache (`[gateway.cache]`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// L1 entries at most.
    pub l1_entries: u64,
    /// How long an L1 copy is served at most (and never past its fresh period).
    pub l1_ms: u64,
    /// Origin calls at once in this process.
    pub origin_per_process: usize,
    /// Origin calls at once per application across every gateway.
    pub origin_per_application: i64,
    /// Origin calls per second per application across every gateway.
    pub origin_per_second: i64,
    /// An application's cached bytes and keys at most.
    pub max_bytes: i64,
    pub max_keys: i64,
    /// How long a reader waits for another caller's fill before `503 filling`.
    pub fill_wait_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            l1_entries: 256,
            l1_ms: 1_000,
            origin_per_process: 2,
            origin_per_application: 2,
            origin_per_second: 20,
            max_bytes: 32 * 1024 * 1024,
            max_keys: 2_048,
            fill_wait_ms: 1_000,
        }
    }
}

/// Figures of this process's cache, for `/metrics` and `/v1/status`.
#[derive(Debug, Default)]
pub struct CacheStats {
    pub l1_hits: AtomicU64,
    pub hits: AtomicU64,
    pub stale_serves: AtomicU64,
    pub misses: AtomicU64,
    pub fills: AtomicU64,
    pub not_stored: AtomicU64,
    pub filling_refusals: AtomicU64,
    pub origin_calls: AtomicU64,
    pub invalidations_received: AtomicU64,
}

/// A value as served: the cached entry and how fresh it is.
#[derive(Debug, Clone)]
pub struct View {
    pub entry: Entry,
    pub stale: bool,
    /// Until when this process may serve it from L1.
    l1_until: Instant,
}

pub struct ReadCache {
    config: CacheConfig,
    l1: Cache<String, Arc<View>>,
    flights: flights::Flights<Result<Arc<View>, ApiError>>,
    origin_slots: Arc<Semaphore>,
    client: OriginClient,
    /// Bumped by every invalidation this process hears of: a value looked up before one is
    /// not kept in L1 after it (it may be the value the invalidation dropped).
    epoch: AtomicU64,
    pub stats: Arc<CacheStats>,
}

impl ReadCache {
    pub fn new(config: CacheConfig, outbound: &sluice_durable::http_client::Outbound) -> Self {
        Self {
            l1: Cache::builder()
                .max_capacity(config.l1_entries)
                .time_to_live(Duration::from_millis(config.l1_ms.max(1)))
                .support_invalidation_closures()
                .build(),
            flights: flights::Flights::default(),
            origin_slots: Arc::new(Semaphore::new(config.origin_per_process.max(1))),
            client: OriginClient::new(outbound),
            epoch: AtomicU64::new(0),
            stats: Arc::new(CacheStats::default()),
            config,
        }
    }

    /// The cache, and a task that listens for invalidations announced by any process (a quota
    /// command landing, a webhook result, an invalidate call) and drops this process's copies.
    /// The subscriber reconnects and resubscribes by itself; while it is down, L1 copies still
    /// expire within `l1_ms`.
    pub fn start(
        config: CacheConfig,
        outbound: &sluice_durable::http_client::Outbound,
        redis: &Projection,
    ) -> Arc<Self> {
        let cache = Arc::new(Self::new(config, outbound));
        let weak = Arc::downgrade(&cache);
        let client_config = fred::prelude::ClientLike::client_config(redis.pool().next());
        tokio::spawn(async move {
            if let Err(error) = listen_for_invalidations(client_config, weak).await {
                tracing::warn!(%error, "read cache: no invalidation subscriber; L1 copies expire by age only");
            }
        });
        cache
    }

    /// This process's cache figures, by event, as `/v1/status` and `/metrics` show them.
    pub fn figures(&self) -> [(&'static str, u64); 9] {
        let s = &self.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("l1_hits", get(&s.l1_hits)),
            ("hits", get(&s.hits)),
            ("stale_serves", get(&s.stale_serves)),
            ("misses", get(&s.misses)),
            ("fills", get(&s.fills)),
            ("not_stored", get(&s.not_stored)),
            ("filling_refusals", get(&s.filling_refusals)),
            ("origin_calls", get(&s.origin_calls)),
            ("invalidations_received", get(&s.invalidations_received)),
        ]
    }

    /// The figures as a Prometheus 0.0.4 counter family, appended to the gateway's exposition.
    pub fn exposition(&self) -> String {
        let mut text = String::from(
            "# HELP sluice_cache_events_total Read-cache events of this gateway process, by event.\n# TYPE sluice_cache_events_total counter\n",
        );
        for (event, count) in self.figures() {
            text.push_str(&format!(
                "sluice_cache_events_total{{event=\"{event}\"}} {count}\n"
            ));
        }
        text
    }

    /// Drops every copy this process holds: announcements were missed (the subscriber fell
    /// behind), so any copy may be one an invalidation dropped.
    pub fn forget_everything(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.l1.invalidate_all();
        self.stats
            .invalidations_received
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Drops this process's copies of a namespace's reads (an invalidation was announced).
    pub fn forget_namespace(&self, application_id: ApplicationId, namespace_id: NamespaceId) {
        let prefix = AppKeys::new(application_id).cache_entry(namespace_id, "", "");
        // `…:cache:<ns>::` → `…:cache:<ns>:`: every read of the namespace.
        let prefix = prefix.trim_end_matches(':').to_string() + ":";
        self.epoch.fetch_add(1, Ordering::SeqCst);
        let _ = self
            .l1
            .invalidate_entries_if(move |key, _| key.starts_with(&prefix));
        // Counted once the copies are gone: whoever sees the count reads past them.
        self.stats
            .invalidations_received
            .fetch_add(1, Ordering::SeqCst);
    }

    pub async fn get(
        self: &Arc<Self>,
        redis: &Projection,
        call: ReadCall<'_>,
    ) -> Result<Arc<View>, ApiError> {
        if let Some(view) = self.l1.get(&call.keys.entry).await
            && view.l1_until > Instant::now()
        {
            self.stats.l1_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(view);
        }
        // Held until the answer is read, or dropped with this future if the caller goes away.
        let seat = self.flights.join(&call.keys.entry);
        seat.answer(|| async { self.lookup(redis, &call).await })
            .await
    }

    /// One lookup (shared by this process's concurrent callers of the key).
    async fn lookup(
        self: &Arc<Self>,
        redis: &Projection,
        call: &ReadCall<'_>,
    ) -> Result<Arc<View>, ApiError> {
        // Invalidations heard from now on make whatever this lookup finds unfit for L1.
        let epoch = self.epoch.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_millis(self.config.fill_wait_ms);
        let token = Uuid::now_v7().to_string();
        let lease_ms = call.timeout.as_millis() as i64 + 2_000;
        let mut pause = Duration::from_millis(5);
        loop {
            let lookup = match cache::lookup(redis, &call.keys, &token, lease_ms).await {
                Ok(lookup) => lookup,
                Err(DurableError::Redis(error)) => {
                    tracing::debug!(%error, "read cache: Redis unreachable");
                    return self.without_redis(call, epoch).await;
                }
                Err(other) => return Err(other.into()),
            };
            match lookup.state {
                State::Fresh(entry) => {
                    self.stats.hits.fetch_add(1, Ordering::Relaxed);
                    return self
                        .answer(call, entry, false, lookup.now_ms, Some(epoch))
                        .await;
                }
                State::Stale(entry) => {
                    self.stats.stale_serves.fetch_add(1, Ordering::Relaxed);
                    if lookup.lease_taken {
                        let this = self.clone();
                        let redis = redis.clone();
                        let refresh = OwnedCall::from(call);
                        let versions = lookup.versions.clone();
                        tokio::spawn(async move {
                            let call = refresh.borrow();
                            if let Err(error) =
                                this.fill(&redis, &call, &token, &versions, epoch).await
                            {
                                tracing::debug!(
                                    read = call.read,
                                    code = error.code.as_str(),
                                    "background refresh failed"
                                );
                            }
                        });
                    }
                    return self.answer(call, entry, true, lookup.now_ms, None).await;
                }
                State::Miss if lookup.lease_taken => {
                    self.stats.misses.fetch_add(1, Ordering::Relaxed);
                    return self
                        .fill(redis, call, &token, &lookup.versions, epoch)
                        .await;
                }
                State::Miss => {
                    if Instant::now() + pause > deadline {
                        self.stats.filling_refusals.fetch_add(1, Ordering::Relaxed);
                        return Err(filling());
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
            }
        }
    }

    /// Calls the origin under every budget and stores the answer (this caller holds the lease).
    /// A budget that refuses gives the lease back at once, so that the next caller (of any
    /// gateway) may try instead of waiting for it to lapse.
    async fn fill(
        &self,
        redis: &Projection,
        call: &ReadCall<'_>,
        token: &str,
        versions: &str,
        epoch: u64,
    ) -> Result<Arc<View>, ApiError> {
        let app = AppKeys::new(call.application_id);
        let Ok(_slot) = self.origin_slots.clone().try_acquire_owned() else {
            self.stats.filling_refusals.fetch_add(1, Ordering::Relaxed);
            release_fill_lease(redis, &app, call, token).await;
            return Err(filling());
        };
        let budget = OriginBudget {
            max_concurrent: self.config.origin_per_application,
            per_second: self.config.origin_per_second,
        };
        let permit_ms = call.timeout.as_millis() as i64 + 1_000;
        match cache::origin_permit(redis, &app, token, budget, permit_ms).await? {
            Ok(()) => {}
            Err(refused) => {
                self.stats.filling_refusals.fetch_add(1, Ordering::Relaxed);
                release_fill_lease(redis, &app, call, token).await;
                let wait = match refused {
                    PermitRefused::Concurrency => 1_000,
                    PermitRefused::Rate { wait_ms } => wait_ms.clamp(1, 60_000) as u64,
                };
                return Err(filling().with_retry_after_ms(wait));
            }
        }
        self.stats.origin_calls.fetch_add(1, Ordering::Relaxed);
        let fetched = self.client.fetch(&call.url, call.timeout).await;
        if let Err(error) = cache::release_origin_permit(redis, &app, token).await {
            tracing::debug!(%error, "origin permit not released; it lapses");
        }
        let (fresh_ms, stale_ms) = match fetched.origin {
            Origin::Ok => (jittered(call.fresh_ms), jittered(call.stale_ms)),
            Origin::NotFound | Origin::Error => (jittered(call.negative_ms), 0),
        };
        let lifetimes = Lifetimes {
            fresh_ms,
            stale_ms,
            jitter_ms: rand::rng().random_range(0..=1_000),
        };
        let bounds = Bounds {
            max_bytes: self.config.max_bytes,
            max_keys: self.config.max_keys,
        };
        // Over the read's size limit: served, not cached (no value can pass a bound of zero,
        // and a fill that a bound refuses gives the lease back).
        let too_large = fetched.body.len() > call.max_bytes;
        let stored = cache::fill(
            redis,
            &app,
            &call.keys,
            token,
            versions,
            &fetched.body,
            fetched.origin,
            lifetimes,
            if too_large {
                Bounds {
                    max_bytes: 0,
                    max_keys: 0,
                }
            } else {
                bounds
            },
        )
        .await?;
        let (generated_ms, keep) = match stored {
            Filled::Stored { generated_ms } => {
                self.stats.fills.fetch_add(1, Ordering::Relaxed);
                (generated_ms, Some(epoch))
            }
            // Served once, kept nowhere: L1 holds only what Redis holds, so the next read
            // asks Redis (and the origin) again.
            Filled::NotStored { reason, now_ms } => {
                self.stats.not_stored.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(read = call.read, reason, "origin answer served, not cached");
                (now_ms, None)
            }
        };
        let entry = Entry {
            body: fetched.body,
            origin: fetched.origin,
            generated_ms,
            fresh_until_ms: generated_ms + fresh_ms,
            stale_until_ms: generated_ms + fresh_ms + stale_ms,
            versions: versions.to_string(),
        };
        self.answer(call, entry, false, generated_ms, keep).await
    }

    /// Redis unreachable: the origin within this process's budget only, nothing cached in
    /// Redis; the L1 copy serves its period.
    async fn without_redis(&self, call: &ReadCall<'_>, epoch: u64) -> Result<Arc<View>, ApiError> {
        let Ok(_slot) = self.origin_slots.clone().try_acquire_owned() else {
            return Err(ApiError::unavailable(
                "the cache store is unreachable and this gateway's origin budget is spent; retry shortly",
            ));
        };
        self.stats.origin_calls.fetch_add(1, Ordering::Relaxed);
        let fetched: Fetched = self.client.fetch(&call.url, call.timeout).await;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let fresh_ms = match fetched.origin {
            Origin::Ok => call.fresh_ms,
            _ => call.negative_ms,
        };
        let entry = Entry {
            body: fetched.body,
            origin: fetched.origin,
            generated_ms: now_ms,
            fresh_until_ms: now_ms + fresh_ms,
            stale_until_ms: now_ms + fresh_ms,
            versions: String::new(),
        };
        // Not kept past the read's size limit, like a value Redis would not store.
        let keep = (entry.body.len() <= call.max_bytes).then_some(epoch);
        self.answer(call, entry, false, now_ms, keep).await
    }

    /// Turns an entry into an answer. A fresh value is kept in L1 for its short period when
    /// `keep` names the invalidation epoch it was looked up under and no invalidation came
    /// since (checked again after the insert, which may race one).
    async fn answer(
        &self,
        call: &ReadCall<'_>,
        entry: Entry,
        stale: bool,
        now_ms: i64,
        keep: Option<u64>,
    ) -> Result<Arc<View>, ApiError> {
        match entry.origin {
            Origin::Ok => {}
            Origin::NotFound => {
                return Err(ApiError::not_found(format!(
                    "the origin of read {:?} has no such item",
                    call.read
                )));
            }
            Origin::Error => {
                return Err(ApiError::unavailable(format!(
                    "the origin of read {:?} failed: {}",
                    call.read, entry.body
                ))
                .with_detail("reason", "origin"));
            }
        }
        let remaining = (entry.fresh_until_ms - now_ms).max(0) as u64;
        let l1_for = Duration::from_millis(remaining.min(self.config.l1_ms));
        let view = Arc::new(View {
            entry,
            stale,
            l1_until: Instant::now() + l1_for,
        });
        if let Some(epoch) = keep
            && !stale
            && !l1_for.is_zero()
            && self.epoch.load(Ordering::SeqCst) == epoch
        {
            let key = call.keys.entry.clone();
            self.l1.insert(key.clone(), view.clone()).await;
            if self.epoch.load(Ordering::SeqCst) != epoch {
                self.l1.invalidate(&key).await;
            }
        }
        Ok(view)
    }
}

/// Gives a fill lease back unfilled; a failure only means that it lapses by itself.
async fn release_fill_lease(redis: &Projection, app: &AppKeys, call: &ReadCall<'_>, token: &str) {
    if let Err(error) = cache::release_fill_lease(redis, app, &call.keys, token).await {
        tracing::debug!(%error, "fill lease not given back; it lapses");
    }
}

async fn listen_for_invalidations(
    config: fred::prelude::Config,
    cache: std::sync::Weak<ReadCache>,
) -> Result<(), fred::prelude::Error> {
    use fred::prelude::*;
    let subscriber = Builder::from_config(config)
        .set_policy(ReconnectPolicy::new_exponential(0, 100, 2_000, 2))
        .build_subscriber_client()?;
    subscriber.init().await?;
    let _resubscribe = subscriber.manage_subscriptions();
    subscriber.subscribe(cache::INVALIDATION_CHANNEL).await?;
    let mut messages = subscriber.message_rx();
    loop {
        let message = match messages.recv().await {
            Ok(message) => message,
            // More announcements arrived than the client buffers while this task waited for a
            // core: some are lost, so every copy goes. Ending here instead (as `while let Ok`
            // did) left the process deaf to every later invalidation.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                let Some(cache) = cache.upgrade() else { break };
                tracing::warn!(
                    missed,
                    "read cache: invalidations arrived faster than read; every local copy dropped"
                );
                cache.forget_everything();
                continue;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        };
        let Some(cache) = cache.upgrade() else { break };
        let text: Option<String> = message.value.convert().ok();
        let parsed = text
            .as_deref()
            .and_then(|t| t.split_once(':'))
            .and_then(|(a, n)| {
                Some((
                    a.parse::<ApplicationId>().ok()?,
                    n.parse::<NamespaceId>().ok()?,
                ))
            });
        if let Some((application_id, namespace_id)) = parsed {
            cache.forget_namespace(application_id, namespace_id);
        }
    }
    let _ = subscriber.quit().await;
    Ok(())
}

/// Another caller is filling the key (or the origin budget is spent): retry shortly.
fn filling() -> ApiError {
    ApiError::unavailable("another request is filling this value; retry shortly")
        .with_detail("reason", "filling")
        .with_retry_after_ms(1_000)
}

/// A period shortened by up to a tenth at random, so that values filled together do not all
/// expire together.
fn jittered(ms: i64) -> i64 {
    if ms <= 0 {
        return 0;
    }
    ms - rand::rng().random_range(0..=ms / 10)
}

/// A [`ReadCall`] that a background refresh can own.
struct OwnedCall {
    application_id: ApplicationId,
    namespace_id: NamespaceId,
    keys: EntryKeys,
    url: String,
    fresh_ms: i64,
    stale_ms: i64,
    negative_ms: i64,
    max_bytes: usize,
    timeout: Duration,
    read: String,
}

impl OwnedCall {
    fn from(call: &ReadCall<'_>) -> Self {
        Self {
            application_id: call.application_id,
            namespace_id: call.namespace_id,
            keys: call.keys.clone(),
            url: call.url.clone(),
            fresh_ms: call.fresh_ms,
            stale_ms: call.stale_ms,
            negative_ms: call.negative_ms,
            max_bytes: call.max_bytes,
            timeout: call.timeout,
            read: call.read.to_string(),
        }
    }

    fn borrow(&self) -> ReadCall<'_> {
        ReadCall {
            application_id: self.application_id,
            namespace_id: self.namespace_id,
            keys: self.keys.clone(),
            url: self.url.clone(),
            fresh_ms: self.fresh_ms,
            stale_ms: self.stale_ms,
            negative_ms: self.negative_ms,
            max_bytes: self.max_bytes,
            timeout: self.timeout,
            read: &self.read,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_shortens_by_at_most_a_tenth() {
        for _ in 0..1_000 {
            let ms = jittered(2_000);
            assert!((1_800..=2_000).contains(&ms), "{ms}");
        }
        assert_eq!(jittered(0), 0);
    }
}
