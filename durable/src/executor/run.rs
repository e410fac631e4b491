//! The executor loop: admit → claim → handle → land → mirror, woken by `LISTEN` (a hint) or a
//! tick, with lease renewal and sweepers beside it. SIGTERM (the shutdown token) stops admitting
//! and lets every batch in hand finish.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::Pool;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::catalog::{self, Application, runnable};
use super::claim::{self, Claimed};
use super::config::ExecutorConfig;
use super::land::{Mirror, Waiting, mirror_current, mirror_terminal, mirror_waiting};
use super::quota::{self, Landed};
use super::webhook::{self, Deps, Target, WebhookClient};
use super::{reconcile, sweep};
use crate::DurableError;
use crate::declaration::{CommandDecl, HandlerDecl};
use crate::outbox::group_commit::OUTBOX_CHANNEL;
use crate::outbox::rfc3339;
use crate::projection::execution::{
    Admission, AdmitLimits, AdmittedHead, RateKey, Requeued, admit, renew, requeue,
};
use crate::projection::{AppKeys, Scripts, rebuild};

/// A row this executor holds, and the lease zsets of its permits (renewed with the row).
#[derive(Debug, Clone)]
struct Held {
    application_id: Uuid,
    leases: Vec<String>,
}

pub struct Executor {
    pg: PgPool,
    redis: Pool,
    scripts: Scripts,
    config: ExecutorConfig,
    /// Leases are taken in this name; a result lands only while the row's lease is still ours.
    owner: Uuid,
    held: Mutex<HashMap<Uuid, Held>>,
    /// The catalog the loop loaded last, shared with the sweepers.
    catalog: std::sync::RwLock<Vec<Application>>,
    wake: Notify,
    webhooks: WebhookClient,
    /// Webhook commands in hand; a draining executor waits for them.
    in_hand: TaskTracker,
}

impl Executor {
    pub fn new(pg: PgPool, redis: Pool, config: ExecutorConfig) -> Arc<Self> {
        Arc::new(Self {
            pg,
            redis,
            scripts: Scripts::new(),
            config,
            owner: Uuid::now_v7(),
            held: Mutex::new(HashMap::new()),
            catalog: std::sync::RwLock::new(Vec::new()),
            wake: Notify::new(),
            webhooks: WebhookClient::new(),
            in_hand: TaskTracker::new(),
        })
    }

