//! Declared reads through the read-through cache (L1 → Redis → origin), against a real origin
//! HTTP server of the test that counts its calls per path and answers slowly, `404`, `500` or
//! big bodies as the path says; and the cache's Lua scripts alone with concurrent callers.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use fred::prelude::*;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use sluice_durable::ids::{ApplicationId, NamespaceId};
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_gateway::reads::{CacheConfig, CacheStats};
use sluice_redis::cache::{
    self, Bounds, EntryKeys, Filled, Lifetimes, Origin, OriginBudget, PermitRefused, State,
};
use sluice_redis::{AppKeys, connect_redis};
use sluice_testkit::test_redis_url;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::execution::{fast_executor, start_executor};
use crate::support::gateway_process::GatewayProcess;
use crate::support::*;
use sluice_redis::Projection;

// ---------------------------------------------------------------------------------------------
// The origin.
// ---------------------------------------------------------------------------------------------

/// A real origin on `127.0.0.1:0`. What it answers depends on the path's first segment:
///
/// - `/items/<id>`: `200 {"items": [{"id", "call"}]}`, `call` counting this path's calls;
/// - `/plain/<id>`: the same as a bare JSON array;
/// - `/subjects/<subject>/items/<id>`: `200 {"items": [{"subject", "id", "call"}]}`;
/// - `/big/<n>`: `200 {"items": ["x" × n]}`;
/// - `/missing/…`: `404`; `/broken/…`: `500`.
///
/// Every answer waits the current delay first ([`OriginServer::set_delay`]).
pub(crate) struct OriginServer {
    pub(crate) base: String,
    calls: Arc<Mutex<HashMap<String, u64>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
    delay_ms: Arc<AtomicU64>,
    shutdown: CancellationToken,
}

