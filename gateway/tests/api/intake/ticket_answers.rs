//! The ticket answer serves browsers: while a command may still change it advises when to poll
//! again and may not be stored; once final it advises nothing (`poll_after_ms: null`) and a
//! browser may keep it. A replayed enqueue of a final command advises nothing either.

use std::time::Duration;

use hyper::StatusCode;
use serde_json::Value;

use crate::execution::{fast_executor, start_executor};
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_status_advises_no_further_polling_and_may_be_kept() {
    let stack = Stack::start().await;
    let request_key = key();
    let offer = offer();
    let receipt = stack.enqueue("u1", &request_key, &offer).await;
    assert_eq!(receipt.status, StatusCode::ACCEPTED);
    let ticket = receipt.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();

    let waiting = stack.poll(&ticket).await;
    assert_eq!(waiting.data()["status"], "accepted");
    assert!(waiting.data()["poll_after_ms"].as_u64().is_some());
    assert_eq!(waiting.headers["cache-control"], "no-store");

    let executor = start_executor(&stack, fast_executor());
    let ended = eventually(Duration::from_secs(10), || async {
        stack.poll(&ticket).await.data()["status"] == "succeeded"
    })
    .await;
    assert!(ended, "the claim succeeds");
    let done = stack.poll(&ticket).await;
    assert_eq!(done.data()["poll_after_ms"], Value::Null);
    assert_eq!(
        done.headers["cache-control"],
        "private, max-age=3600, immutable"
    );
    let replay = stack.enqueue("u1", &request_key, &offer).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.data()["status"], "succeeded");
    assert_eq!(replay.data()["poll_after_ms"], Value::Null);
    assert_eq!(replay.headers["cache-control"], "no-store");
    executor.cancel();
}
