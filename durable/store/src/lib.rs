//! PostgreSQL, the truth of Sluice: a command exists once its row is committed here, and every
//! Redis key can be rebuilt from what this crate reads. Nothing here talks to Redis; writes that
//! must reach the projection too are made by `sluice-durable`, above this crate, and the
//! statements that change a command's row are the life cycle's (`sluice_durable::lifecycle`),
//! never this crate's.
//!
//! - [`db`]: the connection pool and the embedded migrations (`migrations/`).
//! - [`outbox`]: the `commands` table: its partitions by day, its one row type and its reads.
//! - [`tenancy`]: applications, namespaces, credentials, subject keys; bootstrap and apply.
//! - [`secrets`]: generation and hashing of credentials, subject keys and webhook secrets.
//! - [`webhook_secret`]: rotating a namespace's webhook secret (two live during a rotation).
//! - [`receipts`]: idempotency receipts of management calls (digest and replay).
//! - [`pass_keys`]: the Ed25519 keys that sign waiting-room passes, their rotation and JWKS.
//! - [`rooms`]: waiting rooms: places, joins, leaves, heartbeats, the fair draw and admission.
//! - [`batching`]: the group-commit machinery every batched writer shares.

// The vocabulary every module here names as `crate::…` (not re-exported: other crates take it
// from `sluice-model`).
use sluice_model::{DurableError, declaration, field_error, ids};

pub mod batching;
pub mod db;
pub mod outbox;
pub mod pass_keys;
pub mod receipts;
pub mod rooms;
pub mod secrets;
pub mod tenancy;
pub mod webhook_secret;
