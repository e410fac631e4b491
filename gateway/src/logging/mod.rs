//! How `sluice` logs: the filter (`SLUICE_LOG`, else `RUST_LOG`, else `info`; a filter that does
//! not parse stops the start rather than quietly logging something else) and the format (`text`
//! for a terminal, `json` for a collector: one object per line with the ids a search starts from
//! at its top level, [`json_lines`]).

pub mod json_lines;

use tracing_subscriber::EnvFilter;

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

/// Installs the process's subscriber.
///
/// # Errors
/// What [`filter`] refuses.
pub fn init(format: LogFormat) -> Result<(), String> {
    let filter = filter()?;
    match format {
        LogFormat::Json => tracing_subscriber::fmt()
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json_lines::JsonLines)
            .with_env_filter(filter)
            .init(),
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
    }
    Ok(())
}
