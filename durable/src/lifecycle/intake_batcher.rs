//! The intake batcher: concurrent enqueues of one application decided by one `intake.lua` call.
//!
//! One lane (a tokio task) per application. A lane takes the first waiting request and then
//! everything else already queued (up to `max_entries`) and decides them in one call, in arrival
//! order; while that call is in flight new requests queue up and go together in the next one.
//! No timer: an idle lane sends a lone request at once, and batches grow by themselves exactly
//! when the Redis round trip is what requests wait on (as the group commit does for inserts).
//!
//! Exactness is the script's: it decides every entry exactly as sequential single calls would,
//! so batching changes who waits, never who is admitted (`lua/README.md`).
//!
//! Each caller gets its own verdict. A Redis error fails every entry of that call with the same
//! error a single call would have returned. A caller that went away before reading a
//! `Reserved` verdict (the client disconnected and its request future was dropped) does not
//! strand the reservation: it is given back with `release.lua`, as a failed commit gives back
//! its reservation, on whichever side notices first (the lane when the reply cannot be
//! delivered, or the caller's receiver when it is dropped holding an unread verdict).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::redis::{IntakeRequest, IntakeVerdict, Release, release, reserve, reserve_batch};
use crate::DurableError;
use crate::declaration::IntakeBudget;
use crate::ids::{ApplicationId, CommandId, NamespaceId};
use sluice_redis::{AppKeys, Projection};

/// Entries per `intake.lua` call by default. Measured with `sluice-bench-baselines --only intake`
/// (256 callers, one application): caps of 16, 64, 128 and 256 gave the same decisions/s within
/// noise (10,618, 10,431, 10,558, 10,541; batches of 16, 61, 72 and 76 on average), so the
/// smaller of the two candidates: one call keeps Redis busy for at most 64 decisions.
pub const DEFAULT_MAX_ENTRIES: usize = 64;

/// How long a lane with nothing to do stays before its task ends (a new request starts it
/// again), so a process that saw many applications keeps no task for the idle ones.
const LANE_IDLE: Duration = Duration::from_secs(30);

/// Counters of one batcher, for tests and benchmarks; `/metrics` observes every call in
/// `sluice_intake_batch_entries`.
#[derive(Debug, Default)]
pub struct IntakeBatchStats {
    /// `intake.lua` calls made.
    pub calls: AtomicU64,
    /// Entries decided by those calls.
    pub entries: AtomicU64,
    /// Reservations given back because their caller was gone.
    pub orphans_released: AtomicU64,
    /// Give-back tries that failed (each retried until the reservation would expire anyway).
    pub orphan_release_errors: AtomicU64,
    /// The last of those failures, so a test or an operator reading stats sees why.
    last_orphan_error: Mutex<Option<String>>,
}

impl IntakeBatchStats {
    /// The error of the last failed give-back try, if any failed.
    pub fn last_orphan_error(&self) -> Option<String> {
        self.last_orphan_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn orphan_release_failed(&self, error: &DurableError) {
        self.orphan_release_errors.fetch_add(1, Ordering::Relaxed);
        *self
            .last_orphan_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(error.to_string());
    }
}

/// An owned [`IntakeRequest`], so it can wait in a lane.
#[derive(Debug, Clone)]
struct Entry {
    keys: AppKeys,
    min_generation: i64,
    namespace_id: NamespaceId,
    command: String,
    subject: String,
    request_key_field: String,
    content_sha256_hex: String,
    command_id: CommandId,
    max_unfinished: i64,
    max_waiting: u64,
    max_queue: u64,
    intake: IntakeBudget,
    reservation_ttl_ms: u64,
}

impl Entry {
    fn new(req: &IntakeRequest<'_>) -> Self {
        Self {
            keys: req.keys.clone(),
            min_generation: req.min_generation,
            namespace_id: req.namespace_id,
            command: req.command.to_string(),
            subject: req.subject.to_string(),
            request_key_field: req.request_key_field.to_string(),
            content_sha256_hex: req.content_sha256_hex.to_string(),
            command_id: req.command_id,
            max_unfinished: req.max_unfinished,
            max_waiting: req.max_waiting,
            max_queue: req.max_queue,
            intake: *req.intake,
            reservation_ttl_ms: req.reservation_ttl_ms,
        }
    }

