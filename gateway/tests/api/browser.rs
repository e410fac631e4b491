//! The browser side in real Chromium (gateway/tests/ui/waiting.mjs): the hosted waiting page,
//! built on the browser module, against a real stack. What the page claims is checked where it
//! is true: the commands' rows in PostgreSQL.
//! - a refused storage is an explicit error and no enqueue; a reload resumes the same command
//!   (one row for its key); the page passes axe-core; leaving the line cancels the row; a page
//!   that ends hands its result to the declared return URL; screenshots of the page and the
//!   demo sale land in `target/test-artifacts/`;
//! - the gateway killed for 5 s: the page backs off, says it reconnects, then finds its place;
//! - 50 pages in one drop all end, and no page polls earlier than it was advised;
//! - the React hook (gateway/tests/ui/react.mjs): a component in React 19's `<StrictMode>`
//!   claims once (one row for its key, one enqueue sent), shows the command waiting with its
//!   position, then its result, resumes it after a reload, and React logs no warning (no
//!   uncached `getSnapshot`, no update loop).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sluice_gateway::pages::demo::Demo;
use sluice_store::secrets::Redacted;
use sluice_store::tenancy;
use tokio_util::sync::CancellationToken;

use crate::execution::{OPEN_INTAKE, fast_executor, pool, start_executor};
use crate::support::browser_driver::{artifacts_dir, run_script};
use crate::support::gateway_process::GatewayProcess;
use crate::support::*;

/// `claim` with its waiting page; `admission` paces the drop; `return_url` is the one place the
/// page may hand its result to.
fn declaration(admission: &str, return_url: &str) -> String {
    format!(
        r#"
[[command]]
code = "claim"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
{OPEN_INTAKE}
admission = {{ {admission} }}
handler = {{ kind = "quota", pool = "stock", mode = "committed" }}
waiting_page = {{ title = "Tickets for the test", return_urls = ["{return_url}"] }}
{}"#,
        pool("stock", 1_000)
    )
}

const STEADY: &str = "per_second = 1000, burst = 1000, max_in_flight = 64, max_queue = 100000";

/// The setup the script reads: the namespace, the command, an offer and a token per subject.
fn setup(stack: &Stack, subjects: &[String], return_url: Option<&str>) -> String {
    let tokens: BTreeMap<&str, String> = subjects
        .iter()
        .map(|s| (s.as_str(), stack.subject_token(s)))
        .collect();
    json!({
        "namespace": stack.creds.namespace_id.to_string(),
        "command": "claim",
        "offer": offer(),
        "tokens": tokens,
        "return_url": return_url,
    })
    .to_string()
}

