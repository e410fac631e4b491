//! A rebuild racing the other transitions, the race made to happen by fault-injection points
//! that hold one side at the worst moment: a claim after the rebuild's snapshot, a commit and
//! its accept between the rebuild's clearing and its counts, a completion while the rebuild
//! writes. Limits are judged by the backend's own count of calls in progress, counts by
//! PostgreSQL's rows.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use serde_json::json;
use sluice_durable::faults::{self, Point};
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::rebuild;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_redis::AppKeys;

use crate::execution::{all_terminal, fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{
    arrivals_of, arrives, complete, enqueue_ocr, finish_and_complete, ocr_declaration, row,
    stack_with,
};

/// `ocr` allowing one command in flight per account (`account:{provider}:{account}`).
const ONE_PER_ACCOUNT: &str = r#"{ key = "account:{provider}:{account}", max_in_flight = 1 }"#;

/// The application's Redis counters against PostgreSQL's rows: `unfinished` is every unfinished
/// row, `waiting` and `queued` the waiting ones not held by an executor.
async fn counts_match_postgres(stack: &Stack, command: &str) -> Result<(), String> {
    let (unfinished, waiting): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status NOT IN
                    ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')),
                count(*) FILTER (WHERE status IN ('accepted', 'retry_wait')
                                   AND lease_owner IS NULL)
           FROM commands WHERE application_id = $1",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .map_err(|e| e.to_string())?;
    let redis = stack.open_counts(command).await;
    if redis == (unfinished, waiting, waiting) {
        Ok(())
    } else {
        Err(format!(
            "Redis counts {redis:?}, PostgreSQL unfinished {unfinished} and waiting {waiting}"
        ))
    }
}

/// Every command of `ids` succeeded, by PostgreSQL's row, after exactly one call at the backend.
async fn each_succeeded_after_one_call(stack: &Stack, backend: &Backend, ids: &[String]) {
    for id in ids {
        assert_eq!(row(stack, id).await["status"], "succeeded", "{id}");
        assert_eq!(
            arrivals_of(backend, id).len(),
            1,
            "{id} was called once: {:?}",
            row(stack, id).await
        );
    }
}

/// A forced rebuild of the stack's application on a task of its own, for a test to hold at a
/// fault point while it makes another transition happen.
fn spawn_rebuild(
    stack: &Arc<Stack>,
) -> tokio::task::JoinHandle<Result<rebuild::RebuildReport, sluice_durable::DurableError>> {
    let stack = stack.clone();
    tokio::spawn(async move {
        rebuild::rebuild(&stack.pg, &stack.redis, stack.creds.application_id).await
    })
}

/// Waits until the counters agree with PostgreSQL (they follow its commits by a moment).
async fn assert_counts_settle(stack: &Stack, command: &str) {
    let settled = eventually(Duration::from_secs(10), || async {
        counts_match_postgres(stack, command).await.is_ok()
    })
    .await;
    assert!(settled, "{:?}", counts_match_postgres(stack, command).await);
}

/// A head admitted (its permit taken) and then held before its claim while a rebuild runs
/// through: the rebuild's snapshot has it waiting and queues it again without a permit, and the
/// command's only permit goes to another head. The held claim is refused (fenced by the
/// admission's epoch), so the head is started once, later, with a permit: the backend never has
/// two calls at once and every command is called exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_after_the_rebuilds_snapshot_is_refused() {
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(Duration::from_millis(600)).await;
        Answer::succeeded(json!({}))
    }))
    .await;
    let declaration = ocr_declaration(&backend.url("/ocr"), 5_000, 120, "")
        .replace("max_in_flight = 1000,", "max_in_flight = 1,");
    let stack = stack_with(&backend, &declaration).await;
    let application = stack.creds.application_id;
    // The held head is on account z; the others, enqueued while it is held, sort before it.
    let mut ids = vec![enqueue_ocr(&stack, "user-z", "gitee", "z", "doc").await];
    let held = faults::pause(Point::AfterAdmit, application);
    let executor = start_executor(&stack, fast_executor());
    held.reached().await;
    for account in ["a", "b", "c"] {
        ids.push(enqueue_ocr(&stack, &format!("user-{account}"), "gitee", account, "doc").await);
    }
    rebuild::rebuild(&stack.pg, &stack.redis, application)
        .await
        .expect("rebuild");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !backend.arrivals().is_empty()
        })
        .await,
        "after the rebuild the command's permit goes to another head"
    );
    held.release();
    assert!(all_terminal(&stack, Duration::from_secs(30)).await);
    each_succeeded_after_one_call(&stack, &backend, &ids).await;
    assert_eq!(
        backend.peak_in_flight(),
        1,
        "the command's max_in_flight as the backend counted it"
    );
    assert_counts_settle(&stack, "ocr").await;
    executor.cancel();
}

