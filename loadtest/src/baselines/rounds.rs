//! The round runner every side is measured with ([`together`]: tasks started at once, stopped at
//! one deadline, timed and CPU-metered alike) and the HTTP client on top of it: closed-loop
//! callers on their own keep-alive connections. Time-bounded rather than count-bounded rounds,
//! so a fast and a slow side get the same share of the shared machine's drift; one raw hyper
//! connection per caller (no pool), so the client costs both sides the same and little.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Barrier;

use super::cpu::Cpu;
use crate::bench_stack::BoxError;

pub(super) type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
/// Builds a caller's next request (each may differ: a fresh request key, the next ticket).
pub(super) type MakeRequest = Arc<dyn Fn() -> Request<Full<Bytes>> + Send + Sync>;
/// A status whose body must contain a marker (e.g. `429` must say `"RATE_LIMITED"`); a body
/// without it is counted as status 598.
pub(super) type BodyCheck = Option<(u16, &'static str)>;

/// What one time-bounded HTTP round saw.
pub(super) struct HttpRound {
    statuses: BTreeMap<u16, u64>,
    pub(super) latency_us: Histogram<u64>,
    elapsed: Duration,
    pub(super) cpu: Cpu,
}

impl HttpRound {
    fn new() -> Self {
        Self {
            statuses: BTreeMap::new(),
            latency_us: new_histogram(),
            elapsed: Duration::ZERO,
            cpu: Cpu::default(),
        }
    }

    fn record(&mut self, status: u16, took: Duration) {
        *self.statuses.entry(status).or_default() += 1;
        let _ = self.latency_us.record(took.as_micros() as u64);
    }

    fn add(&mut self, other: &Self) {
        for (status, n) in &other.statuses {
            *self.statuses.entry(*status).or_default() += n;
        }
        let _ = self.latency_us.add(&other.latency_us);
    }

    pub(super) fn count(&self, status: u16) -> u64 {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    pub(super) fn per_second(&self, status: u16) -> f64 {
        self.count(status) as f64 / self.elapsed.as_secs_f64()
    }

    /// Fails the run when any answer had another status (599: the connection failed, 598: the
    /// body lacked its marker).
    pub(super) fn expect_only(&self, allowed: &[u16], what: &str) -> Result<&Self, BoxError> {
        if self.statuses.keys().all(|status| allowed.contains(status)) {
            return Ok(self);
        }
        Err(format!(
            "unexpected {what} answers (status: count): {:?}; allowed {allowed:?}",
            self.statuses
        )
        .into())
    }
}

/// Microseconds from 1 µs to a minute, three significant digits.
pub(super) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("constant histogram bounds are valid")
}

/// A fresh HTTP/1.1 connection without Nagle's delay (small requests on loopback).
pub(super) async fn connect(addr: SocketAddr) -> Result<Sender, BoxError> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// One request on a fresh connection: status and body.
pub(super) async fn send_once(
    addr: SocketAddr,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), BoxError> {
    exchange(&mut connect(addr).await?, request).await
}

/// One request on `sender`'s connection: status and the whole body.
pub(super) async fn exchange(
    sender: &mut Sender,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), BoxError> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    Ok((status, response.into_body().collect().await?.to_bytes()))
}

/// `concurrency` callers, each on its own connection, sending `make()` for `duration`. The
/// connections are made before the start, so the round measures answers, not handshakes.
pub(super) async fn http_round(
    addr: SocketAddr,
    concurrency: usize,
    duration: Duration,
    make: &MakeRequest,
    check: BodyCheck,
) -> Result<HttpRound, BoxError> {
    let mut workers = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let (sender, make) = (connect(addr).await?, make.clone());
        workers.push(move |deadline| caller(addr, sender, deadline, make, check));
    }
    let mut round = HttpRound::new();
    (round.elapsed, round.cpu) = together(workers, duration, |part| round.add(&part)).await?;
    Ok(round)
}

/// Runs `workers` as tasks that start together (a barrier) and stop at one deadline `duration`
/// after; `each` folds in their results in order. The wall time runs from the common start to
/// the last result folded in, the CPU is read around it: the round runner of every side, HTTP
/// or not, so both sides of a pair are timed alike.
pub(super) async fn together<W, Fut, T>(
    workers: Vec<W>,
    duration: Duration,
    mut each: impl FnMut(T),
) -> Result<(Duration, Cpu), BoxError>
where
    W: FnOnce(Instant) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, BoxError>> + Send,
    T: Send + 'static,
{
    let start = Arc::new(Barrier::new(workers.len() + 1));
    let mut tasks = Vec::with_capacity(workers.len());
    for worker in workers {
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            worker(Instant::now() + duration).await
        }));
    }
    let cpu = Cpu::read();
    start.wait().await;
    let started = Instant::now();
    for task in tasks {
        each(task.await??);
    }
    Ok((started.elapsed(), Cpu::read().since(cpu)))
}

/// One closed-loop caller: the next request as soon as the last was answered. A failed
/// connection counts as status 599 and is replaced.
async fn caller(
    addr: SocketAddr,
    mut sender: Sender,
    deadline: Instant,
    make: MakeRequest,
    check: BodyCheck,
) -> Result<HttpRound, BoxError> {
    let mut round = HttpRound::new();
    while Instant::now() < deadline {
        let sent = Instant::now();
        let status = match exchange(&mut sender, make()).await {
            Ok((status, body)) => checked(status.as_u16(), &body, check),
            Err(_) => {
                sender = connect(addr).await?;
                599
            }
        };
        round.record(status, sent.elapsed());
    }
    Ok(round)
}

/// `status`, or 598 when it is the checked status and the body lacks the marker.
fn checked(status: u16, body: &[u8], check: BodyCheck) -> u16 {
    match check {
        Some((expected, marker))
            if status == expected
                && !body
                    .windows(marker.len())
                    .any(|window| window == marker.as_bytes()) =>
        {
            598
        }
        _ => status,
    }
}