/// The rows of `subject`: (id, status).
async fn rows_of(stack: &Stack, subject: &str) -> Vec<(String, String)> {
    sqlx::query_as("SELECT id::text, status FROM commands WHERE subject = $1 ORDER BY id")
        .bind(subject)
        .fetch_all(&stack.pg)
        .await
        .expect("rows")
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_waiting_page_resumes_after_a_reload_is_accessible_and_hands_the_result_back() {
    let stack =
        Arc::new(Stack::with_declaration(&declaration(STEADY, "http://unused.test/x")).await);
    // The return URL names the stack's own address, known only now: a second revision.
    let return_url = format!("{}/healthz", stack.base);
    tenancy::apply_declaration(
        &stack.pg,
        stack.creds.namespace_id,
        &declaration(STEADY, &return_url),
        "test",
        None,
    )
    .await
    .expect("apply");
    let page_path = format!("/wait/{}/claim", stack.creds.namespace_id);
    let declared = eventually(Duration::from_secs(5), || async {
        stack
            .get(&page_path, None)
            .await
            .body
            .as_str()
            .is_some_and(|html| html.contains(&return_url))
    })
    .await;
    assert!(declared, "the page carries the new revision's return URL");
    let _ = stack.gateway.demo.set(Demo {
        namespace_id: stack.creds.namespace_id,
        subject_key_id: stack.creds.subject_key.id.clone(),
        subject_key: Redacted(stack.creds.subject_key.secret.clone()),
    });

    let subjects = strings(&["storage-user", "reload-user", "done-user"]);
    let executor: Arc<Mutex<Option<CancellationToken>>> = Arc::default();
    let first: Arc<Mutex<Option<String>>> = Arc::default();
    let args = strings(&["--scenario", "page"]);
    let run = run_script(
        "waiting.mjs",
        &stack.base,
        &setup(&stack, &subjects, Some(&return_url)),
        &args,
        |event, detail| {
            let (stack, executor, first) = (stack.clone(), executor.clone(), first.clone());
            async move {
                match event.as_str() {
                    "storage-refused" => {
                        assert!(
                            rows_of(&stack, "storage-user").await.is_empty(),
                            "no enqueue"
                        )
                    }
                    "waiting" => {
                        let rows = rows_of(&stack, "reload-user").await;
                        assert_eq!(rows.len(), 1, "{rows:?}");
                        assert_eq!(rows[0].1, "accepted");
                        *first.lock().expect("first") = Some(rows[0].0.clone());
                    }
                    "reloaded" => {
                        let rows = rows_of(&stack, "reload-user").await;
                        let before = first.lock().expect("first").clone();
                        assert_eq!(rows.len(), 1, "a reload made a second command: {rows:?}");
                        assert_eq!(Some(rows[0].0.clone()), before, "the same command");
                    }
                    "cancelled" => {
                        let rows = rows_of(&stack, "reload-user").await;
                        assert_eq!(rows[0].1, "cancelled", "{rows:?}");
                    }
                    "waiting-to-finish" => {
                        *executor.lock().expect("executor") =
                            Some(start_executor(&stack, fast_executor()));
                    }
                    "returned" => {
                        let rows = rows_of(&stack, "done-user").await;
                        assert_eq!(rows, vec![(detail.clone(), "succeeded".to_string())]);
                    }
                    other => panic!("unexpected @@{other}"),
                }
            }
        },
    )
    .await;
    if let Some(executor) = executor.lock().expect("executor").take() {
        executor.cancel();
    }
    assert!(run.success, "waiting.mjs page failed:\n{}", run.transcript);
    for shot in [
        "waiting-page.png",
        "waiting-page-phone.png",
        "demo-sale.png",
    ] {
        assert!(artifacts_dir().join(shot).is_file(), "{shot} was not taken");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_backs_off_while_the_gateway_is_gone_and_finds_its_place_again() {
    let stack =
        Arc::new(Stack::with_declaration(&declaration(STEADY, "http://unused.test/x")).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = Arc::new(tokio::sync::Mutex::new(
        GatewayProcess::start(&stack, dir.path(), "outage").await,
    ));
    let base = gateway.lock().await.base.clone();
    let executor: Arc<Mutex<Option<CancellationToken>>> = Arc::default();
    let dir_path = dir.path().to_path_buf();
    let run = run_script(
        "waiting.mjs",
        &base,
        &setup(&stack, &strings(&["outage-user"]), None),
        &strings(&["--scenario", "outage"]),
        |event, detail| {
            let (stack, gateway, executor, dir) = (
                stack.clone(),
                gateway.clone(),
                executor.clone(),
                dir_path.clone(),
            );
            async move {
                match event.as_str() {
                    "waiting" => {
                        let mut gateway = gateway.lock().await;
                        gateway.kill().await;
                        // The outage itself: five seconds without a gateway.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                        gateway.restart(&stack, &dir, "outage").await;
                    }
                    "recovered" => {
                        println!("failed polls during the outage: {detail}");
                        assert_eq!(rows_of(&stack, "outage-user").await.len(), 1);
                        *executor.lock().expect("executor") =
                            Some(start_executor(&stack, fast_executor()));
                    }
                    other => panic!("unexpected @@{other}"),
                }
            }
        },
    )
    .await;
    if let Some(executor) = executor.lock().expect("executor").take() {
        executor.cancel();
    }
    assert!(
        run.success,
        "waiting.mjs outage failed:\n{}",
        run.transcript
    );
    let rows = rows_of(&stack, "outage-user").await;
    assert_eq!(rows.len(), 1, "one command through the outage: {rows:?}");
    assert_eq!(rows[0].1, "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
// It answers `Err` rather than panicking: the reason is then printed last, without a backtrace,
// where the tail of a CI log shows it (a 50-page run's transcript is long).
async fn fifty_pages_in_one_drop_all_end_and_poll_as_advised() -> Result<(), String> {
    // Ten starts a second: the drop lasts a few seconds, so every page polls while it waits.
    let paced = "per_second = 10, burst = 1, max_in_flight = 4, max_queue = 100000";
    let stack =
        Arc::new(Stack::with_declaration(&declaration(paced, "http://unused.test/x")).await);
    let subjects: Vec<String> = (0..50).map(|i| format!("drop-{i:02}")).collect();
    let executor: Arc<Mutex<Option<CancellationToken>>> = Arc::default();
    let figures: Arc<Mutex<Option<Value>>> = Arc::default();
    let run = run_script(
        "waiting.mjs",
        &stack.base,
        &setup(&stack, &subjects, None),
        &strings(&["--scenario", "drop"]),
        |event, detail| {
            let (stack, executor, figures) = (stack.clone(), executor.clone(), figures.clone());
            async move {
                match event.as_str() {
                    "all-waiting" => {
                        let waiting: i64 = sqlx::query_scalar(
                            "SELECT count(*) FROM commands WHERE status = 'accepted'",
                        )
                        .fetch_one(&stack.pg)
                        .await
                        .expect("count");
                        assert_eq!(waiting, 50, "one command per page");
                        *executor.lock().expect("executor") =
                            Some(start_executor(&stack, fast_executor()));
                    }
                    "figures" => {
                        *figures.lock().expect("figures") =
                            Some(serde_json::from_str(&detail).expect("figures JSON"));
                    }
                    other => panic!("unexpected @@{other}"),
                }
            }
        },
    )
    .await;
    if let Some(executor) = executor.lock().expect("executor").take() {
        executor.cancel();
    }
    if !run.success {
        return Err(format!("waiting.mjs drop failed: {}", run.failure()));
    }
    let figures = figures
        .lock()
        .expect("figures")
        .clone()
        .ok_or("the script sent no figures")?;
    println!("50-page drop: {figures}");
    check(figures["pages"] == 50, || format!("50 pages: {figures}"))?;
    check(figures["early"] == 0, || {
        format!("no early poll: {figures}")
    })?;
    // A check that compared nothing would pass too: the pages did wait and poll.
    check(figures["intervals"].as_u64().unwrap_or(0) >= 50, || {
        format!("each page polled at least twice while it waited: {figures}")
    })?;
    // One intent per page: retries (after a 503 under load) resend the page's one request key.
    check(figures["intents"] == 50, || {
        format!("one request key per page: {figures}")
    })?;
    let (polled, advised) = (
        figures["polls_per_page_per_minute"]
            .as_f64()
            .unwrap_or(f64::MAX),
        figures["advised_polls_per_minute"].as_f64().unwrap_or(0.0),
    );
    check(polled <= advised, || {
        format!("a page polled {polled} times a minute where the advice allows {advised}")
    })?;
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM commands GROUP BY status ORDER BY status")
            .fetch_all(&stack.pg)
            .await
            .expect("statuses");
    let ended: i64 = statuses
        .iter()
        .filter(|(status, _)| status == "succeeded" || status == "rejected")
        .map(|(_, n)| n)
        .sum();
    check(ended == 50, || {
        format!("every page's command ended, counted in PostgreSQL: {statuses:?}")
    })
}

/// `Err(what())` unless `holds`.
fn check(holds: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if holds { Ok(()) } else { Err(what()) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_react_component_in_strict_mode_claims_once_and_renders_the_command_to_its_result() {
    // The application's page is on another origin (served by the script): the namespace lets
    // it call the API.
    let app_origin = format!("http://127.0.0.1:{}", free_port());
    let declared = format!(
        "[namespace]\nallowed_origins = [\"{app_origin}\"]\n{}",
        declaration(STEADY, "http://unused.test/x")
    );
    let stack = Arc::new(Stack::with_declaration(&declared).await);
    let subject = "react-user";
    let setup = json!({
        "app_origin": app_origin,
        "token": stack.subject_token(subject),
        "offer": offer(),
        "key": "offer-react",
    })
    .to_string();
    let executor: Arc<Mutex<Option<CancellationToken>>> = Arc::default();
    let started = std::time::Instant::now();
    let run = run_script("react.mjs", &stack.base, &setup, &[], |event, detail| {
        let (stack, executor) = (stack.clone(), executor.clone());
        async move {
            let detail: Value = serde_json::from_str(&detail).expect("detail JSON");
            let rows = rows_of(&stack, subject).await;
            let id = detail["command_id"]
                .as_str()
                .expect("command_id")
                .to_string();
            match event.as_str() {
                "waiting" => {
                    assert_eq!(rows, vec![(id, "accepted".to_string())], "one command");
                    *executor.lock().expect("executor") =
                        Some(start_executor(&stack, fast_executor()));
                }
                "succeeded" => {
                    assert_eq!(rows, vec![(id, "succeeded".to_string())], "one command");
                    assert!(detail["result"].is_object(), "a result: {detail}");
                }
                "reloaded" => {
                    assert_eq!(rows, vec![(id, "succeeded".to_string())], "still one");
                }
                other => panic!("unexpected @@{other}"),
            }
        }
    })
    .await;
    if let Some(executor) = executor.lock().expect("executor").take() {
        executor.cancel();
    }
    println!("react.mjs ran {:?}", started.elapsed());
    assert!(run.success, "react.mjs failed: {}", run.failure());
}
