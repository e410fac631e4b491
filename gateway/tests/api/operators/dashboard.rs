//! The operator dashboard (`/ui/`) in Debian's headless Chromium, driven by playwright-core from
//! `gateway/tests/ui/dashboard.mjs` against a real stack: the page shows a live load, pauses and
//! resumes intake (the gateway then refuses and accepts enqueues), shows waiting rooms as their
//! places count them, and stays readable with a thousand waiting resources. Screenshots land in `target/test-artifacts/`.
//!
//! Needs `/usr/bin/chromium`, `node` and `npm ci` in `gateway/tests/ui` (deploy/test.sh does all
//! three).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use crate::execution::{OPEN_INTAKE, fast_executor, pool, start_executor};
use crate::rooms::kit::{join, poll_until, until};
use crate::support::browser_driver::{Run, artifacts_dir, run_script};
use crate::support::*;

/// A quota command keyed by offer whose admission drains slowly, so a backlog builds up and the
/// numbers move while the browser looks; the pool sells out before the load ends.
fn slow_claim() -> String {
    format!(
        r#"
[[command]]
code = "claim"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
{OPEN_INTAKE}
admission = {{ per_second = 30, burst = 10, max_in_flight = 8, max_queue = 1000000 }}
handler = {{ kind = "quota", pool = "stock", mode = "committed" }}
{}"#,
        pool("stock", 400)
    )
}

/// Two rooms: `doors` keeps two long passes and a queue; `lapse` has one pass that needs a
/// heartbeat every 5 s and gets none.
const ROOMS: &str = r#"
[[room]]
code = "doors"
max_active = 2
pass_seconds = 600

[[room]]
code = "lapse"
max_active = 1
pass_seconds = 30
heartbeat_seconds = 5
"#;

/// A room counted from its places: code, waiting, active, admitted in the last minute,
/// abandoned, left, and its `max_active`.
type CountedRoom = (String, i64, i64, i64, i64, i64, Option<i32>);

/// People in the rooms before the browser looks: five join `doors` (two admitted, three
/// waiting), one joins `lapse` and abandons the pass. Returns what the Rooms panel must show,
/// counted from the places' rows (not the rooms' counters), for `dashboard.mjs --rooms`.
async fn fill_rooms(stack: &Stack) -> serde_json::Value {
    let mut tickets = Vec::new();
    for i in 0..5 {
        let reply = join(stack, "doors", &format!("d{i}")).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_owned());
    }
    for ticket in &tickets[..2] {
        poll_until(stack, ticket, "admitted", Duration::from_secs(20)).await;
    }
    let reply = join(stack, "lapse", "l0").await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let ticket = reply.data()["ticket"].as_str().expect("ticket").to_owned();
    poll_until(stack, &ticket, "admitted", Duration::from_secs(20)).await;
    // No heartbeat: the ticker ends the place once its pass and the grace have run out.
    poll_until(stack, &ticket, "expired", Duration::from_secs(30)).await;
    until(Duration::from_secs(30), || async move {
        let lapsed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM room_places WHERE room = 'lapse' AND state = 'expired'",
        )
        .fetch_one(&stack.pg)
        .await
        .expect("lapsed places");
        (lapsed == 1, lapsed)
    })
    .await
    .unwrap_or_else(|n| panic!("{n} lapsed places recorded"));

    let counted: Vec<CountedRoom> = sqlx::query_as(
        "SELECT r.code,
                count(*) FILTER (WHERE p.state = 'waiting'),
                count(*) FILTER (WHERE p.state = 'admitted' AND p.pass_until > now()),
                count(*) FILTER (WHERE p.admitted_at > now() - interval '60 seconds'),
                count(*) FILTER (WHERE p.state = 'expired'),
                count(*) FILTER (WHERE p.state = 'left'),
                r.max_active
           FROM rooms r LEFT JOIN room_places p ON p.namespace_id = r.namespace_id AND p.room = r.code
          WHERE r.namespace_id = $1 GROUP BY r.code, r.max_active ORDER BY r.code",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("the places counted");
    let figures: Vec<(&str, i64, i64, i64, i64, i64)> = counted
        .iter()
        .map(|(code, w, a, m, x, l, _)| (code.as_str(), *w, *a, *m, *x, *l))
        .collect();
    assert_eq!(
        figures,
        [("doors", 3, 2, 2, 0, 0), ("lapse", 0, 0, 1, 1, 0)],
        "(room, waiting, active, admitted in the last minute, abandoned, left)"
    );
    let mut expected = serde_json::Map::new();
    for (code, waiting, active, last_minute, abandoned, left, max_active) in counted {
        let max = max_active.map_or("∞".to_string(), |m| m.to_string());
        expected.insert(
            code,
            json!({
                "waiting": waiting.to_string(),
                "active": format!("{active} / {max}"),
                "admitted_last_minute": last_minute.to_string(),
                "abandoned_total": abandoned.to_string(),
                "left_total": left.to_string(),
                "opening": "from declaration",
            }),
        );
    }
    serde_json::Value::Object(expected)
}