impl OriginServer {
    pub(crate) async fn start() -> OriginServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the origin");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let origin = OriginServer {
            base,
            calls: Arc::default(),
            in_flight: Arc::default(),
            most_in_flight: Arc::default(),
            delay_ms: Arc::default(),
            shutdown: CancellationToken::new(),
        };
        let state = (
            origin.calls.clone(),
            origin.in_flight.clone(),
            origin.most_in_flight.clone(),
            origin.delay_ms.clone(),
        );
        let stop = origin.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = stop.cancelled() => return,
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (calls, in_flight, most, delay) = state.clone();
                        async move {
                            let path = request.uri().path().to_string();
                            let call = {
                                let mut calls = calls.lock().expect("calls lock");
                                let n = calls.entry(path.clone()).or_default();
                                *n += 1;
                                *n
                            };
                            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            let wait = delay.load(Ordering::SeqCst);
                            if wait > 0 {
                                tokio::time::sleep(Duration::from_millis(wait)).await;
                            }
                            let (status, body) = respond(&path, call);
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(body)))
                                    .expect("a response"),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        origin
    }

    /// How long every answer waits from now on.
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Calls of `path` so far.
    pub(crate) fn calls(&self, path: &str) -> u64 {
        let calls = self.calls.lock().expect("calls lock");
        calls.get(path).copied().unwrap_or(0)
    }

    pub(crate) fn total_calls(&self) -> u64 {
        self.calls.lock().expect("calls lock").values().sum()
    }

    /// The most calls it has been answering at once.
    pub(crate) fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for OriginServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn respond(path: &str, call: u64) -> (u16, String) {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["items", id] => (
            200,
            json!({"items": [{"id": id, "call": call}]}).to_string(),
        ),
        ["plain", id] => (200, json!([{"id": id, "call": call}]).to_string()),
        ["subjects", subject, "items", id] => (
            200,
            json!({"items": [{"subject": subject, "id": id, "call": call}]}).to_string(),
        ),
        ["big", n] => {
            let n: usize = n.parse().expect("a size");
            (200, json!({"items": ["x".repeat(n)]}).to_string())
        }
        ["missing", ..] => (404, r#"{"error": "no such item"}"#.into()),
        ["broken", ..] => (500, r#"{"error": "boom"}"#.into()),
        _ => (400, r#"{"error": "unknown path"}"#.into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------

/// The stack's claim command and pool, and reads of `origin` (each test uses some of them).
pub(crate) fn declaration(origin: &OriginServer) -> String {
    let reads = r#"
[[read]]
name = "item"
origin = "{base}/items/{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 60
stale_seconds = 60
timeout_ms = 5000

[[read]]
name = "page"
origin = "{base}/plain/{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 1
stale_seconds = 30
timeout_ms = 5000

[[read]]
name = "stock"
origin = "{base}/items/stock-{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 60
dependencies = ["pool:stock"]

[[read]]
name = "missing"
origin = "{base}/missing/{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 60
negative_seconds = 2

[[read]]
name = "broken"
origin = "{base}/broken/{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 60
negative_seconds = 2

[[read]]
name = "big"
origin = "{base}/big/{n}"
parameters = { n = { type = "integer", min = 1, max = 100000 } }
fresh_seconds = 60
max_bytes = 1000

[[read]]
name = "jitter"
origin = "{base}/items/{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 10
stale_seconds = 20

[[read]]
name = "mine"
scope = "subject"
origin = "{base}/subjects/{subject}/items/{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 60

[[read]]
name = "mine-shared"
scope = "subject"
origin = "{base}/items/shared-{id}"
parameters = { id = { type = "string", max_length = 64 } }
fresh_seconds = 60
"#;
    format!(
        "{CLAIM_DECLARATION}{}",
        reads.replace("{base}", &origin.base)
    )
}

/// A snapshot of a gateway's cache figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    l1_hits: u64,
    hits: u64,
    stale_serves: u64,
    misses: u64,
    fills: u64,
    not_stored: u64,
    filling_refusals: u64,
    origin_calls: u64,
    invalidations_received: u64,
}

fn figures(stack: &Stack) -> Figures {
    let s: &CacheStats = &stack.gateway.reads.stats;
    let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
    Figures {
        l1_hits: get(&s.l1_hits),
        hits: get(&s.hits),
        stale_serves: get(&s.stale_serves),
        misses: get(&s.misses),
        fills: get(&s.fills),
        not_stored: get(&s.not_stored),
        filling_refusals: get(&s.filling_refusals),
        origin_calls: get(&s.origin_calls),
        invalidations_received: get(&s.invalidations_received),
    }
}

/// `GET /v1/reads/{path}` with the stack's credential.
async fn read(stack: &Stack, path: &str) -> Reply {
    stack
        .get(&format!("/v1/reads/{path}"), Some(&stack.credential()))
        .await
}

/// A time of an answer.
fn time(data: &Value, field: &str) -> DateTime<Utc> {
    let text = data[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {data}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{field} = {text:?}: {e}"))
        .with_timezone(&Utc)
}

fn millis_between(data: &Value, from: &str, to: &str) -> i64 {
    (time(data, to) - time(data, from)).num_milliseconds()
}

/// The first item of a `200` answer.
#[track_caller]
fn item(reply: &Reply) -> &Value {
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    &reply.data()["items"][0]
}

/// A `503 UNAVAILABLE` with `details.reason = reason` and `Retry-After`.
#[track_caller]
fn assert_unavailable(reply: &Reply, reason: Option<&str>) {
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
    if let Some(reason) = reason {
        assert_eq!(
            reply.body["error"]["details"]["reason"], reason,
            "{:?}",
            reply.body
        );
    }
}

/// Sleeps until `at` (the server's and the test's clocks are this machine's) and a little more.
async fn sleep_past(at: DateTime<Utc>) {
    let left = (at - Utc::now()).num_milliseconds().max(0) as u64;
    tokio::time::sleep(Duration::from_millis(left + 60)).await;
}

// ---------------------------------------------------------------------------------------------
// Through gateways.
// ---------------------------------------------------------------------------------------------

/// 2,000 concurrent reads of one cold key, 1,000 through each of two `sluice serve` processes,
/// while the origin takes 300 ms: one fill lease across the gateways and single flight within
/// each, so the origin sees exactly one call, though the origin budgets (8 per process, 8 per
/// application) would allow eight; every reader gets the value or `503 filling` with
/// `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_cold_reads_through_two_gateways_cost_one_origin_call() {
    const PER_GATEWAY: usize = 1_000;
    let origin = OriginServer::start().await;
    origin.set_delay(Duration::from_millis(300));
    let stack = Stack::with_declaration(&declaration(&origin)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    // Budgets that would let every reader's gateway call the origin: only the fill lease and
    // single flight keep it to one call.
    let budgets = [
        ("SLUICE_GATEWAY_CACHE_ORIGIN_PER_PROCESS", "8"),
        ("SLUICE_GATEWAY_CACHE_ORIGIN_PER_APPLICATION", "8"),
    ];
    let (a, b) = tokio::join!(
        GatewayProcess::start_with(&stack, dir.path(), "a", &budgets),
        GatewayProcess::start_with(&stack, dir.path(), "b", &budgets),
    );
    let gateways = [Arc::new(a), Arc::new(b)];
    // Open the connections first, so that the readers go out together.
    let mut warm = Vec::new();
    for gateway in &gateways {
        for _ in 0..PER_GATEWAY {
            let gateway = gateway.clone();
            warm.push(tokio::spawn(async move {
                gateway
                    .send(Method::GET, "/healthz", None, None)
                    .await
                    .status
            }));
        }
    }
    for task in warm {
        assert_eq!(task.await.expect("warm-up"), StatusCode::OK);
    }
    // And the credential, the declaration and the scripts of each gateway.
    let credential = Arc::new(stack.credential());
    for gateway in &gateways {
        let warm = gateway.get("/v1/reads/item?id=warm", &credential).await;
        assert_eq!(item(&warm)["id"], "warm");
    }

    let go = Arc::new(tokio::sync::Barrier::new(2 * PER_GATEWAY));
    let started = Instant::now();
    let mut readers = Vec::new();
    for gateway in &gateways {
        for _ in 0..PER_GATEWAY {
            let (gateway, credential, go) = (gateway.clone(), credential.clone(), go.clone());
            readers.push(tokio::spawn(async move {
                go.wait().await;
                let sent = started.elapsed();
                let reply = gateway.get("/v1/reads/item?id=cold", &credential).await;
                (sent, started.elapsed(), reply)
            }));
        }
    }
    let mut answered = Vec::new();
    for reader in readers {
        answered.push(reader.await.expect("reader"));
    }

    let calls = origin.calls("/items/cold");
    let (mut values, mut filling, mut overlapping) = (0, 0, 0);
    let mut generations = BTreeSet::new();
    // The first fill took at least the origin's 300 ms: readers sent before the first value
    // came back overlapped it.
    let first_value = answered
        .iter()
        .filter(|(_, _, reply)| reply.status == StatusCode::OK)
        .map(|(_, done, _)| *done)
        .min()
        .expect("some reader got the value");
    for (sent, _, reply) in &answered {
        if *sent < first_value {
            overlapping += 1;
        }
        if reply.status == StatusCode::OK {
            values += 1;
            assert_eq!(item(reply)["id"], "cold", "{:?}", reply.body);
            generations.insert(reply.data()["generated_at"].to_string());
        } else {
            assert_unavailable(reply, Some("filling"));
            filling += 1;
        }
    }
    println!(
        "2000 cold reads: origin calls {calls}, values {values}, filling {filling}, \
         overlapping the first fill {overlapping}, origin busy at most {}",
        origin.most_in_flight()
    );
    assert_eq!(calls, 1, "the origin was called {calls} times for one key");
    assert_eq!(values + filling, 2 * PER_GATEWAY);
    assert!(
        generations.len() as u64 <= calls,
        "{generations:?} from {calls} calls"
    );
    assert!(
        overlapping >= PER_GATEWAY,
        "only {overlapping} readers overlapped the first fill"
    );
}

/// After the fresh period, reads answer `stale` at once (well before the slow origin could)
/// while exactly one refresh runs; then `fresh` again with a newer value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_values_are_served_at_once_while_exactly_one_refresh_runs() {
    let origin = OriginServer::start().await;
    let stack = Stack::with_declaration(&declaration(&origin)).await;
    let first = read(&stack, "page?id=s").await;
    assert_eq!(item(&first)["call"], 1);
    let data = first.data().clone();
    assert_eq!(data["freshness"], "fresh");
    let version = data["version"].as_str().expect("version");
    assert!(
        !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()),
        "no dependencies: the generation alone: {version}"
    );
    assert_eq!(origin.calls("/plain/s"), 1);

    // Legitimately waiting for the fresh period (1 s, less its jitter) to pass.
    sleep_past(time(&data, "fresh_until")).await;
    origin.set_delay(Duration::from_millis(1_500));
    let before = figures(&stack);
    let stack = Arc::new(stack);
    let mut readers = Vec::new();
    for _ in 0..20 {
        let stack = stack.clone();
        readers.push(tokio::spawn(async move {
            let started = Instant::now();
            let reply = read(&stack, "page?id=s").await;
            (started.elapsed(), reply)
        }));
    }
    let mut answers = Vec::new();
    for reader in readers {
        answers.push(reader.await.expect("reader"));
    }
    // And one after another while the refresh still waits on the origin.
    for _ in 0..5 {
        let started = Instant::now();
        let reply = read(&stack, "page?id=s").await;
        answers.push((started.elapsed(), reply));
    }
    let slowest = answers
        .iter()
        .map(|(took, _)| *took)
        .max()
        .expect("answers");
    for (_, reply) in &answers {
        assert_eq!(item(reply)["call"], 1, "{:?}", reply.body);
        assert_eq!(reply.data()["freshness"], "stale", "{:?}", reply.body);
        assert_eq!(reply.data()["generated_at"], data["generated_at"]);
        assert_eq!(reply.data()["version"], data["version"]);
    }
    assert!(
        slowest < Duration::from_millis(1_000),
        "a stale answer took {slowest:?}; the origin takes 1.5 s"
    );
    assert_eq!(origin.calls("/plain/s"), 2, "exactly one refresh started");
    assert!(figures(&stack).stale_serves > before.stale_serves);

    let deadline = Instant::now() + Duration::from_secs(5);
    let fresh = loop {
        let reply = read(&stack, "page?id=s").await;
        if reply.data()["freshness"] == "fresh" {
            break reply;
        }
        assert!(
            Instant::now() < deadline,
            "the refresh lands: {:?}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(item(&fresh)["call"], 2);
    assert!(time(fresh.data(), "generated_at") > time(&data, "generated_at"));
    assert_ne!(fresh.data()["version"], data["version"]);
    assert_eq!(origin.calls("/plain/s"), 2, "exactly one refresh ran");
}

/// A read depending on `pool:stock` is a miss again once a claim allocated from the pool (the
/// executor bumps the dependency and every gateway hears of it), and once
/// `POST /v1/reads/{name}:invalidate` named the dependency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_allocation_and_an_invalidate_call_make_the_next_read_a_miss() {
    let origin = OriginServer::start().await;
    let stack = Stack::with_declaration(&declaration(&origin)).await;
    let path = "/items/stock-a";
    let first = read(&stack, "stock?id=a").await;
    assert_eq!(item(&first)["call"], 1);
    let again = read(&stack, "stock?id=a").await;
    assert_eq!(item(&again)["call"], 1, "served from the cache");
    assert_eq!(origin.calls(path), 1);

    // A claim allocates one unit of `stock`.
    let before = figures(&stack);
    let receipt = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
    let ticket = receipt.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();
    let executor = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(15), || async {
            stack.poll(&ticket).await.data()["status"] == "succeeded"
        })
        .await,
        "the claim succeeds: {:?}",
        stack.poll(&ticket).await.body
    );
    executor.cancel();
    assert!(
        eventually(Duration::from_secs(5), || async {
            figures(&stack).invalidations_received > before.invalidations_received
        })
        .await,
        "the gateway hears of the invalidation"
    );
    let before = figures(&stack);
    let after_claim = read(&stack, "stock?id=a").await;
    assert_eq!(item(&after_claim)["call"], 2, "{:?}", after_claim.body);
    assert_eq!(origin.calls(path), 2);
    assert_eq!(figures(&stack).misses, before.misses + 1);
    assert_ne!(after_claim.data()["version"], first.data()["version"]);
    assert_eq!(item(&read(&stack, "stock?id=a").await)["call"], 2);

    // The invalidate call.
    let answer = stack
        .post(
            "/v1/reads/stock:invalidate",
            Some(&stack.credential()),
            r#"{"dependencies": ["pool:stock"]}"#,
        )
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.data()["dependencies"][0]["dependency"], "pool:stock");
    assert_eq!(answer.data()["dependencies"][0]["version"], "2");
    assert!(
        after_claim.data()["version"]
            .as_str()
            .is_some_and(|v| v.ends_with(".1")),
        "the generation and the dependency's version: {:?}",
        after_claim.data()["version"]
    );
    let before = figures(&stack);
    let after_call = read(&stack, "stock?id=a").await;
    assert_eq!(item(&after_call)["call"], 3, "{:?}", after_call.body);
    assert_eq!(figures(&stack).misses, before.misses + 1);
    assert_eq!(origin.calls(path), 3);

    // Refusals invalidate nothing.
    let reader = credential_with_scopes(&stack, stack.creds.namespace_id, &["reads:read"]).await;
    let refusals: &[(&str, Option<String>, &str, StatusCode, &str)] = &[
        (
            "stock",
            Some(stack.credential()),
            r#"{"dependencies": ["pool:stock"], "extra": 1}"#,
            StatusCode::BAD_REQUEST,
            "extra",
        ),
        (
            "stock",
            Some(stack.credential()),
            r#"{"Dependencies": ["pool:stock"]}"#,
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            "stock",
            Some(stack.credential()),
            r#"{"dependencies": ["pool:stock"], "dependencies": []}"#,
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            "stock",
            Some(stack.credential()),
            r#"{"dependencies": []}"#,
            StatusCode::BAD_REQUEST,
            "dependencies",
        ),
        (
            "stock",
            Some(stack.credential()),
            r#"{"dependencies": [7]}"#,
            StatusCode::BAD_REQUEST,
            "dependencies[0]",
        ),
        (
            "stock",
            Some(stack.credential()),
            r#"{"dependencies": null}"#,
            StatusCode::BAD_REQUEST,
            "dependencies",
        ),
        (
            "nope",
            Some(stack.credential()),
            r#"{"dependencies": ["pool:stock"]}"#,
            StatusCode::NOT_FOUND,
            "",
        ),
        (
            "stock",
            Some(reader),
            r#"{"dependencies": ["pool:stock"]}"#,
            StatusCode::FORBIDDEN,
            "",
        ),
        (
            "stock",
            Some(stack.subject_token("user-1")),
            r#"{"dependencies": ["pool:stock"]}"#,
            StatusCode::FORBIDDEN,
            "",
        ),
        (
            "stock",
            None,
            r#"{"dependencies": ["pool:stock"]}"#,
            StatusCode::UNAUTHORIZED,
            "",
        ),
    ];
    for (name, bearer, body, status, field) in refusals {
        let reply = stack
            .post(
                &format!("/v1/reads/{name}:invalidate"),
                bearer.as_deref(),
                body,
            )
            .await;
        assert_eq!(reply.status, *status, "{body}: {:?}", reply.body);
        if !field.is_empty() {
            assert_eq!(reply.field(), *field, "{body}: {:?}", reply.body);
        }
    }
    assert_eq!(item(&read(&stack, "stock?id=a").await)["call"], 3);
    assert_eq!(origin.calls(path), 3, "no refusal invalidated anything");
}

