//! PostgreSQL connection and the embedded migrations.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::DurableError;

/// Migrations are compiled into the binary so `sluice migrate` needs no files beside it.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Connect with short acquire and statement timeouts: a request must fail fast with
/// `503 UNAVAILABLE` when PostgreSQL is gone, not hang until the client gives up.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool, DurableError> {
    let options: PgConnectOptions = url.parse()?;
    let options = options
        .application_name("sluice")
        .options([("statement_timeout", "10s"), ("lock_timeout", "5s")]);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// Idempotent: applies only the migrations that are missing.
pub async fn run_migrations(pool: &PgPool) -> Result<(), DurableError> {
    MIGRATOR.run(pool).await?;
    Ok(())
}
