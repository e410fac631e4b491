//! `GET /v1/quota-pools/{pool}` and `POST …:configure`: who may, the strict body, the revision's
//! compare-and-set, the idempotency receipt, the audit, the capacity that cannot go below what is
//! held, cached reads dropped, and a declaration applied again that leaves the capacity alone.

use fred::interfaces::KeysInterface;
use hyper::Method;

use super::*;

/// `POST /v1/quota-pools/{pool}:configure` with an `Idempotency-Key`.
async fn configure(stack: &Stack, pool: &str, key: &str, bearer: &str, body: Value) -> Reply {
    stack
        .request_with(
            Method::POST,
            &format!("/v1/quota-pools/{pool}:configure"),
            Some(bearer),
            Some(body.to_string().into()),
            &[("idempotency-key", key)],
        )
        .await
}

/// The version of the cached reads depending on `pool:<code>` (absent: never invalidated).
async fn dependency_version(stack: &Stack, pool: &str) -> Option<i64> {
    let key = stack
        .keys()
        .dependency(stack.creds.namespace_id, &format!("pool:{pool}"));
    stack.redis.pool().get(key).await.expect("read the version")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_is_read_and_configured_under_its_revision_key_and_reason() {
    let stack = Stack::start().await;
    let ns = stack.creds.namespace_id;
    let manager = credential_with_scopes(&stack, ns, &["quotas:manage"]).await;
    let board = credential_with_scopes(&stack, ns, &["status:read"]).await;
    let reader = credential_with_scopes(&stack, ns, &["commands:read"]).await;

    let read = stack.get("/v1/quota-pools/stock", Some(&board)).await;
    assert_eq!(read.status, StatusCode::OK, "{:?}", read.body);
    assert_eq!(
        read.data(),
        &json!({"code": "stock", "capacity": 100, "allocated": 0, "reserved": 0, "available": 100, "revision": "1"})
    );
    assert_eq!(
        stack
            .get("/v1/quota-pools/stock", Some(&manager))
            .await
            .status,
        StatusCode::OK
    );
    for bearer in [reader.clone(), stack.subject_token("alice")] {
        let refused = stack.get("/v1/quota-pools/stock", Some(&bearer)).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{:?}", refused.body);
    }
    let missing = stack.get("/v1/quota-pools/nothing", Some(&manager)).await;
    assert_eq!(
        (missing.status, missing.code()),
        (StatusCode::NOT_FOUND, "NOT_FOUND")
    );

    // Refusals change nothing: no key, wrong scope, bad bodies, a stale revision.
    let good = json!({"expected_revision": "1", "reason": "more seats", "capacity": 150});
    let no_key = stack
        .post(
            "/v1/quota-pools/stock:configure",
            Some(&manager),
            &good.to_string(),
        )
        .await;
    assert_eq!(
        (no_key.status, no_key.field()),
        (StatusCode::BAD_REQUEST, "Idempotency-Key")
    );
    let wrong_scope = configure(&stack, "stock", "k-0", &board, good.clone()).await;
    assert_eq!(wrong_scope.status, StatusCode::FORBIDDEN);
    for (body, field) in [
        (json!({"expected_revision": "1", "capacity": 150}), "reason"),
        (
            json!({"expected_revision": "1", "reason": " ", "capacity": 150}),
            "reason",
        ),
        (
            json!({"expected_revision": 1, "reason": "r", "capacity": 150}),
            "expected_revision",
        ),
        (
            json!({"expected_revision": "1", "reason": "r", "capacity": -1}),
            "capacity",
        ),
        (
            json!({"expected_revision": "1", "reason": "r", "capacity": 150, "extra": 1}),
            "extra",
        ),
    ] {
        let refused = configure(&stack, "stock", "k-bad", &manager, body).await;
        assert_eq!(
            (refused.status, refused.field()),
            (StatusCode::BAD_REQUEST, field),
            "{:?}",
            refused.body
        );
    }
    let stale = configure(
        &stack,
        "stock",
        "k-stale",
        &manager,
        json!({"expected_revision": "7", "reason": "r", "capacity": 150}),
    )
    .await;
    assert_eq!(
        (stale.status, stale.code()),
        (StatusCode::CONFLICT, "STATE_CONFLICT")
    );
    assert_eq!(
        pool_row(&stack.pg, "stock").await,
        (100, 0, 0, 1),
        "nothing changed"
    );
    assert_eq!(dependency_version(&stack, "stock").await, None);

    // The change, its replay and a conflicting reuse of the key.
    let changed = configure(&stack, "stock", "k-1", &manager, good.clone()).await;
    assert_eq!(changed.status, StatusCode::OK, "{:?}", changed.body);
    assert_eq!(changed.data()["deduplicated"], false);
    assert_eq!(changed.data()["pool"]["capacity"], 150);
    assert_eq!(changed.data()["pool"]["revision"], "2");
    assert_eq!(pool_row(&stack.pg, "stock").await, (150, 0, 0, 2));
    let version = dependency_version(&stack, "stock").await;
    assert!(version.is_some(), "the pool's cached reads are invalidated");
    let replay = configure(&stack, "stock", "k-1", &manager, good.clone()).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.data()["deduplicated"], true);
    assert_eq!(replay.data()["pool"], changed.data()["pool"]);
    let reused = configure(
        &stack,
        "stock",
        "k-1",
        &manager,
        json!({"expected_revision": "2", "reason": "more seats", "capacity": 160}),
    )
    .await;
    assert_eq!(reused.code(), "IDEMPOTENCY_CONFLICT");
    assert_eq!(pool_row(&stack.pg, "stock").await, (150, 0, 0, 2));
    assert_eq!(
        dependency_version(&stack, "stock").await,
        version,
        "a replay changes nothing"
    );
    let audited: Vec<Value> = sqlx::query_scalar(
        "SELECT details FROM audit WHERE action = 'quota_pool.configure' AND namespace_id = $1",
    )
    .bind(ns)
    .fetch_all(&stack.pg)
    .await
    .expect("audit");
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0]["reason"], "more seats");
    assert_eq!(audited[0]["capacity_before"], 100);
    assert_eq!(audited[0]["capacity"], 150);
}

