//! Every error of reference/application-shared-quota.md §5 reached through the API, with its
//! HTTP status and headers; the outermost exhausted limit wins; a refusal leaves nothing behind;
//! lowering a limit below usage deletes nothing and refuses new intake until work finishes.

use std::collections::HashMap;
use std::time::Duration;

use fred::interfaces::{HashesInterface, SortedSetsInterface};
use hyper::StatusCode;
use sluice_testkit::RedisServer;

use super::*;
use crate::execution::{OPEN_ADMISSION, cancel, id_of, pool};

/// Checks the envelope of an error: status, code, `retryable`, `X-Request-Id` equal to the
/// body's `request_id`, JSON content type, and `Retry-After` exactly when the code is retryable.
fn assert_error(reply: &Reply, status: u16, code: &str, retry_after: Option<&str>) {
    assert_eq!(reply.status.as_u16(), status, "{code}: {:?}", reply.body);
    assert_eq!(reply.code(), code, "{:?}", reply.body);
    let request_id = reply.body["request_id"].as_str().expect("request_id");
    assert_eq!(request_id.len(), 32, "{request_id}");
    assert!(request_id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        reply.headers.get("x-request-id").map(|v| v.as_bytes()),
        Some(request_id.as_bytes()),
        "{code}: X-Request-Id"
    );
    assert_eq!(
        reply.headers.get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..]),
        "{code}: Content-Type"
    );
    assert_eq!(
        reply
            .headers
            .get("retry-after")
            .map(|v| v.to_str().expect("ascii")),
        retry_after,
        "{code}: Retry-After"
    );
    assert_eq!(
        reply.body["error"]["retryable"],
        retry_after.is_some(),
        "{code}: retryable"
    );
    assert_eq!(
        reply.body["error"]["retry_after_ms"].is_u64(),
        retry_after.is_some(),
        "{code}: retry_after_ms"
    );
    assert!(reply.body["error"]["message"].is_string());
}

/// Everything an enqueue can leave behind in Redis and PostgreSQL: the count hash, the claim
/// command's reservations and request keys in the stack's namespace, and the rows.
#[derive(Debug, PartialEq)]
struct Traces {
    counters: HashMap<String, i64>,
    reservations: Vec<String>,
    request_keys: i64,
    rows: i64,
}

async fn traces(stack: &Stack) -> Traces {
    let ns = stack.creds.namespace_id;
    let client = stack.redis.pool().next();
    Traces {
        counters: stack.counters().await,
        reservations: client
            .zrange(
                stack.keys().reservations(ns, "claim"),
                0,
                -1,
                None,
                false,
                None,
                false,
            )
            .await
            .expect("reservations"),
        request_keys: client
            .hlen(stack.keys().request_keys(ns, "claim"))
            .await
            .expect("request keys"),
        rows: stack.count_rows().await,
    }
}

/// A `claim` command with the given intake and admission tables.
fn claim(intake: &str, admission: &str) -> String {
    format!(
        r#"
[[command]]
code = "claim"
parameters = {{ offer = {{ type = "uuid" }} }}
resource_key = {{ from = "input", field = "offer" }}
intake = {{ {intake} }}
admission = {{ {admission} }}
handler = {{ kind = "quota", pool = "stock", mode = "committed" }}
"#
    ) + &pool("stock", 100)
}

const OPEN_INTAKE_TABLE: &str = "per_second = 1000000, burst = 1000000, max_in_flight = 100000";

