//! The three scenarios and the run that drives one: set up a namespace of the run's own on the
//! stack, let the callers arrive on schedule, sample the stack while they act, wait for the
//! durable record to drain, check the invariants and write the report.

mod declaration;
mod journey;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use sluice_durable::tenancy::BootstrapOutput;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::api::{Outcome, exchange};
use crate::bench_stack::{BoxError, ScratchDatabase, Servers, Tenant};
use crate::driver::http_client;
use crate::progress;
use crate::record::Recorder;
use crate::report::{Check, Report, Target};
use crate::servers::{Origin, WebhookBackend};
use crate::stack::{Stack, StackKind, StackSpec};
use crate::{invariants, machine, sampler};
use journey::{Context, Intent};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// N distinct subjects arrive within one window (default one second): each reads the offer,
    /// enqueues a claim, polls its ticket and reads its result.
    Drop,
    /// The same journey at a fixed arrival rate.
    Steady,
    /// Backend services enqueueing webhook commands with limit keys at a fixed rate.
    Backend,
}

/// Every knob of a run; defaults reproduce the README's figures.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct Options {
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// `drop`: distinct subjects arriving within `--window-ms`.
    #[arg(long, default_value_t = 10_000)]
    pub subjects: u64,
    /// `drop`: the window the arrivals are spread over, evenly.
    #[arg(long, default_value_t = 1_000)]
    pub window_ms: u64,
    /// `steady` and `backend`: arrivals per second.
    #[arg(long, default_value_t = 500.0)]
    pub rate: f64,
    /// `steady` and `backend`: seconds of arrivals.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Units in the quota pool of the sale.
    #[arg(long, default_value_t = 1_000)]
    pub capacity: i64,
    /// The command's intake budget (the drop's protection: the rest is refused at once).
    #[arg(long, default_value_t = 2_000)]
    pub intake_per_second: u32,
    #[arg(long, default_value_t = 2_000)]
    pub intake_burst: u32,
    #[arg(long, default_value_t = 500)]
    pub intake_max_in_flight: u32,
    /// The command's admission budget (executions started per second, permits at once).
    #[arg(long, default_value_t = 2_000)]
    pub admission_per_second: u32,
    #[arg(long, default_value_t = 64)]
    pub admission_max_in_flight: u32,
    /// The command's deadline, also its `max_wait`.
    #[arg(long, default_value_t = 600)]
    pub deadline_seconds: u64,
    /// How long a caller keeps trying from its arrival before giving up (its outcome is then
    /// unknown unless it was refused).
    #[arg(long, default_value_t = 120)]
    pub patience_seconds: u64,
    /// Do not retry explicit retryable refusals: each caller takes the first answer.
    #[arg(long)]
    pub no_retry: bool,
    /// `backend`: providers and accounts the calls are spread over.
    #[arg(long, default_value_t = 4)]
    pub providers: u32,
    #[arg(long, default_value_t = 16)]
    pub accounts: u32,
    /// `backend`: the limit keys: starts per second per provider, requests at once per account.
    #[arg(long, default_value_t = 100)]
    pub provider_per_second: u32,
    #[arg(long, default_value_t = 2)]
    pub account_max_in_flight: u32,
    /// `backend`: how long the backend takes per call.
    #[arg(long, default_value_t = 20)]
    pub backend_delay_ms: u64,
    /// How long to wait after the last caller for every row to be terminal.
    #[arg(long, default_value_t = 120)]
    pub drain_seconds: u64,
    /// Refuse runs larger than this many callers (the generator is bounded in count).
    #[arg(long, default_value_t = 200_000)]
    pub max_callers: u64,
    #[command(flatten)]
    #[serde(skip)]
    pub servers: Servers,
    #[arg(long, value_enum, default_value = "dev")]
    #[serde(skip)]
    pub stack: StackKind,
    /// The gateway of `--stack external` (its executor must be running too).
    #[arg(long)]
    pub gateway: Option<String>,
    /// The `sluice` binary for `dev` and `split` (default: next to this one).
    #[arg(long)]
    #[serde(skip)]
    pub sluice_bin: Option<PathBuf>,
    /// Where the reports (and the stack's logs) are written.
    #[arg(long, default_value = "target/loadtest")]
    #[serde(skip)]
    pub out: PathBuf,
    /// No progress bar (also off when stderr is not a terminal).
    #[arg(long)]
    #[serde(skip)]
    pub quiet: bool,
    /// Cancelled to stop a run early (Ctrl-C): the callers stop, the stack is stopped and the
    /// scratch database dropped, and the run ends with [`Interrupted`].
    #[arg(skip)]
    #[serde(skip)]
    pub interrupt: CancellationToken,
}

