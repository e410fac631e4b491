//! The trace a command's attempt belongs to: the one its enqueue was made in (the
//! `traceparent` stored with the row), so a trace reads request → attempt → webhook call → its
//! landing. Without an exporting subscriber (traces off) the spans are plain `tracing` spans and
//! the stored `traceparent` is sent on to the webhook as it came.

use std::collections::HashMap;

use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use sluice_durable::lifecycle::claim::Claimed;

/// The `attempt` span of `claimed`, child of the span its `traceparent` names.
pub fn attempt_span(claimed: &Claimed) -> tracing::Span {
    let span = tracing::info_span!(
        "attempt",
        command_id = %claimed.row.id,
        command = %claimed.row.command,
        attempt = claimed.attempts,
    );
    if let Some(parent) = &claimed.trace_parent {
        let carrier = HashMap::from([("traceparent".to_string(), parent.clone())]);
        let context = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&carrier)
        });
        // Refused only for a span the exporting layer did not see: nothing to continue then.
        let _ = span.set_parent(context);
    }
    span
}

/// Sets `traceparent` on an outgoing request: the context of `span` when spans are exported,
/// else `stored` (the command's own) as it came, else nothing.
pub fn inject(span: &tracing::Span, stored: Option<&str>, headers: &mut hyper::HeaderMap) {
    let mut injected = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&span.context(), &mut injected);
    });
    let value = injected
        .remove("traceparent")
        .or_else(|| stored.map(str::to_string));
    if let Some(value) = value
        && let Ok(value) = hyper::header::HeaderValue::from_str(&value)
    {
        headers.insert("traceparent", value);
    }
}
