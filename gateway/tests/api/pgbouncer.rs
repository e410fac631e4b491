//! Sluice behind PgBouncer (Debian's, 1.18, started by the test kit in front of the shared
//! PostgreSQL).
//!
//! Session mode works: the gateway and the executor (its `LISTEN` included) run through it with
//! their timeouts intact. Transaction mode does not work with sqlx's prepared statements before
//! PgBouncer 1.21 (`max_prepared_statements`); the second test keeps the evidence for what
//! `docs/operations.md` says about it, so a change of either side is noticed.

use std::process::Command;
use std::time::Duration;

use sluice_testkit::{PgBouncer, PoolMode, shared_postgres};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::execution::{all_terminal, enqueue_command, fast_executor, start_executor};
use crate::support::*;

/// One line of the admin console's `SHOW STATS` for `database`, by column name; read with
/// `psql` (the console speaks only the simple protocol), a witness outside Sluice's pool.
fn bouncer_stat(bouncer: &PgBouncer, database: &str, column: &str) -> i64 {
    let out = Command::new("psql")
        .args(["-X", "-A", "-F", "\t", "-P", "footer=off"])
        .arg(bouncer.admin_url())
        .args(["-c", "SHOW STATS"])
        .output()
        .expect("run psql against the PgBouncer console");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
    let at = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("SHOW STATS has no column {name}: {text}"))
    };
    let (name_at, value_at) = (at("database"), at(column));
    lines
        .map(|line| line.split('\t').collect::<Vec<_>>())
        .find(|fields| fields.get(name_at) == Some(&database))
        .and_then(|fields| fields.get(value_at)?.parse().ok())
        .unwrap_or(0)
}

/// A stack whose every PostgreSQL connection goes through a session-mode PgBouncer: the
/// timeouts Sluice sets reach the server, and 30 enqueued commands are accepted, executed and
/// land `succeeded` (read from PostgreSQL directly), with PgBouncer's own statistics showing
/// the work passed through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_behind_pgbouncer_in_session_mode_lands_every_command_with_its_timeouts() {
    let postgres = shared_postgres();
    let direct_url = postgres.fresh_database().await;
    let database = direct_url.rsplit('/').next().expect("database name");
    // More server connections than the stack's pool (32) holds: session mode pins one each.
    let bouncer = PgBouncer::start(postgres.port(), PoolMode::Session, 40);
    let stack = Stack::start_with(StackOptions {
        database_url: Some(bouncer.url(database)),
        ..StackOptions::default()
    })
    .await;
    for (setting, expected) in [("statement_timeout", "10s"), ("lock_timeout", "5s")] {
        let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
            .fetch_one(&stack.pg)
            .await
            .expect("SHOW through PgBouncer");
        assert_eq!(value, expected, "{setting} through PgBouncer");
    }

    let executor = start_executor(&stack, fast_executor());
    let mut accepted = 0;
    for i in 0..30 {
        let reply = enqueue_command(&stack, "claim", &format!("s{i}"), &key(), &offer()).await;
        assert_eq!(reply.status, 202, "{:?}", reply.body);
        accepted += 1;
    }
    let landed = all_terminal(&stack, Duration::from_secs(30)).await;
    executor.cancel();
    assert!(landed, "every command landed");

    let direct = PgPoolOptions::new()
        .max_connections(1)
        .connect(&direct_url)
        .await
        .expect("PostgreSQL directly");
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1 AND status = 'succeeded'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&direct)
    .await
    .expect("count");
    assert_eq!(
        succeeded, accepted,
        "read from PostgreSQL, not through PgBouncer"
    );
    let transactions = bouncer_stat(&bouncer, database, "total_xact_count");
    assert!(
        transactions >= 2 * accepted,
        "PgBouncer carried the intake and the execution: {transactions} transactions"
    );
}

/// What keeps Sluice off a transaction-mode PgBouncer 1.18: sqlx names its prepared statements
/// per client connection (`sqlx_s_1`, …) and, with its statement cache off, never closes them,
/// so two clients sharing a server connection collide; unnamed statements work only inside an
/// explicit transaction. 16 clients over 2 server connections, 50 queries each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_in_transaction_mode_breaks_sqlx_prepared_statements() {
    let postgres = shared_postgres();
    let bouncer = PgBouncer::start(postgres.port(), PoolMode::Transaction, 2);
    let options: PgConnectOptions = bouncer.url("postgres").parse().expect("url");
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect_with(options.statement_cache_capacity(0))
        .await
        .expect("connect through PgBouncer");
    let failures = |in_transaction: bool, persistent: bool| {
        let pool = pool.clone();
        async move {
            let mut tasks = Vec::new();
            for client in 0..16 {
                let pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    let mut failed = 0;
                    for i in 0..50 {
                        let query = sqlx::query_scalar::<_, i32>("SELECT $1::int + 1")
                            .persistent(persistent)
                            .bind(client * 100 + i);
                        let answer = if in_transaction {
                            match pool.begin().await {
                                Ok(mut tx) => {
                                    let answer = query.fetch_one(&mut *tx).await;
                                    tx.commit().await.and(answer)
                                }
                                Err(error) => Err(error),
                            }
                        } else {
                            query.fetch_one(&pool).await
                        };
                        match answer {
                            Ok(value) => assert_eq!(value, client * 100 + i + 1),
                            Err(_) => failed += 1,
                        }
                    }
                    failed
                }));
            }
            let mut failed = 0;
            for task in tasks {
                failed += task.await.expect("client task");
            }
            failed
        }
    };
    let named = failures(true, true).await;
    println!("named statements in transactions: {named} of 800 queries failed");
    assert!(
        named > 0,
        "named statements collide even inside transactions"
    );
    assert_eq!(
        failures(true, false).await,
        0,
        "unnamed statements inside explicit transactions all succeed"
    );
}
