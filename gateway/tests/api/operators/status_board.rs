//! `GET /v1/status` against real servers: every figure of the board equals what the test
//! computes on its own (its own SQL over `commands` and `quota_pools`, `ZCARD`/`ZCOUNT` of the
//! live Redis keys), the pause flags follow `POST /v1/control`, only `status:read` opens it, it
//! still answers from PostgreSQL while Redis is gone, and with a million rows in the namespace
//! none of its queries scans `commands`. The scripts alone (`status_board.lua`, the outcome
//! counting of `land.lua`) are tested in `durable/tests/lua/status_board.rs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fred::prelude::*;
use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_durable::ids::NamespaceId;
use sluice_durable::status_board::{COMMANDS_QUERIES, TOP};
use sluice_executor::Executor;
use sluice_redis::AppKeys;
use sluice_store::tenancy;
use tokio_util::sync::CancellationToken;

use crate::execution::{
    OPEN_ADMISSION, cancel, enqueue_command, fast_executor, pool, quota_command,
};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{ACCOUNT_LIMIT, complete, enqueue_ocr, ocr_declaration, stack_with};
use sluice_redis::Projection;

const TERMINAL: [&str; 5] = ["succeeded", "rejected", "failed", "expired", "cancelled"];

// ---------------------------------------------------------------------------------------------
// What the board says, and what the servers hold.
// ---------------------------------------------------------------------------------------------

/// The board's `data` as `bearer` gets it (must be `200`).
async fn board(stack: &Stack, bearer: &str) -> Value {
    let reply = stack.get("/v1/status", Some(bearer)).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply.data().clone()
}

/// Unfinished rows of `namespace` per (command, status): count and oldest `accepted_at`,
/// computed with the test's own SQL (terminal statuses excluded, not unfinished ones listed).
async fn pg_unfinished(
    stack: &Stack,
    namespace: NamespaceId,
) -> BTreeMap<(String, String), (i64, DateTime<Utc>)> {
    sqlx::query_as::<_, (String, String, i64, DateTime<Utc>)>(
        "SELECT command, status, count(*), min(accepted_at) FROM commands
          WHERE namespace_id = $1
            AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')
          GROUP BY command, status",
    )
    .bind(namespace)
    .fetch_all(&stack.pg)
    .await
    .expect("unfinished rows")
    .into_iter()
    .map(|(command, status, n, oldest)| ((command, status), (n, oldest)))
    .collect()
}

/// Every row of `namespace` per (command, status).
async fn pg_statuses(stack: &Stack, namespace: NamespaceId) -> BTreeMap<(String, String), i64> {
    sqlx::query_as::<_, (String, String, i64)>(
        "SELECT command, status, count(*) FROM commands WHERE namespace_id = $1 GROUP BY 1, 2",
    )
    .bind(namespace)
    .fetch_all(&stack.pg)
    .await
    .expect("rows by status")
    .into_iter()
    .map(|(command, status, n)| ((command, status), n))
    .collect()
}

fn expect_statuses(pairs: &[(&str, &str, i64)]) -> BTreeMap<(String, String), i64> {
    pairs
        .iter()
        .map(|(c, s, n)| ((c.to_string(), s.to_string()), *n))
        .collect()
}

/// A decimal-string count of the board.
fn dec(value: &Value) -> i64 {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a decimal string, not {value}"))
        .parse()
        .expect("a decimal count")
}

/// The board's command entry `code`.
fn command_of<'a>(board: &'a Value, code: &str) -> &'a Value {
    board["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .find(|c| c["command"] == code)
        .unwrap_or_else(|| panic!("no command {code} on the board: {}", board["commands"]))
}

/// The per-command statuses and `waiting` of the board equal PostgreSQL's rows: same
/// (command, status) pairs, same counts, same oldest `accepted_at` (to the millisecond shown).
async fn assert_counts_match(stack: &Stack, namespace: NamespaceId, board: &Value) {
    let truth = pg_unfinished(stack, namespace).await;
    let mut shown = BTreeMap::new();
    for command in board["commands"].as_array().expect("commands") {
        let code = command["command"].as_str().expect("code").to_string();
        let mut accepted = 0;
        for entry in command["statuses"].as_array().expect("statuses") {
            let status = entry["status"].as_str().expect("status").to_string();
            let oldest =
                DateTime::parse_from_rfc3339(entry["oldest_accepted_at"].as_str().expect("oldest"))
                    .expect("RFC 3339")
                    .with_timezone(&Utc);
            if status == "accepted" {
                accepted = dec(&entry["count"]);
            }
            let previous = shown.insert((code.clone(), status), (dec(&entry["count"]), oldest));
            assert!(previous.is_none(), "a status shown twice: {command}");
        }
        assert_eq!(
            dec(&command["waiting"]),
            accepted,
            "waiting is the accepted count: {command}"
        );
    }
    let expected: BTreeMap<_, _> = truth.iter().map(|(k, (n, _))| (k.clone(), *n)).collect();
    let counted: BTreeMap<_, _> = shown.iter().map(|(k, (n, _))| (k.clone(), *n)).collect();
    assert_eq!(counted, expected, "counts per command and status");
    for (key, (_, oldest)) in &truth {
        assert_eq!(
            shown[key].1.timestamp_millis(),
            oldest.timestamp_millis(),
            "oldest accepted_at of {key:?}"
        );
    }
}

