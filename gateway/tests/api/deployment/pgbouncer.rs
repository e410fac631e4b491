//! Sluice behind PgBouncer (Debian's, 1.18, started by the test kit in front of the shared
//! PostgreSQL).
//!
//! Session mode works as it is: the gateway and the executor (its `LISTEN` included) run through
//! it with their timeouts intact. Transaction mode needs `database_pool_mode = "transaction"`
//! (no named statements, each statement parsed and run in one exchange, `LISTEN` on
//! `database_session_url`) and PgBouncer's `connect_query` for the timeouts.

use std::process::Command;
use std::time::Duration;

use sluice_store::db;
use sluice_testkit::{PgBouncer, PoolMode, shared_postgres};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

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

/// A transaction-mode PgBouncer with `server_connections` in front of the shared PostgreSQL,
/// its timeouts from `connect_query`, and the name of `stack`'s database in it.
fn transaction_bouncer(stack: &Stack, server_connections: u32) -> (PgBouncer, String) {
    let bouncer = PgBouncer::start_with_connect_query(
        shared_postgres().port(),
        PoolMode::Transaction,
        server_connections,
        Some(TIMEOUTS_QUERY),
    );
    let database = stack
        .database_url
        .rsplit('/')
        .next()
        .expect("database name")
        .to_string();
    (bouncer, database)
}

/// The stack's commands that landed `succeeded`, read through `direct`: a pool to PostgreSQL
/// itself, not through PgBouncer.
async fn succeeded(direct: &PgPool, stack: &Stack) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1 AND status = 'succeeded'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(direct)
    .await
    .expect("count")
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
    assert_eq!(succeeded(&direct, &stack).await, accepted);
    let transactions = bouncer_stat(&bouncer, database, "total_xact_count");
    assert!(
        transactions >= 2 * accepted,
        "PgBouncer carried the intake and the execution: {transactions} transactions"
    );
}

/// The timeouts a transaction-mode PgBouncer sets on each server connection it opens, as
/// docs/operations.md tells an operator to (Sluice's own `SET` would stay on one server
/// connection).
const TIMEOUTS_QUERY: &str = "SET statement_timeout = 10000; SET lock_timeout = 5000";

