//! Redis becomes unreachable under a running gateway and executor: ticket
//! polls reach PostgreSQL only through the per-process fallback budget and are otherwise `503`
//! with `Retry-After`, nothing new is admitted or started, commands in hand keep landing in
//! PostgreSQL, and everything resumes by itself once Redis is back (empty: the projection is
//! rebuilt), each command ending exactly once.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, SortedSetsInterface};
use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_durable::lifecycle::rebuild;
use sluice_gateway::gateway_config::GatewayConfig;
use tokio::sync::watch;

use crate::execution::{
    all_terminal, assert_counters_settle_at_zero, fast_executor, held_permits, start_executor,
};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{ACCOUNT_LIMIT, arrivals_of, holds_limit, ocr_declaration, row};

/// The fallback budget of the gateway under test: its burst equals its rate (governor's
/// `Quota::per_second`).
const PER_SECOND: u32 = 4;
const CONCURRENCY: usize = 4;

/// Waits until every client of the stack's pool (shared with its gateway and executor) is
/// connected again.
async fn reconnected(stack: &Stack, within: Duration) -> bool {
    eventually(within, || async {
        stack
            .redis
            .pool()
            .clients()
            .iter()
            .all(|c| c.is_connected())
    })
    .await
}

/// The gateway's own counters: (answered from PostgreSQL, refused by the budget).
fn fallbacks(stack: &Stack) -> (u64, u64) {
    let stats = &stack.gateway.stats;
    (
        stats.postgres_fallbacks.load(Ordering::SeqCst),
        stats.fallbacks_refused.load(Ordering::SeqCst),
    )
}

/// What a set of polls made while Redis was down came to.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    from_postgres: u64,
    refused: u64,
    /// From the first request sent to the last answer received.
    first_sent: Option<Instant>,
    last_answered: Option<Instant>,
    /// The slowest answer, and the sum of all answer times (for the mean).
    slowest: Duration,
    total_latency: Duration,
}

impl Tally {
    fn window(&self) -> Duration {
        match (self.first_sent, self.last_answered) {
            (Some(from), Some(to)) => to - from,
            _ => Duration::ZERO,
        }
    }

    fn answers(&self) -> u64 {
        self.from_postgres + self.refused
    }

    fn mean_latency(&self) -> Duration {
        self.total_latency
            .checked_div(u32::try_from(self.answers()).unwrap_or(u32::MAX))
            .unwrap_or_default()
    }

    fn add(&mut self, other: &Tally) {
        self.from_postgres += other.from_postgres;
        self.refused += other.refused;
        self.slowest = self.slowest.max(other.slowest);
        self.total_latency += other.total_latency;
        self.first_sent = [self.first_sent, other.first_sent]
            .into_iter()
            .flatten()
            .min();
        self.last_answered = [self.last_answered, other.last_answered]
            .into_iter()
            .flatten()
            .max();
    }

    /// The most a token bucket of `PER_SECOND` with burst `PER_SECOND` lets through in the
    /// window.
    fn allowed(&self) -> f64 {
        f64::from(PER_SECOND) + f64::from(PER_SECOND) * self.window().as_secs_f64()
    }
}

