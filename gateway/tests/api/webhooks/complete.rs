//! `POST /v1/commands/{id}:complete`: the first authoritative result wins, its repeat is a no-op,
//! another is `409`; who may call it; what can be completed at all; strict bodies; and a
//! `:complete` that reaches the gateway before the backend's `202` reaches the executor.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::json;
use sluice_executor::ExecutorConfig;
use sluice_store::tenancy::NAMESPACE_SCOPES;

use super::*;
use crate::execution::{RunningExecutor, fast_executor, held_permits, record, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};

/// A `202` backend, a stack with one command per account in flight, an executor, and one
/// command `running`.
async fn one_running() -> (Backend, Stack, tokio_util::sync::CancellationToken, String) {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let stack = ocr_stack(&backend, 2_000, 60, ACCOUNT_LIMIT).await;
    let executor = start_executor(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert_reaches(&stack, &id, "running", Duration::from_secs(10)).await;
    (backend, stack, executor, id)
}

/// `:complete` with `bearer` and a raw body.
async fn complete_raw(stack: &Stack, id: &str, bearer: &str, body: &str) -> Reply {
    stack
        .post(&format!("/v1/commands/{id}:complete"), Some(bearer), body)
        .await
}

fn assert_conflict(reply: &Reply, status: &str) {
    assert_eq!(reply.status, StatusCode::CONFLICT, "{:?}", reply.body);
    assert_eq!(reply.code(), "STATE_CONFLICT", "{:?}", reply.body);
    assert_eq!(
        reply.body["error"]["details"]["status"], status,
        "{:?}",
        reply.body
    );
}

fn assert_denied(reply: &Reply) {
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{:?}", reply.body);
    assert_eq!(reply.code(), "PERMISSION_DENIED", "{:?}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_result_is_a_no_op_and_another_result_conflicts() {
    let (backend, stack, executor, id) = one_running().await;
    let result = json!({"outcome": "succeeded", "result": {"pages": 3}});
    let first = complete(&stack, &id, result.clone()).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(first.data()["status"], "succeeded");
    assert_eq!(first.data()["result"], json!({"pages": 3}));
    let landed_at = first.data()["updated_at"].clone();
    let finished_at = first.data()["finished_at"].clone();
    assert!(landed_at.is_string() && finished_at.is_string());

    let again = complete(&stack, &id, result.clone()).await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert_eq!(again.data()["status"], "succeeded");
    assert_eq!(
        again.data()["updated_at"],
        landed_at,
        "a repeat changed the row"
    );
    assert_eq!(again.data()["finished_at"], finished_at);

    for other in [
        json!({"outcome": "succeeded", "result": {"pages": 4}}),
        json!({"outcome": "succeeded"}),
        json!({"outcome": "failed"}),
        json!({"outcome": "rejected", "error_code": "NO_CREDIT"}),
    ] {
        let reply = complete(&stack, &id, other.clone()).await;
        assert_conflict(&reply, "succeeded");
    }
    let shown = record(&stack, &id).await;
    assert_eq!(shown.data()["status"], "succeeded");
    assert_eq!(shown.data()["result"], json!({"pages": 3}));
    assert_eq!(shown.data()["updated_at"], landed_at);

    // The same with a rejection and its error code.
    let other = enqueue_ocr(&stack, "user-2", "gitee", "b", "doc").await;
    assert_reaches(&stack, &other, "running", Duration::from_secs(10)).await;
    let rejection = json!({"outcome": "rejected", "error_code": "NO_CREDIT"});
    let first = complete(&stack, &other, rejection.clone()).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(first.data()["status"], "rejected");
    assert_eq!(first.data()["error"]["code"], "NO_CREDIT");
    let again = complete(&stack, &other, rejection).await;
    assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
    assert_eq!(again.data()["updated_at"], first.data()["updated_at"]);
    let reply = complete(&stack, &other, json!({"outcome": "rejected"})).await;
    assert_conflict(&reply, "rejected");
    assert_eq!(row(&stack, &other).await["error_code"], "NO_CREDIT");
    assert!(unfinished_becomes(&stack, 0).await);
    assert_eq!(backend.arrivals().len(), 2);
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_command_or_another_namespaces_is_not_found() {
    let (_backend, stack, executor, id) = one_running().await;
    let unknown = uuid::Uuid::now_v7().to_string();
    let reply = complete(&stack, &unknown, json!({"outcome": "succeeded"})).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{:?}", reply.body);
    assert_eq!(reply.code(), "NOT_FOUND");
    // A credential of another namespace (with every scope) does not see this one's commands.
    let other = bootstrap_namespace(&stack, "other", vec![], false).await;
    let reply = complete_raw(
        &stack,
        &id,
        &other.credential,
        r#"{"outcome": "succeeded"}"#,
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{:?}", reply.body);
    assert_eq!(row(&stack, &id).await["status"], "running");
    executor.cancel();
}

/// A credential of the stack's namespace with exactly `scopes`.
async fn credential_with(stack: &Stack, scopes: &[&str]) -> String {
    credential_with_scopes(stack, stack.creds.namespace_id, scopes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_credential_with_commands_complete_may_complete() {
    let (_backend, stack, executor, id) = one_running().await;
    let body = r#"{"outcome": "succeeded"}"#;
    // The owner's own subject token.
    let token = stack.subject_token("user-1");
    assert_denied(&complete_raw(&stack, &id, &token, body).await);
    // Every other scope, in this namespace.
    let others: Vec<&str> = NAMESPACE_SCOPES
        .iter()
        .copied()
        .filter(|s| *s != "commands:complete")
        .collect();
    let lacking = credential_with(&stack, &others).await;
    assert_denied(&complete_raw(&stack, &id, &lacking, body).await);
    // And one made by bootstrap (another namespace of the application) without the scope.
    let scopes = others.iter().map(|s| s.to_string()).collect();
    let bootstrapped = bootstrap_namespace(&stack, "reader", scopes, false).await;
    assert!(!bootstrapped.scopes.iter().any(|s| s == "commands:complete"));
    assert_denied(&complete_raw(&stack, &id, &bootstrapped.credential, body).await);
    assert_eq!(row(&stack, &id).await["status"], "running");
    // The scope alone is enough.
    let completer = credential_with(&stack, &["commands:complete"]).await;
    let reply = complete_raw(&stack, &id, &completer, body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(row(&stack, &id).await["status"], "succeeded");
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_never_sent_cannot_be_completed() {
    // Waiting behind its account's only permit: never claimed, 0 attempts.
    let (backend, stack, executor, running) = one_running().await;
    let waiting = enqueue_ocr(&stack, "user-2", "gitee", "a", "doc").await;
    let reply = complete(&stack, &waiting, json!({"outcome": "succeeded"})).await;
    assert_conflict(&reply, "accepted");
    let unchanged = row(&stack, &waiting).await;
    assert_eq!(unchanged["status"], "accepted", "{unchanged}");
    assert_eq!(unchanged["attempts"], 0);
    // It still runs normally once the permit comes free.
    let done = complete(&stack, &running, json!({"outcome": "succeeded"})).await;
    assert_eq!(done.status, StatusCode::OK, "{:?}", done.body);
    assert!(arrives(&backend, &waiting, Duration::from_secs(5)).await);
    executor.cancel();

    // A backend that is down: every attempt fails to connect, nothing was ever sent.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/ocr", closed.local_addr().expect("addr"));
    drop(closed);
    let stack = Stack::with_declaration(&ocr_declaration(&url, 2_000, 60, "")).await;
    // Long retry delays, so the command sits in retry_wait while it is completed.
    let config = ExecutorConfig {
        retry_base_ms: 10_000,
        retry_max_ms: 10_000,
        ..fast_executor()
    };
    let executor = start_executor(&stack, config);
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert_reaches(&stack, &id, "retry_wait", Duration::from_secs(10)).await;
    let reply = complete(&stack, &id, json!({"outcome": "succeeded"})).await;
    assert_conflict(&reply, "retry_wait");
    assert_eq!(row(&stack, &id).await["status"], "retry_wait");
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_bodies_are_strict() {
    let (_backend, stack, executor, id) = one_running().await;
    let credential = stack.credential();
    let cases: &[(&str, &str)] = &[
        (r#"{"outcome": "succeeded", "extra": 1}"#, "extra"),
        (r#"{"outcome": null}"#, "outcome"),
        (r#"{"outcome": "succeeded", "result": null}"#, "result"),
        (r#"{"outcome": "failed", "error_code": null}"#, "error_code"),
        (r#"{"Outcome": "succeeded"}"#, "Outcome"),
        (r#"{"outcome": "succeeded", "Result": {}}"#, "Result"),
        (r#"{"outcome": "done"}"#, "outcome"),
        (r#"{"outcome": "Succeeded"}"#, "outcome"),
        (r#"{"outcome": "expired"}"#, "outcome"),
        (r#"{"outcome": "needs_review"}"#, "outcome"),
        (r#"{"outcome": 1}"#, "outcome"),
        (r#"{}"#, "outcome"),
        (
            r#"{"outcome": "succeeded", "error_code": "NO_CREDIT"}"#,
            "error_code",
        ),
        (r#"{"outcome": "failed", "error_code": ""}"#, "error_code"),
        (r#"{"outcome": "failed", "error_code": 7}"#, "error_code"),
        (r#"{"outcome": "succeeded", "result": [1]}"#, "result"),
        (
            r#"{"outcome": "succeeded", "outcome": "failed"}"#,
            "outcome",
        ),
        (
            r#"{"outcome": "succeeded", "result": {"a": 1, "a": 2}}"#,
            "result.a",
        ),
    ];
    for (body, field) in cases {
        let reply = complete_raw(&stack, &id, &credential, body).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{body}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "INVALID_ARGUMENT", "{body}");
        assert_eq!(reply.field(), *field, "{body}: {:?}", reply.body);
        assert_eq!(row(&stack, &id).await["status"], "running", "{body}");
    }
    let reply = complete_raw(&stack, &id, &credential, "").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
    // Nothing landed: a valid body still decides.
    let reply = complete(
        &stack,
        &id,
        json!({"outcome": "failed", "error_code": "OCR_BROKEN"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let failed = row(&stack, &id).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["error_code"], "OCR_BROKEN");
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_command_cannot_be_completed() {
    let stack = Stack::start().await;
    let reply = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
    let id = reply.data()["command_id"].as_str().expect("id").to_string();
    let attempt = complete(&stack, &id, json!({"outcome": "succeeded"})).await;
    assert_conflict(&attempt, "accepted");
    assert_eq!(row(&stack, &id).await["status"], "accepted");
    // Decided by its quota handler, its result cannot be replaced either.
    let executor = start_executor(&stack, fast_executor());
    assert_reaches(&stack, &id, "succeeded", Duration::from_secs(10)).await;
    let allocated = row(&stack, &id).await["result"].clone();
    assert!(allocated["allocation_id"].is_string(), "{allocated}");
    for body in [
        json!({"outcome": "failed"}),
        json!({"outcome": "succeeded", "result": allocated.clone()}),
    ] {
        assert_conflict(&complete(&stack, &id, body).await, "succeeded");
    }
    assert_eq!(row(&stack, &id).await["result"], allocated);
    executor.cancel();
}

/// What the backend's own `:complete` call got back.
type Seen = Arc<Mutex<Option<(u16, Value)>>>;

/// `POST {base}/v1/commands/{id}:complete` from the backend, as a real backend would.
async fn complete_from_backend(
    base: &str,
    credential: &str,
    id: &str,
    body: Value,
) -> (u16, Value) {
    let reply = send_request(
        &http_client(1),
        base,
        Method::POST,
        &format!("/v1/commands/{id}:complete"),
        Some(credential),
        Some(Bytes::from(body.to_string())),
        &[],
    )
    .await;
    (reply.status.as_u16(), reply.body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_that_overtakes_the_202_lands_once() {
    // The gateway's address and credential, known once the stack exists.
    let gateway: Arc<OnceLock<(String, String)>> = Arc::default();
    let seen: Seen = Arc::default();
    let (target, reported) = (gateway.clone(), seen.clone());
    let backend = Backend::start(handler(move |arrival| {
        let (target, reported) = (target.clone(), reported.clone());
        async move {
            let (base, credential) = target.get().expect("the gateway is known").clone();
            let id = arrival.body["command_id"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let answer = complete_from_backend(
                &base,
                &credential,
                &id,
                json!({"outcome": "succeeded", "result": {"pages": 7}}),
            )
            .await;
            *reported.lock().expect("lock") = Some(answer);
            // Only now does the executor learn that the backend took the command.
            Answer::status(202)
        }
    }))
    .await;
    let stack = ocr_stack(&backend, 5_000, 60, ACCOUNT_LIMIT).await;
    gateway
        .set((stack.base.clone(), stack.credential()))
        .expect("set once");
    let executor = RunningExecutor::start(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;

    assert!(
        eventually(Duration::from_secs(10), || async {
            seen.lock().expect("lock").is_some()
        })
        .await,
        "the backend never completed"
    );
    let (status, body) = seen.lock().expect("lock").clone().expect("seen");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["status"], "succeeded");
    assert_reaches(&stack, &id, "succeeded", Duration::from_secs(5)).await;
    let landed = row(&stack, &id).await;
    let landed_record = record(&stack, &id).await;
    // The executor's 202 arrives after the result: it must change nothing. The executor stops
    // only once it has handled that 202 (it waits for the commands in hand).
    executor.stop().await;
    let after = row(&stack, &id).await;
    assert_eq!(after, landed, "the late 202 changed the row");
    assert_eq!(after["status"], "succeeded");
    assert_eq!(after["result"], json!({"pages": 7}));
    assert_eq!(after["attempts"], 1);
    assert_eq!(
        record(&stack, &id).await.data()["updated_at"],
        landed_record.data()["updated_at"]
    );
    assert_eq!(polled_status(&stack, &id).await, "succeeded");
    assert!(unfinished_becomes(&stack, 0).await);
    assert_eq!(held_permits(&stack, "ocr").await, 0);
    assert!(!holds_limit(&stack, "account:gitee:a", &id).await);
    assert_eq!(backend.arrivals().len(), 1);
    // The account's permit is free: the next command of the account is sent.
    let executor = start_executor(&stack, fast_executor());
    let next = enqueue_ocr(&stack, "user-2", "gitee", "a", "doc").await;
    assert!(arrives(&backend, &next, Duration::from_secs(5)).await);
    executor.cancel();
}