/// An origin `404` is `NOT_FOUND` and an origin `500` is `503 reason: origin`, both cached for
/// `negative_seconds` (2 s, less its jitter: at least 1.8 s): repeats within it leave the origin
/// alone, after it the origin is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_failures_are_cached_for_the_negative_period_only() {
    let origin = OriginServer::start().await;
    let stack = Stack::with_declaration(&declaration(&origin)).await;
    let missing = read(&stack, "missing?id=x").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{:?}", missing.body);
    assert_eq!(missing.code(), "NOT_FOUND");
    let broken = read(&stack, "broken?id=y").await;
    assert_unavailable(&broken, Some("origin"));
    let filled = Instant::now();
    for _ in 0..3 {
        assert_eq!(
            read(&stack, "missing?id=x").await.status,
            StatusCode::NOT_FOUND
        );
        assert_unavailable(&read(&stack, "broken?id=y").await, Some("origin"));
    }
    assert!(
        filled.elapsed() < Duration::from_millis(1_500),
        "repeats ran within the period"
    );
    assert_eq!(origin.calls("/missing/x"), 1);
    assert_eq!(origin.calls("/broken/y"), 1);

    // Legitimately waiting for the negative period (2 s) to pass.
    tokio::time::sleep(Duration::from_millis(2_100).saturating_sub(filled.elapsed())).await;
    assert_eq!(
        read(&stack, "missing?id=x").await.status,
        StatusCode::NOT_FOUND
    );
    assert_unavailable(&read(&stack, "broken?id=y").await, Some("origin"));
    assert_eq!(origin.calls("/missing/x"), 2);
    assert_eq!(origin.calls("/broken/y"), 2);
}

