//! The loopback servers a scenario needs beside the stack: the origin of the `offer` read, and
//! the webhook backend of the `backend` scenario, which also observes from outside whether the
//! declared limits held (concurrent requests per account, starts per provider).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use sluice_executor::webhook::verify_signature;
use tokio_util::sync::CancellationToken;

use crate::bench_stack::BoxError;

/// Serves `handler` on a fresh loopback port until the token is cancelled; returns the base URL.
pub async fn serve<F, Fut>(shutdown: CancellationToken, handler: F) -> Result<String, BoxError>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                _ = shutdown.cancelled() => return,
                stream = sluice_gateway::http::server::accept(&listener, "load test") => stream,
            };
            let _ = stream.set_nodelay(true);
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(base)
}

pub fn respond(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The offer's origin: answers `GET /offers/{id}` with a small JSON list, counting its calls
/// (the read cache should call it about once per freshness period, not once per person).
pub struct Origin {
    pub base: String,
    pub calls: Arc<AtomicU64>,
}

impl Origin {
    pub async fn start(shutdown: CancellationToken) -> Result<Self, BoxError> {
        let calls = Arc::new(AtomicU64::new(0));
        let counted = calls.clone();
        let base = serve(shutdown, move |request: Request<Incoming>| {
            let calls = counted.clone();
            async move {
                calls.fetch_add(1, Ordering::Relaxed);
                let id = request.uri().path().rsplit('/').next().unwrap_or("");
                let body = serde_json::json!([{
                    "id": id,
                    "title": "Limited edition",
                    "price_cents": 4_900,
                    "opens_at": "2026-12-01T10:00:00Z",
                }]);
                respond(StatusCode::OK, Bytes::from(body.to_string()))
            }
        })
        .await?;
        Ok(Self { base, calls })
    }
}

/// What the webhook backend saw.
#[derive(Debug, Default)]
pub struct BackendSeen {
    pub requests: u64,
    pub unsigned: u64,
    /// Command ids posted more than once (a retry after a lost answer may do that; with `200`
    /// answers at once there should be none).
    pub repeated: u64,
    /// The most requests of one account open at the same time.
    pub account_peak: HashMap<String, i64>,
    /// Per provider, the most requests that arrived within any one-second window.
    pub provider_peak_per_second: HashMap<String, u64>,
}

#[derive(Default)]
struct BackendState {
    requests: u64,
    unsigned: u64,
    seen_ids: HashMap<String, u32>,
    open: HashMap<String, i64>,
    account_peak: HashMap<String, i64>,
    starts: HashMap<String, Vec<Instant>>,
}

/// The backend of the `backend` scenario: verifies each `Sluice-Signature`, holds the request
/// for `delay` (a provider's work), answers `200 succeeded`.
pub struct WebhookBackend {
    pub url: String,
    state: Arc<Mutex<BackendState>>,
}

impl WebhookBackend {
    pub async fn start(
        shutdown: CancellationToken,
        secret: Arc<std::sync::OnceLock<String>>,
        delay: Duration,
    ) -> Result<Self, BoxError> {
        let state = Arc::new(Mutex::new(BackendState::default()));
        let shared = state.clone();
        let base = serve(shutdown, move |request: Request<Incoming>| {
            let (state, secret) = (shared.clone(), secret.clone());
            async move { answer(state, secret, delay, request).await }
        })
        .await?;
        Ok(Self {
            url: format!("{base}/work"),
            state,
        })
    }

    pub fn seen(&self) -> BackendSeen {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        BackendSeen {
            requests: state.requests,
            unsigned: state.unsigned,
            repeated: state.seen_ids.values().filter(|n| **n > 1).count() as u64,
            account_peak: state.account_peak.clone(),
            provider_peak_per_second: state
                .starts
                .iter()
                .map(|(provider, starts)| (provider.clone(), peak_within(starts, SECOND)))
                .collect(),
        }
    }
}

const SECOND: Duration = Duration::from_secs(1);

/// The most instants of a sorted list that fall within one `window` (two pointers).
fn peak_within(starts: &[Instant], window: Duration) -> u64 {
    let mut peak = 0;
    let mut first = 0;
    for (last, at) in starts.iter().enumerate() {
        while at.duration_since(starts[first]) >= window {
            first += 1;
        }
        peak = peak.max(last - first + 1);
    }
    peak as u64
}

async fn answer(
    state: Arc<Mutex<BackendState>>,
    secret: Arc<std::sync::OnceLock<String>>,
    delay: Duration,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let signature = request
        .headers()
        .get("sluice-signature")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return respond(StatusCode::BAD_REQUEST, Bytes::new());
    };
    let signed = secret
        .get()
        .zip(signature.as_deref())
        .is_some_and(|(secret, header)| signature_valid(secret, header, &body));
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = |pointer: &str| {
        parsed
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (id, provider, account) = (
        text("/command_id"),
        text("/input/provider"),
        text("/input/account"),
    );
    let account = format!("{provider}:{account}");
    {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.requests += 1;
        if !signed {
            s.unsigned += 1;
        }
        *s.seen_ids.entry(id).or_default() += 1;
        s.starts.entry(provider).or_default().push(Instant::now());
        let open = s.open.entry(account.clone()).or_default();
        *open += 1;
        let now_open = *open;
        let peak = s.account_peak.entry(account.clone()).or_default();
        *peak = (*peak).max(now_open);
    }
    tokio::time::sleep(delay).await;
    {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = s.open.get_mut(&account) {
            *open -= 1;
        }
    }
    if !signed {
        return respond(StatusCode::UNAUTHORIZED, Bytes::new());
    }
    respond(
        StatusCode::OK,
        Bytes::from_static(br#"{"outcome":"succeeded","result":{"done":true}}"#),
    )
}

/// Any `v1` of `t=<unix seconds>,v1=<hex>[,v1=…]` recomputed over the body with the secret,
/// within five minutes.
pub fn signature_valid(secret: &str, header: &str, body: &[u8]) -> bool {
    verify_signature(secret, header, body, chrono::Utc::now().timestamp(), 300)
}
