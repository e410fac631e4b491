//! The runnable example `examples/application_resources.rs`, run as its `main` would run it
//! (credentials files, variables), against a whole stack with no executor, so the commands it
//! enqueues stay waiting until it cancels them.

use std::collections::HashMap;
use std::time::Duration;

use sluice_store::tenancy::{self, BootstrapRequest};

use super::*;

// `main` and whatever the tests do not call are the example binary's.
#[allow(dead_code)]
#[path = "../../../../examples/application_resources.rs"]
mod application_resources;

/// Two namespaces `first` and `second` of the stack's application, credentials with
/// `--resource-access` written to files as `sluice bootstrap` writes them, and the variables the
/// example reads.
async fn setup(stack: &Stack, dir: &tempfile::TempDir) -> HashMap<&'static str, String> {
    let mut vars = HashMap::from([("SLUICE_URL", stack.base.clone())]);
    for (name, var) in [
        ("first", "SLUICE_CREDENTIALS_FILE"),
        ("second", "SLUICE_SECOND_CREDENTIALS_FILE"),
    ] {
        let creds = join_namespace(stack, name, true).await;
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&creds).expect("json")).expect("write");
        vars.insert(var, path.to_str().expect("utf-8 path").to_string());
    }
    vars
}

fn config(vars: &HashMap<&'static str, String>) -> application_resources::ExampleConfig {
    application_resources::ExampleConfig::from_lookup(|name| vars.get(name).cloned())
        .expect("config")
}

/// Commands of the application not in a terminal status, in PostgreSQL.
async fn unfinished_rows(stack: &Stack) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1
            AND status NOT IN ('succeeded', 'rejected', 'failed', 'expired', 'cancelled')",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("count")
}

#[tokio::test]
async fn the_example_shows_cross_namespace_backpressure_and_restores_the_limits() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vars = setup(&stack, &dir).await;
    let config = config(&vars);
    let first_credential = config.first.credential.clone();
    let before = resources(&stack, &first_credential).await;
    assert_eq!(before.status.as_u16(), 200, "{:?}", before.body);

    let mut out = Vec::new();
    let report = application_resources::run(config, &mut out)
        .await
        .expect("the example runs");
    let printed = String::from_utf8(out).expect("utf-8");
    println!("{printed}");

    let lines: Vec<&str> = printed.lines().collect();
    let expected_prefixes = [
        format!(
            "application={} revision=1 max_unfinished_tasks=1000000 max_concurrency=10000 rate_per_second=100000 unfinished=0",
            stack.creds.application_id
        ),
        "configured revision=2 max_unfinished_tasks=1".into(),
        "first_accepted=true http=202 command_id=".into(),
        "cross_namespace_backpressure=APPLICATION_FULL http=429".into(),
        "first_cancelled status=cancelled".into(),
        "same_identity_retry_accepted=true".into(),
        "second_cancelled status=cancelled".into(),
        "unfinished=0 active=0 pending_starts=0".into(),
        "limits_restored=true revision=3".into(),
    ];
    assert_eq!(lines.len(), expected_prefixes.len(), "{printed}");
    for (line, prefix) in lines.iter().zip(&expected_prefixes) {
        assert!(line.starts_with(prefix.as_str()), "{line:?} ≠ {prefix:?}");
    }

    assert_eq!(report.original.revision, 1);
    assert_eq!(report.configured_revision, 2);
    assert_eq!(report.refusal_retry_after.as_deref(), Some("1"));
    assert_eq!(report.first_status, "cancelled");
    assert_eq!(report.second_status, "cancelled");
    assert_ne!(report.first_command_id, report.second_command_id);
    assert_eq!(
        report.usage_after,
        application_resources::Usage {
            unfinished_tasks: 0,
            active_attempts: 0,
            pending_starts: 0
        }
    );
    assert_eq!(
        report.restore,
        application_resources::Restore::Restored { revision: 3 }
    );

    // The original three limits are back, two revisions on; nothing is left unfinished.
    let after = resources(&stack, &first_credential).await;
    for limit in ["max_unfinished_tasks", "max_concurrency", "rate_per_second"] {
        assert_eq!(after.data()[limit], before.data()[limit], "{limit}");
    }
    assert_eq!(after.data()["revision"], "3");
    assert_eq!(after.data()["unfinished_tasks"], "0");
    assert_eq!(unfinished_rows(&stack).await, 0);
    let statuses: Vec<String> = sqlx::query_scalar(
        "SELECT status FROM commands WHERE application_id = $1 ORDER BY accepted_at",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("statuses");
    assert_eq!(
        statuses,
        ["cancelled", "cancelled"],
        "two commands, both cancelled"
    );
}