/// A capacity below what is allocated and reserved is refused; raising it lets commands still
/// waiting succeed; applying the same declaration again keeps the configured capacity, and a
/// declaration that changes the number sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_never_goes_below_use_and_raising_it_serves_waiting_commands() {
    let stack = Stack::with_declaration(&reserved_declaration(2, 300)).await;
    let executor = start_executor(&stack, fast_executor());
    let offer = offer();
    for subject in ["a", "b", "c"] {
        assert_eq!(
            hold(&stack, subject, &offer).await.status,
            StatusCode::ACCEPTED
        );
    }
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    assert_eq!(pool_row(&stack.pg, "seats").await, (2, 0, 2, 1));
    let lower = configure(
        &stack,
        "seats",
        "lower",
        &stack.credential(),
        json!({"expected_revision": "1", "reason": "oversold", "capacity": 1}),
    )
    .await;
    assert_eq!(
        (lower.status, lower.code()),
        (StatusCode::CONFLICT, "STATE_CONFLICT")
    );
    assert!(
        lower.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("reserved"),
        "{:?}",
        lower.body
    );
    assert_eq!(pool_row(&stack.pg, "seats").await, (2, 0, 2, 1));

    // Commands that wait while no executor runs are decided against the raised capacity.
    executor.cancel();
    let waiting: Vec<Reply> = {
        let mut receipts = Vec::new();
        for subject in ["d", "e"] {
            receipts.push(hold(&stack, subject, &offer).await);
        }
        receipts
    };
    let raised = configure(
        &stack,
        "seats",
        "raise",
        &stack.credential(),
        json!({"expected_revision": "1", "reason": "second block", "capacity": 4}),
    )
    .await;
    assert_eq!(raised.status, StatusCode::OK, "{:?}", raised.body);
    let executor = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    for receipt in &waiting {
        let (status, result, _) = landed(&stack, receipt).await;
        assert_eq!(
            (status.as_str(), &result["state"]),
            ("succeeded", &json!("reserved"))
        );
    }
    assert_eq!(pool_row(&stack.pg, "seats").await, (4, 0, 4, 2));
    assert_counts_match_rows(&stack.pg, "seats").await;

    // The same document again: the configured 4 stands. A changed number is applied.
    let declaration = reserved_declaration(2, 300);
    sluice_store::tenancy::apply_declaration(
        &stack.pg,
        stack.creds.namespace_id,
        &declaration,
        "test",
        None,
    )
    .await
    .expect("apply the same document");
    assert_eq!(pool_row(&stack.pg, "seats").await.0, 4);
    sluice_store::tenancy::apply_declaration(
        &stack.pg,
        stack.creds.namespace_id,
        &reserved_declaration(6, 300),
        "test",
        None,
    )
    .await
    .expect("apply a new capacity");
    assert_eq!(pool_row(&stack.pg, "seats").await.0, 6);
    let below = sluice_store::tenancy::apply_declaration(
        &stack.pg,
        stack.creds.namespace_id,
        &reserved_declaration(3, 300),
        "test",
        None,
    )
    .await;
    assert!(
        below.is_err(),
        "a declared capacity below the 4 held is refused"
    );
    assert_eq!(pool_row(&stack.pg, "seats").await.0, 6);
    executor.cancel();
}
