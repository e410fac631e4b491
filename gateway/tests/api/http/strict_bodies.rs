//! Every strict-JSON case of API.md is a 400 naming the field, and writes nothing.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::support::*;

const ENQUEUE: &str = "/v1/commands/claim:enqueue";
const OFFER: &str = "0b0c7d4e-1a2b-4c3d-8e9f-001122334455";

/// A declaration whose input is three long strings, to reach the 8 KiB input bound.
const NOTES_DECLARATION: &str = r#"
[[command]]
code = "note"
parameters = { a = { type = "string", max_length = 4096 }, b = { type = "string", max_length = 4096 }, c = { type = "string", max_length = 4096 } }
resource_key = { from = "constant", value = "notes" }
intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }
admission = { max_queue = 1000000 }
handler = { kind = "webhook", url = "http://127.0.0.1:9/note" }
"#;

/// A declaration with a bounded integer parameter.
const ORDER_DECLARATION: &str = r#"
[[command]]
code = "order"
parameters = { qty = { type = "integer", min = 1, max = 5 }, offer = { type = "uuid" } }
resource_key = { from = "input", field = "offer" }
intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }
admission = { max_queue = 1000000 }
handler = { kind = "quota", pool = "stock", mode = "committed" }

[[quota_pool]]
code = "stock"
capacity = 100
"#;

/// Posts raw bytes to `path` with the namespace credential.
async fn post_raw(stack: &Stack, path: &str, body: Vec<u8>) -> Reply {
    let credential = stack.credential();
    stack
        .request(
            Method::POST,
            path,
            Some(&credential),
            Some(Bytes::from(body)),
        )
        .await
}

/// Asserts a `400 INVALID_ARGUMENT` naming `field`.
fn assert_invalid(reply: &Reply, field: &str, what: &str) {
    assert_eq!(
        reply.status,
        StatusCode::BAD_REQUEST,
        "{what}: {:?}",
        reply.body
    );
    assert_eq!(reply.code(), "INVALID_ARGUMENT", "{what}: {:?}", reply.body);
    assert_eq!(reply.field(), field, "{what}: {:?}", reply.body);
}

/// Asserts the stack holds no row, no reservation of `command` and no non-zero Redis counter.
async fn assert_nothing_written(stack: &Stack, command: &str) {
    assert_eq!(stack.count_rows().await, 0, "rows");
    assert_eq!(stack.reservations(command).await, 0, "reservations");
    let counters = stack.counters().await;
    assert!(
        counters.values().all(|v| *v == 0),
        "counters must all be zero: {counters:?}"
    );
}

