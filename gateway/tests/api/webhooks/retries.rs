//! How a webhook answer is classified: `429`/`5xx` retry (no earlier than `Retry-After`) until
//! the deadline, an unanswered request ends `needs_review`, another `4xx` fails at once, and a
//! `200` decides (or breaks the contract).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use sluice_executor::ExecutorConfig;

use super::*;
use crate::execution::{
    RunningExecutor, counter, fast_executor, held_permits, record, start_executor,
};
use crate::support::webhook_backend::{Answer, Backend, handler};

/// The first attempt is answered `status` with `Retry-After: 1`, the second `200`.
async fn retries_no_earlier_than_retry_after(status: u16) {
    let seen = Arc::new(AtomicUsize::new(0));
    let backend = Backend::start(handler(move |_| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Answer::status(status).with_header("Retry-After", "1")
            } else {
                Answer::succeeded(json!({"pages": 4}))
            }
        }
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let executor = start_executor(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert!(arrives(&backend, &id, Duration::from_secs(10)).await);
    // Between the attempts it waits, held, in `retry_wait`.
    assert_reaches(&stack, &id, "retry_wait", Duration::from_millis(900)).await;
    assert_reaches(&stack, &id, "succeeded", Duration::from_secs(10)).await;
    let landed = row(&stack, &id).await;
    assert_eq!(landed["attempts"], 2, "{landed}");
    assert_eq!(landed["result"], json!({"pages": 4}));
    assert_eq!(landed["error_code"], Value::Null, "{landed}");
    let arrivals = arrivals_of(&backend, &id);
    assert_eq!(arrivals.len(), 2, "{arrivals:?}");
    let gap = arrivals[1].at - arrivals[0].at;
    assert!(
        gap >= Duration::from_secs(1),
        "the retry came {gap:?} after a {status} with Retry-After: 1"
    );
    for (i, arrival) in arrivals.iter().enumerate() {
        assert_eq!(arrival.idempotency_key, id, "one idempotency key");
        assert_eq!(arrival.body["attempt"], i + 1);
        assert!(arrival.signature_valid);
    }
    assert_eq!(arrivals[0].body["input"], arrivals[1].body["input"]);
    assert!(unfinished_becomes(&stack, 0).await);
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_no_earlier_than_its_retry_after() {
    retries_no_earlier_than_retry_after(429).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_is_retried_no_earlier_than_its_retry_after() {
    retries_no_earlier_than_retry_after(503).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_end_expired_at_the_deadline() {
    let sent_at: Arc<Mutex<Vec<DateTime<Utc>>>> = Arc::default();
    let recorded = sent_at.clone();
    let backend = Backend::start(handler(move |_| {
        recorded.lock().expect("lock").push(Utc::now());
        async { Answer::status(503) }
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 3, "").await;
    let config = ExecutorConfig {
        retry_base_ms: 100,
        retry_max_ms: 400,
        ..fast_executor()
    };
    let executor = RunningExecutor::start(&stack, config);
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert_reaches(&stack, &id, "expired", Duration::from_secs(10)).await;
    let before = arrivals_of(&backend, &id).len();
    let ended = row(&stack, &id).await;
    assert_eq!(ended["error_code"], "DEADLINE_EXCEEDED", "{ended}");
    let shown = record(&stack, &id).await;
    assert_eq!(shown.data()["error"]["code"], "DEADLINE_EXCEEDED");
    let deadline: DateTime<Utc> = shown.data()["deadline_at"]
        .as_str()
        .expect("deadline_at")
        .parse()
        .expect("an RFC 3339 time");
    // Nothing is sent once it expired. The executor stops only after every request it sent
    // was answered, so from then on the backend's arrivals are all there will be.
    executor.stop().await;
    let arrivals = arrivals_of(&backend, &id);
    assert_eq!(
        arrivals.len(),
        before,
        "an attempt after the command expired"
    );
    assert!(arrivals.len() >= 2, "retried: {} arrivals", arrivals.len());
    // Every attempt the row counts reached the backend, except that the last one may have been
    // cut off at the deadline (its wait, start tokens and bookkeeping took it there: not sent,
    // or sent with what was left of the time as its timeout). Only when the row's reason is not
    // the backend's own answer may the count exceed the arrivals, by that one attempt.
    let message = ended["error_message"].as_str().unwrap_or_default();
    let attempts = ended["attempts"].as_u64().unwrap_or_default();
    let arrived = arrivals.len() as u64;
    if message.contains("(backend answered") {
        assert_eq!(attempts, arrived, "{ended}");
    } else {
        assert!(
            attempts == arrived || attempts == arrived + 1,
            "{arrived} arrivals: {ended}"
        );
    }
    for (i, arrival) in arrivals.iter().enumerate() {
        assert_eq!(arrival.idempotency_key, id);
        assert_eq!(arrival.body["attempt"], i + 1);
    }
    let times = sent_at.lock().expect("lock").clone();
    assert!(
        times.iter().all(|at| *at < deadline),
        "an attempt reached the backend after the deadline {deadline}: {times:?}"
    );
    assert!(unfinished_becomes(&stack, 0).await);
    assert_eq!(held_permits(&stack, "ocr").await, 0);
}

/// A backend's `Retry-After` of 10^13 seconds (past any deadline, and past what date arithmetic
/// holds) ends the command at once as its deadline would, `expired`, with its permits given
/// back: not a panic that leaves it `executing` with them until its lease lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_past_any_date_ends_the_command_now() {
    let backend = Backend::start(handler(|_| async {
        Answer::status(429).with_header("Retry-After", "10000000000000")
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 600, "").await;
    let executor = start_executor(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert_reaches(&stack, &id, "expired", Duration::from_secs(10)).await;
    let ended = row(&stack, &id).await;
    assert_eq!(ended["error_code"], "DEADLINE_EXCEEDED", "{ended}");
    assert_eq!(ended["attempts"], 1, "{ended}");
    assert_eq!(arrivals_of(&backend, &id).len(), 1);
    assert!(unfinished_becomes(&stack, 0).await);
    assert_eq!(held_permits(&stack, "ocr").await, 0);
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_ends_needs_review() {
    let backend = Backend::start(handler(|_| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Answer::succeeded(json!({}))
    }))
    .await;
    let stack = ocr_stack(&backend, 500, 2, "").await;
    let executor = start_executor(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert_reaches(&stack, &id, "needs_review", Duration::from_secs(10)).await;
    let reviewed = row(&stack, &id).await;
    assert_eq!(reviewed["error_code"], "OUTCOME_UNKNOWN", "{reviewed}");
    let arrivals = arrivals_of(&backend, &id);
    assert!(!arrivals.is_empty());
    assert!(arrivals.iter().all(|a| a.idempotency_key == id));
    assert!(
        eventually(Duration::from_secs(5), || async {
            polled_status(&stack, &id).await == "needs_review"
        })
        .await
    );
    // The outcome is unknown: it keeps its share, but not its permits.
    assert_eq!(counter(&stack, "unfinished").await, 1);
    assert_eq!(held_permits(&stack, "ocr").await, 0);
    executor.cancel();
}

/// A backend that always answers what `answer` says for the command's `doc`, a stack, an
/// executor and one command per doc in `docs`, each run until it leaves `executing`.
async fn answered(
    answer: fn(&str) -> Answer,
    docs: &[&str],
) -> (Backend, Stack, RunningExecutor, Vec<String>) {
    let backend = Backend::start(handler(move |arrival| {
        let doc = arrival.body["input"]["doc"]
            .as_str()
            .unwrap_or("")
            .to_string();
        async move { answer(&doc) }
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let executor = RunningExecutor::start(&stack, fast_executor());
    let mut ids = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        ids.push(enqueue_ocr(&stack, &format!("user-{i}"), "gitee", "a", doc).await);
    }
    (backend, stack, executor, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_4xx_fails_after_one_attempt() {
    let (backend, stack, executor, ids) = answered(|_| Answer::status(422), &["doc"]).await;
    let id = &ids[0];
    assert_reaches(&stack, id, "failed", Duration::from_secs(10)).await;
    let failed = row(&stack, id).await;
    assert_eq!(failed["error_code"], "WEBHOOK_REFUSED", "{failed}");
    assert_eq!(failed["attempts"], 1, "{failed}");
    assert_eq!(
        record(&stack, id).await.data()["error"]["code"],
        "WEBHOOK_REFUSED"
    );
    // Never tried again: once the executor has stopped (it handles every answer it waits for
    // first), the backend has seen every request it will.
    executor.stop().await;
    assert_eq!(arrivals_of(&backend, id).len(), 1);
    assert!(unfinished_becomes(&stack, 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_without_an_outcome_fails_as_a_bad_answer() {
    let (backend, stack, executor, ids) = answered(
        |doc| match doc {
            "not-json" => Answer {
                status: 200,
                headers: vec![],
                body: "OK".into(),
            },
            "no-outcome" => Answer::json(200, json!({"status": "done", "result": {}})),
            _ => Answer::json(200, json!({"outcome": "done"})),
        },
        &["not-json", "no-outcome", "unknown-outcome"],
    )
    .await;
    for id in &ids {
        assert_reaches(&stack, id, "failed", Duration::from_secs(10)).await;
        let failed = row(&stack, id).await;
        assert_eq!(failed["error_code"], "WEBHOOK_BAD_ANSWER", "{failed}");
        assert_eq!(failed["result"], Value::Null, "{failed}");
        assert_eq!(arrivals_of(&backend, id).len(), 1);
    }
    assert!(unfinished_becomes(&stack, 0).await);
    executor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_rejected_lands_its_error_code() {
    let (backend, stack, executor, ids) = answered(
        |_| {
            Answer::json(
                200,
                json!({"outcome": "rejected", "error_code": "NO_CREDIT", "result": {"balance": 0}}),
            )
        },
        &["doc"],
    )
    .await;
    let id = &ids[0];
    assert_reaches(&stack, id, "rejected", Duration::from_secs(10)).await;
    let rejected = row(&stack, id).await;
    assert_eq!(rejected["error_code"], "NO_CREDIT", "{rejected}");
    assert_eq!(rejected["attempts"], 1);
    let shown = record(&stack, id).await;
    assert_eq!(shown.data()["status"], "rejected");
    assert_eq!(shown.data()["error"]["code"], "NO_CREDIT");
    assert_eq!(polled_status(&stack, id).await, "rejected");
    assert_eq!(arrivals_of(&backend, id).len(), 1);
    assert!(unfinished_becomes(&stack, 0).await);
    executor.stop().await;
}
