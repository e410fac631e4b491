//! The JSON envelope of every answer: `{"request_id", "data"}` or `{"request_id", "error"}`, with
//! `X-Request-Id` and, for retryable refusals, `Retry-After` (for a wrong method, `Allow`).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    ALLOW, CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::http::error::ApiError;

pub type HttpResponse = Response<Full<Bytes>>;

/// A request id: 32 lowercase hex characters.
pub fn new_request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The envelope of a success.
#[derive(Serialize)]
struct Success<'a> {
    request_id: &'a str,
    data: &'a Value,
}

/// The envelope of a refusal, and the error it carries (API.md, Errors).
#[derive(Serialize)]
struct Failure<'a> {
    request_id: &'a str,
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: &'a str,
    message: &'a str,
    retryable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<&'a Map<String, Value>>,
}

pub fn success(request_id: &str, status: StatusCode, data: Value) -> HttpResponse {
    json_response(
        request_id,
        status,
        &Success {
            request_id,
            data: &data,
        },
    )
}

pub fn failure(request_id: &str, error: &ApiError) -> HttpResponse {
    let body = Failure {
        request_id,
        error: ErrorBody {
            code: error.code.as_str(),
            message: &error.message,
            retryable: error.code.retryable(),
            retry_after_ms: error.retry_after_ms,
            details: error.details.as_ref(),
        },
    };
    let mut response = json_response(request_id, error.status(), &body);
    if let Some(allow) = error.allow {
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
    }
    if let Some(ms) = error.retry_after_ms {
        // Retry-After is in whole seconds: round up so a client never retries too early.
        let seconds = ms.div_ceil(1_000).max(1);
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
    }
    response
}

fn json_response(request_id: &str, status: StatusCode, body: &impl Serialize) -> HttpResponse {
    // The envelopes hold only string keys and plain values: encoding cannot fail. Were it to,
    // the caller still gets a well-formed refusal rather than a truncated body.
    let bytes = serde_json::to_vec(body).unwrap_or_else(|error| {
        tracing::error!(%error, "an answer could not be encoded");
        br#"{"error":{"code":"UNAVAILABLE","message":"the gateway cannot serve this request right now","retryable":true}}"#.to_vec()
    });
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // An answer is about one caller at one moment (a receipt, a ticket, a position): never
    // stored by a cache on the way, never sniffed into something a browser would render.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert("x-request-id", value);
    }
    response
}

/// A plain-text answer for probes (`/healthz`, `/readyz`).
pub fn plain(status: StatusCode, text: impl Into<Bytes>) -> HttpResponse {
    let mut response = Response::new(Full::new(text.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A Prometheus text exposition (`GET /metrics`): no envelope, the content type scrapers expect.
pub fn exposition(text: String) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(sluice_metrics::CONTENT_TYPE),
    );
    response
}