/// The quota pools of the board equal the table.
async fn assert_pools_match(stack: &Stack, namespace: NamespaceId, board: &Value) {
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT code, capacity, allocated, reserved FROM quota_pools WHERE namespace_id = $1
          ORDER BY code",
    )
    .bind(namespace)
    .fetch_all(&stack.pg)
    .await
    .expect("pools");
    let expected: Vec<Value> = rows
        .into_iter()
        .map(|(code, capacity, allocated, reserved)| {
            json!({"code": code, "capacity": capacity, "allocated": allocated,
                   "reserved": reserved, "available": capacity - allocated - reserved})
        })
        .collect();
    assert_eq!(board["quota_pools"], json!(expected), "quota pools");
}

/// Live members (expiry after now) of a lease zset.
async fn live(redis: &Projection, key: &str) -> i64 {
    sluice_testkit::live_leases(redis.pool(), key).await
}

async fn zcard(redis: &Projection, key: &str) -> i64 {
    redis.pool().next().zcard(key).await.expect("zcard")
}

/// An executor in this process, and the task to await once its token is cancelled (so the
/// test knows it has stopped, not merely that it was asked to).
fn spawn_executor(stack: &Stack) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let executor = Executor::new(stack.pg.clone(), stack.redis.clone(), fast_executor());
    let running = tokio::spawn(executor.run(shutdown.clone()));
    (shutdown, running)
}

/// Every whole second of outcomes the board showed, read in the background every 50 ms. A
/// second the board shows is over (the current one is never shown), so its figures must never
/// change afterwards; the sum over all seconds seen is what finished while watching.
struct OutcomeLog {
    seconds: Arc<Mutex<BTreeMap<String, Value>>>,
    changed: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

impl OutcomeLog {
    fn watch(stack: Arc<Stack>, bearer: String) -> OutcomeLog {
        let log = OutcomeLog {
            seconds: Arc::default(),
            changed: Arc::default(),
            stop: CancellationToken::new(),
        };
        let (seconds, changed, stop) = (log.seconds.clone(), log.changed.clone(), log.stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let reply = stack.get("/v1/status", Some(&bearer)).await;
                if reply.status == StatusCode::OK {
                    let mut seen = seconds.lock().expect("outcome log");
                    for second in reply.data()["outcomes"].as_array().into_iter().flatten() {
                        let at = second["second"].as_str().expect("second").to_string();
                        match seen.get(&at) {
                            Some(before) if before != second => changed
                                .lock()
                                .expect("changes")
                                .push(format!("{at}: {before} then {second}")),
                            Some(_) => {}
                            None => {
                                seen.insert(at, second.clone());
                            }
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = stop.cancelled() => {}
                }
            }
        });
        log
    }

