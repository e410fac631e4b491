//! Real `sluice execute` processes against one gateway: two executors share a flash sale under
//! one admission limit, a SIGKILLed executor's work is finished by the next one exactly once,
//! and SIGTERM drains.
//!
//! The executors are the real binary (`CARGO_BIN_EXE_sluice`), so these tests cover the CLI
//! wiring, signal handling and process death that in-process executors cannot.

use sluice_durable::ids::CommandId;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::prelude::*;
use hyper::StatusCode;
use uuid::Uuid;

use crate::execution::{all_terminal, status_counts};
use crate::support::sluice_process::SluiceProcess;
use crate::support::*;

/// Statuses after which a command never changes.
const TERMINAL: &str = "('succeeded', 'rejected', 'failed', 'expired', 'cancelled')";

/// One `sluice execute` process, killed (SIGKILL) and reaped when dropped. Its stdout and
/// stderr (JSON logs) go to `dir/<name>.log`.
pub(crate) struct ExecutorProcess {
    process: SluiceProcess,
}

impl ExecutorProcess {
    /// Starts `sluice execute --lease-ms 1500 --tick-ms 20` against the stack's database and
    /// the shared Redis, logging to `dir/<name>.log`.
    pub(crate) fn spawn(stack: &Stack, dir: &Path, name: &str) -> ExecutorProcess {
        Self::spawn_with(stack, dir, name, &[])
    }

    /// [`ExecutorProcess::spawn`] with more arguments (`--set executor.…=…`).
    pub(crate) fn spawn_with(
        stack: &Stack,
        dir: &Path,
        name: &str,
        extra: &[&str],
    ) -> ExecutorProcess {
        let mut args = vec![
            "execute",
            "--lease-ms",
            "1500",
            "--tick-ms",
            "20",
            "--pg-pool-size",
            "8",
        ];
        args.extend_from_slice(extra);
        let process = SluiceProcess::spawn(stack, &args, &[], dir.join(format!("{name}.log")));
        ExecutorProcess { process }
    }

    pub(crate) fn log_text(&self) -> String {
        self.process.log_text()
    }

    /// The owner id the process logged with "executor running", once it did.
    fn owner(&self) -> Option<Uuid> {
        self.log_text().lines().find_map(|line| {
            let entry: serde_json::Value = serde_json::from_str(line).ok()?;
            if entry["fields"]["message"] != "executor running" {
                return None;
            }
            entry["fields"]["owner"].as_str()?.parse().ok()
        })
    }

    /// Waits until the process logged "executor running"; returns its owner id.
    pub(crate) async fn running(&mut self) -> Uuid {
        let mut owner = None;
        let started = eventually(Duration::from_secs(15), || {
            owner = self.owner();
            std::future::ready(owner.is_some())
        })
        .await;
        assert!(
            started,
            "the executor did not start (exit: {:?}); log:\n{}",
            self.process.child.try_wait(),
            self.log_text()
        );
        owner.expect("owner logged")
    }

