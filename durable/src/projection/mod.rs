//! The Redis projection of PostgreSQL: keys, the scripts, the admission configuration, ticket
//! reads, the read cache, and the rebuild. (The life-cycle scripts' callers are in
//! [`crate::lifecycle::redis`].)
//!
//! Nothing here is the truth. Every key can be rebuilt from PostgreSQL ([`rebuild`]); every
//! life-cycle script refuses with `NOT_READY` when the projection is missing, older than
//! PostgreSQL's generation, or held by a Redis that lost writes, so such a Redis is never
//! trusted for an admission.

pub mod admission_config;
pub mod admission_keys;
pub mod asked_keys;
pub mod cache;
pub mod connect;
pub mod handle;
pub mod keys;
pub mod rebuild;
mod scripts;
pub mod settings;
pub mod start_rate;
mod supervise;
pub mod ticket;
pub mod waiting;

pub use connect::connect_redis;
pub use handle::Projection;
pub use keys::{AppKeys, request_key_field};
pub use scripts::STRICT_KEYS_VARIABLE;
use scripts::Scripts;
