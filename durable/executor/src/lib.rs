//! The executor: drains accepted commands under their budgets and lands exactly one
//! authoritative result per command.
//!
//! The transitions are [`sluice_durable::lifecycle`]'s; the executor decides when they run and which
//! handler runs a command.
//! - [`executor_config`]: the executor's part of the settings (`[executor]`).
//! - [`catalog`]: which applications exist, their generations, and the admission specs of their
//!   commands, refreshed into Redis for `admit.lua`.
//! - [`attempts`]: the attempts in hand, renewed, and stopped when they may have lost their lease.
//! - [`fence`]: until when an attempt may still act at its backend, checked as a request goes out.
//! - [`quota`]: the built-in quota handler; one transaction per pool and batch.
//! - [`webhook`]: the webhook handler: signed requests, retries, `running`, `needs_review`.
//! - [`sweepers`]: one round of the sweepers and repairs.
//! - [`run`]: the loop that ties them together, woken by `LISTEN` or a tick.

pub mod attempts;
pub mod catalog;
pub mod executor_config;
pub mod fence;
pub mod quota;
pub mod run;
pub mod sweepers;
pub mod tracing_context;
pub mod webhook;

pub use executor_config::ExecutorConfig;
pub use run::Executor;