/// Sends one poll of `ticket` (command `id`, still `accepted`) while Redis is down and checks its
/// answer: `200` from PostgreSQL with the command's status, or `503 UNAVAILABLE` with
/// `Retry-After`.
async fn poll_while_down(stack: &Stack, id: &str, ticket: &str, tally: &mut Tally) {
    let sent = Instant::now();
    let reply = stack.poll(ticket).await;
    let answered = Instant::now();
    tally.first_sent = Some(tally.first_sent.map_or(sent, |t| t.min(sent)));
    tally.last_answered = Some(tally.last_answered.map_or(answered, |t| t.max(answered)));
    tally.slowest = tally.slowest.max(answered - sent);
    tally.total_latency += answered - sent;
    match reply.status {
        StatusCode::OK => {
            let data = reply.data();
            assert_eq!(data["command_id"], id, "{:?}", reply.body);
            assert_eq!(data["status"], "accepted", "{:?}", reply.body);
            // From PostgreSQL: no queue position (that lives in Redis).
            assert_eq!(data["queue"], Value::Null, "{:?}", reply.body);
            tally.from_postgres += 1;
        }
        StatusCode::SERVICE_UNAVAILABLE => {
            assert_eq!(reply.code(), "UNAVAILABLE", "{:?}", reply.body);
            assert_eq!(reply.body["error"]["retryable"], true, "{:?}", reply.body);
            let retry_after = reply
                .headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            assert!(
                retry_after.is_some_and(|s| s >= 1),
                "a 503 without a usable Retry-After: {:?} {:?}",
                reply.headers,
                reply.body
            );
            tally.refused += 1;
        }
        other => panic!(
            "a poll while Redis is down answered {other}: {:?}",
            reply.body
        ),
    }
}

/// `n` polls sent at the same moment (released together by a barrier), over `tickets` in turn.
async fn concurrent_polls(stack: &Arc<Stack>, tickets: &[(String, String)], n: usize) -> Tally {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (stack, barrier) = (stack.clone(), barrier.clone());
        let (id, ticket) = tickets[i % tickets.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            barrier.wait().await;
            poll_while_down(&stack, &id, &ticket, &mut tally).await;
            tally
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        total.add(&task.await.expect("poll task"));
    }
    total
}

