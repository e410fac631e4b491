//! The Redis projection: polls served from it, its rebuild from PostgreSQL, the reconciler's
//! repairs, and a gateway and an executor while Redis is unreachable.

pub(crate) mod basics;
pub(crate) mod reconcile;
pub(crate) mod redis_outage;
