//! Redis over TLS (`rediss://`), against a `redis-server` serving TLS only on TCP (`--port 0
//! --tls-port`) and asking clients for a certificate (`tls-auth-clients yes`): the test's
//! authority and a client certificate connect; plaintext, a stranger's certificate, no client
//! certificate, TLS to a plaintext port, a certificate file that is not there and an unknown URL
//! parameter each stop
//! `sluice execute` at start with one clear line.

use std::process::Command;

use fred::prelude::*;
use sluice_testkit::{RedisServer, ServerTls, TestCa, shared_postgres};

use super::lines_of_failure;

/// What `sluice execute` printed when it refused to start on `redis_url`.
fn refusal(database_url: &str, redis_url: &str) -> Vec<String> {
    let run = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("execute")
        .env("SLUICE_DATABASE_URL", database_url)
        .env("SLUICE_REDIS_URL", redis_url)
        .env("SLUICE_LOG", "warn")
        .output()
        .expect("run sluice");
    let lines = lines_of_failure(&run, &format!("`sluice execute` on {redis_url}"));
    assert_eq!(lines.len(), 1, "one line for {redis_url}: {lines:?}");
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_verifies_the_server_presents_a_client_certificate_and_refuses_the_rest() {
    let ca = TestCa::new("Sluice test authority");
    let tls = ServerTls {
        client_certificates: true,
        ..ca.server()
    };
    let server = tokio::task::spawn_blocking(move || RedisServer::start_tls(&tls))
        .await
        .expect("start a TLS Redis");
    let dir = tempfile::tempdir().expect("temp dir");
    let trusted = ca.write_pem(dir.path(), "ca.pem");
    let (cert, key) = ca.write_client("sluice", dir.path(), "client");
    let stranger = TestCa::new("Another authority").write_pem(dir.path(), "other.pem");
    let address = format!("127.0.0.1:{}", server.port());
    let verified = format!(
        "rediss://{address}?sslrootcert={}&sslcert={}&sslkey={}",
        trusted.display(),
        cert.display(),
        key.display()
    );

    let redis = sluice_redis::connect_redis(&verified, 2)
        .await
        .expect("connect over TLS with a client certificate");
    let pong: String = redis.pool().next().ping(None).await.expect("PING");
    assert_eq!(pong, "PONG");
    // The witness that it was TLS: the server's own count of TLS connections it accepted (its
    // TCP port speaks nothing else, which the plaintext refusal below shows too).
    let info: String = redis
        .pool()
        .next()
        .info(Some(fred::types::InfoKind::Stats))
        .await
        .expect("INFO stats");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    let connections: u64 = field("total_connections_received")
        .and_then(|v| v.parse().ok())
        .expect("total_connections_received");
    assert!(
        connections >= 2,
        "the pool's two clients reached the server over TLS"
    );
    let _ = redis.pool().quit().await;

    let database_url = shared_postgres().fresh_database().await;
    let plaintext = refusal(&database_url, &format!("redis://{address}"));
    assert!(
        plaintext[0].contains(&format!("Redis at {address} over plaintext TCP"))
            && plaintext[0].contains("meant to be rediss://"),
        "it says Redis refused plaintext and what to change: {plaintext:?}"
    );
    let wrong_ca = refusal(
        &database_url,
        &verified.replace(
            &trusted.display().to_string(),
            &stranger.display().to_string(),
        ),
    );
    assert!(
        wrong_ca[0].contains("certificate is not signed by an authority this connection trusts"),
        "a certificate its authority did not sign is named as such: {wrong_ca:?}"
    );
    let no_client_certificate = refusal(
        &database_url,
        &format!("rediss://{address}?sslrootcert={}", trusted.display()),
    );
    assert!(
        no_client_certificate[0]
            .to_lowercase()
            .contains("certificate"),
        "the missing client certificate is named: {no_client_certificate:?}"
    );
    let plaintext_server = sluice_testkit::test_redis_url();
    let tls_to_plaintext = refusal(
        &database_url,
        &format!(
            "{}?sslrootcert={}",
            plaintext_server.replace("redis://", "rediss://"),
            trusted.display()
        ),
    );
    assert!(
        tls_to_plaintext[0].contains("does not answer TLS on this port"),
        "{tls_to_plaintext:?}"
    );
    let missing = dir.path().join("missing.pem");
    let unreadable = refusal(
        &database_url,
        &format!("rediss://{address}?sslrootcert={}", missing.display()),
    );
    assert!(
        unreadable[0].contains(&format!("sslrootcert={}", missing.display())),
        "a certificate file that cannot be read is named: {unreadable:?}"
    );
    let misspelt = refusal(
        &database_url,
        &format!("rediss://{address}?ssl_ca_cert={}", trusted.display()),
    );
    assert!(
        misspelt[0].contains("unknown parameter \"ssl_ca_cert\""),
        "{misspelt:?}"
    );
}
