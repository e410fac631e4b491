//! The webhook handler against a real HTTP backend (`crate::webhook_backend`): signed requests,
//! `200` / `202` + `:complete`, retries, deadlines, limit keys, cancels.

mod basics;

use std::time::Duration;

use serde_json::{Value, json};

use crate::execution::OPEN_INTAKE;
use crate::support::*;
use crate::webhook_backend::Backend;

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
    let (status, attempts, error_code, result, cancel_requested): (
        String,
        i32,
        Option<String>,
        Option<Value>,
        bool,
    ) = sqlx::query_as(
        "SELECT status, attempts, error_code, result, cancel_requested FROM commands WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&stack.pg)
    .await
    .expect("the row");
    json!({"status": status, "attempts": attempts, "error_code": error_code, "result": result,
           "cancel_requested": cancel_requested})
}

/// Waits until the command's row has `status`.
pub async fn until_status(stack: &Stack, id: &str, status: &str, within: Duration) -> bool {
    eventually(within, || async {
        row(stack, id).await["status"] == status
    })
    .await
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