    pub fn owner(&self) -> Uuid {
        self.owner
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
        let mut refreshed = tokio::time::Instant::now() - Duration::from_secs(3600);
        let refresh = Duration::from_millis(self.config.catalog_refresh_ms);
        tracing::info!(owner = %self.owner, "executor running");
        while !shutdown.is_cancelled() {
            if refreshed.elapsed() >= refresh {
                match catalog::load(&self.pg, &self.redis, &self.scripts).await {
                    Ok(loaded) => {
                        apps = loaded;
                        refreshed = tokio::time::Instant::now();
                        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = apps.clone();
                    }
                    Err(error) => {
                        // Tried again after the same interval, not on every pass of the loop.
                        refreshed = tokio::time::Instant::now();
                        crate::metrics::storage_error(&error);
                        tracing::warn!(%error, "cannot load the catalog")
                    }
                }
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
                    Ok(heads) if !heads.is_empty() => {
                        admitted = true;
                        let this = self.clone();
                        let app = app.clone();
                        let shutdown = shutdown.clone();
                        batches.spawn(async move {
                            this.process(&app, heads, &shutdown).await;
                            drop(slot);
                            this.wake.notify_one();
                        });
                    }
                    Ok(_) => {}
                    Err(error) => {
                        crate::metrics::storage_error(&error);
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

    async fn admit(&self, app: &Application) -> Result<Vec<AdmittedHead>, DurableError> {
        let keys = AppKeys::new(app.id);
        let limits = AdmitLimits {
            min_generation: app.generation,
            max_heads: self.config.batch_size,
            scan_limit: self.config.scan_limit,
            lease_ms: self.config.lease_ms,
            lookahead: self.config.lookahead,
        };
        match admit(&self.redis, &self.scripts, &keys, limits).await? {
            Admission::Heads(heads) => Ok(heads),
            Admission::NotReady => {
                rebuild::ensure_ready(&self.pg, &self.redis, app.id).await?;
                Ok(Vec::new())
            }
        }
    }

    /// Claims, handles and lands one admitted batch.
    async fn process(
        self: &Arc<Self>,
        app: &Application,
        heads: Vec<AdmittedHead>,
        shutdown: &CancellationToken,
    ) {
        let keys = AppKeys::new(app.id);
        let ids: Vec<Uuid> = heads.iter().map(|h| h.command_id).collect();
        let external: Vec<Uuid> = heads
            .iter()
            .filter(|h| {
                parse_suffix(&h.queue_suffix)
                    .and_then(|(ns, cmd)| app.commands.get(&(ns, cmd.to_string())))
                    .is_some_and(|decl| matches!(decl.handler, HandlerDecl::Webhook { .. }))
            })
            .map(|h| h.command_id)
            .collect();
        if shutdown.is_cancelled() {
            // Admitted just as shutdown began: a draining executor starts nothing new, so the
            // heads go back to their queues (and their permits with them) unclaimed.
            self.requeue_heads(&keys, &heads).await;
            return;
        }
        let claimed =
            match claim::claim(&self.pg, &ids, &external, self.owner, self.config.lease_ms).await {
                Ok(claimed) => claimed,
                Err(error) => {
                    // Nothing was claimed: the rows still wait in PostgreSQL, so they go back to
                    // their queues in their original places.
                    crate::metrics::storage_error(&error);
                    tracing::warn!(%error, "claim failed; heads go back to their queues");
                    self.requeue_heads(&keys, &heads).await;
                    return;
                }
            };
        self.give_back_unclaimed(app, &keys, &heads, &claimed).await;
        self.hold(app, &keys, &claimed);
        let mut by_pool: HashMap<(Uuid, String), Vec<Claimed>> = HashMap::new();
        for row in claimed {
            let handler = app
                .commands
                .get(&(row.namespace_id, row.command.clone()))
                .filter(|decl| runnable(decl))
                .map(|decl| decl.handler.clone());
            match handler {
                Some(HandlerDecl::Quota { pool, .. }) => {
                    by_pool
                        .entry((row.namespace_id, pool))
                        .or_default()
                        .push(row);
                }
                Some(HandlerDecl::Webhook { url, timeout_ms }) => {
                    self.start_webhook(app, &keys, row, url, timeout_ms, shutdown);
                }
                _ => self.requeue_claimed(&keys, &[row]).await,
            }
        }
        for ((namespace_id, pool), rows) in by_pool {
            let transactions: Vec<Vec<Claimed>> = if self.config.batch_quota {
                vec![rows]
            } else {
                rows.into_iter().map(|row| vec![row]).collect()
            };
            for batch in transactions {
                match quota::allocate(&self.pg, namespace_id, &pool, &batch, self.owner).await {
                    Ok(landed) => {
                        // Before the results show: whoever sees an allocation's result and
                        // reads the pool's views again finds the old value gone.
                        if landed.iter().any(|done| done.status == "succeeded") {
                            let pool_dependency = [format!("pool:{pool}")];
                            if let Err(error) = crate::projection::cache::invalidate(
                                &self.redis,
                                &self.scripts,
                                app.id,
                                namespace_id,
                                &pool_dependency,
                            )
                            .await
                            {
                                tracing::warn!(%error, %pool, "cached views of the pool not invalidated; they expire by age");
                            }
                        }
                        self.mirror_landed(&keys, &batch, &landed).await
                    }
                    Err(error) => {
                        crate::metrics::storage_error(&error);
                        tracing::warn!(%error, %pool, "quota batch failed; its commands go back to their queue");
                        self.requeue_claimed(&keys, &batch).await;
                    }
                }
                self.release(&batch);
            }
        }
    }

    /// Heads that were admitted but not claimed: mirror their real state and free the permits.
    async fn give_back_unclaimed(
        &self,
        app: &Application,
        keys: &AppKeys,
        heads: &[AdmittedHead],
        claimed: &[Claimed],
    ) {
        let unclaimed: Vec<Uuid> = heads
            .iter()
            .map(|h| h.command_id)
            .filter(|id| !claimed.iter().any(|c| c.id == *id))
            .collect();
        if unclaimed.is_empty() {
            return;
        }
        let states = match claim::current_state(&self.pg, &unclaimed).await {
            Ok(states) => states,
            Err(error) => {
                // Put them back as waiting; if one of them ended meanwhile, the next claim of it
                // fails and mirrors its real state.
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, application_id = %app.id, "unclaimed heads go back to their queues");
                let back: Vec<AdmittedHead> = heads
                    .iter()
                    .filter(|h| unclaimed.contains(&h.command_id))
                    .cloned()
                    .collect();
                self.requeue_heads(keys, &back).await;
                return;
            }
        };
        for row in &states {
            mirror_current(
                &self.redis,
                &self.scripts,
                keys,
                self.config.retention_seconds,
                row,
            )
            .await;
        }
    }

    async fn mirror_landed(&self, keys: &AppKeys, batch: &[Claimed], landed: &[Landed]) {
        for done in landed {
            let Some(row) = batch.iter().find(|c| c.id == done.id) else {
                continue;
            };
            mirror_terminal(
                &self.redis,
                &self.scripts,
                keys,
                self.config.retention_seconds,
                Mirror {
                    id: row.id,
                    namespace_id: row.namespace_id,
                    command: &row.command,
                    resource_key: &row.resource_key,
                    status: done.status,
                    updated_at: done.updated_at,
                    result: done.result.as_ref(),
                    error: done
                        .error
                        .as_ref()
                        .map(|(code, message)| (*code, message.as_str())),
                },
            )
            .await;
        }
    }

    /// Gives rows this executor could not handle back to their queues.
    async fn requeue_claimed(&self, keys: &AppKeys, rows: &[Claimed]) {
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        let back = match claim::unclaim(&self.pg, &ids, self.owner).await {
            Ok(back) => back,
            Err(error) => {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "unclaim failed; the leases will lapse and be rescued");
                return;
            }
        };
        for row in rows.iter().filter(|r| back.contains(&r.id)) {
            mirror_waiting(&self.redis, &self.scripts, keys, Waiting::retry_of(row)).await;
        }
    }

    /// Puts admitted heads back into their queues without asking PostgreSQL (used when it
    /// cannot be asked): each keeps its original sequence, its permits go back.
    async fn requeue_heads(&self, keys: &AppKeys, heads: &[AdmittedHead]) {
        for head in heads {
            let Some((namespace_id, command)) = parse_suffix(&head.queue_suffix) else {
                continue;
            };
            let back = Requeued {
                command_id: head.command_id,
                namespace_id,
                command,
                queue_suffix: &head.queue_suffix,
                queue_seq: head.queue_seq,
                status: "accepted",
                updated_at: rfc3339(chrono::Utc::now()),
            };
            if let Err(error) = requeue(&self.redis, &self.scripts, keys, &back).await {
                crate::metrics::storage_error(&error);
                tracing::warn!(command_id = %head.command_id, %error, "head not requeued; a rebuild restores it");
            }
        }
    }

    fn hold(&self, app: &Application, keys: &AppKeys, rows: &[Claimed]) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows {
            let leases = app
                .commands
                .get(&(row.namespace_id, row.command.clone()))
                .map(|decl| leases_of(keys, row, decl))
                .unwrap_or_default();
            held.insert(
                row.id,
                Held {
                    application_id: app.id,
                    leases,
                },
            );
        }
    }

    /// Runs one webhook command to its end on its own task: its retries may wait for seconds
    /// and must not hold a batch slot.
    fn start_webhook(
        self: &Arc<Self>,
        app: &Application,
        keys: &AppKeys,
        row: Claimed,
        url: String,
        timeout_ms: u32,
        shutdown: &CancellationToken,
    ) {
        let Some(decl) = app.commands.get(&(row.namespace_id, row.command.clone())) else {
            return;
        };
        let Some(namespace) = app.namespaces.get(&row.namespace_id) else {
            tracing::error!(namespace_id = %row.namespace_id, "namespace missing from the catalog; its lease lapses and it is retried");
            return;
        };
        let target = Target {
            url,
            timeout: Duration::from_millis(u64::from(timeout_ms)),
            secret: namespace.webhook_secret.clone(),
            namespace: namespace.name.clone(),
            leases: leases_of(keys, &row, decl),
            rate_keys: rate_keys_of(keys, &row, decl),
        };
        let this = self.clone();
        let keys = keys.clone();
        let shutdown = shutdown.clone();
        self.in_hand.spawn(async move {
            let deps = Deps {
                pg: &this.pg,
                redis: &this.redis,
                scripts: &this.scripts,
                client: &this.webhooks,
                owner: this.owner,
                keys,
                retention_seconds: this.config.retention_seconds,
                retry_base: Duration::from_millis(this.config.retry_base_ms),
                retry_max: Duration::from_millis(this.config.retry_max_ms),
            };
            match webhook::run(&deps, &row, &target, &shutdown).await {
                Ok(end) => tracing::debug!(command_id = %row.id, ?end, "webhook command let go"),
                // PostgreSQL failed mid-way: the row keeps its lease until it lapses, then the
                // sweeper puts it back in line (in doubt, so a past-deadline one is reviewed).
                Err(error) => {
                    crate::metrics::storage_error(&error);
                    tracing::warn!(command_id = %row.id, %error, "webhook command dropped; its lease lapses and the sweeper takes over");
                }
            }
            this.release(std::slice::from_ref(&row));
            this.wake.notify_one();
        });
    }

    fn release(&self, rows: &[Claimed]) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows {
            held.remove(&row.id);
        }
    }

