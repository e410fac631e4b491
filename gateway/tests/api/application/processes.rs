//! The application's shared budgets held by separate processes that agree only through Redis and
//! PostgreSQL: two `sluice serve` processes under one `max_unfinished_tasks`, two `sluice execute`
//! processes under one `max_concurrency` and one `rate_per_second`, each across two namespaces.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use fred::prelude::*;
use serde_json::{Value, json};
use sluice_store::tenancy::BootstrapOutput;

use super::*;
use crate::execution::processes::{ExecutorProcess, assert_all_land, two_executors};
use crate::execution::{counter, status_counts};
use crate::support::gateway_process::GatewayProcess;
use crate::support::webhook_backend::{Answer, Arrival, Backend, handler, worst_window};
use crate::webhooks::{ocr_declaration, own_results_after_one_attempt};

/// Statuses after which a command never changes.
const TERMINAL: &str = "('succeeded', 'rejected', 'failed', 'expired', 'cancelled')";

/// Non-terminal commands of the application in PostgreSQL.
async fn unfinished_rows(stack: &Stack) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM commands WHERE application_id = $1 AND status NOT IN {TERMINAL}"
    )))
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("count unfinished rows")
}

/// A field of the application's Redis meta hash (where `app_limits.lua` stores the budgets).
async fn meta_field(stack: &Stack, field: &str) -> Option<String> {
    stack
        .redis
        .pool()
        .next()
        .hget(stack.keys().meta(), field)
        .await
        .expect("meta field")
}

/// The body of a configure call replacing all three budgets.
fn budgets(revision: &str, max_unfinished: u32, max_concurrency: u32, rate: u32) -> Value {
    json!({"expected_revision": revision, "reason": "process test",
           "max_unfinished_tasks": max_unfinished, "max_concurrency": max_concurrency,
           "rate_per_second": rate})
}

/// Samples, as fast as round trips allow, the unfinished rows in PostgreSQL and the Redis
/// `unfinished` counter (reservations included) until stopped; keeps the highest of each.
struct Watcher {
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Watched>,
}

#[derive(Debug, Clone, Copy)]
struct Watched {
    max_rows: i64,
    max_counter: i64,
    samples: u64,
}

impl Watcher {
    fn start(stack: &Arc<Stack>) -> Watcher {
        let done = Arc::new(AtomicBool::new(false));
        let (stack, stop) = (stack.clone(), done.clone());
        let task = tokio::spawn(async move {
            let mut watched = Watched {
                max_rows: 0,
                max_counter: 0,
                samples: 0,
            };
            while !stop.load(Ordering::Relaxed) {
                let (rows, counted) =
                    tokio::join!(unfinished_rows(&stack), counter(&stack, "unfinished"));
                watched.max_rows = watched.max_rows.max(rows);
                watched.max_counter = watched.max_counter.max(counted);
                watched.samples += 1;
            }
            watched
        });
        Watcher { done, task }
    }

    async fn stop(self) -> Watched {
        self.done.store(true, Ordering::Relaxed);
        self.task.await.expect("watcher")
    }
}

/// One enqueue's answer: which namespace (index into the credentials), status, error code,
/// `Retry-After`, command id.
#[derive(Debug, Clone)]
struct Answered {
    namespace: usize,
    status: u16,
    code: String,
    retry_after: Option<String>,
    command_id: Option<String>,
}

