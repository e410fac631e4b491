//! PostgreSQL over TLS (`ssl = on`, plaintext TCP refused by its `pg_hba.conf`):
//! `sslmode=verify-full` with the test's authority connects, and the server itself reports the
//! connection encrypted; a plaintext connection, a certificate of another authority, a
//! certificate file that is not there, `sslmode=require` against a server without TLS, and a
//! missing client certificate where the server asks for one each fail at start with one clear
//! line.

use sluice_testkit::{ServerTls, TestCa, shared_postgres};
use sqlx::Connection;

use super::{lines_of_failure, tls_postgres};
use crate::operators::cli::{sluice, text};

/// The lines of what a failed `sluice migrate` printed (it must have failed).
fn refusal(url: &str) -> Vec<String> {
    lines_of_failure(
        &sluice(url, &["migrate"]),
        &format!("`sluice migrate` on {url}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_verifies_the_server_and_refuses_what_it_must() {
    let ca = TestCa::new("Sluice test authority");
    let server = tls_postgres(ca.server()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_where_the_server_asks_for_one() {
    let ca = TestCa::new("Sluice test authority");
    let server = tls_postgres(ServerTls {
        client_certificates: true,
        ..ca.server()
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let trusted = ca.write_pem(dir.path(), "ca.pem");
    // `cert` authentication: the certificate's common name is the database user.
    let (cert, key) = ca.write_client("postgres", dir.path(), "client");
    let base = format!(
        "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        server.port(),
        trusted.display()
    );
    let with_certificate = format!("{base}&sslcert={}&sslkey={}", cert.display(), key.display());
    let migrated = sluice(&with_certificate, &["migrate"]);
    assert!(migrated.status.success(), "{}", text(&migrated));
    let mut conn = sqlx::PgConnection::connect(&with_certificate)
        .await
        .expect("connect with a client certificate");
    let client_dn: Option<String> =
        sqlx::query_scalar("SELECT client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .expect("pg_stat_ssl");
    assert_eq!(
        client_dn.as_deref(),
        Some("/CN=postgres"),
        "the server saw the client certificate"
    );
    let _ = conn.close().await;

    let without = refusal(&base);
    assert_eq!(without.len(), 1, "one line: {without:?}");
    assert!(
        without[0].contains("certificate"),
        "the missing client certificate is named: {without:?}"
    );
}
