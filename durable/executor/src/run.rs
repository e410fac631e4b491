//! The executor loop: `admit` → `claim` → handle → `land`, woken by `LISTEN` (a hint) or a tick,
//! with renewals and sweepers beside it. SIGTERM (the shutdown token) stops admitting and lets
//! every batch in hand finish. The transitions themselves are [`sluice_durable::lifecycle`]'s; this loop
//! decides when to run them and which handler runs a command.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::attempts::{Attempts, Hold};
use super::catalog::{self, Application, runnable};
use super::executor_config::ExecutorConfig;
use super::quota;
use super::webhook::{self, Deps, Target, WebhookClient};
use sluice_durable::DurableError;
use sluice_durable::declaration::{CommandDecl, HandlerDecl, QuotaMode};
use sluice_durable::faults::{self, Point};
use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_durable::lifecycle::Stores;
use sluice_durable::lifecycle::claim::{
    self, AdmitLimits, AdmittedHead, Claim, ClaimOrder, Claimed, RateKey, split_suffix,
};
use sluice_durable::lifecycle::end::Projecting;
use sluice_durable::lifecycle::group_commit::OUTBOX_CHANNEL;
use sluice_durable::lifecycle::held;
use sluice_durable::lifecycle::land_batch::{self, Landed};
use sluice_model::CommandStatus;
use sluice_redis::AppKeys;
use sluice_redis::Projection;

pub struct Executor {
    pg: PgPool,
    /// Where `LISTEN` connects when `pg` goes through a transaction-mode pooler (which would
    /// hand the listening session's server connection to other clients); `pg` otherwise.
    session: Option<PgPool>,
    redis: Projection,
    config: ExecutorConfig,
    /// Rows are leased in this name (`lease_owner`); each start is its own attempt.
    owner: Uuid,
    attempts: Attempts,
    /// The catalog the loop loaded last, shared with the sweepers.
    catalog: std::sync::RwLock<Vec<Application>>,
    wake: Notify,
    webhooks: WebhookClient,
    /// Webhook commands in hand; a draining executor waits for them.
    in_hand: TaskTracker,
}

/// Where a webhook command goes, and when its admission took its first start tokens.
struct Delivery {
    url: String,
    timeout_ms: u32,
    admitted_at: Instant,
}

/// Heads admitted together, and when (their permits' leases count from then).
struct Admitted {
    generation: i64,
    heads: Vec<AdmittedHead>,
    at: Instant,
}

impl Executor {
    pub fn new(pg: PgPool, redis: Projection, config: ExecutorConfig) -> Arc<Self> {
        Self::new_with_session(pg, None, redis, config)
    }

    /// [`Executor::new`] whose `LISTEN` connects to `session` (a URL with sessions of its own,
    /// connected when first needed) rather than through `pg`.
    pub fn new_with_session(
        pg: PgPool,
        session: Option<PgConnectOptions>,
        redis: Projection,
        config: ExecutorConfig,
    ) -> Arc<Self> {
        let session = session.map(|options| {
            PgPoolOptions::new()
                .max_connections(1)
                .connect_lazy_with(options.application_name("sluice-listen"))
        });
        let webhooks = WebhookClient::new(&config.outbound);
        Arc::new(Self {
            pg,
            session,
            redis,
            config,
            owner: Uuid::now_v7(),
            attempts: Attempts::default(),
            catalog: std::sync::RwLock::new(Vec::new()),
            wake: Notify::new(),
            webhooks,
            in_hand: TaskTracker::new(),
        })
    }

    pub fn owner(&self) -> Uuid {
        self.owner
    }

