//! No number of blocked resources keeps another command or namespace from starting.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::execution::{OPEN_INTAKE, fast_executor, pool, quota_command, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};
use crate::support::*;
use crate::webhooks::stack_with;

/// `hog` runs one command at a time (its backend answers `202`, so the running one holds the
/// permit until its deadline); `quick` is a quota command.
fn declaration(url: &str) -> String {
    format!(
        r#"
[[command]]
code = "hog"
parameters = {{ account = {{ type = "string", max_length = 32 }} }}
resource_key = {{ from = "input", field = "account" }}
deadline_seconds = 120
{OPEN_INTAKE}
admission = {{ per_second = 100000, burst = 100000, max_in_flight = 1, max_queue = 1000000 }}
handler = {{ kind = "webhook", url = "{url}", timeout_ms = 5000 }}
"#
    ) + &quota_command(
        "quick",
        "per_second = 100000, burst = 100000, max_in_flight = 100, max_queue = 1000",
        "",
        "stock",
    ) + &pool("stock", 10)
}

/// Enqueues `command` with `credential`; the answer.
async fn enqueue(
    stack: &Stack,
    credential: &str,
    command: &str,
    input: serde_json::Value,
) -> Reply {
    let body = json!({"request_key": key(), "subject": "someone", "input": input});
    stack
        .post(
            &format!("/v1/commands/{command}:enqueue"),
            Some(credential),
            &body.to_string(),
        )
        .await
}

/// 1,000 resources of `hog` wait behind its one running command; a `quick` command of the same
/// namespace and one of another namespace of the application both succeed within 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_blocked_resources_never_delay_another_command() {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let declaration = declaration(&backend.url("/hog"));
    let stack = Arc::new(stack_with(&backend, &declaration).await);
    let other = bootstrap_namespace(&stack, "other", vec![], false).await;
    sluice_store::tenancy::apply_declaration(
        &stack.pg,
        other.namespace_id,
        &declaration,
        "test",
        None,
    )
    .await
    .expect("the other namespace's declaration");
    let executor = start_executor(&stack, fast_executor());

    let credential = stack.credential();
    let first = enqueue(&stack, &credential, "hog", json!({"account": "first"})).await;
    assert_eq!(first.status.as_u16(), 202, "{:?}", first.body);
    assert!(
        eventually(Duration::from_secs(10), || async {
            !backend.arrivals().is_empty()
        })
        .await,
        "the first hog command runs"
    );
    let mut tasks = Vec::new();
    for task in 0..50 {
        let (stack, credential) = (stack.clone(), credential.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                let account = format!("b-{task:02}-{i:02}");
                let reply = enqueue(&stack, &credential, "hog", json!({"account": account})).await;
                assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
            }
        }));
    }
    for task in tasks {
        task.await.expect("an enqueueing task");
    }
    assert_eq!(backend.arrivals().len(), 1, "hog holds its only permit");

    let mine = enqueue(&stack, &credential, "quick", json!({"offer": offer()})).await;
    let theirs = enqueue(
        &stack,
        &other.credential,
        "quick",
        json!({"offer": offer()}),
    )
    .await;
    assert_eq!(mine.status.as_u16(), 202, "{:?}", mine.body);
    assert_eq!(theirs.status.as_u16(), 202, "{:?}", theirs.body);
    let ids: Vec<String> = [&mine, &theirs]
        .iter()
        .map(|r| r.data()["command_id"].as_str().expect("id").to_string())
        .collect();
    let started = tokio::time::Instant::now();
    let both = eventually(Duration::from_secs(2), || async {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM commands WHERE status = 'succeeded' AND id::text = ANY($1)",
        )
        .bind(&ids)
        .fetch_one(&stack.pg)
        .await
        .expect("count");
        done == 2
    })
    .await;
    assert!(
        both,
        "both quick commands succeed within 2 s behind 1,000 blocked resources (waited {:?})",
        started.elapsed()
    );
    assert_eq!(
        backend.arrivals().len(),
        1,
        "hog still holds its only permit"
    );
    executor.cancel();
}
