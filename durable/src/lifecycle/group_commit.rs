//! Group commit of acceptances: concurrent enqueues share one transaction ([`sluice_store::batching`]
//! cuts the batches), which inserts every command with its request key, re-checks the pause and
//! wakes the executors with one `NOTIFY`.

use sqlx::PgPool;

use super::commit::{InsertOutcome, NewCommand, insert_batch};
use crate::DurableError;
use sluice_store::batching::{BatchWriter, Batcher};

pub use sluice_store::batching::{GroupCommitConfig, GroupCommitStats};

/// The channel the executor listens on; a hint only, never needed for correctness.
pub const OUTBOX_CHANNEL: &str = "sluice_outbox";

/// Acceptances: each job a command, answered whether it was inserted or its request key named
/// one already.
pub struct Acceptances;

impl BatchWriter for Acceptances {
    type Job = NewCommand;
    type Outcome = InsertOutcome;
    const SPAN: &'static str = "acceptances";

    async fn write(
        &self,
        pool: &PgPool,
        commands: &[NewCommand],
    ) -> Result<Vec<InsertOutcome>, DurableError> {
        commit_making_days(pool, commands).await
    }

    fn counted(&self, size: usize, committed: bool) {
        sluice_metrics::group_commit_batch(size);
        if !committed {
            sluice_metrics::group_commit_failed();
        }
    }
}

/// The handle gateways submit acceptances to (see [`sluice_store::batching`]).
pub type GroupCommitter = Batcher<Acceptances>;

/// Starts the acceptances' committers.
pub fn start(pool: PgPool, config: GroupCommitConfig) -> GroupCommitter {
    Batcher::start(pool, config, Acceptances)
}

/// Commits a batch; one that met a day of `commands` not made yet (the executors that make days
/// ahead were all down, or this is the first acceptance of a fresh database's day) makes the days
/// around today and is tried once more, so intake never depends on an executor running. A batch
/// whose ids are outside those days (this gateway's clock is days off) still fails, and says why.
async fn commit_making_days(
    pool: &PgPool,
    commands: &[NewCommand],
) -> Result<Vec<InsertOutcome>, DurableError> {
    match commit_batch(pool, commands).await {
        Err(error) if sluice_store::outbox::days::is_missing_day(&error) => {
            sluice_store::outbox::days::ensure_days(pool).await?;
            commit_batch(pool, commands).await.map_err(|error| {
                if sluice_store::outbox::days::is_missing_day(&error) {
                    DurableError::CommitFailed(format!(
                        "{error}: a command id's day is outside the days PostgreSQL keeps ready \
                         (yesterday to {} days ahead); is this gateway's clock right?",
                        sluice_store::outbox::days::DAYS_AHEAD
                    ))
                } else {
                    error
                }
            })
        }
        other => other,
    }
}

async fn commit_batch(
    pool: &PgPool,
    commands: &[NewCommand],
) -> Result<Vec<InsertOutcome>, DurableError> {
    let mut tx = pool.begin().await?;
    super::commit::lock_batch(&mut tx, commands).await?;
    let outcomes = insert_batch(&mut tx, commands).await?;
    if outcomes
        .iter()
        .any(|o| matches!(o, InsertOutcome::Inserted { .. }))
    {
        let mut applications: Vec<String> = commands
            .iter()
            .map(|c| c.application_id.to_string())
            .collect();
        applications.sort_unstable();
        applications.dedup();
        applications.truncate(100);
        sqlx::query!(
            "SELECT pg_notify($1, $2)",
            OUTBOX_CHANNEL,
            applications.join(",")
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}
