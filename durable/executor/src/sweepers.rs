//! One round of every sweeper and repair (each advisory-locked, so any number of executors run
//! them safely; a failure is logged and the next round tries again).

use std::time::Duration;

use super::catalog::Application;
use super::executor_config::ExecutorConfig;
use sluice_durable::ids::ApplicationId;
use sluice_durable::lifecycle::Stores;
use sluice_durable::lifecycle::repair::{self, AppCommands, Cursor};
use sluice_durable::lifecycle::retention;
use sluice_durable::lifecycle::sweep::{self, SweepSide};

pub async fn round(
    stores: Stores<'_>,
    config: &ExecutorConfig,
    apps: &[Application],
    cursor: &mut Cursor,
) {
    let side = SweepSide {
        retention_ms: config.retention_seconds.saturating_mul(1_000),
        patience: Duration::from_millis(config.projection_patience_ms),
    };
    let report = |what: &str, result: Result<usize, sluice_durable::DurableError>| {
        if let Err(error) = result {
            sluice_metrics::storage_error(&error);
            tracing::warn!(%error, "{what} failed");
        }
    };
    report("lease rescue", sweep::rescue(stores, side).await);
    report(
        "running-deadline review",
        sweep::review_overdue_running(stores, side).await,
    );
    report("waiting expiry", sweep::expire_waiting(stores, side).await);
    report(
        "reservation expiry",
        sluice_durable::quotas::expiry::expire_overdue(stores.pg, stores.redis).await,
    );
    report(
        "making days of commands",
        sluice_store::outbox::days::ensure_days(stores.pg)
            .await
            .map(|made| made as usize),
    );
    report(
        "retention",
        retention::prune(stores.pg, stores.redis, config.retention_seconds)
            .await
            .map(|pruned| pruned.keys_forgotten + pruned.days_dropped.len()),
    );
    let ids: Vec<ApplicationId> = apps.iter().map(|app| app.id).collect();
    report(
        "projection reconciler",
        repair::projection(
            stores,
            &ids,
            cursor,
            side,
            Duration::from_millis(config.reconcile_grace_ms),
        )
        .await,
    );
    let commands: Vec<AppCommands<'_>> = apps
        .iter()
        .map(|app| AppCommands {
            application_id: app.id,
            commands: app
                .commands
                .keys()
                .map(|(namespace, code)| (*namespace, code.as_str()))
                .collect(),
        })
        .collect();
    report(
        "permit sweeper",
        repair::permits(stores, &commands, side).await,
    );
}