    /// Outcomes per final status over every second seen.
    fn totals(&self) -> BTreeMap<String, i64> {
        let seen = self.seconds.lock().expect("outcome log");
        TERMINAL
            .iter()
            .map(|status| {
                let sum = seen
                    .values()
                    .map(|s| s[*status].as_i64().expect("a count"))
                    .sum();
                (status.to_string(), sum)
            })
            .collect()
    }
}

impl Drop for OutcomeLog {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Terminal rows of `namespace` per status (all statuses present, 0 when none).
async fn pg_finished(stack: &Stack, namespace: NamespaceId) -> BTreeMap<String, i64> {
    let rows = pg_statuses(stack, namespace).await;
    TERMINAL
        .iter()
        .map(|status| {
            let n = rows
                .iter()
                .filter(|((_, s), _)| s == status)
                .map(|(_, n)| n)
                .sum();
            (status.to_string(), n)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The board of a live namespace.
// ---------------------------------------------------------------------------------------------

/// Two commands (a quota `claim`, a webhook `ocr` whose backend answers `202`, one in flight per
/// account) over several resources: claims executed and waiting, ocr running and waiting behind
/// their account's limit, results landed twice and cancels made twice; a second namespace of
/// the same application with deeper queues. Every figure of the board equals PostgreSQL (the
/// test's own SQL) or the live Redis keys, and the outcomes per second add up to exactly the
/// commands that finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_board_equals_postgres_and_the_live_projection() {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock")
        + &pool("stock", 3)
        + &ocr_declaration(&backend.url("/ocr"), 10_000, 600, ACCOUNT_LIMIT);
    let stack = Arc::new(stack_with(&backend, &declaration).await);
    let ns = stack.creds.namespace_id;
    let keys = stack.keys();
    let operator = credential_with_scopes(&stack, ns, &["status:read"]).await;
    let outcomes = OutcomeLog::watch(stack.clone(), operator.clone());

    // Another namespace of the same application: its queues share the ready set.
    let other = bootstrap_namespace(&stack, "other", vec![], false).await;
    tenancy::apply_declaration(
        &stack.pg,
        other.namespace_id,
        &(quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 10)),
        "test",
        None,
    )
    .await
    .expect("declare the other namespace");

    // 1. With an executor: six claims over three offers (three allocated, three sold out), six
    //    ocr over three accounts (one running per account; the rest wait behind the limit).
    let (executor, running) = spawn_executor(&stack);
    let offers: Vec<String> = (0..3).map(|_| offer()).collect();
    for i in 0..6 {
        let reply = enqueue_command(
            &stack,
            "claim",
            &format!("buyer-{i}"),
            &key(),
            &offers[i % 3],
        )
        .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let mut ocr: HashMap<&str, Vec<String>> = HashMap::new();
    for (account, n) in [("a", 3), ("b", 2), ("c", 1)] {
        for j in 0..n {
            let id = enqueue_ocr(
                &stack,
                &format!("reader-{account}{j}"),
                "gitee",
                account,
                "d",
            )
            .await;
            ocr.entry(account).or_default().push(id);
        }
    }
    let settled = expect_statuses(&[
        ("claim", "succeeded", 3),
        ("claim", "rejected", 3),
        ("ocr", "running", 3),
        ("ocr", "accepted", 3),
    ]);
    assert!(
        eventually(Duration::from_secs(20), || async {
            pg_statuses(&stack, ns).await == settled
        })
        .await,
        "claims decided and one ocr running per account: {:?}",
        pg_statuses(&stack, ns).await
    );
    executor.cancel();
    running.await.expect("the executor stops");

    // 2. No executor any more: claims waiting on two offers; five waiting on one offer of the
    //    other namespace, deeper than any queue of this one.
    let (x, y, z) = (offer(), offer(), offer());
    let mut waiting_claims = Vec::new();
    for (i, offer_id) in [&x, &x, &x, &y].into_iter().enumerate() {
        let reply = enqueue_command(&stack, "claim", &format!("late-{i}"), &key(), offer_id).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        waiting_claims.push(reply.data()["command_id"].as_str().expect("id").to_string());
    }
    for i in 0..5 {
        let body =
            json!({"request_key": key(), "subject": format!("o-{i}"), "input": {"offer": z}});
        let reply = stack
            .post(
                "/v1/commands/claim:enqueue",
                Some(&other.credential),
                &body.to_string(),
            )
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }

    // 3. Results through the gateway, each twice: account c's ocr lands (land.lua), a waiting
    //    ocr of account a and a waiting claim are cancelled (land.lua too).
    for _ in 0..2 {
        let landed = complete(&stack, &ocr["c"][0], json!({"outcome": "succeeded"})).await;
        assert_eq!(landed.status, StatusCode::OK, "{:?}", landed.body);
        for id in [&ocr["a"][1], &waiting_claims[0]] {
            let cancelled = cancel(&stack, id).await;
            assert_eq!(cancelled.status, StatusCode::OK, "{:?}", cancelled.body);
            assert_eq!(cancelled.data()["status"], "cancelled");
        }
    }
    assert_eq!(
        pg_statuses(&stack, ns).await,
        expect_statuses(&[
            ("claim", "succeeded", 3),
            ("claim", "rejected", 3),
            ("claim", "cancelled", 1),
            ("claim", "accepted", 3),
            ("ocr", "running", 2),
            ("ocr", "accepted", 2),
            ("ocr", "succeeded", 1),
            ("ocr", "cancelled", 1),
        ])
    );

    let shown = board(&stack, &operator).await;
    println!("status board: {shown:#}");

    // Head: this namespace, the trusted generation, ready.
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM projections WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_one(&stack.pg)
            .await
            .expect("generation");
    assert_eq!(shown["namespace"], json!(ns));
    assert_eq!(shown["generation"], json!(generation.to_string()));
    assert_eq!(shown["ready"], true);
    assert_eq!(shown["projection_reachable"], true);
    assert_eq!(shown["paused"], json!({"namespace": false, "commands": []}));

    // PostgreSQL's part.
    assert_counts_match(&stack, ns, &shown).await;
    assert_pools_match(&stack, ns, &shown).await;
    assert_eq!(
        shown["quota_pools"],
        json!([{"code": "stock", "capacity": 3, "allocated": 3, "reserved": 0, "available": 0}])
    );
    let codes: Vec<&str> = shown["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| c["command"].as_str().expect("code"))
        .collect();
    assert_eq!(codes, ["claim", "ocr"], "declared commands, in order");
    assert_eq!(command_of(&shown, "claim")["handler"], "quota");
    assert_eq!(command_of(&shown, "ocr")["handler"], "webhook");
    assert_eq!(command_of(&shown, "ocr")["max_in_flight"], 1000);
    assert_eq!(command_of(&shown, "claim")["waiting"], "3");
    assert_eq!(command_of(&shown, "ocr")["waiting"], "2");

    // Queues: exactly this namespace's queues with waiting commands (from PostgreSQL), deepest
    // first, each as deep as its Redis queue.
    let by_resource: Vec<(String, String, i64)> = sqlx::query_as(
        "SELECT command, resource_key, count(*) FROM commands
          WHERE namespace_id = $1 AND status = 'accepted' GROUP BY 1, 2",
    )
    .bind(ns)
    .fetch_all(&stack.pg)
    .await
    .expect("queues");
    let queues = &shown["queues"];
    let busiest = queues["busiest"].as_array().expect("busiest");
    let listed: HashSet<(String, String, i64)> = busiest
        .iter()
        .map(|q| {
            (
                q["command"].as_str().expect("command").to_string(),
                q["resource_key"].as_str().expect("resource").to_string(),
                q["waiting"].as_i64().expect("waiting"),
            )
        })
        .collect();
    assert_eq!(
        listed,
        by_resource.iter().cloned().collect::<HashSet<_>>(),
        "busiest queues"
    );
    assert_eq!(busiest.len(), by_resource.len(), "{busiest:?}");
    assert_eq!(queues["resources_waiting"], json!(by_resource.len()));
    let mut with_work = 0;
    for command in shown["commands"].as_array().expect("commands") {
        let code = command["command"].as_str().expect("code");
        with_work += zcard(&stack.redis, &keys.resource_ready(ns, code)).await;
    }
    assert_eq!(queues["scanned"], json!(with_work));
    let depths: Vec<i64> = busiest
        .iter()
        .map(|q| q["waiting"].as_i64().unwrap_or(-1))
        .collect();
    assert!(
        depths.windows(2).all(|w| w[0] >= w[1]),
        "deepest first: {depths:?}"
    );
    assert_eq!(depths.first(), Some(&2), "{busiest:?}");
    for q in busiest {
        let (command, resource) = (
            q["command"].as_str().expect("command"),
            q["resource_key"].as_str().expect("resource"),
        );
        assert_ne!(resource, z, "another namespace's queue shows");
        assert_eq!(
            q["waiting"].as_i64(),
            Some(zcard(&stack.redis, &keys.queue(ns, command, resource)).await),
            "{q}"
        );
        let suffix = AppKeys::queue_suffix(ns, command, resource);
        assert_eq!(
            q["in_flight"].as_i64(),
            Some(live(&stack.redis, &keys.resource_leases(&suffix)).await),
            "{q}"
        );
    }

    // In flight: the live members of the lease zsets.
    let app_live = live(&stack.redis, &keys.application_leases()).await;
    assert_eq!(app_live, 2, "the two running ocr hold application permits");
    assert_eq!(
        shown["in_flight"]["application"]["in_flight"],
        json!(app_live)
    );
    let max_concurrency: i64 =
        sqlx::query_scalar("SELECT max_concurrency FROM applications WHERE id = $1")
            .bind(stack.creds.application_id)
            .fetch_one(&stack.pg)
            .await
            .expect("max_concurrency");
    assert_eq!(
        shown["in_flight"]["application"]["max_concurrency"],
        json!(max_concurrency)
    );
    for code in ["claim", "ocr"] {
        assert_eq!(
            command_of(&shown, code)["in_flight"],
            json!(live(&stack.redis, &keys.command_leases(ns, code)).await),
            "{code}"
        );
    }
    assert_eq!(command_of(&shown, "ocr")["in_flight"], 2);
    let holders: HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT k->>1, count(*) FROM commands, jsonb_array_elements(limit_keys) AS k
          WHERE namespace_id = $1 AND status IN ('executing', 'running', 'retry_wait')
          GROUP BY 1",
    )
    .bind(ns)
    .fetch_all(&stack.pg)
    .await
    .expect("holders")
    .into_iter()
    .collect();
    assert_eq!(
        holders.keys().collect::<HashSet<_>>(),
        HashSet::from([
            &"account:gitee:a".to_string(),
            &"account:gitee:b".to_string()
        ])
    );
    let limit_keys = shown["in_flight"]["limit_keys"]
        .as_array()
        .expect("limit keys");
    assert_eq!(limit_keys.len(), holders.len(), "{limit_keys:?}");
    for entry in limit_keys {
        let key = entry["key"].as_str().expect("key");
        assert_eq!(
            entry["holders"].as_i64(),
            holders.get(key).copied(),
            "{entry}"
        );
        let held = live(&stack.redis, &keys.limit_leases(ns, key)).await;
        assert_eq!(held, 1, "{key}");
        assert_eq!(entry["in_flight"], json!(held), "{entry}");
    }

    // Outcomes: every second seen adds up to exactly the commands that finished, each once.
    let finished = pg_finished(&stack, ns).await;
    assert_eq!(
        finished.values().sum::<i64>(),
        9,
        "3 + 1 succeeded, 3 rejected, 2 cancelled: {finished:?}"
    );
    let added_up = eventually(Duration::from_secs(15), || async {
        outcomes.totals() == finished
    })
    .await;
    assert!(
        added_up,
        "outcomes seen {:?}, finished {finished:?}; seconds {:?}",
        outcomes.totals(),
        outcomes.seconds.lock().expect("log")
    );
    let changed = outcomes.changed.lock().expect("changes").clone();
    assert!(changed.is_empty(), "a past second changed: {changed:?}");

    // The other namespace's board shows its own queue and nothing of this one.
    let theirs = board(&stack, &other.credential).await;
    assert_eq!(theirs["namespace"], json!(other.namespace_id));
    let their_busiest = theirs["queues"]["busiest"].as_array().expect("busiest");
    assert_eq!(their_busiest.len(), 1, "{their_busiest:?}");
    assert_eq!(their_busiest[0]["resource_key"], json!(z));
    assert_eq!(their_busiest[0]["waiting"], 5);
    assert_eq!(theirs["in_flight"]["limit_keys"], json!([]));
    assert_counts_match(&stack, other.namespace_id, &theirs).await;
    assert_eq!(
        theirs["outcomes"]
            .as_array()
            .expect("outcomes")
            .iter()
            .map(|s| TERMINAL
                .iter()
                .map(|t| s[*t].as_i64().unwrap_or(-1))
                .sum::<i64>())
            .sum::<i64>(),
        0,
        "no outcomes in the other namespace"
    );
}

// ---------------------------------------------------------------------------------------------
// Pauses, scopes, parameters.
// ---------------------------------------------------------------------------------------------

async fn control(stack: &Stack, bearer: &str, body: Value) {
    let reply = stack
        .post("/v1/control", Some(bearer), &body.to_string())
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
}

/// (namespace paused, paused commands, per-command flags) of the board.
fn pause_flags(board: &Value) -> (bool, Value, Vec<(String, bool)>) {
    let per_command = board["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .map(|c| {
            (
                c["command"].as_str().expect("code").to_string(),
                c["paused"].as_bool().expect("paused"),
            )
        })
        .collect();
    (
        board["paused"]["namespace"]
            .as_bool()
            .expect("namespace flag"),
        board["paused"]["commands"].clone(),
        per_command,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_flags_follow_the_controls() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock")
        + &quota_command("refund", OPEN_ADMISSION, "", "stock")
        + &pool("stock", 10);
    let stack = Stack::with_declaration(&declaration).await;
    let ns = stack.creds.namespace_id;
    let operator = credential_with_scopes(&stack, ns, &["status:read", "control:manage"]).await;
    let flags = |claim: bool, refund: bool| {
        vec![("claim".to_string(), claim), ("refund".to_string(), refund)]
    };

    assert_eq!(
        pause_flags(&board(&stack, &operator).await),
        (false, json!([]), flags(false, false))
    );
    control(&stack, &operator, json!({"paused": true, "reason": "x"})).await;
    assert_eq!(
        pause_flags(&board(&stack, &operator).await),
        (true, json!([]), flags(false, false)),
        "the namespace is paused, no command by itself"
    );
    control(
        &stack,
        &operator,
        json!({"paused": true, "reason": "x", "command": "claim"}),
    )
    .await;
    assert_eq!(
        pause_flags(&board(&stack, &operator).await),
        (true, json!(["claim"]), flags(true, false))
    );
    control(&stack, &operator, json!({"paused": false, "reason": "x"})).await;
    assert_eq!(
        pause_flags(&board(&stack, &operator).await),
        (false, json!(["claim"]), flags(true, false)),
        "resuming the namespace leaves the command's own pause"
    );
    // Absolute: the same call again changes nothing.
    control(
        &stack,
        &operator,
        json!({"paused": true, "reason": "again", "command": "claim"}),
    )
    .await;
    assert_eq!(
        pause_flags(&board(&stack, &operator).await),
        (false, json!(["claim"]), flags(true, false))
    );
    control(
        &stack,
        &operator,
        json!({"paused": false, "reason": "x", "command": "claim"}),
    )
    .await;
    assert_eq!(
        pause_flags(&board(&stack, &operator).await),
        (false, json!([]), flags(false, false))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_needs_status_read_and_takes_no_parameters() {
    let stack = Stack::start().await;
    let ns = stack.creds.namespace_id;
    let reader = credential_with_scopes(&stack, ns, &["status:read"]).await;
    // Every other scope a namespace credential can hold.
    let others = credential_with_scopes(
        &stack,
        ns,
        &[
            "commands:enqueue",
            "commands:read",
            "commands:cancel",
            "commands:complete",
            "reads:read",
            "reads:invalidate",
            "quotas:manage",
            "control:manage",
            "declarations:manage",
            "application:resources:read",
            "application:resources:manage",
        ],
    )
    .await;

    assert_eq!(board(&stack, &reader).await["namespace"], json!(ns));
    assert_eq!(
        board(&stack, &stack.credential()).await["namespace"],
        json!(ns),
        "the bootstrap credential holds every namespace scope"
    );
    let token = stack.subject_token("user-1");
    for (who, bearer) in [("without status:read", others), ("a subject token", token)] {
        let reply = stack.get("/v1/status", Some(&bearer)).await;
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{who}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "PERMISSION_DENIED", "{who}: {:?}", reply.body);
    }
    let anonymous = stack.get("/v1/status", None).await;
    assert_eq!(
        anonymous.status,
        StatusCode::UNAUTHORIZED,
        "{:?}",
        anonymous.body
    );
    assert_eq!(anonymous.code(), "UNAUTHENTICATED");

    for (query, field) in [
        ("verbose=1", "verbose"),
        (&*format!("namespace={ns}"), "namespace"),
        ("top", "top"),
    ] {
        let reply = stack
            .get(&format!("/v1/status?{query}"), Some(&reader))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{query}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "INVALID_ARGUMENT", "{query}");
        assert_eq!(reply.field(), field, "{query}: {:?}", reply.body);
    }
    // An empty query string is no parameter.
    let bare = stack.get("/v1/status?", Some(&reader)).await;
    assert_eq!(bare.status, StatusCode::OK, "{:?}", bare.body);
}

// ---------------------------------------------------------------------------------------------
// Redis gone.
// ---------------------------------------------------------------------------------------------

/// Redis killed under the gateway: the board is still `200`, from PostgreSQL, says the
/// projection cannot be read (`projection_reachable: false`, `ready: false`, projection figures
/// `null`), and its PostgreSQL counts are right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_the_board_answers_from_postgres() {
    let redis = start_private_redis().await;
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    let ns = stack.creds.namespace_id;
    let operator = credential_with_scopes(&stack, ns, &["status:read", "control:manage"]).await;
    let (a, b) = (offer(), offer());
    for (i, offer_id) in [&a, &a, &a, &b, &b].into_iter().enumerate() {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), offer_id).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    control(
        &stack,
        &operator,
        json!({"paused": true, "reason": "x", "command": "claim"}),
    )
    .await;
    let healthy = board(&stack, &operator).await;
    assert_eq!(healthy["projection_reachable"], true);
    assert_eq!(healthy["ready"], true);
    assert_eq!(healthy["queues"]["resources_waiting"], 2);

    let redis = kill_redis(redis).await;
    assert!(
        stack.redis_disconnected(Duration::from_secs(5)).await,
        "the gateway notices that Redis is gone"
    );

    let asked = Instant::now();
    let shown = board(&stack, &operator).await;
    let took = asked.elapsed();
    println!("status board without Redis in {took:?}: {shown:#}");
    assert!(took < Duration::from_secs(2), "answered in {took:?}");
    assert_eq!(shown["projection_reachable"], false);
    assert_eq!(shown["ready"], false);
    assert_eq!(shown["generation"], healthy["generation"]);
    assert_eq!(shown["queues"], Value::Null);
    assert_eq!(shown["outcomes"], json!([]));
    assert_eq!(shown["in_flight"]["application"]["in_flight"], Value::Null);
    assert_eq!(command_of(&shown, "claim")["in_flight"], Value::Null);
    assert_eq!(command_of(&shown, "claim")["waiting"], "5");
    assert_eq!(
        shown["paused"],
        json!({"namespace": false, "commands": ["claim"]})
    );
    assert_counts_match(&stack, ns, &shown).await;
    assert_pools_match(&stack, ns, &shown).await;
    drop(redis);
}

// ---------------------------------------------------------------------------------------------
// A million rows.
// ---------------------------------------------------------------------------------------------

/// Rows of the million-row namespace: `rows()` in all, the last `unfinished()` of them (the
/// newest, as in a live table) unfinished. A million and 50,000 in the suite; a run by hand
/// can ask for more (`SLUICE_STATUS_ROWS=10000000 SLUICE_STATUS_UNFINISHED=100000`).
fn rows() -> i64 {
    scale("SLUICE_STATUS_ROWS", 1_000_000)
}

fn unfinished() -> i64 {
    scale("SLUICE_STATUS_UNFINISHED", 50_000)
}

fn scale(variable: &str, default: i64) -> i64 {
    match std::env::var(variable) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{variable}={text:?}: expected a number of rows")),
        Err(_) => default,
    }
}

/// The nodes of the plan of `sql` with the namespace as `$1` (and a limit as `$2` if it has one).
async fn plan_of(
    stack: &Stack,
    sql: &str,
    params: usize,
    ns: NamespaceId,
) -> Vec<(String, String, String)> {
    let explain = format!("EXPLAIN (FORMAT JSON) {sql}");
    let mut query = sqlx::query_scalar::<_, Value>(sqlx::AssertSqlSafe(explain)).bind(ns);
    if params == 2 {
        query = query.bind(TOP);
    }
    let plan = query.fetch_one(&stack.pg).await.expect("explain");
    crate::life_cycle::query_plans::plan_nodes(&plan[0]["Plan"])
}

/// Every index of `commands` with its definition.
async fn commands_indexes(stack: &Stack) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes
          WHERE schemaname = current_schema() AND tablename = 'commands' ORDER BY 1",
    )
    .fetch_all(&stack.pg)
    .await
    .expect("indexes of commands")
}