/// `n` enqueues of `claim` with distinct request keys, all sent at once: request `i` goes to
/// gateway `i % 2` with the credential of namespace `(i / 2) % 2`, so every gateway serves both
/// namespaces.
async fn burst(
    gateways: &Arc<[GatewayProcess; 2]>,
    credentials: &[String; 2],
    prefix: &str,
    n: usize,
) -> Vec<Answered> {
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (gateways, start) = (gateways.clone(), start.clone());
            let namespace = (i / 2) % 2;
            let credential = credentials[namespace].clone();
            let body = json!({"request_key": format!("{prefix}-{i}"), "subject": format!("user-{i}"),
                              "input": {"offer": offer()}});
            tokio::spawn(async move {
                start.wait().await;
                let reply = gateways[i % 2]
                    .post("/v1/commands/claim:enqueue", &credential, &body)
                    .await;
                Answered {
                    namespace,
                    status: reply.status.as_u16(),
                    code: reply.code().to_string(),
                    retry_after: reply
                        .headers
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string),
                    command_id: reply.data()["command_id"].as_str().map(str::to_string),
                }
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(n);
    for task in tasks {
        answers.push(task.await.expect("enqueue task"));
    }
    answers
}

/// Splits a burst's answers into the accepted ones and a tally of everything else that is not
/// exactly `429 APPLICATION_FULL` with `Retry-After: 1`.
fn tally(answers: &[Answered]) -> (Vec<Answered>, usize, BTreeMap<String, usize>) {
    let mut accepted = Vec::new();
    let mut full = 0;
    let mut other = BTreeMap::new();
    for answer in answers {
        match (
            answer.status,
            answer.code.as_str(),
            answer.retry_after.as_deref(),
        ) {
            (202, _, _) if answer.command_id.is_some() => accepted.push(answer.clone()),
            (429, "APPLICATION_FULL", Some("1")) => full += 1,
            _ => {
                *other
                    .entry(format!(
                        "{} {} Retry-After {:?}",
                        answer.status, answer.code, answer.retry_after
                    ))
                    .or_default() += 1;
            }
        }
    }
    (accepted, full, other)
}

/// Two `sluice serve` processes, two namespaces, `max_unfinished_tasks = 50`: of 1,000
/// concurrent enqueues exactly 50 are accepted and every other one is `429 APPLICATION_FULL`
/// with `Retry-After: 1`; neither PostgreSQL nor the Redis counter ever holds more than 50.
/// Cancelling 10 waiting commands frees exactly 10 places for the next burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_unfinished_hold_across_two_gateway_processes_and_two_namespaces() {
    const CAP: usize = 50;
    let stack = Arc::new(Stack::start().await);
    let ops = join_namespace(&stack, "ops", true).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gateways = Arc::new([
        GatewayProcess::start(&stack, dir.path(), "east").await,
        GatewayProcess::start(&stack, dir.path(), "west").await,
    ]);
    let credentials = [stack.credential(), ops.credential.clone()];

    let configured = gateways[1]
        .post_with(
            "/v1/application/resources:configure",
            &ops.credential,
            &budgets("1", CAP as u32, 10_000, 100_000),
            &[("Idempotency-Key", "cap-50")],
        )
        .await;
    assert_eq!(configured.status.as_u16(), 200, "{:?}", configured.body);
    assert_eq!(configured.data()["resources"]["revision"], "2");
    assert_eq!(
        meta_field(&stack, "app:max_unfinished").await.as_deref(),
        Some("50"),
        "the configure call stored the limit in Redis before answering"
    );
    for gateway in gateways.iter() {
        let seen = eventually(Duration::from_secs(5), || async {
            let read = gateway
                .get("/v1/application/resources", &ops.credential)
                .await;
            read.status.as_u16() == 200 && read.data()["max_unfinished_tasks"] == CAP
        })
        .await;
        assert!(seen, "{} reads the new limit", gateway.base);
    }

    // 1,000 at once over both gateways and both namespaces.
    let watcher = Watcher::start(&stack);
    let started = Instant::now();
    let answers = burst(&gateways, &credentials, "first", 1_000).await;
    let first_burst_in = started.elapsed();
    let watched = watcher.stop().await;
    let (accepted, full, other) = tally(&answers);
    assert!(
        other.is_empty(),
        "only 202 and 429 APPLICATION_FULL: {other:?}"
    );
    assert_eq!(accepted.len(), CAP, "exactly the cap is accepted");
    assert_eq!(full, 1_000 - CAP);
    assert!(watched.samples > 1, "the watcher sampled the burst");
    assert!(
        watched.max_rows <= CAP as i64,
        "PostgreSQL held {} unfinished rows at once",
        watched.max_rows
    );
    assert!(
        watched.max_counter <= CAP as i64,
        "the Redis counter reached {}",
        watched.max_counter
    );
    // Answered 202 only after the commit and the projection: nothing is still on its way.
    assert_eq!(unfinished_rows(&stack).await, CAP as i64);
    assert_eq!(counter(&stack, "unfinished").await, CAP as i64);
    let usage = resources(&stack, &ops.credential).await;
    assert_eq!(usage.data()["unfinished_tasks"], CAP.to_string());
    let per_namespace = [0, 1].map(|ns| accepted.iter().filter(|a| a.namespace == ns).count());

    // Cancel 10 waiting commands (5 of each namespace where possible), each through either
    // gateway: waiting → cancelled at once, their places free.
    let mut to_cancel: Vec<&Answered> = [0, 1]
        .into_iter()
        .flat_map(|ns| accepted.iter().filter(move |a| a.namespace == ns).take(5))
        .collect();
    if to_cancel.len() < 10 {
        to_cancel = accepted.iter().take(10).collect();
    }
    assert_eq!(to_cancel.len(), 10);
    for (i, answer) in to_cancel.iter().enumerate() {
        let id = answer.command_id.as_deref().expect("accepted with an id");
        let cancelled = gateways[i % 2]
            .post(
                &format!("/v1/commands/{id}:cancel"),
                &credentials[answer.namespace],
                &json!({}),
            )
            .await;
        assert_eq!(cancelled.status.as_u16(), 200, "{:?}", cancelled.body);
        assert_eq!(
            cancelled.data()["status"],
            "cancelled",
            "{:?}",
            cancelled.body
        );
    }
    assert_eq!(unfinished_rows(&stack).await, CAP as i64 - 10);
    let freed = eventually(Duration::from_secs(5), || async {
        counter(&stack, "unfinished").await == CAP as i64 - 10
    })
    .await;
    assert!(
        freed,
        "the cancels are mirrored: {:?}",
        stack.counters().await
    );

    // The next burst takes exactly the 10 freed places.
    let watcher = Watcher::start(&stack);
    let answers = burst(&gateways, &credentials, "second", 200).await;
    let refill = watcher.stop().await;
    let (again, full_again, other) = tally(&answers);
    assert!(
        other.is_empty(),
        "only 202 and 429 APPLICATION_FULL: {other:?}"
    );
    assert_eq!(again.len(), 10, "exactly the freed places are taken");
    assert_eq!(full_again, 190);
    assert!(
        refill.max_rows <= CAP as i64,
        "PostgreSQL held {} unfinished rows at once",
        refill.max_rows
    );
    assert!(refill.max_counter <= CAP as i64, "{refill:?}");
    assert_eq!(unfinished_rows(&stack).await, CAP as i64);
    assert_eq!(counter(&stack, "unfinished").await, CAP as i64);
    for gateway in gateways.iter() {
        let log = gateway.log_text();
        assert!(!log.contains("\"ERROR\""), "{}:\n{log}", gateway.base);
    }

    eprintln!(
        "max_unfinished 50 over two gateway processes: first burst of 1,000 in {first_burst_in:?}: \
         {} accepted ({} main, {} ops), {full} APPLICATION_FULL; highest seen: {} rows in \
         PostgreSQL, counter {} ({} samples); after 10 cancels a burst of 200: {} accepted, \
         highest {} rows, counter {} ({} samples)",
        accepted.len(),
        per_namespace[0],
        per_namespace[1],
        watched.max_rows,
        watched.max_counter,
        watched.samples,
        again.len(),
        refill.max_rows,
        refill.max_counter,
        refill.samples
    );
}

