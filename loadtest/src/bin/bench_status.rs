//! The status board (`GET /v1/status`) of a namespace with a million rows, against the query a
//! user would write to get the same counts, measured in one run on one machine against the same
//! PostgreSQL and Redis.
//!
//! The namespace holds `--rows` commands: the finished history (inserted with one
//! `generate_series` statement, older than everything else), `--waiting` commands enqueued over
//! HTTP through an in-process gateway onto `--resources` resources (so `status_board.lua` looks at that
//! many ready queues), and `--in-hand` running commands holding limit keys. Then
//! `VACUUM ANALYZE commands`, as autovacuum would have done on such a table.
//!
//! Measured, each as the median of `--calls` sequential calls per round, rounds alternating:
//! - the board: the whole `GET /v1/status` over HTTP (authentication, its five PostgreSQL
//!   queries, one `status_board.lua` call, the JSON);
//! - the baseline: `SELECT command, status, count(*), min(accepted_at) FROM commands WHERE
//!   namespace_id = $1 GROUP BY 1, 2` alone, straight on the pool: no status predicate, so no
//!   partial index can serve it and PostgreSQL scans the namespace (its plan is printed).
//!
//! Each run checks that the board's unfinished count equals PostgreSQL's. Loopback only; the
//! scratch database and the tenant's Redis keys are removed afterwards.

use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::Value;
use sluice_durable::status_board;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_loadtest::driver::http_client;
use sluice_redis::AppKeys;

#[derive(Debug, Parser)]
#[command(about = "GET /v1/status on a million rows versus the naive count over the namespace")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Rows of the namespace in all (finished history + waiting + in hand).
    #[arg(long, default_value_t = 1_000_000)]
    rows: i64,
    /// Commands enqueued over HTTP that stay waiting (no executor runs).
    #[arg(long, default_value_t = 10_000)]
    waiting: u64,
    /// Resources the waiting commands are spread over (ready queues status_board.lua looks at).
    #[arg(long, default_value_t = 10_000)]
    resources: u64,
    /// Running commands, each holding one limit key of 50.
    #[arg(long, default_value_t = 2_000)]
    in_hand: i64,
    /// Sequential calls per round and mode.
    #[arg(long, default_value_t = 100)]
    calls: usize,
    /// Rounds per mode (alternating).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// What a user would write for "how many commands per command and status, and the oldest".
const NAIVE: &str = "SELECT command, status, count(*), min(accepted_at) FROM commands
  WHERE namespace_id = $1 GROUP BY 1, 2";

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.servers.check()?;
    let history = args.rows - args.waiting as i64 - args.in_hand;
    if args.rounds == 0 || args.calls == 0 || args.resources == 0 || history < 0 {
        return Err(
            "--rounds, --calls and --resources must be at least 1, and --rows at least \
                    --waiting + --in-hand"
                .into(),
        );
    }
    with_scratch_tenant(&args.servers, 16, CLAIM_DECLARATION, async |tenant| {
        rounds(&args, tenant, history).await
    })
    .await
}

/// Inserts `n` rows numbered from `from`, `status` and `finished` chosen per row by SQL
/// expressions of `i`, in one statement (foreign-key triggers off for this bulk load only).
async fn insert_rows(
    tenant: &Tenant,
    from: i64,
    n: i64,
    status: &str,
    extra: &str,
) -> Result<(), BoxError> {
    let mut tx = tenant.pg.begin().await?;
    for setting in [
        "SET LOCAL session_replication_role = replica",
        "SET LOCAL statement_timeout = 0",
    ] {
        sqlx::query(setting).execute(&mut *tx).await?;
    }
    // A row a second, the newest an hour ago, each id a UUID v7 of its acceptance: the rows are
    // in the days of `commands` they would be in live (made here first).
    sqlx::query(
        "SELECT sluice_ensure_command_days(
                    ((now() - make_interval(secs => $2 - $1 + 3600)) AT TIME ZONE 'UTC')::date,
                    (now() AT TIME ZONE 'UTC')::date)",
    )
    .bind(from as f64)
    .bind((from + n - 1) as f64)
    .execute(&mut *tx)
    .await?;
    // The expressions are this file's constants, never input.
    let sql = format!(
        "INSERT INTO commands (id, application_id, namespace_id, command, subject, request_key,
                content_sha256, input, resource_key, queue_seq, status, accepted_at, deadline_at,
                max_wait_at, updated_at, finished_at, limit_keys)
         SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::bigint), 12, '0') || '7'
                 || lpad(to_hex(i), 19, '0'))::uuid, $1, $2, 'claim', 'h' || i, 'h' || i,
                '\\x00'::bytea, '{{}}'::jsonb, 'r' || (i % 5000), i, {status},
                t.at, now() + interval '1 hour',
                now() + interval '1 hour', now(), {extra}
           FROM generate_series($3::bigint, $4::bigint) AS i,
                LATERAL (SELECT now() - make_interval(secs => $4 - i + 3600) AS at) AS t"
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant.creds.application_id)
        .bind(tenant.creds.namespace_id)
        .bind(from)
        .bind(from + n - 1)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