/// A run stopped by [`Options::interrupt`] before its report.
#[derive(Debug, thiserror::Error)]
#[error("interrupted: the stack was stopped and the scratch database dropped; no report")]
pub struct Interrupted;

impl Options {
    /// The callers of this run and when each arrives, relative to the first.
    fn arrivals(&self) -> Result<Vec<Duration>, BoxError> {
        let (count, spacing) = match self.scenario {
            Scenario::Drop => (
                self.subjects,
                Duration::from_millis(self.window_ms).as_secs_f64() / self.subjects.max(1) as f64,
            ),
            Scenario::Steady | Scenario::Backend => {
                if !(self.rate > 0.0 && self.rate.is_finite() && self.seconds > 0.0) {
                    return Err("--rate and --seconds must be positive".into());
                }
                ((self.rate * self.seconds).round() as u64, 1.0 / self.rate)
            }
        };
        if count == 0 {
            return Err("a run needs at least one caller".into());
        }
        if count > self.max_callers {
            return Err(format!(
                "{count} callers is more than --max-callers {}",
                self.max_callers
            )
            .into());
        }
        Ok((0..count)
            .map(|i| Duration::from_secs_f64(spacing * i as f64))
            .collect())
    }
}

/// The files a run wrote.
pub struct Written {
    pub report: Report,
    pub json: PathBuf,
    pub html: PathBuf,
}

/// Runs one scenario end to end; the report says whether the invariants held.
pub async fn run(options: Options) -> Result<Written, BoxError> {
    options.servers.check()?;
    let arrivals = options.arrivals()?;
    check_open_files(arrivals.len() as u64)?;
    let started_at = chrono::Utc::now();
    let dir = options.out.join(format!(
        "{}-{}",
        scenario_name(options.scenario),
        started_at.format("%Y%m%dT%H%M%SZ")
    ));
    std::fs::create_dir_all(&dir)?;
    let scratch = match options.stack {
        StackKind::External => None,
        _ => Some(ScratchDatabase::create(&options.servers.database_url).await?),
    };
    let database_url = scratch
        .as_ref()
        .map_or(options.servers.database_url.clone(), |s| s.url.clone());
    let result = run_on(&options, &arrivals, &database_url, &dir, started_at).await;
    if let Some(scratch) = scratch {
        scratch.drop_now().await?;
    }
    let report = result?;
    let json = dir.join("report.json");
    std::fs::write(&json, serde_json::to_vec_pretty(&report)?)?;
    let html = dir.join("report.html");
    std::fs::write(&html, crate::report::html::render(&report))?;
    Ok(Written { report, json, html })
}

/// Every caller may hold a connection, and so may the gateway for each of them (a started stack
/// inherits this process's limit): a run that would hit the limit mid-drop is refused up front,
/// naming the fix, instead of reporting the refused connections as unknown outcomes.
fn check_open_files(callers: u64) -> Result<(), BoxError> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft: Option<u64> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok());
    let needed = callers.min(20_000) + 1_024;
    match soft {
        Some(soft) if soft < needed => Err(format!(
            "{callers} callers need about {needed} open files, the limit is {soft}: raise it \
             first (`ulimit -n {needed}`, up to `ulimit -Hn`)"
        )
        .into()),
        _ => Ok(()),
    }
}

fn scenario_name(scenario: Scenario) -> &'static str {
    match scenario {
        Scenario::Drop => "drop",
        Scenario::Steady => "steady",
        Scenario::Backend => "backend",
    }
}

/// The beside-the-stack servers of a scenario.
enum Helpers {
    Sale {
        origin: Origin,
        offer: Uuid,
    },
    Backend {
        backend: WebhookBackend,
        secret: Arc<std::sync::OnceLock<String>>,
    },
}