    fn stores(&self) -> Stores<'_> {
        Stores {
            pg: &self.pg,
            redis: &self.redis,
        }
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.config.lease_ms)
    }

    fn patience(&self) -> Duration {
        Duration::from_millis(self.config.projection_patience_ms)
    }

    fn retention_ms(&self) -> i64 {
        self.config.retention_seconds.saturating_mul(1_000)
    }

    fn projecting(&self) -> Projecting {
        Projecting {
            retention_ms: self.retention_ms(),
            patience: self.patience(),
        }
    }

    /// Runs until `shutdown`, then finishes the batches in hand.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let helpers = TaskTracker::new();
        // Renewal outlives the shutdown signal: it stops only once the work in hand has
        // landed. A drained handler may still wait on its backend, and a lease that lapsed
        // meanwhile would hand its command (and its permits) to another executor while it runs.
        let renewals = CancellationToken::new();
        helpers.spawn(self.clone().listen(shutdown.clone()));
        helpers.spawn(self.clone().renew_loop(renewals.clone()));
        helpers.spawn(self.clone().sweep_loop(shutdown.clone()));
        let batches = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(self.config.parallel_batches));
        let mut apps: Vec<Application> = Vec::new();
        let mut refreshed = Instant::now() - Duration::from_secs(3600);
        let refresh = Duration::from_millis(self.config.catalog_refresh_ms);
        tracing::info!(owner = %self.owner, "executor running");
        while !shutdown.is_cancelled() {
            if refreshed.elapsed() >= refresh {
                match catalog::load(&self.pg, &self.redis).await {
                    Ok(loaded) => {
                        apps = loaded;
                        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = apps.clone();
                    }
                    Err(error) => {
                        sluice_metrics::storage_error(&error);
                        tracing::warn!(%error, "cannot load the catalog")
                    }
                }
                // Tried again after the same interval, not on every pass of the loop.
                refreshed = Instant::now();
            }
            let mut admitted = false;
            for app in &apps {
                // A free batch slot, unless shutdown comes first: a draining executor admits
                // nothing new.
                let slot = tokio::select! {
                    slot = slots.clone().acquire_owned() => slot,
                    _ = shutdown.cancelled() => break,
                };
                let Ok(slot) = slot else { break };
                if shutdown.is_cancelled() {
                    break;
                }
                match self.admit(app).await {
                    Ok(Some(batch)) => {
                        admitted = true;
                        let this = self.clone();
                        let app = app.clone();
                        let shutdown = shutdown.clone();
                        batches.spawn(async move {
                            this.process(&app, batch, &shutdown).await;
                            drop(slot);
                            this.wake.notify_one();
                        });
                    }
                    Ok(None) => {}
                    Err(error) => {
                        sluice_metrics::storage_error(&error);
                        tracing::warn!(application_id = %app.id, %error, "admission failed")
                    }
                }
            }
            if !admitted {
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(self.config.tick_ms)) => {}
                    _ = shutdown.cancelled() => {}
                }
            }
        }
        tracing::info!("executor draining");
        batches.close();
        batches.wait().await;
        self.in_hand.close();
        self.in_hand.wait().await;
        renewals.cancel();
        helpers.close();
        helpers.wait().await;
        tracing::info!("executor stopped");
    }

    /// `admit`: up to a batch of heads of `app`, or None. A projection that is not trusted is
    /// rebuilt first.
    async fn admit(&self, app: &Application) -> Result<Option<Admitted>, DurableError> {
        let keys = AppKeys::new(app.id);
        let limits = AdmitLimits {
            min_generation: app.generation,
            max_heads: self.config.batch_size,
            scan_limit: self.config.scan_limit,
            lease_ms: self.config.lease_ms,
            lookahead: self.config.lookahead,
        };
        let at = Instant::now();
        Ok(claim::admit(self.stores(), &keys, limits)
            .await?
            .map(|batch| Admitted {
                generation: batch.generation,
                heads: batch.heads,
                at,
            }))
    }

    /// `claim`s, handles and lands one admitted batch.
    async fn process(
        self: &Arc<Self>,
        app: &Application,
        batch: Admitted,
        shutdown: &CancellationToken,
    ) {
        let keys = AppKeys::new(app.id);
        if let Err(error) = faults::pass(Point::AfterAdmit, app.id).await {
            tracing::warn!(%error, "stopped after the admission");
            return;
        }
        if shutdown.is_cancelled() {
            // Admitted just as shutdown began: a draining executor starts nothing new, so the
            // heads go back to their queues (and their permits with them) unclaimed.
            claim::requeue_heads(self.stores(), &keys, &batch.heads).await;
            return;
        }
        let external: Vec<CommandId> = batch
            .heads
            .iter()
            .filter(|h| {
                self.decl(app, &h.queue_suffix)
                    .is_some_and(|decl| matches!(decl.handler, HandlerDecl::Webhook { .. }))
            })
            .map(|h| h.command_id)
            .collect();
        let order = ClaimOrder {
            application_id: app.id,
            generation: batch.generation,
            heads: &batch.heads,
            external: &external,
            owner: self.owner,
            lease: self.lease(),
            retention_ms: self.retention_ms(),
            patience: self.patience(),
        };
        let claimed = match claim::claim(self.stores(), &order).await {
            Ok(Claim::Claimed(claimed)) => claimed,
            Ok(Claim::Stale) => {
                tracing::info!(application_id = %app.id, "projection rebuilt since the admission; its heads are queued again");
                return;
            }
            Err(error) => {
                // Nothing was claimed: the rows still wait in PostgreSQL, so they go back to
                // their queues in their original places.
                sluice_metrics::storage_error(&error);
                tracing::warn!(%error, "claim failed; heads go back to their queues");
                claim::requeue_heads(self.stores(), &keys, &batch.heads).await;
                return;
            }
        };
        let mut by_pool: HashMap<(NamespaceId, String), Vec<Claimed>> = HashMap::new();
        let mut holds = quota::Holds::new();
        for claimed in claimed {
            let permits = keys.command_permits(
                claimed.row.namespace_id,
                &claimed.row.command,
                &claimed.row.resource_key,
                &claimed.limit_keys,
            );
            let hold = self.attempts.hold(
                claimed.attempt,
                claimed.row.id,
                app.id,
                permits,
                batch.at,
                self.lease(),
            );
            let handler = app
                .commands
                .get(&(claimed.row.namespace_id, claimed.row.command.clone()))
                .filter(|decl| runnable(decl))
                .map(|decl| decl.handler.clone());
            match handler {
                Some(HandlerDecl::Quota { pool, mode }) => {
                    if let QuotaMode::Reserved {
                        reservation_seconds,
                    } = mode
                    {
                        holds.insert(claimed.row.id, reservation_seconds);
                    }
                    by_pool
                        .entry((claimed.row.namespace_id, pool))
                        .or_default()
                        .push(claimed);
                }
                Some(HandlerDecl::Webhook { url, timeout_ms }) => {
                    let delivery = Delivery {
                        url,
                        timeout_ms,
                        admitted_at: batch.at,
                    };
                    self.start_webhook(app, &keys, claimed, hold, delivery, shutdown);
                }
                _ => self.requeue(&keys, &claimed).await,
            }
        }
        for ((namespace_id, pool), rows) in by_pool {
            let transactions: Vec<Vec<Claimed>> = if self.config.batch_quota {
                vec![rows]
            } else {
                rows.into_iter().map(|row| vec![row]).collect()
            };
            for batch in transactions {
                self.allocate(app, &keys, namespace_id, &pool, &batch, &holds)
                    .await;
            }
        }
    }

    /// The declaration of the command a queue suffix names.
    fn decl<'a>(&self, app: &'a Application, suffix: &str) -> Option<&'a CommandDecl> {
        let (namespace, command, _) = split_suffix(suffix)?;
        app.commands.get(&(namespace, command.to_string()))
    }

    /// The quota handler for one pool's rows, then their Redis sides. Its transaction is short
    /// and fenced by each row's attempt, so a stopped attempt needs no abandoning: a row rescued
    /// meanwhile is simply not decided by it.
    async fn allocate(
        &self,
        app: &Application,
        keys: &AppKeys,
        namespace_id: NamespaceId,
        pool: &str,
        rows: &[Claimed],
        holds: &quota::Holds,
    ) {
        match quota::allocate(&self.pg, namespace_id, pool, rows, holds).await {
            Ok(landed) => {
                // Before the results show: whoever sees an allocation's result and reads the
                // pool's views again finds the old value gone.
                if landed
                    .iter()
                    .any(|done| done.status == CommandStatus::Succeeded)
                {
                    sluice_durable::quotas::invalidate_pool(
                        &self.redis,
                        app.id,
                        namespace_id,
                        pool,
                    )
                    .await;
                }
                self.project_landed(keys, rows, &landed).await;
            }
            Err(error) => {
                sluice_metrics::storage_error(&error);
                tracing::warn!(%error, %pool, "quota batch failed; its commands go back to their queue");
                for row in rows {
                    self.requeue(keys, row).await;
                }
            }
        }
        for row in rows {
            self.attempts.release(row.attempt);
        }
    }

    async fn project_landed(&self, keys: &AppKeys, batch: &[Claimed], landed: &[Landed]) {
        land_batch::project_landed(self.stores(), keys, batch, landed, self.projecting()).await;
    }

    /// `requeue`: a row this executor cannot handle goes back to its queue.
    async fn requeue(&self, keys: &AppKeys, claimed: &Claimed) {
        if let Err(error) = held::requeue_held(self.stores(), keys, claimed, self.patience()).await
        {
            sluice_metrics::storage_error(&error);
            tracing::warn!(command_id = %claimed.row.id, %error, "not given back; its lease lapses and it is rescued");
        }
        self.attempts.release(claimed.attempt);
    }

    /// Runs one webhook command to its end on its own task: its retries may wait for seconds
    /// and must not hold a batch slot. A stopped attempt abandons its request: its lease may
    /// have lapsed, and another executor may already be starting the command again.
    fn start_webhook(
        self: &Arc<Self>,
        app: &Application,
        keys: &AppKeys,
        claimed: Claimed,
        hold: Hold,
        delivery: Delivery,
        shutdown: &CancellationToken,
    ) {
        let Some(decl) = app
            .commands
            .get(&(claimed.row.namespace_id, claimed.row.command.clone()))
        else {
            return;
        };
        let Some(namespace) = app.namespaces.get(&claimed.row.namespace_id) else {
            tracing::error!(namespace_id = %claimed.row.namespace_id, "namespace missing from the catalog; its lease lapses and it is retried");
            return;
        };
        let target = Target {
            url: delivery.url,
            timeout: Duration::from_millis(u64::from(delivery.timeout_ms)),
            secrets: namespace.webhook_secrets.clone(),
            namespace: namespace.name.clone(),
            rate_keys: rate_keys_of(keys, &claimed, decl),
            admitted_at: delivery.admitted_at,
            fence: hold.fence,
        };
        let this = self.clone();
        let keys = keys.clone();
        let shutdown = shutdown.clone();
        let span = crate::tracing_context::attempt_span(&claimed);
        self.in_hand.spawn(tracing::Instrument::instrument(async move {
            let deps = Deps {
                pg: &this.pg,
                redis: &this.redis,
                client: &this.webhooks,
                keys,
                retention_seconds: this.config.retention_seconds,
                retry_base: Duration::from_millis(this.config.retry_base_ms),
                retry_max: Duration::from_millis(this.config.retry_max_ms),
                patience: this.patience(),
            };
            tokio::select! {
                ended = webhook::run(&deps, &claimed, &target, &shutdown) => match ended {
                    Ok(webhook::End::Withheld) => {
                        tracing::warn!(command_id = %claimed.row.id, attempt = %claimed.attempt, "webhook request withheld: the attempt's lease ran out before it went out");
                    }
                    Ok(end) => tracing::debug!(command_id = %claimed.row.id, ?end, "webhook command let go"),
                    // PostgreSQL failed mid-way: the claimed keeps its lease until it lapses, then the
                    // sweeper puts it back in line (in doubt, so a past-deadline one is reviewed).
                    Err(error) => {
                        sluice_metrics::storage_error(&error);
                        tracing::warn!(command_id = %claimed.row.id, %error, "webhook command dropped; its lease lapses and the sweeper takes over");
                    }
                },
                () = hold.stop.cancelled() => {
                    tracing::warn!(command_id = %claimed.row.id, attempt = %claimed.attempt, "webhook attempt abandoned: it lost its lease");
                }
            }
            this.attempts.release(claimed.attempt);
            this.wake.notify_one();
        }, span));
    }

    /// Renews every attempt in hand every third of the lease (and stops the lost ones).
    async fn renew_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let every = self.lease() / 3;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
            self.attempts.renew(self.stores(), self.lease()).await;
        }
    }

    async fn sweep_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let every = Duration::from_millis(self.config.sweep_interval_ms);
        let mut cursor = sluice_durable::lifecycle::repair::Cursor::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
            let apps = self
                .catalog
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            super::sweepers::round(self.stores(), &self.config, &apps, &mut cursor).await;
        }
    }

    /// Wakes the loop on every `NOTIFY` of the outbox; reconnects on failure. Only a hint: the
    /// tick finds the same work a little later.
    async fn listen(self: Arc<Self>, shutdown: CancellationToken) {
        let listen_on = self.session.as_ref().unwrap_or(&self.pg);
        while !shutdown.is_cancelled() {
            let mut listener = match PgListener::connect_with(listen_on).await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::debug!(%error, "LISTEN connection failed");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        _ = shutdown.cancelled() => return,
                    }
                }
            };
            if listener.listen(OUTBOX_CHANNEL).await.is_err() {
                continue;
            }
            loop {
                tokio::select! {
                    notification = listener.recv() => match notification {
                        Ok(_) => self.wake.notify_one(),
                        Err(_) => break,
                    },
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// The start buckets of `row`'s rate-limited limit keys.
fn rate_keys_of(keys: &AppKeys, claimed: &Claimed, decl: &CommandDecl) -> Vec<RateKey> {
    claimed
        .limit_keys
        .iter()
        .filter_map(|[template, key]| {
            let limit = decl.limits.iter().find(|l| &l.key == template)?;
            let per_second = limit.per_second?;
            Some(RateKey {
                bucket: keys.limit_bucket(claimed.row.namespace_id, key),
                per_second,
                burst: limit.burst.unwrap_or(per_second),
            })
        })
        .collect()
}