    pub(crate) fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Polls for the process's exit for at most `within`.
    pub(crate) async fn exited(&mut self, within: Duration) -> Option<ExitStatus> {
        self.process.exited(within).await
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill(&mut self) {
        self.process.child.kill().expect("SIGKILL the executor");
        self.process.child.wait().expect("reap the executor");
    }

    /// SIGTERM: drain.
    pub(crate) fn terminate(&self) {
        self.process.signal("TERM");
    }
}

/// Two executor processes, `first` and `second`, both running; with their owner ids.
pub(crate) async fn two_executors(stack: &Stack, dir: &Path) -> ([ExecutorProcess; 2], [Uuid; 2]) {
    let mut executors = [
        ExecutorProcess::spawn(stack, dir, "first"),
        ExecutorProcess::spawn(stack, dir, "second"),
    ];
    let owners = [executors[0].running().await, executors[1].running().await];
    (executors, owners)
}

/// Every command lands within `within`; if not, the failure names the statuses and the logs of
/// both executors.
pub(crate) async fn assert_all_land(
    stack: &Stack,
    within: Duration,
    [first, second]: [&ExecutorProcess; 2],
) {
    let landed = all_terminal(stack, within).await;
    assert!(
        landed,
        "every command lands: {:?}\nfirst:\n{}\nsecond:\n{}",
        status_counts(stack).await,
        first.log_text(),
        second.log_text()
    );
}

/// One enqueue: subject, request key, offer.
#[derive(Debug, Clone)]
struct Enqueue {
    subject: String,
    key: String,
    offer: String,
}

impl Enqueue {
    fn new(subject: impl Into<String>, key: impl Into<String>, offer: &str) -> Enqueue {
        Enqueue {
            subject: subject.into(),
            key: key.into(),
            offer: offer.to_string(),
        }
    }
}

/// Sends the requests of each group in order, the groups spread over `tasks` concurrent tasks.
/// Returns, per group and request, the status and the command id.
async fn enqueue_groups(
    stack: &Arc<Stack>,
    groups: Vec<Vec<Enqueue>>,
    tasks: usize,
) -> Vec<Vec<(StatusCode, String)>> {
    let groups = Arc::new(groups);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (stack, groups) = (stack.clone(), groups.clone());
        handles.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for g in (t..groups.len()).step_by(tasks) {
                let mut replies = Vec::new();
                for e in &groups[g] {
                    let reply = stack.enqueue(&e.subject, &e.key, &e.offer).await;
                    let id = reply.data()["command_id"]
                        .as_str()
                        .unwrap_or_else(|| panic!("no command id: {:?}", reply.body))
                        .to_string();
                    replies.push((reply.status, id));
                }
                answers.push((g, replies));
            }
            answers
        }));
    }
    let mut all = vec![Vec::new(); groups.len()];
    for handle in handles {
        for (g, replies) in handle.await.expect("enqueue task") {
            all[g] = replies;
        }
    }
    all
}

fn terminal_count(counts: &HashMap<String, i64>) -> i64 {
    ["succeeded", "rejected", "failed", "expired", "cancelled"]
        .iter()
        .map(|s| counts.get(*s).copied().unwrap_or(0))
        .sum()
}

/// Allocations of the pool `stock`: (rows, distinct subjects, distinct commands).
async fn allocations(stack: &Stack) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT subject), count(DISTINCT command_id)
           FROM allocations WHERE namespace_id = $1 AND pool = 'stock'",
    )
    .bind(stack.creds.namespace_id)
    .fetch_one(&stack.pg)
    .await
    .expect("allocations")
}

/// Succeeded commands, and how many of them have the allocation their result names.
async fn succeeded_with_allocation(stack: &Stack) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*),
                count(*) FILTER (WHERE a.id::text = c.result->>'allocation_id'
                                   AND a.subject = c.subject)
           FROM commands c LEFT JOIN allocations a ON a.command_id = c.id
          WHERE c.application_id = $1 AND c.status = 'succeeded'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("succeeded commands")
}

async fn pool_allocated(stack: &Stack) -> i64 {
    sqlx::query_scalar("SELECT allocated FROM quota_pools WHERE namespace_id = $1")
        .bind(stack.creds.namespace_id)
        .fetch_one(&stack.pg)
        .await
        .expect("pool")
}

/// Error codes of rejected/failed/expired commands.
async fn error_codes(stack: &Stack) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT coalesce(error_code, '<none>'), count(*) FROM commands
          WHERE application_id = $1 AND status IN ('rejected', 'failed', 'expired')
          GROUP BY 1",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("error codes")
    .into_iter()
    .collect()
}

/// The Redis `unfinished` counter returns to zero once everything landed.
async fn unfinished_drains_to_zero(stack: &Stack) -> bool {
    eventually(Duration::from_secs(10), || async {
        stack.counters().await.get("unfinished").copied() == Some(0)
    })
    .await
}

