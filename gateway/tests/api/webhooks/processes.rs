//! Webhook commands run by real `sluice execute` processes (`crate::execution::processes`): limit
//! keys shared by two executors hold at the backend, and an executor SIGKILLed mid-request hands
//! its command to the next one, which sends it again under the same `Idempotency-Key`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fred::prelude::*;
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::execution::processes::{ExecutorProcess, assert_all_land, two_executors};
use crate::execution::status_counts;
use crate::support::webhook_backend::{Answer, Arrival, Backend, handler, worst_window};

const PROVIDERS: [&str; 2] = ["p1", "p2"];
const ACCOUNTS: [&str; 3] = ["a", "b", "c"];
/// Commands of the shared-limits test: 100 per provider, so about 19 s at 5 starts/s.
const COMMANDS: usize = 200;
/// `max_in_flight` of every (provider, account).
const ACCOUNT_LIMIT: i64 = 2;
/// `per_second` of every provider; its burst defaults to the same.
const PROVIDER_RATE: f64 = 5.0;
/// Requests a provider's arrivals may exceed its token bucket by, for delivery jitter. The bucket
/// meters admissions (admit.lua, on Redis time); the backend sees each request a little later,
/// after the claim in PostgreSQL and the HTTP exchange on loopback (milliseconds). Arrivals that
/// bracket a window of admissions can be closer together than the admissions only by the spread
/// of that delay, and at 5/s a spread of 200 ms is worth one request: one request is far above
/// that spread here, and far below what a bucket per executor (twice the rate: dozens of requests
/// over this run) would show.
const RATE_TOLERANCE: f64 = 1.0;

/// A (provider, account) pair, the unit of the account limit.
type Account = (String, String);

/// What the backend measured of its own load.
#[derive(Default)]
struct Load {
    /// Requests accepted (`202`) and not yet finished on the backend's side.
    active: HashMap<Account, i64>,
    /// The most `active` ever was.
    max: BTreeMap<Account, i64>,
    /// The status of every `:complete` the backend sent.
    completes: Vec<u16>,
}

