//! Throwaway `redis-server` and `postgres` instances for integration tests.
//!
//! Every server gets a free loopback port and its own directory
//! `/tmp/sluice-testkit-<pid>-<starttime>-<kind>-XXXXXX` holding its data and
//! its log. Nothing may outlive the test binary, even though statics are
//! never dropped and `cargo test` runs tests on short-lived threads:
//!
//! * every child is forked by one never-ending spawner thread (see
//!   [`spawn`]) through `setpriv --pdeathsig`, so the kernel signals it when
//!   the test process dies — `PR_SET_PDEATHSIG` fires when the *forking
//!   thread* exits, which for that thread means process exit;
//! * directories of earlier runs whose owning process is gone are deleted
//!   the first time a server is started (see [`rundir`]).
//!
//! Start-up is synchronous (the readiness probes use blocking sockets), so
//! [`shared_redis`] and [`shared_postgres`] work from plain and async tests
//! alike. Everything panics with a clear message instead of returning errors:
//! this is test code and a failed start must fail the test loudly, including
//! the tail of the server log.
//!
//! Requires root: postgres refuses to run as root, so it runs as the
//! `postgres` OS user via `setpriv --reuid`.

mod pg_probe;
mod ports;
mod postgres;
mod redis;
mod rundir;
mod spawn;

use std::sync::OnceLock;

pub use postgres::PgServer;
pub use redis::{RdbSnapshot, RedisServer};

/// One redis-server per test binary, started on first use and shared by
/// every test in it. Tests that kill or restart a server must use
/// [`RedisServer::start`] instead. Keys are shared too: use unique key names.
pub fn shared_redis() -> &'static RedisServer {
    static SHARED: OnceLock<RedisServer> = OnceLock::new();
    SHARED.get_or_init(RedisServer::start)
}

/// One postgres per test binary, started on first use and shared by every
/// test in it; isolate tests with [`PgServer::fresh_database`]. Tests that
/// stop or kill a server must use [`PgServer::start`] instead.
pub fn shared_postgres() -> &'static PgServer {
    static SHARED: OnceLock<PgServer> = OnceLock::new();
    SHARED.get_or_init(PgServer::start)
}
