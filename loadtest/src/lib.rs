//! Load generation and benchmarks for Sluice.
//!
//! # Layout
//! - [`driver`]: runs N HTTP requests from C concurrent tasks and records latencies.
//! - [`bench_stack`]: a throwaway database and an in-process gateway for a benchmark run.
//! - Binaries in `src/bin/`: `sluice-bench-intake` (group commit vs one transaction per request),
//!   `sluice-bench-quota` (batched quota transactions vs one transaction per command),
//!   `sluice-bench-webhook` (webhook commands through Sluice vs the same backend driven directly),
//!   `sluice-bench-status` (`GET /v1/status` on a million rows vs the naive count of the namespace),
//!   `sluice-bench-read` (hot-key `GET /v1/reads/{name}` through the read cache vs raw Redis `GET`s).

pub mod bench_stack;
pub mod driver;
