//! `sluice-bench-baselines`: Sluice against the baselines it claims to beat or approach (raw
//! `intake.lua`, the naive counter-row transaction, pgbench, a static hyper server), in one run
//! on one machine. What it measures and why is documented in `sluice_loadtest::baselines`; this
//! binary only parses the options and runs it.

use clap::Parser;
use sluice_loadtest::baselines::{self, Options};
use sluice_loadtest::bench_stack::BoxError;

#[derive(Debug, Parser)]
#[command(about = "Sluice against its baselines: intake decisions, durable acceptances, polls")]
struct Args {
    #[command(flatten)]
    options: Options,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    baselines::run(&Args::parse().options).await
}
