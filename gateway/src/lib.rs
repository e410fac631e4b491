//! The Sluice gateway: the HTTP front door and the `sluice` CLI.
//!
//! # Layout
//! - [`http`]: listeners, the router, the envelope, error codes, CORS, strict bodies, health and
//!   admin endpoints.
//! - [`identity`]: credentials, subject tokens and tickets become a caller; what unknown
//!   identities and PostgreSQL-backed requests may cost.
//! - [`handlers`]: one module per group of endpoints (enqueue, tickets, commands, rooms, …).
//! - [`polls`]: when to poll again, and waiting commands' polls answered from memory.
//! - [`reads`]: the read-through cache (L1, Redis, origin) behind `GET /v1/reads/{name}`.
//! - [`rooms`]: the admission ticker, the waiting places' board, proof of work, the pass keys.
//! - [`pages`]: the operator dashboard, the browser module and waiting page, the demo page.
//! - [`state`]: connections, scripts, the group committer, caches, the fallback budget.
//! - [`settings`]: the one configuration type of `sluice serve` and `sluice execute` (file,
//!   environment, flags); [`gateway_config`]: the gateway's part of it.
//! - [`cli`]: the `sluice` subcommands, and `sluice dev`, the one-command local stack.

pub mod cli;
pub mod gateway_config;
pub mod handlers;
pub mod http;
pub mod identity;
pub mod logging;
pub mod pages;
pub mod polls;
pub mod reads;
pub mod rooms;
pub mod settings;
pub mod state;
