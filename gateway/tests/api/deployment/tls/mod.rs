//! Over TLS to PostgreSQL and Redis, against real servers the test starts with a certificate
//! authority of its own: each server verified, plaintext, a stranger's certificate, a missing
//! file and a missing client certificate each refused at start with one clear line, and a sale
//! of 1,000 run whole over TLS to both (a single Redis and a Redis Cluster).

mod postgres;
mod redis;
mod sale;

use std::process::Output;

use sluice_testkit::{PgServer, ServerTls};

use crate::operators::cli::text;

/// A TLS-only PostgreSQL serving `tls`, started off the async runtime.
async fn tls_postgres(tls: ServerTls) -> PgServer {
    tokio::task::spawn_blocking(move || PgServer::start_tls(&tls))
        .await
        .expect("start a TLS PostgreSQL")
}

/// The lines a failed `sluice` run printed (it must have failed).
fn lines_of_failure(run: &Output, what: &str) -> Vec<String> {
    let printed = text(run);
    assert!(!run.status.success(), "{what} succeeded: {printed}");
    printed
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}