/// An enqueue reserved before a rebuild and committed while the rebuild is between clearing the
/// projection and writing its counts: the commit is refused (its reservation's epoch ended) and
/// the enqueue answered `503`; retried with the same key it is accepted once, under the new
/// epoch. The counters equal PostgreSQL's rows afterwards, and the command runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_between_the_rebuilds_clearing_and_counts_is_counted_once() {
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            config: GatewayConfig {
                rebuild_wait_ms: 500,
                ..GatewayConfig::default()
            },
            ..StackOptions::default()
        })
        .await,
    );
    // Some commands already waiting, counted by the rebuild.
    let offer = offer();
    for subject in ["a", "b", "c"] {
        let reply = stack.enqueue(subject, &key(), &offer).await;
        assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
    }
    let (namespace, application) = (stack.creds.namespace_id, stack.creds.application_id);
    let reserved = faults::pause(Point::AfterReservation, namespace);
    let racing_key = key();
    let enqueue = {
        let (stack, racing_key, offer) = (stack.clone(), racing_key.clone(), offer.clone());
        tokio::spawn(async move { stack.enqueue("racer", &racing_key, &offer).await })
    };
    reserved.reached().await;
    let counting = faults::pause(Point::RebuildBeforeCounts, application);
    let rebuilding = spawn_rebuild(&stack);
    counting.reached().await;
    reserved.release();
    let first = enqueue.await.expect("the enqueue");
    assert_eq!(
        (first.status.as_u16(), first.code()),
        (503, "UNAVAILABLE"),
        "the commit of a reservation whose epoch ended is refused: {:?}",
        first.body
    );
    counting.release();
    rebuilding
        .await
        .expect("the rebuild task")
        .expect("the rebuild");
    let answered = eventually(Duration::from_secs(10), || async {
        let retried = stack.enqueue("racer", &racing_key, &offer).await;
        matches!(retried.status.as_u16(), 200 | 202)
    })
    .await;
    assert!(answered, "the retry with the same key is answered");
    let rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE namespace_id = $1 AND request_key = $2",
    )
    .bind(namespace)
    .bind(&racing_key)
    .fetch_one(&stack.pg)
    .await
    .expect("rows");
    assert_eq!(
        rows, 1,
        "one command for the key (first answer {:?})",
        first.body
    );
    assert_counts_settle(&stack, "claim").await;
}

