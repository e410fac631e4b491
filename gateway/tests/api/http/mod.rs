//! The wire: connection hygiene, strict JSON bodies and CORS.

pub(crate) mod connections;
pub(crate) mod cors;
pub(crate) mod strict_bodies;
