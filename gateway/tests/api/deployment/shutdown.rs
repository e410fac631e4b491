//! Graceful shutdown of real `sluice` processes.
//!
//! `sluice serve`, SIGTERM: the port refuses new connections at once; every request already
//! sent on an open connection is answered (enqueues waiting on a group commit included), and
//! connections that keep talking are told `Connection: close` rather than cut; jobs whose caller
//! went away are still committed; the process exits 0. SIGINT exits 130 at once, also mid-drain.
//!
//! `sluice execute`, SIGTERM: nothing new is claimed, the webhook commands in flight keep their
//! leases until they land, once each, and the process exits 0.
//!
//! The group commit is held back by a table lock the test takes (`LOCK TABLE commands IN SHARE
//! MODE` blocks the INSERT). PostgreSQL's `lock_timeout` (5 s, `durable/store/src/db.rs`) bounds how
//! long it may be held, so the steps under the lock are quick and checked against a deadline.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::*;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONNECTION, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sqlx::{Postgres, Transaction};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use uuid::Uuid;

use crate::execution::processes::ExecutorProcess;
use crate::support::gateway_process::GatewayProcess;
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::{enqueue_ocr, ocr_stack};

/// How long the test may hold the commit lock: well within `lock_timeout`.
const LOCK_BUDGET: Duration = Duration::from_millis(3_500);

/// Holds every group commit back until the transaction ends.
async fn hold_commits(stack: &Stack) -> Transaction<'static, Postgres> {
    let mut lock = stack.pg.begin().await.expect("begin");
    sqlx::query("LOCK TABLE commands IN SHARE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock the commands table");
    lock
}

/// Group-commit INSERTs waiting on the test's lock (found by their first INSERT, which comes
/// within the 1,024 characters `pg_stat_activity` keeps of a statement).
async fn commits_waiting(stack: &Stack) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'
            AND query LIKE '%INSERT INTO request_keys%'",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("pg_stat_activity")
}

