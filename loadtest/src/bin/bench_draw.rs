//! The fair start's draw at the size of a drop: how long the admission ticker's step takes to
//! give a pre-queue of `--people` places their order at `opens_at`, against the machine's own
//! ceiling for rewriting the same rows, in one run on the same PostgreSQL.
//!
//! - Sluice: `rooms::admission::step` on a room whose `opens_at` has just passed: the draw
//!   (every place's `SHA-256(seed ‖ join_id)`, sorted, the pre-queue's arrival numbers handed
//!   out again in that order) in the step's one transaction, plus the step's first admissions
//!   (`max_active` 10);
//! - the baseline: one `UPDATE … SET ord = seq` of the same rows (the draw's writes without its
//!   hashing and sorting), the least any draw that stores an order per place can cost.
//!
//! The places are inserted directly (joins are measured by the room drop); each round starts
//! from the same undrawn pre-queue after a `VACUUM`. Alternating rounds, medians reported.

use std::time::Instant;

use clap::Parser;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_store::rooms::admission::{self, RoomRef};

#[derive(Debug, Parser)]
#[command(about = "The pre-queue's draw at opens_at against a plain rewrite of its rows")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Places in the pre-queue.
    #[arg(long, default_value_t = 100_000)]
    people: i64,
    /// Rounds per side (alternating); the median is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

const DECLARATION: &str = r#"
[[room]]
code = "drop"
max_active = 10
pass_seconds = 300
opens_at = "2099-01-01T00:00:00Z"
"#;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.servers.check()?;
    if args.people < 1 || args.rounds < 1 {
        return Err("--people and --rounds must be at least 1".into());
    }
    let declaration = format!("{DECLARATION}\n{CLAIM_DECLARATION}");
    with_scratch_tenant(&args.servers, 4, &declaration, async |tenant| {
        run(&args, tenant).await
    })
    .await
}

async fn run(args: &Args, tenant: &Tenant) -> Result<(), BoxError> {
    let settings = PostgresSettings::read(&tenant.pg).await?;
    let room = RoomRef {
        namespace_id: tenant.creds.namespace_id,
        code: "drop".into(),
    };
    let loading = Instant::now();
    load(tenant, args.people).await?;
    println!(
        "{settings}; a pre-queue of {} places loaded in {:.1} s",
        args.people,
        loading.elapsed().as_secs_f64()
    );
    let (mut draws, mut rewrites) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        undraw(tenant).await?;
        let began = Instant::now();
        let stepped = admission::step(&tenant.pg, &room)
            .await?
            .ok_or("another ticker holds the room")?;
        draws.push(began.elapsed().as_secs_f64());
        if !stepped.drawn {
            return Err("the step did not draw".into());
        }
        check_drawn(tenant, args.people).await?;

        undraw(tenant).await?;
        let began = Instant::now();
        sqlx::query("UPDATE room_places SET ord = seq WHERE namespace_id = $1 AND room = 'drop'")
            .bind(tenant.creds.namespace_id)
            .execute(&tenant.pg)
            .await?;
        rewrites.push(began.elapsed().as_secs_f64());
    }
    let (draw, rewrite) = (median(draws.clone()), median(rewrites.clone()));
    println!();
    println!(
        "| pre-queue | the draw (step at opens_at) | plain rewrite of the rows | draw / rewrite |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    println!(
        "| {} | {:.0} ms ({}) | {:.0} ms ({}) | {:.2}× |",
        args.people,
        draw * 1e3,
        milliseconds(&draws),
        rewrite * 1e3,
        milliseconds(&rewrites),
        draw / rewrite.max(1e-9)
    );
    Ok(())
}

fn milliseconds(rounds: &[f64]) -> String {
    rounds
        .iter()
        .map(|s| format!("{:.0}", s * 1e3))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `people` waiting places joined before `opens_at`, as joins leave them: arrival numbers
/// 1..=people, no order yet.
async fn load(tenant: &Tenant, people: i64) -> Result<(), BoxError> {
    let ns = tenant.creds.namespace_id;
    without_statement_timeout(&tenant.pg, async |conn| {
        sqlx::query(
            "INSERT INTO room_places (id, namespace_id, room, subject, seq, prequeue, ord, state, joined_at)
             SELECT gen_random_uuid(), $1, 'drop', 'p' || g, g, true, NULL, 'waiting', now()
               FROM generate_series(1, $2::bigint) g",
        )
        .bind(ns)
        .bind(people)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "UPDATE rooms SET next_seq = $2, waiting = $2 WHERE namespace_id = $1 AND code = 'drop'",
        )
        .bind(ns)
        .bind(people)
        .execute(&mut *conn)
        .await?;
        Ok(())
    })
    .await
}

/// Back to an undrawn pre-queue whose `opens_at` has just passed, every place waiting, the dead
/// rows of the round before vacuumed away.
async fn undraw(tenant: &Tenant) -> Result<(), BoxError> {
    let ns = tenant.creds.namespace_id;
    sqlx::query(
        "UPDATE room_places SET ord = NULL, state = 'waiting', admitted_at = NULL,
                renewed_at = NULL, pass_until = NULL
          WHERE namespace_id = $1 AND room = 'drop'",
    )
    .bind(ns)
    .execute(&tenant.pg)
    .await?;
    sqlx::query(
        "UPDATE rooms SET drawn_at = NULL, opens_at = now() - interval '1 millisecond',
                admitted_through = 0, active = 0, waiting = next_seq
          WHERE namespace_id = $1 AND code = 'drop'",
    )
    .bind(ns)
    .execute(&tenant.pg)
    .await?;
    without_statement_timeout(&tenant.pg, async |conn| {
        sqlx::query("VACUUM ANALYZE room_places")
            .execute(&mut *conn)
            .await?;
        Ok(())
    })
    .await
}

/// Every place has an order, each a different one of the arrival numbers.
async fn check_drawn(tenant: &Tenant, people: i64) -> Result<(), BoxError> {
    let (ordered, distinct): (i64, i64) = sqlx::query_as(
        "SELECT count(ord), count(DISTINCT ord) FROM room_places
          WHERE namespace_id = $1 AND room = 'drop'",
    )
    .bind(tenant.creds.namespace_id)
    .fetch_one(&tenant.pg)
    .await?;
    if ordered != people || distinct != people {
        return Err(
            format!("{ordered} of {people} places drawn, {distinct} distinct orders").into(),
        );
    }
    Ok(())
}
