//! The webhook handler against a real HTTP backend (`crate::support::webhook_backend`): signed requests,
//! `200` / `202` + `:complete`, retries, deadlines, limit keys, cancels; and the backend
//! snippets of `examples/backend/` judging a real request and a real waiting-room pass.

mod backend_snippets;
mod basics;
mod complete;
mod life_cycle;
mod outbound;
mod per_subject;
mod processes;
mod retries;
mod rotation;

use std::time::Duration;

use serde_json::{Value, json};

use crate::execution::OPEN_INTAKE;
use crate::support::webhook_backend::Backend;
use crate::support::*;

/// One webhook command `ocr` keyed by account, with `limits` (a TOML array body, e.g.
/// `{ key = "account:{provider}:{account}", max_in_flight = 1 }`), posting to `url`.
pub fn ocr_declaration(url: &str, timeout_ms: u32, deadline_seconds: u32, limits: &str) -> String {
    format!(
        r#"
[[command]]
code = "ocr"
parameters = {{ provider = {{ type = "string", max_length = 32 }}, account = {{ type = "string", max_length = 32 }}, doc = {{ type = "string", max_length = 64 }} }}
resource_key = {{ from = "input", field = "account" }}
deadline_seconds = {deadline_seconds}
{OPEN_INTAKE}
admission = {{ per_second = 100000, burst = 100000, max_in_flight = 1000, max_queue = 1000000 }}
handler = {{ kind = "webhook", url = "{url}", timeout_ms = {timeout_ms} }}
limits = [ {limits} ]
"#
    )
}

/// A stack whose declaration is `declaration`, with `backend` verifying its signatures.
pub async fn stack_with(backend: &Backend, declaration: &str) -> Stack {
    let stack = Stack::with_declaration(declaration).await;
    backend.set_secret(&stack.creds.webhook_secret);
    stack
}

/// A stack declaring `ocr` towards `backend` (see [`ocr_declaration`]), with `backend` verifying
/// its signatures.
pub async fn ocr_stack(
    backend: &Backend,
    timeout_ms: u32,
    deadline_seconds: u32,
    limits: &str,
) -> Stack {
    let declaration = ocr_declaration(&backend.url("/ocr"), timeout_ms, deadline_seconds, limits);
    stack_with(backend, &declaration).await
}

/// Enqueues `ocr` for `subject` with the credential; returns the command id.
pub async fn enqueue_ocr(
    stack: &Stack,
    subject: &str,
    provider: &str,
    account: &str,
    doc: &str,
) -> String {
    let body = json!({
        "request_key": key(),
        "subject": subject,
        "input": {"provider": provider, "account": account, "doc": doc},
    });
    let reply = stack
        .post(
            "/v1/commands/ocr:enqueue",
            Some(&stack.credential()),
            &body.to_string(),
        )
        .await;
    assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
    reply.data()["command_id"]
        .as_str()
        .expect("command_id")
        .to_string()
}

/// The command's row as PostgreSQL holds it.
pub async fn row(stack: &Stack, id: &str) -> Value {
    let id: uuid::Uuid = id.parse().expect("uuid");
    let (status, attempts, error_code, error_message, result, cancel_requested): (
        String,
        i32,
        Option<String>,
        Option<String>,
        Option<Value>,
        bool,
    ) = sqlx::query_as(
        "SELECT status, attempts, error_code, error_message, result, cancel_requested
           FROM commands WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&stack.pg)
    .await
    .expect("the row");
    json!({"status": status, "attempts": attempts, "error_code": error_code,
           "error_message": error_message, "result": result, "cancel_requested": cancel_requested})
}

/// Waits until the command's row has `status`.
pub async fn until_status(stack: &Stack, id: &str, status: &str, within: Duration) -> bool {
    eventually(within, || async {
        row(stack, id).await["status"] == status
    })
    .await
}

/// Asserts the command's row reaches `status` within `within`; the failure shows the row.
pub async fn assert_reaches(stack: &Stack, id: &str, status: &str, within: Duration) {
    assert!(
        until_status(stack, id, status, within).await,
        "{}",
        row(stack, id).await
    );
}

