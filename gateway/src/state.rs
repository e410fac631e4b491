//! The gateway's shared state: connections, scripts, the group committer, signing keys and the
//! short-lived caches that keep PostgreSQL off the hot path.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use moka::future::Cache;
use sluice_durable::DurableError;
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_durable::lifecycle::Stores;
use sluice_durable::lifecycle::group_commit::GroupCommitter;
use sluice_durable::lifecycle::intake_batcher::IntakeBatcher;
use sluice_durable::lifecycle::rebuild;
use sluice_store::rooms::heartbeats::PassHeartbeats;
use sluice_store::rooms::join::RoomJoiner;
use sluice_store::rooms::leaves::PlaceLeaves;
use sluice_store::tenancy::{self, CredentialRecord, NamespaceConfig};
use sqlx::PgPool;
use tokio::sync::{OwnedSemaphorePermit, watch};

use crate::gateway_config::GatewayConfig;
use crate::http::error::{ApiError, ErrorCode};
use crate::identity::auth::Caller;
use crate::identity::lookup_budget::{IdentityKey, Lookup, LookupBudget};
use crate::identity::pg_budget::{PgBudget, Refused};
use crate::identity::ticket::TicketKeys;
use sluice_store::pass_keys::PassKey;

/// How long a gateway keeps the pass keys it read.
const PASS_KEYS_CACHED: Duration = Duration::from_secs(30);
use sluice_redis::Projection;

/// Counters that tests and benchmarks read; `/metrics` exports the same events process-wide
/// (`sluice_postgres_fallbacks_total`, `sluice_fallbacks_refused_total`), counted beside them.
#[derive(Debug, Default)]
pub struct GatewayStats {
    /// Ticket polls and look-ups that had to ask PostgreSQL.
    pub postgres_fallbacks: AtomicU64,
    /// Fallbacks refused by the per-process budget.
    pub fallbacks_refused: AtomicU64,
}

/// A live subject key: the namespace it belongs to and its HS256 secret.
pub type SubjectKey = (NamespaceId, Arc<Vec<u8>>);

pub struct Gateway {
    pub pg: PgPool,
    /// The waiting rooms' admission ticker's own connections (`pg` unless a process gives it
    /// some): at the size of a drop the requests' queries hold every connection of `pg` in turn,
    /// and a ticker waiting its turn among them refilled freed slots seconds late.
    pub ticker_pg: PgPool,
    pub redis: Projection,
    pub committer: GroupCommitter,
    /// Concurrent room joins share one transaction, as acceptances do.
    pub room_joins: RoomJoiner,
    /// Concurrent pass heartbeats share one statement.
    pub pass_heartbeats: PassHeartbeats,
    /// Concurrent leaves share one transaction.
    pub place_leaves: PlaceLeaves,
    /// Concurrent enqueues of one application share one `intake.lua` call.
    pub intake: IntakeBatcher,
    pub tickets: TicketKeys,
    pub config: GatewayConfig,
    pub stats: GatewayStats,
    pub reads: Arc<crate::reads::ReadCache>,
    /// Waiting polls answered from memory ([`crate::polls::waiting_view`]).
    pub waiting: crate::polls::waiting_view::WaitingView,
    /// `sluice dev`'s demo sale (`/demo/`), set by `sluice dev` only.
    pub demo: std::sync::OnceLock<crate::pages::demo::Demo>,
    /// Set at SIGTERM: both readiness endpoints answer `503 draining` from then on, so a load
    /// balancer takes this process out while it still serves ([`crate::http::drain`]).
    pub draining: std::sync::atomic::AtomicBool,
    /// Each room's recent arrival rate, for adaptive proof of work.
    pub arrivals: crate::rooms::arrival_rate::ArrivalRates,
    /// Waiting places' polls answered from memory ([`crate::rooms::board`]).
    pub room_boards: crate::rooms::board::RoomBoards,
    namespaces: Cache<NamespaceId, Arc<NamespaceConfig>>,
    credentials: Cache<[u8; 32], Option<Arc<CredentialRecord>>>,
    subject_keys: Cache<String, Option<SubjectKey>>,
    allowed_origins: Cache<(), Arc<Vec<String>>>,
    /// The published pass keys, live first ([`Gateway::pass_keys`]).
    pass_keys: Cache<(), Arc<Vec<PassKey>>>,
    /// The rebuild of each application that this process has in flight (see
    /// [`Gateway::ensure_projection`]): its waiters watch it, none of them owns it.
    rebuilds: Flights,
    lookups: LookupBudget,
    fallback: PgBudget,
    command_reads: PgBudget,
}