/// A running command completed while a rebuild writes (its snapshot, taken before, has the
/// command running with its permits until its deadline): the completion's Redis side waits for
/// the rebuild and then frees the permits, so the account's next command starts at once instead
/// of at the first one's deadline, and the counters equal PostgreSQL's rows. The backend answers
/// `202` and counts each command in progress until the test completes it: the account's limit
/// of one held through the rebuild at the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_during_the_rebuild_frees_its_permits() {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let declaration = ocr_declaration(&backend.url("/ocr"), 5_000, 600, ONE_PER_ACCOUNT);
    let stack = Arc::new(stack_with(&backend, &declaration).await);
    let first = enqueue_ocr(&stack, "user-1", "gitee", "a", "one").await;
    let second = enqueue_ocr(&stack, "user-2", "gitee", "a", "two").await;
    let executor = start_executor(&stack, fast_executor());
    let running = eventually(Duration::from_secs(10), || async {
        row(&stack, &first).await["status"] == "running"
    })
    .await;
    assert!(running, "{}", row(&stack, &first).await);
    assert!(arrivals_of(&backend, &second).is_empty());

    let application = stack.creds.application_id;
    let writing = faults::pause(Point::RebuildBeforeCounts, application);
    let rebuilding = spawn_rebuild(&stack);
    writing.reached().await;
    // The backend is done with the first command; its result is reported while the rebuild
    // writes.
    assert!(
        backend.finish(&first),
        "the first command is at the backend"
    );
    let completing = {
        let (stack, first) = (stack.clone(), first.clone());
        tokio::spawn(async move {
            complete(
                &stack,
                &first,
                json!({"outcome": "succeeded", "result": {}}),
            )
            .await
        })
    };
    // The completion has committed in PostgreSQL; its Redis side waits for the rebuild.
    let committed = eventually(Duration::from_secs(5), || async {
        row(&stack, &first).await["status"] == "succeeded"
    })
    .await;
    assert!(committed, "{}", row(&stack, &first).await);
    writing.release();
    rebuilding
        .await
        .expect("the rebuild task")
        .expect("the rebuild");
    let completed = completing.await.expect("the completion");
    assert_eq!(completed.status.as_u16(), 200, "{:?}", completed.body);
    assert!(
        eventually(Duration::from_secs(5), || async {
            !arrivals_of(&backend, &second).is_empty()
        })
        .await,
        "the account's next command starts once the first completed, not at its deadline"
    );
    assert_eq!(
        backend.peak_in_flight(),
        1,
        "the account's limit as the backend counted it"
    );
    let done = finish_and_complete(
        &backend,
        &stack,
        &second,
        json!({"outcome": "succeeded", "result": {}}),
    )
    .await;
    assert_eq!(done.status.as_u16(), 200, "{:?}", done.body);
    assert_counts_settle(&stack, "ocr").await;
    executor.cancel();
}

/// A rebuild clears the token buckets with everything else; tokens already spent must not come
/// back with it. A provider limited to 2 starts per second (burst 2) gets its burst, then the
/// projection is rebuilt twice: the backend's own record of arrivals never shows more starts in
/// a window than the bucket allows (`burst + per_second × window`, with the executor's token
/// freshness as slack), where refilled buckets would hand out a fresh burst after each rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_never_refills_a_token_bucket() {
    const PER_SECOND: f64 = 2.0;
    const BURST: f64 = 2.0;
    let backend = Backend::start(handler(|_| async { Answer::succeeded(json!({})) })).await;
    let declaration = ocr_declaration(
        &backend.url("/ocr"),
        5_000,
        120,
        r#"{ key = "provider:{provider}", per_second = 2 }"#,
    );
    let stack = stack_with(&backend, &declaration).await;
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(
            enqueue_ocr(
                &stack,
                &format!("user-{i}"),
                "gitee",
                &format!("a{i}"),
                "doc",
            )
            .await,
        );
    }
    let executor = start_executor(&stack, fast_executor());
    let application = stack.creds.application_id;
    assert!(
        eventually(Duration::from_secs(5), || async {
            backend.arrivals().len() >= 2
        })
        .await,
        "the burst goes out"
    );
    for _ in 0..2 {
        rebuild::rebuild(&stack.pg, &stack.redis, application)
            .await
            .expect("rebuild");
    }
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    let mut at: Vec<std::time::Instant> = backend.arrivals().iter().map(|a| a.at).collect();
    at.sort();
    assert_eq!(at.len(), ids.len(), "every command called once");
    let slack = sluice_executor::webhook::TOKEN_FRESHNESS.as_secs_f64();
    for (i, from) in at.iter().enumerate() {
        for (j, to) in at.iter().enumerate().skip(i) {
            let window = to.duration_since(*from).as_secs_f64();
            let allowed = BURST + PER_SECOND * (window + slack);
            assert!(
                (j - i + 1) as f64 <= allowed,
                "{} starts within {window:.3} s, the bucket allows {allowed:.1}",
                j - i + 1
            );
        }
    }
    executor.cancel();
}

