//! `sluice`: parse, set up logging, run. Everything else lives in the library.

use clap::Parser;
use sluice_gateway::cli::{Cli, run};

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if cli.log_format == "json" {
        tracing_subscriber::fmt()
            .json()
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
