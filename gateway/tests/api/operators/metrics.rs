//! `GET /metrics` of a real gateway process and of a real executor process
//! (`sluice execute --metrics-listen`): counters equal the test's own counts exactly, the
//! projection gauges agree with Redis and PostgreSQL, and the exposition is well-formed.
//!
//! Separate processes, so the process-global counters hold exactly what this test did and
//! nothing another test did. The exposition is parsed by [`Exposition::parse`], which is strict:
//! a malformed line, a sample without a `# TYPE`, a duplicate series or a histogram whose
//! buckets are not cumulative up to `+Inf = _count` fails the test.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::execution::{all_terminal, status_counts};
use crate::support::gateway_process::GatewayProcess;
use crate::support::sluice_process::SluiceProcess;
use crate::support::*;

/// Accepted enqueues: exactly the queue's `max_queue`, so the next new key is refused.
const ACCEPTED: usize = 12;
/// Units of the pool: this many succeed, the others are rejected `SOLD_OUT`.
const CAPACITY: usize = 5;
/// Replays of accepted keys (answered `200` even while the queue is full).
const REPLAYED: usize = 4;
/// New keys refused `QUEUE_FULL`.
const QUEUE_FULL: usize = 3;
/// Enqueues refused `INVALID_ARGUMENT` (an offer that is not a uuid).
const INVALID: usize = 2;
/// Enqueues of a command the namespace does not declare (`NOT_FOUND`).
const UNDECLARED: usize = 1;

fn declaration() -> String {
    let declaration = CLAIM_DECLARATION
        .replace(
            "admission = { max_queue = 1000000 }",
            &format!("admission = {{ max_queue = {ACCEPTED} }}"),
        )
        .replace("capacity = 100", &format!("capacity = {CAPACITY}"));
    assert!(declaration.contains(&format!("max_queue = {ACCEPTED} ")));
    assert!(declaration.contains(&format!("capacity = {CAPACITY}\n")));
    declaration
}

