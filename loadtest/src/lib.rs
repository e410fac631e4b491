//! Load generation and benchmarks for Sluice.
//!
//! # Layout
//! - `sluice-loadtest` (`src/bin/loadtest.rs`): the load generator. [`scenario`] drives a run
//!   (`drop`, `steady`, `backend`, `room`) against a [`stack`] it starts (or an external one), callers
//!   talk to the gateway through [`api`], [`record`] tallies what they saw ([`holders`] what
//!   the winners of a reserved drop did with their units), [`sampler`] watches `/v1/status`,
//!   PostgreSQL and `/proc`, [`invariants`] checks PostgreSQL afterwards, [`report`] is the
//!   result (JSON and HTML), [`summary`] its Markdown, [`progress`] the bar, [`servers`] the
//!   offer origin and webhook backend, [`machine`] what it ran on, [`sigterm`] a gateway's
//!   SIGTERM mid-run witnessed from the callers' side (`--sigterm-gateway-after`).
//! - [`driver`]: runs N HTTP requests from C concurrent tasks and records latencies.
//! - [`bench_stack`]: a throwaway database and an in-process gateway for a benchmark run.
//! - [`baselines`]: what `sluice-bench-baselines` runs: Sluice against its baselines, pair by pair.
//! - Binaries in `src/bin/`: `sluice-bench-intake` (group commit vs one transaction per request),
//!   `sluice-bench-quota` (batched quota transactions vs one transaction per command),
//!   `sluice-bench-webhook` (webhook commands through Sluice vs the same backend driven directly),
//!   `sluice-bench-status` (`GET /v1/status` on a million rows vs the naive count of the namespace),
//!   `sluice-bench-read` (hot-key `GET /v1/reads/{name}` through the read cache vs raw Redis `GET`s),
//!   `sluice-bench-baselines` (intake decisions, durable acceptances and ticket polls against raw
//!   `intake.lua`, the naive counter-row transaction, pgbench and a static hyper server).

pub mod api;
pub mod baselines;
pub mod bench_stack;
pub mod connections;
pub mod driver;
pub mod holders;
pub mod invariants;
pub mod machine;
pub mod progress;
pub mod record;
pub mod report;
pub mod sampler;
pub mod scenario;
pub mod servers;
pub mod sigterm;
pub mod stack;
pub mod summary;
pub mod waiting;