/// `clients` tasks, each with 50 queries on `pool`, outside or inside explicit transactions;
/// every answer is checked against its own argument (a statement run with another client's
/// text or parameters answers wrongly). Returns how many failed or answered wrongly.
async fn query_failures(pool: &PgPool, clients: i32, in_transaction: bool) -> i32 {
    let mut tasks = Vec::new();
    for client in 0..clients {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            for i in 0..50 {
                let argument = client * 100 + i;
                // Two statements of different shapes, so a mix-up cannot answer right.
                let query = if i % 2 == 0 {
                    sqlx::query_scalar::<_, i32>("SELECT $1::int + 1").bind(argument)
                } else {
                    sqlx::query_scalar::<_, i32>("SELECT length($1::text) * 0 + $2::int + 1")
                        .bind("x".repeat(usize::try_from(i).unwrap_or(0)))
                        .bind(argument)
                };
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
                if !matches!(answer, Ok(value) if value == argument + 1) {
                    failed += 1;
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

/// 16 clients over 2 server connections of a transaction-mode PgBouncer 1.18, 800 queries each
/// way. sqlx as it comes (named statements, cached per client connection) collides: another
/// client's `sqlx_s_1` is already on the server connection. Sluice's transaction-mode pool
/// (`db::connect_in`: no cache, unnamed statements parsed and run in one exchange, the sqlx
/// patch of vendor/README.md) answers every query right, inside transactions and outside
/// them, and reads the timeouts PgBouncer's `connect_query` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_mode_pool_answers_every_query_through_pgbouncer() {
    let postgres = shared_postgres();
    let bouncer = PgBouncer::start_with_connect_query(
        postgres.port(),
        PoolMode::Transaction,
        2,
        Some(TIMEOUTS_QUERY),
    );
    let url = bouncer.url("postgres");

    let stock = PgPoolOptions::new()
        .max_connections(16)
        .connect(&url)
        .await
        .expect("connect through PgBouncer");
    let collided = query_failures(&stock, 16, true).await;
    println!("sqlx's named statements in transactions: {collided} of 800 queries failed");
    assert!(
        collided > 0,
        "named statements collide on shared server connections"
    );

    let pool = db::connect_in(&url, 16, db::PoolMode::Transaction)
        .await
        .expect("Sluice's pool through PgBouncer");
    assert_eq!(
        query_failures(&pool, 16, false).await,
        0,
        "outside transactions"
    );
    assert_eq!(
        query_failures(&pool, 16, true).await,
        0,
        "inside transactions"
    );
    for (setting, expected) in [("statement_timeout", "10s"), ("lock_timeout", "5s")] {
        let value: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SHOW {setting}")))
            .fetch_one(&pool)
            .await
            .expect("SHOW through PgBouncer");
        assert_eq!(value, expected, "{setting} from PgBouncer's connect_query");
    }
    // A statement that fails at its parse leaves the connection usable: the server skips to
    // the Sync the pool sends after the error.
    let mut connection = pool.acquire().await.expect("a connection");
    let broken = sqlx::query_scalar::<_, i32>("SELECT $1::int FROM no_such_table")
        .bind(1)
        .fetch_one(&mut *connection)
        .await;
    assert!(broken.is_err(), "a missing table is an error");
    let after: i32 = sqlx::query_scalar("SELECT $1::int * 2")
        .bind(21)
        .fetch_one(&mut *connection)
        .await
        .expect("the same connection answers after the error");
    assert_eq!(after, 42);
}

/// A gateway and an executor process (`database_pool_mode = "transaction"`) whose pools go
/// through a transaction-mode PgBouncer with 3 server connections for their 24 client
/// connections, while `LISTEN` goes to `database_session_url` (PostgreSQL itself). 60
/// commands enqueued by 12 concurrent callers are each answered 202, executed and land
/// `succeeded` (read from PostgreSQL directly); neither process logs an error; the executor's
/// listening session is on PostgreSQL itself, and PgBouncer carried the transactions. `sluice
/// migrate` with the same settings succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_behind_pgbouncer_in_transaction_mode_land_every_command() {
    use crate::execution::processes::ExecutorProcess;
    use crate::support::gateway_process::GatewayProcess;

    let stack = Stack::start().await;
    let (bouncer, database) = transaction_bouncer(&stack, 3);
    let through = bouncer.url(&database);
    // `sluice migrate` takes its session lock on the session URL: run through the pooler's
    // settings, it succeeds (the stack's database is migrated; applying nothing is the point).
    let session_setting = format!("database_session_url={}", stack.database_url);
    let migrate = crate::operators::cli::sluice(
        &through,
        &[
            "migrate",
            "--set",
            "database_pool_mode=transaction",
            "--set",
            &session_setting,
        ],
    );
    assert!(
        migrate.status.success(),
        "sluice migrate in transaction mode: {}",
        crate::operators::cli::text(&migrate)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = GatewayProcess::start_with(
        &stack,
        dir.path(),
        "gateway",
        &[
            ("SLUICE_DATABASE_URL", through.as_str()),
            ("SLUICE_DATABASE_POOL_MODE", "transaction"),
            ("SLUICE_DATABASE_SESSION_URL", stack.database_url.as_str()),
        ],
    )
    .await;
    let mut executor = ExecutorProcess::spawn_with(
        &stack,
        dir.path(),
        "executor",
        &[
            "--database-url",
            &through,
            "--set",
            "database_pool_mode=transaction",
            "--set",
            &session_setting,
        ],
    );
    executor.running().await;

    let gateway = std::sync::Arc::new(gateway);
    let (credential, offer) = (stack.credential(), offer());
    let mut callers = Vec::new();
    for caller in 0..12 {
        let (gateway, credential, offer) = (gateway.clone(), credential.clone(), offer.clone());
        callers.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            for i in 0..5 {
                let body = serde_json::json!({"request_key": format!("c{caller}-{i}"),
                    "subject": format!("s{caller}-{i}"), "input": {"offer": offer}});
                let reply = gateway
                    .post("/v1/commands/claim:enqueue", &credential, &body)
                    .await;
                statuses.push((reply.status, reply.body));
            }
            statuses
        }));
    }
    let mut accepted = 0;
    for caller in callers {
        for (status, body) in caller.await.expect("caller") {
            assert_eq!(status, 202, "{body:?}");
            accepted += 1;
        }
    }
    let landed = all_terminal(&stack, Duration::from_secs(30)).await;
    assert!(landed, "every command landed:\n{}", executor.log_text());
    assert_eq!(succeeded(&stack.pg, &stack).await, accepted);

    let listening: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = $1 AND application_name = 'sluice-listen' AND query LIKE 'LISTEN%'",
    )
    .bind(&database)
    .fetch_one(&stack.pg)
    .await
    .expect("pg_stat_activity");
    assert_eq!(listening, 1, "the executor listens on PostgreSQL itself");
    let transactions = bouncer_stat(&bouncer, &database, "total_xact_count");
    assert!(
        transactions >= 2 * accepted,
        "PgBouncer carried the intake and the execution: {transactions} transactions"
    );
    for (name, log) in [
        ("gateway", gateway.log_text()),
        ("executor", executor.log_text()),
    ] {
        let errors: Vec<&str> = log
            .lines()
            .filter(|line| {
                line.contains(r#""level":"ERROR""#) || line.contains("prepared statement")
            })
            .collect();
        assert!(errors.is_empty(), "the {name} logged errors: {errors:#?}");
    }
}

