//! The checker's HTTP client: JSON in and out, a deadline per request, and every answer kept
//! whole (status, `Retry-After`, body) for the checks.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// How long an answer may take before the request counts as unanswered.
const DEADLINE: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
}

/// One answer, or why there was none.
#[derive(Debug, Clone)]
pub enum Reply {
    Answered {
        status: u16,
        retry_after: Option<String>,
        body: Value,
    },
    /// No answer (refused, reset, timed out): the outcome of a write is unknown.
    Unanswered(String),
}

impl Reply {
    pub fn status(&self) -> Option<u16> {
        match self {
            Reply::Answered { status, .. } => Some(*status),
            Reply::Unanswered(_) => None,
        }
    }

    pub fn body(&self) -> &Value {
        match self {
            Reply::Answered { body, .. } => body,
            Reply::Unanswered(_) => &Value::Null,
        }
    }

    pub fn data(&self) -> &Value {
        &self.body()["data"]
    }

    /// Why there was no answer, when there was none.
    pub fn unanswered(&self) -> Option<String> {
        match self {
            Reply::Answered { .. } => None,
            Reply::Unanswered(why) => Some(why.clone()),
        }
    }

    pub fn error_code(&self) -> Option<&str> {
        self.body()["error"]["code"].as_str()
    }
}

impl Default for Http {
    fn default() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        Http {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(5))
                .build(connector),
        }
    }
}

impl Http {
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(url);
        if let Some(token) = bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let bytes = match body {
            Some(value) => {
                request = request.header("content-type", "application/json");
                Bytes::from(value.to_string())
            }
            None => Bytes::new(),
        };
        let request = match request.body(Full::new(bytes)) {
            Ok(request) => request,
            Err(error) => return Reply::Unanswered(format!("request: {error}")),
        };
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| format!("send: {e:?}"))?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes();
            let body = if body.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&body)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
            };
            Ok::<_, String>(Reply::Answered {
                status,
                retry_after,
                body,
            })
        };
        match tokio::time::timeout(DEADLINE, exchange).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(error)) => Reply::Unanswered(error),
            Err(_) => Reply::Unanswered("no answer within the deadline".into()),
        }
    }

    pub async fn get(&self, url: &str, bearer: Option<&str>) -> Reply {
        self.send(Method::GET, url, bearer, None, &[]).await
    }

    pub async fn post(&self, url: &str, bearer: Option<&str>, body: &Value) -> Reply {
        self.send(Method::POST, url, bearer, Some(body), &[]).await
    }
}

/// Milliseconds since the Unix epoch on this machine's clock: the clock Redis `TIME` and
/// PostgreSQL's `now()` read too (every server runs here).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Parses an RFC 3339 time into Unix milliseconds.
pub fn millis(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}
