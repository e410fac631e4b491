//! A gateway's SIGTERM in the middle of a run (`--sigterm-gateway-after`), witnessed from the
//! client's side only: the gateway's own bookkeeping is never read.
//!
//! - [`Routing`] is what the callers' HTTP client ([`crate::connections`]) does as a load
//!   balancer in front of the gateways would: a kept-alive connection stays where it is (an L4
//!   balancer does not move open connections), a new connection avoids a gateway once its
//!   public `/readyz` answered anything but `200` (as an endpoint leaves a Service when its
//!   readiness fails), and a refused connect goes to the next gateway (nothing of the request
//!   was written, so that retry is safe for any method), which then stays out of rotation.
//! - Its witness sees every request meant for the signalled gateway or carried by a connection
//!   to it that ends after the signal: on which connection (opened before or after the signal,
//!   kept alive or new), and whether it was answered (any status) or failed at the transport.
//! - A probe asks the signalled gateway's public and admin `/readyz` every 50 ms, from half a
//!   second before the signal until its process exits, and records every answer.
//! - After the run, every `202` the signalled gateway answered from the signal on is looked up
//!   in PostgreSQL.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use serde::{Deserialize, Serialize};
use sluice_durable::ids::{CommandId, NamespaceId};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::bench_stack::BoxError;
use crate::connections::{RequestError, Trace};
use crate::driver::HttpClient;
use crate::report::Check;
use crate::stack::TakenGateway;

/// How often the probe asks both `/readyz`.
const PROBE_EVERY: Duration = Duration::from_millis(50);

/// How long before the signal the probe starts (its first answers show the gateway ready).
const PROBE_BEFORE: Duration = Duration::from_millis(500);

/// How long the signalled gateway may take to exit before it is killed (its drain is bounded by
/// 15 s for connections and 10 s for the group committers, plus the shutdown delay).
const EXIT_LIMIT: Duration = Duration::from_secs(60);

/// The signal sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum GatewaySignal {
    /// SIGTERM: the drain measured.
    Term,
    /// SIGKILL: the witness's control (the requests in flight on the gateway's connections
    /// must show as transport failures, and the checks of the claim fail).
    Kill,
}

impl GatewaySignal {
    fn name(self) -> &'static str {
        match self {
            GatewaySignal::Term => "TERM",
            GatewaySignal::Kill => "KILL",
        }
    }
}

/// Where new connections go while a gateway drains, and the witness of that gateway.
pub struct Routing {
    /// Every gateway's `host:port`, in the stack's order.
    gateways: Vec<String>,
    /// Out of rotation for new connections.
    out: Vec<AtomicBool>,
    witness: Witness,
}

impl Routing {
    /// Routing over the gateways at `bases` (`http://host:port`), witnessing the one at
    /// `signalled`.
    pub fn new(bases: &[String], signalled: usize) -> Result<Arc<Self>, BoxError> {
        let gateways: Vec<String> = bases.iter().map(|b| authority_of(b)).collect();
        let watched = gateways
            .get(signalled)
            .ok_or("no such gateway to signal")?
            .clone();
        Ok(Arc::new(Self {
            out: gateways.iter().map(|_| AtomicBool::new(false)).collect(),
            gateways,
            witness: Witness {
                authority: watched,
                signal: OnceLock::new(),
                seen: Mutex::new(Vec::new()),
            },
        }))
    }

    fn index(&self, authority: &str) -> Option<usize> {
        self.gateways.iter().position(|g| g == authority)
    }

    /// Where a new connection meant for `authority` goes instead: None while it is in rotation
    /// (or is no gateway of the stack, or no other is in rotation).
    pub(crate) fn elsewhere(&self, authority: &str) -> Option<&str> {
        let i = self.index(authority)?;
        if !self.out[i].load(Ordering::Relaxed) {
            return None;
        }
        let n = self.gateways.len();
        (1..n)
            .map(|k| (i + k) % n)
            .find(|j| !self.out[*j].load(Ordering::Relaxed))
            .map(|j| self.gateways[j].as_str())
    }