/// A known mix of enqueues through a gateway process, drained by an executor process; then
/// both expositions hold exactly that mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_exactly_what_the_gateway_and_the_executor_did() {
    let stack = Stack::with_declaration(&declaration()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = GatewayProcess::start(&stack, dir.path(), "gateway").await;
    let credential = stack.credential();
    let offer = offer();
    let enqueue = |subject: String, key: String, offer: String| {
        let body = json!({"request_key": key, "subject": subject, "input": {"offer": offer}});
        let (gateway, credential) = (&gateway, &credential);
        async move {
            gateway
                .post("/v1/commands/claim:enqueue", credential, &body)
                .await
        }
    };

    // Nothing reached the handler yet: the known outcomes are exported at zero.
    let before = scrape(&gateway.admin_base, "/metrics").await;
    assert_eq!(
        before.value("sluice_intake_decisions_total", &[("outcome", "accepted")]),
        0.0
    );

    let mut ids = Vec::new();
    for i in 0..ACCEPTED {
        let reply = enqueue(format!("buyer-{i}"), format!("k-{i}"), offer.clone()).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        ids.push(reply.data()["command_id"].clone());
    }
    for (i, id) in ids.iter().enumerate().take(REPLAYED) {
        let reply = enqueue(format!("buyer-{i}"), format!("k-{i}"), offer.clone()).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        assert_eq!(
            &reply.data()["command_id"],
            id,
            "a replay names the original"
        );
    }
    for i in 0..QUEUE_FULL {
        let reply = enqueue(format!("late-{i}"), format!("late-{i}"), offer.clone()).await;
        assert_eq!(reply.code(), "QUEUE_FULL", "{:?}", reply.body);
    }
    for i in 0..INVALID {
        let reply = enqueue(format!("bad-{i}"), format!("bad-{i}"), "not-a-uuid".into()).await;
        assert_eq!(reply.code(), "INVALID_ARGUMENT", "{:?}", reply.body);
    }
    for i in 0..UNDECLARED {
        let body = json!({"request_key": format!("u-{i}"), "subject": "s", "input": {}});
        let reply = gateway
            .post("/v1/commands/undeclared:enqueue", &credential, &body)
            .await;
        assert_eq!(reply.code(), "NOT_FOUND", "{:?}", reply.body);
    }
    // Refused before the handler (no credential): not an intake decision.
    let body = json!({"request_key": "x", "subject": "s", "input": {"offer": offer}});
    let reply = gateway
        .post("/v1/commands/claim:enqueue", "not-a-credential", &body)
        .await;
    assert_eq!(reply.code(), "UNAUTHENTICATED", "{:?}", reply.body);

    // While the commands wait, the projection gauges show them.
    let waiting = scrape(&gateway.admin_base, "/metrics").await;
    let app = stack.creds.application_id.to_string();
    let ns = stack.creds.namespace_id.to_string();
    let command = [
        ("application", app.as_str()),
        ("namespace", ns.as_str()),
        ("command", "claim"),
    ];
    assert_eq!(
        waiting.value("sluice_queue_depth", &command),
        ACCEPTED as f64
    );
    assert_eq!(
        waiting.value("sluice_unfinished_commands", &[("application", &app)]),
        ACCEPTED as f64
    );

    let mut executor = MetricsExecutor::start(&stack, dir.path()).await;
    assert!(
        all_terminal(&stack, Duration::from_secs(20)).await,
        "every command lands: {:?}\n{}",
        status_counts(&stack).await,
        executor.process.log_text()
    );
    let counts = status_counts(&stack).await;
    assert_eq!(
        counts.get("succeeded").copied(),
        Some(CAPACITY as i64),
        "{counts:?}"
    );
    assert_eq!(
        counts.get("rejected").copied(),
        Some((ACCEPTED - CAPACITY) as i64),
        "{counts:?}"
    );

    // The executor counts right after each commit, the projection follows its mirror: both
    // settle within moments of PostgreSQL.
    let executed = scrape_until(&executor.base, |e| {
        e.sum("sluice_executions_total") == ACCEPTED as f64
    })
    .await;
    let drained = scrape_until(&gateway.admin_base, |e| {
        e.value("sluice_unfinished_commands", &[("application", &app)]) == 0.0
            && e.value("sluice_command_permits_in_flight", &command) == 0.0
    })
    .await;

    // The gateway: one decision per request that reached the handler, by outcome.
    let intake = drained.by_label("sluice_intake_decisions_total", "outcome");
    let expected: BTreeMap<String, f64> = [
        ("accepted", ACCEPTED),
        ("replayed", REPLAYED),
        ("queue_full", QUEUE_FULL),
        ("invalid_argument", INVALID),
        ("not_found", UNDECLARED),
    ]
    .into_iter()
    .map(|(outcome, n)| (outcome.to_string(), n as f64))
    .collect();
    assert_eq!(intake, expected);
    assert_eq!(
        drained.value("sluice_acceptance_duration_seconds_count", &[]),
        (ACCEPTED + REPLAYED) as f64,
        "202s and replays are timed, refusals are not"
    );
    // Each step of every new acceptance is timed once; a replay reserves nothing new.
    for phase in ["reserve", "commit", "project"] {
        assert_eq!(
            drained.value(
                "sluice_intake_phase_duration_seconds_count",
                &[("phase", phase)]
            ),
            ACCEPTED as f64,
            "{phase}"
        );
    }
    // Every accepted command went through exactly one group commit; replays and refusals none.
    assert_eq!(
        drained.value("sluice_group_commit_batch_size_sum", &[]),
        ACCEPTED as f64
    );
    let batches = drained.value("sluice_group_commit_batch_size_count", &[]);
    assert!((1.0..=ACCEPTED as f64).contains(&batches), "{batches}");
    assert_eq!(
        drained.value("sluice_group_commit_failed_batches_total", &[]),
        0.0
    );
    assert_eq!(drained.value("sluice_postgres_fallbacks_total", &[]), 0.0);
    assert_eq!(drained.value("sluice_fallbacks_refused_total", &[]), 0.0);
    for store in ["redis", "postgres"] {
        assert_eq!(
            drained.value("sluice_storage_errors_total", &[("store", store)]),
            0.0
        );
    }

    // The gateway's projection figures agree with PostgreSQL and Redis.
    let generation: i64 =
        sqlx::query_scalar("SELECT generation FROM projections WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_one(&stack.pg)
            .await
            .expect("generation");
    let this_app = [("application", app.as_str())];
    assert_eq!(drained.value("sluice_projection_applications", &[]), 1.0);
    assert_eq!(drained.value("sluice_projection_up", &this_app), 1.0);
    assert_eq!(drained.value("sluice_projection_ready", &this_app), 1.0);
    assert_eq!(
        drained.value("sluice_projection_generation", &this_app),
        generation as f64
    );
    assert_eq!(drained.value("sluice_queue_depth", &command), 0.0);
    assert_eq!(
        drained.value("sluice_application_permits_in_flight", &this_app),
        0.0
    );
    let counters = stack.counters().await;
    assert_eq!(counters.get("unfinished").copied(), Some(0), "{counters:?}");
    assert_eq!(
        counters.get(&format!("queued:{ns}:claim")).copied(),
        Some(0),
        "{counters:?}"
    );

    // Per route: the enqueue route's answers by status, counted exactly, under its template;
    // no label holds a raw path (a command code, a key, an id).
    let enqueue_route = |status: &str| {
        drained.value(
            "sluice_http_requests_total",
            &[
                ("route", "/v1/commands/{command}:enqueue"),
                ("method", "POST"),
                ("status", status),
            ],
        )
    };
    assert_eq!(enqueue_route("202"), ACCEPTED as f64);
    assert_eq!(enqueue_route("200"), REPLAYED as f64);
    assert_eq!(enqueue_route("429"), QUEUE_FULL as f64);
    assert_eq!(enqueue_route("400"), INVALID as f64);
    assert_eq!(enqueue_route("404"), UNDECLARED as f64);
    assert_eq!(enqueue_route("401"), 1.0);
    assert_eq!(
        drained.value(
            "sluice_http_request_duration_seconds_count",
            &[
                ("route", "/v1/commands/{command}:enqueue"),
                ("method", "POST")
            ]
        ),
        (ACCEPTED + REPLAYED + QUEUE_FULL + INVALID + UNDECLARED + 1) as f64
    );
    for (name, labels) in drained.samples.keys() {
        if name.starts_with("sluice_http_") {
            let route = labels.iter().find(|(k, _)| k == "route").map(|(_, v)| v);
            assert!(
                route.is_some_and(|r| r == "other"
                    || (r.starts_with('/') && !r.contains("undeclared") && !r.contains("claim"))),
                "{name}{labels:?}"
            );
        }
    }
    // The build and the process, on both: what any service's dashboards chart.
    for (who, exposition) in [("gateway", &drained), ("executor", &executed)] {
        assert_eq!(
            exposition.value(
                "sluice_build_info",
                &[("version", env!("CARGO_PKG_VERSION"))]
            ),
            1.0,
            "{who}"
        );
        for figure in [
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_threads",
            "process_start_time_seconds",
        ] {
            assert!(exposition.value(figure, &[]) > 0.0, "{who}: {figure}");
        }
        assert_eq!(
            exposition.family_type("process_cpu_seconds_total"),
            Some("counter")
        );
    }
    let started = drained.value("process_start_time_seconds", &[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    assert!(
        (now - 600.0..=now + 5.0).contains(&started),
        "the gateway process started within this test: {started} vs {now}"
    );

    // The executor: what its handlers landed, by status; one quota histogram, no webhook call,
    // no rescue, no storage failure.
    let executions = executed.by_label("sluice_executions_total", "status");
    let mut expected: BTreeMap<String, f64> = [
        "succeeded",
        "rejected",
        "failed",
        "expired",
        "cancelled",
        "needs_review",
    ]
    .into_iter()
    .map(|status| (status.to_string(), 0.0))
    .collect();
    expected.insert("succeeded".into(), CAPACITY as f64);
    expected.insert("rejected".into(), (ACCEPTED - CAPACITY) as f64);
    assert_eq!(executions, expected);
    let quota_calls = executed.value(
        "sluice_handler_duration_seconds_count",
        &[("handler", "quota")],
    );
    assert!(
        (1.0..=ACCEPTED as f64).contains(&quota_calls),
        "{quota_calls}"
    );
    assert_eq!(
        executed.value(
            "sluice_handler_duration_seconds_count",
            &[("handler", "webhook")]
        ),
        0.0
    );
    assert_eq!(executed.sum("sluice_lease_rescues_total"), 0.0);
    assert_eq!(executed.sum("sluice_storage_errors_total"), 0.0);
    assert!(
        !executed.has_family("sluice_intake_decisions_total"),
        "an executor exports no gateway counters"
    );
    assert!(
        !drained.has_family("sluice_executions_total"),
        "a gateway exports no executor counters"
    );

    // The executor's endpoint serves its probe and nothing else.
    let client = http_client(1);
    let health = send_request(
        &client,
        &executor.base,
        Method::GET,
        "/healthz",
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(health.status, StatusCode::OK);
    let other = send_request(
        &client,
        &executor.base,
        Method::GET,
        "/v1/x",
        None,
        None,
        &[],
    )
    .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
    assert!(
        executor.process.is_running(),
        "{}",
        executor.process.log_text()
    );
}

/// A projection that cannot be read is exported as down; the scrape still answers, with the
/// other applications' figures and the failure counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_projection_is_exported_as_down_without_failing_the_scrape() {
    let stack = Stack::start().await;
    let other = tenancy_app(&stack).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = GatewayProcess::start(&stack, dir.path(), "gateway").await;
    // A string where metrics.lua expects the `count` hash: the script fails with WRONGTYPE.
    let _: () = fred::interfaces::KeysInterface::set(
        stack.redis.pool().next(),
        stack.keys().count(),
        "not a hash",
        None,
        None,
        false,
    )
    .await
    .expect("break the count hash");

    let scraped = scrape(&gateway.admin_base, "/metrics").await;
    let broken = stack.creds.application_id.to_string();
    let healthy = other.to_string();
    assert_eq!(scraped.value("sluice_projection_applications", &[]), 2.0);
    assert_eq!(
        scraped.value("sluice_projection_up", &[("application", &broken)]),
        0.0
    );
    assert!(
        !scraped.has_series("sluice_projection_generation", &[("application", &broken)]),
        "no figures of an unread projection"
    );
    assert_eq!(
        scraped.value("sluice_projection_up", &[("application", &healthy)]),
        1.0
    );
    assert_eq!(
        scraped.value("sluice_projection_ready", &[("application", &healthy)]),
        1.0
    );
    assert_eq!(
        scraped.value("sluice_storage_errors_total", &[("store", "redis")]),
        1.0,
        "the failed read is counted once"
    );
}

/// A pool's units by state, read from PostgreSQL at scrape: a reserved unit shows as
/// `reserved` beside a committed pool's `allocated`, moves to `allocated` when its holder
/// confirms it and back to `available` when another holder releases one; the three always add
/// up to the pool's capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_pools_show_reserved_units_beside_allocated_ones() {
    let declaration = format!(
        "{}{CLAIM_DECLARATION}",
        crate::quotas::reserved_declaration(3, 300)
    );
    let stack = Stack::with_declaration(&declaration).await;
    let shutdown = crate::execution::start_executor(&stack, crate::execution::fast_executor());
    let ns = stack.creds.namespace_id.to_string();
    let units = |exposition: &Exposition, pool: &str| -> [f64; 3] {
        ["allocated", "reserved", "available"].map(|state| {
            exposition.value(
                "sluice_quota_pool_units",
                &[("namespace", &ns), ("pool", pool), ("state", state)],
            )
        })
    };

    // Before anything is allocated: every unit available, and the pools were read.
    let idle = scrape(&stack.admin_base, "/metrics").await;
    assert_eq!(idle.value("sluice_quota_pools_up", &[]), 1.0);
    assert_eq!(units(&idle, "seats"), [0.0, 0.0, 3.0]);
    assert_eq!(units(&idle, "stock"), [0.0, 0.0, 100.0]);

    let offer = offer();
    let mut allocations = Vec::new();
    for subject in ["alice", "bob"] {
        let receipt = crate::quotas::hold(&stack, subject, &offer).await;
        assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
        allocations.push(receipt);
    }
    let committed = stack.enqueue("carol", &key(), &offer).await;
    assert_eq!(
        committed.status,
        StatusCode::ACCEPTED,
        "{:?}",
        committed.body
    );
    assert!(
        all_terminal(&stack, Duration::from_secs(20)).await,
        "{:?}",
        status_counts(&stack).await
    );
    let held = scrape(&stack.admin_base, "/metrics").await;
    assert_eq!(units(&held, "seats"), [0.0, 2.0, 1.0], "two units reserved");
    assert_eq!(
        units(&held, "stock"),
        [1.0, 0.0, 99.0],
        "one unit allocated"
    );

    // Alice confirms hers, Bob releases his: the gauge follows PostgreSQL.
    let mut ids = Vec::new();
    for receipt in &allocations {
        let (status, result, code) = crate::quotas::landed(&stack, receipt).await;
        assert_eq!(status, "succeeded", "{code:?}");
        ids.push(result["allocation_id"].as_str().expect("id").to_string());
    }
    for ((id, subject), verb) in ids.iter().zip(["alice", "bob"]).zip(["confirm", "release"]) {
        let answer = crate::quotas::act(&stack, id, verb, &stack.subject_token(subject)).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    }
    let decided = scrape(&stack.admin_base, "/metrics").await;
    assert_eq!(units(&decided, "seats"), [1.0, 0.0, 2.0]);
    let (capacity, allocated, reserved, _) = crate::quotas::pool_row(&stack.pg, "seats").await;
    assert_eq!(
        units(&decided, "seats"),
        [allocated, reserved, capacity - allocated - reserved].map(|n| n as f64),
        "the gauge is the pool's row"
    );
    shutdown.cancel();
}

/// A second application in the stack's database, with a ready projection.
async fn tenancy_app(stack: &Stack) -> Uuid {
    let created = sluice_store::tenancy::bootstrap(
        &stack.pg,
        &sluice_store::tenancy::BootstrapRequest {
            application: "second".into(),
            namespace: "main".into(),
            application_id: None,
            scopes: vec![],
            resource_access: false,
        },
    )
    .await
    .expect("bootstrap a second application");
    sluice_durable::lifecycle::rebuild::ensure_ready(
        &stack.pg,
        &stack.redis,
        created.application_id,
    )
    .await
    .expect("its projection");
    created.application_id.as_uuid()
}

/// `sluice execute --metrics-listen 127.0.0.1:<port>`, started again on another port if the
/// free port found by binding `:0` was taken in between.
pub(crate) struct MetricsExecutor {
    pub(crate) process: SluiceProcess,
    /// `http://127.0.0.1:<port>`: `/metrics` and `/healthz`.
    pub(crate) base: String,
}

impl MetricsExecutor {
    pub(crate) async fn start(stack: &Stack, dir: &Path) -> MetricsExecutor {
        let client = http_client(1);
        let mut last_log = String::new();
        for attempt in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut process = SluiceProcess::spawn(
                stack,
                &["execute", "--tick-ms", "20", "--pg-pool-size", "8"],
                &[("SLUICE_METRICS_LISTEN", &format!("127.0.0.1:{port}"))],
                dir.join(format!("executor-{attempt}.log")),
            );
            let base = format!("http://127.0.0.1:{port}");
            let up = eventually(Duration::from_secs(15), || async {
                let probe = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.request(
                        hyper::Request::get(format!("{base}/healthz"))
                            .body(http_body_util::Full::new(bytes::Bytes::new()))
                            .expect("request"),
                    ),
                )
                .await;
                matches!(probe, Ok(Ok(r)) if r.status() == StatusCode::OK)
            })
            .await;
            if up && process.is_running() {
                return MetricsExecutor { process, base };
            }
            last_log = process.log_text();
            assert!(
                !process.is_running(),
                "the executor runs but serves no /healthz within 15 s:\n{last_log}"
            );
        }
        panic!("sluice execute did not start in three attempts; last log:\n{last_log}");
    }
}