async fn run_on(
    options: &Options,
    arrivals: &[Duration],
    database_url: &str,
    dir: &Path,
    started_at: chrono::DateTime<chrono::Utc>,
) -> Result<Report, BoxError> {
    let servers_stop = CancellationToken::new();
    let _stop_servers = servers_stop.clone().drop_guard();
    let (helpers, declaration) = match options.scenario {
        Scenario::Drop | Scenario::Steady => {
            let origin = Origin::start(servers_stop.clone()).await?;
            let declaration = declaration::sale(options, &origin.base);
            (
                Helpers::Sale {
                    origin,
                    offer: Uuid::new_v4(),
                },
                declaration,
            )
        }
        Scenario::Backend => {
            let secret = Arc::new(std::sync::OnceLock::new());
            let backend = WebhookBackend::start(
                servers_stop.clone(),
                secret.clone(),
                Duration::from_millis(options.backend_delay_ms),
            )
            .await?;
            let declaration = declaration::backend(options, &backend.url);
            (Helpers::Backend { backend, secret }, declaration)
        }
    };
    let tenant = Tenant::create(database_url, &options.servers.redis_url, 8, &declaration).await?;
    if let Helpers::Backend { secret, .. } = &helpers {
        let _ = secret.set(tenant.creds.webhook_secret.clone());
    }
    let result = drive(
        options,
        arrivals,
        database_url,
        dir,
        started_at,
        &tenant,
        &helpers,
    )
    .await;
    let forgotten = tenant.close().await;
    let report = result?;
    forgotten?;
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    options: &Options,
    arrivals: &[Duration],
    database_url: &str,
    dir: &Path,
    started_at: chrono::DateTime<chrono::Utc>,
    tenant: &Tenant,
    helpers: &Helpers,
) -> Result<Report, BoxError> {
    let client = http_client(arrivals.len().min(20_000));
    let sluice_bin = options
        .sluice_bin
        .clone()
        .unwrap_or_else(crate::stack::default_sluice_bin);
    let stack = Stack::start(
        StackSpec {
            kind: options.stack,
            sluice_bin: &sluice_bin,
            database_url,
            redis_url: &options.servers.redis_url,
            external_gateway: options.gateway.as_deref(),
            dir,
        },
        &client,
    )
    .await?;
    let result = drive_on(
        options, arrivals, started_at, tenant, helpers, &stack, &client,
    )
    .await;
    let stopped = stack.stop().await;
    let mut report = result?;
    if let Err(e) = stopped {
        report.invariants.push(Check {
            name: "the stack stopped cleanly".into(),
            holds: false,
            detail: e.to_string(),
        });
        report.invariants_hold = false;
    }
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
async fn drive_on(
    options: &Options,
    arrivals: &[Duration],
    started_at: chrono::DateTime<chrono::Utc>,
    tenant: &Tenant,
    helpers: &Helpers,
    stack: &Stack,
    client: &crate::driver::HttpClient,
) -> Result<Report, BoxError> {
    let creds = &tenant.creds;
    if let Helpers::Sale { offer, .. } = helpers {
        warm_offer(client, &stack.base, creds, *offer).await?;
    }
    let machine = machine::describe();
    let mut watched = stack.watched();
    if let Some(pid) = sampler::redis_pid(&tenant.redis).await {
        watched.push(crate::stack::Watched {
            name: "redis-server".into(),
            pid,
        });
    }
    watched.push(crate::stack::Watched {
        name: "load generator".into(),
        pid: std::process::id(),
    });
    // Arrivals begin once every caller is spawned and waiting with its token (about 30 µs
    // each on a slow core, plus a margin).
    let origin = Instant::now()
        + Duration::from_millis(300)
        + Duration::from_micros(30) * arrivals.len() as u32;
    let recorder = Arc::new(Recorder::new(origin));
    let stop = CancellationToken::new();
    let status = sampler::status(
        client.clone(),
        stack.base.clone(),
        creds.credential.clone(),
        origin,
        stop.clone(),
    );
    let usage = sampler::processes(watched, stop.clone());
    let bar = progress::start(recorder.clone(), arrivals.len() as u64, options.quiet);
    let context = Arc::new(Context {
        client: client.clone(),
        base: stack.base.clone(),
        recorder: recorder.clone(),
        retry: !options.no_retry,
        patience: Duration::from_secs(options.patience_seconds),
    });
    let run_id = Uuid::new_v4().simple().to_string();
    let mut callers = tokio::task::JoinSet::new();
    for (i, after) in arrivals.iter().enumerate() {
        let caller = Caller {
            context: context.clone(),
            index: i as u64,
            arrive_at: origin + *after,
            run_id: run_id.clone(),
        };
        match helpers {
            Helpers::Sale { offer, .. } => {
                let offer = *offer;
                let key = creds.subject_key.clone();
                callers.spawn(async move { caller.person(&key, offer).await });
            }
            Helpers::Backend { .. } => {
                let credential = creds.credential.clone();
                let (providers, accounts) = (options.providers.max(1), options.accounts.max(1));
                callers
                    .spawn(async move { caller.service(&credential, providers, accounts).await });
            }
        }
    }
    loop {
        tokio::select! {
            joined = callers.join_next() => if joined.is_none() { break },
            () = options.interrupt.cancelled() => {
                callers.abort_all();
                stop.cancel();
                bar.finish();
                return Err(Interrupted.into());
            }
        }
    }
    let duration = recorder.elapsed();
    let still_open = tokio::select! {
        open = invariants::await_drained(
            &tenant.pg,
            creds.namespace_id,
            Duration::from_secs(options.drain_seconds),
        ) => open?,
        () = options.interrupt.cancelled() => {
            stop.cancel();
            bar.finish();
            return Err(Interrupted.into());
        }
    };
    stop.cancel();
    bar.finish();
    let mut peaks = status.await?;
    let processes = usage.await?;
    let recorded = recorder.finish();

    let mut checks =
        invariants::commands(&tenant.pg, creds.namespace_id, &recorded.accepted).await?;
    if still_open > 0 {
        checks.push(Check {
            name: "drained within --drain-seconds".into(),
            holds: false,
            detail: format!("{still_open} commands still unfinished"),
        });
    }
    let people = &recorded.people;
    let outcomes = people.succeeded
        + people.rejected.values().sum::<u64>()
        + people.refused.values().sum::<u64>()
        + people.unknown;
    checks.push(Check {
        name: "every caller ended exactly once".into(),
        holds: outcomes == people.arrived && people.arrived == arrivals.len() as u64,
        detail: format!(
            "{} scheduled, {} arrived, {outcomes} endings",
            arrivals.len(),
            people.arrived
        ),
    });
    let mut settings: BTreeMap<String, Value> = match serde_json::to_value(options)? {
        Value::Object(map) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    match helpers {
        Helpers::Sale { origin, .. } => {
            checks.extend(
                invariants::quota(&tenant.pg, creds.namespace_id, declaration::POOL).await?,
            );
            settings.insert(
                "origin_calls".into(),
                json!(origin.calls.load(std::sync::atomic::Ordering::Relaxed)),
            );
        }
        Helpers::Backend { backend, .. } => {
            let seen = backend.seen();
            sampler::apply_limit_key_limits(&mut peaks, |key| {
                key.starts_with("account:")
                    .then_some(i64::from(options.account_max_in_flight))
            });
            checks.extend(invariants::backend(options, &seen, &recorded.accepted));
        }
    }
    checks.push(invariants::sampled_limits(&peaks));
    let invariants_hold = checks.iter().all(|c| c.holds);
    let targets = targets(options, &recorded);
    Ok(Report {
        scenario: scenario_name(options.scenario).into(),
        started_at: started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        duration_seconds: duration.as_secs_f64(),
        machine,
        stack: stack.description.clone(),
        settings,
        people: recorded.people,
        requests: recorded.endpoints,
        final_latency: recorded.final_latency,
        timeline: recorded.timeline,
        peaks,
        processes,
        invariants: checks,
        targets,
        invariants_hold,
    })
}

/// The issue's targets for a drop, reported whatever the scenario (the numbers mean the same).
fn targets(options: &Options, recorded: &crate::record::Recorded) -> Vec<Target> {
    let enqueue_p99 = recorded
        .endpoints
        .get(journey::ENQUEUE)
        .map_or(0.0, |e| e.latency.p99_ms);
    let deadline_ms = options.deadline_seconds as f64 * 1000.0;
    vec![
        Target {
            name: "unknown outcomes".into(),
            measured: recorded.people.unknown.to_string(),
            goal: "0".into(),
            met: recorded.people.unknown == 0,
        },
        Target {
            name: "p99 enqueue latency".into(),
            measured: format!("{enqueue_p99:.1} ms"),
            goal: "< 250 ms".into(),
            met: enqueue_p99 < 250.0,
        },
        Target {
            name: "slowest final result".into(),
            measured: format!("{:.1} s", recorded.final_latency.max_ms / 1000.0),
            goal: format!("within the {} s deadline", options.deadline_seconds),
            met: recorded.final_latency.max_ms <= deadline_ms,
        },
    ]
}

/// Reads the offer once before the arrivals, as a sale's page would be warmed, so the drop
/// measures a hot cache (a cold one is the read cache's own test).
async fn warm_offer(
    client: &crate::driver::HttpClient,
    base: &str,
    creds: &BootstrapOutput,
    offer: Uuid,
) -> Result<(), BoxError> {
    let uri = format!("{base}/v1/reads/offer?offer={offer}");
    let answer = exchange(client, Method::GET, &uri, Some(&creds.credential), None).await;
    match answer.outcome {
        Outcome::Success { .. } => Ok(()),
        other => Err(format!("warming the offer read failed: {other:?}").into()),
    }
}

/// One caller of the run.
struct Caller {
    context: Arc<Context>,
    index: u64,
    arrive_at: Instant,
    run_id: String,
}

/// Endpoint name of the offer read in the report.
const READ_OFFER: &str = "read offer";

impl Caller {
    /// A person in a sale: reads the offer (retrying a `filling` answer within its patience),
    /// then claims, polls and reads the result.
    async fn person(self, key: &sluice_durable::tenancy::SubjectKeyOutput, offer: Uuid) {
        // A person holds their token before the sale opens (issued at sign-in), so minting it
        // is not part of the arrival.
        let subject = format!("person-{}-{}", self.run_id, self.index);
        let token = subject_token(key, &subject);
        let uri = format!("{}/v1/reads/offer?offer={offer}", self.context.base);
        tokio::time::sleep_until(self.arrive_at.into()).await;
        let arrived = Instant::now();
        let recorder = &self.context.recorder;
        recorder.arrival(arrived);
        for _ in 0..5 {
            let answer =
                exchange(&self.context.client, Method::GET, &uri, Some(&token), None).await;
            recorder.exchange(READ_OFFER, &answer);
            match answer.outcome {
                Outcome::Success { .. } => {
                    recorder.entered();
                    break;
                }
                Outcome::Refused {
                    retryable: true,
                    retry_after,
                    ..
                } => {
                    tokio::time::sleep(retry_after.unwrap_or(Duration::from_secs(1))).await;
                }
                _ => break,
            }
        }
        let body = json!({
            "request_key": format!("claim-{}", self.index),
            "input": {"offer": offer},
        });
        self.context
            .act(Intent {
                command: "claim",
                bearer: &token,
                body: body.to_string(),
                arrived,
            })
            .await;
    }

    /// A backend service's call: enqueued with the credential for a subject of its own.
    async fn service(self, credential: &str, providers: u32, accounts: u32) {
        tokio::time::sleep_until(self.arrive_at.into()).await;
        let arrived = Instant::now();
        self.context.recorder.arrival(arrived);
        self.context.recorder.entered();
        let account = (self.index % u64::from(accounts)) as u32;
        let provider = account % providers;
        let body = json!({
            "request_key": format!("call-{}-{}", self.run_id, self.index),
            "subject": format!("service-{}", self.index),
            "input": {"provider": format!("p{provider}"), "account": format!("a{account}")},
        });
        self.context
            .act(Intent {
                command: "call",
                bearer: credential,
                body: body.to_string(),
                arrived,
            })
            .await;
    }
}

/// An HS256 subject token for `subject`, valid for an hour, signed with the namespace's key.
fn subject_token(key: &sluice_durable::tenancy::SubjectKeyOutput, subject: &str) -> String {
    use base64::Engine;
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&key.secret)
        .unwrap_or_default();
    let now = sluice_gateway::auth::now_unix();
    sluice_gateway::subject_token::issue(&key.id, &secret, subject, now, now + 3600)
}
