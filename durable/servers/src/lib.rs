//! Throwaway `redis-server` (alone or as a Redis Cluster) and `postgres` instances on this machine: what `sluice dev` starts
//! when none is reachable, and what the test kit (`sluice-testkit`) hands every test.
//!
//! Every server gets a free loopback port and its own directory
//! `/tmp/sluice-testkit-<pid>-<starttime>-<kind>-XXXXXX` holding its data and
//! its log. Nothing may outlive the process that started it, even though statics are
//! never dropped and `cargo test` runs tests on short-lived threads:
//!
//! * every child is forked by one never-ending spawner thread (see
//!   [`spawn`]) through `setpriv --pdeathsig`, so the kernel signals it when
//!   the owning process dies — `PR_SET_PDEATHSIG` fires when the *forking
//!   thread* exits, which for that thread means process exit;
//! * directories of earlier runs whose owning process is gone are deleted
//!   the first time a server is started (see [`rundir`]).
//!
//! Start-up is synchronous (the readiness probes use blocking sockets), so the
//! servers start from plain and async code alike. Everything panics with a clear
//! message instead of returning errors, including the tail of the server log: a
//! server that cannot start must stop its caller loudly.
//!
//! Requires root: postgres refuses to run as root, so it runs as the
//! `postgres` OS user via `setpriv --reuid`.

mod pg_probe;
mod pgbouncer;
mod ports;
mod postgres;
mod redis;
mod redis_cluster;
mod rundir;
mod server_tls;
mod spawn;

pub use pgbouncer::{PgBouncer, PoolMode};
pub use ports::free_port;
pub use postgres::PgServer;
pub use redis::{RdbSnapshot, RedisServer};
pub use redis_cluster::{ClusterNode, RedisCluster};
pub use server_tls::ServerTls;