/// Pool of 100, 1,500 subjects (some replaying their request key, some sending a second one)
/// arriving while two executor processes drain them: exactly 100 allocations, one per subject,
/// every command terminal, and both processes took part. (The quota handler runs inside the
/// executor, so no backend can count its concurrency: the next test judges `max_in_flight`
/// across processes at a webhook backend.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executor_processes_share_a_flash_sale() {
    let declaration = CLAIM_DECLARATION.replace(
        "admission = { max_queue = 1000000 }",
        "admission = { max_queue = 1000000, max_in_flight = 4, per_second = 1000000 }",
    );
    assert_ne!(declaration, CLAIM_DECLARATION, "the admission line changed");
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let ([mut first, mut second], owners) = two_executors(&stack, dir.path()).await;
    assert_ne!(owners[0], owners[1]);
    let done = Arc::new(AtomicBool::new(false));
    let owners_sampler = sample_lease_owners(&stack, done.clone());

    // 1,500 subjects over 8 offers; every 10th replays its request key (same command), every
    // 15th sends a second request key (a second command that may not allocate again).
    let offers: Vec<String> = (0..8).map(|_| offer()).collect();
    let groups: Vec<Vec<Enqueue>> = (0..1500)
        .map(|i| {
            let (subject, key) = (format!("buyer-{i}"), format!("k-{i}"));
            let offer = &offers[i % offers.len()];
            let mut group = vec![Enqueue::new(&subject, &key, offer)];
            if i % 10 == 0 {
                group.push(Enqueue::new(&subject, &key, offer));
            }
            if i % 15 == 0 {
                group.push(Enqueue::new(&subject, format!("{key}-again"), offer));
            }
            group
        })
        .collect();
    let sale = std::time::Instant::now();
    let answers = enqueue_groups(&stack, groups.clone(), 64).await;
    let enqueued_in = sale.elapsed();
    let mut accepted = HashSet::new();
    for (group, replies) in groups.iter().zip(&answers) {
        for (i, (e, (status, id))) in group.iter().zip(replies).enumerate() {
            let replay = i > 0 && e.key == group[0].key;
            if replay {
                assert_eq!(*status, StatusCode::OK, "a replay of {}", e.key);
                assert_eq!(id, &replies[0].1, "a replay names the original command");
            } else {
                assert_eq!(*status, StatusCode::ACCEPTED, "{e:?}");
                assert!(accepted.insert(id.clone()), "a new command id each time");
            }
        }
    }
    assert_eq!(accepted.len(), 1500 + 100);
    assert_eq!(stack.count_rows().await, 1600);

    let landed = all_terminal(&stack, Duration::from_secs(25)).await;
    let landed_in = sale.elapsed();
    done.store(true, Ordering::Relaxed);
    let owners_seen = owners_sampler.await.expect("the owners' sampler");
    assert!(
        landed,
        "every command lands: {:?}",
        status_counts(&stack).await
    );

    let (rows, subjects, commands) = allocations(&stack).await;
    assert_eq!(rows, 100, "exactly the pool's capacity is allocated");
    assert_eq!(subjects, 100, "no subject holds two units");
    assert_eq!(commands, 100);
    assert_eq!(pool_allocated(&stack).await, 100);
    assert_eq!(
        succeeded_with_allocation(&stack).await,
        (100, 100),
        "each success names its own allocation"
    );
    let counts = status_counts(&stack).await;
    assert_eq!(terminal_count(&counts), 1600, "{counts:?}");
    assert_eq!(counts.get("rejected").copied(), Some(1500), "{counts:?}");
    let codes = error_codes(&stack).await;
    assert!(
        codes
            .keys()
            .all(|c| c == "SOLD_OUT" || c == "ALREADY_ALLOCATED"),
        "{codes:?}"
    );
    assert!(
        unfinished_drains_to_zero(&stack).await,
        "{:?}",
        stack.counters().await
    );

    eprintln!(
        "flash sale: enqueued in {enqueued_in:?}, all landed after {landed_in:?}; \
         owners seen executing: {owners_seen:?} of {owners:?}"
    );
    for owner in owners {
        assert!(
            owners_seen.contains(&owner),
            "executor {owner} was never seen executing; seen: {owners_seen:?}"
        );
    }
    assert!(first.is_running(), "{}", first.log_text());
    assert!(second.is_running(), "{}", second.log_text());
}

