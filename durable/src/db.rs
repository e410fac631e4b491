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

/// Connect with short acquire and statement timeouts: a request must fail fast with
/// `503 UNAVAILABLE` when PostgreSQL is gone, not hang until the client gives up.
///
/// The timeouts are set by a `SET` after connecting rather than in the startup packet's
/// `options`: PgBouncer refuses that startup parameter (or, told to ignore it, drops it, and
/// the timeouts with it), while a `SET` reaches the server through a session-mode pooler.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, DurableError> {
    let options: PgConnectOptions = url.parse()?;
    let options = options.application_name("sluice");
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection.execute(SESSION_SETTINGS).await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// Idempotent: applies only the migrations that are missing.
pub async fn run_migrations(pool: &PgPool) -> Result<(), DurableError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}