/// `POST /v1/commands/{id}:complete` with the credential.
pub async fn complete(stack: &Stack, id: &str, body: Value) -> Reply {
    stack
        .post(
            &format!("/v1/commands/{id}:complete"),
            Some(&stack.credential()),
            &body.to_string(),
        )
        .await
}

/// The backend finishes command `id` (it answered it `202`), then reports its result with
/// `:complete`: the backend's count of calls in progress holds the command until then.
pub async fn finish_and_complete(backend: &Backend, stack: &Stack, id: &str, body: Value) -> Reply {
    assert!(backend.finish(id), "{id} is not in progress at the backend");
    complete(stack, id, body).await
}

// ---------------------------------------------------------------------------------------------
// Shared by life_cycle.rs, retries.rs and complete.rs.
// ---------------------------------------------------------------------------------------------

/// One command in flight per provider account.
pub const ACCOUNT_LIMIT: &str = r#"{ key = "account:{provider}:{account}", max_in_flight = 1 }"#;

/// The arrivals of command `id` at `backend`, in order.
/// Every command of `ids` succeeded in PostgreSQL and reached `backend` exactly once.
pub async fn each_succeeded_after_one_call(stack: &Stack, backend: &Backend, ids: &[String]) {
    for id in ids {
        assert_eq!(row(stack, id).await["status"], "succeeded", "{id}");
        assert_eq!(arrivals_of(backend, id).len(), 1, "{id} called once");
    }
}

pub fn arrivals_of(backend: &Backend, id: &str) -> Vec<crate::support::webhook_backend::Arrival> {
    backend
        .arrivals()
        .into_iter()
        .filter(|a| a.body["command_id"] == id)
        .collect()
}

/// Waits until command `id` reached `backend`.
pub async fn arrives(backend: &Backend, id: &str, within: Duration) -> bool {
    eventually(within, || async { !arrivals_of(backend, id).is_empty() }).await
}

/// Watches `backend` for `period` (a bounded wait proving that something does NOT happen):
/// true when command `id` never reached it.
pub async fn never_arrives(backend: &Backend, id: &str, period: Duration) -> bool {
    let until = tokio::time::Instant::now() + period;
    while tokio::time::Instant::now() < until {
        if !arrivals_of(backend, id).is_empty() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    arrivals_of(backend, id).is_empty()
}

/// Whether command `id` holds a permit of limit key `key` (e.g. `account:gitee:a`).
pub async fn holds_limit(stack: &Stack, key: &str, id: &str) -> bool {
    use fred::interfaces::SortedSetsInterface;
    let score: Option<f64> = stack
        .redis
        .pool()
        .next()
        .zscore(stack.keys().limit_leases(stack.creds.namespace_id, key), id)
        .await
        .expect("zscore");
    score.is_some()
}

/// The status a ticket poll shows (Redis, the projection), through the ticket of the record.
pub async fn polled_status(stack: &Stack, id: &str) -> Value {
    let record = crate::execution::record(stack, id).await;
    let ticket = record.data()["ticket"]
        .as_str()
        .expect("a ticket")
        .to_string();
    stack.poll(&ticket).await.data()["status"].clone()
}

/// Waits until the application's `unfinished` counter is `n` (mirrored just after PostgreSQL).
pub async fn unfinished_becomes(stack: &Stack, n: i64) -> bool {
    let settled = eventually(Duration::from_secs(5), || async {
        crate::execution::counter(stack, "unfinished").await == n
    })
    .await;
    if !settled {
        eprintln!(
            "unfinished is {}, not {n}",
            crate::execution::counter(stack, "unfinished").await
        );
    }
    settled
}

/// Commands of the stack's application after exactly one attempt whose result names their own
/// input's `doc`.
pub async fn own_results_after_one_attempt(stack: &Stack) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1 AND attempts = 1
            AND result->>'doc' = input->>'doc'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("results")
}
