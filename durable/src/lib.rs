//! What keeps PostgreSQL (the truth, `sluice-store`) and its Redis projection (`sluice-redis`)
//! in step: the command's life cycle, the only code that writes `commands`, and the operator's
//! changes that land in both stores.
//!
//! - [`lifecycle`]: every transition of a command, its PostgreSQL statement and its Redis
//!   script side by side, fenced by epoch and attempt; its upkeep (sweep, repair, rebuild,
//!   retention).
//! - [`budgets`]: the budgets all namespaces of an application share, and their configure.
//! - [`control`]: operator pauses, stored with audit and propagated to Redis.
//! - [`converge`]: an application's pauses and budgets stored in Redis as PostgreSQL holds them.
//! - [`quotas`]: quota pools' counts and capacity, allocations' confirm and release, and the
//!   expiry of reservations.
//! - [`status_board`]: the status board operators read (`GET /v1/status`).
//! - [`figures`]: what `GET /metrics` reads when scraped (projection, quota pools, rooms).
//! - [`http_client`]: the one outbound HTTP client type (webhooks and read origins).
//! - [`faults`]: fault-injection points (feature `fault-injection`, tests only).
//! - [`declaration`], [`field_error`], [`ids`]: re-exported from `sluice-model`.

pub use sluice_model::{declaration, field_error, ids};

pub mod budgets;
pub mod control;
pub mod converge;
pub mod faults;
pub mod figures;
pub mod http_client;
pub mod lifecycle;
pub mod quotas;
pub mod status_board;

pub use sluice_model::DurableError;
