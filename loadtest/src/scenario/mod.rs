//! The four scenarios and the run that drives one: set up a namespace of the run's own on the
//! stack, let the callers arrive on schedule, sample the stack while they act, wait for the
//! durable record to drain, check the invariants and write the report.

mod caller;
mod declaration;
mod holder;
mod journey;
mod options;
mod reserved;
mod room;

pub use options::{Interrupted, Mode, Options, Scenario};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::bench_stack::{BoxError, ScratchDatabase, Tenant};
use crate::driver::http_client;
use crate::progress;
use crate::record::Recorder;
use crate::report::{Check, Report, Target};
use crate::servers::{Origin, WebhookBackend};
use crate::stack::{Stack, StackKind, StackSpec};
use crate::{invariants, machine, sampler};
use caller::{Caller, warm_offer};
use journey::Context;

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
    options::check_open_files(arrivals.len() as u64)?;
    let started_at = chrono::Utc::now();
    let dir = options.out.join(format!(
        "{}-{}",
        options.scenario.name(),
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
    /// A room run needs no server beside the stack: its witness runs in the people's tasks.
    Room,
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
        Scenario::Room => (
            Helpers::Room,
            declaration::room(options, room::placeholder_start()),
        ),
    };
    // A cluster stack without a cluster named runs over one the run starts (and stops).
    let own_cluster = match options.stack {
        StackKind::Cluster if !options.servers.redis_url.contains(',') => {
            Some(tokio::task::spawn_blocking(sluice_servers::RedisCluster::start).await?)
        }
        _ => None,
    };
    let redis_url = own_cluster
        .as_ref()
        .map_or(options.servers.redis_url.clone(), |c| c.url());
    let tenant = Tenant::create(database_url, &redis_url, 8, &declaration).await?;
    if let Helpers::Backend { secret, .. } = &helpers {
        let _ = secret.set(tenant.creds.webhook_secret.clone());
    }
    let result = drive(
        options,
        arrivals,
        database_url,
        &redis_url,
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
    redis_url: &str,
    dir: &Path,
    started_at: chrono::DateTime<chrono::Utc>,
    tenant: &Tenant,
    helpers: &Helpers,
) -> Result<Report, BoxError> {
    let client = http_client(
        options
            .max_connections
            .unwrap_or_else(|| arrivals.len().min(20_000)),
    );
    let sluice_bin = options
        .sluice_bin
        .clone()
        .unwrap_or_else(crate::stack::default_sluice_bin);
    let delay = options.shutdown_delay_ms.map(|ms| ms.to_string());
    let gateway_env: Vec<(&str, &str)> = delay
        .iter()
        .map(|ms| ("SLUICE_GATEWAY_SHUTDOWN_DELAY_MS", ms.as_str()))
        .collect();
    let mut stack = Stack::start(
        StackSpec {
            kind: options.stack,
            sluice_bin: &sluice_bin,
            database_url,
            redis_url,
            external_gateway: options.gateway.as_deref(),
            dir,
            gateway_env: &gateway_env,
            gateways: options.gateways,
        },
        &client,
    )
    .await?;
    // The last gateway is the one signalled: the first answers the run's own reads.
    let sigterm = match options.sigterm_gateway_after {
        Some(after) => {
            let last = stack.bases.len() - 1;
            let routing = crate::sigterm::Routing::new(&stack.bases, last)?;
            let taken = stack
                .take_gateway(last)
                .ok_or("this stack has no gateway to signal")?;
            client.route(routing.clone());
            Some(crate::sigterm::Sigterm::new(
                taken,
                routing,
                after,
                options.gateway_signal,
                options.shutdown_delay_ms.unwrap_or(0),
                client.clone(),
            ))
        }
        None => None,
    };
    let result = match helpers {
        Helpers::Room => {
            room::drive_on(options, arrivals, started_at, tenant, &stack, &client).await
        }
        _ => {
            drive_on(
                options, arrivals, started_at, tenant, helpers, &stack, &client, sigterm,
            )
            .await
        }
    };
    let polls = stack.save_metrics(&client, dir).await;
    let stopped = stack.stop().await;
    let mut report = result?;
    if let Some(waiting) = &mut report.waiting {
        waiting.polls_answered = polls;
    }
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
    sigterm: Option<crate::sigterm::Sigterm>,
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
    watched.extend(sigterm.as_ref().and_then(crate::sigterm::Sigterm::watched));
    // Arrivals begin once every caller is spawned and waiting with its token (about 30 µs
    // each on a slow core, plus a margin).
    let origin = Instant::now()
        + Duration::from_millis(300)
        + Duration::from_micros(30) * arrivals.len() as u32;
    let recorder = Arc::new(Recorder::new(origin));
    let sigterm = sigterm.map(|s| s.start(origin));
    let stop = CancellationToken::new();
    let status = sampler::status(
        client.clone(),
        stack.base.clone(),
        creds.credential.clone(),
        origin,
        stop.clone(),
    );
    let usage = sampler::processes(watched, stop.clone());
    let executing = sampler::executing(tenant.pg.clone(), creds.namespace_id, stop.clone());
    let reserved = match helpers {
        Helpers::Sale { .. } => {
            reserved::Reserved::start(options, &tenant.pg, creds.namespace_id, declaration::POOL)
        }
        Helpers::Backend { .. } | Helpers::Room => None,
    };
    let bar = progress::start(recorder.clone(), arrivals.len() as u64, options.quiet);
    // One context per gateway: a caller keeps to the gateway its index picks, as a client behind
    // a load balancer that keeps its connection would.
    let contexts: Vec<Arc<Context>> = stack
        .bases
        .iter()
        .map(|base| {
            Arc::new(Context {
                client: client.clone(),
                base: base.clone(),
                recorder: recorder.clone(),
                retry: !options.no_retry,
                patience: Duration::from_secs(options.patience_seconds),
            })
        })
        .collect();
    let run_id = Uuid::new_v4().simple().to_string();
    let mut callers = tokio::task::JoinSet::new();
    for (i, after) in arrivals.iter().enumerate() {
        let caller = Caller {
            context: contexts[i % contexts.len()].clone(),
            index: i as u64,
            arrive_at: origin + *after,
            run_id: run_id.clone(),
        };
        match helpers {
            Helpers::Sale { offer, .. } => {
                let offer = *offer;
                let key = creds.subject_key.clone();
                let holding = reserved.as_ref().map(|r| r.holding.clone());
                callers.spawn(async move { caller.person(&key, offer, holding).await });
            }
            // A room's people are spawned by its own drive.
            Helpers::Room => {}
            Helpers::Backend { .. } => {
                let credential = creds.credential.clone();
                let (providers, accounts) = (options.providers.max(1), options.accounts.max(1));
                callers
                    .spawn(async move { caller.service(&credential, providers, accounts).await });
            }
        }
    }
    if !joined_all(&mut callers, &options.interrupt).await {
        stop.cancel();
        bar.finish();
        return Err(Interrupted.into());
    }
    let duration = recorder.elapsed();
    // The signalled gateway has exited (or is waited for: a signal after the last caller).
    let sigterm = match sigterm {
        Some(running) => Some(running.observed().await?),
        None => None,
    };
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
    for (command, peak) in executing.await? {
        peaks.executing.insert(
            command,
            crate::report::PeakOf {
                peak,
                limit: Some(i64::from(options.admission_max_in_flight)),
            },
        );
    }
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
    let mut reservations = None;
    if let Some(reserved) = reserved {
        let verdict = reserved
            .finish(
                &tenant.pg,
                creds.namespace_id,
                declaration::POOL,
                &recorded,
                &options.interrupt,
            )
            .await?;
        checks.extend(verdict.checks);
        reservations = Some((verdict.figures, verdict.target));
    }
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
        Helpers::Room => {}
        Helpers::Backend { backend, .. } => {
            let seen = backend.seen();
            sampler::apply_limit_key_limits(&mut peaks, |key| {
                key.starts_with("account:")
                    .then_some(i64::from(options.account_max_in_flight))
            });
            checks.extend(invariants::backend(options, &seen, &recorded.accepted));
        }
    }
    checks.push(invariants::executing_within_limits(&peaks));
    let sigterm = match sigterm {
        Some(observed) => {
            let (figures, judged) = observed.judge(&tenant.pg, creds.namespace_id).await?;
            checks.extend(judged);
            Some(figures)
        }
        None => None,
    };
    let invariants_hold = checks.iter().all(|c| c.holds);
    let waiting = crate::waiting::figures(
        &recorded.waits,
        &crate::waiting::started(&tenant.pg, creds.namespace_id).await?,
    );
    let mut targets = targets(options, &recorded, &waiting);
    let reservations = reservations.map(|(figures, target)| {
        targets.push(target);
        figures
    });
    Ok(Report {
        scenario: options.scenario.name().into(),
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
        waiting: Some(waiting),
        reservations,
        room: None,
        sigterm,
        targets,
        invariants_hold,
    })
}