/// The executors seen holding a row of the stack's application `executing`, sampled from
/// PostgreSQL until `done`: which processes took part (not what they were allowed to do).
fn sample_lease_owners(
    stack: &Stack,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<HashSet<Uuid>> {
    let (pg, app) = (stack.pg.clone(), stack.creds.application_id);
    tokio::spawn(async move {
        let mut seen = HashSet::new();
        while !done.load(Ordering::Relaxed) {
            let owners: Vec<Uuid> = sqlx::query_scalar(
                "SELECT DISTINCT lease_owner FROM commands
                  WHERE application_id = $1 AND status IN ('executing', 'running')
                    AND lease_owner IS NOT NULL",
            )
            .bind(app)
            .fetch_all(&pg)
            .await
            .expect("sample lease owners");
            seen.extend(owners);
        }
        seen
    })
}

/// The command's `max_in_flight` as its backend counts it: two executor processes drain 160
/// webhook commands over 12 accounts (queues) under `max_in_flight = 4`; the backend holds each
/// call 40 ms and counts the calls it has in progress on its own. It never has more than 4 at
/// once, and has 4 (the limit is reached, not merely never approached); every command succeeds
/// after one call, and both processes took part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executor_processes_hold_one_max_in_flight_at_the_backend() {
    use crate::support::webhook_backend::{Answer, Backend, handler};
    use crate::webhooks::{
        each_succeeded_after_one_call, enqueue_ocr, ocr_declaration, stack_with,
    };

    const LIMIT: usize = 4;
    const COMMANDS: usize = 160;
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Answer::succeeded(serde_json::json!({}))
    }))
    .await;
    let open = ocr_declaration(&backend.url("/ocr"), 5_000, 120, "");
    let declaration = open.replace("max_in_flight = 1000,", "max_in_flight = 4,");
    assert_ne!(declaration, open, "the admission line changed");
    let stack = Arc::new(stack_with(&backend, &declaration).await);
    let mut ids = Vec::new();
    for i in 0..COMMANDS {
        let account = format!("a{}", i % 12);
        ids.push(enqueue_ocr(&stack, &format!("user-{i}"), "gitee", &account, "doc").await);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let done = Arc::new(AtomicBool::new(false));
    let owners_sampler = sample_lease_owners(&stack, done.clone());
    let ([first, second], owners) = two_executors(&stack, dir.path()).await;
    assert_all_land(&stack, Duration::from_secs(60), [&first, &second]).await;
    done.store(true, Ordering::Relaxed);
    let owners_seen = owners_sampler.await.expect("the owners' sampler");
    each_succeeded_after_one_call(&stack, &backend, &ids).await;
    let peak = backend.peak_in_flight();
    eprintln!("max_in_flight {LIMIT} over two processes: the backend's peak {peak}");
    assert!(
        peak <= LIMIT,
        "the backend had {peak} calls in progress at once (max_in_flight {LIMIT})"
    );
    assert_eq!(peak, LIMIT, "the limit was never reached at the backend");
    for owner in owners {
        assert!(
            owners_seen.contains(&owner),
            "executor {owner} never ran a command; seen: {owners_seen:?}"
        );
    }
}

