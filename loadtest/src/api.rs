//! The gateway as a load-test caller sees it: one HTTP exchange, classified the way the API
//! contract tells a client to act on it (success, explicit refusal with advice, or an outcome
//! that is not known).

use sluice_model::CommandStatus;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use serde_json::Value;

use crate::driver::HttpClient;

/// How long one exchange may take before its outcome counts as unknown. Generous: the drop's
/// target is about answers, and an answer after 30 s is a failure of its own.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// What one exchange produced.
#[derive(Debug)]
pub struct Exchange {
    pub took: Duration,
    pub outcome: Outcome,
}

#[derive(Debug)]
pub enum Outcome {
    /// 2xx with the envelope's `data`.
    Success { status: u16, data: Value },
    /// A non-2xx answer with the API's error envelope: the gateway said what happened.
    Refused {
        status: u16,
        code: String,
        retryable: bool,
        /// `error.retry_after_ms`, else the `Retry-After` header.
        retry_after: Option<Duration>,
        /// `error.details.reason`, when present (e.g. `filling`).
        reason: Option<String>,
        /// `error.details.state`, when present: the state a `409 STATE_CONFLICT` found (an
        /// allocation `expired` or `released`).
        state: Option<String>,
        /// `error.message`: what a `503` says its cause was.
        message: String,
    },
    /// No answer, a timeout, or an answer that is not the API's envelope.
    Unknown { why: String },
}

impl Exchange {
    /// The key under which the report counts it: the status, or `error`.
    pub fn status_label(&self) -> String {
        match &self.outcome {
            Outcome::Success { status, .. } | Outcome::Refused { status, .. } => status.to_string(),
            Outcome::Unknown { .. } => "error".to_string(),
        }
    }
}

/// Requests in flight at once from this process, each on a connection of its own: a process
/// can hold only as many sockets as its open-file limit allows (and the stack it starts inherits
/// that limit), so a run of more people than this queues their requests for a connection, as a
/// browser's connection pool does; the wait counts in each exchange's time.
pub const MAX_IN_FLIGHT: usize = 16_384;

static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_IN_FLIGHT);

/// One request with an optional bearer and JSON body.
pub async fn exchange(
    client: &HttpClient,
    method: Method,
    uri: &str,
    bearer: Option<&str>,
    body: Option<String>,
) -> Exchange {
    exchange_with(client, method, uri, bearer, body, &[]).await
}

/// One request with an optional bearer and JSON body, and more headers (an `Idempotency-Key`).
pub async fn exchange_with(
    client: &HttpClient,
    method: Method,
    uri: &str,
    bearer: Option<&str>,
    body: Option<String>,
    headers: &[(&str, &str)],
) -> Exchange {
    let started = Instant::now();
    // Waiting for a connection counts in the exchange's time, as it would in a browser.
    let _connection = IN_FLIGHT.acquire().await;
    let outcome = match build(method, uri, bearer, body, headers) {
        Ok(request) => match tokio::time::timeout(EXCHANGE_TIMEOUT, send(client, request)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Unknown {
                why: format!("no answer within {EXCHANGE_TIMEOUT:?}"),
            },
        },
        Err(why) => Outcome::Unknown { why },
    };
    Exchange {
        took: started.elapsed(),
        outcome,
    }
}

fn build(
    method: Method,
    uri: &str,
    bearer: Option<&str>,
    body: Option<String>,
    headers: &[(&str, &str)],
) -> Result<Request<Full<Bytes>>, String> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(bearer) = bearer {
        builder = builder.header("authorization", format!("Bearer {bearer}"));
    }
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let body = match body {
        Some(json) => {
            builder = builder.header("content-type", "application/json");
            Bytes::from(json)
        }
        None => Bytes::new(),
    };
    builder
        .body(Full::new(body))
        .map_err(|e| format!("request not built: {e}"))
}

/// The status of a plain `GET` (health probes answer text, not the envelope); `None` when no
/// answer came.
pub async fn status_of(client: &HttpClient, uri: &str) -> Option<u16> {
    answer_of(client, uri).await.map(|(status, _)| status)
}

/// The status and body text of a plain `GET`; `None` when no answer came.
pub async fn answer_of(client: &HttpClient, uri: &str) -> Option<(u16, String)> {
    let request = build(Method::GET, uri, None, None, &[]).ok()?;
    let response = tokio::time::timeout(EXCHANGE_TIMEOUT, client.request(request))
        .await
        .ok()?
        .ok()?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    Some((status, body))
}

async fn send(client: &HttpClient, request: Request<Full<Bytes>>) -> Outcome {
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(e) => {
            return Outcome::Unknown {
                why: format!("transport: {e}"),
            };
        }
    };
    let status = response.status().as_u16();
    let header_retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let bytes = match response.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return Outcome::Unknown {
                why: format!("body lost: {e}"),
            };
        }
    };
    classify(status, header_retry, &bytes)
}

fn classify(status: u16, header_retry: Option<Duration>, bytes: &[u8]) -> Outcome {
    let Ok(mut envelope) = serde_json::from_slice::<Value>(bytes) else {
        return Outcome::Unknown {
            why: format!("{status} without a JSON envelope"),
        };
    };
    if (200..300).contains(&status) {
        return match envelope.get_mut("data").map(Value::take) {
            Some(data) => Outcome::Success { status, data },
            None => Outcome::Unknown {
                why: format!("{status} without data"),
            },
        };
    }
    let Some(error) = envelope.get("error") else {
        return Outcome::Unknown {
            why: format!("{status} without an error envelope"),
        };
    };
    Outcome::Refused {
        status,
        code: error
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("UNKNOWN_CODE")
            .to_string(),
        retryable: error
            .get("retryable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        retry_after: error
            .get("retry_after_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .or(header_retry),
        reason: error
            .pointer("/details/reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        state: error
            .pointer("/details/state")
            .and_then(Value::as_str)
            .map(str::to_string),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    }
}

/// Whether a load test is done with a command in `status`: a final status never changes again,
/// and `needs_review` waits for a person.
pub fn is_terminal(status: CommandStatus) -> bool {
    status.is_final() || status == CommandStatus::NeedsReview
}

/// The `status` field of an answer's data, if it is a status of the API.
pub fn command_status(data: &Value) -> Option<CommandStatus> {
    data.get("status")
        .and_then(Value::as_str)
        .and_then(CommandStatus::parse)
}
