//! One module per group of endpoints. Each handler returns `(status, data)` or an [`ApiError`];
//! the router wraps both in the envelope.

pub mod application;
pub mod commands;
pub mod complete;
pub mod enqueue;
pub mod record;
pub mod tickets;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::error::{ApiError, ErrorCode};

pub type Handled = Result<(StatusCode, Value), ApiError>;

/// Reads a body of at most `limit` bytes; larger is `413` before reading it all.
pub async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the body exceeds {limit} bytes"),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(too_large());
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(_) => Err(ApiError::invalid("body", "could not be read")),
    }
}
