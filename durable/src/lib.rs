//! The stateful half of Sluice: PostgreSQL, which is the truth, and the Redis projection, which is
//! the fast path and can always be rebuilt from PostgreSQL.
//!
//! # Layout
//! - [`db`]: connection pool and embedded migrations.
//! - [`error`]: the one error type of this crate.
//! - [`field_error`], [`ids`], [`declaration`]: re-exported from `sluice-model`, the crate below
//!   this one (ids, a command's status, the declaration language).
//! - [`secrets`]: generation and hashing of credentials, subject keys and webhook secrets.
//! - [`tenancy`]: applications, namespaces, credentials, subject keys; bootstrap and apply.
//! - [`webhook_secret`]: rotating a namespace's webhook secret (two live during a rotation).
//! - [`application`]: the budgets all namespaces of an application share, and their configure.
//! - [`pass_keys`]: the Ed25519 keys that sign waiting-room passes, their rotation and JWKS.
//! - [`receipts`]: idempotency receipts of management calls (digest and replay).
//! - [`control`]: operator pauses, stored with audit and propagated to Redis.
//! - [`status`]: the status board operators read.
//! - [`quotas`]: quota pools' counts and capacity, allocations' confirm and release, and the
//!   expiry of reservations.
//! - [`outbox`]: the commands table: group-committed inserts and the queries the API needs.
//! - [`lifecycle`]: every transition of a command, its PostgreSQL statement and its Redis
//!   script side by side, fenced by epoch and attempt.
//! - [`http_client`]: the one outbound HTTP client type (webhooks and read origins).
//! - [`projection`]: Redis keys, Lua scripts and the rebuild of an application's projection.
//! - [`faults`]: fault-injection points (feature `fault-injection`, tests only).
//! - [`metrics`]: Prometheus counters of the gateway and the executor, and projection figures.

pub use sluice_model::{declaration, field_error, ids};

pub mod application;
pub mod batching;
pub mod control;
pub mod db;
pub mod error;
pub mod faults;
pub mod http_client;
pub mod lifecycle;
pub mod metrics;
pub mod outbox;
pub mod pass_keys;
pub mod projection;
pub mod quotas;
pub mod receipts;
pub mod rooms;
pub mod secrets;
pub mod status;
pub mod tenancy;
pub mod webhook_secret;

pub use error::DurableError;
