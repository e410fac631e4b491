//! The ids a request arrives with: an `X-Request-Id` the caller (or a proxy in front, such as
//! nginx's `$request_id`) chose, and the W3C `traceparent` of a trace it belongs to. Each is
//! kept only when well-formed; otherwise the gateway makes its own, so every answer and every
//! log line still has one of each.

use hyper::HeaderMap;

/// The request id of an answer: the caller's `X-Request-Id` when it is 32 hex digits or a
/// hyphenated UUID (both said as 32 lowercase hex digits, the form the API promises), else a
/// new one.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .and_then(well_formed_request_id)
        .unwrap_or_else(crate::http::response::new_request_id)
}

fn well_formed_request_id(text: &str) -> Option<String> {
    let digits: String = match text.len() {
        32 => text.to_string(),
        36 if [8, 13, 18, 23].iter().all(|&i| text.as_bytes()[i] == b'-') => text.replace('-', ""),
        _ => return None,
    };
    (digits.len() == 32 && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| digits.to_ascii_lowercase())
}

/// A `traceparent` (W3C Trace Context, level 1): `00-<trace id>-<parent span id>-<flags>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// 16 lowercase hex digits, not all zero: the caller's span.
    pub parent_id: String,
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Reads a header value as the specification says a receiver must: version `ff` is
    /// invalid, version `00` is exactly 55 characters, a later version may carry more after
    /// the flags (ignored); ids of only zeros and uppercase hex are invalid.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let text = text.trim();
        let mut parts = text.splitn(5, '-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let rest = parts.next();
        let lower_hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        if !lower_hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
            return None;
        }
        let not_zero = |s: &str| s.bytes().any(|b| b != b'0');
        if !lower_hex(trace_id, 32) || !not_zero(trace_id) {
            return None;
        }
        if !lower_hex(parent_id, 16) || !not_zero(parent_id) || !lower_hex(flags, 2) {
            return None;
        }
        Some(TraceParent {
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            flags: u8::from_str_radix(flags, 16).ok()?,
        })
    }

    /// The header value, version `00`.
    pub fn header(&self) -> String {
        format!("00-{}-{}-{:02x}", self.trace_id, self.parent_id, self.flags)
    }
}

/// Makes `span` (a request's) continue the caller's trace when spans are exported, and returns
/// the request's trace id: the exported span's, else the caller's `traceparent`'s, else a new
/// one.
pub fn adopt(span: &tracing::Span, headers: &HeaderMap) -> String {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if crate::logging::otel::enabled() {
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&opentelemetry_http::HeaderExtractor(headers))
        });
        // A span the exporting layer did not see (filtered out) cannot take a parent: its
        // trace is then the caller's, read below.
        let _ = span.set_parent(parent);
        let context = span.context();
        let own = context.span().span_context().clone();
        if own.is_valid() {
            return own.trace_id().to_string();
        }
    }
    trace_id(headers)
}

/// The `traceparent` a command is stored with, so that its attempts continue the request's
/// trace: the current (request) span's when spans are exported, else the caller's own when
/// well-formed, else none.
pub fn for_command(headers: &HeaderMap) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if crate::logging::otel::enabled() {
        let context = tracing::Span::current().context();
        let own = context.span().span_context().clone();
        if own.is_valid() {
            return Some(
                TraceParent {
                    trace_id: own.trace_id().to_string(),
                    parent_id: own.span_id().to_string(),
                    flags: own.trace_flags().to_u8(),
                }
                .header(),
            );
        }
    }
    incoming(headers).map(|parent| parent.header())
}

/// The request's own `traceparent`, when well-formed.
fn incoming(headers: &HeaderMap) -> Option<TraceParent> {
    headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok())
        .and_then(TraceParent::parse)
}

/// The trace id of a request: its `traceparent`'s when well-formed, else a new one.
pub fn trace_id(headers: &HeaderMap) -> String {
    incoming(headers)
        .map(|parent| parent.trace_id)
        .unwrap_or_else(crate::http::response::new_request_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, value.parse().expect("a header value"));
        headers
    }

    #[test]
    fn a_well_formed_request_id_is_kept_in_the_form_the_api_promises() {
        let kept = "0123456789abcdef0123456789ABCDEF";
        assert_eq!(
            request_id(&headers("x-request-id", kept)),
            kept.to_ascii_lowercase()
        );
        assert_eq!(
            request_id(&headers(
                "x-request-id",
                "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
            )),
            "6ba7b8109dad11d180b400c04fd430c8"
        );
        for refused in [
            "",
            "short",
            "0123456789abcdef0123456789abcdeg",
            "6ba7b810-9dad-11d1-80b4_00c04fd430c8",
            "0123456789abcdef0123456789abcdef0",
            "; DROP TABLE",
        ] {
            let made = request_id(&headers("x-request-id", refused));
            assert_ne!(made, refused);
            assert_eq!(made.len(), 32, "a new id for {refused:?}");
        }
    }

    #[test]
    fn traceparent_is_read_as_the_specification_says() {
        let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parent = TraceParent::parse(valid).expect("valid");
        assert_eq!(parent.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.parent_id, "00f067aa0ba902b7");
        assert_eq!(parent.flags, 1);
        assert_eq!(parent.header(), valid);
        assert!(
            TraceParent::parse(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future-part"
            )
            .is_some(),
            "a later version may carry more"
        );
        for invalid in [
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1g",
        ] {
            assert_eq!(TraceParent::parse(invalid), None, "{invalid}");
        }
        assert_eq!(trace_id(&headers("traceparent", valid)), parent.trace_id);
        let fresh = trace_id(&headers("traceparent", "garbage"));
        assert_eq!(fresh.len(), 32);
    }
}