impl Gateway {
    /// The same gateway, its admission ticker on connections of its own.
    pub fn with_ticker_pool(self, ticker_pg: PgPool) -> Self {
        Self { ticker_pg, ..self }
    }

    pub fn new(pg: PgPool, redis: Projection, tickets: TicketKeys, config: GatewayConfig) -> Self {
        let ttl = Duration::from_millis(config.config_cache_ttl_ms.max(1));
        Self {
            committer: sluice_durable::lifecycle::group_commit::start(
                pg.clone(),
                config.group_commit.clone(),
            ),
            room_joins: sluice_store::rooms::join::start(pg.clone(), config.group_commit.clone()),
            pass_heartbeats: sluice_store::rooms::heartbeats::start(
                pg.clone(),
                config.group_commit.clone(),
            ),
            place_leaves: sluice_store::rooms::leaves::start(
                pg.clone(),
                config.group_commit.clone(),
            ),
            intake: IntakeBatcher::new(redis.clone(), config.intake_batch_max),
            namespaces: Cache::builder()
                .time_to_live(ttl)
                .max_capacity(10_000)
                .build(),
            credentials: Cache::builder()
                .time_to_live(ttl)
                .max_capacity(100_000)
                .build(),
            subject_keys: Cache::builder()
                .time_to_live(ttl)
                .max_capacity(10_000)
                .build(),
            allowed_origins: Cache::builder().time_to_live(ttl).max_capacity(1).build(),
            pass_keys: Cache::builder()
                .time_to_live(PASS_KEYS_CACHED)
                .max_capacity(1)
                .build(),
            rebuilds: Arc::default(),
            lookups: LookupBudget::new(config.unknown_lookups_per_second),
            fallback: PgBudget::new(
                config.fallback_per_second,
                config.fallback_concurrency,
                None,
            ),
            command_reads: PgBudget::new(
                config.command_reads_per_second,
                config.command_reads_concurrency,
                Some(config.command_reads_per_subject_per_second),
            ),
            stats: GatewayStats::default(),
            reads: crate::reads::ReadCache::start(config.cache.clone(), &config.outbound, &redis),
            waiting: crate::polls::waiting_view::WaitingView::new(
                redis.clone(),
                config.polls_from_memory,
            ),
            demo: std::sync::OnceLock::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            arrivals: crate::rooms::arrival_rate::ArrivalRates::default(),
            room_boards: crate::rooms::board::RoomBoards::default(),
            ticker_pg: pg.clone(),
            pg,
            redis,
            tickets,
            config,
        }
    }

    /// The namespace's configuration; loads are single-flight per namespace, so an expiry under
    /// a burst costs one query, not one per request.
    pub async fn namespace(
        &self,
        namespace_id: NamespaceId,
    ) -> Result<Arc<NamespaceConfig>, ApiError> {
        // A hit is the common case: answered without the loader's future, which would make
        // every request's future (hyper boxes one per request) kilobytes larger.
        if let Some(config) = self.namespaces.get(&namespace_id).await {
            return Ok(config);
        }
        let pg = self.pg.clone();
        Box::pin(self.namespaces.try_get_with(namespace_id, async move {
            match tenancy::namespace_config(&pg, namespace_id).await {
                Ok(Some(config)) => Ok(Arc::new(config)),
                Ok(None) => Err(ApiError::unauthenticated(
                    "the credential's namespace is gone",
                )),
                Err(error) => Err(ApiError::from(error)),
            }
        }))
        .await
        .map_err(|e| (*e).clone())
    }

    /// A bearer credential. Found or not, the answer is cached for the cache period; a secret
    /// this process has not seen valid is looked up only within [`LookupBudget`].
    pub async fn credential(
        &self,
        secret: &str,
    ) -> Result<Option<Arc<CredentialRecord>>, ApiError> {
        let hash = sluice_store::secrets::credential_hash(secret);
        self.look_up_identity(
            &self.credentials,
            hash,
            || hash,
            || async {
                let found = tenancy::credential_by_secret(&self.pg, secret).await?;
                Ok(found.map(Arc::new))
            },
        )
        .await
    }

