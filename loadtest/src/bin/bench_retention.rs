//! Retention of a day of ended commands, two ways on identical data in one run, against the same
//! PostgreSQL:
//! - Sluice: `lifecycle::retention` as the executor runs it: the day's request keys forgotten in
//!   pages (PostgreSQL, then Redis), then the day detached (`CONCURRENTLY`) and dropped;
//! - the baseline, retention before days: the ended rows deleted 500 at a time
//!   (`DELETE … WHERE id = ANY(ARRAY(SELECT … LIMIT 500 FOR UPDATE SKIP LOCKED))`) with their
//!   request keys, those forgotten in Redis one call per batch as Sluice does, and then the
//!   `VACUUM` that makes the deleted rows' space reusable.
//!
//! Each of two old days gets `--rows` commands that ended long ago, with their keys. The second
//! day also holds one unfinished command, so Sluice's round leaves it whole for the baseline.
//! Measured per way: wall time, WAL written (`pg_current_wal_lsn` before and after), and what
//! the day's table still occupies on disk (a dropped day nothing; deleted rows stay until a
//! vacuum). Loopback only; the scratch database is removed afterwards.

use std::time::Instant;

use chrono::{DateTime, Utc};
use clap::Parser;
use fred::interfaces::HashesInterface;
use sluice_durable::lifecycle::retention;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_redis::{AppKeys, request_key_field};
use sluice_store::outbox::days::Day;

#[derive(Debug, Parser)]
#[command(about = "A day of ended commands: dropped whole versus deleted row by row")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Ended commands in each of the two days.
    #[arg(long, default_value_t = 200_000)]
    rows: i64,
}

/// What one way of retention cost.
struct Cost {
    seconds: f64,
    wal_bytes: f64,
    left_bytes: i64,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.servers.check()?;
    if args.rows < 1 {
        return Err("--rows must be at least 1".into());
    }
    with_scratch_tenant(&args.servers, 8, CLAIM_DECLARATION, async |tenant| {
        run(&args, tenant).await
    })
    .await
}

async fn run(args: &Args, tenant: &Tenant) -> Result<(), BoxError> {
    let settings = PostgresSettings::read(&tenant.pg).await?;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&tenant.pg)
        .await?;
    let (dropped, deleted) = (
        Day::of(now - chrono::Duration::days(10)),
        Day::of(now - chrono::Duration::days(9)),
    );
    let loading = Instant::now();
    // The load is not bound by the pool's statement timeout; VACUUM runs outside a transaction.
    let mut conn = tenant.pg.acquire().await?;
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    for day in [dropped, deleted] {
        load_day(&mut conn, tenant, day, args.rows).await?;
    }
    // The baseline's day keeps one unfinished command: Sluice leaves it whole.
    sqlx::query(
        "INSERT INTO commands (id, application_id, namespace_id, command, subject, request_key,
                content_sha256, input, resource_key, queue_seq, status, accepted_at, deadline_at,
                max_wait_at, updated_at)
         VALUES ($1, $2, $3, 'claim', 'held', 'held', '\\x00'::bytea, '{}'::jsonb, 'r', 0,
                 'needs_review', now(), now(), now(), now())",
    )
    .bind(deleted.first_id())
    .bind(tenant.creds.application_id)
    .bind(tenant.creds.namespace_id)
    .execute(&mut *conn)
    .await?;
    for table in ["commands", "request_keys"] {
        sqlx::query(sqlx::AssertSqlSafe(format!("VACUUM ANALYZE {table}")))
            .execute(&mut *conn)
            .await?;
    }
    // Back to the pool's own settings (a RESET would drop to the server's default).
    sqlx::raw_sql(sluice_store::db::SESSION_SETTINGS)
        .execute(&mut *conn)
        .await?;
    drop(conn);
    println!(
        "{settings}; two days of {} ended commands loaded in {:.1} s",
        args.rows,
        loading.elapsed().as_secs_f64()
    );
    let cutoff = now - chrono::Duration::days(7);
    let redis_keys =
        AppKeys::new(tenant.creds.application_id).request_keys(tenant.creds.namespace_id, "claim");

    let mut rounds = Vec::new();
    let sluice = measure(tenant, dropped, async || {
        loop {
            let round = Instant::now();
            let pruned = retention::prune_before(&tenant.pg, &tenant.redis, cutoff).await?;
            rounds.push((round.elapsed().as_secs_f64(), pruned.keys_forgotten));
            if pruned.days_dropped.contains(&dropped) {
                return Ok(());
            }
            if pruned.keys_forgotten == 0 && pruned.days_held.contains(&dropped) {
                return Err("the day to drop is held".into());
            }
        }
    })
    .await?;
    let baseline = measure(tenant, deleted, async || {
        loop {
            let gone: Vec<(String, String)> = sqlx::query_as(
                "WITH gone AS (
                     DELETE FROM commands WHERE id = ANY(ARRAY(
                         SELECT id FROM commands
                          WHERE id >= $1 AND id < $2 AND finished_at < $3
                          LIMIT 500 FOR UPDATE SKIP LOCKED))
                     RETURNING namespace_id, command, subject, request_key)
                 DELETE FROM request_keys k USING gone g
                  WHERE k.namespace_id = g.namespace_id AND k.command = g.command
                    AND k.subject = g.subject AND k.request_key = g.request_key
                 RETURNING k.subject, k.request_key",
            )
            .bind(deleted.first_id())
            .bind(deleted.end_id())
            .bind(cutoff)
            .fetch_all(&tenant.pg)
            .await?;
            if gone.is_empty() {
                break;
            }
            // The keys' Redis copies, forgotten as Sluice forgets them: one call per batch.
            let fields: Vec<String> = gone
                .iter()
                .map(|(subject, key)| request_key_field(subject, key))
                .collect();
            let _: i64 = tenant
                .redis
                .pool()
                .next()
                .hdel(redis_keys.clone(), fields)
                .await?;
        }
        // What deleted rows leave behind is reusable only after a vacuum: part of the cost.
        without_statement_timeout(&tenant.pg, async |conn| {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "VACUUM {}",
                deleted.partition()
            )))
            .execute(&mut *conn)
            .await?;
            Ok(())
        })
        .await
    })
    .await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM commands WHERE id >= $1 AND id < $2")
        .bind(deleted.first_id())
        .bind(deleted.end_id())
        .fetch_one(&tenant.pg)
        .await?;
    if left != 1 {
        return Err(format!("the baseline left {left} rows of its day, not the held one").into());
    }

    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    for (name, cost) in [
        ("Sluice: keys forgotten, day detached and dropped", &sluice),
        (
            "baseline: rows deleted 500 at a time, then VACUUM",
            &baseline,
        ),
    ] {
        println!(
            "  {name}: {:.2} s, {:.1} MiB of WAL, {:.1} MiB left on disk",
            cost.seconds,
            mib(cost.wal_bytes),
            mib(cost.left_bytes as f64)
        );
    }
    if let Some((last, forgotten)) = rounds.last() {
        println!(
            "  Sluice's {} executor rounds: the last (its {forgotten} keys, the detach and the \
             drop) {last:.2} s",
            rounds.len()
        );
    }
    println!(
        "baseline / Sluice: time {:.1}x, WAL {:.1}x",
        baseline.seconds / sluice.seconds.max(1e-9),
        baseline.wal_bytes / sluice.wal_bytes.max(1.0)
    );
    Ok(())
}

