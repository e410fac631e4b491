//! Pair 3, ticket polls: `GET /v1/tickets/{ticket}` round-robin over waiting commands, against
//! the HTTP floor: the baseline server replaying one real poll answer byte for byte, so the
//! difference is what a poll costs beyond hyper itself.
//!
//! The waiters stand as in a drop: deep in one long queue that has started draining (its first
//! command started before they enqueued, as an executor does within milliseconds of a drop's
//! first claim; none runs here, so nothing else starts and the queue stands still). Such polls
//! are answered from the gateway's memory of the queue (`sluice_gateway::polls::waiting_view`) except
//! for the first few positions; the pair prints the share.

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
use sluice_durable::lifecycle::redis::{Admission, AdmitLimits, admit};
use sluice_redis::AppKeys;
use sluice_redis::admission_config::write_admission_config;

/// Enqueues `--tickets` waiting commands, captures one real poll answer for the static server,
/// then `--rounds` alternating rounds of round-robin polls and static answers.
pub(super) async fn pair(bench: &Bench<'_>) -> Result<Comparison, BoxError> {
    let options = bench.options;
    start_draining(bench).await?;
    let tickets = enqueue_tickets(bench, options.tickets).await?;
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
    bench.baseline.state.set_poll(captured);
    let from_memory = sluice_metrics::ticket_polls_answered("memory");
    let from_redis = sluice_metrics::ticket_polls_answered("redis");
    let (sluice, floor, _) = rounds(
        bench,
        paths,
        "gateway: GET /v1/tickets/{ticket}, round-robin",
        "poll",
    )
    .await?;
    let memory = sluice_metrics::ticket_polls_answered("memory") - from_memory;
    let redis = sluice_metrics::ticket_polls_answered("redis") - from_redis;
    println!(
        "polls answered from memory (warm-up and measured rounds): {memory} of {} ({:.1} %), from \
         Redis {redis}",
        memory + redis,
        100.0 * memory as f64 / (memory + redis).max(1) as f64
    );
    Ok(Comparison::new(
        "ticket polls/s (gateway GET /v1/tickets vs static hyper, same bytes)",
        sluice,
        floor,
        Some(0.6),
    ))
}

/// Round-robin `GET`s of `paths` against the gateway and the static server (which replays the
/// answer captured last), warmed up, then `--rounds` alternating measured rounds of each; both
/// sides, and how many polls the gateway answered (warm-up included).
pub(super) async fn rounds(
    bench: &Bench<'_>,
    paths: Arc<Vec<String>>,
    sluice_label: &str,
    what: &str,
) -> Result<(Side, Side, u64), BoxError> {
    let options = bench.options;
    let next = Arc::new(AtomicU64::new(0));
    let make = Arc::new(move || {
        let i = next.fetch_add(1, Ordering::Relaxed) as usize % paths.len();
        get(&paths[i]).expect("a request of a static method, a valid path and valid headers")
    }) as MakeRequest;
    let mut sluice = Side::new(sluice_label);
    let mut floor = Side::new("static hyper server, the same bytes and headers");
    let (gateway, baseline) = (bench.gateway_addr, bench.baseline.addr);
    let callers = options.concurrency;
    let warm = http_round(gateway, callers, options.warmup(), &make, None).await?;
    let mut answered = warm.count(200);
    warm.expect_only(&[200], &format!("warm-up {what}"))?;
    http_round(baseline, callers, options.warmup(), &make, None)
        .await?
        .expect_only(&[200], "warm-up static answer")?;
    for r in 0..options.rounds {
        bench.perf.enable();
        let round = http_round(gateway, callers, options.round(), &make, None).await;
        bench.perf.disable();
        let round = round?;
        answered += round.count(200);
        sluice.push_http(round.expect_only(&[200], what)?, 200);
        let static_round = http_round(baseline, callers, options.round(), &make, None).await?;
        floor.push_http(static_round.expect_only(&[200], "static answer")?, 200);
        println!(
            "{what} round {}: gateway {:.0}/s, static {:.0}/s",
            r + 1,
            sluice.last(),
            floor.last()
        );
    }
    Ok((sluice, floor, answered))
}

/// The admission numbers of [`HOLD`] as an executor would write them: 10 starts per second
/// declared (a drop's drain), a burst that lets the first start through.
const HOLD_SPEC: &str = "1000 10 100 0";

/// Starts the first of two commands of [`HOLD`]'s queue in Redis (`admit.lua`, as an executor's
/// first admission would; nobody claims it): the queue now has a start on record and a head,
/// and the waiters enqueued next are deep behind it.
async fn start_draining(bench: &Bench<'_>) -> Result<(), BoxError> {
    let redis = &bench.gateway.gateway.redis;
    let keys = AppKeys::new(bench.tenant.creds.application_id);
    let field = format!("{}:{HOLD}", bench.tenant.creds.namespace_id);
    write_admission_config(redis, &keys, vec![(field, HOLD_SPEC.to_string())]).await?;
    enqueue_tickets(bench, 2).await?;
    let limits = AdmitLimits {
        min_generation: 0,
        max_heads: 1,
        scan_limit: 256,
        lease_ms: 3_600_000,
        lookahead: 16,
    };
    match admit(redis, &keys, limits).await? {
        Admission::Heads { heads, .. } if heads.len() == 1 => Ok(()),
        other => Err(format!("the queue's first start: {other:?}").into()),
    }
}

/// Enqueues `total` commands of [`HOLD`] (no executor runs, so they wait) and returns their
/// tickets.
async fn enqueue_tickets(bench: &Bench<'_>, total: u64) -> Result<Vec<String>, BoxError> {
    let path = format!("/v1/commands/{HOLD}:enqueue");
    let bearer = bench.bearer.clone();
    let make = Arc::new(move || post(&path, &bearer, enqueue_body(next_number(), OFFER)));
    tickets(bench, total, make, "enqueue").await
}

/// `total` requests made by `make`, sent by as many callers as the bench has (at most `total`),
/// each answered `202` with a ticket; the tickets.
pub(super) async fn tickets(
    bench: &Bench<'_>,
    total: u64,
    make: MakeRequest,
    what: &'static str,
) -> Result<Vec<String>, BoxError> {
    let callers = bench.options.concurrency.min(total as usize).max(1);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(callers);
    for _ in 0..callers {
        let mut sender = connect(bench.gateway_addr).await?;
        let (next, make) = (next.clone(), make.clone());
        tasks.push(tokio::spawn(async move {
            let mut tickets = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let (status, body) = exchange(&mut sender, make()).await?;
                let value: Value = serde_json::from_slice(&body)?;
                match (status, value["data"]["ticket"].as_str()) {
                    (StatusCode::ACCEPTED, Some(ticket)) => tickets.push(ticket.to_string()),
                    _ => return Err(format!("{what} for a ticket: {status} {value}").into()),
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
pub(super) async fn capture(addr: SocketAddr, path: &str) -> Result<Captured, BoxError> {
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
