//! The JSON log line: `timestamp`, `level`, `target`, the event's `fields`, the span it was
//! logged in (`span`) and every span around it (`spans`, outermost first), as
//! tracing-subscriber's JSON writes them, and, at the top level, the ids a log search starts
//! from: `request_id`, `trace_id` and `command_id` of the innermost span that has each.
//! Collectors (Loki, Elasticsearch, CloudWatch) index top-level keys; a `request_id` nested in
//! `span` or in an array is not found by `request_id="…"`.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The fields of a span lifted to the top level of each line logged inside it.
pub const LIFTED: [&str; 3] = ["request_id", "trace_id", "command_id"];

/// The formatter (spans' fields must be formatted by [`JsonFields`], which it reads back).
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
                .into(),
        );
        line.insert("level".into(), metadata.level().as_str().into());
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        line.insert("fields".into(), fields.into());
        line.insert("target".into(), metadata.target().into());
        let mut spans = Vec::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let mut described = Map::new();
                described.insert("name".into(), span.name().into());
                let extensions = span.extensions();
                if let Some(formatted) = extensions.get::<FormattedFields<JsonFields>>()
                    && let Ok(Value::Object(own)) = serde_json::from_str::<Value>(formatted)
                {
                    described.extend(own);
                }
                spans.push(Value::Object(described));
            }
        }
        for name in LIFTED {
            let innermost = spans.iter().rev().find_map(|span| span.get(name));
            if let Some(value) = innermost {
                line.insert(name.into(), value.clone());
            }
        }
        if let Some(span) = spans.last() {
            line.insert("span".into(), span.clone());
        }
        if !spans.is_empty() {
            line.insert("spans".into(), spans.into());
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// An event's fields as JSON values (numbers stay numbers).
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}
