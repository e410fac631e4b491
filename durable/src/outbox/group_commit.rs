//! Group commit: concurrent acceptances share one transaction.
//!
//! A few committer tasks pull from one channel. Each takes the first waiting job and then
//! everything else already queued (up to `max_batch`) and commits it as one transaction with one
//! `NOTIFY`. No timer adds latency when the system is idle: batches grow by themselves exactly
//! when PostgreSQL is the bottleneck, because jobs pile up while the committers are busy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};

use super::insert::{InsertOutcome, NewCommand, insert_batch};
use crate::DurableError;

/// The channel the executor listens on; a hint only, never needed for correctness.
pub const OUTBOX_CHANNEL: &str = "sluice_outbox";

#[derive(Debug, Clone)]
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

/// Counters for benchmarks and metrics.
#[derive(Debug, Default)]
pub struct GroupCommitStats {
    pub batches: AtomicU64,
    pub commands: AtomicU64,
    pub failed_batches: AtomicU64,
}

type Reply = Result<InsertOutcome, DurableError>;

struct Job {
    command: NewCommand,
    reply: oneshot::Sender<Reply>,
}

/// The handle gateways submit to. Committers stop once every handle is dropped and the queue
/// is drained, so no accepted job is abandoned on shutdown.
#[derive(Clone)]
pub struct GroupCommitter {
    jobs: mpsc::Sender<Job>,
    stats: Arc<GroupCommitStats>,
}

impl GroupCommitter {
    pub fn start(pool: PgPool, config: GroupCommitConfig) -> Self {
        let (jobs, receiver) = mpsc::channel(config.queue_capacity.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        let stats = Arc::new(GroupCommitStats::default());
        for _ in 0..config.committers.max(1) {
            tokio::spawn(run_committer(
                pool.clone(),
                receiver.clone(),
                config.max_batch.max(1),
                stats.clone(),
            ));
        }
        Self { jobs, stats }
    }

    /// Commits one command (with whatever else is waiting) and tells what happened to it.
    pub async fn submit(&self, command: NewCommand) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { command, reply })
            .await
            .map_err(|_| DurableError::CommitterStopped)?;
        answer.await.map_err(|_| DurableError::CommitterStopped)?
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
) {
    loop {
        let mut batch = Vec::new();
        {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
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
        commit(&pool, batch, &stats).await;
    }
}

async fn commit(pool: &PgPool, batch: Vec<Job>, stats: &GroupCommitStats) {
    let (commands, replies): (Vec<NewCommand>, Vec<oneshot::Sender<Reply>>) =
        batch.into_iter().map(|j| (j.command, j.reply)).unzip();
    stats.batches.fetch_add(1, Ordering::Relaxed);
    stats
        .commands
        .fetch_add(commands.len() as u64, Ordering::Relaxed);
    match commit_batch(pool, &commands).await {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A caller that went away still had its command committed; nothing to undo.
                let _ = reply.send(Ok(outcome));
            }
        }
        Err(error) => {
            stats.failed_batches.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, size = commands.len(), "group commit failed");
            let message = error.to_string();
            for reply in replies {
                let _ = reply.send(Err(DurableError::CommitFailed(message.clone())));
            }
        }
    }
}

async fn commit_batch(
    pool: &PgPool,
    commands: &[NewCommand],
) -> Result<Vec<InsertOutcome>, DurableError> {
    let mut tx = pool.begin().await?;
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
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(OUTBOX_CHANNEL)
            .bind(applications.join(","))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}