    fn request(&self) -> IntakeRequest<'_> {
        IntakeRequest {
            keys: &self.keys,
            min_generation: self.min_generation,
            namespace_id: self.namespace_id,
            command: &self.command,
            subject: &self.subject,
            request_key_field: &self.request_key_field,
            content_sha256_hex: &self.content_sha256_hex,
            command_id: self.command_id,
            max_unfinished: self.max_unfinished,
            max_waiting: self.max_waiting,
            max_queue: self.max_queue,
            intake: &self.intake,
            reservation_ttl_ms: self.reservation_ttl_ms,
        }
    }
}

type Reply = Result<IntakeVerdict, DurableError>;

struct Job {
    entry: Entry,
    reply: oneshot::Sender<Reply>,
}

struct Shared {
    redis: Projection,
    max_entries: usize,
    lanes: Mutex<HashMap<ApplicationId, mpsc::UnboundedSender<Job>>>,
    stats: IntakeBatchStats,
}

/// The handle enqueues reserve through. Cheap to clone.
#[derive(Clone)]
pub struct IntakeBatcher {
    shared: Arc<Shared>,
}

impl IntakeBatcher {
    /// A batcher deciding at most `max_entries` enqueues per call. 1 (or 0) turns batching off:
    /// every enqueue makes its own call at once, concurrently with the others, as before the
    /// batcher (a lane of one entry per call would serialise an application's enqueues behind
    /// one round trip each). Lanes start on first use, on the current tokio runtime.
    pub fn new(redis: Projection, max_entries: usize) -> Self {
        Self {
            shared: Arc::new(Shared {
                redis,
                max_entries: max_entries.max(1),
                lanes: Mutex::new(HashMap::new()),
                stats: IntakeBatchStats::default(),
            }),
        }
    }

    pub fn stats(&self) -> &IntakeBatchStats {
        &self.shared.stats
    }

    /// `intake.lua`'s verdict for one enqueue, decided together with whatever else of its
    /// application is waiting. The queue is unbounded, but each entry is a caller waiting for
    /// its answer, so it holds at most the requests in flight.
    pub async fn reserve(&self, req: &IntakeRequest<'_>) -> Result<IntakeVerdict, DurableError> {
        if self.shared.max_entries == 1 {
            return reserve(&self.shared.redis, req).await;
        }
        let (reply, answer) = oneshot::channel();
        let job = Job {
            entry: Entry::new(req),
            reply,
        };
        let guard = Unread {
            answer: Some(answer),
            shared: self.shared.clone(),
            entry: job.entry.clone(),
        };
        self.enqueue(req.keys.application_id(), job);
        guard.read().await
    }

    /// Queues a job on its application's lane, starting the lane if there is none. Under the
    /// lock, so a lane that ends (it checks that its queue is empty under the same lock) never
    /// leaves a job behind.
    fn enqueue(&self, application: ApplicationId, mut job: Job) {
        let mut lanes = self
            .shared
            .lanes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(lane) = lanes.get(&application) {
            match lane.send(job) {
                Ok(()) => return,
                // The lane's task is gone (its runtime shut down): start another.
                Err(mpsc::error::SendError(back)) => job = back,
            }
        }
        let (lane, jobs) = mpsc::unbounded_channel();
        // The receiver is alive: this send cannot fail.
        let _ = lane.send(job);
        lanes.insert(application, lane);
        tokio::spawn(run_lane(self.shared.clone(), application, jobs));
    }
}

/// The caller's side of one reply: if the caller goes away holding a `Reserved` verdict it has
/// not read, the reservation is given back.
struct Unread {
    answer: Option<oneshot::Receiver<Reply>>,
    shared: Arc<Shared>,
    entry: Entry,
}

impl Unread {
    async fn read(mut self) -> Reply {
        let Some(answer) = self.answer.as_mut() else {
            return Err(DurableError::Unavailable("intake reply read twice".into()));
        };
        let reply = answer.await;
        self.answer = None;
        // Only a lane task that died mid-call (a panic) drops a reply unanswered; the call may
        // or may not have reserved, and a reservation then expires by itself.
        reply.unwrap_or_else(|_| Err(DurableError::Unavailable("the intake lane stopped".into())))
    }
}

impl Drop for Unread {
    fn drop(&mut self) {
        let Some(mut answer) = self.answer.take() else {
            return;
        };
        answer.close();
        if let Ok(Ok(verdict)) = answer.try_recv() {
            release_orphan(&self.shared, &self.entry, &verdict);
        }
        // Not answered yet: the lane finds the receiver closed when it replies, and gives the
        // reservation back itself.
    }
}