/// Runs `dashboard.mjs` against the stack's gateway (see [`run_script`]).
async fn run_browser<F, Fut>(stack: &Stack, credential: &str, args: &[String], on_event: F) -> Run
where
    F: FnMut(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    run_script("dashboard.mjs", &stack.base, credential, args, on_event).await
}

/// Enqueues `claim` for a fresh subject and key.
async fn enqueue_one(stack: &Stack, offer_id: &str) -> Reply {
    stack
        .enqueue(&format!("s-{}", key()), &key(), offer_id)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_files_are_served_with_strict_headers() {
    let stack = Stack::start().await;
    let bare = stack.get("/ui", None).await;
    assert_eq!(bare.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(bare.headers["location"], "/ui/");
    for (path, content_type) in [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
    ] {
        let reply = stack.get(path, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_eq!(reply.headers["content-type"], content_type, "{path}");
        assert_eq!(reply.headers["cache-control"], "no-cache", "{path}");
        assert_eq!(reply.headers["x-content-type-options"], "nosniff", "{path}");
        let csp = reply.headers["content-security-policy"]
            .to_str()
            .expect("ascii CSP");
        assert!(csp.starts_with("default-src 'self'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
    }
    for path in ["/ui/x", "/ui/app.js/x", "/ui/../Cargo.toml"] {
        let reply = stack.get(path, None).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
    }
}

/// The operator sees the rooms as their places count them, watches a live load, pauses the
/// namespace and a command from the page (the gateway refuses enqueues meanwhile), and resumes
/// them (the gateway accepts again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_shows_a_live_load_and_pauses_and_resumes_intake() {
    let stack = Arc::new(Stack::with_declaration(&format!("{}{ROOMS}", slow_claim())).await);
    let ns = stack.creds.namespace_id;
    let operator = credential_with_scopes(&stack, ns, &["status:read", "control:manage"]).await;
    let reader = credential_with_scopes(&stack, ns, &["status:read"]).await;
    let rooms = fill_rooms(&stack).await.to_string();
    let executor = start_executor(&stack, fast_executor());

    let tally = Arc::new(Tally::default());
    let load = Arc::new(Mutex::new(None));
    let checked = Arc::new(AtomicUsize::new(0));
    let args = strings(&[
        "--scenario",
        "live",
        "--readonly",
        &reader,
        "--max-total",
        &LOAD.to_string(),
        "--command",
        "claim",
        "--rooms",
        &rooms,
    ]);
    let run = run_browser(&stack, &operator, &args, |event, detail| {
        let (stack, checked, tally, load) =
            (stack.clone(), checked.clone(), tally.clone(), load.clone());
        async move {
            if event == "watching" {
                // The operator is signed in and watching: the drop starts.
                let task = tokio::spawn(run_load(stack, tally));
                *load.lock().expect("load handle") = Some(task);
                return;
            }
            assert!(
                detail.parse::<u64>().is_ok(),
                "@@{event}: the page showed no revision ({detail:?})"
            );
            let reply = enqueue_one(&stack, &offer()).await;
            match event.as_str() {
                "paused" | "command-paused" => {
                    assert_eq!(
                        (reply.status, reply.code()),
                        (StatusCode::SERVICE_UNAVAILABLE, "INTAKE_PAUSED"),
                        "an enqueue after the page's pause ({event}): {:?}",
                        reply.body
                    );
                    assert!(reply.headers.contains_key("retry-after"), "{event}");
                }
                "resumed" | "command-resumed" => {
                    assert_eq!(
                        reply.status,
                        StatusCode::ACCEPTED,
                        "an enqueue after the page's resume ({event}): {:?}",
                        reply.body
                    );
                }
                other => panic!("unknown event @@{other} from dashboard.mjs"),
            }
            println!("dashboard: @@{event} revision {detail}: the gateway agrees");
            checked.fetch_add(1, Ordering::Relaxed);
        }
    })
    .await;
    let task = load.lock().expect("load handle").take();
    if let Some(task) = task {
        task.await.expect("load task");
    }
    executor.cancel();
    assert!(
        run.success,
        "the browser scenario failed:\n{}",
        run.transcript
    );
    assert_eq!(
        checked.load(Ordering::Relaxed),
        4,
        "the four pause/resume steps were checked"
    );
    let unexpected = tally.unexpected.lock().expect("tally").clone();
    assert!(
        unexpected.is_empty(),
        "load refused otherwise: {unexpected:?}"
    );
    let accepted = tally.accepted.load(Ordering::Relaxed);
    assert!(accepted > 0, "the load was accepted");
    let shot = artifacts_dir().join("dashboard.png");
    assert!(shot.exists(), "no screenshot at {}", shot.display());
    println!(
        "dashboard: screenshot {} (load: {accepted} accepted, {} refused while paused)",
        shot.display(),
        tally.paused.load(Ordering::Relaxed)
    );
}

/// Enqueues of the live scenario's load.
const LOAD: usize = 480;

/// How the load's enqueues were answered.
#[derive(Default)]
struct Tally {
    accepted: AtomicUsize,
    paused: AtomicUsize,
    unexpected: Mutex<Vec<String>>,
}

/// [`LOAD`] enqueues over about five seconds on 16 resources, each for a new subject.
async fn run_load(stack: Arc<Stack>, tally: Arc<Tally>) {
    const BATCHES: usize = 24;
    let offers: Vec<String> = (0..16).map(|_| offer()).collect();
    for batch in 0..BATCHES {
        let batch_offers =
            (0..LOAD / BATCHES).map(|i| offers[(batch * 7 + i) % offers.len()].clone());
        for reply in enqueue_all(&stack, batch_offers).await {
            match (reply.status, reply.code()) {
                (StatusCode::ACCEPTED, _) => {
                    tally.accepted.fetch_add(1, Ordering::Relaxed);
                }
                // The page may pause intake before the load is over.
                (StatusCode::SERVICE_UNAVAILABLE, "INTAKE_PAUSED") => {
                    tally.paused.fetch_add(1, Ordering::Relaxed);
                }
                (status, code) => tally
                    .unexpected
                    .lock()
                    .expect("tally")
                    .push(format!("{status} {code}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A thousand waiting resources (no executor runs): the queue table stays inside the viewport
/// at desktop and phone widths, sorted by depth, and its filter finds one resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_keeps_a_thousand_resources_readable() {
    let stack = Arc::new(Stack::start().await);
    let ns = stack.creds.namespace_id;
    let operator = credential_with_scopes(&stack, ns, &["status:read"]).await;
    let offers: Vec<String> = (0..1_000).map(|_| offer()).collect();
    for chunk in offers.chunks(100) {
        for reply in enqueue_all(&stack, chunk.to_vec()).await {
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        }
    }
    // The busiest resource: five more waiting on the first offer.
    let deepest = offers[0].clone();
    for _ in 0..5 {
        let reply = enqueue_one(&stack, &deepest).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let status = stack.get("/v1/status", Some(&operator)).await;
    assert_eq!(status.status, StatusCode::OK, "{:?}", status.body);
    assert_eq!(
        status.data()["queues"]["resources_waiting"],
        json!(1_000),
        "{:?}",
        status.data()["queues"]
    );
    let args = strings(&[
        "--scenario",
        "thousand",
        "--resources",
        "1000",
        "--resource",
        &deepest,
    ]);
    let run = run_browser(&stack, &operator, &args, |event, _| async move {
        panic!("unexpected @@{event} in the thousand-resources scenario")
    })
    .await;
    assert!(
        run.success,
        "the browser scenario failed:\n{}",
        run.transcript
    );
    println!(
        "dashboard: screenshot {}",
        artifacts_dir().join("dashboard-1000.png").display()
    );
}

/// Enqueues `claim` once per offer, all at once, and returns the replies in order.
async fn enqueue_all(stack: &Arc<Stack>, offers: impl IntoIterator<Item = String>) -> Vec<Reply> {
    let tasks: Vec<_> = offers
        .into_iter()
        .map(|offer_id| {
            let stack = stack.clone();
            tokio::spawn(async move { enqueue_one(&stack, &offer_id).await })
        })
        .collect();
    let mut replies = Vec::with_capacity(tasks.len());
    for task in tasks {
        replies.push(task.await.expect("enqueue task"));
    }
    replies
}