// ---------------------------------------------------------------------------------------------
// Execution: two executor processes, webhook commands in two namespaces.
// ---------------------------------------------------------------------------------------------

/// A second namespace of the stack's application with the application scopes, declaring `ocr`
/// towards `url`.
async fn second_namespace(stack: &Stack, url: &str) -> BootstrapOutput {
    join_declaring(
        stack,
        "second",
        true,
        &ocr_declaration(url, 10_000, 120, ""),
    )
    .await
}

/// Two backends (one per namespace, each verifying its namespace's signatures) behind one
/// handler, a stack whose first namespace posts to the first and whose second namespace posts to
/// the second; command-level limits wide open (`ocr_declaration` without limit keys).
async fn two_namespaces_two_backends(
    handle: crate::support::webhook_backend::Handler,
) -> (Stack, BootstrapOutput, [Backend; 2]) {
    let backends = [
        Backend::start(handle.clone()).await,
        Backend::start(handle).await,
    ];
    let stack =
        Stack::with_declaration(&ocr_declaration(&backends[0].url("/ocr"), 10_000, 120, "")).await;
    backends[0].set_secret(&stack.creds.webhook_secret);
    let second = second_namespace(&stack, &backends[1].url("/ocr")).await;
    backends[1].set_secret(&second.webhook_secret);
    (stack, second, backends)
}