    /// Takes the gateway at `authority` out of rotation for new connections.
    pub(crate) fn take_out(&self, authority: &str) {
        if let Some(i) = self.index(authority) {
            self.out[i].store(true, Ordering::Relaxed);
        }
    }

    /// One request's journey, seen by the witness if it concerns the signalled gateway and
    /// ended after the signal.
    pub(crate) fn record(
        &self,
        meant_for: &str,
        sent: Instant,
        trace: &Trace,
        result: &Result<Response<Full<Bytes>>, RequestError>,
    ) {
        let w = &self.witness;
        if w.signal.get().is_none() {
            return;
        }
        let ended = Instant::now();
        let on_here = trace
            .carrier
            .as_ref()
            .filter(|c| c.authority == w.authority)
            .map(|c| (c.opened, c.reused));
        if meant_for != w.authority && on_here.is_none() {
            return;
        }
        let outcome = match result {
            Ok(response) => Ok(response.status().as_u16()),
            Err(error) => Err(error.to_string()),
        };
        let command = match (result, on_here) {
            (Ok(response), Some(_)) if response.status().as_u16() == 202 => {
                command_id(response.body())
            }
            _ => None,
        };
        let seen = Seen {
            sent,
            ended,
            on_here,
            unsent: trace.unsent,
            refused: trace.refused,
            rerouted: trace.rerouted,
            outcome,
            command,
        };
        w.seen.lock().unwrap_or_else(|p| p.into_inner()).push(seen);
    }
}

/// `data.command_id` of an enqueue's `202`.
fn command_id(body: &Full<Bytes>) -> Option<CommandId> {
    let bytes = full_bytes(body.clone())?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    value
        .pointer("/data/command_id")
        .and_then(serde_json::Value::as_str)
        .and_then(|id| id.parse().ok())
}

/// `http://host:port[/…]` as `host:port`.
fn authority_of(base: &str) -> String {
    let rest = base.split_once("://").map_or(base, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest).to_string()
}

struct Witness {
    /// The signalled gateway's `host:port`.
    authority: String,
    /// Set just before the `kill` command starts.
    signal: OnceLock<Instant>,
    seen: Mutex<Vec<Seen>>,
}

/// A request that concerns the signalled gateway and ended after the signal.
struct Seen {
    sent: Instant,
    ended: Instant,
    /// Carried by a connection to the signalled gateway: when it was opened, and whether it was
    /// kept alive from an earlier request.
    on_here: Option<(Instant, bool)>,
    unsent: u32,
    refused: bool,
    rerouted: bool,
    /// The status, or why no answer came.
    outcome: Result<u16, String>,
    /// The command of a `202` the signalled gateway answered.
    command: Option<CommandId>,
}

/// The gateway to signal and how, ready to start once the run's origin is known.
pub struct Sigterm {
    taken: TakenGateway,
    routing: Arc<Routing>,
    after: Duration,
    signal: GatewaySignal,
    shutdown_delay_ms: u64,
    /// The callers' client: its idle connections to the gateway are counted at the signal.
    client: HttpClient,
}

impl Sigterm {
    pub fn new(
        taken: TakenGateway,
        routing: Arc<Routing>,
        after_seconds: f64,
        signal: GatewaySignal,
        shutdown_delay_ms: u64,
        client: HttpClient,
    ) -> Self {
        Self {
            taken,
            routing,
            after: Duration::from_secs_f64(after_seconds),
            signal,
            shutdown_delay_ms,
            client,
        }
    }

    /// The signalled gateway's process, for CPU and memory sampling.
    pub fn watched(&self) -> Option<crate::stack::Watched> {
        self.taken.child.id().map(|pid| crate::stack::Watched {
            name: format!("{} (SIGTERM)", self.taken.name),
            pid,
        })
    }

    /// Signals the gateway `--sigterm-gateway-after` seconds after `origin` (the first
    /// arrival), probing its `/readyz` from half a second before until it exits.
    pub fn start(self, origin: Instant) -> Running {
        Running(tokio::spawn(self.run(origin)))
    }

