//! One module per group of endpoints. Each handler returns `(status, data)` or an [`ApiError`];
//! the router wraps both in the envelope.

pub mod answers;
pub mod application;
pub mod commands;
pub mod complete;
pub mod control;
pub mod enqueue;
pub mod pages;
pub mod proof_of_work;
pub mod quotas;
pub mod reads;
pub mod record;
pub mod rooms;
pub mod status_board;
pub mod tickets;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_LENGTH;
use hyper::{HeaderMap, StatusCode};
use serde_json::Value;

use crate::http::error::{ApiError, ErrorCode};

pub type Handled = Result<(StatusCode, Value), ApiError>;

/// Longest audited `reason`, in characters.
const MAX_REASON_CHARS: usize = 1024;

/// The `reason` an operator gives for an audited change (a pause, a budget): it must say
/// something and fit the audit row.
pub fn validate_reason(reason: &str) -> Result<(), ApiError> {
    if reason.trim().is_empty() {
        return Err(ApiError::invalid("reason", "must not be blank"));
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(ApiError::invalid(
            "reason",
            format!("must be at most {MAX_REASON_CHARS} characters"),
        ));
    }
    Ok(())
}

/// The two fields of every audited change made under a revision (`expected_revision`, a
/// decimal string, and `reason`), read from a configure body; [`Self::validated`] checks them
/// once the body's unknown fields have been refused.
pub struct RevisedChange {
    expected_revision: u64,
    reason: String,
}

impl RevisedChange {
    pub fn read(reader: &mut crate::http::strict_json::ObjectReader) -> Result<Self, ApiError> {
        Ok(Self {
            expected_revision: reader.required_decimal_string_u64("expected_revision")?,
            reason: reader.required_string("reason")?,
        })
    }

    /// `(expected_revision, reason)`: a revision that can exist, a reason that says something.
    pub fn validated(self) -> Result<(i64, String), ApiError> {
        if self.expected_revision == 0 {
            return Err(ApiError::invalid("expected_revision", "must not be zero"));
        }
        let expected_revision = i64::try_from(self.expected_revision)
            .map_err(|_| ApiError::invalid("expected_revision", "is beyond any revision"))?;
        validate_reason(&self.reason)?;
        Ok((expected_revision, self.reason))
    }
}

/// Longest `Idempotency-Key`.
const MAX_IDEMPOTENCY_KEY: usize = 128;

/// `Idempotency-Key`: 1–128 printable ASCII characters, no whitespace, exactly once.
pub fn idempotency_key(headers: &HeaderMap) -> Result<String, ApiError> {
    optional_idempotency_key(headers)?
        .ok_or_else(|| ApiError::invalid("Idempotency-Key", "the header is required"))
}

/// `Idempotency-Key` where a call may go without one (a room's join): the same rules when sent.
pub fn optional_idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid("Idempotency-Key", "must be sent once"));
    }
    let key = value
        .to_str()
        .ok()
        .filter(|k| {
            !k.is_empty()
                && k.len() <= MAX_IDEMPOTENCY_KEY
                && k.bytes().all(|b| b.is_ascii_graphic())
        })
        .ok_or_else(|| {
            ApiError::invalid(
                "Idempotency-Key",
                format!(
                    "must be 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters without spaces"
                ),
            )
        })?;
    Ok(Some(key.to_string()))
}

/// Reads a body of at most `limit` bytes; larger is `413` before reading it all.
/// The whole body, within `max_body_bytes` and `body_read_timeout_ms`: a caller that declares
/// a body and sends it slowly (or never) holds nothing for longer than that.
pub async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    config: &crate::gateway_config::GatewayConfig,
) -> Result<Bytes, ApiError> {
    let limit = config.max_body_bytes;
    let within = std::time::Duration::from_millis(config.body_read_timeout_ms);
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
    match tokio::time::timeout(within, Limited::new(body, limit).collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(_)) => Err(ApiError::invalid("body", "could not be read")),
        Err(_) => Err(ApiError::invalid(
            "body",
            format!("was not received within {} ms", config.body_read_timeout_ms),
        )),
    }
}

/// A management call says what it sends: `Content-Type: application/json` (parameters such as
/// `; charset=utf-8` allowed). Anything else is refused before it can change anything.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let media_type = headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    match media_type {
        Some(t) if t.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::invalid(
            "Content-Type",
            "must be application/json",
        )),
    }
}

/// A declared code in a path (a command's, a quota pool's, a room's): one that declarations
/// cannot hold names nothing, so it is `404` naming `what` before any look-up.
pub fn check_declared_code(what: &str, code: &str) -> Result<(), ApiError> {
    if is_command_code(code) {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("no {what} {code:?}")))
    }
}

/// Command codes are declared as `^[a-z][a-z0-9_-]*$`, at most 64 characters.
pub fn is_command_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 64
        && code.starts_with(|c: char| c.is_ascii_lowercase())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}