/// A value over the read's `max_bytes` (1000) is served but not cached, in Redis or in L1; a
/// value under it is cached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_over_max_bytes_is_served_but_not_cached() {
    let origin = OriginServer::start().await;
    let stack = Stack::with_declaration(&declaration(&origin)).await;
    let before = figures(&stack);
    for round in 1..=3 {
        let big = read(&stack, "big?n=5000").await;
        assert_eq!(item(&big).as_str().map(str::len), Some(5000));
        assert_eq!(big.data()["freshness"], "fresh");
        assert_eq!(origin.calls("/big/5000"), round, "not cached");
    }
    let after = figures(&stack);
    assert_eq!(after.not_stored, before.not_stored + 3);
    assert_eq!(after.fills, before.fills);
    for _ in 0..3 {
        assert_eq!(
            item(&read(&stack, "big?n=10").await).as_str().map(str::len),
            Some(10)
        );
    }
    assert_eq!(origin.calls("/big/10"), 1, "a small value is cached");
}

/// Fresh and stale periods carry jitter: `fresh_until - generated_at` lies in
/// [0.9 × 10 s, 10 s] over many keys (and `stale_until - fresh_until` in [0.9 × 20 s, 20 s]),
/// not all equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_and_stale_periods_carry_bounded_jitter() {
    let origin = OriginServer::start().await;
    let stack = Stack::start_with(StackOptions {
        declaration: declaration(&origin),
        config: GatewayConfig {
            cache: CacheConfig {
                origin_per_second: 10_000,
                ..CacheConfig::default()
            },
            ..GatewayConfig::default()
        },
        ..StackOptions::default()
    })
    .await;
    let mut fresh_periods = BTreeSet::new();
    for i in 0..40 {
        let reply = read(&stack, &format!("jitter?id=j{i}")).await;
        assert_eq!(item(&reply)["id"], format!("j{i}"));
        let data = reply.data();
        let fresh = millis_between(data, "generated_at", "fresh_until");
        let stale = millis_between(data, "fresh_until", "stale_until");
        assert!((9_000..=10_000).contains(&fresh), "fresh period {fresh} ms");
        assert!(
            (18_000..=20_000).contains(&stale),
            "stale period {stale} ms"
        );
        fresh_periods.insert(fresh);
    }
    assert!(
        fresh_periods.len() > 1,
        "every key got the same fresh period: {fresh_periods:?}"
    );
    assert_eq!(origin.total_calls(), 40);
}