/// The first pause between the tries of an orphaned reservation's give-back; each next pause
/// doubles, up to [`ORPHAN_RETRY_MAX_PAUSE`]. A slot held by a caller who is gone blocks
/// someone else until it expires, so a Redis that was briefly unreachable (a reconnect, a
/// failover) is worth waiting out rather than leaving the slot for the whole reservation TTL.
const ORPHAN_RETRY_FIRST_PAUSE: Duration = Duration::from_millis(100);
const ORPHAN_RETRY_MAX_PAUSE: Duration = Duration::from_secs(5);

/// Releases a reservation whose caller is gone, as a failed commit would (`release.lua`:
/// exactly once, so an expiry in between changes nothing). In a task of its own, so neither a
/// lane nor a dropping caller waits for it. Retried until the reservation would have expired by
/// itself, after which there is nothing left to give back.
fn release_orphan(shared: &Arc<Shared>, entry: &Entry, verdict: &IntakeVerdict) {
    if !matches!(verdict, IntakeVerdict::Reserved { .. }) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (shared, entry) = (shared.clone(), entry.clone());
    runtime.spawn(async move {
        let give = Release {
            command_id: entry.command_id,
            namespace_id: entry.namespace_id,
            command: &entry.command,
            request_key_field: &entry.request_key_field,
            existing: None,
        };
        let expires = tokio::time::Instant::now() + Duration::from_millis(entry.reservation_ttl_ms);
        let mut pause = ORPHAN_RETRY_FIRST_PAUSE;
        loop {
            // `release.lua` acts once, so a call whose answer was lost may be sent again.
            match release(&shared.redis, &entry.keys, &give).await {
                Ok(_) => {
                    shared
                        .stats
                        .orphans_released
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(error) => {
                    sluice_metrics::storage_error(&error);
                    shared.stats.orphan_release_failed(&error);
                    if tokio::time::Instant::now() + pause >= expires {
                        tracing::warn!(command_id = %entry.command_id, %error, "reservation of a caller that went away not released; it expires now");
                        return;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ORPHAN_RETRY_MAX_PAUSE);
                }
            }
        }
    });
}

async fn run_lane(
    shared: Arc<Shared>,
    application: ApplicationId,
    mut jobs: mpsc::UnboundedReceiver<Job>,
) {
    let mut batch = Vec::with_capacity(shared.max_entries);
    loop {
        let first = match tokio::time::timeout(LANE_IDLE, jobs.recv()).await {
            Ok(Some(job)) => job,
            Ok(None) => return,
            Err(_) => {
                // Idle: leave, unless a job arrived meanwhile (checked under the lanes' lock,
                // which every sender holds while it sends).
                let mut lanes = shared.lanes.lock().unwrap_or_else(PoisonError::into_inner);
                if jobs.is_empty() {
                    lanes.remove(&application);
                    return;
                }
                continue;
            }
        };
        batch.push(first);
        while batch.len() < shared.max_entries {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        decide(&shared, &mut batch).await;
    }
}

/// One `intake.lua` call for the jobs of `batch` (left empty), each answered on its own reply.
async fn decide(shared: &Arc<Shared>, batch: &mut Vec<Job>) {
    let outcome = {
        let requests: Vec<IntakeRequest<'_>> = batch.iter().map(|j| j.entry.request()).collect();
        reserve_batch(&shared.redis, &requests).await
    };
    let entries = batch.len();
    sluice_metrics::intake_batch(entries);
    match outcome {
        Ok(verdicts) => {
            for (job, verdict) in batch.drain(..).zip(verdicts) {
                if let Err(Ok(verdict)) = job.reply.send(Ok(verdict)) {
                    release_orphan(shared, &job.entry, &verdict);
                }
            }
        }
        Err(error) => {
            for job in batch.drain(..) {
                let _ = job.reply.send(Err(same_error(&error)));
            }
        }
    }
    // Counted once every reply is out, so a reader that sees the count sees the replies sent.
    shared.stats.calls.fetch_add(1, Ordering::Relaxed);
    shared
        .stats
        .entries
        .fetch_add(entries as u64, Ordering::Relaxed);
}

/// The error of a failed call, once per entry: the same variant a single call would have
/// answered, so each caller's error path (503 for Redis) is the one it had before batching.
fn same_error(error: &DurableError) -> DurableError {
    match error {
        DurableError::Redis(e) => DurableError::Redis(e.clone()),
        DurableError::Script { script, detail } => DurableError::script(script, detail.clone()),
        DurableError::Unavailable(m) => DurableError::Unavailable(m.clone()),
        other => DurableError::Unavailable(other.to_string()),
    }
}
