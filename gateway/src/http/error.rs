//! The API's error codes and the one place where failures become HTTP answers.

use hyper::StatusCode;
use serde_json::{Map, Value};
use sluice_durable::DurableError;
use sluice_durable::field_error::FieldError;

/// The fixed error codes of API.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    Unauthenticated,
    PermissionDenied,
    NotFound,
    StateConflict,
    IdempotencyConflict,
    PayloadTooLarge,
    ApplicationFull,
    QueueFull,
    RateLimited,
    IntakePaused,
    Unavailable,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::NotFound => "NOT_FOUND",
            Self::StateConflict => "STATE_CONFLICT",
            Self::IdempotencyConflict => "IDEMPOTENCY_CONFLICT",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::ApplicationFull => "APPLICATION_FULL",
            Self::QueueFull => "QUEUE_FULL",
            Self::RateLimited => "RATE_LIMITED",
            Self::IntakePaused => "INTAKE_PAUSED",
            Self::Unavailable => "UNAVAILABLE",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::InvalidArgument => StatusCode::BAD_REQUEST,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::PermissionDenied => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::StateConflict | Self::IdempotencyConflict => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::ApplicationFull | Self::QueueFull | Self::RateLimited => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::IntakePaused | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Whether retrying the same request later can succeed.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::ApplicationFull
                | Self::QueueFull
                | Self::RateLimited
                | Self::IntakePaused
                | Self::Unavailable
        )
    }

    /// The `Retry-After` advice when the failure itself does not know better.
    pub fn default_retry_after_ms(self) -> Option<u64> {
        match self {
            Self::ApplicationFull | Self::QueueFull | Self::Unavailable => Some(1_000),
            Self::RateLimited => Some(1_000),
            Self::IntakePaused => Some(5_000),
            _ => None,
        }
    }
}

/// A failure on its way to the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub retry_after_ms: Option<u64>,
    pub details: Option<Map<String, Value>>,
    /// Set on a method the path does not serve: the answer is `405` with this `Allow` header.
    pub allow: Option<&'static str>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after_ms: code.default_retry_after_ms(),
            details: None,
            allow: None,
        }
    }

    /// `405 Method Not Allowed` with `Allow: allow`, for a path that exists with other methods.
    /// API.md's codes have none for this, so the envelope carries `INVALID_ARGUMENT` naming the
    /// field `method` ("fix the request; do not retry as is"): not `NOT_FOUND`, which would
    /// tell a client that the command or read it named does not exist.
    pub fn method_not_allowed(method: &str, path: &str, allow: &'static str) -> Self {
        let mut error = Self::invalid(
            "method",
            format!("{method} is not allowed on {path}; allowed: {allow}"),
        );
        error.allow = Some(allow);
        error
    }

    /// The HTTP status of the answer: the code's, or `405` for a method the path does not serve.
    pub fn status(&self) -> StatusCode {
        match self.allow {
            Some(_) => StatusCode::METHOD_NOT_ALLOWED,
            None => self.code.status(),
        }
    }

    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    pub fn with_detail(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.details
            .get_or_insert_with(Map::new)
            .insert(key.to_string(), value.into());
        self
    }

    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError::new(field, message).into()
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unauthenticated, message)
    }

    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::PermissionDenied, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }
}

impl From<FieldError> for ApiError {
    fn from(error: FieldError) -> Self {
        Self::new(ErrorCode::InvalidArgument, error.to_string())
            .with_detail("field", error.field.clone())
    }
}

/// The single mapping of storage failures to API codes. Infrastructure failures never reveal
/// internals to the caller; they are logged where they happen, and Redis and PostgreSQL
/// failures are counted here for `/metrics` (once per request they failed).
impl From<DurableError> for ApiError {
    fn from(error: DurableError) -> Self {
        sluice_metrics::storage_error(&error);
        match error {
            DurableError::Invalid(field) => field.into(),
            DurableError::NotFound(message) => Self::not_found(message),
            DurableError::StateConflict(message) => Self::new(ErrorCode::StateConflict, message),
            DurableError::Unavailable(message) => Self::unavailable(message),
            DurableError::IdempotencyConflict(message) => {
                Self::new(ErrorCode::IdempotencyConflict, message)
            }
            DurableError::Postgres(_) | DurableError::CommitFailed(_) => {
                tracing::warn!(%error, "PostgreSQL unavailable");
                Self::unavailable(
                    "PostgreSQL is unavailable; the outcome of a write may be unknown: retry with the same key",
                )
            }
            DurableError::Redis(_) => {
                tracing::warn!(%error, "Redis unavailable");
                Self::unavailable("Redis is unavailable; retry with the same key")
            }
            // What a client of a gateway that died at that point sees: no answer it can trust.
            DurableError::FaultInjected(point) => Self::unavailable(format!(
                "fault injected: the gateway stopped at {point}; retry with the same key"
            )),
            DurableError::Migrate(_)
            | DurableError::Misconfigured(_)
            | DurableError::Script { .. }
            | DurableError::CommitterStopped => {
                tracing::error!(%error, "internal failure");
                Self::unavailable("the gateway cannot serve this request right now")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_contract_status() {
        let cases = [
            (ErrorCode::InvalidArgument, 400, false),
            (ErrorCode::Unauthenticated, 401, false),
            (ErrorCode::PermissionDenied, 403, false),
            (ErrorCode::NotFound, 404, false),
            (ErrorCode::StateConflict, 409, false),
            (ErrorCode::IdempotencyConflict, 409, false),
            (ErrorCode::PayloadTooLarge, 413, false),
            (ErrorCode::ApplicationFull, 429, true),
            (ErrorCode::QueueFull, 429, true),
            (ErrorCode::RateLimited, 429, true),
            (ErrorCode::IntakePaused, 503, true),
            (ErrorCode::Unavailable, 503, true),
        ];
        for (code, status, retryable) in cases {
            assert_eq!(code.status().as_u16(), status, "{}", code.as_str());
            assert_eq!(code.retryable(), retryable, "{}", code.as_str());
        }
    }

    #[test]
    fn field_errors_name_the_field() {
        let error: ApiError = FieldError::new("input.offer", "must be a uuid").into();
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert!(error.message.contains("input.offer"));
        assert_eq!(
            error.details.and_then(|d| d.get("field").cloned()),
            Some(Value::from("input.offer"))
        );
    }

    #[test]
    fn a_wrong_method_is_405_with_the_allowed_ones() {
        let error = ApiError::method_not_allowed("DELETE", "/v1/status", "GET");
        assert_eq!(error.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(error.code, ErrorCode::InvalidArgument);
        assert_eq!(error.allow, Some("GET"));
        assert_eq!(error.retry_after_ms, None);
        assert_eq!(
            error.details.and_then(|d| d.get("field").cloned()),
            Some(Value::from("method"))
        );
        assert_eq!(
            ApiError::not_found("x").status(),
            StatusCode::NOT_FOUND,
            "other failures keep their code's status"
        );
    }

    #[test]
    fn storage_failures_are_retryable_unavailable() {
        let error: ApiError = DurableError::CommitFailed("boom".into()).into();
        assert_eq!(error.code, ErrorCode::Unavailable);
        assert_eq!(error.retry_after_ms, Some(1_000));
        assert!(!error.message.contains("boom"));
    }
}
