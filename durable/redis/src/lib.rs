//! The Redis projection of PostgreSQL: the handle and its clients, keys, the scripts, the
//! admission configuration, ticket and waiting-place reads, and the read cache. The life-cycle
//! scripts' callers (the Redis side of each transition) and the rebuild are the life cycle's
//! (`sluice_durable::lifecycle`); nothing here reads PostgreSQL.
//!
//! Nothing here is the truth. Every key can be rebuilt from PostgreSQL; every
//! life-cycle script refuses with `NOT_READY` when the projection is missing, older than
//! PostgreSQL's generation, or held by a Redis that lost writes, so such a Redis is never
//! trusted for an admission.

// The vocabulary every module here names as `crate::…` (not re-exported: other crates take it
// from `sluice-model`).
use sluice_model::{DurableError, declaration, ids};

pub mod admission_config;
pub mod admission_keys;
pub mod asked_keys;
pub mod cache;
pub mod connect;
pub mod handle;
pub mod key_names;
pub mod redis_tls;
pub mod redis_url;
mod scripts;
pub mod start_rate;
mod supervise;
pub mod ticket;
pub mod waiting;

pub use connect::connect_redis;
pub use handle::Projection;
pub use key_names::{AppKeys, request_key_field};
pub use redis_url::RedisUrl;
pub use scripts::STRICT_KEYS_VARIABLE;
use scripts::Scripts;