/// A rebuild that lost its lock half-way (the connection holding it was cut) goes on with a
/// snapshot taken before the rebuild that replaced it. Its writes must change nothing: a late
/// clear would delete the newer projection's permits, and its rows would bring back commands
/// that have moved on since. Here its snapshot has the first command executing and the second
/// waiting; by the time it writes, the first has ended and the second is at the backend. The
/// stale rebuild fails, and the projection stays the newer one: its counters equal PostgreSQL's
/// rows, the second command is called once, and the backend never has two calls at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_that_lost_its_lock_writes_nothing_over_the_next_one() {
    // Each call is held until the test lets one go.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let backend = Backend::start(handler({
        let gate = gate.clone();
        move |_| {
            let gate = gate.clone();
            async move {
                gate.acquire().await.expect("the gate").forget();
                Answer::succeeded(json!({}))
            }
        }
    }))
    .await;
    let declaration = ocr_declaration(&backend.url("/ocr"), 30_000, 600, ONE_PER_ACCOUNT);
    let stack = Arc::new(stack_with(&backend, &declaration).await);
    let first = enqueue_ocr(&stack, "user-1", "gitee", "a", "one").await;
    let second = enqueue_ocr(&stack, "user-2", "gitee", "a", "two").await;
    let executor = start_executor(&stack, fast_executor());
    assert!(arrives(&backend, &first, Duration::from_secs(10)).await);

    let application = stack.creds.application_id;
    let snapshotted = faults::pause(Point::RebuildAfterSnapshot, application);
    let stale = spawn_rebuild(&stack);
    snapshotted.reached().await;
    let cut: Option<bool> = sqlx::query_scalar(
        "SELECT bool_or(pg_terminate_backend(pid)) FROM pg_locks
          WHERE locktype = 'advisory' AND granted
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND ((classid::bigint << 32) | objid::bigint)
                = hashtextextended('sluice:rebuild:' || $1::text, 0)",
    )
    .bind(application)
    .fetch_one(&stack.pg)
    .await
    .expect("cut the rebuild's lock");
    assert_eq!(cut, Some(true), "the stale rebuild held the lock");
    // The executor finds the projection fenced and rebuilds it; the first command ends and the
    // second starts under that newer projection.
    gate.add_permits(1);
    assert!(
        arrives(&backend, &second, Duration::from_secs(10)).await,
        "the second command starts once the first ended"
    );
    snapshotted.release();
    let outcome = stale.await.expect("the stale rebuild's task");
    assert!(
        outcome.is_err(),
        "a rebuild that lost its lock must not succeed: {outcome:?}"
    );
    // The attempt at the backend still holds the second command in Redis, as PostgreSQL says:
    // the stale rows would have put it back in line (and a new admission would have taken its
    // record), leaving the call at the backend with no permit behind it.
    let second_id = uuid::Uuid::parse_str(&second).expect("a command id");
    let attempt: Option<uuid::Uuid> =
        sqlx::query_scalar("SELECT attempt_id FROM commands WHERE id = $1")
            .bind(second_id)
            .fetch_one(&stack.pg)
            .await
            .expect("the second command's attempt");
    let projected: (Option<String>, Option<String>) = stack
        .redis
        .pool()
        .next()
        .hmget(
            AppKeys::new(application).command(CommandId::from_uuid(second_id)),
            vec!["status", "attempt"],
        )
        .await
        .expect("the second command's status hash");
    assert_eq!(
        projected,
        (
            Some("executing".to_string()),
            attempt.map(|a| a.to_string())
        ),
        "the second command as Redis shows it"
    );
    assert_counts_settle(&stack, "ocr").await;
    gate.add_permits(1);
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    each_succeeded_after_one_call(&stack, &backend, &[first.clone(), second.clone()]).await;
    assert_eq!(backend.peak_in_flight(), 1);
    executor.cancel();
}

