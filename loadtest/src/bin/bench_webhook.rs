//! Webhook commands executed per second through Sluice versus the same backend driven directly,
//! measured in one run on one machine against the same PostgreSQL (fsync on, as it is
//! configured) and Redis.
//!
//! The backend runs in this process (HTTP/1.1 on `127.0.0.1:0`): it verifies every request's
//! `Sluice-Signature` (with the namespace's webhook secret) and `Idempotency-Key`, counts the
//! requests and their body bytes, and answers `200 {"outcome":"succeeded","result":{}}` at
//! once. It costs the same in both modes; what differs is what stands in front of it.
//!
//! - sluice: one round enqueues N webhook commands over HTTP through an in-process gateway,
//!   spread over A accounts of P providers (the account is the resource key), with no executor
//!   running (not timed). Every command declares two limit keys, `provider:{provider}`
//!   (`per_second`) and `account:{provider}:{account}` (`max_in_flight`), both at the largest
//!   value a declaration allows, so `admit.lua` checks and takes them for every command but they
//!   never bind. Then an in-process executor starts and the round is timed until every command of
//!   the round is terminal in PostgreSQL: commands/s = N / elapsed, including the executor's
//!   start (catalog load, first admission). The end is seen by a poll every 20 ms (so up to
//!   20 ms late) that asks PostgreSQL only once the backend has seen N requests (before that,
//!   once a second), so that polling does not compete with the measured work for PostgreSQL.
//!   Each command goes admission (`admit.lua`), claim (one UPDATE per admitted batch), signed
//!   POST, landing (one UPDATE per command), mirror into Redis and permit release. Each round
//!   checks that all N commands `succeeded` and that the backend saw exactly N signed requests.
//! - direct: the same N signed POSTs (the body Sluice sends, with the same fields and value
//!   lengths: the backend's byte count per request is checked equal to the sluice round's;
//!   signed with the same secret and function, with an `Idempotency-Key`) sent straight to the
//!   backend by the closed-loop driver ([`sluice_loadtest::driver`]), timed from the first
//!   request to the last answer; each round checks N `200`s and N requests at the backend. At
//!   the default N a direct round lasts about a tenth of a second, so its rate scatters more
//!   than Sluice's; a larger `--commands` steadies it.
//!
//! Concurrency of the direct mode: the command's `admission.max_in_flight` (`--in-flight`),
//! which is the most webhook requests the executor can have open at once (every command holds a
//! command permit from its admission until it has landed, and nothing else binds: the limit keys
//! are open and no per-resource limit is declared). So the direct mode is never given more
//! parallelism than Sluice may use; the executor reaches fewer in practice, since a permit is
//! also held during the claim and the landing, when no request is open.
//!
//! Rounds alternate between the modes (sluice first) so drift of the shared machine hits both
//! alike; medians are reported, and their ratio sluice / direct. Loopback only; the scratch
//! database and the tenant's Redis keys are removed afterwards.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::json;
use sluice_executor::webhook::sign;
use sluice_gateway::gateway_config::GatewayConfig;
use sluice_loadtest::bench_stack::prelude::*;
use sluice_loadtest::driver::{http_client, run};
use sluice_loadtest::servers::signature_valid;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(about = "Webhook commands executed per second: through Sluice versus direct")]
struct Args {
    #[command(flatten)]
    servers: Servers,
    /// Commands (and direct requests) per round.
    #[arg(long, default_value_t = 3_000)]
    commands: u64,
    /// The command's `admission.max_in_flight`, and the direct mode's concurrency.
    #[arg(long, default_value_t = 64)]
    in_flight: usize,
    /// Providers the commands are spread over (limit key `provider:{provider}`).
    #[arg(long, default_value_t = 4)]
    providers: u64,
    /// Accounts the commands are spread over, each of one provider (the resource key and limit
    /// key `account:{provider}:{account}`).
    #[arg(long, default_value_t = 16)]
    accounts: u64,
    #[command(flatten)]
    run: RoundOptions,
}

/// The largest `per_second` and `max_in_flight` a declaration accepts: limits that never bind.
const OPEN_RATE: u32 = 10_000_000;
const OPEN_IN_FLIGHT: u32 = 1_000_000;
const DEADLINE_SECONDS: u32 = 600;
/// What the backend answers to every POST.
const SUCCEEDED: &[u8] = br#"{"outcome":"succeeded","result":{}}"#;
/// An RFC 3339 time as Sluice writes it (milliseconds, `Z`): the direct bodies' timestamps.
const SOME_TIME: &str = "2030-01-01T00:00:00.000Z";