#[tokio::test]
async fn client_errors_have_their_status_and_no_retry_after() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    // INVALID_ARGUMENT
    let invalid = configure(
        &stack,
        &admin.credential,
        Some("e-1"),
        &configure_body("1", "x", 0, 1, 1),
    )
    .await;
    assert_error(&invalid, 400, "INVALID_ARGUMENT", None);
    assert_eq!(invalid.field(), "max_unfinished_tasks");
    // UNAUTHENTICATED: no header, an unknown secret, a revoked one; PERMISSION_DENIED: every
    // namespace scope is not an application scope. Both endpoints alike.
    let body = configure_body("1", "x", 1, 1, 1);
    let missing = stack.get("/v1/application/resources", None).await;
    assert_error(&missing, 401, "UNAUTHENTICATED", None);
    let unknown = secrets::new_credential_secret();
    let revoked = join_namespace(&stack, "revoked", true).await;
    sqlx::query("UPDATE credentials SET revoked_at = now() WHERE secret_sha256 = $1")
        .bind(secrets::credential_hash(&revoked.credential).to_vec())
        .execute(&stack.pg)
        .await
        .expect("revoke");
    for (bearer, key, status, code) in [
        (unknown, "e-2", 401, "UNAUTHENTICATED"),
        (revoked.credential, "e-3", 401, "UNAUTHENTICATED"),
        (stack.credential(), "e-4", 403, "PERMISSION_DENIED"),
    ] {
        assert_error(&resources(&stack, &bearer).await, status, code, None);
        assert_error(
            &configure(&stack, &bearer, Some(key), &body).await,
            status,
            code,
            None,
        );
    }
    assert_eq!(stored(&stack).await, UNTOUCHED);
    // STATE_CONFLICT and IDEMPOTENCY_CONFLICT.
    let applied = configure(&stack, &admin.credential, Some("e-5"), &body).await;
    assert_eq!(applied.status, StatusCode::OK, "{:?}", applied.body);
    assert_error(
        &configure(&stack, &admin.credential, Some("e-6"), &body).await,
        409,
        "STATE_CONFLICT",
        None,
    );
    assert_error(
        &configure(
            &stack,
            &admin.credential,
            Some("e-5"),
            &configure_body("1", "y", 1, 1, 1),
        )
        .await,
        409,
        "IDEMPOTENCY_CONFLICT",
        None,
    );
    assert_eq!(stored(&stack).await.revision, 2);
}

#[tokio::test]
async fn application_full_is_429_with_retry_after_1_and_leaves_nothing() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let set = configure(
        &stack,
        &admin.credential,
        Some("full-1"),
        &configure_body("1", "two at most", 2, 10, 10),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    // One in each namespace fills the application.
    let first = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
    let second = enqueue_as(&stack, &admin.credential, "user-2", &key(), &offer()).await;
    assert_eq!(second.status, StatusCode::ACCEPTED, "{:?}", second.body);
    let before = traces(&stack).await;
    let refused_key = key();
    let refused = stack.enqueue("user-3", &refused_key, &offer()).await;
    assert_error(&refused, 429, "APPLICATION_FULL", Some("1"));
    assert_eq!(refused.body["error"]["retry_after_ms"], 1_000);
    let elsewhere = enqueue_as(&stack, &admin.credential, "user-4", &key(), &offer()).await;
    assert_error(&elsewhere, 429, "APPLICATION_FULL", Some("1"));
    assert_eq!(traces(&stack).await, before, "a refusal leaves nothing");
    // Managing the budget is never refused for being full; with room the refused key is new.
    let raised = configure(
        &stack,
        &admin.credential,
        Some("full-2"),
        &configure_body("2", "three", 3, 10, 10),
    )
    .await;
    assert_eq!(raised.status, StatusCode::OK, "{:?}", raised.body);
    assert_eq!(raised.data()["resources"]["unfinished_tasks"], "2");
    let offer_again = offer();
    let accepted = stack.enqueue("user-3", &refused_key, &offer_again).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{:?}", accepted.body);
    assert_eq!(accepted.data()["deduplicated"], false);
}

#[tokio::test]
async fn queue_full_is_429_with_retry_after_1_and_leaves_nothing() {
    let stack = Stack::with_declaration(&claim(OPEN_INTAKE_TABLE, "max_queue = 2")).await;
    for i in 0..2 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer()).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let before = traces(&stack).await;
    let refused = stack.enqueue("user-9", &key(), &offer()).await;
    assert_error(&refused, 429, "QUEUE_FULL", Some("1"));
    assert_eq!(refused.body["error"]["retry_after_ms"], 1_000);
    assert_eq!(traces(&stack).await, before, "a refusal leaves nothing");
}

