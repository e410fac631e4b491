//! A real HTTP backend for webhook tests: it verifies every request's `Sluice-Signature` with the
//! namespace's webhook secret (independently of the executor's code), records every arrival,
//! counts the calls in progress on its own (the witness of a concurrency limit: a call counts
//! from its arrival until its answer is sent or its client hangs up, and a call answered `202`
//! until the test says the backend finished it, [`Backend::finish`]), and answers whatever the
//! test's handler decides, after whatever delay it chooses.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

/// One request as the backend saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub path: String,
    pub idempotency_key: String,
    pub signature_valid: bool,
    /// The `Sluice-Signature` header and the bytes it signs, for checks with other secrets.
    pub signature: String,
    pub raw: bytes::Bytes,
    pub body: Value,
    pub at: Instant,
    /// The `User-Agent` header, empty when absent.
    pub user_agent: String,
    /// The W3C `traceparent` header, empty when absent.
    pub traceparent: String,
}

/// What the backend answers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn json(status: u16, body: Value) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: body.to_string(),
        }
    }

    pub fn succeeded(result: Value) -> Answer {
        Answer::json(
            200,
            serde_json::json!({"outcome": "succeeded", "result": result}),
        )
    }

    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            headers: vec![],
            body: String::new(),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }
}

pub type Handler =
    Arc<dyn Fn(Arrival) -> Pin<Box<dyn Future<Output = Answer> + Send>> + Send + Sync>;

/// Wraps an async closure as a [`Handler`].
pub fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Arrival) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    Arc::new(move |arrival| Box::pin(f(arrival)))
}

pub struct Backend {
    pub base: String,
    secret: Arc<Mutex<String>>,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    calls: Arc<Calls>,
    /// Calls answered `202`, by idempotency key (the command id): the backend still works on
    /// them, so they stay counted until [`Backend::finish`].
    running: Running,
    shutdown: CancellationToken,
}

type Running = Arc<Mutex<std::collections::HashMap<String, Vec<InProgress>>>>;

