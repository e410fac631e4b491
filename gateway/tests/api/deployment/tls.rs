//! PostgreSQL over TLS, against a real server the test starts with a certificate authority of
//! its own (`ssl = on`, plaintext TCP refused by its `pg_hba.conf`): `sslmode=verify-full` with
//! the test's authority connects, and the server itself reports the connection encrypted; a
//! plaintext connection, a certificate of another authority, a certificate file that is not
//! there, and `sslmode=require` against a server without TLS each fail at start with one clear
//! line; and a sale runs whole over TLS.

use std::sync::Arc;

use sluice_testkit::{PgServer, TestCa, shared_postgres};
use sqlx::Connection;

use crate::operators::cli::{sluice, text};
use crate::support::*;

/// A TLS-only PostgreSQL whose certificate `ca` signed, started off the async runtime.
async fn tls_postgres(ca: &TestCa) -> PgServer {
    let tls = ca.server();
    tokio::task::spawn_blocking(move || PgServer::start_tls(&tls))
        .await
        .expect("start a TLS PostgreSQL")
}

/// The lines of what a failed `sluice migrate` printed (it must have failed).
fn refusal(url: &str) -> Vec<String> {
    let run = sluice(url, &["migrate"]);
    let printed = text(&run);
    assert!(
        !run.status.success(),
        "`sluice migrate` on {url} succeeded: {printed}"
    );
    printed
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_verifies_the_server_and_refuses_what_it_must() {
    let ca = TestCa::new("Sluice test authority");
    let server = tls_postgres(&ca).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let trusted = ca.write_pem(dir.path(), "ca.pem");
    let stranger = TestCa::new("Another authority").write_pem(dir.path(), "other.pem");
    let base = format!("postgres://postgres@localhost:{}/postgres", server.port());
    let verified = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        trusted.display()
    );

    let migrated = sluice(&verified, &["migrate"]);
    assert!(migrated.status.success(), "{}", text(&migrated));
    // The witness is the server's own view of the connection, not the client's settings.
    let mut conn = sqlx::PgConnection::connect(&verified)
        .await
        .expect("connect with verify-full");
    let (ssl, version): (bool, Option<String>) =
        sqlx::query_as("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .expect("pg_stat_ssl");
    assert!(ssl, "the server saw a plaintext connection");
    assert!(
        version.is_some_and(|v| v.starts_with("TLSv1.")),
        "a TLS version"
    );
    let _ = conn.close().await;

    let plaintext = refusal(&format!("{base}?sslmode=disable"));
    assert_eq!(plaintext.len(), 1, "one line: {plaintext:?}");
    assert!(
        plaintext[0].contains("no encryption") || plaintext[0].contains("pg_hba.conf"),
        "the server's refusal of plaintext is shown: {plaintext:?}"
    );

    let missing = dir.path().join("missing.pem");
    let unreadable = refusal(&format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        missing.display()
    ));
    assert_eq!(unreadable.len(), 1, "one line: {unreadable:?}");
    assert!(
        unreadable[0].contains(&format!("sslrootcert={}", missing.display())),
        "a certificate file that cannot be read is named: {unreadable:?}"
    );

    let wrong_ca = refusal(&format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        stranger.display()
    ));
    assert_eq!(wrong_ca.len(), 1, "one line: {wrong_ca:?}");
    assert!(
        wrong_ca[0].to_lowercase().contains("certificate"),
        "a certificate its authority did not sign is named as such: {wrong_ca:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_against_a_server_without_tls_fails_at_start_with_one_line() {
    let url = format!("{}?sslmode=require", shared_postgres().url("postgres"));
    let lines = refusal(&url);
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
    assert!(
        lines[0].contains("TLS") || lines[0].contains("SSL"),
        "it says TLS is what failed: {lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_runs_whole_over_tls_to_postgres() {
    let ca = TestCa::new("Sluice test authority");
    let server = tls_postgres(&ca).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let trusted = ca.write_pem(dir.path(), "ca.pem");
    let admin = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        server.port(),
        trusted.display()
    );
    let mut conn = sqlx::PgConnection::connect(&admin).await.expect("connect");
    sqlx::query("CREATE DATABASE sale")
        .execute(&mut conn)
        .await
        .expect("create");
    let _ = conn.close().await;
    let database_url = admin.replace("/postgres?", "/sale?");
    let stack = Arc::new(
        Stack::start_with(StackOptions {
            database_url: Some(database_url),
            declaration: crate::execution::sale::small_sale_declaration(),
            ..StackOptions::default()
        })
        .await,
    );
    crate::execution::sale::small_sale(&stack).await;
}