/// One namespace with a million rows (950,000 finished, 50,000 unfinished over five statuses and
/// three commands, one of them no longer declared): after `ANALYZE`, no query of the board that
/// reads `commands` plans a sequential scan of it (the naive count over the namespace does, so
/// the check can see one), nor does the generic plan of any other checked query that reads it
/// (claims, sweeps, retention, rebuild: [`crate::life_cycle::query_plans`]), and the board's counts equal
/// PostgreSQL's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_rows_are_counted_without_scanning_commands() {
    let started = Instant::now();
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock")
        + &quota_command("refund", OPEN_ADMISSION, "", "stock")
        + &pool("stock", 10);
    let stack = Stack::with_declaration(&declaration).await;
    let ns = stack.creds.namespace_id;
    let operator = credential_with_scopes(&stack, ns, &["status:read"]).await;

    // A bulk load, in one transaction: foreign-key triggers skipped (the ids are the stack's
    // own), the indexes of `commands` dropped and built again afterwards from their own
    // definitions (a third faster than maintaining them row by row), checked identical below.
    let indexes_before = commands_indexes(&stack).await;
    let mut tx = stack.pg.begin().await.expect("begin");
    for setting in [
        "SET LOCAL session_replication_role = replica",
        "SET LOCAL statement_timeout = 0",
        "SET LOCAL maintenance_work_mem = '256MB'",
    ] {
        sqlx::query(setting)
            .execute(&mut *tx)
            .await
            .expect("bulk load settings");
    }
    let constraints: Vec<(String, String)> = sqlx::query_as(
        "SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint
          WHERE conrelid = 'commands'::regclass AND contype IN ('p', 'u') ORDER BY 1",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("constraints");
    let plain: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes
          WHERE schemaname = current_schema() AND tablename = 'commands'
            AND indexname NOT IN (SELECT conname FROM pg_constraint
                                   WHERE conrelid = 'commands'::regclass)
          ORDER BY 1",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("indexes");
    for (name, _) in &plain {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP INDEX \"{name}\"")))
            .execute(&mut *tx)
            .await
            .expect("drop index");
    }
    for (name, _) in &constraints {
        let drop = format!("ALTER TABLE commands DROP CONSTRAINT \"{name}\"");
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&mut *tx)
            .await
            .expect("drop constraint");
    }
    // Rows from the start of the UTC day twelve days ago until now (about a row a second at a
    // million), each row's id a UUID v7 of its acceptance (the day it is in). Every day of
    // history is whole, whatever the hour the test runs at: a history day of a few rows (a
    // partial first day) is one a planner rightly scans, and would make the check depend on
    // the clock.
    sqlx::query(
        "SELECT sluice_ensure_command_days((now() AT TIME ZONE 'UTC')::date - 12,
                                           (now() AT TIME ZONE 'UTC')::date)",
    )
    .execute(&mut *tx)
    .await
    .expect("the days of the rows");
    let inserted = sqlx::query(
        "INSERT INTO commands (id, application_id, namespace_id, command, subject, request_key,
                content_sha256, input, resource_key, queue_seq, status, accepted_at, deadline_at,
                max_wait_at, updated_at, finished_at, limit_keys)
         SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::bigint), 12, '0') || '7'
                 || lpad(to_hex(i), 19, '0'))::uuid, $1, $2,
                CASE WHEN i % 1000 = 7 THEN 'retired' WHEN i % 2 = 0 THEN 'claim' ELSE 'refund' END,
                's' || i, 'k' || i, '\\x00'::bytea, '{}'::jsonb, 'r' || (i % 5000), i, s.status,
                t.at, now() + interval '1 hour',
                now() + interval '1 hour', now(),
                CASE WHEN i <= $3 - $4 THEN now() END,
                CASE WHEN s.status IN ('executing', 'running', 'retry_wait')
                     THEN jsonb_build_array(jsonb_build_array('acct:{a}', 'acct:' || (i % 7)))
                     ELSE '[]'::jsonb END
           FROM generate_series(1, $3) AS i,
                (SELECT (date_trunc('day', now() AT TIME ZONE 'UTC') - interval '12 days')
                        AT TIME ZONE 'UTC' AS first) AS d,
                LATERAL (SELECT d.first + (now() - d.first) * ((i - 1)::float8 / $3) AS at) AS t,
                LATERAL (SELECT CASE
                    WHEN i <= $3 - $4 THEN
                        (ARRAY['succeeded', 'rejected', 'failed', 'expired', 'cancelled'])[i % 5 + 1]
                    WHEN i % 25 < 19 THEN 'accepted'
                    WHEN i % 25 < 21 THEN 'executing'
                    WHEN i % 25 < 23 THEN 'running'
                    WHEN i % 25 < 24 THEN 'retry_wait'
                    ELSE 'needs_review' END AS status) AS s",
    )
    .bind(stack.creds.application_id)
    .bind(ns)
    .bind(rows())
    .bind(unfinished())
    .execute(&mut *tx)
    .await
    .expect("a million rows");
    for (name, definition) in &constraints {
        let add = format!("ALTER TABLE commands ADD CONSTRAINT \"{name}\" {definition}");
        sqlx::query(sqlx::AssertSqlSafe(add))
            .execute(&mut *tx)
            .await
            .expect("add constraint");
    }
    for (_, definition) in &plain {
        // A partitioned index's definition reads `ON ONLY commands` (the parent alone, for
        // pg_dump); built again on the parent, it is built on every day.
        let definition = definition.replacen(" ON ONLY ", " ON ", 1);
        sqlx::query(sqlx::AssertSqlSafe(definition))
            .execute(&mut *tx)
            .await
            .expect("create index");
    }
    tx.commit().await.expect("commit");
    assert_eq!(inserted.rows_affected(), rows() as u64);
    assert_eq!(
        commands_indexes(&stack).await,
        indexes_before,
        "the indexes of commands are the migrations' own again"
    );
    let loaded = started.elapsed();
    // Without the stack's statement timeout: on a busy machine ANALYZE of a million rows took
    // longer than it.
    let mut tx = stack.pg.begin().await.expect("begin");
    sqlx::query("SET LOCAL statement_timeout = 0")
        .execute(&mut *tx)
        .await
        .expect("no statement timeout");
    sqlx::query("ANALYZE commands")
        .execute(&mut *tx)
        .await
        .expect("analyze");
    tx.commit().await.expect("commit");
    let analyzed = started.elapsed();

    // Twelve days of rows: the older ones all ended (history), the newest live.
    let history = crate::life_cycle::query_plans::History::of(&stack.pg).await;
    assert!(history.len() >= 10, "{} days of history", history.len());
    for (sql, params) in COMMANDS_QUERIES {
        let nodes = plan_of(&stack, sql, params, ns).await;
        println!("plan {nodes:?}\n  of {sql}");
        assert!(
            nodes
                .iter()
                .any(|(_, relation, _)| crate::life_cycle::query_plans::is_commands(relation)),
            "the query reads commands: {nodes:?}"
        );
        assert!(
            !history.scanned_by(&nodes),
            "a sequential scan of commands' history: {nodes:?}\n  in {sql}"
        );
    }
    // Every other checked query that reads commands: claims, sweeps, rebuild, life cycle.
    let (checked, scans) = crate::life_cycle::query_plans::scans_of_commands(&stack.pg).await;
    println!("{checked} checked queries read commands; generic plans scanning it: {scans:?}");
    assert!(checked >= 20, "the checked queries were found: {checked}");
    assert!(
        scans.is_empty(),
        "sequential scans of commands:\n{}",
        scans.join("\n")
    );
    // The naive count over the namespace does scan: the check above can see a scan.
    let naive = plan_of(
        &stack,
        "SELECT command, status, count(*), min(accepted_at) FROM commands
          WHERE namespace_id = $1 GROUP BY 1, 2",
        1,
        ns,
    )
    .await;
    assert!(history.scanned_by(&naive), "{naive:?}");

    let asked = Instant::now();
    let shown = board(&stack, &operator).await;
    let took = asked.elapsed();
    assert_counts_match(&stack, ns, &shown).await;
    let total: i64 = shown["commands"]
        .as_array()
        .expect("commands")
        .iter()
        .flat_map(|c| c["statuses"].as_array().expect("statuses").iter())
        .map(|s| dec(&s["count"]))
        .sum();
    assert_eq!(total, unfinished());
    let retired = command_of(&shown, "retired");
    assert_eq!(retired["handler"], Value::Null, "no longer declared");
    assert!(dec(&retired["waiting"]) > 0, "{retired}");
    let held: i64 = shown["in_flight"]["limit_keys"]
        .as_array()
        .expect("limit keys")
        .iter()
        .map(|k| k["holders"].as_i64().expect("holders"))
        .sum();
    assert_eq!(
        held,
        unfinished() * 5 / 25,
        "executing + running + retry_wait"
    );
    println!(
        "a million rows: loaded in {loaded:?}, analyzed at {analyzed:?}, board in {took:?}, \
         test {:?}",
        started.elapsed()
    );
}
