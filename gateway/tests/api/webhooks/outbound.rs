//! How the executor calls out, as a platform team sets it up: an HTTPS backend behind a
//! private authority is trusted once `outbound_ca_file` names it, the call goes through the
//! proxy `HTTPS_PROXY` names (a `CONNECT` tunnel carrying the proxy's credentials, TLS end to
//! end inside it), and says who calls (`User-Agent: sluice/<version>`). Without the authority
//! the call is refused by the certificate check, the reason recorded on the row, and the
//! backend sees nothing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::client::proxy::matcher::Matcher;
use serde_json::json;
use sluice_durable::http_client::Outbound;
use sluice_executor::ExecutorConfig;
use sluice_testkit::TestCa;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::execution::{fast_executor, start_executor};
use crate::support::webhook_backend::{Answer, Backend, handler};

/// An HTTP proxy that only tunnels (`CONNECT`), as egress proxies for HTTPS do: it records
/// each tunnel's target and `Proxy-Authorization`, and refuses a request without credentials
/// (`407`).
struct TunnelProxy {
    port: u16,
    tunnels: Arc<Mutex<Vec<(String, String)>>>,
}

impl TunnelProxy {
    async fn start() -> TunnelProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("addr").port();
        let tunnels = Arc::new(Mutex::new(Vec::new()));
        let seen = tunnels.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if client.read_exact(&mut byte).await.is_err() || head.len() > 8192 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let mut lines = head.lines();
                    let request = lines.next().unwrap_or("");
                    let auth = lines
                        .filter_map(|l| l.split_once(':'))
                        .find(|(name, _)| name.eq_ignore_ascii_case("proxy-authorization"))
                        .map(|(_, value)| value.trim().to_string())
                        .unwrap_or_default();
                    let Some(target) = request
                        .strip_prefix("CONNECT ")
                        .and_then(|rest| rest.split_whitespace().next())
                    else {
                        let _ = client
                            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                            .await;
                        return;
                    };
                    seen.lock()
                        .expect("tunnels lock")
                        .push((target.to_string(), auth.clone()));
                    if auth.is_empty() {
                        let _ = client
                            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                            .await;
                        return;
                    }
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(target).await else {
                        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                        .await
                        .is_ok()
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        TunnelProxy { port, tunnels }
    }

    /// `HTTPS_PROXY` as an operator writes it, with credentials.
    fn matcher(&self) -> Matcher {
        Matcher::builder()
            .https(format!("http://sluice:s3cret@127.0.0.1:{}", self.port))
            .build()
    }

    fn tunnels(&self) -> Vec<(String, String)> {
        self.tunnels.lock().expect("tunnels lock").clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_trust_the_outbound_ca_go_through_the_proxy_and_say_who_calls() {
    let ca = TestCa::new("Backend authority");
    let backend = Backend::start_tls(
        handler(|_| async { Answer::succeeded(json!({"ok": true})) }),
        &ca.server(),
    )
    .await;
    assert!(backend.url("/").starts_with("https://127.0.0.1:"));
    let proxy = TunnelProxy::start().await;
    let stack = ocr_stack(&backend, 2_000, 60, "").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write_pem(dir.path(), "backend-ca.pem");
    let backend_address = backend
        .url("")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();

    // Without the backend's authority: refused by the certificate check, through the proxy.
    let untrusting = start_executor(
        &stack,
        ExecutorConfig {
            outbound: Outbound::new(None, proxy.matcher()).expect("outbound"),
            ..fast_executor()
        },
    );
    let refused = enqueue_ocr(&stack, "user-1", "gitee", "a", "first").await;
    let retried = eventually(Duration::from_secs(10), || async {
        row(&stack, &refused).await["error_code"] == "WEBHOOK_RETRYING"
    })
    .await;
    untrusting.cancel();
    let seen = row(&stack, &refused).await;
    assert!(retried, "the attempt is retried: {seen}");
    let reason = seen["error_message"].as_str().unwrap_or("");
    assert!(
        reason.contains("certificate") && reason.contains("UnknownIssuer"),
        "the row says the certificate was not trusted: {reason}"
    );
    assert!(
        backend.arrivals().is_empty(),
        "no request reached the backend"
    );

    // With it: the same command and a new one succeed, each through a tunnel of the proxy.
    let trusting = start_executor(
        &stack,
        ExecutorConfig {
            outbound: Outbound::new(Some(&ca_file), proxy.matcher()).expect("outbound"),
            ..fast_executor()
        },
    );
    let accepted = enqueue_ocr(&stack, "user-2", "gitee", "b", "second").await;
    for id in [&refused, &accepted] {
        assert_reaches(&stack, id, "succeeded", Duration::from_secs(20)).await;
    }
    trusting.cancel();
    let arrivals = backend.arrivals();
    assert_eq!(arrivals.len(), 2, "one call per command: {arrivals:?}");
    for arrival in &arrivals {
        assert!(arrival.signature_valid);
        assert_eq!(
            arrival.user_agent,
            format!("sluice/{}", env!("CARGO_PKG_VERSION"))
        );
    }
    let tunnels = proxy.tunnels();
    assert!(!tunnels.is_empty());
    for (target, auth) in &tunnels {
        assert_eq!(
            target, &backend_address,
            "every call went through the proxy"
        );
        // base64("sluice:s3cret")
        assert_eq!(
            auth, "Basic c2x1aWNlOnMzY3JldA==",
            "with the proxy's credentials"
        );
    }
}