/// A subject-scoped read keeps one value per subject: subjects A and B reading the same
/// parameters at the same time each get their own (the origin sees `{subject}`), never the
/// other's, even when the origin's URL is the same for both; a credential names the subject with
/// `?subject=` and needs `reads:read`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_scoped_values_are_never_served_to_another_subject() {
    let origin = OriginServer::start().await;
    let stack = Arc::new(Stack::with_declaration(&declaration(&origin)).await);
    let tokens = [
        ("alice", stack.subject_token("alice")),
        ("bob", stack.subject_token("bob")),
    ];
    let mut readers = Vec::new();
    for _ in 0..25 {
        for (subject, token) in &tokens {
            let (stack, subject, token) = (stack.clone(), *subject, token.clone());
            readers.push(tokio::spawn(async move {
                let reply = stack.get("/v1/reads/mine?id=1", Some(&token)).await;
                (subject, reply)
            }));
        }
    }
    for reader in readers {
        let (subject, reply) = reader.await.expect("reader");
        if reply.status == StatusCode::OK {
            assert_eq!(item(&reply)["subject"], subject, "{:?}", reply.body);
        } else {
            assert_unavailable(&reply, Some("filling"));
        }
    }
    for (subject, token) in &tokens {
        let reply = stack.get("/v1/reads/mine?id=1", Some(token)).await;
        assert_eq!(item(&reply)["subject"], *subject);
        assert_eq!(
            origin.calls(&format!("/subjects/{subject}/items/1")),
            1,
            "one fill per subject"
        );
    }

    // A credential names the subject, and gets that subject's value (the cached one).
    let credential = stack.credential();
    let named = stack
        .get("/v1/reads/mine?id=1&subject=bob", Some(&credential))
        .await;
    assert_eq!(item(&named)["subject"], "bob");
    assert_eq!(item(&named)["call"], 1);
    let unnamed = stack.get("/v1/reads/mine?id=1", Some(&credential)).await;
    assert_eq!(
        unnamed.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        unnamed.body
    );
    assert_eq!(unnamed.field(), "subject");
    let other = stack
        .get("/v1/reads/mine?id=1&subject=bob", Some(&tokens[0].1))
        .await;
    assert_eq!(
        other.status,
        StatusCode::BAD_REQUEST,
        "a token cannot name another subject"
    );
    let no_scope =
        credential_with_scopes(&stack, stack.creds.namespace_id, &["commands:read"]).await;
    for path in ["/v1/reads/mine?id=1&subject=bob", "/v1/reads/item?id=1"] {
        let denied = stack.get(path, Some(&no_scope)).await;
        assert_eq!(denied.status, StatusCode::FORBIDDEN, "{:?}", denied.body);
        assert_eq!(denied.code(), "PERMISSION_DENIED");
    }

    // The same origin URL for both subjects: still one cached value each.
    let shared = "/items/shared-7";
    let alice = stack
        .get("/v1/reads/mine-shared?id=7", Some(&tokens[0].1))
        .await;
    assert_eq!(item(&alice)["call"], 1);
    let bob = stack
        .get("/v1/reads/mine-shared?id=7", Some(&tokens[1].1))
        .await;
    assert_eq!(item(&bob)["call"], 2, "bob is not served alice's copy");
    let alice = stack
        .get("/v1/reads/mine-shared?id=7", Some(&tokens[0].1))
        .await;
    assert_eq!(item(&alice)["call"], 1, "alice keeps her own");
    assert_eq!(origin.calls(shared), 2);
}

/// A fill that the origin budget refuses gives the key's lease back: once the budget is free,
/// the next read of that key fills at once instead of waiting for the lease to lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_refused_by_the_origin_budget_gives_its_lease_back() {
    let origin = OriginServer::start().await;
    origin.set_delay(Duration::from_millis(400));
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            declaration: declaration(&origin),
            config: GatewayConfig {
                cache: CacheConfig {
                    origin_per_process: 1,
                    ..CacheConfig::default()
                },
                ..GatewayConfig::default()
            },
            ..StackOptions::default()
        })
        .await,
    );
    let busy = {
        let stack = stack.clone();
        tokio::spawn(async move { read(&stack, "item?id=slow").await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            origin.calls("/items/slow") == 1
        })
        .await
    );
    assert_unavailable(&read(&stack, "item?id=other").await, Some("filling"));
    assert_eq!(item(&busy.await.expect("busy read"))["id"], "slow");
    origin.set_delay(Duration::ZERO);
    let started = Instant::now();
    let other = read(&stack, "item?id=other").await;
    assert_eq!(item(&other)["call"], 1, "{:?}", other.body);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "filled at once, in {:?}",
        started.elapsed()
    );
}

