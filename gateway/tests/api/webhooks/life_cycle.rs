//! A webhook command that answers `202` from acceptance to its end: `running` holds the account's
//! permit until `:complete` (or the deadline), the next command of that account waits for it,
//! another account's does not; cancels of running and of waiting commands.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::execution::{cancel, counter, fast_executor, record, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};

/// The account limit key of `account` at provider gitee.
fn account(account: &str) -> String {
    format!("account:gitee:{account}")
}

/// A backend that answers `202` to everything, and a stack whose `ocr` allows one command in
/// flight per account.
async fn accepting_backend(deadline_seconds: u32) -> (Backend, Stack) {
    let backend = Backend::start(handler(|_| async { Answer::status(202) })).await;
    let stack = ocr_stack(&backend, 2_000, deadline_seconds, ACCOUNT_LIMIT).await;
    (backend, stack)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_command_holds_its_accounts_permit_until_complete() {
    let (backend, stack) = accepting_backend(60).await;
    let a = enqueue_ocr(&stack, "user-1", "gitee", "a", "first").await;
    let b = enqueue_ocr(&stack, "user-2", "gitee", "a", "second").await;
    let executor = start_executor(&stack, fast_executor());

    assert!(arrives(&backend, &a, Duration::from_secs(10)).await);
    assert_reaches(&stack, &a, "running", Duration::from_secs(5)).await;
    assert!(holds_limit(&stack, &account("a"), &a).await);
    assert_eq!(polled_status(&stack, &a).await, "running");

    // B waits for A's permit: never sent while A runs (the executor ticks every 20 ms).
    assert!(
        never_arrives(&backend, &b, Duration::from_secs(1)).await,
        "B was sent while A held the account's only permit"
    );
    let waiting = row(&stack, &b).await;
    assert_eq!(waiting["status"], "accepted", "{waiting}");
    assert_eq!(waiting["attempts"], 0, "{waiting}");

    // Another account is not held back by A.
    let c = enqueue_ocr(&stack, "user-3", "gitee", "b", "other").await;
    assert!(
        arrives(&backend, &c, Duration::from_secs(3)).await,
        "another account's command waited behind A"
    );
    assert_reaches(&stack, &c, "running", Duration::from_secs(5)).await;
    assert!(arrivals_of(&backend, &b).is_empty());

    // A's result frees the permit; B goes next.
    let done = complete(
        &stack,
        &a,
        json!({"outcome": "succeeded", "result": {"pages": 2}}),
    )
    .await;
    assert_eq!(done.status.as_u16(), 200, "{:?}", done.body);
    assert_eq!(done.data()["status"], "succeeded");
    assert_eq!(done.data()["result"], json!({"pages": 2}));
    let landed = row(&stack, &a).await;
    assert_eq!(landed["status"], "succeeded");
    assert_eq!(landed["result"], json!({"pages": 2}));
    assert_eq!(polled_status(&stack, &a).await, "succeeded");
    assert!(!holds_limit(&stack, &account("a"), &a).await);
    assert!(
        arrives(&backend, &b, Duration::from_secs(5)).await,
        "B was not sent after A completed"
    );
    assert_reaches(&stack, &b, "running", Duration::from_secs(5)).await;
    assert_eq!(arrivals_of(&backend, &a).len(), 1);
    assert_eq!(arrivals_of(&backend, &b).len(), 1);
    assert_eq!(arrivals_of(&backend, &b)[0].body["attempt"], 1);

    // Both remaining results land and every count goes back.
    for id in [&b, &c] {
        let done = complete(&stack, id, json!({"outcome": "succeeded"})).await;
        assert_eq!(done.status.as_u16(), 200, "{:?}", done.body);
    }
    assert!(unfinished_becomes(&stack, 0).await);
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_running_command_records_the_intent_and_complete_decides() {
    let (backend, stack) = accepting_backend(60).await;
    let executor = start_executor(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "doc").await;
    assert_reaches(&stack, &id, "running", Duration::from_secs(10)).await;
    assert!(holds_limit(&stack, &account("a"), &id).await);

    let cancelled = cancel(&stack, &id).await;
    assert_eq!(cancelled.status.as_u16(), 200, "{:?}", cancelled.body);
    assert_eq!(cancelled.data()["status"], "running");
    assert_eq!(cancelled.data()["cancel_requested"], true);
    let intent = row(&stack, &id).await;
    assert_eq!(intent["status"], "running", "{intent}");
    assert_eq!(intent["cancel_requested"], true, "{intent}");
    // The backend still has it: its permit stays held.
    assert!(holds_limit(&stack, &account("a"), &id).await);
    assert_eq!(counter(&stack, "unfinished").await, 1);

    // The backend's authoritative result decides, not the cancel.
    let done = complete(
        &stack,
        &id,
        json!({"outcome": "succeeded", "result": {"pages": 1}}),
    )
    .await;
    assert_eq!(done.status.as_u16(), 200, "{:?}", done.body);
    assert_eq!(done.data()["status"], "succeeded");
    let landed = row(&stack, &id).await;
    assert_eq!(landed["status"], "succeeded", "{landed}");
    assert_eq!(landed["result"], json!({"pages": 1}));
    assert_eq!(polled_status(&stack, &id).await, "succeeded");
    assert!(unfinished_becomes(&stack, 0).await);
    assert!(
        !holds_limit(&stack, &account("a"), &id).await,
        "the account's permit was not released"
    );
    assert_eq!(arrivals_of(&backend, &id).len(), 1);
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_waiting_command_ends_it_before_it_is_sent() {
    let (backend, stack) = accepting_backend(60).await;
    let executor = start_executor(&stack, fast_executor());
    let a = enqueue_ocr(&stack, "user-1", "gitee", "a", "first").await;
    assert_reaches(&stack, &a, "running", Duration::from_secs(10)).await;
    // The account is saturated: B waits.
    let b = enqueue_ocr(&stack, "user-2", "gitee", "a", "second").await;
    let cancelled = cancel(&stack, &b).await;
    assert_eq!(cancelled.status.as_u16(), 200, "{:?}", cancelled.body);
    assert_eq!(cancelled.data()["status"], "cancelled");
    let ended = row(&stack, &b).await;
    assert_eq!(ended["status"], "cancelled", "{ended}");
    assert_eq!(ended["attempts"], 0, "{ended}");
    assert_eq!(polled_status(&stack, &b).await, "cancelled");

    // A's permit comes free, and B is still never sent.
    let done = complete(&stack, &a, json!({"outcome": "succeeded"})).await;
    assert_eq!(done.status.as_u16(), 200, "{:?}", done.body);
    assert!(
        never_arrives(&backend, &b, Duration::from_secs(1)).await,
        "a cancelled command was sent to the backend"
    );
    assert_eq!(row(&stack, &b).await["status"], "cancelled");
    assert!(unfinished_becomes(&stack, 0).await);
    executor.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_202_without_complete_ends_needs_review_and_a_late_complete_resolves_it() {
    let (backend, stack) = accepting_backend(2).await;
    let executor = start_executor(&stack, fast_executor());
    let a = enqueue_ocr(&stack, "user-1", "gitee", "a", "first").await;
    assert_reaches(&stack, &a, "running", Duration::from_secs(5)).await;
    assert_reaches(&stack, &a, "needs_review", Duration::from_secs(10)).await;
    let reviewed = row(&stack, &a).await;
    assert_eq!(reviewed["error_code"], "OUTCOME_UNKNOWN", "{reviewed}");
    assert_eq!(record(&stack, &a).await.data()["status"], "needs_review");
    assert!(
        eventually(Duration::from_secs(5), || async {
            polled_status(&stack, &a).await == "needs_review"
        })
        .await,
        "the projection shows {}",
        polled_status(&stack, &a).await
    );
    // Still unfinished (the backend may have done it), but its permit went back.
    assert_eq!(counter(&stack, "unfinished").await, 1);
    assert!(
        !holds_limit(&stack, &account("a"), &a).await,
        "a needs_review command still holds its account's permit"
    );
    let b = enqueue_ocr(&stack, "user-2", "gitee", "a", "second").await;
    assert!(
        arrives(&backend, &b, Duration::from_secs(5)).await,
        "the account stayed blocked by a needs_review command"
    );
    assert_eq!(arrivals_of(&backend, &a).len(), 1);

    // The backend reports late: the result lands, the command is counted out.
    let late = complete(
        &stack,
        &a,
        json!({"outcome": "succeeded", "result": {"pages": 9}}),
    )
    .await;
    assert_eq!(late.status.as_u16(), 200, "{:?}", late.body);
    assert_eq!(late.data()["status"], "succeeded");
    let resolved = row(&stack, &a).await;
    assert_eq!(resolved["status"], "succeeded", "{resolved}");
    assert_eq!(resolved["result"], json!({"pages": 9}));
    assert_eq!(polled_status(&stack, &a).await, "succeeded");
    // B is still open (running or needs_review by now): exactly one share left.
    assert_eq!(counter(&stack, "unfinished").await, 1);
    assert!(
        eventually(Duration::from_secs(5), || async {
            let status = row(&stack, &b).await["status"].clone();
            status == "running" || status == "needs_review"
        })
        .await,
        "{}",
        row(&stack, &b).await
    );
    let done = complete(&stack, &b, json!({"outcome": "failed"})).await;
    assert_eq!(done.status.as_u16(), 200, "{:?}", done.body);
    assert!(unfinished_becomes(&stack, 0).await);
    executor.cancel();
}
