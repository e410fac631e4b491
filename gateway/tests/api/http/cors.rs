//! CORS per namespace: browsers of allowed origins can read answers (refusals included), other
//! origins get no CORS grant.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::json;

use crate::support::*;

const SHOP: &str = "https://shop.example";

fn declaration() -> String {
    format!("[namespace]\nallowed_origins = [\"{SHOP}\"]\n{CLAIM_DECLARATION}")
}

fn allow_origin(reply: &Reply) -> Option<String> {
    reply
        .headers
        .get("access-control-allow-origin")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A preflight from an allowed origin is granted; from another origin it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_grants_only_declared_origins() {
    let stack = Stack::with_declaration(&declaration()).await;
    let preflight = |origin: &'static str| {
        let stack = &stack;
        async move {
            stack
                .request_with(
                    Method::OPTIONS,
                    "/v1/commands/claim:enqueue",
                    None,
                    None,
                    &[
                        ("origin", origin),
                        ("access-control-request-method", "POST"),
                        (
                            "access-control-request-headers",
                            "authorization, content-type",
                        ),
                    ],
                )
                .await
        }
    };
    let granted = preflight(SHOP).await;
    assert_eq!(granted.status, StatusCode::NO_CONTENT);
    assert_eq!(allow_origin(&granted).as_deref(), Some(SHOP));
    let methods = granted
        .headers
        .get("access-control-allow-methods")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(methods.contains("POST"), "{methods}");
    let refused = preflight("https://evil.example").await;
    assert_eq!(allow_origin(&refused), None);
}

/// Real answers, refusals too, carry the grant for the namespace's own origins only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_carry_the_grant_of_their_namespace() {
    let stack = Stack::with_declaration(&declaration()).await;
    let token = stack.subject_token("user-1");
    let body = json!({"request_key": key(), "input": {"offer": offer()}}).to_string();
    let enqueue = |origin: &'static str, body: String| {
        let (stack, token) = (&stack, token.clone());
        async move {
            stack
                .request_with(
                    Method::POST,
                    "/v1/commands/claim:enqueue",
                    Some(&token),
                    Some(Bytes::from(body)),
                    &[("origin", origin)],
                )
                .await
        }
    };
    let accepted = enqueue(SHOP, body.clone()).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    assert_eq!(allow_origin(&accepted).as_deref(), Some(SHOP));
    let exposed = accepted
        .headers
        .get("access-control-expose-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(exposed.contains("retry-after"), "{exposed}");

    let other = enqueue("https://evil.example", body.clone()).await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "the request itself is still answered (replay)"
    );
    assert_eq!(allow_origin(&other), None);

    let invalid = enqueue(SHOP, "{}".to_string()).await;
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        allow_origin(&invalid).as_deref(),
        Some(SHOP),
        "a browser must be able to read refusals"
    );

    let ticket = accepted.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();
    let poll = stack
        .request_with(
            Method::GET,
            &format!("/v1/tickets/{ticket}"),
            None,
            None,
            &[("origin", SHOP)],
        )
        .await;
    assert_eq!(poll.status, StatusCode::OK);
    assert_eq!(allow_origin(&poll).as_deref(), Some(SHOP));
}