async fn rounds(args: &Args, tenant: &Tenant, history: i64) -> Result<(), BoxError> {
    let version: String = sqlx::query_scalar("SELECT current_setting('server_version')")
        .fetch_one(&tenant.pg)
        .await?;
    let gateway = RunningGateway::start(tenant, GatewayConfig::default()).await?;
    let ns = tenant.creds.namespace_id;

    // The finished history, oldest first.
    let loading = Instant::now();
    insert_rows(
        tenant,
        1,
        history,
        "(ARRAY['succeeded', 'rejected', 'failed', 'expired', 'cancelled'])[i % 5 + 1]",
        "now(), '[]'::jsonb",
    )
    .await?;
    let history_took = loading.elapsed();
    // The waiting backlog, through the gateway: real queues and a real ready set.
    let enqueuing = Instant::now();
    let offers: Vec<String> = (0..args.resources)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let resources = args.resources;
    enqueue_waiting(tenant, &gateway, "claim", args.waiting, 64, move |i| {
        format!(
            r#"{{"request_key":"w{i}","subject":"user-{i}","input":{{"offer":"{}"}}}}"#,
            offers[(i % resources) as usize]
        )
    })
    .await?;
    let enqueue_took = enqueuing.elapsed();
    // Work in hand, holding limit keys.
    insert_rows(
        tenant,
        history + 1,
        args.in_hand,
        "'running'",
        "NULL, jsonb_build_array(jsonb_build_array('acct:{a}', 'acct:' || (i % 50)))",
    )
    .await?;
    let vacuuming = Instant::now();
    {
        // Not bound by the pool's statement timeout; VACUUM runs outside a transaction.
        let mut conn = tenant.pg.acquire().await?;
        sqlx::query("SET statement_timeout = 0")
            .execute(&mut *conn)
            .await?;
        sqlx::query("VACUUM ANALYZE commands")
            .execute(&mut *conn)
            .await?;
        // Back to the pool's own settings (a RESET would drop to the server's default).
        sqlx::raw_sql(sluice_store::db::SESSION_SETTINGS)
            .execute(&mut *conn)
            .await?;
    }
    let vacuum_took = vacuuming.elapsed();
    let (rows, unfinished): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE status NOT IN
                ('succeeded', 'rejected', 'failed', 'expired', 'cancelled'))
           FROM commands WHERE namespace_id = $1",
    )
    .bind(ns)
    .fetch_one(&tenant.pg)
    .await?;
    println!(
        "status benchmark: {rows} rows in one namespace ({unfinished} unfinished: {} waiting over \
         {} resources, {} running), PostgreSQL {version}; history inserted in {:.1} s, backlog \
         enqueued in {:.1} s, VACUUM ANALYZE {:.1} s; {} sequential calls per round, {} rounds \
         per mode",
        args.waiting,
        args.resources,
        args.in_hand,
        history_took.as_secs_f64(),
        enqueue_took.as_secs_f64(),
        vacuum_took.as_secs_f64(),
        args.calls,
        args.rounds
    );
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN {NAIVE}")))
        .bind(ns)
        .fetch_all(&tenant.pg)
        .await?;
    let scans: Vec<&str> = plan
        .iter()
        .map(|line| line.trim().trim_start_matches("-> "))
        .filter(|line| line.contains(" on commands"))
        .collect();
    println!("baseline plan: {scans:?}");
    for (sql, params) in status_board::COMMANDS_QUERIES {
        let mut explain =
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}"))).bind(ns);
        if params == 2 {
            explain = explain.bind(status_board::TOP);
        }
        let plan = explain.fetch_all(&tenant.pg).await?;
        let scans: Vec<&str> = plan
            .iter()
            .map(|line| line.trim().trim_start_matches("-> "))
            .filter(|line| line.contains(" on commands"))
            .collect();
        println!("board plan: {scans:?}");
    }
    if !scans.iter().any(|line| line.contains("Seq Scan")) {
        return Err(format!("the baseline does not scan the namespace: {plan:#?}").into());
    }

    let client = http_client(4);
    let uri = format!("{}/v1/status", gateway.base);
    let bearer = format!("Bearer {}", tenant.creds.credential);
    let board = || async {
        let request = Request::get(&uri)
            .header("authorization", &bearer)
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        let response = client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            return Err::<Value, BoxError>(format!("GET /v1/status: {status}").into());
        }
        Ok(serde_json::from_slice::<Value>(&body)?)
    };
    let naive = || async {
        let rows = sqlx::query(NAIVE).bind(ns).fetch_all(&tenant.pg).await?;
        Ok::<usize, BoxError>(rows.len())
    };

    // The board is right before it is timed.
    let shown = board().await?;
    let counted: i64 = shown["data"]["commands"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["statuses"].as_array().into_iter().flatten())
        .filter_map(|s| s["count"].as_str()?.parse::<i64>().ok())
        .sum();
    let queues = &shown["data"]["queues"];
    if counted != unfinished || shown["data"]["ready"] != true {
        return Err(format!(
            "the board shows {counted} unfinished (ready {}), PostgreSQL {unfinished}",
            shown["data"]["ready"]
        )
        .into());
    }
    println!(
        "board: {counted} unfinished, {} resources waiting of {} scanned, {} limit keys in hand",
        queues["resources_waiting"],
        queues["scanned"],
        shown["data"]["in_flight"]["limit_keys"]
            .as_array()
            .map_or(0, Vec::len)
    );

    // Warm-up: connections, prepared statements, script cache, buffers.
    for _ in 0..10 {
        board().await?;
        naive().await?;
    }
    let mut boards = Vec::new();
    let mut naives = Vec::new();
    for r in 0..args.rounds {
        let mut round = Vec::with_capacity(args.calls);
        for _ in 0..args.calls {
            let started = Instant::now();
            board().await?;
            round.push(started.elapsed());
        }
        let b = median(&mut round);
        boards.extend(round);
        let mut round = Vec::with_capacity(args.calls);
        for _ in 0..args.calls {
            let started = Instant::now();
            naive().await?;
            round.push(started.elapsed());
        }
        let n = median(&mut round);
        naives.extend(round);
        println!(
            "round {}: GET /v1/status {:.2} ms, naive count {:.2} ms (medians)",
            r + 1,
            ms(b),
            ms(n)
        );
    }
    // Where the board's time goes: its counts query alone, and status_board.lua alone.
    let mut counts = Vec::with_capacity(args.calls);
    let mut script = Vec::with_capacity(args.calls);
    let keys = AppKeys::new(tenant.creds.application_id);
    for _ in 0..args.calls {
        let started = Instant::now();
        sqlx::query(status_board::COUNTS_SQL)
            .bind(ns)
            .fetch_all(&tenant.pg)
            .await?;
        counts.push(started.elapsed());
        let started = Instant::now();
        status_board::projection(
            &tenant.redis,
            &keys,
            ns,
            &["claim"],
            &[],
            status_board::RESOURCES_SCANNED,
        )
        .await?;
        script.push(started.elapsed());
    }
    println!(
        "parts of the board: counts query {:.2} ms, status_board.lua ({} ready resources) {:.2} ms \
         (medians of {} calls)",
        ms(median(&mut counts)),
        args.resources.min(status_board::RESOURCES_SCANNED as u64),
        ms(median(&mut script)),
        args.calls
    );
    let (b50, b90) = (median(&mut boards), percentile(&mut boards, 0.9));
    let (n50, n90) = (median(&mut naives), percentile(&mut naives, 0.9));
    println!();
    println!("| measured | median ms | p90 ms | calls |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| GET /v1/status (HTTP, 5 queries, status_board.lua, JSON) | {:.2} | {:.2} | {} |",
        ms(b50),
        ms(b90),
        boards.len()
    );
    println!(
        "| naive count over the namespace (SQL only) | {:.2} | {:.2} | {} |",
        ms(n50),
        ms(n90),
        naives.len()
    );
    println!();
    println!(
        "ratio naive / board: {:.1}x (the board answers in {:.1}% of the naive query's time)",
        n50.as_secs_f64() / b50.as_secs_f64(),
        100.0 * b50.as_secs_f64() / n50.as_secs_f64()
    );
    Ok(())
}

fn median(samples: &mut [Duration]) -> Duration {
    percentile(samples, 0.5)
}

fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