    async fn run(self, origin: Instant) -> Observed {
        let Self {
            taken,
            routing,
            after,
            signal: sent,
            shutdown_delay_ms,
            client,
        } = self;
        let TakenGateway {
            name,
            mut child,
            base,
            admin,
        } = taken;
        let at = origin + after;
        tokio::time::sleep_until(at.checked_sub(PROBE_BEFORE).unwrap_or(at).into()).await;
        let exited = CancellationToken::new();
        let probe = tokio::spawn(probe(
            format!("{base}/readyz"),
            format!("{admin}/readyz"),
            routing.clone(),
            exited.clone(),
        ));
        tokio::time::sleep_until(at.into()).await;
        let idle_at_signal = client.idle_count(&routing.witness.authority);
        let signal = Instant::now();
        let _ = routing.witness.signal.set(signal);
        let killed = match child.id() {
            Some(pid) => tokio::process::Command::new("kill")
                .args([&format!("-{}", sent.name()), &pid.to_string()])
                .status()
                .await
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    if s.success() {
                        Ok(())
                    } else {
                        Err(format!("kill -{} {pid}: {s}", sent.name()))
                    }
                }),
            None => Err("the gateway had already exited".into()),
        };
        let kill_returned = Instant::now();
        let status = match tokio::time::timeout(EXIT_LIMIT, child.wait()).await {
            Ok(Ok(status)) => (status.success(), status.to_string()),
            Ok(Err(e)) => (false, e.to_string()),
            Err(_) => {
                let _ = child.start_kill();
                (
                    false,
                    format!("still running {EXIT_LIMIT:?} after SIGTERM; killed"),
                )
            }
        };
        let exit = Instant::now();
        exited.cancel();
        let probes = probe.await.unwrap_or_default();
        Observed {
            name,
            authority: routing.witness.authority.clone(),
            signal_at: signal.saturating_duration_since(origin),
            sent,
            shutdown_delay_ms,
            idle_at_signal,
            signal,
            kill_returned,
            killed,
            exit,
            status,
            probes,
            routing,
        }
    }
}

/// The signal's task; aborted if dropped before it ends (an interrupted run).
pub struct Running(tokio::task::JoinHandle<Observed>);