/// Redis unreachable: the origin is called only within this gateway's budget (2 at once), the
/// other readers get `503`; once a call returns, the budget is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_the_origin_sees_only_the_per_process_budget() {
    let redis = start_private_redis().await;
    let origin = OriginServer::start().await;
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            declaration: declaration(&origin),
            redis_url: Some(redis.url()),
            ..StackOptions::default()
        })
        .await,
    );
    // Authentication and the declaration are cached before Redis goes.
    assert_eq!(item(&read(&stack, "item?id=warm").await)["id"], "warm");
    let redis = kill_redis(redis).await;
    assert!(
        stack.redis_disconnected(Duration::from_secs(5)).await,
        "the gateway notices that Redis is gone"
    );
    origin.set_delay(Duration::from_millis(300));
    let before = origin.total_calls();
    let mut served = 0;
    for wave in 0..2 {
        let mut readers = Vec::new();
        for i in 0..20 {
            let stack = stack.clone();
            readers.push(tokio::spawn(async move {
                read(&stack, &format!("item?id=down-{wave}-{i}")).await
            }));
        }
        let (mut values, mut refused) = (0, 0);
        for reader in readers {
            let reply = reader.await.expect("reader");
            if reply.status == StatusCode::OK {
                values += 1;
            } else {
                assert_unavailable(&reply, None);
                refused += 1;
            }
        }
        println!("Redis down, wave {wave}: values {values}, refused {refused}");
        assert!(values >= 1, "the budget lets some through");
        served += values;
        assert_eq!(values + refused, 20);
    }
    let calls = origin.total_calls() - before;
    assert_eq!(calls, served, "each value is one origin call");
    assert!(
        origin.most_in_flight() <= 2,
        "the origin answered {} calls at once",
        origin.most_in_flight()
    );
    assert!(
        calls <= 8,
        "{calls} origin calls for 40 reads in two waits of 300 ms"
    );
    drop(redis);
}

// ---------------------------------------------------------------------------------------------
// The scripts alone.
// ---------------------------------------------------------------------------------------------

struct Bench {
    redis: Projection,
    app: AppKeys,
    namespace: Uuid,
}

impl Bench {
    async fn new() -> Arc<Bench> {
        Arc::new(Bench {
            redis: connect_redis(&test_redis_url(), 4).await.expect("redis"),
            app: AppKeys::new(ApplicationId::new_v7()),
            namespace: Uuid::now_v7(),
        })
    }

    fn entry(&self, name: &str, dependencies: &[&str]) -> EntryKeys {
        let dependencies: Vec<String> = dependencies.iter().map(|d| d.to_string()).collect();
        EntryKeys::new(
            &self.app,
            NamespaceId::from_uuid(self.namespace),
            "r",
            name,
            &dependencies,
        )
    }

    async fn lookup(&self, keys: &EntryKeys, token: &str) -> cache::Lookup {
        cache::lookup(&self.redis, keys, token, 10_000)
            .await
            .expect("cache_read.lua")
    }

    async fn fill(
        &self,
        keys: &EntryKeys,
        token: &str,
        versions: &str,
        body: &str,
        fresh_ms: i64,
        bounds: Bounds,
    ) -> Filled {
        let lifetimes = Lifetimes {
            fresh_ms,
            stale_ms: 60_000,
            jitter_ms: 0,
        };
        cache::fill(
            &self.redis,
            &self.app,
            keys,
            token,
            versions,
            body,
            Origin::Ok,
            lifetimes,
            bounds,
        )
        .await
        .expect("cache_fill.lua")
    }

    /// (bytes, keys) of the totals, the sum and count of the sizes hash, and the index size.
    async fn totals(&self) -> (i64, i64, i64, i64, i64) {
        let client = self.redis.pool().next();
        let totals: HashMap<String, i64> = client
            .hgetall(self.app.cache_totals())
            .await
            .expect("totals");
        let sizes: HashMap<String, i64> =
            client.hgetall(self.app.cache_sizes()).await.expect("sizes");
        let indexed: i64 = client.zcard(self.app.cache_index()).await.expect("index");
        (
            totals.get("bytes").copied().unwrap_or(0),
            totals.get("keys").copied().unwrap_or(0),
            sizes.values().sum(),
            sizes.len() as i64,
            indexed,
        )
    }
}

const OPEN: Bounds = Bounds {
    max_bytes: 1 << 30,
    max_keys: 1 << 20,
};

/// 16 tasks race `cache_read.lua` for one missing key: exactly one takes the fill lease (five
/// rounds); once filled nobody does; once stale exactly one does again; a lease given back is
/// taken by the next caller at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_one_of_sixteen_racers_takes_the_fill_lease() {
    let bench = Bench::new().await;
    async fn race(bench: &Arc<Bench>, keys: &EntryKeys) -> Vec<(String, cache::Lookup)> {
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (bench, keys) = (bench.clone(), keys.clone());
            tasks.push(tokio::spawn(async move {
                let token = Uuid::now_v7().to_string();
                let lookup = bench.lookup(&keys, &token).await;
                (token, lookup)
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.expect("racer"));
        }
        out
    }
    for round in 0..5 {
        let keys = bench.entry(&format!("race-{round}"), &["dep"]);
        let lookups = race(&bench, &keys).await;
        let holders: Vec<_> = lookups.iter().filter(|(_, l)| l.lease_taken).collect();
        assert_eq!(holders.len(), 1, "round {round}: {lookups:?}");
        assert!(lookups.iter().all(|(_, l)| l.state == State::Miss));
        let (token, lookup) = holders[0];

        // Filled: fresh for everybody, no lease.
        let filled = bench
            .fill(&keys, token, &lookup.versions, "[1]", 60_000, OPEN)
            .await;
        assert!(matches!(filled, Filled::Stored { .. }), "{filled:?}");
        let lookups = race(&bench, &keys).await;
        assert!(
            lookups
                .iter()
                .all(|(_, l)| !l.lease_taken && matches!(l.state, State::Fresh(_)))
        );

        // Stale at once (fresh period 0): served stale, one refresher.
        let stale_keys = bench.entry(&format!("stale-{round}"), &[]);
        let taker = bench.lookup(&stale_keys, "filler").await;
        assert!(taker.lease_taken);
        let filled = bench
            .fill(&stale_keys, "filler", &taker.versions, "[2]", 0, OPEN)
            .await;
        assert!(matches!(filled, Filled::Stored { .. }), "{filled:?}");
        let lookups = race(&bench, &stale_keys).await;
        assert_eq!(lookups.iter().filter(|(_, l)| l.lease_taken).count(), 1);
        assert!(
            lookups
                .iter()
                .all(|(_, l)| matches!(l.state, State::Stale(_)))
        );

        // Given back: the next caller takes it at once.
        let (holder, _) = lookups.iter().find(|(_, l)| l.lease_taken).expect("holder");
        cache::release_fill_lease(&bench.redis, &bench.app, &stale_keys, holder)
            .await
            .expect("give back");
        assert!(bench.lookup(&stale_keys, "next").await.lease_taken);
    }

    // A dependency bumped between the look-up and the fill: not stored, lease given back.
    let keys = bench.entry("bumped", &["offer:1"]);
    let lookup = bench.lookup(&keys, "t").await;
    assert!(lookup.lease_taken);
    // (INCR as cache_invalidate.lua does, without announcing it to the gateways of other tests.)
    let bumped: i64 = bench
        .redis
        .pool()
        .next()
        .incr(&keys.dependencies[0])
        .await
        .expect("incr");
    assert_eq!(bumped, 1);
    let filled = bench
        .fill(&keys, "t", &lookup.versions, "[3]", 60_000, OPEN)
        .await;
    assert!(
        matches!(
            filled,
            Filled::NotStored {
                reason: "invalidated",
                ..
            }
        ),
        "{filled:?}"
    );
    let next = bench.lookup(&keys, "u").await;
    assert!(next.lease_taken && next.state == State::Miss && next.versions == "1");
}