/// An executor is SIGKILLed mid-batch while it drains 300 commands; a second one takes over once
/// the first one's leases lapse. Every command lands exactly once.
///
/// The kill is pinned mid-batch: the test holds the quota pool's row lock, so the executor
/// claims rows (they turn `executing`) and its quota transaction waits on the lock. Once all 8
/// permits are held by claimed rows, no admission can be between `admit.lua` and its claim
/// (that window is the next test's), and the process is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_executors_work_is_finished_exactly_once_by_the_next() {
    let declaration = CLAIM_DECLARATION.replace(
        "admission = { max_queue = 1000000 }",
        "admission = { max_queue = 1000000, max_in_flight = 8, per_second = 1000000 }",
    );
    assert_ne!(declaration, CLAIM_DECLARATION);
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let offers: Vec<String> = (0..4).map(|_| offer()).collect();
    let groups: Vec<Vec<Enqueue>> = (0..300)
        .map(|i| {
            vec![Enqueue::new(
                format!("fan-{i}"),
                format!("k-{i}"),
                &offers[i % 4],
            )]
        })
        .collect();
    let answers = enqueue_groups(&stack, groups, 8).await;
    assert!(
        answers.iter().all(|r| r[0].0 == StatusCode::ACCEPTED),
        "every enqueue accepted"
    );

    let mut pool_lock = stack.pg.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM quota_pools WHERE namespace_id = $1 FOR UPDATE")
        .bind(stack.creds.namespace_id)
        .execute(&mut *pool_lock)
        .await
        .expect("lock the pool row");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut doomed = ExecutorProcess::spawn(&stack, dir.path(), "doomed");
    doomed.running().await;
    let permits_key = stack
        .keys()
        .command_leases(stack.creds.namespace_id, "claim");
    // Exactly the claimed rows hold the permits (all 8), and their quota transaction waits.
    // (Renewals wait on the same rows, so this must be seen within the 1.5 s lease; it is, by
    // far, and the check after the kill would name a late one.)
    let mid_batch = eventually(Duration::from_secs(15), || async {
        let executing = executing_ids(&stack).await;
        let permits: Vec<String> = stack
            .redis
            .pool()
            .next()
            .zrange(&permits_key, 0, -1, None, false, None, false)
            .await
            .expect("permits");
        let permits: HashSet<Uuid> = permits.iter().filter_map(|p| p.parse().ok()).collect();
        executing.len() == 8
            && permits == executing
            && waiting_on_locks(&stack, "%FROM quota_pools%").await > 0
    })
    .await;
    assert!(
        mid_batch,
        "8 rows claimed and their quota transaction waiting: {:?}\n{}",
        status_counts(&stack).await,
        doomed.log_text()
    );
    doomed.kill();
    let in_flight = executing_ids(&stack).await;
    assert_eq!(in_flight.len(), 8);
    assert_eq!(
        admitted_in_redis(&stack).await,
        in_flight,
        "the kill fell after every admission was claimed"
    );
    // The dead executor's transaction can never commit: its client is gone.
    pool_lock.rollback().await.expect("release the pool row");

    let mut heir = ExecutorProcess::spawn(&stack, dir.path(), "heir");
    heir.running().await;
    let landed = all_terminal(&stack, Duration::from_secs(25)).await;
    assert!(
        landed,
        "every command lands after the takeover: {:?}; some unfinished: {:?}",
        status_counts(&stack).await,
        unfinished_rows(&stack).await
    );

    let (rows, subjects, commands) = allocations(&stack).await;
    assert_eq!(rows, 100, "the whole pool and no more is allocated");
    assert_eq!(subjects, rows, "no subject twice");
    assert_eq!(commands, rows, "no command with two allocations");
    assert_eq!(pool_allocated(&stack).await, rows);
    assert_eq!(
        succeeded_with_allocation(&stack).await,
        (rows, rows),
        "succeeded commands and allocations match one to one"
    );
    let counts = status_counts(&stack).await;
    assert_eq!(terminal_count(&counts), 300, "{counts:?}");
    assert_eq!(
        error_codes(&stack).await,
        HashMap::from([("SOLD_OUT".to_string(), 200)])
    );
    // The rows in flight at the kill were rescued and ran once more; nothing else was retried.
    let attempts: HashMap<Uuid, i32> = sqlx::query_as::<_, (Uuid, i32)>(
        "SELECT id, attempts FROM commands WHERE application_id = $1 AND attempts <> 1",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("attempts")
    .into_iter()
    .collect();
    let expected: HashMap<Uuid, i32> = in_flight.iter().map(|id| (*id, 2)).collect();
    assert_eq!(attempts, expected, "attempts other than 1");
    assert!(
        unfinished_drains_to_zero(&stack).await,
        "{:?}",
        stack.counters().await
    );
    let permits: i64 = stack
        .redis
        .pool()
        .next()
        .zcard(&permits_key)
        .await
        .expect("permits");
    assert_eq!(permits, 0, "no permit outlives its command");
    assert!(heir.is_running(), "{}", heir.log_text());
}

