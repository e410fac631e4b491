//! The contract of `GET /v1/application/resources` and `POST /v1/application/resources:configure`
//! (reference/application-shared-quota.md §1–3): compare-and-set on the revision, idempotency
//! per namespace, scopes nothing implies, strict bodies, the audit row and the usage figures.

use std::sync::Arc;

use fred::interfaces::HashesInterface;
use hyper::StatusCode;
use serde_json::{Value, json};

use super::*;

/// The Redis copy of the limits the scripts read (`app_limits.lua`).
async fn redis_limits(stack: &Stack) -> Vec<Option<String>> {
    stack
        .redis
        .pool()
        .next()
        .hmget(
            stack.keys().meta(),
            vec![
                "app:revision",
                "app:max_unfinished",
                "app:max_concurrency",
                "app:rate_per_second",
            ],
        )
        .await
        .expect("meta")
}

fn some(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some(v.to_string())).collect()
}

#[tokio::test]
async fn a_stale_or_future_expected_revision_is_state_conflict_and_changes_nothing() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let first = configure(
        &stack,
        &admin.credential,
        Some("cas-1"),
        &configure_body("1", "first change", 500, 50, 5_000),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.body);
    assert_eq!(first.data()["resources"]["revision"], "2");
    let after_first = stored(&stack).await;
    assert_eq!(
        after_first,
        Stored {
            revision: 2,
            limits: (500, 50, 5_000),
            audit_rows: 1,
            receipts: 1
        }
    );
    for (key, expected) in [("cas-stale", "1"), ("cas-future", "3"), ("cas-far", "99")] {
        let refused = configure(
            &stack,
            &admin.credential,
            Some(key),
            &configure_body(expected, "second change", 7, 7, 7),
        )
        .await;
        assert_eq!(refused.status, StatusCode::CONFLICT, "{:?}", refused.body);
        assert_eq!(refused.code(), "STATE_CONFLICT", "{:?}", refused.body);
        assert_eq!(refused.body["error"]["retryable"], false);
        // Nothing changed: no revision, no limits, no audit row, no receipt.
        assert_eq!(
            stored(&stack).await,
            after_first,
            "after expected {expected}"
        );
    }
    let read = resources(&stack, &admin.credential).await;
    assert_eq!(read.data()["revision"], "2");
    assert_eq!(read.data()["max_unfinished_tasks"], 500);
    assert_eq!(read.data()["max_concurrency"], 50);
    assert_eq!(read.data()["rate_per_second"], 5_000);
    assert_eq!(
        redis_limits(&stack).await,
        some(&["2", "500", "50", "5000"])
    );
    // A refused key left no receipt: used again with the current revision it applies.
    let retried = configure(
        &stack,
        &admin.credential,
        Some("cas-stale"),
        &configure_body("2", "second change", 7, 7, 7),
    )
    .await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.body);
    assert_eq!(retried.data()["deduplicated"], false);
    assert_eq!(retried.data()["resources"]["revision"], "3");
    assert_eq!(redis_limits(&stack).await, some(&["3", "7", "7", "7"]));
}