/// Whether a new connection to `addr` is refused.
async fn refuses(addr: SocketAddr) -> bool {
    matches!(
        TcpStream::connect(addr).await,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

fn enqueue_body(subject: &str) -> Value {
    json!({"request_key": key(), "subject": subject, "input": {"offer": offer()}})
}

/// A whole HTTP answer: status and JSON body, or what went wrong instead.
type Exchange = Result<(StatusCode, Value), String>;

/// One enqueue on `client`, never panicking: a transport failure is the test's finding.
async fn exchange(client: &TestClient, base: &str, credential: &str, body: Value) -> Exchange {
    let request = Request::post(format!("{base}/v1/commands/claim:enqueue"))
        .header("authorization", format!("Bearer {credential}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .map_err(|_| "no answer within 30 s".to_string())?
        .map_err(|e| format!("no answer: {e:?}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{status} with a cut body: {e}"))?
        .to_bytes();
    let body = serde_json::from_slice(&bytes).map_err(|e| format!("{status}, not JSON: {e}"))?;
    Ok((status, body))
}

/// A client that keeps using one connection for `GET /healthz`, `pause` after each answer
/// (a client's own pace, far below the gateway's one-second grace), until an answer says
/// `Connection: close`. Returns how many answers it got; an error if the connection ended any
/// other way: closed or reset under a request, or closed between two requests without saying
/// so, which is the race that loses requests (the next one may already be on its way).
async fn chatty(addr: SocketAddr, pause: Duration, give_up: Duration) -> Result<usize, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let started = Instant::now();
    let mut answers = 0;
    while started.elapsed() < give_up {
        sender.ready().await.map_err(|e| {
            format!("closed after {answers} answers without Connection: close: {e}")
        })?;
        let request = Request::get("/healthz")
            .header(HOST, addr.to_string())
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("request {} got no answer: {e}", answers + 1))?;
        let close = response
            .headers()
            .get(CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("answer {} cut: {e}", answers + 1))?;
        answers += 1;
        if close {
            return Ok(answers);
        }
        tokio::time::sleep(pause).await;
    }
    Err(format!("never told Connection: close in {give_up:?}"))
}

/// 300 enqueues wait on a held group commit, four clients keep using their connections (two
/// back to back, two at a 10 ms pace, so mostly idle between requests), and the gateway gets
/// SIGTERM. The port refuses at once while all 300 still wait; the talking connections are
/// told `Connection: close` instead of being cut; once the commit may proceed,
/// all 300 are answered `202`, each with its row, the Redis counts equal PostgreSQL's with no
/// reservation left, and the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_answers_every_request_in_flight_and_exits_zero() {
    const BURST: usize = 300;
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gateway = GatewayProcess::start(&stack, dir.path(), "drained").await;
    let addr = gateway.addr();
    let credential = stack.credential();

    let talkers: Vec<_> = [0, 0, 10, 10]
        .map(|ms| {
            tokio::spawn(chatty(
                addr,
                Duration::from_millis(ms),
                Duration::from_secs(30),
            ))
        })
        .into_iter()
        .collect();
    let lock = hold_commits(&stack).await;
    let locked_at = Instant::now();
    let answered = Arc::new(AtomicUsize::new(0));
    let client = http_client(1024);
    let burst: Vec<_> = (0..BURST)
        .map(|i| {
            let (client, base, credential) =
                (client.clone(), gateway.base.clone(), credential.clone());
            let answered = answered.clone();
            tokio::spawn(async move {
                let body = enqueue_body(&format!("burst-{i}"));
                let result = exchange(&client, &base, &credential, body).await;
                answered.fetch_add(1, Ordering::SeqCst);
                result
            })
        })
        .collect();
    let all_waiting = eventually(Duration::from_secs(3), || async {
        stack.reservations("claim").await == BURST as i64 && commits_waiting(&stack).await > 0
    })
    .await;
    assert!(
        all_waiting,
        "all {BURST} enqueues wait on the commit: {} reserved, {} answered\n{}",
        stack.reservations("claim").await,
        answered.load(Ordering::SeqCst),
        gateway.log_text()
    );

    gateway.signal("TERM");
    let refused = eventually(Duration::from_secs(1), || refuses(addr)).await;
    assert!(refused, "new connections are refused after SIGTERM");
    assert_eq!(
        answered.load(Ordering::SeqCst),
        0,
        "the port closed while every enqueue still waited on its commit"
    );
    assert!(gateway.is_running(), "{}", gateway.log_text());
    for talker in talkers {
        let answers = talker.await.expect("talker task");
        assert!(
            answers.is_ok(),
            "a busy connection: {answers:?}\n{}",
            gateway.log_text()
        );
    }
    assert!(
        locked_at.elapsed() < LOCK_BUDGET,
        "the commit was held {:?}, too close to lock_timeout",
        locked_at.elapsed()
    );
    lock.rollback().await.expect("let the commits through");

    let mut accepted = HashSet::new();
    let mut failures = Vec::new();
    for task in burst {
        match task.await.expect("enqueue task") {
            Ok((StatusCode::ACCEPTED, body)) => {
                let id = body["data"]["command_id"].as_str().expect("command_id");
                accepted.insert(id.parse::<Uuid>().expect("a uuid"));
            }
            other => failures.push(format!("{other:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {BURST} not accepted: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let exit = gateway.exited(Duration::from_secs(10)).await;
    let log = gateway.log_text();
    assert!(exit.is_some_and(|s| s.success()), "exit {exit:?}:\n{log}");
    assert!(log.contains("gateway stopped"), "{log}");

    let rows: HashSet<Uuid> =
        sqlx::query_scalar("SELECT id FROM commands WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_all(&stack.pg)
            .await
            .expect("rows")
            .into_iter()
            .collect();
    assert_eq!(
        rows, accepted,
        "every 202 has its row, and no other row exists"
    );
    let n = BURST as i64;
    assert_eq!(
        stack.open_counts("claim").await,
        (n, n, n),
        "counted once each"
    );
    assert_eq!(stack.reservations("claim").await, 0, "no reservation left");
}

/// Enqueues whose clients hung up while their group commit was held: nobody waits for their
/// answer, so the connections drain at once, yet SIGTERM still commits them before the process
/// exits (0). A process that exited first would lose them mid-batch.
///
/// One command per transaction and a committer for each: every job is then seen waiting in
/// `pg_stat_activity` before the clients hang up (a handler dropped before it submitted its job
/// would have nothing to commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_commits_the_jobs_of_callers_that_went_away() {
    const ABANDONED: usize = 10;
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("SLUICE_GATEWAY_GROUP_COMMIT_MAX_BATCH", "1"),
        ("SLUICE_GATEWAY_GROUP_COMMIT_COMMITTERS", "12"),
    ];
    let mut gateway = GatewayProcess::start_with(&stack, dir.path(), "flushed", &env).await;
    let addr = gateway.addr();
    let lock = hold_commits(&stack).await;
    let locked_at = Instant::now();
    let mut sockets = Vec::new();
    for i in 0..ABANDONED {
        let body = enqueue_body(&format!("gone-{i}")).to_string();
        let request = format!(
            "POST /v1/commands/claim:enqueue HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            stack.credential(),
            body.len()
        );
        let mut socket = TcpStream::connect(addr).await.expect("connect");
        socket
            .write_all(request.as_bytes())
            .await
            .expect("send the request");
        sockets.push(socket);
    }
    let queued = eventually(Duration::from_secs(3), || async {
        commits_waiting(&stack).await == ABANDONED as i64
    })
    .await;
    assert!(
        queued,
        "each enqueue waits in its own commit: {}",
        gateway.log_text()
    );
    drop(sockets);

    gateway.signal("TERM");
    let refused = eventually(Duration::from_secs(1), || refuses(addr)).await;
    assert!(refused, "new connections are refused after SIGTERM");
    // The drain is over (the start-up probe's idle connection had its grace) while the commits
    // are still held: only the committer keeps the process now.
    let drained = eventually(Duration::from_secs(3), || {
        let over = gateway.log_text().contains("connections drained") || !gateway.is_running();
        std::future::ready(over)
    })
    .await;
    assert!(drained, "{}", gateway.log_text());
    assert!(
        gateway.is_running(),
        "exited with its jobs uncommitted:\n{}",
        gateway.log_text()
    );
    assert!(
        locked_at.elapsed() < LOCK_BUDGET,
        "the commit was held {:?}, too close to lock_timeout",
        locked_at.elapsed()
    );
    lock.rollback().await.expect("let the commits through");
    let exit = gateway.exited(Duration::from_secs(10)).await;
    let log = gateway.log_text();
    assert!(exit.is_some_and(|s| s.success()), "exit {exit:?}:\n{log}");
    assert_eq!(
        stack.count_rows().await,
        ABANDONED as i64,
        "every queued job was committed before the exit:\n{log}"
    );
}

/// SIGINT stops at once (130), whether the gateway is idle or draining requests that cannot
/// finish yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_exits_130_at_once_even_mid_drain() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");

    let mut idle = GatewayProcess::start(&stack, dir.path(), "idle").await;
    idle.signal("INT");
    let exit = idle.exited(Duration::from_secs(2)).await;
    assert_eq!(
        exit.and_then(|s| s.code()),
        Some(130),
        "{}",
        idle.log_text()
    );

    let mut draining = GatewayProcess::start(&stack, dir.path(), "draining").await;
    let lock = hold_commits(&stack).await;
    let client = http_client(16);
    let waiting: Vec<_> = (0..3)
        .map(|i| {
            let (client, base, credential) =
                (client.clone(), draining.base.clone(), stack.credential());
            tokio::spawn(async move {
                exchange(
                    &client,
                    &base,
                    &credential,
                    enqueue_body(&format!("late-{i}")),
                )
                .await
            })
        })
        .collect();
    let in_flight = eventually(Duration::from_secs(3), || async {
        stack.reservations("claim").await == 3
    })
    .await;
    assert!(in_flight, "{}", draining.log_text());
    draining.signal("TERM");
    let drain_began = eventually(Duration::from_secs(1), || refuses(draining.addr())).await;
    assert!(drain_began, "{}", draining.log_text());
    let sigint_at = Instant::now();
    draining.signal("INT");
    let exit = draining.exited(Duration::from_secs(1)).await;
    let held = sigint_at.elapsed();
    lock.rollback().await.expect("release the lock");
    assert_eq!(
        exit.and_then(|s| s.code()),
        Some(130),
        "SIGINT during a drain (waited {held:?}):\n{}",
        draining.log_text()
    );
    for task in waiting {
        let cut = task.await.expect("enqueue task");
        assert!(cut.is_err(), "a request SIGINT cut short: {cut:?}");
    }
}

/// An executor gets SIGTERM while two webhook commands are at the backend (which holds its
/// answers) and four more wait behind their `max_in_flight = 2` limit key. While it drains,
/// its leases stay alive (a lapsed lease would hand the commands to a sweeper while they run);
/// once the backend answers, both land, once each, the process exits 0 having claimed nothing
/// more, and no permit is left. A second executor then runs the four others: six deliveries of
/// six commands, and the counters back to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_webhook_commands_in_flight_land_once_and_claims_nothing_new() {
    let (open, opened) = tokio::sync::watch::channel(false);
    let backend = Backend::start(handler(move |arrival| {
        let mut opened = opened.clone();
        async move {
            let _ = opened.wait_for(|open| *open).await;
            Answer::succeeded(json!({"doc": arrival.body["input"]["doc"]}))
        }
    }))
    .await;
    let limit = r#"{ key = "account:{provider}:{account}", max_in_flight = 2 }"#;
    let stack = ocr_stack(&backend, 20_000, 120, limit).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(enqueue_ocr(&stack, &format!("s{i}"), "p", "a", &format!("doc-{i}")).await);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut drained = ExecutorProcess::spawn(&stack, dir.path(), "drained");
    drained.running().await;
    let two_in_flight = eventually(Duration::from_secs(15), || async {
        backend.arrivals().len() == 2
    })
    .await;
    assert!(two_in_flight, "{}", drained.log_text());

    drained.terminate();
    let draining = eventually(Duration::from_secs(5), || async {
        drained.log_text().contains("executor draining")
    })
    .await;
    assert!(draining, "{}", drained.log_text());
    // Two lease periods (`--lease-ms 1500`) with the backend still holding both answers: every
    // look must find both rows executing under a live lease.
    let watch_until = Instant::now() + Duration::from_millis(3_000);
    while Instant::now() < watch_until {
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM commands WHERE application_id = $1
                AND status = 'executing' AND lease_expires_at > now()",
        )
        .bind(stack.creds.application_id)
        .fetch_one(&stack.pg)
        .await
        .expect("leases");
        assert_eq!(
            live,
            2,
            "a lease lapsed while its command was in flight:\n{}",
            drained.log_text()
        );
        assert!(drained.is_running(), "{}", drained.log_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    open.send(true).expect("open the backend");
    let exit = drained.exited(Duration::from_secs(10)).await;
    let log = drained.log_text();
    assert!(exit.is_some_and(|s| s.success()), "exit {exit:?}:\n{log}");
    assert!(log.contains("executor stopped"), "{log}");

    let delivered: Vec<String> = backend
        .arrivals()
        .iter()
        .map(|a| a.body["command_id"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        delivered.len(),
        2,
        "nothing was sent after SIGTERM: {delivered:?}"
    );
    let states: Vec<(String, String, i32, bool)> = sqlx::query_as(
        "SELECT id::text, status, attempts, lease_owner IS NOT NULL FROM commands
          WHERE application_id = $1 ORDER BY queue_seq",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("rows");
    for (id, status, attempts, leased) in &states {
        let expected = if delivered.contains(id) {
            ("succeeded", 1)
        } else {
            ("accepted", 0)
        };
        assert_eq!((status.as_str(), *attempts), expected, "{id}: {states:?}");
        assert!(!leased, "{id} is still leased: {states:?}");
    }
    let ns = stack.creds.namespace_id;
    for leases in [
        stack.keys().limit_leases(ns, "account:p:a"),
        stack.keys().command_leases(ns, "ocr"),
    ] {
        let held: i64 = stack
            .redis
            .pool()
            .next()
            .zcard(&leases)
            .await
            .expect("zcard");
        assert_eq!(held, 0, "{leases}: no permit left after the drain");
    }
    assert_eq!(
        crate::execution::counter(&stack, "unfinished").await,
        4,
        "the two landed commands were counted out once each"
    );

    let mut next = ExecutorProcess::spawn(&stack, dir.path(), "next");
    next.running().await;
    assert!(
        crate::execution::all_terminal(&stack, Duration::from_secs(20)).await,
        "{}",
        next.log_text()
    );
    let arrivals = backend.arrivals();
    let distinct: HashSet<&str> = arrivals
        .iter()
        .filter_map(|a| a.body["command_id"].as_str())
        .collect();
    assert_eq!(arrivals.len(), 6, "one delivery per command");
    assert_eq!(distinct.len(), 6);
    crate::execution::assert_unfinished_drains(&stack).await;
}

/// With `gateway.shutdown_delay_ms`, SIGTERM first turns both readiness endpoints to `503
/// draining` while the port still accepts and serves (an enqueue on a new connection is
/// accepted), and only after the delay does the port refuse; the admin listener answers
/// `draining` through it all, and the process exits 0 with the accepted command's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_delay_reports_draining_while_it_still_serves() {
    const DELAY: Duration = Duration::from_millis(2_000);
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let delay_ms = DELAY.as_millis().to_string();
    let env = [("SLUICE_GATEWAY_SHUTDOWN_DELAY_MS", delay_ms.as_str())];
    let mut gateway = GatewayProcess::start_with(&stack, dir.path(), "delayed", &env).await;
    let addr = gateway.addr();
    let client = http_client(1);
    let readiness = |base: String| {
        let client = client.clone();
        async move {
            let reply = send_request(
                &client,
                &base,
                hyper::Method::GET,
                "/readyz",
                None,
                None,
                &[],
            )
            .await;
            (
                reply.status,
                reply.body.as_str().unwrap_or_default().to_string(),
            )
        }
    };
    assert_eq!(readiness(gateway.base.clone()).await.0, StatusCode::OK);
    assert_eq!(
        readiness(gateway.admin_base.clone()).await.0,
        StatusCode::OK
    );

    gateway.signal("TERM");
    let signalled = Instant::now();
    let draining = |base: String| {
        let readiness = &readiness;
        async move {
            let (status, text) = readiness(base).await;
            status == StatusCode::SERVICE_UNAVAILABLE && text.contains("draining")
        }
    };
    assert!(
        eventually(Duration::from_secs(1), || draining(gateway.base.clone())).await,
        "the public /readyz says draining: {}",
        gateway.log_text()
    );
    assert!(
        eventually(Duration::from_secs(1), || draining(
            gateway.admin_base.clone()
        ))
        .await,
        "the admin /readyz says draining"
    );
    // Still accepting: a new connection's enqueue is answered 202 and lands.
    let fresh = http_client(1);
    let accepted = exchange(
        &fresh,
        &gateway.base,
        &stack.credential(),
        enqueue_body("late-but-served"),
    )
    .await;
    let id = match accepted {
        Ok((StatusCode::ACCEPTED, body)) => body["data"]["command_id"]
            .as_str()
            .expect("command_id")
            .parse::<Uuid>()
            .expect("a uuid"),
        other => panic!("an enqueue during the delay: {other:?}"),
    };
    assert!(
        eventually(Duration::from_secs(10), || refuses(addr)).await,
        "the port closes after the delay"
    );
    let refused_after = signalled.elapsed();
    assert!(
        refused_after >= DELAY,
        "the port refused {refused_after:?} after SIGTERM, before the {DELAY:?} delay"
    );
    let exit = gateway.exited(Duration::from_secs(20)).await;
    assert!(
        exit.is_some_and(|s| s.success()),
        "exit {exit:?}:\n{}",
        gateway.log_text()
    );
    let landed: i64 = sqlx::query_scalar("SELECT count(*) FROM commands WHERE id = $1")
        .bind(id)
        .fetch_one(&stack.pg)
        .await
        .expect("the row");
    assert_eq!(landed, 1, "the command accepted while draining has its row");
}