/// What one round measured.
struct Round {
    pace: Pace,
    body_bytes: f64,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    args.run.check(&args.servers)?;
    if args.commands == 0 || args.in_flight == 0 || args.providers == 0 || args.accounts == 0 {
        return Err(
            "--commands, --in-flight, --providers and --accounts must be at least 1".into(),
        );
    }
    if args.in_flight > OPEN_IN_FLIGHT as usize {
        return Err(format!("--in-flight must be at most {OPEN_IN_FLIGHT}").into());
    }
    let backend = Backend::start().await?;
    with_scratch_tenant(
        &args.servers,
        args.run.connections,
        &declaration(&args, &backend.url),
        async |tenant| rounds(&args, tenant, &backend).await,
    )
    .await
}

/// One webhook command per sluice round (round 0 is the warm-up), identical but for their
/// codes, posting to the backend.
fn declaration(args: &Args, url: &str) -> String {
    let mut toml = String::from("[namespace]\nmax_waiting = 100000000\n");
    for k in 0..=args.run.rounds {
        toml.push_str(&format!(
            r#"
[[command]]
code = "ocr{k}"
parameters = {{ provider = {{ type = "string", max_length = 32 }}, account = {{ type = "string", max_length = 32 }} }}
resource_key = {{ from = "input", field = "account" }}
deadline_seconds = {DEADLINE_SECONDS}
intake = {{ per_second = 10000000, burst = 10000000, max_in_flight = 1000000 }}
admission = {{ max_queue = 100000000, per_second = 10000000, burst = 10000000, max_in_flight = {in_flight} }}
handler = {{ kind = "webhook", url = "{url}", timeout_ms = 10000 }}
limits = [ {{ key = "provider:{{provider}}", per_second = {OPEN_RATE} }}, {{ key = "account:{{provider}}:{{account}}", max_in_flight = {OPEN_IN_FLIGHT} }} ]
"#,
            in_flight = args.in_flight
        ));
    }
    toml
}

async fn rounds(args: &Args, tenant: &Tenant, backend: &Backend) -> Result<(), BoxError> {
    backend
        .state
        .secret
        .set(tenant.creds.webhook_secret.clone())
        .map_err(|_| "the backend's secret was already set")?;
    let postgres = PostgresSettings::read(&tenant.pg).await?;
    let gateway = RunningGateway::start(tenant, GatewayConfig::default()).await?;
    println!(
        "webhook benchmark: {} commands per round over {} accounts of {} providers, \
         admission max_in_flight {} (= direct concurrency), batch size {}, {} parallel batches, \
         {} rounds per mode; {postgres}",
        args.commands,
        args.accounts,
        args.providers,
        args.in_flight,
        args.run.batch_size,
        args.run.parallel_batches,
        args.run.rounds
    );
    // Warm-up: connections, caches, script load, the backend's connection pools.
    let warm_n = (args.commands / 5).max(1);
    let warm = sluice_round(args, tenant, &gateway, backend, 0, warm_n).await?;
    let warm_direct = direct_round(args, tenant, backend, 0, warm_n, warm.body_bytes).await?;
    println!(
        "warm-up ({warm_n} commands): sluice {:.0} commands/s, direct {:.0} commands/s",
        warm.pace.per_second, warm_direct.pace.per_second
    );
    let mut sluice = Vec::new();
    let mut direct = Vec::new();
    for r in 1..=args.run.rounds {
        let s = sluice_round(args, tenant, &gateway, backend, r, args.commands).await?;
        println!(
            "round {r}: sluice {:.0} commands/s ({:.2} s, {:.0} body bytes/request)",
            s.pace.per_second,
            s.pace.elapsed.as_secs_f64(),
            s.body_bytes
        );
        let d = direct_round(args, tenant, backend, r, args.commands, s.body_bytes).await?;
        println!(
            "round {r}: direct {:.0} commands/s ({:.2} s, {:.0} body bytes/request)",
            d.pace.per_second,
            d.pace.elapsed.as_secs_f64(),
            d.body_bytes
        );
        sluice.push(s);
        direct.push(d);
    }
    let s = median(sluice.iter().map(|r| r.pace.per_second).collect());
    let d = median(direct.iter().map(|r| r.pace.per_second).collect());
    println!();
    println!("| mode | commands/s (median) | rounds (commands/s) | body bytes/request |");
    println!("| --- | ---: | --- | ---: |");
    print_row(
        "sluice (enqueued, then executed by one executor)",
        s,
        &sluice,
    );
    print_row(
        &format!("direct ({} concurrent signed POSTs)", args.in_flight),
        d,
        &direct,
    );
    println!();
    println!("ratio sluice / direct: {:.3}x", s / d);
    Ok(())
}

