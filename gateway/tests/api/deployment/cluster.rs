//! Sluice on a real Redis Cluster (three masters with a replica each) that loses a master while
//! commands run. Replication is asynchronous, so the promoted replica may lack the last writes;
//! the epoch prelude sees a Redis process other than the one that built the projection, and the
//! application is rebuilt from PostgreSQL. The witnesses are the backend's own count of calls at
//! once and PostgreSQL's rows, never Redis's leases.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_testkit::RedisCluster;

use crate::execution::{
    all_terminal, fast_executor, generation, repeated_queue_seqs, start_executor,
};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{each_succeeded_after_one_call, enqueue_ocr, ocr_declaration};

/// Every call is held half a second, so one is surely at the backend when the master dies.
const CALL: Duration = Duration::from_millis(500);

/// One account, one call at a time, on a cluster. The master of the application's slot is
/// SIGKILLed while a call is at the backend and others wait; its replica takes over. More work is
/// enqueued (with retries while the slot has no master). Every command is called once and
/// succeeds, the backend never has two calls at once, no queue sequence is handed out twice, the
/// application was rebuilt, and an application whose slot lives on another master was not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_mid_run_is_replaced_and_only_its_application_rebuilt() {
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(CALL).await;
        Answer::succeeded(json!({}))
    }))
    .await;
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .expect("start the cluster");
    let declaration = ocr_declaration(
        &backend.url("/ocr"),
        5_000,
        120,
        r#"{ key = "account:{provider}:{account}", max_in_flight = 1 }"#,
    );
    let on_cluster = || StackOptions {
        declaration: declaration.clone(),
        redis_url: Some(cluster.url()),
        ..StackOptions::default()
    };
    let stack = Arc::new(Stack::start_with(on_cluster()).await);
    backend.set_secret(&stack.creds.webhook_secret);
    let slot = cluster.slot_of(&stack.keys().meta());
    let doomed_master = cluster.master_of(slot).port;
    // A bystander: an application whose slot another master serves (application ids are random,
    // so a few tries find one).
    let mut bystander = None;
    for _ in 0..8 {
        let other = Stack::start_with(on_cluster()).await;
        if cluster
            .master_of(cluster.slot_of(&other.keys().meta()))
            .port
            != doomed_master
        {
            bystander = Some(other);
            break;
        }
    }
    let bystander = bystander.expect("an application on another master");
    let generation_before = generation(&stack).await;
    let bystander_generation = generation(&bystander).await;

    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(enqueue_ocr(&stack, &format!("user-{i}"), "gitee", "a", "doc").await);
    }
    let executor = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(10), || async {
            backend.arrivals().len() >= 2 && backend.in_flight() == 1
        })
        .await,
        "a command is at the backend"
    );
    let killed_at = std::time::Instant::now();
    let (cluster, (killed, promoted)) = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let ports = cluster.kill_master_of(slot);
        (cluster, ports)
    })
    .await
    .expect("kill the slot's master");
    assert_eq!(killed, doomed_master);
    println!(
        "slot {slot}: master {killed} killed, replica {promoted} took over after {:?}",
        killed_at.elapsed()
    );

    // More work after the failover, retried while the slot has no master or is being rebuilt:
    // every refusal on the way is explicit, and the answer that accepts is the command's.
    for i in 6..12 {
        let body = json!({
            "request_key": format!("after-{i}"),
            "subject": format!("user-{i}"),
            "input": {"provider": "gitee", "account": "a", "doc": "doc"},
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let accepted = loop {
            let reply = stack
                .post(
                    "/v1/commands/ocr:enqueue",
                    Some(&stack.credential()),
                    &body.to_string(),
                )
                .await;
            if reply.status.is_success() {
                break reply.data()["command_id"].as_str().map(str::to_string);
            }
            assert!(
                reply.status.as_u16() == 503 || reply.status.as_u16() == 429,
                "enqueue {i} during the failover is refused explicitly: {} {:?}",
                reply.status,
                reply.body
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "enqueue {i} after the failover: {:?}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        ids.push(accepted.expect("a command id"));
    }
    assert!(all_terminal(&stack, Duration::from_secs(90)).await);
    each_succeeded_after_one_call(&stack, &backend, &ids).await;
    assert_eq!(
        backend.peak_in_flight(),
        1,
        "the account's limit, as the backend counted it"
    );
    let repeated = repeated_queue_seqs(&stack).await;
    assert!(
        repeated.is_empty(),
        "queue sequences handed out twice: {repeated:?}"
    );
    assert!(
        generation(&stack).await > generation_before,
        "the failover was detected and the application rebuilt"
    );
    // The bystander's master never went away: it still takes work at once, unrebuilt.
    enqueue_ocr(&bystander, "bystander", "gitee", "b", "doc").await;
    assert_eq!(
        generation(&bystander).await,
        bystander_generation,
        "an application on a live master is not rebuilt"
    );
    executor.cancel();
    drop(cluster);
}

/// The application's slot moves to another master while enqueues and executions run (`ASK`
/// while its keys move, `MOVED` after). Every accepted command is in PostgreSQL and ends once,
/// and the account's limit held at the backend.
///
/// In fred 10.1 an `ASK` answer can end a client's router ("Max attempts reached" while sending
/// `ASKING`); before the pool's routers were watched (`projection/supervise.rs`) that client
/// timed out on every later command: 44 commands accepted around the move instead of about
/// 160, and 39 of them expired because the executor could no longer admit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_load_loses_no_acceptance_and_keeps_the_limit() {
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Answer::succeeded(json!({}))
    }))
    .await;
    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("start the cluster"),
    );
    let declaration = ocr_declaration(
        &backend.url("/ocr"),
        5_000,
        120,
        r#"{ key = "account:{provider}:{account}", max_in_flight = 2 }"#,
    );
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            declaration,
            redis_url: Some(cluster.url()),
            ..StackOptions::default()
        })
        .await,
    );
    backend.set_secret(&stack.creds.webhook_secret);
    let slot = cluster.slot_of(&stack.keys().meta());
    let from = cluster.master_of(slot).port;
    let to = cluster.other_master(from).port;
    let executor = start_executor(&stack, fast_executor());
    // Some work in hand before the move, so there are keys to move.
    let mut accepted = Vec::new();
    for i in 0..40 {
        accepted.push(enqueue_ocr(&stack, &format!("before-{i}"), "gitee", "a", "doc").await);
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let callers: Vec<_> = (0..4)
        .map(|caller| {
            let (stack, stop) = (stack.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ids, mut unavailable, mut limited) = (Vec::new(), 0, 0);
                let mut n = 0;
                while !stop.is_cancelled() {
                    n += 1;
                    let body = json!({
                        "request_key": format!("during-{caller}-{n}"),
                        "subject": format!("caller-{caller}-{n}"),
                        "input": {"provider": "gitee", "account": "a", "doc": "doc"},
                    });
                    let reply = stack
                        .post(
                            "/v1/commands/ocr:enqueue",
                            Some(&stack.credential()),
                            &body.to_string(),
                        )
                        .await;
                    match reply.status.as_u16() {
                        202 | 200 => ids.push(
                            reply.data()["command_id"]
                                .as_str()
                                .expect("command_id")
                                .to_string(),
                        ),
                        503 => unavailable += 1,
                        429 => limited += 1,
                        other => panic!("enqueue during the move: {other} {:?}", reply.body),
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (ids, unavailable, limited)
            })
        })
        .collect();
    let mover = cluster.clone();
    let moving = std::time::Instant::now();
    tokio::task::spawn_blocking(move || {
        mover.migrate_slot(slot, to, 5, Duration::from_millis(30));
    })
    .await
    .expect("migrate the slot");
    let moved_in = moving.elapsed();
    assert_eq!(cluster.master_of(slot).port, to, "the slot moved");
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let (mut unavailable, mut limited, mut during) = (0, 0, 0);
    for caller in callers {
        let (ids, refused, held_back) = caller.await.expect("a caller");
        during += ids.len() + refused + held_back;
        accepted.extend(ids);
        (unavailable, limited) = (unavailable + refused, limited + held_back);
    }
    // Redis's own count of the multi-key refusals while the keys were split.
    let errorstats = std::process::Command::new("redis-cli")
        .args(["-p", &from.to_string(), "INFO", "errorstats"])
        .output()
        .expect("redis-cli");
    let tryagain = String::from_utf8_lossy(&errorstats.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("errorstat_TRYAGAIN:count="))
        .map(|count| count.trim().to_string())
        .unwrap_or_else(|| "0".into());
    println!(
        "{} commands accepted around the move of {moved_in:?}; of {during} enqueues during and just after it, {unavailable} answered 503, {limited} 429; the source master answered TRYAGAIN {tryagain} times",
        accepted.len()
    );
    // A script refused with TRYAGAIN is tried again for a while before its enqueue is answered
    // 503 (`projection/scripts.rs`): without that, more than half of these enqueues were.
    assert!(
        unavailable * 4 < during,
        "{unavailable} of {during} enqueues around the move answered 503"
    );
    let landed = all_terminal(&stack, Duration::from_secs(120)).await;
    assert!(
        landed,
        "every command landed: {:?}",
        crate::execution::status_counts(&stack).await
    );
    each_succeeded_after_one_call(&stack, &backend, &accepted).await;
    assert!(
        backend.peak_in_flight() <= 2,
        "the account's limit, as the backend counted it: {}",
        backend.peak_in_flight()
    );
    executor.cancel();
}