impl Running {
    pub async fn observed(mut self) -> Result<Observed, BoxError> {
        Ok((&mut self.0).await?)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One answer (or its absence) to a probe.
struct ProbeAnswer {
    sent: Instant,
    /// When the answer (or the failure) came.
    ended: Instant,
    endpoint: &'static str,
    answer: Result<(u16, String), String>,
}

/// Public and admin `/readyz` every [`PROBE_EVERY`] until `exited`; a public answer other than
/// `200` takes the gateway out of rotation, as a load balancer following it would.
async fn probe(
    public: String,
    admin: String,
    routing: Arc<Routing>,
    exited: CancellationToken,
) -> Vec<ProbeAnswer> {
    // A client of its own: the probe's requests are not the callers'.
    let client = HttpClient::new(4);
    let authority = authority_of(&public);
    let mut answers = Vec::new();
    let mut tick = tokio::time::interval(PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = exited.cancelled() => break,
            _ = tick.tick() => {}
        }
        let (public, admin) = tokio::join!(
            ask(&client, &public, "public"),
            ask(&client, &admin, "admin")
        );
        if !matches!(public.answer, Ok((200, _))) {
            routing.take_out(&authority);
        }
        answers.push(public);
        answers.push(admin);
    }
    answers
}

async fn ask(client: &HttpClient, url: &str, endpoint: &'static str) -> ProbeAnswer {
    let sent = Instant::now();
    let answer = match Request::get(url).body(Full::new(Bytes::new())) {
        Ok(request) => {
            match tokio::time::timeout(Duration::from_secs(1), client.request(request)).await {
                Ok(Ok(response)) => {
                    let status = response.status().as_u16();
                    let body = response.into_body();
                    let text = full_bytes(body)
                        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
                        .unwrap_or_default();
                    Ok((status, text))
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer within 1 s".into()),
            }
        }
        Err(e) => Err(e.to_string()),
    };
    ProbeAnswer {
        sent,
        ended: Instant::now(),
        endpoint,
        answer,
    }
}

/// The bytes of a `Full` body (always ready: it holds them already).
fn full_bytes(body: Full<Bytes>) -> Option<Bytes> {
    use hyper::body::Body;
    let mut body = std::pin::pin!(body);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match body.as_mut().poll_frame(&mut cx) {
        std::task::Poll::Ready(Some(Ok(frame))) => frame.into_data().ok(),
        std::task::Poll::Ready(None) => Some(Bytes::new()),
        _ => None,
    }
}

/// What the signal's task saw, to be judged once the run is over.
pub struct Observed {
    name: String,
    authority: String,
    /// From the first arrival.
    signal_at: Duration,
    sent: GatewaySignal,
    shutdown_delay_ms: u64,
    idle_at_signal: usize,
    signal: Instant,
    kill_returned: Instant,
    killed: Result<(), String>,
    exit: Instant,
    /// Exited 0, and how it exited.
    status: (bool, String),
    probes: Vec<ProbeAnswer>,
    routing: Arc<Routing>,
}

/// The figures of a SIGTERM under load, in the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Figures {
    /// `gateway 2 at 127.0.0.1:port`.
    pub gateway: String,
    /// `TERM` (or `KILL`, the witness's control).
    pub signal: String,
    /// From the first arrival to the signal.
    pub signal_at_seconds: f64,
    /// The gateways' `gateway.shutdown_delay_ms`.
    pub shutdown_delay_ms: u64,
    /// How long the `kill` command took (the signal was sent within it; every time below is
    /// from its start).
    pub kill_ms: f64,
    /// From the signal to the process's exit.
    pub exit_ms: f64,
    pub exit_status: String,
    /// Kept-alive connections to it idle in the callers' client at the signal.
    pub idle_connections_at_signal: u64,
    /// Connections opened before the signal that carried a request after it.
    pub connections_opened_before_used_after: u64,
    /// Requests written to it before the signal and answered (or failed) after it.
    pub in_flight_at_signal: u64,
    /// Requests on connections to it opened before the signal that ended after it.
    pub on_connections_opened_before: Carried,
    /// The last request written on a connection opened before the signal: sent at, from the
    /// signal (the gateway closes the connections still idle 1 s after its port closes).
    pub last_sent_on_opened_before_ms: Option<f64>,
    /// Requests on connections to it opened after the signal (the port still accepted).
    pub on_connections_opened_after: Carried,
    /// Idle connections to it found closed before a request was written on them (the request
    /// went on another connection: nothing of it reached the gateway on those).
    pub found_closed_unwritten: u64,
    /// New connections to it refused (each request then went to the next gateway).
    pub refused_connections: u64,
    /// When the first and last were refused, from the signal.
    pub refused_first_ms: Option<f64>,
    pub refused_last_ms: Option<f64>,
    /// Requests meant for it that another gateway carried (it was out of rotation or refused).
    pub carried_elsewhere: Carried,
    /// The last answer it gave, from the signal.
    pub last_answer_ms: Option<f64>,
    /// `202`s it answered from the signal on, and how many of them have their row.
    pub accepted: u64,
    pub accepted_with_row: u64,
    /// Both `/readyz`, as the probe saw them.
    pub readiness: Vec<Readiness>,
    /// Every request that got no answer: when, on what connection, why.
    pub failures: Vec<String>,
    /// Every probe: sent at (ms from the signal), endpoint, status (none: no answer), body.
    pub probes: Vec<ProbeRecord>,
}

/// Requests carried one way, and what became of them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Carried {
    pub requests: u64,
    /// Answered with any HTTP status.
    pub answered: u64,
    pub by_status: BTreeMap<String, u64>,
    /// Written, then no answer: the connection was reset or closed under the request.
    pub transport_failures: u64,
}