fn print_row(name: &str, median_rate: f64, rounds: &[Round]) {
    let each = rates_cell(rounds.iter().map(|r| r.pace.per_second));
    println!(
        "| {name} | {median_rate:.0} | {} | {:.0} |",
        each, rounds[0].body_bytes
    );
}

/// The provider and account of the `i`-th command: accounts round-robin, each of one provider.
/// Fixed widths, so every body of a round has the same length.
fn provider_account(args: &Args, i: u64) -> (String, String) {
    let account = i % args.accounts;
    (
        format!("p{:03}", account % args.providers),
        format!("a{account:05}"),
    )
}

fn subject(k: usize, i: u64) -> String {
    format!("user-{k}-{i:07}")
}

/// Enqueues `n` commands of `ocr{k}` with no executor running, then times one executor until
/// all of them are terminal.
async fn sluice_round(
    args: &Args,
    tenant: &Tenant,
    gateway: &RunningGateway,
    backend: &Backend,
    k: usize,
    n: u64,
) -> Result<Round, BoxError> {
    let command = format!("ocr{k}");
    let spread: Vec<(String, String)> = (0..args.accounts)
        .map(|a| provider_account(args, a))
        .collect();
    enqueue_waiting(
        tenant,
        gateway,
        &command,
        n,
        args.run.concurrency,
        move |i| {
            let (provider, account) = &spread[(i % spread.len() as u64) as usize];
            json!({
                "request_key": format!("r{i}"),
                "subject": subject(k, i),
                "input": {"provider": provider, "account": account},
            })
            .to_string()
        },
    )
    .await?;
    backend.expect_idle()?;

    let mut asked: Option<Instant> = None;
    // Until the backend has seen N requests, not all N commands can have succeeded: then
    // PostgreSQL is asked only once a second (enough to stop at commands that ended some other
    // way). Counting a round's open commands visits every row of the round (13 ms at 4,000
    // rows, 68 ms at 20,000): asked every 20 ms all round, it kept a PostgreSQL backend busy on
    // the CPUs the executor needs, and cost 10-20% of the measured rate.
    let elapsed = drain(
        tenant,
        args.run.executor_config(),
        &command,
        n,
        Duration::from_secs(args.run.round_timeout_seconds),
        || {
            let due = backend.requests() >= n || asked.is_none_or(|at| at.elapsed().as_secs() >= 1);
            if due {
                asked = Some(Instant::now());
            }
            due
        },
    )
    .await?;

    let (succeeded, other): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                count(*) FILTER (WHERE status <> 'succeeded')
           FROM commands WHERE namespace_id = $1 AND command = $2",
    )
    .bind(tenant.creds.namespace_id)
    .bind(&command)
    .fetch_one(&tenant.pg)
    .await?;
    let seen = backend.take();
    if succeeded != n as i64 || other != 0 {
        return Err(format!(
            "round {command}: {succeeded} of {n} succeeded, {other} in another state"
        )
        .into());
    }
    seen.check(n, &format!("round {command}"))?;
    Ok(Round {
        pace: Pace::of(n, elapsed),
        body_bytes: seen.body_bytes_per_request(),
    })
}

