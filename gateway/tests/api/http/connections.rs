//! Connection hygiene: half-written headers, idle kept-alive connections, slow bodies and the
//! connection cap, against the gateway's real listener with raw TCP clients; and the headers
//! every API answer carries.

use std::time::{Duration, Instant};

use hyper::StatusCode;
use sluice_gateway::gateway_config::GatewayConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

fn address(stack: &Stack) -> String {
    stack.base.trim_start_matches("http://").to_string()
}

async fn stack_with(config: GatewayConfig) -> Stack {
    Stack::start_with(StackOptions {
        config,
        ..StackOptions::default()
    })
    .await
}

/// Reads until the server closes the connection (EOF or reset); how long that took, or None
/// if it was still open at `within`. Whatever the server wrote first is returned too.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<(Duration, Vec<u8>)> {
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((started.elapsed(), seen)),
            Ok(Ok(n)) => seen.extend_from_slice(&buffer[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_written_headers_are_closed_within_the_header_timeout() {
    let stack = stack_with(GatewayConfig {
        header_read_timeout_ms: 1_000,
        ..GatewayConfig::default()
    })
    .await;
    let mut open = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(address(&stack)).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\nX-Slow: ")
            .await
            .expect("write half a header");
        open.push(stream);
    }
    // Served meanwhile.
    let reply = stack.get("/healthz", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let started = Instant::now();
    for stream in &mut open {
        let left = Duration::from_secs(6).saturating_sub(started.elapsed());
        let closed = closed_within(stream, left).await;
        assert!(
            closed.is_some(),
            "a half-written request was still open after 6 s"
        );
    }
    let all_closed = started.elapsed();
    assert!(
        all_closed < Duration::from_secs(6),
        "closing took {all_closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_and_a_slow_body_is_refused() {
    let stack = stack_with(GatewayConfig {
        header_read_timeout_ms: 1_000,
        body_read_timeout_ms: 500,
        ..GatewayConfig::default()
    })
    .await;
    // One whole request, then silence: the connection is not kept for ever.
    let mut idle = TcpStream::connect(address(&stack)).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
        .await
        .expect("write");
    let (took, answered) = closed_within(&mut idle, Duration::from_secs(6))
        .await
        .expect("an idle kept-alive connection was still open after 6 s");
    assert!(
        answered.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answered)
    );
    assert!(
        took >= Duration::from_millis(900),
        "closed after {took:?}, before the timeout"
    );

    // A body announced and never finished: 400 naming `body`, within the body timeout.
    let mut slow = TcpStream::connect(address(&stack)).await.expect("connect");
    let head = format!(
        "POST /v1/commands/claim:enqueue HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"request_key\":",
        stack.credential()
    );
    slow.write_all(head.as_bytes()).await.expect("write");
    let started = Instant::now();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut answer))
        .await
        .expect("no answer to a slow body within 5 s")
        .expect("read");
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("\"field\":\"body\""), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_connection_is_closed_at_once() {
    let stack = stack_with(GatewayConfig {
        max_connections: 8,
        ..GatewayConfig::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(TcpStream::connect(address(&stack)).await.expect("connect"));
    }
    // The listener accepts in arrival order and counts a connection when it accepts it, so the
    // ninth is past the cap whenever it is accepted. Given far longer than the bound, so that a
    // slow close is measured and judged rather than taken for no close at all.
    let mut ninth = TcpStream::connect(address(&stack)).await.expect("connect");
    let (took, bytes) = closed_within(&mut ninth, Duration::from_secs(5))
        .await
        .expect("the connection past the cap was still open after 5 s");
    assert!(bytes.is_empty(), "{:?}", String::from_utf8_lossy(&bytes));
    assert!(
        took < Duration::from_millis(500),
        "the connection past the cap was closed only after {took:?}"
    );
    // The connections in hand are still served.
    let first = &mut held[0];
    first
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let (_, answered) = closed_within(first, Duration::from_secs(5))
        .await
        .expect("the answer did not end");
    assert!(
        answered.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answered)
    );
    // A freed slot serves a new connection. Until the gateway has seen the held ones close, a new
    // one is still past the cap and closed unanswered: that try counts as not yet served.
    drop(held);
    let served = sluice_testkit::eventually(Duration::from_secs(5), || async {
        let Ok(mut stream) = TcpStream::connect(address(&stack)).await else {
            return false;
        };
        let asked = stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\nConnection: close\r\n\r\n")
            .await;
        let answer = closed_within(&mut stream, Duration::from_secs(2)).await;
        asked.is_ok() && answer.is_some_and(|(_, bytes)| bytes.starts_with(b"HTTP/1.1 200"))
    })
    .await;
    assert!(
        served,
        "no connection was served after the slots were freed"
    );
}

/// An answer (a receipt, a refusal) is about one caller at one moment: no cache on the way may
/// keep it, and no browser may sniff it into something it renders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_answers_are_never_stored_or_sniffed() {
    let stack = Stack::start().await;
    let accepted = stack.enqueue("u1", &key(), &offer()).await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{:?}", accepted.body);
    let refused = stack.get("/v1/status", Some("not-a-credential")).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let ticket = accepted.data()["ticket"]
        .as_str()
        .expect("ticket")
        .to_string();
    let polled = stack.get(&format!("/v1/tickets/{ticket}"), None).await;
    assert_eq!(polled.status, StatusCode::OK, "{:?}", polled.body);
    for (what, reply) in [
        ("a receipt", &accepted),
        ("a refusal", &refused),
        ("a poll", &polled),
    ] {
        assert_eq!(reply.headers["cache-control"], "no-store", "{what}");
        assert_eq!(reply.headers["x-content-type-options"], "nosniff", "{what}");
    }
}