    /// A subject key by `kid`: its namespace and secret; looked up as [`Gateway::credential`].
    pub async fn subject_key(&self, kid: &str) -> Result<Option<SubjectKey>, ApiError> {
        let identity = || sluice_store::secrets::sha256(format!("kid:{kid}").as_bytes());
        self.look_up_identity(&self.subject_keys, kid.to_string(), identity, || async {
            let found = tenancy::subject_key(&self.pg, kid).await?;
            Ok(found.map(|(ns, secret)| (ns, Arc::new(secret))))
        })
        .await
    }

    /// One identity from `cache`, or on a miss from `query`: one query per key however many
    /// callers ask (the cache's single flight), spent from [`LookupBudget`] unless the identity
    /// was seen valid, and what it found remembered there. A refusal is not cached. `identity`
    /// is the budget's key, computed only on a miss.
    ///
    /// A hit, the common case, is answered without the miss's futures (the query's and the
    /// cache's loader, kilobytes that would otherwise be part of every request's future, which
    /// hyper boxes and copies once per request): the miss path is built and boxed only on a miss.
    async fn look_up_identity<K, V, Q>(
        &self,
        cache: &Cache<K, Option<V>>,
        key: K,
        identity: impl FnOnce() -> IdentityKey,
        query: impl FnOnce() -> Q,
    ) -> Result<Option<V>, ApiError>
    where
        K: std::hash::Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
        Q: Future<Output = Result<Option<V>, DurableError>>,
    {
        if let Some(found) = cache.get(&key).await {
            return Ok(found);
        }
        Box::pin(cache.try_get_with(key, async {
                let identity = identity();
                match self.lookups.check(&identity) {
                    Lookup::Allowed => {}
                    Lookup::KnownUnknown => {
                        return Err(ApiError::unauthenticated(
                            "the credential or subject key is not valid",
                        ));
                    }
                    Lookup::OverBudget => {
                        return Err(ApiError::unauthenticated(
                            "too many unknown credentials are being tried; this one was not checked, retry",
                        )
                        .with_retry_after_ms(1_000));
                    }
                }
                let found = query().await.map_err(ApiError::from)?;
                self.lookups.record(identity, found.is_some()).await;
                Ok(found)
            }))
            .await
            .map_err(|e| (*e).clone())
    }

    /// Whether any namespace allows this browser origin (for CORS preflights). A failure to
    /// look it up answers no: the browser then refuses, which is the safe side.
    pub async fn origin_allowed_anywhere(&self, origin: &str) -> bool {
        let pg = self.pg.clone();
        let origins = self
            .allowed_origins
            .try_get_with((), async move {
                tenancy::all_allowed_origins(&pg).await.map(Arc::new)
            })
            .await;
        origins.is_ok_and(|list| list.iter().any(|o| o == origin))
    }

    /// The published pass keys (the live one first), cached for [`PASS_KEYS_CACHED`]: after a
    /// rotation a gateway may sign with the retired key that long, which stays published for a
    /// day, so every pass it signs still verifies. `refresh` reloads at once (a pass naming a
    /// key this copy does not know); a load that fails is not cached.
    pub async fn pass_keys(&self, refresh: bool) -> Result<Arc<Vec<PassKey>>, ApiError> {
        if refresh {
            self.pass_keys.invalidate(&()).await;
        }
        let pg = self.pg.clone();
        self.pass_keys
            .try_get_with((), async move {
                sluice_store::pass_keys::published(&pg)
                    .await
                    .map(Arc::new)
                    .map_err(ApiError::from)
            })
            .await
            .map_err(|e| (*e).clone())
    }

    /// Rebuilds the application's projection if it is missing or stale, one rebuild per
    /// application in this process (across processes the rebuild's advisory lock serialises),
    /// waiting at most `rebuild_wait_ms`. Returns true when the projection is ready.
    ///
    /// The rebuild runs on a task of its own and every caller only watches it: a caller that
    /// stops waiting does not cancel it. Cancelled half-way, it would leave the projection
    /// fenced for the next caller to rebuild from the start, and under a slow PostgreSQL each
    /// attempt would be cut off again before it opened the projection.
    pub async fn ensure_projection(&self, application_id: ApplicationId) -> bool {
        let mut flight = self.rebuild_in_flight(application_id);
        let wait = Duration::from_millis(self.config.rebuild_wait_ms);
        let ready = match tokio::time::timeout(wait, flight.wait_for(Option::is_some)).await {
            Ok(Ok(ready)) => *ready == Some(true),
            _ => false,
        };
        if ready {
            self.namespaces.invalidate_all();
        }
        ready
    }