/// Every malformed enqueue body of API.md's strict-JSON list is `400 INVALID_ARGUMENT` naming
/// the field, and none leaves a row, a reservation or a count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_enqueue_body_is_400_naming_the_field() {
    let stack = Stack::start().await;
    let o = format!("\"{OFFER}\"");
    let long_key = "k".repeat(129);
    let long_subject = "s".repeat(129);
    let nested = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let cases: Vec<(&str, String, &str)> = vec![
        // Unknown fields, duplicates, wrong case.
        (
            "unknown top-level field",
            format!(r#"{{"request_key":"k","subject":"u","input":{{"offer":{o}}},"priority":1}}"#),
            "priority",
        ),
        (
            "duplicate request_key",
            format!(
                r#"{{"request_key":"a","request_key":"b","subject":"u","input":{{"offer":{o}}}}}"#
            ),
            "request_key",
        ),
        (
            "duplicate request_key, equal values",
            format!(
                r#"{{"request_key":"a","subject":"u","input":{{"offer":{o}}},"request_key":"a"}}"#
            ),
            "request_key",
        ),
        (
            "duplicate through an escape",
            format!(
                r#"{{"request_key":"a","request\u005fkey":"b","subject":"u","input":{{"offer":{o}}}}}"#
            ),
            "request_key",
        ),
        (
            "duplicate subject",
            format!(r#"{{"request_key":"a","subject":"u","subject":"v","input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        (
            "duplicate input",
            format!(
                r#"{{"request_key":"a","subject":"u","input":{{"offer":{o}}},"input":{{"offer":{o}}}}}"#
            ),
            "input",
        ),
        (
            "duplicate inside input",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{o},"offer":{o}}}}}"#),
            "input.offer",
        ),
        (
            "wrong case alone",
            format!(r#"{{"Request_key":"a","subject":"u","input":{{"offer":{o}}}}}"#),
            "Request_key",
        ),
        (
            "wrong case beside the right one",
            format!(
                r#"{{"request_key":"a","Request_key":"a","subject":"u","input":{{"offer":{o}}}}}"#
            ),
            "Request_key",
        ),
        (
            "wrong case subject",
            format!(r#"{{"request_key":"a","SUBJECT":"u","input":{{"offer":{o}}}}}"#),
            "SUBJECT",
        ),
        (
            "wrong case input",
            format!(r#"{{"request_key":"a","subject":"u","Input":{{"offer":{o}}}}}"#),
            "Input",
        ),
        (
            "wrong case inside input",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"Offer":{o}}}}}"#),
            "input.Offer",
        ),
        // Null where a value is required.
        (
            "null request_key",
            format!(r#"{{"request_key":null,"subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "null subject",
            format!(r#"{{"request_key":"a","subject":null,"input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        (
            "null input",
            r#"{"request_key":"a","subject":"u","input":null}"#.to_string(),
            "input",
        ),
        (
            "null offer",
            r#"{"request_key":"a","subject":"u","input":{"offer":null}}"#.to_string(),
            "input.offer",
        ),
        // Wrong types.
        (
            "request_key number",
            format!(r#"{{"request_key":7,"subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key boolean",
            format!(r#"{{"request_key":true,"subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key array",
            format!(r#"{{"request_key":["a"],"subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "subject number",
            format!(r#"{{"request_key":"a","subject":42,"input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        (
            "input array",
            format!(r#"{{"request_key":"a","subject":"u","input":[{o}]}}"#),
            "input",
        ),
        (
            "input string",
            format!(r#"{{"request_key":"a","subject":"u","input":{o}}}"#),
            "input",
        ),
        (
            "offer integer",
            r#"{"request_key":"a","subject":"u","input":{"offer":7}}"#.to_string(),
            "input.offer",
        ),
        (
            "offer object",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{{"id":{o}}}}}}}"#),
            "input.offer",
        ),
        (
            "offer array",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":[{o}]}}}}"#),
            "input.offer",
        ),
        // Values the parameter's type refuses.
        (
            "offer not a uuid",
            r#"{"request_key":"a","subject":"u","input":{"offer":"not-a-uuid"}}"#.to_string(),
            "input.offer",
        ),
        (
            "offer upper case",
            format!(
                r#"{{"request_key":"a","subject":"u","input":{{"offer":"{}"}}}}"#,
                OFFER.to_uppercase()
            ),
            "input.offer",
        ),
        (
            "offer without hyphens",
            format!(
                r#"{{"request_key":"a","subject":"u","input":{{"offer":"{}"}}}}"#,
                OFFER.replace('-', "")
            ),
            "input.offer",
        ),
        (
            "offer in braces",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":"{{{OFFER}}}"}}}}"#),
            "input.offer",
        ),
        (
            "unknown input field",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{o},"note":"x"}}}}"#),
            "input.note",
        ),
        (
            "missing input field",
            r#"{"request_key":"a","subject":"u","input":{}}"#.to_string(),
            "input.offer",
        ),
        // Missing fields.
        (
            "missing request_key",
            format!(r#"{{"subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "missing input",
            r#"{"request_key":"a","subject":"u"}"#.to_string(),
            "input",
        ),
        (
            "missing subject with a credential",
            format!(r#"{{"request_key":"a","input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        // Request keys and subjects out of their bounds.
        (
            "request_key empty",
            format!(r#"{{"request_key":"","subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key 129 chars",
            format!(r#"{{"request_key":"{long_key}","subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key with a space",
            format!(r#"{{"request_key":"a b","subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key with a tab",
            format!(r#"{{"request_key":"a\tb","subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key with DEL",
            format!(r#"{{"request_key":"a\u007fb","subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "request_key non-ASCII",
            format!(r#"{{"request_key":"café","subject":"u","input":{{"offer":{o}}}}}"#),
            "request_key",
        ),
        (
            "subject 129 chars",
            format!(r#"{{"request_key":"a","subject":"{long_subject}","input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        (
            "subject empty",
            format!(r#"{{"request_key":"a","subject":"","input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        (
            "subject with a control character",
            format!(r#"{{"request_key":"a","subject":"u\u0000v","input":{{"offer":{o}}}}}"#),
            "subject",
        ),
        // Not a JSON object.
        (
            "invalid JSON",
            r#"{"request_key":"a","subject":"#.to_string(),
            "body",
        ),
        (
            "trailing garbage",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{o}}}}} x"#),
            "body",
        ),
        (
            "two objects",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{o}}}}}{{}}"#),
            "body",
        ),
        (
            "trailing comma",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{o}}},}}"#),
            "body",
        ),
        (
            "single quotes",
            format!(r#"{{'request_key':'a','subject':'u','input':{{'offer':{o}}}}}"#),
            "body",
        ),
        (
            "a comment",
            format!(r#"{{/* hi */"request_key":"a","subject":"u","input":{{"offer":{o}}}}}"#),
            "body",
        ),
        (
            "NaN",
            r#"{"request_key":"a","subject":"u","input":{"offer":NaN}}"#.to_string(),
            "body",
        ),
        ("empty body", String::new(), "body"),
        (
            "a JSON array",
            format!(r#"[{{"request_key":"a","subject":"u","input":{{"offer":{o}}}}}]"#),
            "body",
        ),
        ("a JSON string", r#""request_key""#.to_string(), "body"),
        ("a JSON number", "42".to_string(), "body"),
        ("JSON null", "null".to_string(), "body"),
        (
            "nesting beyond any sane depth",
            format!(r#"{{"request_key":"a","subject":"u","input":{{"offer":{nested}}}}}"#),
            "body",
        ),
    ];
    for (what, body, field) in &cases {
        let reply = post_raw(&stack, ENQUEUE, body.clone().into_bytes()).await;
        assert_invalid(&reply, field, what);
    }
    let invalid_utf8 = [
        br#"{"request_key":"a","subject":"u"#.as_slice(),
        &[0xff, 0xfe],
        br#"","input":{"offer":""#.as_slice(),
        OFFER.as_bytes(),
        br#""}}"#.as_slice(),
    ]
    .concat();
    assert_invalid(
        &post_raw(&stack, ENQUEUE, invalid_utf8).await,
        "body",
        "invalid UTF-8",
    );

    let oversized =
        json!({"request_key": "a", "subject": "u", "input": {"offer": "x".repeat(70_000)}});
    let reply = post_raw(&stack, ENQUEUE, oversized.to_string().into_bytes()).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{:?}",
        reply.body
    );
    assert_eq!(reply.code(), "PAYLOAD_TOO_LARGE");

    assert_nothing_written(&stack, "claim").await;
    // The same request done right is accepted: the refusals were about the defects.
    let good = json!({"request_key": "a", "subject": "u", "input": {"offer": OFFER}});
    let reply = post_raw(&stack, ENQUEUE, good.to_string().into_bytes()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
}

/// Request keys and subjects at their upper bounds (128 characters) are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_keys_and_subjects_of_128_chars_are_accepted() {
    let stack = Stack::start().await;
    let reply = stack.enqueue("u", &"k".repeat(128), OFFER).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let reply = stack.enqueue(&"é".repeat(128), "k", OFFER).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    let printable = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    let reply = stack.enqueue("u", printable, OFFER).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    assert_eq!(stack.count_rows().await, 3);
}

/// An integer parameter outside its declared range, a float, a string or a huge number is a
/// 400 naming `input.qty`; the bounds themselves are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_parameters_are_checked_against_their_range() {
    let stack = Stack::with_declaration(ORDER_DECLARATION).await;
    let path = "/v1/commands/order:enqueue";
    let cases = [
        "0",
        "6",
        "-1",
        "2.5",
        "2.0",
        "1e0",
        "\"3\"",
        "true",
        "9223372036854775808",
        "18446744073709551616",
        "1e30",
    ];
    for qty in cases {
        let body = format!(
            r#"{{"request_key":"a","subject":"u","input":{{"offer":"{OFFER}","qty":{qty}}}}}"#
        );
        assert_invalid(
            &post_raw(&stack, path, body.into_bytes()).await,
            "input.qty",
            qty,
        );
    }
    assert_nothing_written(&stack, "order").await;
    for qty in [1, 5] {
        let body = json!({"request_key": format!("k{qty}"), "subject": "u", "input": {"offer": OFFER, "qty": qty}});
        let reply = post_raw(&stack, path, body.to_string().into_bytes()).await;
        assert_eq!(
            reply.status,
            StatusCode::ACCEPTED,
            "qty {qty}: {:?}",
            reply.body
        );
    }
}

/// An `input` above 8 KiB encoded is a 400 naming `input`, even when every string fits its
/// declared `max_length`; multi-byte characters count by their encoded size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_over_8_kib_encoded_is_400() {
    let stack = Stack::with_declaration(NOTES_DECLARATION).await;
    let path = "/v1/commands/note:enqueue";
    let ascii = "x".repeat(3000);
    let wide = "é".repeat(1500);
    for (what, text) in [
        ("3 x 3000 ASCII", &ascii),
        ("3 x 1500 two-byte chars", &wide),
    ] {
        let body =
            json!({"request_key": "a", "subject": "u", "input": {"a": text, "b": text, "c": text}});
        assert_invalid(
            &post_raw(&stack, path, body.to_string().into_bytes()).await,
            "input",
            what,
        );
    }
    assert_nothing_written(&stack, "note").await;
    let under = "x".repeat(2700);
    let body =
        json!({"request_key": "a", "subject": "u", "input": {"a": under, "b": under, "c": under}});
    let reply = post_raw(&stack, path, body.to_string().into_bytes()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
}

/// A body of exactly 64 KiB is read (here: accepted, padded with whitespace); one byte more is
/// `413 PAYLOAD_TOO_LARGE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_limit_is_64_kib() {
    let stack = Stack::start().await;
    let body = json!({"request_key": "a", "subject": "u", "input": {"offer": OFFER}}).to_string();
    let mut over = body.clone().into_bytes();
    over.resize(64 * 1024 + 1, b' ');
    let reply = post_raw(&stack, ENQUEUE, over).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{:?}",
        reply.body
    );
    assert_eq!(reply.code(), "PAYLOAD_TOO_LARGE");
    assert_nothing_written(&stack, "claim").await;
    let mut exact = body.into_bytes();
    exact.resize(64 * 1024, b' ');
    let reply = post_raw(&stack, ENQUEUE, exact).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
}

