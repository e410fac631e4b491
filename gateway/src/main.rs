//! `sluice`: parse, set up logging, run. Everything else lives in the library.

use clap::Parser;
use sluice_gateway::cli::{Cli, run};

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if cli.log_format == "json" {
        // Each line names its span and the spans around it, so a line logged while serving a
        // request carries that request's `request_id` (`span.request_id`, and in `spans`).
        tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    if let Err(error) = run(cli).await {
        eprintln!("sluice: {error}");
        std::process::exit(1);
    }
}
