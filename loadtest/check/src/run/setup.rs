//! What a run sets up before its operations: the declaration (applied as the model predicts)
//! and the application's budgets.

use std::path::Path;

use hyper::Method;
use serde_json::json;

use super::{RunContext, RunError};
use crate::client::Http;
use crate::journal::{ApplyRecord, Journal};
use crate::model;
use crate::plan::{Declaration, Plan};
use crate::stack::Stack;

/// Applies the declaration; the model says whether `apply` must refuse it (templates that
/// render one key with other numbers) and how a user would fix it. Returns what is in force.
pub(super) async fn apply(
    plan: &Plan,
    ctx: &RunContext,
    stack: &Stack,
    creds: &str,
    backend: &str,
    journal: &Journal,
) -> Result<Declaration, RunError> {
    let conflicts = model::conflicts(&plan.declaration);
    let path = ctx.dir.join("declaration.toml");
    // `sluice apply` of `decl`, recorded with the refusals the model expects of it.
    let apply_one = |decl: &Declaration, expected: Vec<String>| {
        let (path, decl) = (&path, decl.clone());
        async move {
            let (applied, output) = sluice_apply(stack, path, creds, &decl, backend)
                .await
                .map_err(|e| RunError::Setup(e.to_string()))?;
            journal.with(|r| {
                r.applies.push(ApplyRecord {
                    refused: !applied,
                    output: output.clone(),
                    expected_fields: expected,
                })
            });
            Ok::<_, RunError>((applied, output))
        }
    };
    let expected = conflicts.iter().map(|c| c.field.clone()).collect();
    let (applied, output) = apply_one(&plan.declaration, expected).await?;
    if applied {
        return Ok(plan.declaration.clone());
    }
    if conflicts.is_empty() {
        return Err(RunError::Setup(format!(
            "apply refused a declaration the model accepts:\n{output}\n{}",
            plan.declaration.to_toml(backend)
        )));
    }
    let fixed = model::without_conflicts(&plan.declaration);
    let (applied, output) = apply_one(&fixed, Vec::new()).await?;
    if !applied {
        return Err(RunError::Setup(format!(
            "the fixed declaration was refused too:\n{output}"
        )));
    }
    Ok(fixed)
}

/// Writes `decl` (its webhooks pointing at `backend`) to `path` and runs `sluice apply` on it
/// with the credentials' file: whether it applied, and what it printed.
pub(super) async fn sluice_apply(
    stack: &Stack,
    path: &Path,
    credentials: &str,
    decl: &Declaration,
    backend: &str,
) -> std::io::Result<(bool, String)> {
    std::fs::write(path, decl.to_toml(backend))?;
    let file = path.to_string_lossy();
    Ok(stack
        .cli_verdict(&["apply", "--credentials", credentials, "-f", &file])
        .await)
}

pub(super) async fn configure_application(
    http: &Http,
    gateway: &str,
    credential: &str,
    max_concurrency: u32,
    rate_per_second: u32,
) -> Result<(), RunError> {
    let url = format!("{gateway}/v1/application/resources");
    let current = http.get(&url, Some(credential)).await;
    let revision = current.data()["revision"]
        .as_str()
        .ok_or_else(|| RunError::Setup(format!("application resources: {:?}", current.body())))?
        .to_string();
    let body = json!({
        "expected_revision": revision,
        "reason": "model checker run",
        "max_unfinished_tasks": 100000,
        "max_concurrency": max_concurrency,
        "rate_per_second": rate_per_second,
    });
    let reply = http
        .send(
            Method::POST,
            &format!("{url}:configure"),
            Some(credential),
            Some(&body),
            &[("idempotency-key", "check-budget")],
        )
        .await;
    match reply.status() {
        Some(200) => Ok(()),
        _ => Err(RunError::Setup(format!("configure: {:?}", reply.body()))),
    }
}