/// Enqueueing a command the namespace has not declared (or cannot have declared) is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_command_is_404() {
    let stack = Stack::start().await;
    let body = json!({"request_key": "a", "subject": "u", "input": {"offer": OFFER}}).to_string();
    for path in [
        "/v1/commands/refund:enqueue",
        "/v1/commands/Claim:enqueue",
        "/v1/commands/cl%20aim:enqueue",
    ] {
        let reply = post_raw(&stack, path, body.clone().into_bytes()).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{path}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "NOT_FOUND", "{path}");
    }
    assert_nothing_written(&stack, "claim").await;
}

/// Paths the API does not define, and custom methods it does not know, are 404 `NOT_FOUND`; a
/// path it defines asked with another method is 405 (`openapi::wrong_methods_are_405_…`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_endpoint_is_404() {
    let stack = Stack::start().await;
    let credential = stack.credential();
    let body = json!({"request_key": "a", "subject": "u", "input": {"offer": OFFER}}).to_string();
    let wrong_method = stack
        .post("/v1/commands/claim", Some(&credential), &body)
        .await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong_method.headers["allow"], "GET");
    let posts = [
        "/v1/commands/claim:launch",
        "/v1/nothing",
        "/v2/commands/claim:enqueue",
        "/",
    ];
    for path in posts {
        let reply = stack.post(path, Some(&credential), &body).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "POST {path}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "NOT_FOUND", "POST {path}");
    }
    for path in ["/v1/nothing", "/v1/commands/claim/other/x", "/v1"] {
        let reply = stack.get(path, Some(&credential)).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "GET {path}: {:?}",
            reply.body
        );
        assert_eq!(reply.code(), "NOT_FOUND", "GET {path}");
    }
    assert_nothing_written(&stack, "claim").await;
}