/// The slot of application A moves to the master that serves application B's slot while both
/// take enqueues through the same gateway (one Redis pool): following A's `ASK` answers must not
/// take B's replies. Every accepted enqueue's command id is the row of its own request key in
/// PostgreSQL, and every accepted command of both ran once.
///
/// Not in the suite (about 40 s): the hazard it looks for, unpatched fred 10.1.0's `ASKING`
/// taking the next reply on the target connection, is shown without timing luck by
/// `durable/tests/lua/redis_client.rs`, which this end-to-end run never caught (2,496 enqueues
/// accepted during one move, every one its own). Run it by hand after changing the Redis client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow (40 s); the client-level test in durable/tests/lua/redis_client.rs runs in the suite"]
async fn a_slot_migrated_onto_a_busy_master_hands_no_reply_to_another_command() {
    use sluice_durable::lifecycle::rebuild;
    use sluice_redis::AppKeys;
    use sluice_store::tenancy::{self, BootstrapRequest};

    let cluster = Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .expect("start the cluster"),
    );
    // Both applications claim from a pool that never runs out.
    let declaration = CLAIM_DECLARATION.replace("capacity = 100", "capacity = 1000000");
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            declaration: declaration.clone(),
            redis_url: Some(cluster.url()),
            ..StackOptions::default()
        })
        .await,
    );
    let slot = cluster.slot_of(&stack.keys().meta());
    let from = cluster.master_of(slot).port;
    let to = cluster.other_master(from).port;
    // Application B: one whose slot the target master already serves (about one in three).
    let mut busy = None;
    for attempt in 0..30 {
        let output = tenancy::bootstrap(
            &stack.pg,
            &BootstrapRequest {
                application: format!("busy-{attempt}"),
                namespace: "busy".into(),
                application_id: None,
                scopes: vec![],
                resource_access: false,
            },
        )
        .await
        .expect("bootstrap an application");
        let its_slot = cluster.slot_of(&AppKeys::new(output.application_id).meta());
        if cluster.master_of(its_slot).port == to {
            busy = Some(output);
            break;
        }
    }
    let busy = busy.expect("an application on the target master");
    let busy_id = busy.application_id;
    tenancy::apply_declaration(&stack.pg, busy.namespace_id, &declaration, "test", None)
        .await
        .expect("declare B");
    rebuild::ensure_ready(&stack.pg, &stack.redis, busy_id)
        .await
        .expect("B's projection");
    let executor = start_executor(&stack, fast_executor());
    // Keys in A's slot before the move, so the move takes a while.
    for i in 0..200 {
        let reply = enqueue_claim(&stack, &stack.credential(), &format!("before-{i}")).await;
        assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
    }

    let stop = tokio_util::sync::CancellationToken::new();
    let callers: Vec<_> = (0..32)
        .map(|caller| {
            let (stack, stop) = (stack.clone(), stop.clone());
            let credential = if caller % 4 == 0 {
                stack.credential()
            } else {
                busy.credential.clone()
            };
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                let mut n = 0;
                while !stop.is_cancelled() {
                    n += 1;
                    let request_key = format!("during-{caller}-{n}");
                    let reply = enqueue_claim(&stack, &credential, &request_key).await;
                    match reply.status.as_u16() {
                        202 => accepted.push((
                            request_key,
                            reply.data()["command_id"]
                                .as_str()
                                .expect("command_id")
                                .to_string(),
                        )),
                        503 => {}
                        other => panic!("enqueue during the move: {other} {:?}", reply.body),
                    }
                }
                accepted
            })
        })
        .collect();
    let mover = cluster.clone();
    tokio::task::spawn_blocking(move || {
        mover.migrate_slot(slot, to, 1, Duration::from_millis(5));
    })
    .await
    .expect("migrate the slot");
    assert_eq!(cluster.master_of(slot).port, to, "the slot moved");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.cancel();
    let mut accepted = Vec::new();
    for caller in callers {
        accepted.extend(caller.await.expect("a caller"));
    }
    println!("{} enqueues accepted during the move", accepted.len());
    let mut wrong = Vec::new();
    for (request_key, id) in &accepted {
        let row: Option<String> =
            sqlx::query_scalar("SELECT request_key FROM commands WHERE id = $1::uuid")
                .bind(id)
                .fetch_optional(&stack.pg)
                .await
                .expect("read the row");
        if row.as_deref() != Some(request_key.as_str()) {
            wrong.push((request_key.clone(), id.clone(), row));
        }
    }
    assert!(wrong.is_empty(), "answers of other commands: {wrong:?}");
    let landed = eventually(Duration::from_secs(60), || async {
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM commands
              WHERE status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')",
        )
        .fetch_one(&stack.pg)
        .await
        .expect("count");
        open == 0
    })
    .await;
    executor.cancel();
    assert!(landed, "every command of both applications landed");
    let not_succeeded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM commands WHERE status <> 'succeeded'")
            .fetch_one(&stack.pg)
            .await
            .expect("count");
    assert_eq!(not_succeeded, 0, "every command succeeded");
}

async fn enqueue_claim(stack: &Stack, credential: &str, request_key: &str) -> Reply {
    let body = json!({
        "request_key": request_key,
        "subject": request_key,
        "input": {"offer": uuid::Uuid::new_v4()},
    });
    stack
        .post(
            "/v1/commands/claim:enqueue",
            Some(credential),
            &body.to_string(),
        )
        .await
}
