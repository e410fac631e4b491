//! Pair 3, ticket polls: `GET /v1/tickets/{ticket}` round-robin over waiting commands, against
//! the HTTP floor: the baseline server replaying one real poll answer byte for byte, so the
//! difference is what a poll costs beyond hyper itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{DATE, HeaderMap, TRANSFER_ENCODING};
use hyper::{Response, StatusCode};
use serde_json::Value;

use super::Bench;
use super::commands::{HOLD, OFFER, enqueue_body, get, next_number, post};
use super::rounds::{MakeRequest, connect, exchange, http_round};
use super::side::{Comparison, Side};
use crate::bench_stack::BoxError;

/// Enqueues `--tickets` waiting commands, captures one real poll answer for the static server,
/// then `--rounds` alternating rounds of round-robin polls and static answers.
pub(super) async fn pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let options = bench.options;
    let tickets = enqueue_tickets(bench).await?;
    let paths: Arc<Vec<String>> = Arc::new(
        tickets
            .iter()
            .map(|ticket| format!("/v1/tickets/{ticket}"))
            .collect(),
    );
    let captured = capture(bench.gateway_addr, &paths[0]).await?;
    println!(
        "poll answer captured for the static server: {} bytes, headers {}",
        captured.body.len(),
        captured
            .headers
            .keys()
            .map(|name| name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if bench.baseline.state.poll.set(captured).is_err() {
        return Err("the static poll answer was captured twice".into());
    }
    let next = Arc::new(AtomicU64::new(0));
    let make = Arc::new(move || {
        let i = next.fetch_add(1, Ordering::Relaxed) as usize % paths.len();
        get(&paths[i]).expect("a request of a static method, a valid path and valid headers")
    }) as MakeRequest;
    let mut sluice = Side::new("gateway: GET /v1/tickets/{ticket}, round-robin");
    let mut floor = Side::new("static hyper server, the same bytes and headers");
    let (gateway, baseline) = (bench.gateway_addr, bench.baseline.addr);
    let callers = options.concurrency;
    http_round(gateway, callers, options.warmup(), &make, None)
        .await?
        .expect_only(&[200], "warm-up poll")?;
    http_round(baseline, callers, options.warmup(), &make, None)
        .await?
        .expect_only(&[200], "warm-up static answer")?;
    for r in 0..options.rounds {
        bench.perf.enable();
        let round = http_round(gateway, callers, options.round(), &make, None).await;
        bench.perf.disable();
        let round = round?;
        sluice.push_http(round.expect_only(&[200], "poll")?, 200);
        let static_round = http_round(baseline, callers, options.round(), &make, None).await?;
        floor.push_http(static_round.expect_only(&[200], "static answer")?, 200);
        println!(
            "poll round {}: gateway {:.0}/s, static {:.0}/s",
            r + 1,
            sluice.last(),
            floor.last()
        );
    }
    Ok(Comparison::new(
        "ticket polls/s (gateway GET /v1/tickets vs static hyper, same bytes)",
        sluice,
        floor,
        Some(0.6),
    ))
}

/// Enqueues `--tickets` commands of [`HOLD`] (no executor runs, so they wait) and returns their
/// tickets.
async fn enqueue_tickets(bench: &Bench<'_>) -> Result<Vec<String>, BoxError> {
    let total = bench.options.tickets;
    let callers = bench.options.concurrency.min(total as usize);
    let next = Arc::new(AtomicU64::new(0));
    let path = Arc::<str>::from(format!("/v1/commands/{HOLD}:enqueue"));
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        let mut sender = connect(bench.gateway_addr).await?;
        let (next, path, bearer) = (next.clone(), path.clone(), bench.bearer.clone());
        tasks.push(tokio::spawn(async move {
            let mut tickets = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let request = post(&path, &bearer, enqueue_body(next_number(), OFFER));
                let (status, body) = exchange(&mut sender, request).await?;
                let value: Value = serde_json::from_slice(&body)?;
                match (status, value["data"]["ticket"].as_str()) {
                    (StatusCode::ACCEPTED, Some(ticket)) => tickets.push(ticket.to_string()),
                    _ => return Err(format!("enqueue for a ticket: {status} {value}").into()),
                }
            }
            Ok::<_, BoxError>(tickets)
        }));
    }
    let mut tickets = Vec::with_capacity(total as usize);
    for task in tasks {
        tickets.extend(task.await??);
    }
    Ok(tickets)
}

/// A recorded answer, replayed byte for byte.
pub(super) struct Captured {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Captured {
    /// The recorded answer again (hyper adds its own `date`).
    pub(super) fn replay(&self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(self.body.clone()));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// One real answer of the gateway to `GET path`: status, headers (but `date`, which hyper adds
/// itself) and body.
async fn capture(addr: SocketAddr, path: &str) -> Result<Captured, BoxError> {
    let mut sender = connect(addr).await?;
    let request = get(path)?;
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let mut headers = response.headers().clone();
    headers.remove(DATE);
    headers.remove(TRANSFER_ENCODING);
    let body = response.into_body().collect().await?.to_bytes();
    if status != StatusCode::OK {
        return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
    }
    Ok(Captured {
        status,
        headers,
        body,
    })
}