/// `rows` commands of `day`, ended an hour before its end, each with its request key.
async fn load_day(
    conn: &mut sqlx::PgConnection,
    tenant: &Tenant,
    day: Day,
    rows: i64,
) -> Result<(), BoxError> {
    sqlx::query("SELECT sluice_ensure_command_days($1, $1)")
        .bind(day.date())
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "WITH made AS (
             INSERT INTO commands (id, application_id, namespace_id, command, subject,
                    request_key, content_sha256, input, resource_key, queue_seq, status,
                    accepted_at, deadline_at, max_wait_at, updated_at, finished_at, result)
             SELECT (substr(replace($3::uuid::text, '-', ''), 1, 12) || '7'
                     || lpad(to_hex(i), 19, '0'))::uuid, $1, $2, 'claim', 's' || i,
                    $5 || '-' || i, sha256(convert_to(i::text, 'UTF8')),
                    jsonb_build_object('offer', md5(i::text)), 'r' || (i % 100), i, 'succeeded',
                    $4, $4, $4, $4, $4, jsonb_build_object('allocated', 1)
               FROM generate_series(1, $6) AS i
             RETURNING id, application_id, namespace_id, command, subject, request_key)
         INSERT INTO request_keys (namespace_id, command, subject, request_key, command_id,
                                   application_id)
         SELECT namespace_id, command, subject, request_key, id, application_id FROM made",
    )
    .bind(tenant.creds.application_id)
    .bind(tenant.creds.namespace_id)
    .bind(day.first_id())
    .bind(day.end() - chrono::Duration::hours(1))
    .bind(day.partition())
    .bind(rows)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Time and WAL of `work`, and what `day`'s table occupies afterwards.
async fn measure(
    tenant: &Tenant,
    day: Day,
    work: impl AsyncFnOnce() -> Result<(), BoxError>,
) -> Result<Cost, BoxError> {
    let lsn = "SELECT pg_current_wal_lsn()::text";
    let before: String = sqlx::query_scalar(lsn).fetch_one(&tenant.pg).await?;
    let started = Instant::now();
    work().await?;
    let seconds = started.elapsed().as_secs_f64();
    let after: String = sqlx::query_scalar(lsn).fetch_one(&tenant.pg).await?;
    let wal_bytes: f64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8")
            .bind(&after)
            .bind(&before)
            .fetch_one(&tenant.pg)
            .await?;
    let left_bytes: Option<i64> =
        sqlx::query_scalar("SELECT pg_total_relation_size(to_regclass($1))")
            .bind(day.partition())
            .fetch_one(&tenant.pg)
            .await?;
    Ok(Cost {
        seconds,
        wal_bytes,
        left_bytes: left_bytes.unwrap_or(0),
    })
}
