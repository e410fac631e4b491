//! Group commit's machinery, shared by every write that many callers make at once (command
//! acceptances, room joins): one transaction answers a whole batch.
//!
//! A few committer tasks pull from one channel. Each takes the first waiting job and then
//! everything else already queued (up to `max_batch`) and writes it as one transaction. No timer
//! adds latency when the system is idle: batches grow by themselves exactly when PostgreSQL is
//! the bottleneck, because jobs pile up while the committers are busy.
//!
//! Each batch is logged in a span named by the writer, with its number and size, and each caller
//! logs the batch that answered it inside its own (request) span, so a batch's lines lead to its
//! requests.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::PgPool;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::DurableError;

/// How batches are cut and how many are written at once.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupCommitConfig {
    /// Jobs per transaction at most. 1 means one transaction per request (the baseline).
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

/// One kind of batched write: what a job is, what each job is answered, and the transaction.
pub trait BatchWriter: Send + Sync + 'static {
    type Job: Send + 'static;
    type Outcome: Send + 'static;

    /// The batch's span name in the logs.
    const SPAN: &'static str;

    /// Writes the batch in one transaction: one outcome per job, in the jobs' order, or the
    /// error every job of the batch is answered (none of it committed, or not known).
    fn write(
        &self,
        pool: &PgPool,
        jobs: &[Self::Job],
    ) -> impl Future<Output = Result<Vec<Self::Outcome>, DurableError>> + Send;

    /// After every batch, committed or not: for the writer's metrics.
    fn counted(&self, _size: usize, _committed: bool) {}
}

/// Counters of one committer handle, for benchmarks; `/metrics` counts the same events
/// process-wide ([`sluice_metrics`]).
#[derive(Debug, Default)]
pub struct GroupCommitStats {
    pub batches: AtomicU64,
    pub commands: AtomicU64,
    pub failed_batches: AtomicU64,
}

/// Which batch answered a job: its number in this process and its size, for the logs.
#[derive(Debug, Clone, Copy)]
struct Batch {
    number: u64,
    size: usize,
}

type Reply<W> = Result<<W as BatchWriter>::Outcome, DurableError>;

/// Where a job's answer goes, with the batch that gave it.
type Answer<W> = oneshot::Sender<(Reply<W>, Batch)>;

struct Job<W: BatchWriter> {
    job: W::Job,
    reply: Answer<W>,
}

/// The handle callers submit to. Committers stop once [`close`](Self::close) is called (or
/// every handle is dropped) and the queue is drained, so no job that was queued is abandoned.
pub struct Batcher<W: BatchWriter> {
    jobs: mpsc::Sender<Job<W>>,
    stats: Arc<GroupCommitStats>,
    closing: CancellationToken,
    committers: TaskTracker,
}

impl<W: BatchWriter> Clone for Batcher<W> {
    fn clone(&self) -> Self {
        Self {
            jobs: self.jobs.clone(),
            stats: self.stats.clone(),
            closing: self.closing.clone(),
            committers: self.committers.clone(),
        }
    }
}

impl<W: BatchWriter> Batcher<W> {
    pub fn start(pool: PgPool, config: GroupCommitConfig, writer: W) -> Self {
        let (jobs, receiver) = mpsc::channel(config.queue_capacity.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        let stats = Arc::new(GroupCommitStats::default());
        let closing = CancellationToken::new();
        let committers = TaskTracker::new();
        let writer = Arc::new(writer);
        for _ in 0..config.committers.max(1) {
            committers.spawn(run_committer(
                pool.clone(),
                writer.clone(),
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

    /// Writes one job (with whatever else is waiting) and tells what happened to it.
    ///
    /// `CommitterStopped` means the job was never queued (so never written): the caller may
    /// give back what it reserved for it. Once queued, a job is always written and answered,
    /// even after [`close`](Self::close).
    pub async fn submit(&self, job: W::Job) -> Reply<W> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { job, reply })
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

    /// Graceful shutdown: refuses new jobs (`submit` answers `CommitterStopped`), writes every
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

async fn run_committer<W: BatchWriter>(
    pool: PgPool,
    writer: Arc<W>,
    receiver: Arc<Mutex<mpsc::Receiver<Job<W>>>>,
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
        let span = tracing::info_span!(
            "group_commit",
            writer = W::SPAN,
            batch = number,
            size = batch.len()
        );
        commit(&pool, writer.as_ref(), batch, number, &stats)
            .instrument(span)
            .await;
    }
}

async fn commit<W: BatchWriter>(
    pool: &PgPool,
    writer: &W,
    batch: Vec<Job<W>>,
    number: u64,
    stats: &GroupCommitStats,
) {
    let (jobs, replies): (Vec<W::Job>, Vec<Answer<W>>) =
        batch.into_iter().map(|j| (j.job, j.reply)).unzip();
    let batch = Batch {
        number,
        size: jobs.len(),
    };
    stats
        .commands
        .fetch_add(jobs.len() as u64, Ordering::Relaxed);
    match writer.write(pool, &jobs).await {
        Ok(outcomes) => {
            writer.counted(jobs.len(), true);
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                // A caller that went away still had its job committed; nothing to undo.
                let _ = reply.send((Ok(outcome), batch));
            }
        }
        Err(error) => {
            stats.failed_batches.fetch_add(1, Ordering::Relaxed);
            writer.counted(jobs.len(), false);
            tracing::warn!(%error, size = jobs.len(), "group commit failed");
            let message = error.to_string();
            for reply in replies {
                let _ = reply.send((Err(DurableError::CommitFailed(message.clone())), batch));
            }
        }
    }
}