fn account_of(arrival: &Arrival) -> Account {
    let field = |name: &str| {
        arrival.body["input"][name]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    (field("provider"), field("account"))
}

/// Two executor processes drain 200 webhook commands under shared limit keys: at most 2 in
/// flight per (provider, account), 5 starts per second per provider. The backend answers `202`
/// and reports each result through `:complete` a little later; its own record must show both
/// limits held across the processes, and every command succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_keep_account_concurrency_and_provider_rate_at_the_backend() {
    let load = Arc::new(Mutex::new(Load::default()));
    // The backend exists before the stack (the declaration names its URL); it reaches the
    // gateway once the stack is set, which is before any command runs.
    let gateway: Arc<OnceLock<Arc<Stack>>> = Arc::new(OnceLock::new());
    let backend = Backend::start(handler({
        let (load, gateway) = (load.clone(), gateway.clone());
        move |arrival: Arrival| {
            let (load, gateway) = (load.clone(), gateway.clone());
            async move {
                let account = account_of(&arrival);
                {
                    let mut load = load.lock().expect("load");
                    let active = load.active.entry(account.clone()).or_default();
                    *active += 1;
                    let now = *active;
                    let max = load.max.entry(account.clone()).or_default();
                    *max = (*max).max(now);
                }
                let id = arrival.idempotency_key.clone();
                let doc = arrival.body["input"]["doc"].clone();
                tokio::spawn(async move {
                    // The provider works on it for a while.
                    tokio::time::sleep(Duration::from_millis(rand::random_range(20..=80))).await;
                    // Finished on the backend's side first, reported second: the backend counts
                    // a task only between its arrival (after admit.lua took its permits) and
                    // here (before `:complete` releases them), inside the permits' lifetime, so
                    // any overlap it sees is an overlap of permits. (Counting down after the
                    // `:complete` would count a released permit's task next to the one that
                    // took its place.)
                    *load
                        .lock()
                        .expect("load")
                        .active
                        .get_mut(&account)
                        .expect("counted on arrival") -= 1;
                    let stack = gateway.get().expect("the stack is set");
                    let reply = complete(
                        stack,
                        &id,
                        json!({"outcome": "succeeded", "result": {"doc": doc}}),
                    )
                    .await;
                    load.lock()
                        .expect("load")
                        .completes
                        .push(reply.status.as_u16());
                });
                Answer::status(202)
            }
        }
    }))
    .await;
    let limits = format!(
        r#"{{ key = "account:{{provider}}:{{account}}", max_in_flight = {ACCOUNT_LIMIT} }},
           {{ key = "provider:{{provider}}", per_second = {PROVIDER_RATE} }}"#
    );
    let stack = Arc::new(ocr_stack(&backend, 5_000, 120, &limits).await);
    assert!(gateway.set(stack.clone()).is_ok());

    // Every (provider, account) pair: i % 2 and i % 3 together run through all six. The queues
    // are per account name (the resource key), so each holds both providers' commands.
    let enqueue_started = Instant::now();
    let enqueuers: Vec<_> = (0..8)
        .map(|t| {
            let stack = stack.clone();
            tokio::spawn(async move {
                for i in (t..COMMANDS).step_by(8) {
                    let (provider, account) = (PROVIDERS[i % 2], ACCOUNTS[i % 3]);
                    enqueue_ocr(
                        &stack,
                        &format!("user-{i}"),
                        provider,
                        account,
                        &format!("doc-{i}"),
                    )
                    .await;
                }
            })
        })
        .collect();
    for enqueuer in enqueuers {
        enqueuer.await.expect("enqueue task");
    }
    let enqueued_in = enqueue_started.elapsed();

    let dir = tempfile::tempdir().expect("tempdir");
    let ([mut first, mut second], _) = two_executors(&stack, dir.path()).await;
    let started = Instant::now();
    assert_all_land(&stack, Duration::from_secs(45), [&first, &second]).await;
    let drained_in = started.elapsed();
    let reported = eventually(Duration::from_secs(10), || async {
        load.lock().expect("load").completes.len() == COMMANDS
    })
    .await;
    assert!(reported, "every :complete answered");
    assert_eq!(
        status_counts(&stack).await,
        HashMap::from([("succeeded".to_string(), COMMANDS as i64)])
    );

    assert_eq!(
        own_results_after_one_attempt(&stack).await,
        COMMANDS as i64,
        "each command holds the result its :complete reported, after one attempt"
    );

    let (max, completes) = {
        let load = load.lock().expect("load");
        (load.max.clone(), load.completes.clone())
    };
    assert!(
        completes.iter().all(|status| *status == 200),
        "every :complete lands: {completes:?}"
    );

    let arrivals = backend.arrivals();
    assert_eq!(arrivals.len(), COMMANDS, "one request per command");
    assert!(arrivals.iter().all(|a| a.signature_valid));
    assert!(arrivals.iter().all(|a| a.body["attempt"] == 1));
    let keys: HashSet<&str> = arrivals
        .iter()
        .map(|a| a.idempotency_key.as_str())
        .collect();
    assert_eq!(keys.len(), COMMANDS, "no command sent twice");

    assert_eq!(max.len(), 6, "every (provider, account) pair ran: {max:?}");
    assert!(
        max.values().all(|m| *m <= ACCOUNT_LIMIT),
        "at most {ACCOUNT_LIMIT} in flight per (provider, account): {max:?}"
    );
    // The first admissions take each provider's burst of 5 over its 3 accounts at once, so some
    // account runs 2: the bound above was reached, not merely never approached.
    assert!(
        max.values().any(|m| *m == ACCOUNT_LIMIT),
        "no (provider, account) ever ran {ACCOUNT_LIMIT} at once: {max:?}"
    );

    let mut windows = Vec::new();
    for provider in PROVIDERS {
        let mut times: Vec<Instant> = arrivals
            .iter()
            .filter(|a| a.body["input"]["provider"] == provider)
            .map(|a| a.at)
            .collect();
        times.sort();
        assert_eq!(times.len(), COMMANDS / 2);
        let worst = worst_window(&times, PROVIDER_RATE);
        assert!(
            worst.excess <= RATE_TOLERANCE,
            "{provider}: {} starts within {:?} from arrival {}, {:.2} more than a bucket of \
             {PROVIDER_RATE}/s allows (tolerance {RATE_TOLERANCE})",
            worst.count,
            worst.span,
            worst.from,
            worst.excess
        );
        windows.push((provider, worst, max_in_one_second(&times)));
    }

    assert!(
        unfinished_becomes(&stack, 0).await,
        "unfinished back to 0: {:?}",
        stack.counters().await
    );
    let ns = stack.creds.namespace_id;
    let mut permits = vec![stack.keys().command_leases(ns, "ocr")];
    for provider in PROVIDERS {
        for account in ACCOUNTS {
            permits.push(
                stack
                    .keys()
                    .limit_leases(ns, &format!("account:{provider}:{account}")),
            );
        }
    }
    for lease in &permits {
        let held: i64 = stack.redis.pool().next().zcard(lease).await.expect("zcard");
        assert_eq!(held, 0, "{lease}: no permit outlives its command");
    }
    assert!(first.is_running(), "{}", first.log_text());
    assert!(second.is_running(), "{}", second.log_text());

    eprintln!(
        "shared limits: {COMMANDS} commands enqueued in {enqueued_in:?}, drained in \
         {drained_in:?}; max in flight per (provider, account) {max:?}"
    );
    for (provider, worst, per_second) in windows {
        eprintln!(
            "  {provider}: at most {per_second} starts in any 1 s; worst pair {} starts within \
             {:?} from arrival {} (excess over the bucket {:.2})",
            worst.count, worst.span, worst.from, worst.excess
        );
    }
}

