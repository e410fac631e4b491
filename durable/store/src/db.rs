//! PostgreSQL connection and the embedded migrations.

use std::time::Duration;

use sqlx::Executor;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::DurableError;

/// Migrations are compiled into the binary so `sluice migrate` needs no files beside it.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The session settings of every connection: a statement or a lock wait that outlives them is
/// cancelled, so a request fails fast instead of holding a connection.
pub const SESSION_SETTINGS: &str = "SET statement_timeout = '10s'; SET lock_timeout = '5s'";

/// What stands between the process and PostgreSQL, as far as its connections can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// PostgreSQL itself, or a pooler that gives each client connection its own server
    /// connection for the whole session (PgBouncer's `pool_mode = session`).
    #[default]
    Session,
    /// A pooler that lends a server connection for one transaction at a time (PgBouncer's
    /// `pool_mode = transaction`): nothing may outlive a transaction on the server.
    Transaction,
}

/// Connect with short acquire and statement timeouts: a request must fail fast with
/// `503 UNAVAILABLE` when PostgreSQL is gone, not hang until the client gives up.
///
/// The timeouts are set by a `SET` after connecting rather than in the startup packet's
/// `options`: PgBouncer refuses that startup parameter (or, told to ignore it, drops it, and
/// the timeouts with it), while a `SET` reaches the server through a session-mode pooler.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, DurableError> {
    connect_in(url, max_connections, PoolMode::Session).await
}

/// [`connect`] through a pooler of the given mode.
///
/// In [`PoolMode::Transaction`] the pooler may give each transaction (each statement outside
/// one) a different server connection, so nothing is left on a server connection: the
/// statement cache is off, which makes every statement unnamed, and an unnamed statement is
/// parsed and executed in one exchange (Sluice's sqlx patch, `vendor/README.md`); the
/// timeouts cannot be a session's `SET` either (it would stay on whichever server connection
/// took it), so the pooler must set them on each server connection it opens (PgBouncer's
/// `connect_query`; docs/operations.md), and a pool whose connection reports no statement
/// timeout is logged as a warning. `LISTEN` and the migrator's session lock need a session:
/// see `database_session_url`.
pub async fn connect_in(
    url: &str,
    max_connections: u32,
    mode: PoolMode,
) -> Result<PgPool, DurableError> {
    let options: PgConnectOptions = url.parse()?;
    let options = read_certificate_files(url, options)?.application_name("sluice");
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(3));
    let pool = match mode {
        PoolMode::Session => {
            pool.after_connect(|connection, _| {
                Box::pin(async move {
                    connection.execute(SESSION_SETTINGS).await?;
                    Ok(())
                })
            })
            .connect_with(options)
            .await?
        }
        PoolMode::Transaction => {
            let pool = pool
                .connect_with(options.statement_cache_capacity(0))
                .await?;
            warn_without_timeouts(&pool).await?;
            pool
        }
    };
    Ok(pool)
}

/// The certificate files a database URL names (`sslrootcert`, `sslcert`, `sslkey`, and sqlx's
/// spellings of them), read once at start and handed to sqlx as their contents: a file that is
/// missing or unreadable is an error naming the parameter and the path, where the TLS handshake
/// would only say "No such file or directory", and a certificate rotated on disk is read again
/// at the next start, never half-way through a pool's life.
fn read_certificate_files(
    url: &str,
    mut options: PgConnectOptions,
) -> Result<PgConnectOptions, DurableError> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Ok(options);
    };
    for (key, path) in parsed.query_pairs() {
        let read = || {
            std::fs::read(&*path).map_err(|e| {
                DurableError::Misconfigured(format!(
                    "the database URL's {key}={path} cannot be read: {e}"
                ))
            })
        };
        options = match key.as_ref() {
            "sslrootcert" | "ssl-root-cert" | "ssl-ca" => options.ssl_root_cert_from_pem(read()?),
            "sslcert" | "ssl-cert" => options.ssl_client_cert_from_pem(read()?),
            "sslkey" | "ssl-key" => options.ssl_client_key_from_pem(read()?),
            _ => options,
        };
    }
    Ok(options)
}

/// A transaction-mode pooler that does not set Sluice's timeouts leaves a lost lock wait or a
/// runaway statement holding a server connection for good: said once, at start.
async fn warn_without_timeouts(pool: &PgPool) -> Result<(), DurableError> {
    let (statement, lock): (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')",
    )
    .fetch_one(pool)
    .await?;
    if statement == "0" || lock == "0" {
        tracing::warn!(
            statement_timeout = %statement,
            lock_timeout = %lock,
            "database_pool_mode = transaction: the pooler's server connections have no \
             statement or lock timeout; set them in its connect_query (docs/operations.md, \
             Behind a connection pooler)"
        );
    }
    Ok(())
}

/// Idempotent: applies only the migrations that are missing, then makes the days of `commands`
/// around today (a database migrated days ago and not served since has none for today).
pub async fn run_migrations(pool: &PgPool) -> Result<(), DurableError> {
    MIGRATOR.run(pool).await?;
    crate::outbox::days::ensure_days(pool).await?;
    Ok(())
}