/// Scrapes `{base}/metrics` until `settled` holds (for at most 10 s); the last exposition.
pub(crate) async fn scrape_until(base: &str, settled: impl Fn(&Exposition) -> bool) -> Exposition {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let exposition = scrape(base, "/metrics").await;
        if settled(&exposition) {
            return exposition;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{base}/metrics did not settle: {exposition:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET {base}{path}`: `200`, the Prometheus text content type, and a well-formed exposition.
pub(crate) async fn scrape(base: &str, path: &str) -> Exposition {
    let client = http_client(1);
    let reply = send_request(&client, base, Method::GET, path, None, None, &[]).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let content_type = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let text = reply
        .body
        .as_str()
        .unwrap_or_else(|| panic!("the exposition is text, not JSON: {}", reply.body));
    Exposition::parse(text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

/// A parsed Prometheus text exposition (format 0.0.4).
#[derive(Debug, Default)]
pub(crate) struct Exposition {
    /// Family name → type (`counter`, `gauge`, `histogram`).
    types: HashMap<String, String>,
    /// (sample name, labels sorted by name) → value.
    samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

impl Exposition {
    /// Parses strictly: every line is a `# HELP`, a `# TYPE` or a sample of the family whose
    /// `# TYPE` came last; names and labels are well-formed; no series twice; counters end in
    /// `_total` and are not negative; each histogram series has buckets in increasing `le`
    /// order, cumulative, ending with `+Inf` equal to its `_count`, and a `_sum`.
    fn parse(text: &str) -> Result<Exposition, String> {
        let mut exposition = Exposition::default();
        let mut current: Option<(String, String)> = None;
        let mut help: Option<String> = None;
        if !text.ends_with('\n') {
            return Err("the exposition does not end with a newline".into());
        }
        for (n, line) in text.lines().enumerate() {
            let fail = |why: &str| Err(format!("line {}: {why}: {line:?}", n + 1));
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let Some((name, _)) = rest.split_once(' ') else {
                    return fail("HELP without text");
                };
                if !metric_name(name) {
                    return fail("bad metric name");
                }
                help = Some(name.to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let Some((name, kind)) = rest.split_once(' ') else {
                    return fail("TYPE without a type");
                };
                if !metric_name(name) || !["counter", "gauge", "histogram"].contains(&kind) {
                    return fail("bad TYPE");
                }
                if help.take().is_some_and(|h| h != name) {
                    return fail("HELP of another family");
                }
                if kind == "counter" && !name.ends_with("_total") {
                    return fail("a counter not named _total");
                }
                if exposition
                    .types
                    .insert(name.to_string(), kind.to_string())
                    .is_some()
                {
                    return fail("a family typed twice");
                }
                current = Some((name.to_string(), kind.to_string()));
            } else if line.starts_with('#') || line.trim().is_empty() {
                return fail("neither HELP, TYPE nor a sample");
            } else {
                let Some((family, kind)) = &current else {
                    return fail("a sample before any TYPE");
                };
                let (name, labels, value) =
                    sample(line).map_err(|why| format!("line {}: {why}: {line:?}", n + 1))?;
                let belongs = match kind.as_str() {
                    "histogram" => ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| name == format!("{family}{suffix}")),
                    _ => name == *family,
                };
                if !belongs {
                    return fail("a sample of another family than the last TYPE");
                }
                if kind == "counter" && (value < 0.0 || value.is_nan()) {
                    return fail("a negative counter");
                }
                if exposition.samples.insert((name, labels), value).is_some() {
                    return fail("a series twice");
                }
            }
        }
        if help.is_some() {
            return Err("a HELP without its TYPE at the end".into());
        }
        exposition.check_histograms()?;
        Ok(exposition)
    }

    fn check_histograms(&self) -> Result<(), String> {
        for (family, _) in self.types.iter().filter(|(_, kind)| *kind == "histogram") {
            // Buckets of each series (labels without `le`), in the order of their bounds.
            let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
            for ((name, labels), value) in &self.samples {
                if *name != format!("{family}_bucket") {
                    continue;
                }
                let le = labels
                    .iter()
                    .find(|(k, _)| k == "le")
                    .ok_or_else(|| format!("{family}: a bucket without le"))?;
                let bound = parse_value(&le.1).ok_or_else(|| format!("{family}: le {le:?}"))?;
                let rest: Vec<(String, String)> =
                    labels.iter().filter(|(k, _)| k != "le").cloned().collect();
                series.entry(rest).or_default().push((bound, *value));
            }
            if series.is_empty() {
                return Err(format!("{family}: a histogram without buckets"));
            }
            for (labels, mut buckets) in series {
                buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
                if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
                    return Err(format!("{family}{labels:?}: buckets are not cumulative"));
                }
                let last = buckets.last().copied().unwrap_or_default();
                if last.0 != f64::INFINITY {
                    return Err(format!("{family}{labels:?}: no +Inf bucket"));
                }
                let key = |suffix: &str| (format!("{family}{suffix}"), labels.clone());
                let count = self.samples.get(&key("_count"));
                if count != Some(&last.1) {
                    return Err(format!(
                        "{family}{labels:?}: +Inf {} != _count {count:?}",
                        last.1
                    ));
                }
                if !self.samples.contains_key(&key("_sum")) {
                    return Err(format!("{family}{labels:?}: no _sum"));
                }
            }
        }
        Ok(())
    }

    fn has_family(&self, family: &str) -> bool {
        self.types.contains_key(family)
    }

    /// The type of a family (`counter`, `gauge`, `histogram`), if the exposition has it.
    pub(crate) fn family_type(&self, family: &str) -> Option<&str> {
        self.types.get(family).map(String::as_str)
    }

    /// Every family of a `# TYPE` line (a counter's with its `_total`).
    pub(crate) fn families(&self) -> BTreeSet<String> {
        self.types.keys().cloned().collect()
    }

    /// Every sample name with at least one series: a counter's `…_total`, a gauge's own name,
    /// a histogram's `…_bucket`, `…_sum` and `…_count` (never the family's bare name).
    pub(crate) fn sample_names(&self) -> BTreeSet<String> {
        self.samples.keys().map(|(name, _)| name.clone()).collect()
    }

    fn has_series(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.samples.contains_key(&series_key(name, labels))
    }

    /// The value of one series; a missing series fails the test.
    pub(crate) fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        *self
            .samples
            .get(&series_key(name, labels))
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in {:#?}", self.samples))
    }

    /// Every series of `name`, by the value of its one label `label`.
    fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|((_, labels), value)| {
                assert_eq!(labels.len(), 1, "{name}{labels:?}");
                assert_eq!(labels[0].0, label, "{name}{labels:?}");
                (labels[0].1.clone(), *value)
            })
            .collect()
    }

    /// The sum over every series of `name` (0 when there is none).
    fn sum(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == name)
            .map(|(_, v)| v)
            .sum()
    }
}