/// A rebuild the gateway started for an enqueue that found the projection lost, held longer
/// than the gateway waits (`rebuild_wait_ms`): the enqueue is answered `503`, and the rebuild
/// goes on by itself once let go. The projection opens with no other caller (there is no
/// executor here), where a rebuild cancelled with its waiter would have left it fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_the_gateway_stopped_waiting_for_runs_to_its_end() {
    let stack = Stack::start_with(StackOptions {
        config: GatewayConfig {
            rebuild_wait_ms: 300,
            ..GatewayConfig::default()
        },
        ..StackOptions::default()
    })
    .await;
    let offer = offer();
    let first = stack.enqueue("a", &key(), &offer).await;
    assert_eq!(first.status.as_u16(), 202, "{:?}", first.body);
    stack.lose_projection().await;

    let application = stack.creds.application_id;
    let held = faults::pause(Point::RebuildAfterSnapshot, application);
    let waiting_key = key();
    let refused = stack.enqueue("b", &waiting_key, &offer).await;
    assert_eq!(refused.status.as_u16(), 503, "{:?}", refused.body);
    held.reached().await;
    held.release();
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM projections WHERE application_id = $1")
            .bind(application)
            .fetch_one(&stack.pg)
            .await
            .expect("generation");
    let opened = eventually(Duration::from_secs(10), || async {
        let meta: (Option<String>, Option<i64>) = stack
            .redis
            .pool()
            .next()
            .hmget(stack.keys().meta(), vec!["ready", "generation"])
            .await
            .expect("meta");
        meta == (Some("1".into()), Some(generation))
    })
    .await;
    assert!(
        opened,
        "the projection opens at generation {generation} by itself"
    );
    let retried = stack.enqueue("b", &waiting_key, &offer).await;
    assert_eq!(retried.status.as_u16(), 202, "{:?}", retried.body);
    assert_counts_settle(&stack, "claim").await;
}

/// A command at its backend keeps its permits through a rebuild even when PostgreSQL's record of
/// its lease is older than its holder's last renewal in Redis (PostgreSQL out of reach while
/// Redis renewed: here the row's `lease_expires_at` is set a second in the past, as the renewals
/// PostgreSQL missed would leave it). The rebuild restores the permits for a whole lease from
/// itself, so the account's next command waits for the first to end instead of joining it at the
/// backend, and no sweeper takes the first from its holder: the backend never counts two calls
/// at once, and each command is called once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_keeps_a_held_commands_permits_whatever_postgresql_last_renewed() {
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        Answer::succeeded(json!({}))
    }))
    .await;
    let declaration = ocr_declaration(&backend.url("/ocr"), 5_000, 120, ONE_PER_ACCOUNT);
    let stack = stack_with(&backend, &declaration).await;
    let first = enqueue_ocr(&stack, "user-1", "gitee", "a", "one").await;
    let executor = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(10), || async {
            !arrivals_of(&backend, &first).is_empty()
        })
        .await,
        "the first command reaches its backend"
    );
    let second = enqueue_ocr(&stack, "user-2", "gitee", "a", "two").await;
    let first_id: uuid::Uuid = first.parse().expect("uuid");
    let lapsed = sqlx::query(
        "UPDATE commands SET lease_expires_at = now() - interval '1 second'
          WHERE id = $1 AND status = 'executing'",
    )
    .bind(first_id)
    .execute(&stack.pg)
    .await
    .expect("PostgreSQL's lease of the first command");
    assert_eq!(lapsed.rows_affected(), 1, "{}", row(&stack, &first).await);
    rebuild::rebuild(&stack.pg, &stack.redis, stack.creds.application_id)
        .await
        .expect("rebuild");
    assert!(all_terminal(&stack, Duration::from_secs(30)).await);
    each_succeeded_after_one_call(&stack, &backend, &[first.clone(), second.clone()]).await;
    assert_eq!(
        backend.peak_in_flight(),
        1,
        "the account's limit of one as the backend counted it"
    );
    executor.cancel();
}
