//! The statements that cannot be `sqlx::query!` literals (the macros take only string literals,
//! and these are shared constants: the transition table renders them into docs/life-cycle.md,
//! the status benchmark runs the board's) are described by a real PostgreSQL with every
//! migration applied, so a renamed column or a wrong type fails here, as the macros' own check
//! fails the build for every other query.

use sluice_durable::db;
use sluice_durable::lifecycle::{end, sweep, table};
use sluice_durable::status;
use sluice_testkit::shared_postgres;
use sqlx::{Executor, PgPool, SqlSafeStr};

async fn migrated() -> PgPool {
    let url = shared_postgres().fresh_database().await;
    let pg = db::connect(&url, 2).await.expect("connect");
    db::run_migrations(&pg).await.expect("migrate");
    pg
}

fn shared_statements() -> Vec<(&'static str, &'static str)> {
    let mut all: Vec<(&str, &str)> = table::TRANSITIONS
        .iter()
        .filter_map(|t| t.sql.map(|sql| (t.name, sql)))
        .collect();
    all.extend([
        ("end::COMPLETE_LOCK_SQL", end::COMPLETE_LOCK_SQL),
        ("sweep::REVIEW_RUNNING_SQL", sweep::REVIEW_RUNNING_SQL),
        ("sweep::EXPIRE_WAITING_SQL", sweep::EXPIRE_WAITING_SQL),
        ("status::COUNTS_SQL", status::COUNTS_SQL),
        ("status::LIMIT_KEYS_SQL", status::LIMIT_KEYS_SQL),
    ]);
    all
}

#[tokio::test]
async fn every_shared_statement_is_valid_against_the_migrated_schema() {
    let pg = migrated().await;
    let statements = shared_statements();
    assert!(
        statements.len() >= 15,
        "the transition table lost its statements: {}",
        statements.len()
    );
    let mut broken = Vec::new();
    for &(name, sql) in &statements {
        if let Err(error) = pg.prepare(sql.into_sql_str()).await {
            broken.push(format!("{name}: {error}"));
        }
    }
    assert!(
        broken.is_empty(),
        "statements the schema refuses:\n{}",
        broken.join("\n")
    );
}

/// The check can fail: a statement naming a column the schema does not have is refused.
#[tokio::test]
async fn a_statement_naming_a_missing_column_is_refused() {
    let pg = migrated().await;
    let error = pg
        .prepare("UPDATE commands SET no_such_column = 1 WHERE id = $1".into_sql_str())
        .await
        .expect_err("the schema has no such column");
    assert!(error.to_string().contains("no_such_column"), "{error}");
}
