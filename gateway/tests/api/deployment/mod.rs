//! How Sluice is run: graceful shutdown, the checks at start, behind PgBouncer, over TLS to
//! PostgreSQL, and on a Redis Cluster that loses a master.

pub(crate) mod cluster;
pub(crate) mod pgbouncer;
pub(crate) mod shutdown;
pub(crate) mod startup_checks;
pub(crate) mod tls;
