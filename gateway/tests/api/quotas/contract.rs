//! The contract of one reservation: reserved, then exactly one of confirmed, released or
//! expired; repeats are no-ops, the other action is `409`, only the holder decides, and the
//! once-per-subject fact outlives every state.

use super::*;

/// Holds a unit for `subject`; the command's receipt (read from PostgreSQL once it landed).
async fn held(stack: &Stack, subject: &str, offer: &str) -> Value {
    let receipt = hold(stack, subject, offer).await;
    assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
    assert!(all_terminal(stack, Duration::from_secs(20)).await, "landed");
    let (status, result, code) = landed(stack, &receipt).await;
    assert_eq!(status, "succeeded", "{code:?}");
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_is_confirmed_released_or_expired_exactly_once() {
    let stack = Stack::with_declaration(&reserved_declaration(3, 2)).await;
    let shutdown = start_executor(&stack, fast_executor());
    let offer = offer();
    let (alice, bob, carol) = (
        stack.subject_token("alice"),
        stack.subject_token("bob"),
        stack.subject_token("carol"),
    );

    // The receipt: reserved, with an expiry about `reservation_seconds` ahead.
    let a = held(&stack, "alice", &offer).await;
    assert_eq!(a["state"], "reserved", "{a}");
    let expires_at: chrono::DateTime<chrono::Utc> = a["expires_at"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("expires_at");
    let ahead = expires_at - chrono::Utc::now();
    assert!(
        ahead > chrono::TimeDelta::milliseconds(500) && ahead <= chrono::TimeDelta::seconds(2),
        "{ahead}"
    );
    let a_id = a["allocation_id"].as_str().expect("id").to_string();
    let b_id = held(&stack, "bob", &offer).await["allocation_id"]
        .as_str()
        .expect("id")
        .to_string();
    let c_id = held(&stack, "carol", &offer).await["allocation_id"]
        .as_str()
        .expect("id")
        .to_string();
    let (_, allocated, reserved, _) = pool_row(&stack.pg, "seats").await;
    assert_eq!((allocated, reserved), (0, 3));

    // Only the holder decides; a refusal changes nothing.
    let by_other = act(&stack, &a_id, "confirm", &bob).await;
    assert_eq!(
        by_other.status,
        StatusCode::FORBIDDEN,
        "{:?}",
        by_other.body
    );
    let released_by_other = act(&stack, &a_id, "release", &carol).await;
    assert_eq!(released_by_other.status, StatusCode::FORBIDDEN);
    let by_credential = act(&stack, &a_id, "release", &stack.credential()).await;
    assert_eq!(by_credential.status, StatusCode::FORBIDDEN);
    assert_eq!(states(&stack.pg, "seats").await.get("reserved"), Some(&3));

    // Confirm, and its repeat; the other action afterwards is a conflict.
    let confirmed = act(&stack, &a_id, "confirm", &alice).await;
    assert_eq!(confirmed.status, StatusCode::OK, "{:?}", confirmed.body);
    assert_eq!(confirmed.data()["state"], "confirmed");
    assert_eq!(confirmed.data()["changed"], true);
    assert!(
        confirmed.data().get("expires_at").is_none(),
        "{:?}",
        confirmed.body
    );
    let again = act(&stack, &a_id, "confirm", &alice).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.data()["changed"], false);
    let late_release = act(&stack, &a_id, "release", &alice).await;
    assert_eq!(late_release.status, StatusCode::CONFLICT);
    assert_eq!(late_release.code(), "STATE_CONFLICT");
    assert_eq!(late_release.body["error"]["details"]["state"], "confirmed");

    // Release gives the unit back; confirm afterwards is a conflict.
    let released = act(&stack, &b_id, "release", &bob).await;
    assert_eq!(released.status, StatusCode::OK, "{:?}", released.body);
    assert_eq!(released.data()["state"], "released");
    assert_eq!(
        act(&stack, &b_id, "release", &bob).await.data()["changed"],
        false
    );
    let late_confirm = act(&stack, &b_id, "confirm", &bob).await;
    assert_eq!(late_confirm.status, StatusCode::CONFLICT);
    assert_eq!(late_confirm.body["error"]["details"]["state"], "released");
    let (_, allocated, reserved, _) = pool_row(&stack.pg, "seats").await;
    assert_eq!(
        (allocated, reserved),
        (1, 1),
        "alice allocated, carol reserved"
    );

    // Carol lets hers lapse: the GET says expired by the database's clock, the sweeper writes
    // it, and a confirm afterwards is a conflict. (Polled with the credential: a subject's own
    // reads are rate-limited.)
    let expired = eventually(Duration::from_secs(10), || async {
        stack
            .get(
                &format!("/v1/allocations/{c_id}"),
                Some(&stack.credential()),
            )
            .await
            .data()["state"]
            == "expired"
    })
    .await;
    assert!(expired, "carol's reservation expires");
    let swept = eventually(Duration::from_secs(10), || async {
        states(&stack.pg, "seats").await.get("expired") == Some(&1)
    })
    .await;
    assert!(swept, "the sweeper writes the expiry");
    let too_late = act(&stack, &c_id, "confirm", &carol).await;
    assert_eq!(too_late.status, StatusCode::CONFLICT);
    assert_eq!(too_late.body["error"]["details"]["state"], "expired");
    assert_counts_match_rows(&stack.pg, "seats").await;
    let (_, allocated, reserved, _) = pool_row(&stack.pg, "seats").await;
    assert_eq!((allocated, reserved), (1, 0));

    // Released and expired never allow the same subject a second unit; others get them.
    for subject in ["bob", "carol"] {
        let receipt = hold(&stack, subject, &offer).await;
        assert!(all_terminal(&stack, Duration::from_secs(20)).await);
        let (status, _, code) = landed(&stack, &receipt).await;
        assert_eq!(
            (status.as_str(), code.as_deref()),
            ("rejected", Some("ALREADY_ALLOCATED"))
        );
    }
    for subject in ["dave", "erin"] {
        assert_eq!(held(&stack, subject, &offer).await["state"], "reserved");
    }
    let receipt = hold(&stack, "frank", &offer).await;
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    assert_eq!(
        landed(&stack, &receipt).await.2.as_deref(),
        Some("SOLD_OUT")
    );
    assert_counts_match_rows(&stack.pg, "seats").await;
    shutdown.cancel();
}

/// Who may read an allocation: its holder and `quotas:manage`; not another subject, not a
/// credential without the scope. Unknown and malformed ids are 404 and 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_is_read_by_its_holder_or_a_quota_manager() {
    let stack = Stack::with_declaration(&reserved_declaration(3, 300)).await;
    let shutdown = start_executor(&stack, fast_executor());
    let result = held(&stack, "alice", &offer()).await;
    let id = result["allocation_id"].as_str().expect("id");
    let path = format!("/v1/allocations/{id}");
    let mine = stack.get(&path, Some(&stack.subject_token("alice"))).await;
    assert_eq!(mine.status, StatusCode::OK, "{:?}", mine.body);
    assert_eq!(mine.data()["state"], "reserved");
    assert_eq!(mine.data()["pool"], "seats");
    assert_eq!(mine.data()["subject"], "alice");
    assert_eq!(mine.data()["expires_at"], result["expires_at"]);
    assert!(mine.data().get("changed").is_none());
    let manager =
        credential_with_scopes(&stack, stack.creds.namespace_id, &["quotas:manage"]).await;
    assert_eq!(
        stack.get(&path, Some(&manager)).await.status,
        StatusCode::OK
    );
    let reader = credential_with_scopes(&stack, stack.creds.namespace_id, &["commands:read"]).await;
    let refused = stack.get(&path, Some(&reader)).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    let other = stack.get(&path, Some(&stack.subject_token("bob"))).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    let unknown = stack
        .get(
            &format!("/v1/allocations/{}", uuid::Uuid::now_v7()),
            Some(&stack.subject_token("alice")),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.code(), "NOT_FOUND");
    let malformed = stack
        .get(
            "/v1/allocations/not-a-uuid",
            Some(&stack.subject_token("alice")),
        )
        .await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);
    // Strict bodies: anything but nothing or `{}` is refused before anything changes.
    let alice = stack.subject_token("alice");
    let with_field = stack
        .post(
            &format!("{path}:confirm"),
            Some(&alice),
            r#"{"subject":"alice"}"#,
        )
        .await;
    assert_eq!(
        with_field.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        with_field.body
    );
    assert_eq!(with_field.field(), "subject");
    assert_eq!(states(&stack.pg, "seats").await.get("reserved"), Some(&1));
    let empty_object = stack
        .post(&format!("{path}:confirm"), Some(&alice), "{}")
        .await;
    assert_eq!(
        empty_object.status,
        StatusCode::OK,
        "{:?}",
        empty_object.body
    );
    let unknown_verb = stack
        .post(&format!("{path}:extend"), Some(&alice), "{}")
        .await;
    assert_eq!(unknown_verb.status, StatusCode::NOT_FOUND);
    shutdown.cancel();
}