/// The documented targets for a drop, reported whatever the scenario (the numbers mean the same).
fn targets(
    options: &Options,
    recorded: &crate::record::Recorded,
    waiting: &crate::report::Waiting,
) -> Vec<Target> {
    let enqueue_p99 = recorded
        .endpoints
        .get(journey::ENQUEUE)
        .map_or(0.0, |e| e.latency.p99_ms);
    let deadline_ms = options.deadline_seconds as f64 * 1000.0;
    let mut targets = vec![
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
        Target {
            name: "ETA error p90 (first ETA against the actual start)".into(),
            measured: format!("{:.0} %", waiting.eta_error_p90 * 100.0),
            goal: "< 20 %".into(),
            met: waiting.told > 0 && waiting.eta_error_p90 < 0.2,
        },
        Target {
            name: "order inversions within a resource".into(),
            measured: waiting.inversions.to_string(),
            goal: "0".into(),
            met: waiting.inversions == 0,
        },
        Target {
            name: "polls sooner than advised".into(),
            measured: waiting.polls_sooner_than_advised.to_string(),
            goal: "0".into(),
            met: waiting.polls_sooner_than_advised == 0,
        },
    ];
    // Only runs whose people read the offer have the figure (a backend run reads nothing).
    if let Some(offer) = recorded.endpoints.get(caller::READ_OFFER) {
        let p50 = offer.latency.p50_ms;
        targets.push(Target {
            name: "p50 offer read latency (the cached read every person makes)".into(),
            measured: format!("{p50:.1} ms"),
            goal: "< 20 ms".into(),
            met: p50 < 20.0,
        });
    }
    targets
}

/// Waits for every task of `tasks`; an interrupt aborts the rest and answers false (the caller
/// then stops its watchers and reports the run interrupted).
async fn joined_all<T: 'static>(
    tasks: &mut tokio::task::JoinSet<T>,
    interrupt: &CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            joined = tasks.join_next() => if joined.is_none() { return true },
            () = interrupt.cancelled() => {
                tasks.abort_all();
                return false;
            }
        }
    }
}