/// Calls in progress and the most there ever were at once, counted by the backend alone.
#[derive(Default)]
struct Calls {
    now: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

/// One call in progress; dropped when its answer is sent or its connection is gone (hyper drops
/// the service future of a request whose client hung up).
struct InProgress(Arc<Calls>);

impl InProgress {
    fn start(calls: &Arc<Calls>) -> InProgress {
        use std::sync::atomic::Ordering;
        let now = calls.now.fetch_add(1, Ordering::SeqCst) + 1;
        calls.peak.fetch_max(now, Ordering::SeqCst);
        InProgress(calls.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Backend {
    /// Serves on `127.0.0.1:0`; signatures verify once [`set_secret`](Self::set_secret) named
    /// the namespace's webhook secret (the backend must exist before the declaration naming
    /// its URL, which comes before the namespace's secret is known to the test).
    pub async fn start(handle: Handler) -> Backend {
        Self::start_on(handle, None).await
    }

    /// [`start`](Self::start), serving HTTPS with `tls` (its URLs are `https://127.0.0.1:…`,
    /// a name the kit's server certificates carry).
    pub async fn start_tls(handle: Handler, tls: &sluice_testkit::ServerTls) -> Backend {
        let cert = rustls::pki_types::CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("the server certificate");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes())
            .expect("the server key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(cert, key)
        .expect("a server configuration");
        Self::start_on(
            handle,
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        )
        .await
    }

    async fn start_on(handle: Handler, tls: Option<tokio_rustls::TlsAcceptor>) -> Backend {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the backend");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{}", listener.local_addr().expect("addr"));
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let shutdown = CancellationToken::new();
        let secret = Arc::new(Mutex::new(String::new()));
        let calls = Arc::new(Calls::default());
        let running: Running = Arc::default();
        let (recorded, stop, key, counted, working) = (
            arrivals.clone(),
            shutdown.clone(),
            secret.clone(),
            calls.clone(),
            running.clone(),
        );
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = stop.cancelled() => return,
                };
                let (secret, recorded, handle, counted, working) = (
                    key.clone(),
                    recorded.clone(),
                    handle.clone(),
                    counted.clone(),
                    working.clone(),
                );
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request: Request<Incoming>| {
                        let (secret, recorded, handle, counted, working) = (
                            secret.clone(),
                            recorded.clone(),
                            handle.clone(),
                            counted.clone(),
                            working.clone(),
                        );
                        async move {
                            let call = InProgress::start(&counted);
                            let key = secret.lock().expect("secret lock").clone();
                            let arrival = read_arrival(request, &key).await;
                            recorded
                                .lock()
                                .expect("arrivals lock")
                                .push(arrival.clone());
                            let id = arrival.idempotency_key.clone();
                            let answer = handle(arrival).await;
                            if answer.status == 202 {
                                // Taken on: the work goes on after the answer.
                                working
                                    .lock()
                                    .expect("running lock")
                                    .entry(id)
                                    .or_default()
                                    .push(call);
                            } else {
                                drop(call);
                            }
                            let mut response = Response::builder().status(
                                StatusCode::from_u16(answer.status).expect("a status code"),
                            );
                            for (name, value) in &answer.headers {
                                response = response.header(name, value);
                            }
                            Ok::<_, Infallible>(
                                response
                                    .body(Full::new(Bytes::from(answer.body)))
                                    .expect("a response"),
                            )
                        }
                    });
                    let server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = server.serve_connection(TokioIo::new(stream), service).await;
                        }
                        Some(tls) => {
                            // A handshake the client broke off (a certificate it does not
                            // trust) is no arrival.
                            if let Ok(stream) = tls.accept(stream).await {
                                let _ =
                                    server.serve_connection(TokioIo::new(stream), service).await;
                            }
                        }
                    }
                });
            }
        });
        Backend {
            base,
            secret,
            arrivals,
            calls,
            running,
            shutdown,
        }
    }

    /// The backend is done with command `id`, which it answered `202`: its call stops counting.
    /// Call it before sending the command's `:complete`, as a real backend reports a result only
    /// once it has one; counting on past the `:complete` would count the finished call next to
    /// the one its freed permit lets in. False when no such call was in progress.
    pub fn finish(&self, id: &str) -> bool {
        let mut running = self.running.lock().expect("running lock");
        let Some(calls) = running.get_mut(id) else {
            return false;
        };
        calls.pop();
        if calls.is_empty() {
            running.remove(id);
        }
        true
    }

    /// The most calls the backend ever had in progress at once.
    pub fn peak_in_flight(&self) -> usize {
        self.calls.peak.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Calls in progress now.
    pub fn in_flight(&self) -> usize {
        self.calls.now.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn set_secret(&self, secret: &str) {
        *self.secret.lock().expect("secret lock") = secret.to_string();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().expect("arrivals lock").clone()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn read_arrival(request: Request<Incoming>, secret: &str) -> Arrival {
    let at = Instant::now();
    let path = request.uri().path().to_string();
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let idempotency_key = header("idempotency-key");
    let user_agent = header("user-agent");
    let traceparent = header("traceparent");
    let signature = header("sluice-signature");
    let raw = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Arrival {
        path,
        idempotency_key,
        signature_valid: verify(secret, &signature, &raw),
        body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
        signature,
        raw,
        at,
        user_agent,
        traceparent,
    }
}

/// `t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>[,v1=…]`, within five minutes of now:
/// valid when any `v1` is this secret's (during a rotation Sluice sends one per live secret).
pub fn verify(secret: &str, header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => signatures.extend(hex::decode(value).ok()),
            _ => {}
        }
    }
    let Some(t) = t else {
        return false;
    };
    if (chrono::Utc::now().timestamp() - t).abs() > 300 {
        return false;
    }
    signatures.iter().any(|v1| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        mac.verify_slice(v1).is_ok()
    })
}

/// The pair of arrivals that comes closest to (or beyond) what a token bucket allows.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// The first of the pair (0 = the first arrival).
    pub from: usize,
    /// Arrivals from the first of the pair to the second, both included.
    pub count: usize,
    pub span: Duration,
    /// `count − (burst + rate × span)`.
    pub excess: f64,
}

/// Checks every pair of arrival times i < j (sorted) against a token bucket of `rate` per second
/// and burst `rate` (admit.lua's buckets): j − i + 1 ≤ rate + rate × (t_j − t_i). Returns the pair
/// with the largest excess.
pub fn worst_window(times: &[Instant], rate: f64) -> Window {
    let mut worst = Window {
        from: 0,
        count: 1,
        span: Duration::ZERO,
        excess: 1.0 - rate,
    };
    for i in 0..times.len() {
        for j in i + 1..times.len() {
            let span = times[j] - times[i];
            let count = j - i + 1;
            let excess = count as f64 - (rate + rate * span.as_secs_f64());
            if excess > worst.excess {
                worst = Window {
                    from: i,
                    count,
                    span,
                    excess,
                };
            }
        }
    }
    worst
}
