//! The binaries refuse to run against a Redis that may evict keys, saying what to set.

use std::process::Command;

use fred::prelude::*;
use sluice_redis::Projection;
use sluice_testkit::{RedisServer, shared_postgres};

/// `CONFIG SET name value` on the test's own server.
async fn config_set(redis: &Projection, name: &str, value: &str) {
    let command =
        fred::types::CustomCommand::new_static("CONFIG", fred::types::ClusterHash::Random, false);
    let _: Value = redis
        .pool()
        .next()
        .custom(
            command,
            vec!["SET".to_string(), name.to_string(), value.to_string()],
        )
        .await
        .expect("CONFIG SET");
}

#[tokio::test]
async fn serve_and_execute_refuse_a_redis_that_may_evict_keys() {
    let server = RedisServer::start();
    let redis = sluice_redis::connect_redis(&server.url(), 1)
        .await
        .expect("connect");
    let database_url = shared_postgres().fresh_database().await;
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .env("SLUICE_REDIS_URL", server.url())
            .env("SLUICE_DATABASE_URL", &database_url)
            .env(
                "SLUICE_TICKET_KEYS",
                "k1:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA",
            )
            .env("SLUICE_LISTEN", "127.0.0.1:0")
            .env("SLUICE_ADMIN_LISTEN", "127.0.0.1:0")
            .output()
            .expect("run sluice")
    };
    config_set(&redis, "maxmemory", "100mb").await;
    config_set(&redis, "maxmemory-policy", "allkeys-lru").await;
    for command in [["serve"], ["execute"]] {
        let output = run(&command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{command:?} ran: {stderr}");
        assert!(
            stderr.contains("maxmemory-policy noeviction") && stderr.contains("allkeys-lru"),
            "{command:?}: {stderr}"
        );
    }
    // noeviction is accepted: `execute` then runs until it is stopped (SIGTERM drains it).
    config_set(&redis, "maxmemory-policy", "noeviction").await;
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("execute")
        .env("SLUICE_REDIS_URL", server.url())
        .env("SLUICE_DATABASE_URL", &database_url)
        .env("SLUICE_LOG", "info")
        .stdout(log.reopen().expect("log handle"))
        .stderr(log.reopen().expect("log handle"))
        .spawn()
        .expect("spawn");
    // It got past the check once its loop says it runs.
    let running = crate::support::eventually(std::time::Duration::from_secs(20), || async {
        std::fs::read_to_string(log.path())
            .unwrap_or_default()
            .contains("executor running")
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        running,
        "execute did not run against a noeviction Redis: {}",
        std::fs::read_to_string(log.path()).unwrap_or_default()
    );
}