/// The most arrivals within any one second.
fn max_in_one_second(times: &[Instant]) -> usize {
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t - times[i] < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// An executor SIGKILLed while its request is at the backend: the backend applied the command
/// (keyed by `Idempotency-Key`) and never answered. Once the dead executor's lease lapses, the
/// other executor rescues the command and sends it again with the same key; the backend sees the
/// key applied and answers `200` with the stored result, without a second effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cut_off_by_a_sigkill_is_resent_once_under_the_same_idempotency_key() {
    let applied: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
    let effects = Arc::new(AtomicUsize::new(0));
    let backend = Backend::start(handler({
        let (applied, effects) = (applied.clone(), effects.clone());
        move |arrival: Arrival| {
            let (applied, effects) = (applied.clone(), effects.clone());
            async move {
                {
                    let mut applied = applied.lock().expect("applied");
                    if let Some(result) = applied.get(&arrival.idempotency_key) {
                        return Answer::succeeded(result.clone());
                    }
                    let effect = effects.fetch_add(1, Ordering::SeqCst) + 1;
                    let result = json!({"effect": effect, "doc": arrival.body["input"]["doc"]});
                    applied.insert(arrival.idempotency_key.clone(), result);
                }
                // Applied, and never answered: the sender dies first.
                std::future::pending::<Answer>().await
            }
        }
    }))
    .await;
    let stack = stack_with(
        &backend,
        &ocr_declaration(
            &backend.url("/ocr"),
            10_000,
            60,
            r#"{ key = "account:{provider}:{account}", max_in_flight = 1 }"#,
        ),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut doomed = ExecutorProcess::spawn(&stack, dir.path(), "doomed");
    let doomed_owner = doomed.running().await;
    let id = enqueue_ocr(&stack, "user-1", "p1", "a", "contract").await;
    let arrived = eventually(Duration::from_secs(10), || {
        std::future::ready(!backend.arrivals().is_empty())
    })
    .await;
    assert!(
        arrived,
        "the request reaches the backend: {}",
        doomed.log_text()
    );
    assert_eq!(
        lease_owner(&stack, &id).await,
        Some(doomed_owner),
        "the doomed executor holds the command"
    );
    // The heir is up before the kill and cannot take the command while the lease holds.
    let mut heir = ExecutorProcess::spawn(&stack, dir.path(), "heir");
    heir.running().await;
    assert_eq!(backend.arrivals().len(), 1);
    let killed_at = Instant::now();
    doomed.kill();

    let landed = until_status(&stack, &id, "succeeded", Duration::from_secs(15)).await;
    assert!(
        landed,
        "the heir finishes the command: {}\n{}",
        row(&stack, &id).await,
        heir.log_text()
    );
    let arrivals = backend.arrivals();
    assert_eq!(arrivals.len(), 2, "{arrivals:?}");
    for arrival in &arrivals {
        assert_eq!(arrival.idempotency_key, id, "the same Idempotency-Key");
        assert_eq!(arrival.body["command_id"], id.as_str());
        assert!(arrival.signature_valid);
    }
    assert_eq!(arrivals[0].body["attempt"], 1);
    assert_eq!(arrivals[1].body["attempt"], 2);
    assert_eq!(effects.load(Ordering::SeqCst), 1, "one business effect");
    // The dead executor renewed its lease (1.5 s) at most a third of it before the kill, so the
    // lease lapsed at least 1 s after it; a resend before then would be a second executor
    // acting on a command that was still held.
    let resent_after = arrivals[1].at - killed_at;
    assert!(
        resent_after >= Duration::from_millis(900),
        "resent only once the lease lapsed, not {resent_after:?} after the kill"
    );
    let landed = row(&stack, &id).await;
    assert_eq!(landed["attempts"], 2, "{landed}");
    assert_eq!(landed["result"], json!({"effect": 1, "doc": "contract"}));
    assert!(landed["error_code"].is_null(), "{landed}");

    assert!(
        unfinished_becomes(&stack, 0).await,
        "unfinished back to 0: {:?}",
        stack.counters().await
    );
    let ns = stack.creds.namespace_id;
    for lease in [
        stack.keys().command_leases(ns, "ocr"),
        stack.keys().limit_leases(ns, "account:p1:a"),
    ] {
        let held: i64 = stack
            .redis
            .pool()
            .next()
            .zcard(&lease)
            .await
            .expect("zcard");
        assert_eq!(held, 0, "{lease}: no permit outlives the command");
    }
    assert!(heir.is_running(), "{}", heir.log_text());
    eprintln!("SIGKILL mid-request: resent {resent_after:?} after the kill");
}

/// The executor holding the command's lease in PostgreSQL.
async fn lease_owner(stack: &Stack, id: &str) -> Option<Uuid> {
    sqlx::query_scalar("SELECT lease_owner FROM commands WHERE id = $1")
        .bind(id.parse::<Uuid>().expect("uuid"))
        .fetch_one(&stack.pg)
        .await
        .expect("lease owner")
}
