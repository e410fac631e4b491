//! Pair 5, room joins: `POST /v1/rooms/{room}:join` of a new subject each, against the durable
//! acceptance of a command (`POST /v1/commands/claim:enqueue`) on the same gateway, with the same
//! callers: a room is meant to take a crowd as fast as a command drop does. Both are answered only
//! once PostgreSQL committed (group commits of their own), so the comparison is of like with
//! like; afterwards every `202` join is checked against its place row.

use std::sync::Arc;

use uuid::Uuid;

use super::Bench;
use super::commands::{CLAIM, enqueue_body, new_person_joins, next_number, post};
use super::rounds::{MakeRequest, http_round};
use super::side::{Comparison, Side};
use crate::bench_stack::BoxError;

/// The room the pair joins, apart from pair 4's so its row count is exact.
pub(super) const ROOM: &str = "crowd";

/// `--rounds` alternating rounds of joins and enqueues, then the places counted.
pub(super) async fn pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let options = bench.options;
    let joins = new_person_joins(&bench.tenant.creds.subject_key, ROOM);
    let enqueues = {
        let (path, bearer) = (
            format!("/v1/commands/{CLAIM}:enqueue"),
            bench.bearer.clone(),
        );
        let offer = Uuid::new_v4().to_string();
        Arc::new(move || post(&path, &bearer, enqueue_body(next_number(), &offer))) as MakeRequest
    };
    let mut rooms = Side::new("gateway: room joins, HTTP 202, group commit");
    let mut commands = Side::new("gateway: command enqueues, HTTP 202, group commit");
    let (gateway, callers) = (bench.gateway_addr, options.concurrency);
    let mut joined = http_round(gateway, callers, options.warmup(), &joins, None)
        .await?
        .expect_only(&[202], "warm-up join")?
        .count(202);
    http_round(gateway, callers, options.warmup(), &enqueues, None)
        .await?
        .expect_only(&[202], "warm-up enqueue")?;
    for r in 0..options.rounds {
        bench.perf.enable();
        let round = http_round(gateway, callers, options.round(), &joins, None).await;
        bench.perf.disable();
        let round = round?;
        joined += round.expect_only(&[202], "join")?.count(202);
        rooms.push_http(&round, 202);
        let round = http_round(gateway, callers, options.round(), &enqueues, None).await?;
        commands.push_http(round.expect_only(&[202], "enqueue")?, 202);
        println!(
            "room joins round {}: joins {:.0}/s, enqueues {:.0}/s",
            r + 1,
            rooms.last(),
            commands.last()
        );
    }
    let places: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM room_places WHERE namespace_id = $1 AND room = $2",
    )
    .bind(bench.tenant.creds.namespace_id)
    .bind(ROOM)
    .fetch_one(&bench.tenant.pg)
    .await?;
    println!("places: {places} for {joined} joins answered 202");
    if places != joined as i64 {
        return Err(format!("{joined} joins answered 202 but {places} places were made").into());
    }
    Ok(Comparison::new(
        "room joins/s (gateway 202 per new place vs gateway 202 per command enqueue, same callers)",
        rooms,
        commands,
        Some(1.0),
    ))
}