impl Carried {
    fn add(&mut self, outcome: &Result<u16, String>) {
        self.requests += 1;
        match outcome {
            Ok(status) => {
                self.answered += 1;
                *self.by_status.entry(status.to_string()).or_default() += 1;
            }
            Err(_) => self.transport_failures += 1,
        }
    }
}

/// One `/readyz` as the probe saw it (times from the signal, by when each probe was sent).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Readiness {
    /// `public` or `admin`.
    pub endpoint: String,
    /// `200`s to probes sent after the signal.
    pub ready_after_signal: u64,
    pub last_ready_ms: Option<f64>,
    /// `503`s whose body says `draining`.
    pub draining: u64,
    pub first_draining_ms: Option<f64>,
    pub last_draining_ms: Option<f64>,
    /// Other answers after the signal, by status.
    pub other: BTreeMap<String, u64>,
    /// Probes after the signal that got no answer, and when the first was sent.
    pub no_answer: u64,
    pub first_no_answer_ms: Option<f64>,
    /// `200` again after the first `draining`.
    pub ready_again: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProbeRecord {
    /// Sent, from the signal.
    pub ms: f64,
    /// Answered (or failed), from the signal.
    pub answered_ms: f64,
    pub endpoint: String,
    pub status: Option<u16>,
    pub body: String,
}

impl Figures {
    /// The summary's rows (times in ms from the signal).
    pub fn rows(&self) -> Vec<(String, String)> {
        let opt = |m: Option<f64>| m.map_or("-".to_string(), |m| format!("{m:.0}"));
        let carried = |c: &Carried| {
            let statuses = c
                .by_status
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "{} ({} answered{}; {} transport failures)",
                c.requests,
                c.answered,
                if statuses.is_empty() {
                    String::new()
                } else {
                    format!(": {statuses}")
                },
                c.transport_failures
            )
        };
        let mut rows = vec![
            ("gateway signalled".into(), self.gateway.clone()),
            (
                "signal (s after the first arrival) / shutdown delay".into(),
                format!(
                    "{:.1} s / {} ms",
                    self.signal_at_seconds, self.shutdown_delay_ms
                ),
            ),
            (
                "`kill` took (ms; the signal went within it)".into(),
                format!("{:.0}", self.kill_ms),
            ),
            (
                "exit (ms after the signal)".into(),
                format!("{:.0} ({})", self.exit_ms, self.exit_status),
            ),
            (
                "idle kept-alive connections to it at the signal".into(),
                self.idle_connections_at_signal.to_string(),
            ),
            (
                "requests in flight at the signal".into(),
                self.in_flight_at_signal.to_string(),
            ),
            (
                format!(
                    "requests on connections opened before the signal ({} connections)",
                    self.connections_opened_before_used_after
                ),
                carried(&self.on_connections_opened_before),
            ),
            (
                "last request written on one of those (ms)".into(),
                opt(self.last_sent_on_opened_before_ms),
            ),
            (
                "requests on connections opened after the signal".into(),
                carried(&self.on_connections_opened_after),
            ),
            ("last answer on it (ms)".into(), opt(self.last_answer_ms)),
            (
                "idle connections found closed before writing (request sent elsewhere)".into(),
                self.found_closed_unwritten.to_string(),
            ),
            (
                "new connections refused (ms, first-last)".into(),
                format!(
                    "{} ({}-{})",
                    self.refused_connections,
                    opt(self.refused_first_ms),
                    opt(self.refused_last_ms)
                ),
            ),
            (
                "requests meant for it carried by another gateway".into(),
                carried(&self.carried_elsewhere),
            ),
            (
                "202s it answered from the signal on / with their row".into(),
                format!("{} / {}", self.accepted, self.accepted_with_row),
            ),
        ];
        for r in &self.readiness {
            rows.push((
                format!("{} /readyz after the signal", r.endpoint),
                format!(
                    "{} × 503 draining ({}-{} ms), {} × 200 (last {} ms), {} other, {} no answer \
                     (from {} ms)",
                    r.draining,
                    opt(r.first_draining_ms),
                    opt(r.last_draining_ms),
                    r.ready_after_signal,
                    opt(r.last_ready_ms),
                    r.other.values().sum::<u64>(),
                    r.no_answer,
                    opt(r.first_no_answer_ms)
                ),
            ));
        }
        rows
    }
}