#[tokio::test]
async fn a_replay_answers_the_original_snapshot_and_other_content_is_a_conflict() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let body = configure_body("1", "budget for the sale", 1_000, 100, 1_000);
    let original = configure(&stack, &admin.credential, Some("sale-budget"), &body).await;
    assert_eq!(original.status, StatusCode::OK, "{:?}", original.body);
    assert_eq!(original.data()["deduplicated"], false);
    assert_eq!(original.data()["resources"]["unfinished_tasks"], "0");
    let after = stored(&stack).await;
    // Usage changes after the call.
    for i in 0..2 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer()).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let replay = configure(&stack, &admin.credential, Some("sale-budget"), &body).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.data()["deduplicated"], true);
    // The original snapshot, usage as it was then.
    assert_eq!(
        replay.data()["resources"],
        original.data()["resources"],
        "the replay answers the original snapshot"
    );
    assert_eq!(stored(&stack).await, after, "a replay bumps nothing");
    let live = resources(&stack, &admin.credential).await;
    assert_eq!(live.data()["unfinished_tasks"], "2");
    assert_eq!(live.data()["revision"], "2");
    // The same key with other content, field by field, is a conflict and changes nothing.
    let others = [
        configure_body("1", "budget for the sale!", 1_000, 100, 1_000),
        configure_body("2", "budget for the sale", 1_000, 100, 1_000),
        configure_body("1", "budget for the sale", 1_001, 100, 1_000),
        configure_body("1", "budget for the sale", 1_000, 101, 1_000),
        configure_body("1", "budget for the sale", 1_000, 100, 1_001),
    ];
    for other in &others {
        let conflict = configure(&stack, &admin.credential, Some("sale-budget"), other).await;
        assert_eq!(conflict.status, StatusCode::CONFLICT, "{other}");
        assert_eq!(
            conflict.code(),
            "IDEMPOTENCY_CONFLICT",
            "{:?}",
            conflict.body
        );
        assert_eq!(stored(&stack).await, after, "{other}");
    }
    // Still the original answer afterwards.
    let again = configure(&stack, &admin.credential, Some("sale-budget"), &body).await;
    assert_eq!(again.data()["deduplicated"], true);
    assert_eq!(again.data()["resources"], original.data()["resources"]);
}

#[tokio::test]
async fn idempotency_keys_are_scoped_per_namespace_and_the_revision_decides() {
    let stack = Stack::start().await;
    let first = join_namespace(&stack, "ops", true).await;
    let second = join_namespace(&stack, "ops-two", true).await;
    let key = "shared-key";
    let body_first = configure_body("1", "first namespace", 10, 10, 10);
    let applied = configure(&stack, &first.credential, Some(key), &body_first).await;
    assert_eq!(applied.status, StatusCode::OK, "{:?}", applied.body);
    assert_eq!(applied.data()["resources"]["revision"], "2");
    // The other namespace sending the very same key and body does not replay the first
    // namespace's call: it is a new call, and its revision is stale.
    let not_a_replay = configure(&stack, &second.credential, Some(key), &body_first).await;
    assert_eq!(not_a_replay.status, StatusCode::CONFLICT);
    assert_eq!(
        not_a_replay.code(),
        "STATE_CONFLICT",
        "{:?}",
        not_a_replay.body
    );
    // Another body under the same key: still a new call decided by CAS, not a key conflict.
    let stale = configure(
        &stack,
        &second.credential,
        Some(key),
        &configure_body("1", "second namespace", 20, 20, 20),
    )
    .await;
    assert_eq!(stale.code(), "STATE_CONFLICT", "{:?}", stale.body);
    let body_second = configure_body("2", "second namespace", 20, 20, 20);
    let current = configure(&stack, &second.credential, Some(key), &body_second).await;
    assert_eq!(current.status, StatusCode::OK, "{:?}", current.body);
    assert_eq!(current.data()["deduplicated"], false);
    assert_eq!(current.data()["resources"]["revision"], "3");
    assert_eq!(current.data()["resources"]["max_unfinished_tasks"], 20);
    // Each namespace's receipt answers its own replay.
    let replay_first = configure(&stack, &first.credential, Some(key), &body_first).await;
    assert_eq!(replay_first.data()["deduplicated"], true);
    assert_eq!(replay_first.data()["resources"]["revision"], "2");
    let replay_second = configure(&stack, &second.credential, Some(key), &body_second).await;
    assert_eq!(replay_second.data()["deduplicated"], true);
    assert_eq!(replay_second.data()["resources"]["revision"], "3");
    assert_eq!(
        stored(&stack).await,
        Stored {
            revision: 3,
            limits: (20, 20, 20),
            audit_rows: 2,
            receipts: 2
        }
    );
}

