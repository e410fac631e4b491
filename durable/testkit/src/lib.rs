//! The test kit: real Redis and PostgreSQL servers for tests, never mocks.
//!
//! [`shared_redis`] and [`shared_postgres`] start one server of each per test binary, on first
//! use; tests that kill, flush or restart a server start one of their own with
//! [`RedisServer::start`] or [`PgServer::start`]. A dev-dependency only: no binary links it
//! (`sluice dev` starts its servers with `sluice-servers` directly).

use std::sync::OnceLock;

mod poll;
pub mod props;
mod redis_keys;
mod tls;

pub use poll::eventually;
pub use redis_keys::{live_leases, now_ms, scan_keys};
pub use sluice_servers::{
    ClusterNode, PgBouncer, PgServer, PoolMode, RdbSnapshot, RedisCluster, RedisServer, free_port,
};
pub use tls::{ServerTls, TestCa};

/// One redis-server per test binary, started on first use and shared by
/// every test in it. Tests that kill or restart a server must use
/// [`RedisServer::start`] instead. Keys are shared too: use unique key names.
pub fn shared_redis() -> &'static RedisServer {
    static SHARED: OnceLock<RedisServer> = OnceLock::new();
    SHARED.get_or_init(RedisServer::start)
}

/// One Redis Cluster per test binary (three masters, a replica each), started on first use.
/// Tests that kill or migrate must start their own with [`RedisCluster::start`].
pub fn shared_cluster() -> &'static RedisCluster {
    static SHARED: OnceLock<RedisCluster> = OnceLock::new();
    SHARED.get_or_init(RedisCluster::start)
}

/// The Redis a test's stack uses: the shared server, or the shared cluster when the suite runs
/// with `SLUICE_TEST_REDIS=cluster` (what `deploy/test.sh` does for the suites that must keep
/// working on a Redis Cluster).
///
/// # Panics
/// If `SLUICE_TEST_REDIS` names anything else: a typo must not quietly test a single server.
pub fn test_redis_url() -> String {
    match std::env::var("SLUICE_TEST_REDIS").as_deref() {
        Err(_) | Ok("" | "single") => shared_redis().url(),
        Ok("cluster") => shared_cluster().url(),
        Ok(other) => panic!("SLUICE_TEST_REDIS={other:?}: expected `single` or `cluster`"),
    }
}

/// Whether this run's stacks use a Redis Cluster ([`test_redis_url`]).
pub fn on_cluster() -> bool {
    std::env::var("SLUICE_TEST_REDIS").as_deref() == Ok("cluster")
}

/// One postgres per test binary, started on first use and shared by every
/// test in it; isolate tests with [`PgServer::fresh_database`]. Tests that
/// stop or kill a server must use [`PgServer::start`] instead.
pub fn shared_postgres() -> &'static PgServer {
    static SHARED: OnceLock<PgServer> = OnceLock::new();
    SHARED.get_or_init(PgServer::start)
}

/// `target/test-artifacts` of the workspace (or of `CARGO_TARGET_DIR`): screenshots and pages
/// the browser tests keep for a person to look at.
pub fn artifacts_dir() -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/test-artifacts");
    dir.canonicalize().unwrap_or(dir)
}

/// The `sluice` binary of this build, beside `built` (a binary of the same target directory,
/// e.g. `env!("CARGO_BIN_EXE_sluice-loadtest")`): `cargo test --workspace` builds it (the
/// gateway's tests need it); a test run alone builds it when it is missing.
///
/// # Panics
/// If it is missing and cargo cannot build it.
pub fn sluice_binary_beside(built: &str) -> std::path::PathBuf {
    let sluice = std::path::PathBuf::from(built).with_file_name("sluice");
    if !sluice.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-p", "sluice-gateway", "--bin", "sluice"])
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the sluice binary failed");
    }
    sluice
}
