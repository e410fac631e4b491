//! Application-wide shared budgets: `GET /v1/application/resources`,
//! `POST /v1/application/resources:configure`, and their enforcement at intake and execution.

mod basics;
mod contract;
mod errors;
mod example;
mod processes;

use hyper::Method;
use serde_json::{Value, json};
use sluice_store::secrets;
use sluice_store::tenancy::{self, BootstrapOutput};

use crate::support::*;

/// Another namespace of the stack's application declaring `claim`, with a credential holding
/// every namespace scope and, when `resource_access`, the two application scopes.
pub async fn join_namespace(stack: &Stack, name: &str, resource_access: bool) -> BootstrapOutput {
    join_declaring(stack, name, resource_access, CLAIM_DECLARATION).await
}

/// [`join_namespace`] declaring `declaration` instead.
pub async fn join_declaring(
    stack: &Stack,
    name: &str,
    resource_access: bool,
    declaration: &str,
) -> BootstrapOutput {
    let joined = bootstrap_namespace(stack, name, vec![], resource_access).await;
    tenancy::apply_declaration(&stack.pg, joined.namespace_id, declaration, "test", None)
        .await
        .expect("declare in the new namespace");
    joined
}

/// `GET /v1/application/resources` with `bearer`.
pub async fn resources(stack: &Stack, bearer: &str) -> Reply {
    stack.get("/v1/application/resources", Some(bearer)).await
}

/// `POST /v1/application/resources:configure` with `bearer`, `key` and `body`.
pub async fn configure(stack: &Stack, bearer: &str, key: Option<&str>, body: &Value) -> Reply {
    configure_raw(stack, bearer, key, &body.to_string()).await
}

/// A configure body with every field.
pub fn configure_body(
    expected_revision: &str,
    reason: &str,
    max_unfinished_tasks: u64,
    max_concurrency: u64,
    rate_per_second: u64,
) -> Value {
    json!({"expected_revision": expected_revision, "reason": reason,
           "max_unfinished_tasks": max_unfinished_tasks, "max_concurrency": max_concurrency,
           "rate_per_second": rate_per_second})
}

/// What a configure call may change in PostgreSQL: the application's revision and limits, its
/// configure audit rows and the receipts of every namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub revision: i64,
    pub limits: (i64, i64, i64),
    pub audit_rows: i64,
    pub receipts: i64,
}

pub async fn stored(stack: &Stack) -> Stored {
    let (revision, unfinished, concurrency, rate): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT resources_revision, max_unfinished, max_concurrency, rate_per_second
           FROM applications WHERE id = $1",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("application row");
    let audit_rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit
          WHERE application_id = $1 AND action = 'application.resources.configure'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("audit rows");
    let receipts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM application_resource_receipts r
           JOIN namespaces n ON n.id = r.namespace_id
          WHERE n.application_id = $1",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("receipts");
    Stored {
        revision,
        limits: (unfinished, concurrency, rate),
        audit_rows,
        receipts,
    }
}

/// The stored state of a fresh application: revision 1, the default limits, no configure yet.
pub const UNTOUCHED: Stored = Stored {
    revision: 1,
    limits: (1_000_000, 10_000, 100_000),
    audit_rows: 0,
    receipts: 0,
};

/// `POST /v1/application/resources:configure` with a raw body (duplicate keys, bad JSON).
pub async fn configure_raw(stack: &Stack, bearer: &str, key: Option<&str>, body: &str) -> Reply {
    let headers: Vec<(&str, &str)> = key.map(|k| ("Idempotency-Key", k)).into_iter().collect();
    stack
        .request_with(
            Method::POST,
            "/v1/application/resources:configure",
            Some(bearer),
            Some(body.to_string().into()),
            &headers,
        )
        .await
}

/// Enqueues `claim` with `bearer` (a credential of any namespace of the application).
pub async fn enqueue_as(
    stack: &Stack,
    bearer: &str,
    subject: &str,
    key: &str,
    offer: &str,
) -> Reply {
    let body = json!({"request_key": key, "subject": subject, "input": {"offer": offer}});
    stack
        .post(
            "/v1/commands/claim:enqueue",
            Some(bearer),
            &body.to_string(),
        )
        .await
}