/// Waiting lock requests on the `applications` table in this test's database.
async fn waiting_on_applications(stack: &Stack) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks
          WHERE NOT granted AND relation = 'applications'::regclass
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("pg_locks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_with_one_key_and_body_apply_once() {
    let stack = Arc::new(Stack::start().await);
    let admin = join_namespace(&stack, "ops", true).await;
    let body = configure_body("1", "one change, sent eight times", 321, 32, 3_210);
    // Make the eight calls really overlap: hold the applications table until all eight wait
    // for it inside their transactions, then let them go at once.
    let mut holder = stack.pg.begin().await.expect("begin");
    sqlx::query("LOCK TABLE applications IN EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .expect("lock applications");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (stack, credential, body) = (stack.clone(), admin.credential.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            configure(&stack, &credential, Some("together"), &body).await
        }));
    }
    let piled_up = eventually(std::time::Duration::from_secs(4), || async {
        waiting_on_applications(&stack).await == 8
    })
    .await;
    assert!(
        piled_up,
        "all eight calls wait together: {}",
        waiting_on_applications(&stack).await
    );
    holder.rollback().await.expect("unlock");
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.expect("task"));
    }
    for reply in &replies {
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
        assert_eq!(reply.data()["resources"], replies[0].data()["resources"]);
    }
    let applied = replies
        .iter()
        .filter(|r| r.data()["deduplicated"] == false)
        .count();
    assert_eq!(applied, 1, "exactly one call applies, the others replay it");
    assert_eq!(replies[0].data()["resources"]["revision"], "2");
    assert_eq!(
        stored(&stack).await,
        Stored {
            revision: 2,
            limits: (321, 32, 3_210),
            audit_rows: 1,
            receipts: 1
        }
    );
}