/// `pollers` clients polling for `period`, each every 100 ms (ignoring `Retry-After`, as a
/// careless client would).
async fn sustained_polls(
    stack: &Arc<Stack>,
    tickets: &[(String, String)],
    pollers: usize,
    period: Duration,
) -> Tally {
    let until = Instant::now() + period;
    let mut tasks = Vec::new();
    for i in 0..pollers {
        let stack = stack.clone();
        let (id, ticket) = tickets[i % tickets.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            // Spread the first polls over the first interval.
            tokio::time::sleep(Duration::from_millis((i as u64 * 7) % 100)).await;
            while Instant::now() < until {
                poll_while_down(&stack, &id, &ticket, &mut tally).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        total.add(&task.await.expect("poll task"));
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn polls_reach_postgres_only_within_the_fallback_budget_while_redis_is_down() {
    let redis = start_private_redis().await;
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            redis_url: Some(redis.url()),
            config: GatewayConfig {
                fallback_per_second: PER_SECOND,
                fallback_concurrency: CONCURRENCY,
                ..GatewayConfig::default()
            },
            ..StackOptions::default()
        })
        .await,
    );
    // Twenty accepted commands (no executor: they stay `accepted`).
    let offer = offer();
    let mut tickets: Vec<(String, String)> = Vec::new();
    for i in 0..20 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        tickets.push((
            reply.data()["command_id"].as_str().expect("id").to_string(),
            reply.data()["ticket"].as_str().expect("ticket").to_string(),
        ));
    }
    assert_eq!(
        fallbacks(&stack),
        (0, 0),
        "healthy polls never ask PostgreSQL"
    );
    let rows_before = stack.count_rows().await;

    let redis = kill_redis(redis).await;
    assert!(
        stack.redis_disconnected(Duration::from_secs(5)).await,
        "the gateway notices that Redis is gone"
    );

    // 1. Two hundred polls at the same moment.
    let burst = concurrent_polls(&stack, &tickets, 200).await;
    assert_eq!(burst.answers(), 200);
    assert_eq!(
        fallbacks(&stack),
        (burst.from_postgres, burst.refused),
        "the gateway's counters and the answers agree"
    );
    assert!(
        burst.from_postgres >= 1,
        "the budget lets some through: {burst:?}"
    );
    assert!(
        burst.from_postgres as f64 <= burst.allowed(),
        "{} polls reached PostgreSQL in {:?}; the budget allows {:.1}",
        burst.from_postgres,
        burst.window(),
        burst.allowed()
    );

    // 2. Two hundred clients polling for three seconds, while enqueues are attempted: those
    //    are refused, and leave no row.
    let refused_keys = {
        let stack = stack.clone();
        let offer = offer.clone();
        tokio::spawn(async move {
            let mut keys = Vec::new();
            for i in 0..20 {
                let key = key();
                let reply = stack.enqueue(&format!("late-{i}"), &key, &offer).await;
                assert_eq!(
                    reply.status,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "{:?}",
                    reply.body
                );
                assert_eq!(reply.code(), "UNAVAILABLE", "{:?}", reply.body);
                assert_eq!(reply.body["error"]["retryable"], true);
                assert!(
                    reply.headers.contains_key("retry-after"),
                    "{:?}",
                    reply.headers
                );
                keys.push((format!("late-{i}"), key));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            keys
        })
    };
    let sustained = sustained_polls(&stack, &tickets, 200, Duration::from_secs(3)).await;
    let refused_keys = refused_keys.await.expect("enqueue task");
    let mut total = burst;
    total.add(&sustained);
    assert_eq!(
        fallbacks(&stack),
        (total.from_postgres, total.refused),
        "the gateway's counters and the answers agree"
    );
    assert!(
        sustained.from_postgres as f64 <= sustained.allowed(),
        "{} polls reached PostgreSQL in {:?}; the budget allows {:.1}",
        sustained.from_postgres,
        sustained.window(),
        sustained.allowed()
    );
    assert!(
        total.from_postgres as f64 <= total.allowed(),
        "{} polls reached PostgreSQL in {:?} overall; the budget allows {:.1}",
        total.from_postgres,
        total.window(),
        total.allowed()
    );
    // The budget is used, not merely refused: a steady demand gets about the rate.
    let floor = (f64::from(PER_SECOND) * sustained.window().as_secs_f64() / 2.0).floor();
    assert!(
        sustained.from_postgres as f64 >= floor,
        "only {} polls reached PostgreSQL in {:?}",
        sustained.from_postgres,
        sustained.window()
    );
    eprintln!(
        "fallback budget {PER_SECOND}/s, {CONCURRENCY} at once: 200 simultaneous polls → {} from \
         PostgreSQL, {} refused, all answered within {:?} (mean {:?}, slowest {:?}); then {} \
         polls over {:?} → {} from PostgreSQL, {} refused (mean {:?}, slowest {:?})",
        burst.from_postgres,
        burst.refused,
        burst.window(),
        burst.mean_latency(),
        burst.slowest,
        sustained.answers(),
        sustained.window(),
        sustained.from_postgres,
        sustained.refused,
        sustained.mean_latency(),
        sustained.slowest,
    );
    // 3. At most `CONCURRENCY` at once: PostgreSQL is held (a lock blocks the fallback's
    //    SELECT), so the fallbacks that get in stay in flight; once the rate has refilled, more
    //    polls are still refused, at once, because every slot is taken.
    let mut blocker = stack.pg.begin().await.expect("begin");
    sqlx::query("LOCK TABLE commands IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock commands");
    tokio::time::sleep(Duration::from_millis(1_100)).await; // the bucket refills to its burst
    let held: Vec<_> = (0..10)
        .map(|i| {
            let stack = stack.clone();
            let (id, ticket) = tickets[i % tickets.len()].clone();
            tokio::spawn(async move {
                let mut tally = Tally::default();
                poll_while_down(&stack, &id, &ticket, &mut tally).await;
                tally
            })
        })
        .collect();
    let in_flight = eventually(Duration::from_secs(5), || async {
        let (now_from_postgres, now_refused) = fallbacks(&stack);
        now_from_postgres + now_refused == total.answers() + 10
    })
    .await;
    assert!(in_flight, "the ten polls were let in or refused");
    let slots_taken = fallbacks(&stack).0 - total.from_postgres;
    assert!(
        (1..=CONCURRENCY as u64).contains(&slots_taken),
        "{slots_taken} fallbacks in flight at once"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await; // tokens again, but no slot
    let mut crowded = Tally::default();
    for i in 0..10 {
        let (id, ticket) = &tickets[i % tickets.len()];
        poll_while_down(&stack, id, ticket, &mut crowded).await;
    }
    assert_eq!(
        (crowded.from_postgres, crowded.refused),
        (0, 10),
        "refused while {slots_taken} fallbacks are in flight"
    );
    blocker.rollback().await.expect("release the lock");
    let mut released = Tally::default();
    for task in held {
        released.add(&task.await.expect("held poll"));
    }
    assert_eq!(released.from_postgres, slots_taken, "{released:?}");
    // The crowded polls took no token: the next one is let through at once.
    let mut after = Tally::default();
    poll_while_down(&stack, &tickets[0].0, &tickets[0].1, &mut after).await;
    assert_eq!(after.from_postgres, 1, "a token was left: {after:?}");
    total.add(&released);
    total.add(&crowded);
    total.add(&after);
    assert_eq!(
        fallbacks(&stack),
        (total.from_postgres, total.refused),
        "the gateway's counters and the answers agree"
    );
    assert!(
        total.from_postgres as f64 <= total.allowed(),
        "{} polls reached PostgreSQL in {:?} overall; the budget allows {:.1}",
        total.from_postgres,
        total.window(),
        total.allowed()
    );
    eprintln!(
        "held PostgreSQL: {slots_taken} fallbacks in flight, 10 more refused; overall {} polls \
         reached PostgreSQL in {:?} (budget {:.1}), {} refused",
        total.from_postgres,
        total.window(),
        total.allowed(),
        total.refused
    );

    // Refusals come at once: a Redis call fails as soon as no connection is up, it does not
    // wait in a queue for its timeout (2 s).
    assert!(
        sustained.mean_latency() < Duration::from_secs(1),
        "polls while Redis is down took {:?} on average",
        sustained.mean_latency()
    );
    assert_eq!(
        stack.count_rows().await,
        rows_before,
        "no row for a refused enqueue"
    );

    // Redis comes back empty. Once the gateway's connections are back, the next enqueue (the
    // retry of a refused one, same key and body) rebuilds the projection and is accepted.
    let restarted = Instant::now();
    let redis = restart_redis(redis).await;
    assert!(
        reconnected(&stack, Duration::from_secs(10)).await,
        "the gateway reconnects to Redis by itself"
    );
    let reconnect = restarted.elapsed();
    let (subject, key) = &refused_keys[0];
    let next = stack.enqueue(subject, key, &offer).await;
    assert_eq!(next.status, StatusCode::ACCEPTED, "{:?}", next.body);
    assert_eq!(next.data()["deduplicated"], false, "{:?}", next.body);
    assert_eq!(next.data()["queue"]["position"], 20, "{:?}", next.body);
    eprintln!(
        "Redis restarted: connections back after {reconnect:?}, first enqueue accepted after {:?}",
        restarted.elapsed()
    );
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM projections WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_one(&stack.pg)
            .await
            .expect("generation");
    assert_eq!(generation, 2, "the projection was rebuilt once");
    assert_eq!(stack.count_rows().await, rows_before + 1);

    // Old tickets still poll, from Redis again (no fallback), in their original order.
    let before = fallbacks(&stack);
    for (position, (id, ticket)) in tickets.iter().enumerate() {
        let poll = stack.poll(ticket).await;
        assert_eq!(poll.status, StatusCode::OK, "{:?}", poll.body);
        assert_eq!(poll.data()["command_id"], id.as_str());
        assert_eq!(poll.data()["status"], "accepted");
        assert_eq!(poll.data()["generation"], "2");
        assert_eq!(
            poll.data()["queue"]["position"],
            position,
            "{:?}",
            poll.body
        );
    }
    assert_eq!(
        fallbacks(&stack),
        before,
        "polls are answered by Redis again"
    );
    let counters = stack.counters().await;
    let ns = stack.creds.namespace_id;
    for name in [
        "unfinished".to_string(),
        format!("waiting:{ns}"),
        format!("queued:{ns}:claim"),
    ] {
        assert_eq!(
            counters.get(&name).copied(),
            Some(rows_before + 1),
            "{name}: {counters:?}"
        );
    }
    assert_eq!(stack.reservations("claim").await, 0, "no reservation left");
    drop(redis);
}

// ---------------------------------------------------------------------------------------------
// The executor while Redis is unreachable.
// ---------------------------------------------------------------------------------------------

/// What the backend saw: calls in progress per account (and the most at once), and the business
/// effects it performed per idempotency key.
#[derive(Debug, Default)]
struct Ledger {
    in_progress: HashMap<String, usize>,
    most_at_once: HashMap<String, usize>,
    effects: HashMap<String, usize>,
}

/// Enqueues `ocr` for account `account` of provider `gitee`; returns (command id, ticket).
async fn enqueue_doc(stack: &Stack, account: &str, doc: &str) -> (String, String) {
    let body = json!({
        "request_key": key(),
        "subject": format!("user-{doc}"),
        "input": {"provider": "gitee", "account": account, "doc": doc},
    });
    let reply = stack
        .post(
            "/v1/commands/ocr:enqueue",
            Some(&stack.credential()),
            &body.to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    (
        reply.data()["command_id"].as_str().expect("id").to_string(),
        reply.data()["ticket"].as_str().expect("ticket").to_string(),
    )
}

/// Rows of the application that are anything but `accepted` and never attempted, among `ids`.
async fn started_among(stack: &Stack, ids: &[&str]) -> Vec<Value> {
    let mut started = Vec::new();
    for id in ids {
        let row = row(stack, id).await;
        if row["status"] != "accepted" || row["attempts"] != 0 {
            started.push(json!({"id": id, "row": row}));
        }
    }
    started
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_executor_lands_work_in_hand_starts_nothing_and_resumes_when_redis_returns() {
    let redis = start_private_redis().await;
    // `a-0` is answered once Redis is down, `b-0` once the projection has been rebuilt; every
    // other document at once. The backend performs each call's business effect when it
    // answers, and counts it per idempotency key.
    let (redis_down, redis_down_rx) = watch::channel(false);
    let (rebuilt, rebuilt_rx) = watch::channel(false);
    let gates: HashMap<String, watch::Receiver<bool>> = [
        ("a-0".to_string(), redis_down_rx),
        ("b-0".to_string(), rebuilt_rx),
    ]
    .into();
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let seen = ledger.clone();
    let backend = Backend::start(handler(move |arrival| {
        let (gates, seen) = (gates.clone(), seen.clone());
        async move {
            let input = &arrival.body["input"];
            let doc = input["doc"].as_str().unwrap_or("").to_string();
            let account = input["account"].as_str().unwrap_or("").to_string();
            {
                let mut ledger = seen.lock().expect("ledger");
                let now = {
                    let n = ledger.in_progress.entry(account.clone()).or_default();
                    *n += 1;
                    *n
                };
                let most = ledger.most_at_once.entry(account.clone()).or_default();
                *most = (*most).max(now);
            }
            if let Some(gate) = gates.get(&doc) {
                let mut gate = gate.clone();
                let _ = gate.wait_for(|open| *open).await;
            }
            {
                let mut ledger = seen.lock().expect("ledger");
                *ledger.in_progress.entry(account).or_default() -= 1;
                *ledger
                    .effects
                    .entry(arrival.idempotency_key.clone())
                    .or_default() += 1;
            }
            Answer::succeeded(json!({"doc": doc}))
        }
    }))
    .await;
    // One call in flight per account; a timeout far beyond the test's holds.
    let stack = Stack::start_with(StackOptions {
        declaration: ocr_declaration(&backend.url("/ocr"), 60_000, 300, ACCOUNT_LIMIT),
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    backend.set_secret(&stack.creds.webhook_secret);

    // Two accounts, four commands each, all accepted before the executor starts: the heads
    // `a-0` and `b-0` start, the others wait behind the account limit.
    let mut commands: Vec<(String, String, String)> = Vec::new(); // (doc, id, ticket)
    for account in ["a", "b"] {
        for i in 0..4 {
            let doc = format!("{account}-{i}");
            let (id, ticket) = enqueue_doc(&stack, account, &doc).await;
            commands.push((doc, id, ticket));
        }
    }
    let id_of = |doc: &str| -> String {
        commands
            .iter()
            .find(|(d, _, _)| d == doc)
            .map(|(_, id, _)| id.clone())
            .expect("a command of that doc")
    };
    let (a0, b0) = (id_of("a-0"), id_of("b-0"));
    let waiting: Vec<String> = commands
        .iter()
        .filter(|(doc, _, _)| !doc.ends_with("-0"))
        .map(|(_, id, _)| id.clone())
        .collect();
    let waiting_refs: Vec<&str> = waiting.iter().map(String::as_str).collect();
    let executor = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(10), || async {
            !arrivals_of(&backend, &a0).is_empty() && !arrivals_of(&backend, &b0).is_empty()
        })
        .await,
        "the heads reach the backend"
    );
    assert_eq!(backend.arrivals().len(), 2, "only the heads started");

    // Redis goes away while both heads are in hand; then the backend answers `a-0`.
    let redis = kill_redis(redis).await;
    let down_at = Instant::now();
    redis_down.send(true).expect("open the a-0 gate");
    assert!(
        eventually(Duration::from_secs(10), || async {
            row(&stack, &a0).await["status"] == "succeeded"
        })
        .await,
        "a-0 lands while Redis is down: {}",
        row(&stack, &a0).await
    );
    let landed_after = down_at.elapsed();
    assert!(!redis.is_running(), "Redis was down all along");
    let landed = row(&stack, &a0).await;
    assert_eq!(landed["attempts"], 1, "{landed}");
    assert_eq!(landed["result"], json!({"doc": "a-0"}), "{landed}");
    // Its result is visible meanwhile: the ticket poll falls back to PostgreSQL.
    let a0_ticket = &commands[0].2;
    let poll = stack.poll(a0_ticket).await;
    assert_eq!(poll.status, StatusCode::OK, "{:?}", poll.body);
    assert_eq!(poll.data()["status"], "succeeded", "{:?}", poll.body);
    assert_eq!(
        poll.data()["result"],
        json!({"doc": "a-0"}),
        "{:?}",
        poll.body
    );

    // Nothing new starts while Redis is down, although account `a` is free in PostgreSQL's eyes:
    // watch PostgreSQL and the backend for two seconds.
    let watch_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < watch_until {
        let started = started_among(&stack, &waiting_refs).await;
        assert!(
            started.is_empty(),
            "started while Redis was down: {started:?}"
        );
        assert_eq!(backend.arrivals().len(), 2, "a call while Redis was down");
        assert_eq!(row(&stack, &b0).await["status"], "executing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!redis.is_running(), "Redis was down all along");

    // Redis comes back empty: the executor rebuilds the projection by itself.
    let restarted = Instant::now();
    let redis = restart_redis(redis).await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            rebuild::is_ready(&stack.pg, &stack.redis, stack.creds.application_id)
                .await
                .unwrap_or(false)
        })
        .await,
        "the executor rebuilds the projection"
    );
    let rebuilt_after = restarted.elapsed();
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM projections WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_one(&stack.pg)
            .await
            .expect("generation");
    assert_eq!(generation, 2, "rebuilt once");
    // The rebuild gave `b-0`, still in hand, its permits back: account `b` stays busy while
    // account `a` resumes.
    assert!(
        holds_limit(&stack, "account:gitee:b", &b0).await,
        "b-0 holds its account permit after the rebuild"
    );
    let b1 = id_of("b-1");
    assert!(
        eventually(Duration::from_secs(10), || async {
            !arrivals_of(&backend, &id_of("a-1")).is_empty()
        })
        .await,
        "account a resumes after the rebuild"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        arrivals_of(&backend, &b1).is_empty(),
        "b-1 started while b-0 still held account b"
    );
    rebuilt.send(true).expect("open the b-0 gate");

    // Everything ends, exactly once.
    assert!(
        all_terminal(&stack, Duration::from_secs(30)).await,
        "every command ends: {:?}",
        crate::execution::status_counts(&stack).await
    );
    let recovered_after = restarted.elapsed();
    for (doc, id, ticket) in &commands {
        let row = row(&stack, id).await;
        assert_eq!(row["status"], "succeeded", "{doc}: {row}");
        assert_eq!(row["attempts"], 1, "{doc}: {row}");
        assert_eq!(row["result"], json!({"doc": doc}), "{doc}: {row}");
        let arrivals = arrivals_of(&backend, id);
        assert_eq!(arrivals.len(), 1, "{doc}: {arrivals:?}");
        assert_eq!(arrivals[0].idempotency_key, *id, "{doc}");
        assert_eq!(arrivals[0].body["attempt"], 1, "{doc}");
        assert!(arrivals[0].signature_valid, "{doc}");
        let poll = stack.poll(ticket).await;
        assert_eq!(poll.status, StatusCode::OK, "{doc}: {:?}", poll.body);
        assert_eq!(poll.data()["status"], "succeeded", "{doc}: {:?}", poll.body);
    }
    {
        let ledger = ledger.lock().expect("ledger");
        assert_eq!(ledger.effects.len(), commands.len(), "{ledger:?}");
        assert!(
            ledger.effects.values().all(|n| *n == 1),
            "a second business effect: {ledger:?}"
        );
        for account in ["a", "b"] {
            assert_eq!(
                ledger.most_at_once.get(account).copied(),
                Some(1),
                "account {account}: {ledger:?}"
            );
        }
    }
    // Each account's commands reached the backend in their acceptance order.
    let arrivals = backend.arrivals();
    for account in ["a", "b"] {
        let order: Vec<&str> = arrivals
            .iter()
            .filter(|a| a.body["input"]["account"] == account)
            .filter_map(|a| a.body["input"]["doc"].as_str())
            .collect();
        let expected: Vec<String> = (0..4).map(|i| format!("{account}-{i}")).collect();
        assert_eq!(order, expected, "account {account}");
    }
    // Redis agrees with PostgreSQL: nothing unfinished, nothing waiting, no permit held.
    assert_counters_settle_at_zero(&stack, &["ocr"]).await;
    assert_eq!(held_permits(&stack, "ocr").await, 0);
    for account in ["a", "b"] {
        let leases: i64 = stack
            .redis
            .pool()
            .next()
            .zcard(stack.keys().limit_leases(
                stack.creds.namespace_id,
                &format!("account:gitee:{account}"),
            ))
            .await
            .expect("zcard");
        assert_eq!(leases, 0, "account {account} permits");
    }
    let application_leases: i64 = stack
        .redis
        .pool()
        .next()
        .zcard(stack.keys().application_leases())
        .await
        .expect("zcard");
    assert_eq!(application_leases, 0);
    eprintln!(
        "executor: a-0 landed {landed_after:?} after Redis went down; projection rebuilt \
         {rebuilt_after:?} after the restart; all {} commands ended {recovered_after:?} after it",
        commands.len()
    );
    executor.cancel();
    drop(redis);
}