/// Enqueues `n` `ocr` commands per namespace over ten accounts (ten queues each, so the
/// executors always have more than one resource to take from); returns their ids.
async fn enqueue_in_both(stack: &Stack, second: &BootstrapOutput, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        for credential in [stack.credential(), second.credential.clone()] {
            let body = json!({"request_key": key(), "subject": format!("user-{i}"),
                              "input": {"provider": "p", "account": format!("acct-{}", i % 10),
                                        "doc": format!("doc-{i}")}});
            let reply = stack
                .post(
                    "/v1/commands/ocr:enqueue",
                    Some(&credential),
                    &body.to_string(),
                )
                .await;
            assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
            ids.push(
                reply.data()["command_id"]
                    .as_str()
                    .expect("command_id")
                    .to_string(),
            );
        }
    }
    ids
}

/// Configures the application with `second`'s credential and checks the budgets reached Redis.
async fn configure_budgets(
    stack: &Stack,
    second: &BootstrapOutput,
    max_concurrency: u32,
    rate: u32,
) {
    let configured = configure(
        stack,
        &second.credential,
        Some("budgets"),
        &budgets("1", 1_000_000, max_concurrency, rate),
    )
    .await;
    assert_eq!(configured.status.as_u16(), 200, "{:?}", configured.body);
    assert_eq!(
        meta_field(stack, "app:max_concurrency").await,
        Some(max_concurrency.to_string())
    );
    assert_eq!(
        meta_field(stack, "app:rate_per_second").await,
        Some(rate.to_string())
    );
}

/// Checks what every test of execution ends with: all `n` commands succeeded after one attempt
/// each, one signed request per command at the backend of its namespace, the application's
/// usage back to zero and no executing permit left.
async fn all_succeeded_once(
    stack: &Stack,
    second: &BootstrapOutput,
    backends: &[Backend; 2],
    executors: &mut [ExecutorProcess; 2],
    n: usize,
) -> Vec<Arrival> {
    assert_all_land(
        stack,
        Duration::from_secs(30),
        [&executors[0], &executors[1]],
    )
    .await;
    assert_eq!(
        status_counts(stack).await,
        HashMap::from([("succeeded".to_string(), n as i64)])
    );
    assert_eq!(
        own_results_after_one_attempt(stack).await,
        n as i64,
        "one attempt each, with its own result"
    );
    let mut arrivals = Vec::new();
    for (backend, namespace) in backends.iter().zip(["main", "second"]) {
        let seen = backend.arrivals();
        assert_eq!(seen.len(), n / 2, "{namespace}: one request per command");
        for arrival in &seen {
            assert!(arrival.signature_valid, "{namespace}: {arrival:?}");
            assert_eq!(arrival.body["namespace"], namespace);
            assert_eq!(arrival.body["attempt"], 1);
        }
        arrivals.extend(seen);
    }
    let released = eventually(Duration::from_secs(5), || async {
        let usage = resources(stack, &second.credential).await;
        usage.data()["active_attempts"] == "0" && usage.data()["unfinished_tasks"] == "0"
    })
    .await;
    assert!(
        released,
        "usage back to zero: {:?}",
        resources(stack, &second.credential).await.body
    );
    let permits: i64 = stack
        .redis
        .pool()
        .next()
        .zcard(stack.keys().application_leases())
        .await
        .expect("zcard");
    assert_eq!(permits, 0, "no application permit outlives its command");
    for executor in executors.iter_mut() {
        assert!(executor.is_running(), "{}", executor.log_text());
    }
    arrivals
}

/// What the backend measured of its own load, across both namespaces.
#[derive(Default)]
struct Load {
    /// Requests being worked on now.
    active: AtomicI64,
    /// The most `active` ever was.
    max: AtomicI64,
}

