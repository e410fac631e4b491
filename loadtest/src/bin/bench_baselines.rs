//! `sluice-bench-baselines`: Sluice against the baselines it claims to beat or approach (raw
//! `intake.lua`, the naive counter-row transaction, pgbench, a static hyper server), in one run
//! on one machine. What it measures and why is documented in `sluice_loadtest::baselines`; this
//! binary only parses the options and runs it.

/// The allocator the `sluice` binary ships with (gateway/src/main.rs): the gateway measured here
/// runs in this process, and on glibc's allocator an answer costs 5–7 µs more than in production.
/// The baselines in this process get it too, so both sides of a pair allocate alike.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
