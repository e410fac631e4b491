//! The Redis projection of PostgreSQL: keys, scripts and their typed callers, and rebuild.
//!
//! Nothing here is the truth. Every key can be rebuilt from PostgreSQL ([`rebuild`]); every
//! script refuses with `NOT_READY` when the projection is missing or older than PostgreSQL's
//! generation, so a Redis that lost data is never trusted for an admission.

pub mod cache;
pub mod connect;
pub mod execution;
pub mod intake;
pub mod keys;
pub mod rebuild;
pub mod scripts;
pub mod settle;
pub mod ticket;

pub use connect::connect_redis;
pub use keys::{AppKeys, request_key_field};
pub use scripts::Scripts;
