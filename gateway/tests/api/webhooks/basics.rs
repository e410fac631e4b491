//! A webhook command from acceptance to its result: the request the backend sees, and a `200`.

use std::time::Duration;

use serde_json::json;

use super::*;
use crate::execution::{fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};

#[tokio::test]
async fn a_200_lands_the_backends_result_with_a_signed_request() {
    let backend = Backend::start(handler(|arrival| async move {
        Answer::succeeded(json!({"pages": arrival.body["input"]["doc"].as_str().map(str::len)}))
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let executor = start_executor(&stack, fast_executor());
    let id = enqueue_ocr(&stack, "user-1", "gitee", "a", "report").await;
    assert_reaches(&stack, &id, "succeeded", Duration::from_secs(10)).await;
    let row = row(&stack, &id).await;
    assert_eq!(row["result"], json!({"pages": 6}));
    assert_eq!(row["attempts"], 1);
    let arrivals = backend.arrivals();
    assert_eq!(arrivals.len(), 1);
    let seen = &arrivals[0];
    assert!(
        seen.signature_valid,
        "the backend verifies the signature with the webhook secret"
    );
    assert_eq!(seen.idempotency_key, id);
    assert_eq!(seen.body["command_id"], id.as_str());
    assert_eq!(seen.body["command"], "ocr");
    assert_eq!(seen.body["namespace"], "main");
    assert_eq!(seen.body["subject"], "user-1");
    assert_eq!(seen.body["resource_key"], "a");
    assert_eq!(seen.body["attempt"], 1);
    assert_eq!(
        seen.body["input"],
        json!({"provider": "gitee", "account": "a", "doc": "report"})
    );
    assert!(seen.body["accepted_at"].is_string() && seen.body["deadline_at"].is_string());
    // Every count went back.
    crate::execution::assert_unfinished_drains(&stack).await;
    // A backend repeating the result that landed changes nothing; another result conflicts.
    let again = complete(
        &stack,
        &id,
        json!({"outcome": "succeeded", "result": {"pages": 6}}),
    )
    .await;
    assert_eq!(again.status.as_u16(), 200, "{:?}", again.body);
    assert_eq!(again.data()["status"], "succeeded");
    let other = complete(&stack, &id, json!({"outcome": "failed"})).await;
    assert_eq!(other.status.as_u16(), 409, "{:?}", other.body);
    assert_eq!(other.code(), "STATE_CONFLICT");
    assert_eq!(super::row(&stack, &id).await["status"], "succeeded");
    executor.cancel();
}