/// Retention through a transaction-mode PgBouncer (2 server connections): the days are made,
/// an old day whose commands all ended has its keys forgotten and is detached (`CONCURRENTLY`,
/// a statement that commits inside itself) and dropped, and a day with a waiting command stays:
/// read from the catalog directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_a_day_through_pgbouncer_in_transaction_mode() {
    use sluice_durable::lifecycle::retention::prune;
    use sluice_store::outbox::days::{Day, ensure_days};

    let stack = Stack::start().await;
    let (bouncer, database) = transaction_bouncer(&stack, 2);
    let pool = db::connect_in(&bouncer.url(&database), 8, db::PoolMode::Transaction)
        .await
        .expect("Sluice's pool through PgBouncer");
    ensure_days(&pool)
        .await
        .expect("days made through PgBouncer");

    let now = crate::life_cycle::retention::db_now(&stack).await;
    let (ended, waiting) = (
        Day::of(now - chrono::Duration::days(4)),
        Day::of(now - chrono::Duration::days(3)),
    );
    crate::life_cycle::retention::fill_day(&stack, ended, 20, "succeeded").await;
    crate::life_cycle::retention::fill_day(&stack, waiting, 20, "accepted").await;

    let pruned = prune(&pool, &stack.redis, 86_400)
        .await
        .expect("retention through PgBouncer");
    assert!(pruned.days_dropped.contains(&ended), "{pruned:?}");
    assert!(pruned.days_held.contains(&waiting), "{pruned:?}");
    assert_eq!(pruned.keys_forgotten, 20);
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT relname::text FROM pg_class WHERE relname = ANY($1) ORDER BY 1")
            .bind(vec![ended.partition(), waiting.partition()])
            .fetch_all(&stack.pg)
            .await
            .expect("the catalog");
    assert_eq!(tables, vec![waiting.partition()]);
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM request_keys")
        .fetch_one(&stack.pg)
        .await
        .expect("keys");
    assert_eq!(keys, 20, "the waiting day's keys stay");
}