/// A body of unknown length: sent chunked, without `Content-Length`.
struct Chunked(Vec<Bytes>);

impl Body for Chunked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = if self.0.is_empty() {
            None
        } else {
            Some(Ok(Frame::data(self.0.remove(0))))
        };
        Poll::Ready(next)
    }
}

/// Posts `body` to the enqueue endpoint in 8 KiB chunks with `Transfer-Encoding: chunked`.
async fn post_chunked(stack: &Stack, body: &[u8]) -> (StatusCode, Value) {
    let chunks = body.chunks(8 * 1024).map(Bytes::copy_from_slice).collect();
    let request = Request::post(format!("{}{ENQUEUE}", stack.base))
        .header("authorization", format!("Bearer {}", stack.credential()))
        .header("content-type", "application/json")
        .body(Chunked(chunks))
        .expect("request");
    let client = Client::builder(TokioExecutor::new()).build_http::<Chunked>();
    let response = client.request(request).await.expect("HTTP exchange");
    let status = response.status();
    let bytes = body_bytes(response).await;
    (
        status,
        serde_json::from_slice(&bytes).expect("a JSON answer"),
    )
}

/// The 64 KiB limit holds for chunked bodies without `Content-Length` too: over it is `413`,
/// under it is read and accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_limit_holds_for_chunked_bodies() {
    let stack = Stack::start().await;
    let body = json!({"request_key": "a", "subject": "u", "input": {"offer": OFFER}}).to_string();
    let mut over = body.clone().into_bytes();
    over.resize(72 * 1024, b' ');
    let (status, answer) = post_chunked(&stack, &over).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer:?}");
    assert_eq!(answer["error"]["code"], "PAYLOAD_TOO_LARGE");
    assert_nothing_written(&stack, "claim").await;
    let mut under = body.into_bytes();
    under.resize(60 * 1024, b' ');
    let (status, answer) = post_chunked(&stack, &under).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer:?}");
}