/// A committed unit is `confirmed` from the start: confirming it repeats, releasing it is a
/// conflict (committed means it cannot be given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_unit_is_confirmed_and_cannot_be_released() {
    let stack = Stack::start().await;
    let shutdown = start_executor(&stack, fast_executor());
    let receipt = stack.enqueue("alice", &key(), &offer()).await;
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    let (_, result, _) = landed(&stack, &receipt).await;
    assert_eq!(result["state"], "confirmed");
    assert!(result.get("expires_at").is_none(), "{result}");
    let id = result["allocation_id"].as_str().expect("id");
    let alice = stack.subject_token("alice");
    assert_eq!(
        act(&stack, id, "confirm", &alice).await.data()["changed"],
        false
    );
    let release = act(&stack, id, "release", &alice).await;
    assert_eq!(release.status, StatusCode::CONFLICT);
    assert_eq!(pool_row(&stack.pg, "stock").await.1, 1);
    shutdown.cancel();
}

/// A unit whose reservation lapsed is sold again at once, even before any sweeper runs: the
/// handler expires what the database's clock has passed before it counts the free units, so
/// nobody is told `SOLD_OUT` while a lapsed unit waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_unit_is_sold_again_before_the_sweeper_runs() {
    let stack = Stack::with_declaration(&reserved_declaration(1, 1)).await;
    let no_sweeps = sluice_executor::ExecutorConfig {
        sweep_interval_ms: 3_600_000,
        ..fast_executor()
    };
    let shutdown = start_executor(&stack, no_sweeps);
    let offer = offer();
    let first = held(&stack, "alice", &offer).await;
    let id = first["allocation_id"].as_str().expect("id");
    let lapsed = eventually(Duration::from_secs(10), || async {
        stack
            .get(&format!("/v1/allocations/{id}"), Some(&stack.credential()))
            .await
            .data()["state"]
            == "expired"
    })
    .await;
    assert!(lapsed, "alice's reservation lapses by the database's clock");
    assert_eq!(
        states(&stack.pg, "seats").await.get("reserved"),
        Some(&1),
        "no sweeper has written it"
    );
    let second = held(&stack, "bob", &offer).await;
    assert_eq!(second["state"], "reserved", "bob gets the lapsed unit");
    let by_state = states(&stack.pg, "seats").await;
    assert_eq!(
        (by_state.get("expired"), by_state.get("reserved")),
        (Some(&1), Some(&1))
    );
    assert_counts_match_rows(&stack.pg, "seats").await;
    shutdown.cancel();
}