#[tokio::test]
async fn only_the_application_scopes_open_the_endpoints() {
    let stack = Stack::start().await;
    let body = configure_body("1", "should not apply", 5, 5, 5);
    let denied = |reply: &Reply, what: &str| {
        assert_eq!(
            reply.status,
            StatusCode::FORBIDDEN,
            "{what}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "PERMISSION_DENIED", "{what}");
    };
    // The stack's credential holds every namespace scope and no application scope.
    let everything = stack.credential();
    assert!(
        stack
            .creds
            .scopes
            .iter()
            .all(|s| !s.starts_with("application:"))
    );
    assert_eq!(stack.creds.scopes.len(), tenancy::NAMESPACE_SCOPES.len());
    denied(
        &resources(&stack, &everything).await,
        "namespace scopes, GET",
    );
    denied(
        &configure(&stack, &everything, Some("k-1"), &body).await,
        "namespace scopes, configure",
    );
    // A subject token never manages anything.
    let token = stack.subject_token("user-1");
    denied(&resources(&stack, &token).await, "subject token, GET");
    denied(
        &configure(&stack, &token, Some("k-2"), &body).await,
        "subject token, configure",
    );
    // Read alone reads, and does not manage.
    let reader = credential_with_scopes(
        &stack,
        stack.creds.namespace_id,
        &["application:resources:read"],
    )
    .await;
    let read = resources(&stack, &reader).await;
    assert_eq!(read.status, StatusCode::OK, "{:?}", read.body);
    assert_eq!(
        read.data()["application_id"],
        stack.creds.application_id.to_string()
    );
    denied(
        &configure(&stack, &reader, Some("k-3"), &body).await,
        "read scope, configure",
    );
    // Manage alone manages, and does not read.
    let manager = credential_with_scopes(
        &stack,
        stack.creds.namespace_id,
        &["application:resources:manage"],
    )
    .await;
    denied(&resources(&stack, &manager).await, "manage scope, GET");
    assert_eq!(stored(&stack).await, UNTOUCHED);
    let managed = configure(&stack, &manager, Some("k-4"), &body).await;
    assert_eq!(managed.status, StatusCode::OK, "{:?}", managed.body);
    assert_eq!(stored(&stack).await.revision, 2);
}

/// Sends `body` (raw) with `key` and expects `400 INVALID_ARGUMENT` naming `field`, with nothing
/// stored.
async fn assert_refused(
    stack: &Stack,
    bearer: &str,
    key: Option<&str>,
    body: &str,
    field: &str,
    what: &str,
) {
    let reply = configure_raw(stack, bearer, key, body).await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(reply.code(), "INVALID_ARGUMENT", "{what}");
    assert_eq!(reply.field(), field, "{what}: {:?}", reply.body);
    assert_eq!(stored(stack).await, UNTOUCHED, "{what} changed something");
}

/// A valid body with `field` replaced by the raw JSON `value` (or removed when `None`).
fn with(field: &str, value: Option<&str>) -> String {
    let fields = [
        ("expected_revision", "\"1\""),
        ("reason", "\"strict\""),
        ("max_unfinished_tasks", "10"),
        ("max_concurrency", "10"),
        ("rate_per_second", "10"),
    ];
    let parts: Vec<String> = fields
        .iter()
        .filter_map(|(name, default)| {
            if *name == field {
                value.map(|v| format!("\"{name}\":{v}"))
            } else {
                Some(format!("\"{name}\":{default}"))
            }
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

#[tokio::test]
async fn strict_bodies_and_headers_are_refused_naming_the_field() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let bearer = admin.credential.as_str();
    let key = Some("strict-key");
    let valid = with("", None);
    // The valid body really is valid (checked last, so that it changes nothing before).
    let mut cases: Vec<(String, String, String)> = vec![
        (
            "unknown field".into(),
            valid.replace('}', ",\"max_queue\":1}"),
            "max_queue".into(),
        ),
        (
            "duplicate key".into(),
            valid.replace(
                "\"reason\":\"strict\"",
                "\"reason\":\"strict\",\"reason\":\"strict\"",
            ),
            "reason".into(),
        ),
        (
            "wrong-case key".into(),
            valid.replace("\"reason\"", "\"Reason\""),
            "Reason".into(),
        ),
        (
            "wrong-case extra key".into(),
            valid.replace('}', ",\"Max_Concurrency\":10}"),
            "Max_Concurrency".into(),
        ),
        ("not an object".into(), "[]".into(), "body".into()),
        ("not JSON".into(), "{".into(), "body".into()),
    ];
    let fields = [
        "expected_revision",
        "reason",
        "max_unfinished_tasks",
        "max_concurrency",
        "rate_per_second",
    ];
    for field in fields {
        cases.push((format!("{field} missing"), with(field, None), field.into()));
        cases.push((
            format!("{field} null"),
            with(field, Some("null")),
            field.into(),
        ));
    }
    for (field, max) in [
        ("max_unfinished_tasks", 100_000_000u64),
        ("max_concurrency", 1_000_000),
        ("rate_per_second", 10_000_000),
    ] {
        for value in [
            "0".to_string(),
            "-1".to_string(),
            (max + 1).to_string(),
            "4294967297".to_string(),
            "1e30".to_string(),
            "1.5".to_string(),
            // `10.0` is the integer 10 (JSON Schema's integers, as the document says).
            "10.000001".to_string(),
            "\"10\"".to_string(),
            "true".to_string(),
            "{}".to_string(),
        ] {
            cases.push((
                format!("{field} = {value}"),
                with(field, Some(&value)),
                field.into(),
            ));
        }
    }
    for value in [
        "\"0\"",
        "\"01\"",
        "1",
        "\"\"",
        "\"-1\"",
        "\" 1\"",
        "\"1 \"",
        "\"+1\"",
        "\"1.0\"",
        "\"18446744073709551616\"",
    ] {
        cases.push((
            format!("expected_revision = {value}"),
            with("expected_revision", Some(value)),
            "expected_revision".into(),
        ));
    }
    let too_long = format!("\"{}\"", "配".repeat(1025));
    for value in ["\"\"", "\"   \"", "\"\\t\\n\"", "7", too_long.as_str()] {
        cases.push((
            format!("reason = {}", value.chars().take(20).collect::<String>()),
            with("reason", Some(value)),
            "reason".into(),
        ));
    }
    for (what, body, field) in &cases {
        assert_refused(&stack, bearer, key, body, field, what).await;
    }
    // The Idempotency-Key header: required, 1–128 printable ASCII without spaces.
    let long_key = "k".repeat(129);
    for (what, header) in [
        ("missing Idempotency-Key", None),
        ("empty Idempotency-Key", Some("")),
        ("Idempotency-Key with a space", Some("two words")),
        ("Idempotency-Key of 129 characters", Some(long_key.as_str())),
    ] {
        assert_refused(&stack, bearer, header, &valid, "Idempotency-Key", what).await;
    }
    // GET takes no query string (no other application can be named).
    let query = stack
        .get(
            &format!(
                "/v1/application/resources?application_id={}",
                stack.creds.application_id
            ),
            Some(bearer),
        )
        .await;
    assert_eq!(query.status, StatusCode::BAD_REQUEST, "{:?}", query.body);
    assert_eq!(query.code(), "INVALID_ARGUMENT");
    assert_eq!(query.field(), "application_id");
    assert_eq!(stored(&stack).await, UNTOUCHED);

    // The boundaries are accepted: 1024 Unicode characters of reason, a 128-character key, the
    // largest limits, then the smallest.
    let reason = "配".repeat(1024);
    let longest_key = "K".repeat(128);
    let largest = configure(
        &stack,
        bearer,
        Some(&longest_key),
        &configure_body("1", &reason, 100_000_000, 1_000_000, 10_000_000),
    )
    .await;
    assert_eq!(largest.status, StatusCode::OK, "{:?}", largest.body);
    assert_eq!(
        largest.data()["resources"]["max_unfinished_tasks"],
        100_000_000
    );
    assert_eq!(largest.data()["resources"]["max_concurrency"], 1_000_000);
    assert_eq!(largest.data()["resources"]["rate_per_second"], 10_000_000);
    let audited: String = sqlx::query_scalar(
        "SELECT details->>'reason' FROM audit
          WHERE application_id = $1 AND action = 'application.resources.configure'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("audit reason");
    assert_eq!(audited, reason);
    let smallest = configure(
        &stack,
        bearer,
        Some("~!#$%&'*+-.^_`|"),
        &configure_body("2", "x", 1, 1, 1),
    )
    .await;
    assert_eq!(smallest.status, StatusCode::OK, "{:?}", smallest.body);
    assert_eq!(smallest.data()["resources"]["revision"], "3");
    assert_eq!(
        stored(&stack).await,
        Stored {
            revision: 3,
            limits: (1, 1, 1),
            audit_rows: 2,
            receipts: 2
        }
    );
}

#[tokio::test]
async fn the_audit_row_holds_the_reason_the_limits_before_and_after_and_the_revision() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let credential_id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM credentials WHERE secret_sha256 = $1")
            .bind(secrets::credential_hash(&admin.credential).to_vec())
            .fetch_one(&stack.pg)
            .await
            .expect("credential id");
    for (key, body) in [
        (
            "audit-1",
            configure_body("1", "调整应用资源预算", 2_000, 200, 20),
        ),
        ("audit-2", configure_body("2", "back down", 3, 2, 1)),
    ] {
        let reply = configure(&stack, &admin.credential, Some(key), &body).await;
        assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    }
    // A replay and a refusal add no audit row.
    configure(
        &stack,
        &admin.credential,
        Some("audit-2"),
        &configure_body("2", "back down", 3, 2, 1),
    )
    .await;
    configure(
        &stack,
        &admin.credential,
        Some("audit-3"),
        &configure_body("1", "stale", 3, 2, 1),
    )
    .await;
    let rows: Vec<(uuid::Uuid, Option<uuid::Uuid>, String, Value)> = sqlx::query_as(
        "SELECT application_id, namespace_id, actor, details FROM audit
          WHERE application_id = $1 AND action = 'application.resources.configure'
          ORDER BY id",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("audit rows");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let limits = |u: u64, c: u64, r: u64| json!({"max_unfinished_tasks": u, "max_concurrency": c, "rate_per_second": r});
    let expected = [
        (
            "调整应用资源预算",
            limits(1_000_000, 10_000, 100_000),
            limits(2_000, 200, 20),
            "2",
            "audit-1",
        ),
        (
            "back down",
            limits(2_000, 200, 20),
            limits(3, 2, 1),
            "3",
            "audit-2",
        ),
    ];
    for ((application, namespace, actor, details), (reason, before, after, revision, key)) in
        rows.iter().zip(expected)
    {
        assert_eq!(*application, stack.creds.application_id.as_uuid());
        // Recorded in the calling credential's namespace.
        assert_eq!(*namespace, Some(admin.namespace_id.as_uuid()));
        assert_eq!(*actor, format!("credential:{credential_id}"));
        assert_eq!(details["reason"], reason, "{details}");
        assert_eq!(details["before"], before, "{details}");
        assert_eq!(details["after"], after, "{details}");
        assert_eq!(details["revision"], revision, "{details}");
        assert_eq!(details["idempotency_key"], key, "{details}");
    }
}

#[tokio::test]
async fn usage_counts_every_namespace_as_decimal_strings() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let idle = resources(&stack, &admin.credential).await;
    assert_eq!(idle.status, StatusCode::OK, "{:?}", idle.body);
    let expected_keys = [
        "application_id",
        "revision",
        "max_unfinished_tasks",
        "unfinished_tasks",
        "max_concurrency",
        "active_attempts",
        "pending_starts",
        "rate_per_second",
    ];
    let mut keys: Vec<&str> = idle
        .data()
        .as_object()
        .expect("data object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut sorted = expected_keys.to_vec();
    sorted.sort_unstable();
    assert_eq!(keys, sorted);
    assert_eq!(idle.data()["unfinished_tasks"], "0");

    for i in 0..2 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer()).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let other = enqueue_as(&stack, &admin.credential, "user-9", &key(), &offer()).await;
    assert_eq!(other.status, StatusCode::ACCEPTED, "{:?}", other.body);
    // Both namespaces read the same application-wide figures.
    let reader = credential_with_scopes(
        &stack,
        stack.creds.namespace_id,
        &["application:resources:read"],
    )
    .await;
    for bearer in [&admin.credential, &reader] {
        let read = resources(&stack, bearer).await;
        assert_eq!(read.status, StatusCode::OK, "{:?}", read.body);
        let data = read.data();
        assert_eq!(
            data["application_id"],
            stack.creds.application_id.to_string()
        );
        assert_eq!(data["revision"], "1");
        assert_eq!(data["unfinished_tasks"], "3", "{data}");
        // No executor: nothing executes or waits to start.
        assert_eq!(data["active_attempts"], "0", "{data}");
        assert_eq!(data["pending_starts"], "0", "{data}");
        // Limits are JSON integers.
        assert!(data["max_unfinished_tasks"].is_u64(), "{data}");
        assert!(data["max_concurrency"].is_u64(), "{data}");
        assert!(data["rate_per_second"].is_u64(), "{data}");
    }
}

/// A forced rebuild (`sluice rebuild`) that took its PostgreSQL snapshot before a configure
/// committed must not bring the older limits back into force. Today such a rebuild writes the
/// snapshot's (older) limits into Redis and then fails with a serialization error (SQLSTATE
/// 40001), leaving the projection not ready; the next intake rebuilds it from PostgreSQL. What
/// must hold either way: intake and the read enforce and show the configured limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_racing_a_configure_never_restores_older_limits() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let application_id = stack.creds.application_id;
    // Hold the rebuild lock: a rebuild started now takes its snapshot, then waits for the lock.
    let mut holder = stack.pg.begin().await.expect("begin");
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('sluice:rebuild:' || $1::text, 0))")
        .bind(application_id)
        .execute(&mut *holder)
        .await
        .expect("take the rebuild lock");
    let rebuild = {
        let (pg, redis) = (stack.pg.clone(), stack.redis.clone());
        tokio::spawn(async move {
            sluice_durable::lifecycle::rebuild::rebuild(&pg, &redis, application_id).await
        })
    };
    let waiting = eventually(std::time::Duration::from_secs(5), || async {
        let waiters: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
              WHERE locktype = 'advisory' AND NOT granted
                AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&stack.pg)
        .await
        .expect("pg_locks");
        waiters == 1
    })
    .await;
    assert!(waiting, "the rebuild waits for its lock");
    let lowered = configure(
        &stack,
        &admin.credential,
        Some("during-rebuild"),
        &configure_body("1", "one at most", 1, 10, 10),
    )
    .await;
    assert_eq!(lowered.status, StatusCode::OK, "{:?}", lowered.body);
    assert_eq!(redis_limits(&stack).await, some(&["2", "1", "10", "10"]));
    holder.rollback().await.expect("release the rebuild lock");
    let raced = rebuild.await.expect("rebuild task");
    // Intake (which rebuilds a projection that is not ready) enforces the configured limit.
    let first = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(
        first.status,
        StatusCode::ACCEPTED,
        "after the raced rebuild ({raced:?}): {:?}",
        first.body
    );
    let second = stack.enqueue("user-2", &key(), &offer()).await;
    assert_eq!(
        second.code(),
        "APPLICATION_FULL",
        "after the raced rebuild ({raced:?}): {:?}",
        second.body
    );
    assert_eq!(redis_limits(&stack).await, some(&["2", "1", "10", "10"]));
    let read = resources(&stack, &admin.credential).await;
    assert_eq!(read.data()["revision"], "2", "{:?}", read.body);
    assert_eq!(read.data()["max_unfinished_tasks"], 1);
    assert_eq!(read.data()["unfinished_tasks"], "1");
    // A rebuild that does not race reads the configured limits too.
    sluice_durable::lifecycle::rebuild::rebuild(&stack.pg, &stack.redis, application_id)
        .await
        .expect("rebuild");
    assert_eq!(redis_limits(&stack).await, some(&["2", "1", "10", "10"]));
    let third = stack.enqueue("user-3", &key(), &offer()).await;
    assert_eq!(third.code(), "APPLICATION_FULL", "{:?}", third.body);
}

/// Sends one raw HTTP/1.1 request (so that headers are exactly as written) and returns the
/// status code.
async fn raw_status(stack: &Stack, request: String) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = stack.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write request");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read answer");
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("a status line in {answer:?}"))
}

/// Reference §3: configure requires `Content-Type: application/json`. A body declared as
/// anything else (or not declared) must be refused and change nothing.
#[tokio::test]
async fn configure_requires_a_json_content_type() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let body = configure_body("1", "declared as text", 5, 5, 5).to_string();
    for content_type in ["Content-Type: text/plain\r\n", ""] {
        let request = format!(
            "POST /v1/application/resources:configure HTTP/1.1\r\nHost: sluice\r\n\
             Authorization: Bearer {}\r\nIdempotency-Key: typed\r\n{content_type}\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            admin.credential,
            body.len()
        );
        assert_eq!(raw_status(&stack, request).await, 400, "{content_type:?}");
        assert_eq!(stored(&stack).await, UNTOUCHED, "{content_type:?}");
    }
}
