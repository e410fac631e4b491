//! HTTP itself, apart from what any endpoint decides: the listeners, the router, the envelope,
//! the error codes, CORS, strict request bodies, path and query decoding, and the health and
//! admin endpoints.
//!
//! - [`server`]: accepts connections and drains them on shutdown.
//! - [`router`]: maps method and path to a handler and wraps answers in the envelope.
//! - [`error`]: the API's error codes and the one mapping of failures to them.
//! - [`response`]: the JSON envelope.
//! - [`cors`]: per-namespace browser origins.
//! - [`strict_json`]: request bodies, refused whole on any field out of place.
//! - [`url`]: path and query decoding.
//! - [`health`]: the public `/readyz` (no I/O) and the admin port's detailed one, which also
//!   rebuilds a missing projection.
//! - [`admin`]: the admin listeners: the gateway's `/metrics` and detailed `/readyz`, the
//!   executor's `/metrics` and `/healthz`.

pub mod admin;
pub mod cors;
pub mod drain;
pub mod error;
pub mod health;
pub mod response;
pub mod route_names;
pub mod router;
pub mod server;
pub mod strict_json;
pub mod trace_context;
pub mod url;