/// Sends the requests the executor would send for `n` commands of `ocr{k}` straight to the
/// backend, `--in-flight` at a time; their bodies must be as long as `expected_bytes` (what the
/// backend saw per request in the sluice round).
async fn direct_round(
    args: &Args,
    tenant: &Tenant,
    backend: &Backend,
    k: usize,
    n: u64,
    expected_bytes: f64,
) -> Result<Round, BoxError> {
    backend.expect_idle()?;
    let client = http_client(args.in_flight);
    let url = backend.url.clone();
    let secret = tenant.creds.webhook_secret.clone();
    let namespace = tenant.creds.namespace.clone();
    let command = format!("ocr{k}");
    let spread: Vec<(String, String)> = (0..args.accounts)
        .map(|a| provider_account(args, a))
        .collect();
    let report = run(&client, n, args.in_flight, move |i| {
        let (provider, account) = &spread[(i % spread.len() as u64) as usize];
        let command_id = uuid::Uuid::now_v7();
        // The fields and value lengths of the executor's `request_body`.
        let body = Bytes::from(
            json!({
                "command_id": command_id,
                "command": command,
                "namespace": namespace,
                "subject": subject(k, i),
                "resource_key": account,
                "input": {"provider": provider, "account": account},
                "attempt": 1,
                "accepted_at": SOME_TIME,
                "deadline_at": SOME_TIME,
            })
            .to_string(),
        );
        let signature = sign(&secret, unix_seconds(), &body);
        Request::post(&url)
            .header("content-type", "application/json")
            .header("Idempotency-Key", command_id.to_string())
            .header("Sluice-Signature", signature)
            .body(Full::new(body))
            .expect("a valid request")
    })
    .await;
    let seen = backend.take();
    if report.count(200) != n {
        return Err(format!(
            "direct round {k}: {} of {n} requests answered 200: {:?}",
            report.count(200),
            report.by_status
        )
        .into());
    }
    seen.check(n, &format!("direct round {k}"))?;
    let body_bytes = seen.body_bytes_per_request();
    if (body_bytes - expected_bytes).abs() >= 0.5 {
        return Err(format!(
            "direct round {k}: {body_bytes:.1} body bytes per request, the sluice round sent \
             {expected_bytes:.1}"
        )
        .into());
    }
    Ok(Round {
        pace: Pace::of(n, report.elapsed),
        body_bytes,
    })
}

fn unix_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The in-process webhook backend: answers every POST with `200` succeeded at once.
struct Backend {
    url: String,
    state: Arc<BackendState>,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct BackendState {
    /// The namespace's webhook secret, known once the tenant exists (after the declaration that
    /// names the backend's URL).
    secret: OnceLock<String>,
    requests: AtomicU64,
    body_bytes: AtomicU64,
    /// Requests without a valid `Sluice-Signature` or without an `Idempotency-Key`.
    unsigned: AtomicU64,
}

/// What the backend saw since the last [`Backend::take`].
struct Seen {
    requests: u64,
    body_bytes: u64,
    unsigned: u64,
}

impl Seen {
    fn check(&self, n: u64, what: &str) -> Result<(), BoxError> {
        if self.requests != n || self.unsigned != 0 {
            return Err(format!(
                "{what}: the backend saw {} requests ({} unsigned), expected {n} signed",
                self.requests, self.unsigned
            )
            .into());
        }
        Ok(())
    }

    fn body_bytes_per_request(&self) -> f64 {
        self.body_bytes as f64 / self.requests.max(1) as f64
    }
}

impl Backend {
    async fn start() -> Result<Self, BoxError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/ocr", listener.local_addr()?);
        let state = Arc::new(BackendState::default());
        let shutdown = CancellationToken::new();
        let (serving, stop) = (state.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    },
                    _ = stop.cancelled() => return,
                };
                let _ = stream.set_nodelay(true);
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| answer(state.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            url,
            state,
            shutdown,
        })
    }

    /// Nothing arrived since the last [`take`](Self::take) (between rounds, nothing may).
    fn expect_idle(&self) -> Result<(), BoxError> {
        match self.take().requests {
            0 => Ok(()),
            n => Err(format!("the backend saw {n} requests between rounds").into()),
        }
    }

    /// Requests seen since the last [`take`](Self::take).
    fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// What the backend saw since the last call, and starts counting from zero.
    fn take(&self) -> Seen {
        Seen {
            requests: self.state.requests.swap(0, Ordering::Relaxed),
            body_bytes: self.state.body_bytes.swap(0, Ordering::Relaxed),
            unsigned: self.state.unsigned.swap(0, Ordering::Relaxed),
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn answer(
    state: Arc<BackendState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != Method::POST {
        return Ok(status_only(StatusCode::METHOD_NOT_ALLOWED));
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Ok(status_only(StatusCode::BAD_REQUEST));
    };
    let signature = parts
        .headers
        .get("sluice-signature")
        .and_then(|v| v.to_str().ok());
    let signed = parts.headers.contains_key("idempotency-key")
        && state
            .secret
            .get()
            .zip(signature)
            .is_some_and(|(secret, signature)| signature_valid(secret, signature, &body));
    if !signed {
        state.unsigned.fetch_add(1, Ordering::Relaxed);
    }
    state.requests.fetch_add(1, Ordering::Relaxed);
    state
        .body_bytes
        .fetch_add(body.len() as u64, Ordering::Relaxed);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(SUCCEEDED)))
        .expect("a valid response"))
}

fn status_only(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}