#[tokio::test]
async fn an_empty_intake_bucket_is_rate_limited_with_its_wait() {
    // One token, refilled at one per second: the second call within that second is refused.
    let stack = Stack::with_declaration(&claim(
        "per_second = 1, burst = 1, max_in_flight = 100",
        OPEN_ADMISSION,
    ))
    .await;
    let first = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
    let before = traces(&stack).await;
    let refused = stack.enqueue("user-2", &key(), &offer()).await;
    assert_error(&refused, 429, "RATE_LIMITED", Some("1"));
    let wait = refused.body["error"]["retry_after_ms"]
        .as_u64()
        .expect("retry_after_ms");
    assert!(
        (1..=1_000).contains(&wait),
        "the bucket's real wait: {wait}"
    );
    assert_eq!(traces(&stack).await, before, "a refusal leaves nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_while_redis_is_down_and_nothing_changes_in_postgres() {
    let mut redis = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("start redis");
    let stack = Stack::start_with(StackOptions {
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    let admin = join_namespace(&stack, "ops", true).await;
    let healthy = resources(&stack, &admin.credential).await;
    assert_eq!(healthy.status, StatusCode::OK, "{:?}", healthy.body);
    let mut redis = tokio::task::spawn_blocking(move || {
        redis.kill();
        redis
    })
    .await
    .expect("stop redis");
    let read = resources(&stack, &admin.credential).await;
    assert_error(&read, 503, "UNAVAILABLE", Some("1"));
    let body = configure_body("1", "while Redis is down", 5, 5, 5);
    let write = configure(&stack, &admin.credential, Some("down-1"), &body).await;
    assert_error(&write, 503, "UNAVAILABLE", Some("1"));
    assert_eq!(
        stored(&stack).await,
        UNTOUCHED,
        "nothing changed in PostgreSQL"
    );

    // Redis back (empty): once the projection is rebuilt, the same key and body apply, once.
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .expect("restart redis");
    assert!(
        eventually(Duration::from_secs(20), || async {
            // 202, or 200 if an earlier attempt committed but its answer was lost.
            stack
                .enqueue("user-1", "after-restart", &offer_for_restart())
                .await
                .status
                .is_success()
        })
        .await,
        "intake rebuilds the projection"
    );
    let retried = configure(&stack, &admin.credential, Some("down-1"), &body).await;
    assert_eq!(retried.status, StatusCode::OK, "{:?}", retried.body);
    assert_eq!(retried.data()["deduplicated"], false);
    assert_eq!(retried.data()["resources"]["revision"], "2");
    assert_eq!(retried.data()["resources"]["unfinished_tasks"], "1");
    drop(redis);
}

/// One offer for the retried enqueue above, so that every attempt carries the same content.
fn offer_for_restart() -> String {
    "0b0c0d0e-0000-4000-8000-000000000001".to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outermost_exhausted_limit_wins() {
    // Queue of one, intake of one token per second and one call in flight.
    let stack = std::sync::Arc::new(
        Stack::with_declaration(&claim(
            "per_second = 1, burst = 1, max_in_flight = 1",
            "max_queue = 1",
        ))
        .await,
    );
    let admin = join_namespace(&stack, "ops", true).await;
    let set = configure(
        &stack,
        &admin.credential,
        Some("outer-1"),
        &configure_body("1", "one at most", 1, 10, 10),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.body);
    // Hold the first enqueue between its reservation and its commit: its reservation fills the
    // application (1/1), the queue (1/1) and intake in flight (1/1), and it took the one token.
    let mut blocker = stack.pg.begin().await.expect("begin");
    sqlx::query("LOCK TABLE commands IN EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock commands");
    let held = {
        let stack = stack.clone();
        tokio::spawn(async move { stack.enqueue("user-1", "held", &offer()).await })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            stack.reservations("claim").await == 1
        })
        .await,
        "the first enqueue reserved"
    );
    let ns = stack.creds.namespace_id;
    let before = traces(&stack).await;
    assert_eq!(before.counters.get("unfinished"), Some(&1));
    assert_eq!(before.counters.get(&format!("queued:{ns}:claim")), Some(&1));
    let tokens: Option<String> = stack
        .redis
        .pool()
        .next()
        .hget(stack.keys().intake_bucket(ns, "claim"), "tokens")
        .await
        .expect("bucket");
    assert_eq!(tokens.as_deref(), Some("0"), "the bucket is empty");

    let all_three = stack.enqueue("user-2", &key(), &offer()).await;
    assert_error(&all_three, 429, "APPLICATION_FULL", Some("1"));
    let raised = configure(
        &stack,
        &admin.credential,
        Some("outer-2"),
        &configure_body("2", "room in the application", 1_000, 10, 10),
    )
    .await;
    assert_eq!(raised.status, StatusCode::OK, "{:?}", raised.body);
    let queue_and_bucket = stack.enqueue("user-3", &key(), &offer()).await;
    assert_error(&queue_and_bucket, 429, "QUEUE_FULL", Some("1"));
    assert_eq!(traces(&stack).await, before, "the refusals left nothing");
    assert_eq!(stack.count_rows().await, 0);

    blocker.rollback().await.expect("unlock");
    let held = held.await.expect("held enqueue");
    assert_eq!(held.status, StatusCode::ACCEPTED, "{:?}", held.body);
    assert_eq!(stack.count_rows().await, 1);
}

#[tokio::test]
async fn lowering_below_usage_deletes_nothing_and_refuses_until_work_finishes() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let offer = offer();
    let mut accepted = Vec::new();
    for i in 0..3 {
        let key = format!("low-{i}");
        let reply = stack.enqueue(&format!("user-{i}"), &key, &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        accepted.push((key, reply));
    }
    let before = traces(&stack).await;
    let lowered = configure(
        &stack,
        &admin.credential,
        Some("lower-1"),
        &configure_body("1", "lower below usage", 1, 10_000, 100_000),
    )
    .await;
    assert_eq!(lowered.status, StatusCode::OK, "{:?}", lowered.body);
    assert_eq!(lowered.data()["resources"]["max_unfinished_tasks"], 1);
    assert_eq!(lowered.data()["resources"]["unfinished_tasks"], "3");
    // Nothing deleted: rows, counts and usage stay above the new limit.
    assert_eq!(traces(&stack).await, before);
    let statuses: Vec<String> = sqlx::query_scalar(
        "SELECT status FROM commands WHERE application_id = $1 ORDER BY queue_seq",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("statuses");
    assert_eq!(statuses, ["accepted", "accepted", "accepted"]);
    assert_eq!(
        resources(&stack, &admin.credential).await.data()["unfinished_tasks"],
        "3"
    );

    // New intake is refused in every namespace; a replay of an accepted key still answers.
    let waiting_key = key();
    let refused = stack.enqueue("user-9", &waiting_key, &offer).await;
    assert_error(&refused, 429, "APPLICATION_FULL", Some("1"));
    let elsewhere = enqueue_as(&stack, &admin.credential, "user-8", &key(), &offer).await;
    assert_error(&elsewhere, 429, "APPLICATION_FULL", Some("1"));
    let replay = stack.enqueue("user-0", "low-0", &offer).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.data()["deduplicated"], true);
    assert_eq!(
        replay.data()["command_id"],
        accepted[0].1.data()["command_id"]
    );
    assert_eq!(
        traces(&stack).await,
        before,
        "refusals and replays left nothing"
    );

    // Work finishing brings usage down; at the limit intake is still refused, below it accepted.
    for (i, (_, reply)) in accepted.iter().enumerate() {
        let cancelled = cancel(&stack, &id_of(reply)).await;
        assert_eq!(cancelled.status, StatusCode::OK, "{:?}", cancelled.body);
        assert_eq!(cancelled.data()["status"], "cancelled");
        let left = 2 - i;
        assert_eq!(
            resources(&stack, &admin.credential).await.data()["unfinished_tasks"],
            left.to_string()
        );
        let attempt = stack.enqueue("user-9", &waiting_key, &offer).await;
        if left >= 1 {
            assert_error(&attempt, 429, "APPLICATION_FULL", Some("1"));
        } else {
            assert_eq!(attempt.status, StatusCode::ACCEPTED, "{:?}", attempt.body);
            assert_eq!(attempt.data()["deduplicated"], false);
        }
    }
    // Full again at one; the replay of an accepted (now cancelled) key still answers.
    let full_again = stack.enqueue("user-7", &key(), &offer).await;
    assert_error(&full_again, 429, "APPLICATION_FULL", Some("1"));
    let replay = stack.enqueue("user-1", "low-1", &offer).await;
    assert_eq!(replay.status, StatusCode::OK, "{:?}", replay.body);
    assert_eq!(replay.data()["deduplicated"], true);
    assert_eq!(stack.count_rows().await, 4);
}
