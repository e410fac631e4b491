//! The Sluice gateway: the HTTP front door and the `sluice` CLI.
//!
//! # Layout
//! - [`server`]: accepts connections and drains them on shutdown.
//! - [`router`]: maps method and path to a handler and wraps answers in the envelope.
//! - [`handlers`]: one module per group of endpoints (enqueue, tickets, commands).
//! - [`auth`]: credentials and subject tokens become a [`auth::Caller`].
//! - [`state`]: connections, scripts, the group committer, caches, the fallback budget.
//! - [`error`]: the API's error codes and the one mapping of failures to them.
//! - [`response`]: the JSON envelope.
//! - [`cors`]: per-namespace browser origins.
//! - [`room_ticker`]: admits waiting-room places (every gateway runs one); [`room_board`]:
//!   waiting places' polls answered from memory; [`room_poll_policy`]: when a waiting place
//!   polls again; [`work_challenge`]: proof of work at a room's door, whose difficulty follows
//!   [`arrival_rate`]; [`jwks`]: the public keys that verify passes.
//! - [`waiting_view`]: waiting commands' polls answered from memory (one `waiting.lua` pull per
//!   application at most every refresh).
//! - [`reads`]: the read-through cache (L1, Redis, origin) behind `GET /v1/reads/{name}`.
//! - [`health`]: the public `/readyz` (no I/O) and the admin port's detailed one, which also
//!   rebuilds a missing projection.
//! - [`admin`]: the admin listeners: the gateway's `/metrics` and detailed `/readyz`, the
//!   executor's `/metrics` and `/healthz`.
//! - [`settings`]: the one configuration type of `sluice serve` and `sluice execute` (file,
//!   environment, flags); [`config`]: the gateway's part of it.
//! - [`lookup_budget`] and [`pg_budget`]: what unknown identities and PostgreSQL-backed
//!   requests may cost, per process and per subject.
//! - Pure decisions, unit-tested without servers: [`strict_json`] (request bodies),
//!   [`ticket`] (signed tickets), [`subject_token`] (HS256 JWTs), [`poll_policy`] (when to poll
//!   again), [`url`] (path and query decoding); `mac`: the HMAC both tickets and tokens use.
//! - [`cli`]: the `sluice` subcommands; [`dev`]: the one-command local stack, and [`demo`]: its
//!   demo sale page (`/demo/`, served by `sluice dev` only).
//! - [`ui`]: the operator dashboard at `/ui/` (static files embedded in the binary).
//! - [`sdk`]: the browser module (`/sdk/v1/`) and the hosted waiting page (`/wait/…`).

pub mod admin;
pub mod arrival_rate;
pub mod auth;
pub mod cli;
pub mod config;
pub mod cors;
pub mod demo;
pub mod dev;
pub mod error;
pub mod handlers;
pub mod health;
pub mod jwks;
pub mod lookup_budget;
mod mac;
pub mod pg_budget;
pub mod poll_policy;
pub mod reads;
pub mod response;
pub mod room_board;
pub mod room_poll_policy;
pub mod room_ticker;
pub mod router;
pub mod sdk;
pub mod server;
pub mod settings;
pub mod state;
pub mod strict_json;
pub mod subject_token;
pub mod ticket;
pub mod ui;
pub mod url;
pub mod waiting_view;
pub mod work_challenge;