/// `origin_permit.lua` under 24 tasks taking, holding and releasing permits: never more than the
/// limit (3) at once, and the limit is reached; its rate bucket grants no more than its burst
/// plus what time refilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_permits_never_exceed_the_limit_at_once() {
    const LIMIT: i64 = 3;
    let bench = Bench::new().await;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..24 {
        let (bench, holding, most, granted) = (
            bench.clone(),
            holding.clone(),
            most.clone(),
            granted.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let budget = OriginBudget {
                max_concurrent: LIMIT,
                per_second: 1_000_000,
            };
            for _ in 0..20 {
                let permit = Uuid::now_v7().to_string();
                let answer =
                    cache::origin_permit(&bench.redis, &bench.app, &permit, budget, 10_000)
                        .await
                        .expect("origin_permit.lua");
                match answer {
                    Ok(()) => {
                        granted.fetch_add(1, Ordering::SeqCst);
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        let held: i64 = bench
                            .redis
                            .pool()
                            .next()
                            .zcard(bench.app.origin_leases())
                            .await
                            .expect("zcard");
                        assert!(held <= LIMIT, "{held} permits held");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        holding.fetch_sub(1, Ordering::SeqCst);
                        cache::release_origin_permit(&bench.redis, &bench.app, &permit)
                            .await
                            .expect("release");
                    }
                    Err(PermitRefused::Concurrency) => tokio::task::yield_now().await,
                    Err(other) => panic!("refused by rate: {other:?}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    println!(
        "origin permits: granted {}, most held at once {most}",
        granted.load(Ordering::SeqCst)
    );
    assert!(most <= LIMIT as usize, "{most} permits at once");
    assert_eq!(most, LIMIT as usize, "the limit is reachable");

    // Rate 5 per second, burst 5: 40 concurrent callers get at most 5 plus the refill.
    let bench = Bench::new().await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let budget = OriginBudget {
                max_concurrent: 1_000,
                per_second: 5,
            };
            let permit = Uuid::now_v7().to_string();
            cache::origin_permit(&bench.redis, &bench.app, &permit, budget, 10_000)
                .await
                .expect("origin_permit.lua")
        }));
    }
    let mut by_rate = 0;
    let mut waits = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => by_rate += 1,
            Err(PermitRefused::Rate { wait_ms }) => waits.push(wait_ms),
            Err(other) => panic!("{other:?}"),
        }
    }
    let allowed = 5 + (started.elapsed().as_millis() as usize * 5 / 1_000);
    assert!(
        (5..=allowed).contains(&by_rate),
        "{by_rate} granted, {allowed} allowed"
    );
    assert!(waits.iter().all(|w| (1..=200).contains(w)), "{waits:?}");

    // A short permit taken after a long one does not shorten the life of the long one.
    let bench = Bench::new().await;
    let budget = OriginBudget {
        max_concurrent: 10,
        per_second: 100,
    };
    for (permit, lease_ms) in [("long", 30_000), ("short", 100)] {
        let taken = cache::origin_permit(&bench.redis, &bench.app, permit, budget, lease_ms)
            .await
            .expect("origin_permit.lua");
        assert_eq!(taken, Ok(()));
    }
    let ttl: i64 = bench
        .redis
        .pool()
        .next()
        .pttl(bench.app.origin_leases())
        .await
        .expect("pttl");
    assert!(ttl > 29_000, "the permits set expires in {ttl} ms");
}

