//! Pair 4, a waiting room's place polls: `GET /v1/tickets/{ticket}` round-robin over places
//! waiting in a room, against the HTTP floor replaying one real place answer byte for byte.
//!
//! The people stand as in a room drop: one place admitted (`max_active = 1`, a day's pass), the
//! rest waiting behind it, so every poll is of a waiting place, answered from the gateway's
//! memory of the room (`sluice_gateway::rooms::board`); the pair prints how many were, and how
//! many reads of the room it took.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper::StatusCode;
use serde_json::Value;

use super::Bench;
use super::commands::{get, new_person_joins};
use super::polls::{capture, rounds, tickets};
use super::rounds::{connect, exchange};
use super::side::Comparison;
use crate::bench_stack::BoxError;

/// The room of the pair, declared with the bench's commands.
pub(super) const ROOM: &str = "lobby";

/// Joins `--tickets` people, keeps the waiting places' tickets, captures one answer for the
/// static server, then `--rounds` alternating rounds of round-robin polls and static answers.
pub(super) async fn pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let options = bench.options;
    let tickets = join_places(bench, options.tickets).await?;
    let paths: Arc<Vec<String>> = Arc::new(waiting(bench, tickets).await?);
    if paths.is_empty() {
        return Err("no place waits in the room".into());
    }
    let captured = capture(bench.gateway_addr, &paths[0]).await?;
    bench.baseline.state.set_poll(captured);
    let boards = &bench.gateway.gateway.room_boards;
    let (answered, reads) = (
        boards.answered.load(Ordering::Relaxed),
        boards.reads.load(Ordering::Relaxed),
    );
    let (sluice, floor, polls) = rounds(
        bench,
        paths,
        "gateway: GET /v1/tickets/{ticket} of waiting places, round-robin",
        "place poll",
    )
    .await?;
    println!(
        "place polls answered from memory (warm-up and measured rounds): {} of {polls}, with {} reads \
         of the room",
        boards.answered.load(Ordering::Relaxed) - answered,
        boards.reads.load(Ordering::Relaxed) - reads
    );
    Ok(Comparison::new(
        "place polls/s (gateway GET /v1/tickets of waiting room places vs static hyper, same bytes)",
        sluice,
        floor,
        Some(0.6),
    ))
}

/// `total` people join the room, each with their own subject token; their place tickets.
async fn join_places(bench: &Bench<'_>, total: u64) -> Result<Vec<String>, BoxError> {
    let make = new_person_joins(&bench.tenant.creds.subject_key, ROOM);
    tickets(bench, total, make, "join").await
}

/// The poll paths of the places still waiting (the room admits one; its place is left out).
async fn waiting(bench: &Bench<'_>, tickets: Vec<String>) -> Result<Vec<String>, BoxError> {
    let mut sender = connect(bench.gateway_addr).await?;
    let mut paths = Vec::with_capacity(tickets.len());
    for ticket in tickets {
        let path = format!("/v1/tickets/{ticket}");
        let (status, body) = exchange(&mut sender, get(&path)?).await?;
        let value: Value = serde_json::from_slice(&body)?;
        if status != StatusCode::OK {
            return Err(format!("GET {path}: {status} {value}").into());
        }
        if value["data"]["status"] == "waiting" {
            paths.push(path);
        }
    }
    Ok(paths)
}