fn series_key(name: &str, labels: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    labels.sort();
    (name.to_string(), labels)
}

fn metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if text.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') => {
            text.parse().ok()
        }
        _ => None,
    }
}

type Sample = (String, Vec<(String, String)>, f64);
/// A series' labels, sorted.
type Labels = Vec<(String, String)>;

/// `name{label="value",…} value` (no timestamp: Sluice never sends one).
fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("a sample without a value")?;
    let name = &line[..name_end];
    if !metric_name(name) {
        return Err("bad metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        loop {
            // A label name up to '=', or the closing brace.
            let start = chars.peek().map(|(i, _)| *i).ok_or("unterminated labels")?;
            if inner[start..].starts_with('}') {
                rest = &inner[start + 1..];
                break;
            }
            let eq = inner[start..].find('=').ok_or("a label without '='")? + start;
            let key = &inner[start..eq];
            if !label_name(key) {
                return Err(format!("bad label name {key:?}"));
            }
            while chars.peek().is_some_and(|(i, _)| *i <= eq) {
                chars.next();
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("a label value not in quotes".into());
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("unterminated label value")? {
                    (_, '"') => break,
                    (_, '\\') => match chars.next().ok_or("a dangling escape")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        other => return Err(format!("unknown escape \\{other}")),
                    },
                    (_, c) => value.push(c),
                }
            }
            if labels.iter().any(|(k, _): &(String, String)| k == key) {
                return Err(format!("label {key} twice"));
            }
            labels.push((key.to_string(), value));
            match chars.peek().map(|(_, c)| *c) {
                Some(',') => {
                    chars.next();
                }
                Some('}') => {}
                _ => return Err("labels not separated by ','".into()),
            }
        }
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    if value.contains(' ') {
        return Err("more than a value after the labels".into());
    }
    let value = parse_value(value).ok_or("a value that is not a number")?;
    labels.sort();
    Ok((name.to_string(), labels, value))
}