/// `max_concurrency = 3` over two executor processes and two namespaces: the backend holds each
/// request 100–200 ms; its own high-water mark of concurrent requests is exactly 3 (never more,
/// and reached), every command succeeds, and `active_attempts` returns to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_in_flight_across_two_executor_processes_and_two_namespaces() {
    const MAX_CONCURRENCY: i64 = 3;
    const PER_NAMESPACE: usize = 20;
    let load = Arc::new(Load::default());
    let (stack, second, backends) = two_namespaces_two_backends(handler({
        let load = load.clone();
        move |arrival: Arrival| {
            let load = load.clone();
            async move {
                let now = load.active.fetch_add(1, Ordering::SeqCst) + 1;
                load.max.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(rand::random_range(100..=200))).await;
                // Done before answering: the permit of this request is released only after the
                // executor has the answer, so any overlap counted here is an overlap of permits.
                load.active.fetch_sub(1, Ordering::SeqCst);
                Answer::succeeded(json!({"doc": arrival.body["input"]["doc"]}))
            }
        }
    }))
    .await;
    configure_budgets(&stack, &second, MAX_CONCURRENCY as u32, 100_000).await;
    let ids = enqueue_in_both(&stack, &second, PER_NAMESPACE).await;
    assert_eq!(ids.len(), 2 * PER_NAMESPACE);

    let dir = tempfile::tempdir().expect("tempdir");
    let (mut executors, owners) = two_executors(&stack, dir.path()).await;
    assert_ne!(owners[0], owners[1]);
    let started = Instant::now();
    all_succeeded_once(
        &stack,
        &second,
        &backends,
        &mut executors,
        2 * PER_NAMESPACE,
    )
    .await;
    let drained_in = started.elapsed();
    let high = load.max.load(Ordering::SeqCst);
    assert!(
        high <= MAX_CONCURRENCY,
        "the backend saw {high} requests at once; the application allows {MAX_CONCURRENCY}"
    );
    assert_eq!(
        high, MAX_CONCURRENCY,
        "the application's budget was never filled: the test shows nothing"
    );
    assert_eq!(load.active.load(Ordering::SeqCst), 0);
    eprintln!(
        "max_concurrency {MAX_CONCURRENCY}: {} webhook commands over two executor processes \
         drained in {drained_in:?}; backend high-water mark {high}",
        2 * PER_NAMESPACE
    );
}

/// `rate_per_second = 5` (burst 5) over two executor processes and two namespaces: the
/// backend's arrival times show at most 5 + 5 × t starts in every window of length t, within one
/// request; the bucket's burst is used at once, so the bound is reached, not merely respected.
///
/// Tolerance: the bucket meters admissions (admit.lua, Redis time); the backend sees each request
/// a few milliseconds later (the claim in PostgreSQL, the HTTP exchange on loopback). Arrivals
/// bracketing a window can be closer together than the admissions only by the spread of that
/// delay, and at 5/s one request is 200 ms of spread: one request is far above the spread here,
/// and far below what a bucket per executor process (twice the rate: ~15 requests over this
/// run) would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_starts_per_second_across_two_executor_processes_and_two_namespaces() {
    const RATE: u32 = 5;
    const TOLERANCE: f64 = 1.0;
    const PER_NAMESPACE: usize = 15;
    let (stack, second, backends) = two_namespaces_two_backends(handler(|arrival: Arrival| {
        std::future::ready(Answer::succeeded(
            json!({"doc": arrival.body["input"]["doc"]}),
        ))
    }))
    .await;
    configure_budgets(&stack, &second, 1_000, RATE).await;
    enqueue_in_both(&stack, &second, PER_NAMESPACE).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let (mut executors, _) = two_executors(&stack, dir.path()).await;
    let arrivals = all_succeeded_once(
        &stack,
        &second,
        &backends,
        &mut executors,
        2 * PER_NAMESPACE,
    )
    .await;
    let mut times: Vec<Instant> = arrivals.iter().map(|a| a.at).collect();
    times.sort();
    let rate = f64::from(RATE);
    let worst = worst_window(&times, rate);
    assert!(
        worst.excess <= TOLERANCE,
        "{} starts within {:?} from arrival {}: {:.2} more than a bucket of {RATE}/s, burst \
         {RATE} allows (tolerance {TOLERANCE})",
        worst.count,
        worst.span,
        worst.from,
        worst.excess
    );
    assert!(
        worst.excess >= -TOLERANCE,
        "no window came within {TOLERANCE} of the bucket's bound ({worst:?}): the rate never \
         bound, the test shows nothing"
    );
    let span = times[times.len() - 1] - times[0];
    eprintln!(
        "rate_per_second {RATE}: {} starts over two executor processes within {span:?}; worst \
         window {} starts within {:?} from arrival {} (excess over the bucket {:.2})",
        times.len(),
        worst.count,
        worst.span,
        worst.from,
        worst.excess
    );
}
