//! The configure round trip: read, change, read back, and the change holding at intake.

use serde_json::json;

use super::*;

#[tokio::test]
async fn a_configured_limit_is_read_back_and_holds_at_intake_across_namespaces() {
    let stack = Stack::start().await;
    let admin = join_namespace(&stack, "ops", true).await;
    let before = resources(&stack, &admin.credential).await;
    assert_eq!(before.status.as_u16(), 200, "{:?}", before.body);
    assert_eq!(before.data()["revision"], "1");
    assert_eq!(before.data()["max_unfinished_tasks"], 1_000_000);
    assert_eq!(before.data()["unfinished_tasks"], "0");
    let changed = configure(
        &stack,
        &admin.credential,
        Some("change-1"),
        &json!({"expected_revision": "1", "reason": "drop at 10:00", "max_unfinished_tasks": 1,
                "max_concurrency": 3, "rate_per_second": 50}),
    )
    .await;
    assert_eq!(changed.status.as_u16(), 200, "{:?}", changed.body);
    assert_eq!(changed.data()["deduplicated"], false);
    assert_eq!(changed.data()["resources"]["revision"], "2");
    assert_eq!(changed.data()["resources"]["max_concurrency"], 3);
    // The stack's own namespace takes the one slot; the other namespace is refused.
    let first = stack.enqueue("user-1", &key(), &offer()).await;
    assert_eq!(first.status.as_u16(), 202, "{:?}", first.body);
    let body = json!({"request_key": key(), "subject": "user-2", "input": {"offer": offer()}});
    let second = stack
        .post(
            "/v1/commands/claim:enqueue",
            Some(&admin.credential),
            &body.to_string(),
        )
        .await;
    assert_eq!(second.status.as_u16(), 429, "{:?}", second.body);
    assert_eq!(second.code(), "APPLICATION_FULL");
    let after = resources(&stack, &admin.credential).await;
    assert_eq!(after.data()["unfinished_tasks"], "1");
    assert_eq!(after.data()["revision"], "2");
}