impl Observed {
    /// The figures, and the checks of the claim: no transport failure on a connection to the
    /// signalled gateway, every `202` it answered has its row, both `/readyz` said `draining`
    /// and never ready again, the process exited 0.
    pub async fn judge(
        &self,
        pg: &PgPool,
        namespace: NamespaceId,
    ) -> Result<(Figures, Vec<Check>), BoxError> {
        let ms = |at: Instant| -> f64 {
            if at >= self.signal {
                (at - self.signal).as_secs_f64() * 1000.0
            } else {
                -((self.signal - at).as_secs_f64() * 1000.0)
            }
        };
        // Judged once: the requests seen are taken out of the witness.
        let seen = std::mem::take(
            &mut *self
                .routing
                .witness
                .seen
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        let mut f = Figures {
            gateway: format!("{} at {}", self.name, self.authority),
            signal: self.sent.name().into(),
            signal_at_seconds: self.signal_at.as_secs_f64(),
            shutdown_delay_ms: self.shutdown_delay_ms,
            kill_ms: ms(self.kill_returned),
            exit_ms: ms(self.exit),
            exit_status: self.status.1.clone(),
            idle_connections_at_signal: self.idle_at_signal as u64,
            ..Figures::default()
        };
        let mut opened_before = HashSet::new();
        let mut accepted = Vec::new();
        for s in &seen {
            f.found_closed_unwritten += u64::from(s.unsent);
            if s.refused {
                f.refused_connections += 1;
                let at = ms(s.sent);
                f.refused_first_ms = Some(f.refused_first_ms.map_or(at, |m: f64| m.min(at)));
                f.refused_last_ms = Some(f.refused_last_ms.map_or(at, |m: f64| m.max(at)));
            }
            match s.on_here {
                Some((opened, reused)) => {
                    if s.sent < self.signal {
                        f.in_flight_at_signal += 1;
                    }
                    if opened < self.signal {
                        opened_before.insert(opened);
                        let at = ms(s.sent);
                        f.last_sent_on_opened_before_ms =
                            Some(f.last_sent_on_opened_before_ms.map_or(at, |m| m.max(at)));
                        f.on_connections_opened_before.add(&s.outcome);
                    } else {
                        f.on_connections_opened_after.add(&s.outcome);
                    }
                    match &s.outcome {
                        Ok(_) => {
                            let at = ms(s.ended);
                            f.last_answer_ms = Some(f.last_answer_ms.map_or(at, |m| m.max(at)));
                        }
                        Err(why) => f.failures.push(format!(
                            "sent {:.1} ms, failed {:.1} ms from the signal, on a {} connection \
                             opened {:.1} ms from it: {why}",
                            ms(s.sent),
                            ms(s.ended),
                            if reused { "kept-alive" } else { "new" },
                            ms(opened)
                        )),
                    }
                    if let Some(id) = s.command {
                        accepted.push(id);
                    }
                }
                None => {
                    if s.rerouted {
                        f.carried_elsewhere.add(&s.outcome);
                    }
                    if let Err(why) = &s.outcome {
                        f.failures.push(format!(
                            "sent {:.1} ms from the signal, {}: {why}",
                            ms(s.sent),
                            if s.rerouted {
                                "on another gateway"
                            } else {
                                "no connection"
                            }
                        ));
                    }
                }
            }
        }
        f.connections_opened_before_used_after = opened_before.len() as u64;
        f.accepted = accepted.len() as u64;
        let rows: HashSet<CommandId> =
            sqlx::query_scalar::<_, CommandId>("SELECT id FROM commands WHERE namespace_id = $1")
                .bind(namespace)
                .fetch_all(pg)
                .await?
                .into_iter()
                .collect();
        f.accepted_with_row = accepted.iter().filter(|id| rows.contains(id)).count() as u64;

        for endpoint in ["public", "admin"] {
            let mut r = Readiness {
                endpoint: endpoint.into(),
                ..Readiness::default()
            };
            for p in self.probes.iter().filter(|p| p.endpoint == endpoint) {
                let at = ms(p.sent);
                let after = p.sent >= self.signal;
                match &p.answer {
                    Ok((200, _)) => {
                        if after {
                            r.ready_after_signal += 1;
                            r.last_ready_ms = Some(at);
                        }
                        if r.first_draining_ms.is_some() {
                            r.ready_again += 1;
                        }
                    }
                    Ok((503, body)) if body.contains("draining") => {
                        r.draining += 1;
                        r.first_draining_ms.get_or_insert(at);
                        r.last_draining_ms = Some(at);
                    }
                    Ok((status, _)) if after => {
                        *r.other.entry(status.to_string()).or_default() += 1;
                    }
                    Err(_) if after => {
                        r.no_answer += 1;
                        r.first_no_answer_ms.get_or_insert(at);
                    }
                    _ => {}
                }
            }
            f.readiness.push(r);
        }
        f.probes = self
            .probes
            .iter()
            .map(|p| {
                let (status, body) = match &p.answer {
                    Ok((status, body)) => (Some(*status), body.clone()),
                    Err(why) => (None, why.clone()),
                };
                ProbeRecord {
                    ms: ms(p.sent),
                    answered_ms: ms(p.ended),
                    endpoint: p.endpoint.into(),
                    status,
                    body,
                }
            })
            .collect();

        let before = &f.on_connections_opened_before;
        let after = &f.on_connections_opened_after;
        let mut checks = vec![
            Check {
                name: "no request on a connection opened to the signalled gateway before its \
                       SIGTERM failed at the transport"
                    .into(),
                holds: before.transport_failures == 0,
                detail: format!(
                    "{} requests ended after the signal ({} in flight at it) on {} such \
                     connections: {} answered, {} failed",
                    before.requests,
                    f.in_flight_at_signal,
                    f.connections_opened_before_used_after,
                    before.answered,
                    before.transport_failures
                ),
            },
            Check {
                name: "no request on a connection opened to it after the signal failed at the \
                       transport"
                    .into(),
                holds: after.transport_failures == 0,
                detail: format!(
                    "{} requests: {} answered, {} failed",
                    after.requests, after.answered, after.transport_failures
                ),
            },
            Check {
                name: "every 202 the signalled gateway answered from the signal on has its row"
                    .into(),
                holds: f.accepted_with_row == f.accepted,
                detail: format!("{} of {} have their row", f.accepted_with_row, f.accepted),
            },
        ];
        let said_draining = f
            .readiness
            .iter()
            .all(|r| r.draining > 0 && r.ready_again == 0);
        checks.push(Check {
            name: "both /readyz said 503 draining from the signal on, never ready again".into(),
            holds: said_draining,
            detail: f
                .readiness
                .iter()
                .map(|r| {
                    format!(
                        "{}: {} draining from {} to {} ms, {} ready after the signal, {} ready \
                         again",
                        r.endpoint,
                        r.draining,
                        r.first_draining_ms
                            .map_or("-".into(), |m| format!("{m:.0}")),
                        r.last_draining_ms.map_or("-".into(), |m| format!("{m:.0}")),
                        r.ready_after_signal,
                        r.ready_again
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        });
        checks.push(Check {
            name: "the signalled gateway exited 0".into(),
            holds: self.killed.is_ok() && self.status.0,
            detail: match &self.killed {
                Ok(()) => format!("{} after {:.0} ms", self.status.1, f.exit_ms),
                Err(why) => why.clone(),
            },
        });
        Ok((f, checks))
    }
}