/// Another operator configures the application while the example runs (after its step 2; the
/// example then waits `Retry-After`, a second, before step 6): the restore conflicts, is
/// reported, and the other operator's limits stay.
#[tokio::test]
async fn a_change_by_someone_else_during_the_run_is_reported_not_overwritten() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let vars = setup(&stack, &dir).await;
    let operator = join_namespace(&stack, "ops", true).await;
    let intruder = {
        let base = stack.base.clone();
        let credential = operator.credential.clone();
        tokio::spawn(async move { change_at_revision_2(&base, &credential).await })
    };

    let mut out = Vec::new();
    let report = application_resources::run(config(&vars), &mut out)
        .await
        .expect("the scenario itself runs");
    let printed = String::from_utf8(out).expect("utf-8");
    intruder
        .await
        .expect("the other operator changed the limits");

    assert!(
        printed.contains("same_identity_retry_accepted=true\n"),
        "{printed}"
    );
    assert!(
        printed.ends_with("limits_restored=false reason=STATE_CONFLICT current_revision=3\n"),
        "{printed}"
    );
    match &report.restore {
        application_resources::Restore::Conflict { message, current } => {
            assert!(message.contains("STATE_CONFLICT"), "{message}");
            assert_eq!(current.as_ref().map(|c| c.revision), Some(3));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let after = resources(&stack, &operator.credential).await;
    assert_eq!(after.data()["revision"], "3", "{:?}", after.body);
    assert_eq!(after.data()["max_unfinished_tasks"], 1);
    assert_eq!(
        after.data()["rate_per_second"],
        77,
        "the other change stays"
    );
    assert_eq!(unfinished_rows(&stack).await, 0);
}

/// Waits for the example's change (revision 2), then changes the rate, keeping the example's
/// `max_unfinished_tasks = 1` so its steps still run.
async fn change_at_revision_2(base: &str, credential: &str) {
    let api = application_resources::Api::new(base).expect("api");
    let who = application_resources::Credentials {
        namespace: "ops".into(),
        application_id: String::new(),
        credential: credential.into(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = api.resources(&who).await.expect("read");
        if now.revision == 2 {
            let answer = api
                .configure(
                    &who,
                    "someone-else",
                    2,
                    "another operator",
                    application_resources::Limits {
                        rate_per_second: 77,
                        ..now.limits
                    },
                )
                .await
                .expect("configure");
            assert_eq!(answer.status.as_u16(), 200, "{:?}", answer.body);
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "revision 2 never came"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Bad variables and files are named; credentials of two applications are refused before
/// anything changes.
#[tokio::test]
async fn bad_settings_are_named_and_change_nothing() {
    let stack = Stack::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut vars = setup(&stack, &dir).await;
    let error = |vars: &HashMap<&'static str, String>| {
        application_resources::ExampleConfig::from_lookup(|name| vars.get(name).cloned())
            .expect_err("refused")
            .to_string()
    };

    let mut missing = vars.clone();
    missing.remove("SLUICE_SECOND_CREDENTIALS_FILE");
    assert!(
        error(&missing).starts_with("SLUICE_SECOND_CREDENTIALS_FILE is not set"),
        "{}",
        error(&missing)
    );
    let mut absent = vars.clone();
    absent.insert("SLUICE_CREDENTIALS_FILE", "/nonexistent/first.json".into());
    assert!(
        error(&absent).starts_with(
            "SLUICE_CREDENTIALS_FILE=/nonexistent/first.json: cannot read the credentials file"
        ),
        "{}",
        error(&absent)
    );
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, r#"{"namespace": "x"}"#).expect("write");
    let mut wrong = vars.clone();
    wrong.insert("SLUICE_CREDENTIALS_FILE", garbage.display().to_string());
    assert!(
        error(&wrong).contains("no string field \"application_id\""),
        "{}",
        error(&wrong)
    );
    let mut input = vars.clone();
    input.insert("SLUICE_EXAMPLE_INPUT", "[1]".into());
    assert_eq!(error(&input), "SLUICE_EXAMPLE_INPUT must be a JSON object");

    // A second credential of another application.
    let other = tenancy::bootstrap(
        &stack.pg,
        &BootstrapRequest {
            application: "other".into(),
            namespace: "second".into(),
            application_id: None,
            scopes: vec![],
            resource_access: true,
        },
    )
    .await
    .expect("another application");
    let path = dir.path().join("other.json");
    std::fs::write(&path, serde_json::to_vec(&other).expect("json")).expect("write");
    vars.insert("SLUICE_SECOND_CREDENTIALS_FILE", path.display().to_string());
    let mut out = Vec::new();
    let refused = application_resources::run(config(&vars), &mut out)
        .await
        .expect_err("two applications")
        .to_string();
    assert!(
        refused.contains("the two credentials belong to different applications"),
        "{refused}"
    );
    let first = config(&vars).first.credential;
    let now = resources(&stack, &first).await;
    assert_eq!(now.data()["revision"], "1", "nothing changed");
}

/// The shared-quota example (`docs/operations.md`) bootstraps a new application and runs the example before anything was enqueued to
/// it, with no executor: reading and configuring build the missing projection themselves instead
/// of answering `503` until some enqueue does.
#[tokio::test]
async fn a_fresh_application_is_read_and_configured_before_any_enqueue() {
    let stack = Stack::start().await;
    for (application, configure_first) in [("fresh-read", false), ("fresh-configure", true)] {
        let fresh = tenancy::bootstrap(
            &stack.pg,
            &BootstrapRequest {
                application: application.into(),
                namespace: "first".into(),
                application_id: None,
                scopes: vec![],
                resource_access: true,
            },
        )
        .await
        .expect("bootstrap");
        if configure_first {
            let body = serde_json::json!({"expected_revision": "1", "reason": "first call",
                "max_unfinished_tasks": 5, "max_concurrency": 5, "rate_per_second": 5});
            let changed = configure(&stack, &fresh.credential, Some("fresh-1"), &body).await;
            assert_eq!(changed.status.as_u16(), 200, "{:?}", changed.body);
            assert_eq!(changed.data()["resources"]["revision"], "2");
        }
        let read = resources(&stack, &fresh.credential).await;
        assert_eq!(read.status.as_u16(), 200, "{application}: {:?}", read.body);
        assert_eq!(read.data()["unfinished_tasks"], "0");
    }
}