/// An executor dies between `admit.lua` (which took the heads out of their Redis queues and
/// holds their permits) and its claim in PostgreSQL. The rows were never claimed, so they are
/// still `accepted` in PostgreSQL: the next executor must put them back in line and run them.
///
/// The claim is held back by the test's row locks, the process is SIGKILLed while its claim
/// waits, and the claim's backend is terminated, as if the process had died just before sending
/// it. (Found stranding the heads until `max_wait`; fixed by the lapsed-permit sweeper.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_admitted_by_an_executor_that_died_before_claiming_them_still_run() {
    let stack = Arc::new(Stack::start().await);
    let offer = offer();
    let groups: Vec<Vec<Enqueue>> = (0..20)
        .map(|i| vec![Enqueue::new(format!("late-{i}"), format!("k-{i}"), &offer)])
        .collect();
    let answers = enqueue_groups(&stack, groups, 4).await;
    assert!(answers.iter().all(|r| r[0].0 == StatusCode::ACCEPTED));

    let mut row_locks = stack.pg.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM commands WHERE application_id = $1 FOR UPDATE")
        .bind(stack.creds.application_id)
        .execute(&mut *row_locks)
        .await
        .expect("lock the rows");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut doomed = ExecutorProcess::spawn(&stack, dir.path(), "doomed");
    doomed.running().await;
    let claim_waits = eventually(Duration::from_secs(15), || async {
        waiting_on_locks(&stack, "%SET status = 'executing'%").await > 0
    })
    .await;
    assert!(
        claim_waits,
        "the claim waits on the rows: {}",
        doomed.log_text()
    );
    let admitted = admitted_in_redis(&stack).await;
    assert!(!admitted.is_empty(), "admit.lua took heads");
    doomed.kill();
    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND query LIKE '%SET status = ''executing''%'",
    )
    .fetch_all(&stack.pg)
    .await
    .expect("terminate the orphaned claim");
    assert!(!terminated.is_empty() && terminated.iter().all(|t| *t));
    row_locks.rollback().await.expect("release the rows");

    let mut heir = ExecutorProcess::spawn(&stack, dir.path(), "heir");
    heir.running().await;
    let landed = all_terminal(&stack, Duration::from_secs(15)).await;
    let stranded: Vec<Uuid> = unfinished_rows(&stack)
        .await
        .into_iter()
        .filter(|(id, status)| status == "accepted" && admitted.contains(id))
        .map(|(id, _)| id)
        .collect();
    assert!(
        landed,
        "every command lands; {} heads admitted by the dead executor are still accepted in \
         PostgreSQL but in no Redis queue: {stranded:?}; {:?}",
        stranded.len(),
        status_counts(&stack).await
    );
    assert_eq!(allocations(&stack).await.0, 20);
    assert!(
        unfinished_drains_to_zero(&stack).await,
        "{:?}",
        stack.counters().await
    );
    assert!(heir.is_running(), "{}", heir.log_text());
}

/// Commands `executing` in PostgreSQL.
async fn executing_ids(stack: &Stack) -> HashSet<Uuid> {
    sqlx::query_scalar("SELECT id FROM commands WHERE application_id = $1 AND status = 'executing'")
        .bind(stack.creds.application_id)
        .fetch_all(&stack.pg)
        .await
        .expect("executing rows")
        .into_iter()
        .collect()
}

/// Backends of this database waiting on a lock while running a statement like `pattern`.
async fn waiting_on_locks(stack: &Stack, pattern: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1",
    )
    .bind(pattern)
    .fetch_one(&stack.pg)
    .await
    .expect("pg_stat_activity")
}

