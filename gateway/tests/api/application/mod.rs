//! Application-wide shared budgets: `GET /v1/application/resources`,
//! `POST /v1/application/resources:configure`, and their enforcement at intake and execution.

mod basics;

use hyper::Method;
use serde_json::Value;
use sluice_durable::tenancy::{self, BootstrapOutput, BootstrapRequest};

use crate::support::*;

/// Another namespace of the stack's application, with a credential holding every namespace
/// scope and, when `resource_access`, the two application scopes.
pub async fn join_namespace(stack: &Stack, name: &str, resource_access: bool) -> BootstrapOutput {
    let joined = tenancy::bootstrap(
        &stack.pg,
        &BootstrapRequest {
            application: "test".into(),
            namespace: name.into(),
            application_id: Some(stack.creds.application_id),
            scopes: vec![],
            resource_access,
        },
    )
    .await
    .expect("join the application");
    tenancy::apply_declaration(
        &stack.pg,
        joined.namespace_id,
        CLAIM_DECLARATION,
        "test",
        None,
    )
    .await
    .expect("declare claim in the new namespace");
    joined
}

/// `GET /v1/application/resources` with `bearer`.
pub async fn resources(stack: &Stack, bearer: &str) -> Reply {
    stack.get("/v1/application/resources", Some(bearer)).await
}

/// `POST /v1/application/resources:configure` with `bearer`, `key` and `body`.
pub async fn configure(stack: &Stack, bearer: &str, key: Option<&str>, body: &Value) -> Reply {
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
