//! The HTTP client of a chaos run (the load, the backend's `:complete`, readiness probes): one
//! request answered within a timeout, or a failure; never a panic.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub(super) type Client = HttpClient<HttpConnector, Full<Bytes>>;

/// A client with a short connect timeout, without Nagle's delay.
pub(super) fn client() -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    HttpClient::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .pool_idle_timeout(Duration::from_secs(5))
        .build(connector)
}

/// What a request got: an HTTP answer, or none (connection refused or cut, timeout).
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Http {
        status: u16,
        /// The error code, or "" for a success.
        code: String,
        retry_after_ms: Option<u64>,
        body: Value,
    },
    Failed(String),
}

/// One request, answered within `timeout` or [`Answer::Failed`].
pub(super) async fn send(
    client: &Client,
    method: Method,
    url: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
    timeout: Duration,
) -> Answer {
    let mut builder = Request::builder().method(method).uri(url);
    if let Some(bearer) = bearer {
        builder = builder.header("authorization", format!("Bearer {bearer}"));
    }
    if body.is_some() {
        builder = builder.header("content-type", "application/json");
    }
    let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let request = builder.body(Full::new(bytes)).expect("request");
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, bytes))
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Answer::Failed(format!("no answer within {timeout:?}")),
        Ok(Err(error)) => Answer::Failed(error),
        Ok(Ok((status, bytes))) => {
            let body: Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
            Answer::Http {
                status,
                code: body["error"]["code"].as_str().unwrap_or("").to_string(),
                retry_after_ms: body["error"]["retry_after_ms"].as_u64(),
                body,
            }
        }
    }
}