    /// The rebuild of `application_id` in flight, started if there is none.
    fn rebuild_in_flight(&self, application_id: ApplicationId) -> watch::Receiver<Option<bool>> {
        let mut rebuilds = self
            .rebuilds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(flight) = rebuilds.get(&application_id) {
            return flight.clone();
        }
        let (done, flight) = watch::channel(None);
        rebuilds.insert(application_id, flight.clone());
        let landed = Landed {
            rebuilds: self.rebuilds.clone(),
            application_id,
        };
        let (pg, redis) = (self.pg.clone(), self.redis.clone());
        tokio::spawn(async move {
            let ready = match rebuild::ensure_ready(&pg, &redis, application_id).await {
                Ok(_) => true,
                Err(error) => {
                    tracing::warn!(%application_id, %error, "projection rebuild failed");
                    false
                }
            };
            drop(landed);
            let _ = done.send(Some(ready));
        });
        flight
    }

    /// PostgreSQL, Redis and the scripts, lent to the life-cycle transitions.
    pub fn stores(&self) -> Stores<'_> {
        Stores {
            pg: &self.pg,
            redis: &self.redis,
        }
    }

    /// How long the Redis side of a transition the gateway makes (a cancel, a `:complete`) waits
    /// for a projection that is being rebuilt; the sweepers repair what is left.
    pub fn projection_patience(&self) -> Duration {
        Duration::from_millis(self.config.rebuild_wait_ms)
    }

    /// How long final statuses stay readable in Redis.
    pub fn retention_ms(&self) -> i64 {
        self.config.ticket_retention_seconds.saturating_mul(1_000)
    }

    /// A permit to ask PostgreSQL instead of Redis, within the per-process fallback budget;
    /// `503` with `Retry-After` when the budget is spent.
    pub fn fallback_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        let refused = || {
            self.stats.fallbacks_refused.fetch_add(1, Ordering::Relaxed);
            sluice_metrics::fallback_refused();
            ApiError::unavailable(
                "the status store is unavailable and the fallback budget is spent; retry shortly",
            )
        };
        let permit = self.fallback.permit(None).map_err(|_| refused())?;
        self.stats
            .postgres_fallbacks
            .fetch_add(1, Ordering::Relaxed);
        sluice_metrics::postgres_fallback();
        Ok(permit)
    }
}

impl Gateway {
    /// A permit for a command read that only PostgreSQL answers, within the process's budget
    /// and, for a subject token, the subject's own rate.
    pub fn command_read_permit(&self, caller: &Caller) -> Result<OwnedSemaphorePermit, ApiError> {
        let subject = caller.subject().map(|s| (caller.namespace_id, s));
        self.command_reads.permit(subject).map_err(|refused| {
            sluice_metrics::command_read_refused(match refused {
                Refused::Subject { .. } => "subject",
                Refused::Process => "process",
            });
            match refused {
                Refused::Subject { retry_after } => ApiError::new(
                    ErrorCode::RateLimited,
                    "this subject reads commands faster than its budget allows; retry after the wait",
                )
                .with_retry_after_ms(
                    u64::try_from(retry_after.as_millis())
                        .unwrap_or(u64::MAX)
                        .max(1),
                ),
                Refused::Process => ApiError::unavailable(
                    "the command read budget of this gateway is spent; retry shortly",
                ),
            }
        })
    }
}

/// Rebuilds a projection the intake found not ready, one caller per application in this process.
impl sluice_durable::lifecycle::enqueue::Readiness for Gateway {
    async fn ensure(&self, application_id: ApplicationId) -> bool {
        self.ensure_projection(application_id).await
    }
}

/// Rebuilds in flight by application: each one's outcome (None until it ends).
type Flights = Arc<std::sync::Mutex<HashMap<ApplicationId, watch::Receiver<Option<bool>>>>>;

/// Takes a finished (or panicked) rebuild out of [`Gateway`]'s flights, so the next caller
/// starts a new one.
struct Landed {
    rebuilds: Flights,
    application_id: ApplicationId,
}

impl Drop for Landed {
    fn drop(&mut self) {
        self.rebuilds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&self.application_id);
    }
}
