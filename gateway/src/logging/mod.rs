//! How `sluice` logs: the filter (`SLUICE_LOG`, else `RUST_LOG`, else `info`; a filter that does
//! not parse stops the start rather than quietly logging something else) and the format (`text`
//! for a terminal, `json` for a collector: one object per line with the ids a search starts from
//! at its top level, [`json_lines`]).

pub mod json_lines;
pub mod otel;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// `--log-format`: a closed set, so a typo is refused with the choices instead of giving text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (`request_id`, `trace_id`, `command_id` at its top level).
    Json,
}

/// The variables a filter is read from, first match wins.
pub const FILTER_VARIABLES: [&str; 2] = ["SLUICE_LOG", "RUST_LOG"];

/// The filter of the first of [`FILTER_VARIABLES`] that is set, else `info`.
///
/// # Errors
/// The variable's name, its value and why it is not a filter.
pub fn filter() -> Result<EnvFilter, String> {
    for name in FILTER_VARIABLES {
        if let Ok(value) = std::env::var(name) {
            return EnvFilter::try_new(&value)
                .map_err(|e| format!("{name}={value:?} is not a log filter: {e}"));
        }
    }
    Ok(EnvFilter::new("info"))
}

/// The crates whose spans are exported as traces (at `info` and above, whatever the log filter:
/// a quiet log still traces).
const TRACED: [&str; 5] = [
    "sluice_gateway",
    "sluice_executor",
    "sluice_durable",
    "sluice_store",
    "sluice_redis",
];

/// Installs the process's subscriber: the log lines as `format` says, filtered by [`filter`],
/// and, when the environment asks for them ([`otel::requested`]), the spans exported as traces
/// under the name `service`. The [`otel::Telemetry`] returned must live until the process ends
/// (dropping it flushes the last spans).
///
/// # Errors
/// What [`filter`] refuses; an exporter that cannot be built.
pub fn init(format: LogFormat, service: &str) -> Result<Option<otel::Telemetry>, String> {
    let filter = filter()?;
    let (telemetry, traces) = if otel::requested() {
        let (telemetry, layer) = otel::Telemetry::start(service)?;
        let traced = TRACED.iter().fold(Targets::new(), |targets, target| {
            targets.with_target(*target, LevelFilter::INFO)
        });
        (Some(telemetry), Some(layer.with_filter(traced)))
    } else {
        (None, None)
    };
    let lines = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json_lines::JsonLines)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer().with_filter(filter).boxed(),
    };
    tracing_subscriber::registry()
        .with(traces)
        .with(lines)
        .init();
    Ok(telemetry)
}
