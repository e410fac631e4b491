//! Webhook secret rotation: while a rotation is in progress every request carries a signature
//! of each live secret, so a backend that still checks the old secret and one that already
//! checks the new one both accept it; once the old one is retired, only the new one verifies.
//! The backend checks every signature itself (`webhook_backend::verify`).

use std::time::Duration;

use sluice_durable::DurableError;
use sluice_store::webhook_secret;

use super::*;
use crate::execution::{fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_signs_with_both_secrets_until_the_old_one_is_retired() {
    let backend = Backend::start(handler(|_| async {
        Answer::succeeded(serde_json::json!({}))
    }))
    .await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let executor = start_executor(&stack, fast_executor());
    let old = stack.creds.webhook_secret.clone();
    let ns = stack.creds.namespace_id;

    // Before: the bootstrap secret signs.
    let first = enqueue_ocr(&stack, "u", "p", "a", "1").await;
    assert!(arrives(&backend, &first, Duration::from_secs(10)).await);
    assert!(arrivals_of(&backend, &first)[0].signature_valid);

    let new = webhook_secret::rotate(&stack.pg, ns, "test")
        .await
        .expect("rotate");
    assert_ne!(new, old);
    assert!(
        matches!(
            webhook_secret::rotate(&stack.pg, ns, "test").await,
            Err(DurableError::StateConflict(_))
        ),
        "a second rotation before the retire would drop a live secret"
    );
    // Once the executor's catalog has the rotation, a request verifies with either secret.
    let both = eventually(Duration::from_secs(10), || async {
        let id = enqueue_ocr(&stack, "u", "p", "a", "2").await;
        arrives(&backend, &id, Duration::from_secs(10)).await;
        let arrival = arrivals_of(&backend, &id).remove(0);
        let header = arrival.signature.clone();
        header.matches("v1=").count() == 2
            && crate::support::webhook_backend::verify(&old, &header, &arrival.raw)
            && crate::support::webhook_backend::verify(&new, &header, &arrival.raw)
    })
    .await;
    assert!(both, "during the rotation both secrets sign every request");

    webhook_secret::retire(&stack.pg, ns, "test")
        .await
        .expect("retire");
    assert!(
        matches!(
            webhook_secret::retire(&stack.pg, ns, "test").await,
            Err(DurableError::StateConflict(_))
        ),
        "nothing left to retire"
    );
    let only_new = eventually(Duration::from_secs(10), || async {
        let id = enqueue_ocr(&stack, "u", "p", "a", "3").await;
        arrives(&backend, &id, Duration::from_secs(10)).await;
        let arrival = arrivals_of(&backend, &id).remove(0);
        crate::support::webhook_backend::verify(&new, &arrival.signature, &arrival.raw)
            && !crate::support::webhook_backend::verify(&old, &arrival.signature, &arrival.raw)
    })
    .await;
    assert!(only_new, "after the retire only the new secret signs");
    let audited: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit WHERE namespace_id = $1 AND action LIKE 'webhook_secret.%' ORDER BY id",
    )
    .bind(ns)
    .fetch_all(&stack.pg)
    .await
    .expect("audit");
    assert_eq!(audited, ["webhook_secret.rotate", "webhook_secret.retire"]);
    executor.cancel();
}