    /// Renews every held lease every third of the lease period, in PostgreSQL and Redis.
    async fn renew_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let every = Duration::from_millis(self.config.lease_ms / 3);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
            let snapshot: Vec<(Uuid, Held)> = {
                let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                held.iter().map(|(id, h)| (*id, h.clone())).collect()
            };
            if snapshot.is_empty() {
                continue;
            }
            let ids: Vec<Uuid> = snapshot.iter().map(|(id, _)| *id).collect();
            if let Err(error) = claim::renew(&self.pg, &ids, self.owner, self.config.lease_ms).await
            {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "lease renewal failed in PostgreSQL");
            }
            let mut by_app: HashMap<Uuid, Vec<(String, Uuid)>> = HashMap::new();
            for (id, held) in snapshot {
                let leases = by_app.entry(held.application_id).or_default();
                leases.extend(held.leases.into_iter().map(|lease| (lease, id)));
            }
            for held in by_app.into_values() {
                if let Err(error) =
                    renew(&self.redis, &self.scripts, &held, self.config.lease_ms).await
                {
                    crate::metrics::storage_error(&error);
                    tracing::warn!(%error, "lease renewal failed in Redis");
                }
            }
        }
    }

    async fn sweep_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let every = Duration::from_millis(self.config.sweep_interval_ms);
        let mut cursor = reconcile::Cursor::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.cancelled() => return,
            }
            let retention = self.config.retention_seconds;
            if let Err(error) =
                sweep::rescue_expired_leases(&self.pg, &self.redis, &self.scripts, retention).await
            {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "lease sweeper failed");
            }
            if let Err(error) =
                sweep::review_overdue_running(&self.pg, &self.redis, &self.scripts, retention).await
            {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "running-deadline sweeper failed");
            }
            if let Err(error) =
                sweep::expire_waiting(&self.pg, &self.redis, &self.scripts, retention).await
            {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "expiry sweeper failed");
            }
            if let Err(error) = sweep::prune(&self.pg, &self.redis, retention).await {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "retention sweeper failed");
            }
            let apps = self
                .catalog
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let ids: Vec<Uuid> = apps.iter().map(|app| app.id).collect();
            if let Err(error) = reconcile::reconcile_projection(
                &self.pg,
                &self.redis,
                &self.scripts,
                &ids,
                &mut cursor,
                retention,
                Duration::from_millis(self.config.reconcile_grace_ms),
            )
            .await
            {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "projection reconciler failed");
            }
            if let Err(error) = sweep::reconcile_lapsed_permits(
                &self.pg,
                &self.redis,
                &self.scripts,
                &apps,
                retention,
            )
            .await
            {
                crate::metrics::storage_error(&error);
                tracing::warn!(%error, "lapsed-permit sweeper failed");
            }
        }
    }

    /// Wakes the loop on every `NOTIFY` of the outbox; reconnects on failure. Only a hint: the
    /// tick finds the same work a little later.
    async fn listen(self: Arc<Self>, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let mut listener = match PgListener::connect_with(&self.pg).await {
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

/// The lease zsets of every permit `row` holds: its application's, its command's, its
/// resource's, and each limit key's with a concurrency limit.
fn leases_of(keys: &AppKeys, row: &Claimed, decl: &CommandDecl) -> Vec<String> {
    let suffix = AppKeys::queue_suffix(row.namespace_id, &row.command, &row.resource_key);
    let mut leases = vec![
        keys.application_leases(),
        keys.command_leases(row.namespace_id, &row.command),
        keys.resource_leases(&suffix),
    ];
    for [template, key] in &row.limit_keys {
        if decl
            .limits
            .iter()
            .any(|l| &l.key == template && l.max_in_flight.is_some())
        {
            leases.push(keys.limit_leases(row.namespace_id, key));
        }
    }
    leases
}

/// The start buckets of `row`'s rate-limited limit keys.
fn rate_keys_of(keys: &AppKeys, row: &Claimed, decl: &CommandDecl) -> Vec<RateKey> {
    row.limit_keys
        .iter()
        .filter_map(|[template, key]| {
            let limit = decl.limits.iter().find(|l| &l.key == template)?;
            let per_second = limit.per_second?;
            Some(RateKey {
                bucket: keys.limit_bucket(row.namespace_id, key),
                per_second,
                burst: limit.burst.unwrap_or(per_second),
            })
        })
        .collect()
}

/// `"<namespace uuid>:<command>:<resource>"` → (namespace, command).
fn parse_suffix(suffix: &str) -> Option<(Uuid, &str)> {
    let namespace = Uuid::parse_str(suffix.get(..36)?).ok()?;
    let rest = suffix.get(37..)?;
    let command = rest.split(':').next()?;
    Some((namespace, command))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_suffixes_parse_back() {
        let ns = Uuid::now_v7();
        let suffix = AppKeys::queue_suffix(ns, "claim", "offer:with:colons");
        assert_eq!(parse_suffix(&suffix), Some((ns, "claim")));
        assert_eq!(parse_suffix("short"), None);
    }
}
