//! Group commit: concurrent acceptances share one transaction.
//!
//! A few committer tasks pull from one channel. Each takes the first waiting job and then
//! everything else already queued (up to `max_batch`) and commits it as one transaction with one
//! `NOTIFY`. No timer adds latency when the system is idle: batches grow by themselves exactly
//! when PostgreSQL is the bottleneck, because jobs pile up while the committers are busy.
//!
//! Each batch is logged in a `group_commit{batch, size}` span, and each caller logs the batch
//! that answered it inside its own (request) span, so a batch's lines lead to its requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::insert::{InsertOutcome, NewCommand, insert_batch};
use crate::DurableError;

/// The channel the executor listens on; a hint only, never needed for correctness.
pub const OUTBOX_CHANNEL: &str = "sluice_outbox";

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupCommitConfig {
    /// Commands per transaction at most. 1 means one transaction per request (the baseline).
    pub max_batch: usize,
    /// Concurrent transactions; each holds one connection while it commits.
    pub committers: usize,
    /// Jobs waiting for a committer before `submit` waits too (backpressure).
    pub queue_capacity: usize,
}

impl Default for GroupCommitConfig {
    fn default() -> Self {
        Self {
            max_batch: 256,
            committers: 4,
            queue_capacity: 16_384,
        }
    }
}

/// Counters of one committer handle, for benchmarks; `/metrics` counts the same events
/// process-wide ([`crate::metrics`]).
#[derive(Debug, Default)]
pub struct GroupCommitStats {
    pub batches: AtomicU64,
    pub commands: AtomicU64,
    pub failed_batches: AtomicU64,
}

type Reply = Result<InsertOutcome, DurableError>;

/// Which batch answered a job: its number in this process and its size, for the logs.
#[derive(Debug, Clone, Copy)]
struct Batch {
    number: u64,
    size: usize,
}

struct Job {
    command: NewCommand,
    reply: oneshot::Sender<(Reply, Batch)>,
}

/// The handle gateways submit to. Committers stop once [`close`](Self::close) is called (or
/// every handle is dropped) and the queue is drained, so no job that was queued is abandoned.
#[derive(Clone)]
pub struct GroupCommitter {
    jobs: mpsc::Sender<Job>,
    stats: Arc<GroupCommitStats>,
    closing: CancellationToken,
    committers: TaskTracker,
}

impl GroupCommitter {
    pub fn start(pool: PgPool, config: GroupCommitConfig) -> Self {
        let (jobs, receiver) = mpsc::channel(config.queue_capacity.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        let stats = Arc::new(GroupCommitStats::default());
        let closing = CancellationToken::new();
        let committers = TaskTracker::new();
        for _ in 0..config.committers.max(1) {
            committers.spawn(run_committer(
                pool.clone(),
                receiver.clone(),
                config.max_batch.max(1),
                stats.clone(),
                closing.clone(),
            ));
        }
        committers.close();
        Self {
            jobs,
            stats,
            closing,
            committers,
        }
    }

    /// Commits one command (with whatever else is waiting) and tells what happened to it.
    ///
    /// `CommitterStopped` means the command was never queued (so never committed): the caller
    /// may give its reservation back. Once queued, a job is always committed and answered,
    /// even after [`close`](Self::close).
    pub async fn submit(&self, command: NewCommand) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { command, reply })
            .await
            .map_err(|_| DurableError::CommitterStopped)?;
        // Only a committer that died mid-batch drops a reply unanswered; whether that batch
        // committed is unknown, so this is not `CommitterStopped`.
        let (reply, batch) = answer.await.map_err(|_| {
            DurableError::CommitFailed("the group committer stopped mid-batch".into())
        })?;
        tracing::debug!(
            batch = batch.number,
            size = batch.size,
            ok = reply.is_ok(),
            "group commit answered"
        );
        reply
    }

    /// Graceful shutdown: refuses new jobs (`submit` answers `CommitterStopped`), commits every
    /// job already queued, including those whose caller went away, and returns once every
    /// committer has finished. Without it the process could exit with queued jobs that a
    /// client was never told about and that PostgreSQL never saw.
    pub async fn close(&self) {
        self.closing.cancel();
        self.committers.wait().await;
    }

    pub fn stats(&self) -> &GroupCommitStats {
        &self.stats
    }
}

async fn run_committer(
    pool: PgPool,
    receiver: Arc<Mutex<mpsc::Receiver<Job>>>,
    max_batch: usize,
    stats: Arc<GroupCommitStats>,
    closing: CancellationToken,
) {
    loop {
        let mut batch = Vec::new();
        {
            let mut receiver = receiver.lock().await;
            let first = tokio::select! {
                biased;
                job = receiver.recv() => job,
                () = closing.cancelled() => {
                    // Closing the channel refuses new jobs but keeps the queued ones, which
                    // `recv` still yields before it answers `None`.
                    receiver.close();
                    receiver.recv().await
                }
            };
            let Some(first) = first else {
                return;
            };
            batch.push(first);
            while batch.len() < max_batch {
                match receiver.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
        }
        let number = stats.batches.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("group_commit", batch = number, size = batch.len());
        commit(&pool, batch, number, &stats).instrument(span).await;
    }
}

async fn commit(pool: &PgPool, batch: Vec<Job>, number: u64, stats: &GroupCommitStats) {
    let (commands, replies): (Vec<NewCommand>, Vec<oneshot::Sender<(Reply, Batch)>>) =
        batch.into_iter().map(|j| (j.command, j.reply)).unzip();
    let batch = Batch {
        number,
        size: commands.len(),
    };
    stats
        .commands
        .fetch_add(commands.len() as u64, Ordering::Relaxed);
    crate::metrics::group_commit_batch(commands.len());
    match commit_making_days(pool, &commands).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A caller that went away still had its command committed; nothing to undo.
                let _ = reply.send((Ok(outcome), batch));
            }
        }
        Err(error) => {
            stats.failed_batches.fetch_add(1, Ordering::Relaxed);
            crate::metrics::group_commit_failed();
            tracing::warn!(%error, size = commands.len(), "group commit failed");
            let message = error.to_string();
            for reply in replies {
                let _ = reply.send((Err(DurableError::CommitFailed(message.clone())), batch));
            }
        }
    }
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
        Err(error) if super::days::is_missing_day(&error) => {
            super::days::ensure_days(pool).await?;
            commit_batch(pool, commands).await.map_err(|error| {
                if super::days::is_missing_day(&error) {
                    DurableError::CommitFailed(format!(
                        "{error}: a command id's day is outside the days PostgreSQL keeps ready \
                         (yesterday to {} days ahead); is this gateway's clock right?",
                        super::days::DAYS_AHEAD
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
    super::insert::lock_batch(&mut tx, commands).await?;
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