/// `cache_fill.lua` from 40 concurrent fillers keeps the application's byte and key totals
/// exactly equal to what is stored, refuses past the key bound and the byte bound, counts a
/// refill of a key once, and forgets expired entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cache_fill_keeps_exact_totals_and_refuses_past_the_bounds() {
    async fn fill_all(
        bench: &Arc<Bench>,
        names: Vec<String>,
        body_len: usize,
        fresh_ms: i64,
        bounds: Bounds,
    ) -> (usize, usize) {
        let mut tasks = Vec::new();
        for name in names {
            let bench = bench.clone();
            tasks.push(tokio::spawn(async move {
                let keys = bench.entry(&name, &[]);
                let token = Uuid::now_v7().to_string();
                let lookup = bench.lookup(&keys, &token).await;
                assert!(lookup.lease_taken, "{name}: {lookup:?}");
                let body = format!("[\"{}\"]", "b".repeat(body_len - 4));
                bench
                    .fill(&keys, &token, &lookup.versions, &body, fresh_ms, bounds)
                    .await
            }));
        }
        let (mut stored, mut full) = (0, 0);
        for task in tasks {
            match task.await.expect("filler") {
                Filled::Stored { .. } => stored += 1,
                Filled::NotStored { reason: "full", .. } => full += 1,
                other => panic!("{other:?}"),
            }
        }
        (stored, full)
    }
    let size = |body_len: i64| body_len + 64;

    // The key bound: 10 of 40 (stale at once, so that a look-up takes the lease to refill).
    let bench = Bench::new().await;
    let names: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let bounds = Bounds {
        max_bytes: 1 << 30,
        max_keys: 10,
    };
    assert_eq!(
        fill_all(&bench, names.clone(), 100, 0, bounds).await,
        (10, 30)
    );
    assert_eq!(
        bench.totals().await,
        (10 * size(100), 10, 10 * size(100), 10, 10)
    );

    // Refilling the stored keys (and trying the others again) with bigger bodies: each counted
    // once, the bound still holds.
    let sizes: HashMap<String, i64> = bench
        .redis
        .pool()
        .next()
        .hgetall(bench.app.cache_sizes())
        .await
        .expect("sizes");
    let stored: Vec<String> = names
        .iter()
        .filter(|n| sizes.contains_key(&bench.entry(n, &[]).entry))
        .cloned()
        .collect();
    assert_eq!(stored.len(), 10);
    let mut refills = stored.clone();
    refills.extend(
        names
            .iter()
            .filter(|n| !stored.contains(n))
            .take(10)
            .cloned(),
    );
    assert_eq!(
        fill_all(&bench, refills, 300, 60_000, bounds).await,
        (10, 10)
    );
    assert_eq!(
        bench.totals().await,
        (10 * size(300), 10, 10 * size(300), 10, 10)
    );

    // The byte bound: 5 values of 164 bytes fit in 5 × 164 + 100.
    let bench = Bench::new().await;
    let bounds = Bounds {
        max_bytes: 5 * size(100) + 100,
        max_keys: 1_000,
    };
    let names: Vec<String> = (0..20).map(|i| format!("b{i}")).collect();
    assert_eq!(fill_all(&bench, names, 100, 60_000, bounds).await, (5, 15));
    assert_eq!(
        bench.totals().await,
        (5 * size(100), 5, 5 * size(100), 5, 5)
    );

    // Expired entries are forgotten by later fills: 8 entries living 1 s (long enough that a
    // stalled machine still counts them all alive), then one more once they expired.
    let bench = Bench::new().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let keys = bench.entry(&format!("short{i}"), &[]);
            let lookup = bench.lookup(&keys, "t").await;
            let lifetimes = Lifetimes {
                fresh_ms: 1_000,
                stale_ms: 0,
                jitter_ms: 0,
            };
            cache::fill(
                &bench.redis,
                &bench.app,
                &keys,
                "t",
                &lookup.versions,
                "[\"short\"]",
                Origin::Ok,
                lifetimes,
                OPEN,
            )
            .await
            .expect("fill")
        }));
    }
    for task in tasks {
        assert!(matches!(task.await.expect("fill"), Filled::Stored { .. }));
    }
    assert_eq!(bench.totals().await.1, 8);
    // Legitimately waiting for the 1 s lifetimes to pass.
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    assert_eq!(
        fill_all(&bench, vec!["long".into()], 100, 60_000, OPEN).await,
        (1, 0)
    );
    assert_eq!(bench.totals().await, (size(100), 1, size(100), 1, 1));
}

/// A burst of announcements larger than the subscriber's buffer (other namespaces' invalidations
/// arriving while the gateway's task waits for a core) must not leave the gateway deaf: it drops
/// every local copy and goes on listening, so the next announcement of its own namespace is
/// still heard. (The listener used to end at the first overflow.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_subscribers_buffer_does_not_deafen_the_gateway() {
    let origin = OriginServer::start().await;
    let stack = Stack::with_declaration(&declaration(&origin)).await;
    let publisher = connect_redis(&test_redis_url(), 8).await.expect("redis");
    let channel = sluice_redis::cache::INVALIDATION_CHANNEL;
    // Heard once the subscriber is up: an announcement for this namespace counts.
    let own = format!(
        "{}:{}",
        stack.creds.application_id, stack.creds.namespace_id
    );
    // Announces this namespace until the gateway has heard `at_least` announcements in all.
    let announced_until_heard = |at_least: u64| {
        let (stack, publisher, own) = (&stack, &publisher, &own);
        eventually(Duration::from_secs(5), move || async move {
            let _: i64 = publisher
                .pool()
                .next()
                .publish(channel, own.as_str())
                .await
                .expect("publish");
            figures(stack).invalidations_received >= at_least
        })
    };
    let subscribed = announced_until_heard(1).await;
    assert!(
        subscribed,
        "the gateway hears its own namespace's announcements"
    );

    // 20,000 announcements of other namespaces at once, far past the client's buffer.
    let strangers = format!("{}:{}", uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (client, strangers) = (publisher.pool().next().clone(), strangers.clone());
        burst.spawn(async move {
            let pipeline = client.pipeline();
            for _ in 0..2_500 {
                let _: () = pipeline
                    .publish(channel, strangers.as_str())
                    .await
                    .expect("queue");
            }
            let _: Vec<i64> = pipeline.all().await.expect("publish the burst");
        });
    }
    burst.join_all().await;
    // Settled: the count stops moving once the burst is read (or the listener ended).
    let mut last = figures(&stack).invalidations_received;
    let settled = eventually(Duration::from_secs(10), || {
        let now = figures(&stack).invalidations_received;
        let still = now == last;
        last = now;
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            still
        }
    })
    .await;
    assert!(settled, "the burst is read");
    let before = figures(&stack).invalidations_received;
    let still_hearing = announced_until_heard(before + 1).await;
    assert!(
        still_hearing,
        "the gateway still hears its namespace after the burst"
    );
}
