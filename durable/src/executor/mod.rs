//! The executor: drains accepted commands under their budgets and lands exactly one
//! authoritative result per command.
//!
//! - [`config`]: executor settings.
//! - [`catalog`]: which applications exist, their generations, and the admission specs of their
//!   commands, refreshed into Redis for `admit.lua`.
//! - [`claim`]: admitted heads become `executing` rows leased to this executor.
//! - [`quota`]: the built-in quota handler; one transaction per pool and batch.
//! - [`webhook`]: the webhook handler: signed requests, retries, `running`, `needs_review`.
//! - [`land`]: mirrors terminal states into Redis and releases permits.
//! - [`reconcile`]: repairs waiting commands whose Redis projection is missing.
//! - [`sweep`]: expired leases, overdue waiting commands, retention (advisory-locked).
//! - [`run`]: the loop that ties them together, woken by `LISTEN` or a tick.

pub mod catalog;
pub mod claim;
pub mod config;
pub mod land;
pub mod quota;
pub mod reconcile;
pub mod run;
pub mod sweep;
pub mod webhook;

pub use config::ExecutorConfig;
pub use run::Executor;