/// Commands whose Redis status hash says `executing` (admit.lua took them).
async fn admitted_in_redis(stack: &Stack) -> HashSet<Uuid> {
    let ids: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM commands WHERE application_id = $1")
        .bind(stack.creds.application_id)
        .fetch_all(&stack.pg)
        .await
        .expect("ids");
    let mut admitted = HashSet::new();
    for id in ids {
        let status: Option<String> = stack
            .redis
            .pool()
            .next()
            .hget(stack.keys().command(CommandId::from_uuid(id)), "status")
            .await
            .expect("status hash");
        if status.as_deref() == Some("executing") {
            admitted.insert(id);
        }
    }
    admitted
}

/// Up to 50 commands that are not terminal, with their status.
async fn unfinished_rows(stack: &Stack) -> Vec<(Uuid, String)> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, status FROM commands
          WHERE application_id = $1 AND status NOT IN {TERMINAL} ORDER BY queue_seq LIMIT 50"
    )))
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("unfinished rows")
}

/// SIGTERM while commands are in hand: the process stops admitting, lands what it holds and
/// exits 0 within a few seconds, leaving no row `executing` and no permit held. What it did not
/// start is still queued: a second executor finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_work_in_hand_and_exits_cleanly() {
    let declaration = CLAIM_DECLARATION.replace(
        "admission = { max_queue = 1000000 }",
        "admission = { max_queue = 1000000, per_second = 200, burst = 20 }",
    );
    assert_ne!(declaration, CLAIM_DECLARATION);
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let offers: Vec<String> = (0..4).map(|_| offer()).collect();
    let groups: Vec<Vec<Enqueue>> = (0..600)
        .map(|i| {
            vec![Enqueue::new(
                format!("guest-{i}"),
                format!("k-{i}"),
                &offers[i % 4],
            )]
        })
        .collect();
    let answers = enqueue_groups(&stack, groups, 8).await;
    assert!(answers.iter().all(|r| r[0].0 == StatusCode::ACCEPTED));

    let dir = tempfile::tempdir().expect("tempdir");
    let mut executor = ExecutorProcess::spawn(&stack, dir.path(), "drained");
    executor.running().await;
    let working = eventually(Duration::from_secs(15), || async {
        let counts = status_counts(&stack).await;
        counts.get("executing").copied().unwrap_or(0) > 0 || terminal_count(&counts) > 0
    })
    .await;
    assert!(
        working,
        "the executor started working: {}",
        executor.log_text()
    );
    executor.terminate();
    let status = executor.exited(Duration::from_secs(10)).await;
    let log = executor.log_text();
    let status = status.unwrap_or_else(|| panic!("no exit within 10 s after SIGTERM:\n{log}"));
    assert!(status.success(), "exit status {status:?}:\n{log}");
    assert!(log.contains("executor draining"), "{log}");
    assert!(log.contains("executor stopped"), "{log}");

    let after = status_counts(&stack).await;
    assert_eq!(
        after.get("executing").copied().unwrap_or(0),
        0,
        "no row left executing: {after:?}"
    );
    assert_eq!(after.get("running").copied().unwrap_or(0), 0, "{after:?}");
    let permits: i64 = stack
        .redis
        .pool()
        .next()
        .zcard(
            stack
                .keys()
                .command_leases(stack.creds.namespace_id, "claim"),
        )
        .await
        .expect("permits");
    assert_eq!(permits, 0, "the drained executor holds no permit");
    eprintln!("SIGTERM: after the drain {after:?}");

    // Nothing the drained executor touched is stranded: a fresh executor finishes everything.
    let mut next = ExecutorProcess::spawn(&stack, dir.path(), "next");
    next.running().await;
    assert!(
        all_terminal(&stack, Duration::from_secs(20)).await,
        "the rest lands: {:?}",
        status_counts(&stack).await
    );
    let (rows, subjects, _) = allocations(&stack).await;
    assert_eq!((rows, subjects), (100, 100));
    assert_eq!(succeeded_with_allocation(&stack).await, (100, 100));
    assert!(
        unfinished_drains_to_zero(&stack).await,
        "{:?}",
        stack.counters().await
    );
    assert!(next.is_running(), "{}", next.log_text());
}