/// The parser is strict enough to catch what the assertions above rely on.
#[test]
fn the_exposition_parser_rejects_malformed_text() {
    let good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 2\n\
                # TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 3\n\
                h_sum 4.5\nh_count 3\n";
    let parsed = Exposition::parse(good).expect("well-formed");
    assert_eq!(parsed.value("a_total", &[("x", "1")]), 2.0);
    assert_eq!(parsed.value("h_count", &[]), 3.0);
    let bad = [
        ("no type", "a_total 1\n"),
        ("missing newline", "# TYPE a_total counter\na_total 1"),
        ("not total", "# TYPE a counter\na 1\n"),
        ("other family", "# TYPE a_total counter\nb_total 1\n"),
        ("garbage", "# TYPE a_total counter\na_total one\n"),
        ("bad label", "# TYPE g gauge\ng{1x=\"a\"} 1\n"),
        ("unquoted", "# TYPE g gauge\ng{x=a} 1\n"),
        ("unterminated", "# TYPE g gauge\ng{x=\"a} 1\n"),
        ("twice", "# TYPE g gauge\ng 1\ng 2\n"),
        ("comment", "# TYPE g gauge\n# EOF\n"),
        ("blank", "# TYPE g gauge\n\ng 1\n"),
        ("negative counter", "# TYPE a_total counter\na_total -1\n"),
        (
            "not cumulative",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
        ),
        (
            "inf is not count",
            "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
        ),
        (
            "no inf",
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n",
        ),
        (
            "no sum",
            "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n",
        ),
    ];
    for (why, text) in bad {
        assert!(Exposition::parse(text).is_err(), "{why}: accepted {text:?}");
    }
}
