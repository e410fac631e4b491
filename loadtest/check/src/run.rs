//! One checked run: start the stack, apply the plan's declaration, carry out its operations on
//! their schedule (with a poller per accepted command and the faults), let everything drain,
//! then hand every record to the checks.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Method;
use serde_json::json;
use sluice_servers::PgServer;
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backend::{Backend, BackendSpec};
use crate::client::{Http, Reply, millis, now_ms};
use crate::journal::{
    ApplyRecord, CancelRecord, EnqueueRecord, FaultRecord, Journal, PollRecord, ReservationRecord,
    RoomRecord,
};
use crate::judge::{self, Evidence, Violation};
use crate::model;
use crate::plan::{
    Declaration, Enqueue, Fault, FaultKind, Handler, LinkFault, Op, OpKind, Plan, Reservation,
    RoomExit, Visit,
};
use crate::proxy::Mode;
use crate::recorder::Recorder;
use crate::rows;
use crate::stack::Stack;
use crate::token::subject_token;

/// What a run needs besides its plan.
pub struct RunContext {
    pub sluice: PathBuf,
    /// Where the run's files go (declaration, logs, the plan).
    pub dir: PathBuf,
    /// A PostgreSQL server shared by the runs of one invocation (a fresh database each).
    pub pg: Arc<Mutex<Option<PgServer>>>,
}

pub struct Outcome {
    pub violations: Vec<Violation>,
    pub stats: judge::Stats,
    pub logs: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the stack: {0}")]
    Stack(#[from] crate::stack::StackError),
    #[error("{0}")]
    Setup(String),
}

/// The bootstrap file's fields the run uses.
#[derive(Clone, serde::Deserialize)]
pub struct Creds {
    pub application_id: String,
    pub namespace_id: String,
    pub credential: String,
    pub subject_key: SubjectKey,
    pub webhook_secret: String,
}

#[derive(Clone, serde::Deserialize)]
pub struct SubjectKey {
    pub id: String,
    pub secret: String,
}

/// What the operations share while they run.
struct Shared {
    plan: Plan,
    decl: Declaration,
    creds: Creds,
    gateways: Vec<String>,
    http: Http,
    journal: Arc<Journal>,
    intents: Mutex<HashMap<u32, Intent>>,
    /// Cancelled when the run is over: pollers and visitors stop.
    over: CancellationToken,
    stack: Arc<AsyncMutex<Stack>>,
    /// The pass keys, as an origin caches them.
    keys: crate::passes::Keys,
}

#[derive(Default, Clone)]
struct Intent {
    command_id: Option<String>,
    ticket: Option<String>,
    polling: bool,
}

pub async fn run(plan: &Plan, ctx: &RunContext) -> Result<Outcome, RunError> {
    std::fs::create_dir_all(&ctx.dir).map_err(|e| RunError::Setup(e.to_string()))?;
    let stack = Stack::start(
        (ctx.sluice.clone(), ctx.dir.clone()),
        Arc::clone(&ctx.pg),
        plan.timing.clone(),
    )
    .await?;
    let stack = Arc::new(AsyncMutex::new(stack));
    let result = run_on(plan, ctx, &stack).await;
    let mut stack = stack.lock().await;
    let logs = stack.log_tails(12);
    stack.stop().await;
    result.map(|(violations, stats)| Outcome {
        violations,
        stats,
        logs,
    })
}

async fn run_on(
    plan: &Plan,
    ctx: &RunContext,
    stack: &Arc<AsyncMutex<Stack>>,
) -> Result<(Vec<Violation>, judge::Stats), RunError> {
    let creds_path = ctx.dir.join("credentials.json");
    let creds_arg = creds_path.to_string_lossy().into_owned();
    let (gateways, redis_url, database_url) = {
        let stack = stack.lock().await;
        stack.cli(&["migrate"]).await?;
        stack
            .cli(&[
                "bootstrap",
                "--application",
                "check",
                "--namespace",
                "main",
                "--resource-access",
                "--output",
                &creds_arg,
            ])
            .await?;
        (
            stack.gateway_urls(),
            stack.redis_url.clone(),
            stack.database_url(),
        )
    };
    let creds: Creds = serde_json::from_str(
        &std::fs::read_to_string(&creds_path).map_err(|e| RunError::Setup(e.to_string()))?,
    )
    .map_err(|e| RunError::Setup(format!("credentials: {e}")))?;
    let journal = Arc::new(Journal::default());
    let backend = Backend::start(
        BackendSpec {
            answers: plan
                .ops
                .iter()
                .filter_map(|op| match &op.kind {
                    OpKind::Enqueue(e) => Some((e.n, e.answers.clone())),
                    _ => None,
                })
                .collect(),
            timeouts_ms: plan
                .declaration
                .commands
                .iter()
                .filter_map(|c| match c.handler {
                    Handler::Webhook { timeout_ms } => Some((c.code.clone(), timeout_ms)),
                    Handler::Quota { .. } => None,
                })
                .collect(),
            webhook_secret: creds.webhook_secret.clone(),
            gateways: gateways.clone(),
            credential: creds.credential.clone(),
        },
        Arc::clone(&journal),
    )
    .await
    .map_err(|e| RunError::Setup(format!("backend: {e}")))?;

    let decl = {
        let mut stack = stack.lock().await;
        let decl = apply(plan, ctx, &stack, &creds_arg, &backend.url, &journal).await?;
        stack.start_processes().await?;
        decl
    };
    let http = Http::default();
    if let Some(budget) = &plan.declaration.application {
        configure_application(
            &http,
            &gateways[0],
            &creds.credential,
            budget.max_concurrency,
            budget.rate_per_second,
        )
        .await?;
    }

    let prefix = format!("{{a:{}}}", creds.application_id);
    let mut queues = Vec::new();
    let mut queue_index = HashMap::new();
    for command in &decl.commands {
        for resource in &command.resources {
            queue_index.insert((command.code.clone(), resource.clone()), queues.len());
            queues.push(format!(
                "{prefix}:q:{}:{}:{resource}",
                creds.namespace_id, command.code
            ));
        }
    }
    let recorder = Recorder::start(
        &redis_url,
        format!("{prefix}:meta"),
        queues,
        Duration::from_millis(15),
    )
    .await
    .map_err(|e| RunError::Setup(format!("recorder: {e}")))?;

    let shared = Arc::new(Shared {
        plan: plan.clone(),
        decl: decl.clone(),
        creds: creds.clone(),
        gateways,
        http,
        journal: Arc::clone(&journal),
        intents: Mutex::default(),
        over: CancellationToken::new(),
        stack: Arc::clone(stack),
        keys: crate::passes::Keys::default(),
    });
    let started_ms = now_ms();
    let mut tasks = JoinSet::new();
    for op in plan.ops.clone() {
        let shared = Arc::clone(&shared);
        tasks.spawn(async move {
            let due = started_ms + op.at_ms as i64;
            let wait = (due - now_ms()).max(0) as u64;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            perform(&shared, op).await;
        });
    }
    while tasks.join_next().await.is_some() {}

    let pg = rows::connect(&database_url)
        .await
        .map_err(|e| RunError::Setup(format!("PostgreSQL: {e}")))?;
    // Drain: every command ends (the longest deadline bounds it), pollers see the end.
    let longest = decl
        .commands
        .iter()
        .map(|c| u64::from(c.deadline_seconds))
        .max()
        .unwrap_or(10);
    let drain_deadline = tokio::time::Instant::now() + Duration::from_secs(longest + 20);
    let mut drained = false;
    while tokio::time::Instant::now() < drain_deadline {
        if let Ok(open) = rows::open_rows(&pg, &creds.application_id).await
            && open == 0
        {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A last round of polls after the end, then the pollers and visitors stop.
    tokio::time::sleep(Duration::from_millis(800)).await;
    shared.over.cancel();
    recorder.stop();
    backend.stop();

    let rows = rows::commands(&pg, &creds.application_id)
        .await
        .map_err(|e| RunError::Setup(format!("reading commands: {e}")))?;
    let allocations = rows::allocations(&pg, &creds.namespace_id)
        .await
        .unwrap_or_default();
    let records = journal.snapshot();
    let exited = stack.lock().await.exited();
    let evidence = Evidence {
        plan,
        decl: &decl,
        records: &records,
        deliveries: backend.deliveries(),
        decisions: backend.decisions(),
        spans: recorder.spans(),
        queue_index,
        rows,
        allocations,
        drained,
        exited,
    };
    // What the witnesses saw, for reading a failure afterwards.
    let dump = json!({
        "queues": recorder.queues,
        "spans": evidence.spans,
        "rows": evidence.rows,
        "allocations": evidence.allocations,
    });
    let _ = std::fs::write(ctx.dir.join("witnesses.json"), dump.to_string());
    Ok(judge::judge(&evidence))
}

/// Applies the declaration; the model says whether `apply` must refuse it (templates that
/// render one key with other numbers) and how a user would fix it. Returns what is in force.
async fn apply(
    plan: &Plan,
    ctx: &RunContext,
    stack: &Stack,
    creds: &str,
    backend: &str,
    journal: &Journal,
) -> Result<Declaration, RunError> {
    let conflicts = model::conflicts(&plan.declaration);
    let path = ctx.dir.join("declaration.toml");
    std::fs::write(&path, plan.declaration.to_toml(backend))
        .map_err(|e| RunError::Setup(e.to_string()))?;
    let file = path.to_string_lossy().into_owned();
    let (applied, output) = stack
        .cli_verdict(&["apply", "--credentials", creds, "-f", &file])
        .await;
    journal.with(|r| {
        r.applies.push(ApplyRecord {
            refused: !applied,
            output: output.clone(),
            expected_fields: conflicts.iter().map(|c| c.field.clone()).collect(),
        })
    });
    if applied {
        return Ok(plan.declaration.clone());
    }
    if conflicts.is_empty() {
        return Err(RunError::Setup(format!(
            "apply refused a declaration the model accepts:\n{output}\n{}",
            plan.declaration.to_toml(backend)
        )));
    }
    let fixed = model::without_conflicts(&plan.declaration);
    std::fs::write(&path, fixed.to_toml(backend)).map_err(|e| RunError::Setup(e.to_string()))?;
    let (applied, output) = stack
        .cli_verdict(&["apply", "--credentials", creds, "-f", &file])
        .await;
    journal.with(|r| {
        r.applies.push(ApplyRecord {
            refused: !applied,
            output: output.clone(),
            expected_fields: Vec::new(),
        })
    });
    if !applied {
        return Err(RunError::Setup(format!(
            "the fixed declaration was refused too:\n{output}"
        )));
    }
    Ok(fixed)
}

async fn configure_application(
    http: &Http,
    gateway: &str,
    credential: &str,
    max_concurrency: u32,
    rate_per_second: u32,
) -> Result<(), RunError> {
    let url = format!("{gateway}/v1/application/resources");
    let current = http.get(&url, Some(credential)).await;
    let revision = current.data()["revision"]
        .as_str()
        .ok_or_else(|| RunError::Setup(format!("application resources: {:?}", current.body())))?
        .to_string();
    let body = json!({
        "expected_revision": revision,
        "reason": "model checker run",
        "max_unfinished_tasks": 100000,
        "max_concurrency": max_concurrency,
        "rate_per_second": rate_per_second,
    });
    let reply = http
        .send(
            Method::POST,
            &format!("{url}:configure"),
            Some(credential),
            Some(&body),
            &[("idempotency-key", "check-budget")],
        )
        .await;
    match reply.status() {
        Some(200) => Ok(()),
        _ => Err(RunError::Setup(format!("configure: {:?}", reply.body()))),
    }
}

async fn perform(shared: &Arc<Shared>, op: Op) {
    match op.kind {
        OpKind::Enqueue(enqueue) => {
            enqueue_intent(shared, &enqueue, false, false, enqueue.gateway).await
        }
        OpKind::Replay {
            n,
            other_input,
            gateway,
        } => {
            if let Some(original) = shared.plan.ops.iter().find_map(|op| match &op.kind {
                OpKind::Enqueue(e) if e.n == n => Some(e.clone()),
                _ => None,
            }) {
                enqueue_intent(shared, &original, true, other_input, gateway).await;
            }
        }
        OpKind::Cancel { n, gateway } => cancel(shared, n, gateway).await,
        OpKind::Visit(visit) => visit_room(shared, &visit).await,
        OpKind::Fault(fault) => fault_op(shared, &fault).await,
    }
}

fn gateway(shared: &Shared, i: usize) -> &str {
    &shared.gateways[i % shared.gateways.len().max(1)]
}

/// One intent (or its replay): sent again with the same key while the outcome is unknown.
async fn enqueue_intent(
    shared: &Arc<Shared>,
    e: &Enqueue,
    replay: bool,
    other_input: bool,
    first_gateway: usize,
) {
    let Some(decl) = shared.decl.command(&e.command) else {
        return;
    };
    let mut input = e.input(decl);
    if other_input {
        // Other content under the same key, still naming the same intent for the backend.
        input.insert("n".into(), format!("00{}", e.n).into());
    }
    let body = json!({"request_key": e.request_key(), "subject": e.subject, "input": input});
    let mut turn = first_gateway;
    for attempt in 0..30 {
        let url = format!(
            "{}/v1/commands/{}:enqueue",
            gateway(shared, turn),
            e.command
        );
        let sent_ms = now_ms();
        let reply = shared
            .http
            .post(&url, Some(&shared.creds.credential), &body)
            .await;
        let answered_ms = now_ms();
        let data = reply.data();
        let record = EnqueueRecord {
            n: e.n,
            replay,
            other_input,
            sent_ms,
            answered_ms,
            status: reply.status(),
            code: reply.error_code().map(str::to_string),
            retry_after: match &reply {
                Reply::Answered { retry_after, .. } => retry_after.clone(),
                Reply::Unanswered(_) => None,
            },
            command_id: data["command_id"].as_str().map(str::to_string),
            deduplicated: data["deduplicated"].as_bool(),
            position: data["queue"]["position"].as_u64(),
            observed_ms: data["queue"]["observed_at"].as_str().and_then(millis),
            resource_key: data["resource_key"].as_str().map(str::to_string),
            body: reply.body().clone(),
        };
        shared.journal.with(|r| r.enqueues.push(record));
        match reply.status() {
            Some(200 | 202) if !other_input => {
                let command_id = data["command_id"].as_str().map(str::to_string);
                let ticket = data["ticket"].as_str().map(str::to_string);
                let start = {
                    let mut intents = shared.intents.lock().unwrap_or_else(|p| p.into_inner());
                    let intent = intents.entry(e.n).or_default();
                    if intent.command_id.is_none() {
                        intent.command_id = command_id;
                        intent.ticket = ticket;
                    }
                    let start = !intent.polling && intent.ticket.is_some();
                    intent.polling |= start;
                    start
                };
                if start {
                    let shared = Arc::clone(shared);
                    let e = e.clone();
                    tokio::spawn(async move { poll_until_final(&shared, &e).await });
                }
                return;
            }
            // A refusal to retry later (the same key), or an outcome that is not known.
            Some(429) | Some(503) | None if !replay && attempt < 29 => {
                let wait = match &reply {
                    Reply::Answered { retry_after, .. } => retry_after
                        .as_deref()
                        .and_then(|s| s.parse::<u64>().ok())
                        .map_or(300, |s| (s * 1000).min(2000)),
                    Reply::Unanswered(_) => 300,
                };
                if reply.status() == Some(429) && attempt >= 2 {
                    return;
                }
                if reply.status().is_none() {
                    turn += 1;
                }
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            _ => return,
        }
    }
}

/// Polls the command's ticket at the advised pace (held between 40 and 300 ms so positions are
/// sampled densely) over every gateway in turn, until it ends or the run is over.
async fn poll_until_final(shared: &Arc<Shared>, e: &Enqueue) {
    let (command_id, ticket) = {
        let intents = shared.intents.lock().unwrap_or_else(|p| p.into_inner());
        let Some(intent) = intents.get(&e.n) else {
            return;
        };
        match (&intent.command_id, &intent.ticket) {
            (Some(c), Some(t)) => (c.clone(), t.clone()),
            _ => return,
        }
    };
    let mut turn = e.gateway;
    let mut reserved_done = false;
    loop {
        let url = format!("{}/v1/tickets/{ticket}", gateway(shared, turn));
        turn += 1;
        let sent_ms = now_ms();
        let reply = shared.http.get(&url, None).await;
        let data = reply.data();
        let state = data["status"].as_str().map(str::to_string);
        shared.journal.with(|r| {
            r.polls.push(PollRecord {
                n: e.n,
                command_id: command_id.clone(),
                sent_ms,
                answered_ms: now_ms(),
                status: reply.status(),
                state: state.clone(),
                position: data["queue"]["position"].as_u64(),
                observed_ms: data["queue"]["observed_at"].as_str().and_then(millis),
                generation: data["generation"].as_str().map(str::to_string),
                code: reply.error_code().map(str::to_string),
            })
        });
        let final_state = state.as_deref().is_some_and(|s| {
            matches!(
                s,
                "succeeded" | "rejected" | "failed" | "expired" | "cancelled"
            )
        });
        if state.as_deref() == Some("succeeded")
            && !reserved_done
            && let Some(allocation) = data["result"]["allocation_id"].as_str()
            && data["result"]["state"].as_str() == Some("reserved")
        {
            reserved_done = true;
            let shared = Arc::clone(shared);
            let (allocation, e) = (allocation.to_string(), e.clone());
            tokio::spawn(async move { follow_reservation(&shared, &e, &allocation).await });
        }
        if final_state || shared.over.is_cancelled() {
            return;
        }
        let advised = data["poll_after_ms"].as_u64().unwrap_or(200);
        let wait = advised.clamp(40, 300);
        tokio::select! {
            _ = shared.over.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
        }
    }
}

async fn follow_reservation(shared: &Arc<Shared>, e: &Enqueue, allocation: &str) {
    let (action, after_ms) = match e.reservation {
        Reservation::Confirm { after_ms } => ("confirm", after_ms),
        Reservation::Release { after_ms } => ("release", after_ms),
        Reservation::Lapse => return,
    };
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    let token = subject_token(
        &shared.creds.subject_key.id,
        &shared.creds.subject_key.secret,
        &e.subject,
        now_ms() / 1000,
    );
    for attempt in 0..10 {
        let sent_ms = now_ms();
        let url = format!(
            "{}/v1/allocations/{allocation}:{action}",
            gateway(shared, e.gateway + attempt)
        );
        let reply = shared.http.post(&url, Some(&token), &json!({})).await;
        shared.journal.with(|r| {
            r.reservations.push(ReservationRecord {
                n: e.n,
                allocation_id: allocation.to_string(),
                action: action.to_string(),
                sent_ms,
                status: reply.status(),
                state: reply.data()["state"].as_str().map(str::to_string),
                code: reply.error_code().map(str::to_string),
            })
        });
        if !matches!(reply.status(), None | Some(503)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn cancel(shared: &Arc<Shared>, n: u32, first_gateway: usize) {
    let command_id = {
        let intents = shared.intents.lock().unwrap_or_else(|p| p.into_inner());
        intents.get(&n).and_then(|i| i.command_id.clone())
    };
    let Some(command_id) = command_id else { return };
    for attempt in 0..10 {
        let url = format!(
            "{}/v1/commands/{command_id}:cancel",
            gateway(shared, first_gateway + attempt)
        );
        let sent_ms = now_ms();
        let reply = shared
            .http
            .post(&url, Some(&shared.creds.credential), &json!({}))
            .await;
        shared.journal.with(|r| {
            r.cancels.push(CancelRecord {
                n,
                sent_ms,
                answered_ms: now_ms(),
                status: reply.status(),
                state: reply.data()["status"].as_str().map(str::to_string),
                code: reply.error_code().map(str::to_string),
            })
        });
        if !matches!(reply.status(), None | Some(503)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn fault_op(shared: &Arc<Shared>, fault: &Fault) {
    let started_ms = now_ms();
    if let FaultKind::Link(link, LinkFault::Flap { period_ms }) = fault.kind {
        let proxy = shared.stack.lock().await.proxy(link);
        if let Some(proxy) = proxy {
            flap(&proxy, period_ms, fault.hold_ms).await;
        }
        shared.journal.with(|r| {
            r.faults.push(FaultRecord {
                kind: fault.kind,
                started_ms,
                ended_ms: now_ms(),
            })
        });
        return;
    }
    {
        let mut stack = shared.stack.lock().await;
        if let Err(error) = stack.begin_fault(fault.kind).await {
            shared
                .journal
                .stray(format!("fault {:?} could not begin: {error}", fault.kind));
            return;
        }
    }
    tokio::time::sleep(Duration::from_millis(fault.hold_ms)).await;
    {
        let mut stack = shared.stack.lock().await;
        if let Err(error) = stack.end_fault(fault.kind).await {
            shared
                .journal
                .stray(format!("fault {:?} could not end: {error}", fault.kind));
        }
    }
    let ended_ms = now_ms();
    shared.journal.with(|r| {
        r.faults.push(FaultRecord {
            kind: fault.kind,
            started_ms,
            ended_ms,
        })
    });
}

/// Black holes of a tenth of each period, each ended by a reset once the store went quiet.
async fn flap(proxy: &crate::proxy::Proxy, period_ms: u64, hold_ms: u64) {
    let until = tokio::time::Instant::now() + Duration::from_millis(hold_ms);
    while tokio::time::Instant::now() < until {
        // The black hole opens right after an answer goes back (or after a tenth of the period
        // when none comes): the request a caller sends next is the one lost.
        proxy.set(Mode::BlackholeAfterAnswer);
        let armed_until = tokio::time::Instant::now() + Duration::from_millis(period_ms);
        while proxy.mode() == Mode::BlackholeAfterAnswer
            && tokio::time::Instant::now() < armed_until
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        proxy.set(Mode::Blackhole);
        tokio::time::sleep(Duration::from_millis((period_ms / 10).max(1))).await;
        proxy
            .reset_when_quiet(Duration::from_millis(100), Duration::from_secs(3))
            .await;
        proxy.set(Mode::Pass);
        tokio::time::sleep(Duration::from_millis(period_ms)).await;
    }
}

/// A person's visit: join, wait for the pass, verify it as an origin would, then heartbeat and
/// leave, or walk away.
async fn visit_room(shared: &Arc<Shared>, visit: &Visit) {
    let subject = format!("person-{}", visit.person);
    let token = || {
        subject_token(
            &shared.creds.subject_key.id,
            &shared.creds.subject_key.secret,
            &subject,
            now_ms() / 1000,
        )
    };
    let base = gateway(shared, visit.gateway).to_string();
    let mut joined = None;
    for _ in 0..20 {
        let reply = shared
            .http
            .post(
                &format!("{base}/v1/rooms/{}:join", visit.room),
                Some(&token()),
                &json!({}),
            )
            .await;
        match reply.status() {
            Some(200 | 202) => {
                joined = reply.data()["ticket"].as_str().map(str::to_string);
                break;
            }
            Some(503) | None => tokio::time::sleep(Duration::from_millis(300)).await,
            _ => {
                shared.journal.stray(format!(
                    "room join answered {:?}: {}",
                    reply.status(),
                    reply.body()
                ));
                return;
            }
        }
    }
    let Some(ticket) = joined else { return };
    let mut place = String::new();
    let mut pass = None;
    while !shared.over.is_cancelled() {
        let reply = shared
            .http
            .get(&format!("{base}/v1/tickets/{ticket}"), None)
            .await;
        let data = reply.data();
        place = data["join_id"].as_str().unwrap_or_default().to_string();
        if let Some(p) = data["pass"].as_str() {
            pass = Some(p.to_string());
            break;
        }
        if matches!(
            data["status"].as_str(),
            Some("left" | "abandoned" | "expired")
        ) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let Some(mut pass) = pass else { return };
    record_pass(shared, visit, &base, &place, &pass).await;
    match visit.after {
        RoomExit::Abandon => {}
        RoomExit::Leave { stay_ms, beats } => {
            let every = stay_ms / u64::from(beats + 1);
            for _ in 0..beats {
                tokio::time::sleep(Duration::from_millis(every)).await;
                let reply = shared
                    .http
                    .post(
                        &format!("{base}/v1/passes:heartbeat"),
                        Some(&token()),
                        &json!({"pass": pass}),
                    )
                    .await;
                if let Some(next) = reply.data()["pass"].as_str() {
                    pass = next.to_string();
                    record_pass(shared, visit, &base, &place, &pass).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(every)).await;
            let reply = shared
                .http
                .post(
                    &format!("{base}/v1/passes:leave"),
                    Some(&token()),
                    &json!({"pass": pass}),
                )
                .await;
            if reply.status() == Some(200) {
                let left = now_ms();
                shared.journal.with(|r| {
                    for room in r
                        .rooms
                        .iter_mut()
                        .filter(|x| x.person == visit.person && x.room == visit.room)
                    {
                        room.left_ms = Some(left);
                    }
                });
            }
        }
    }
}

/// Verifies a pass as an origin does (EdDSA against the published keys) and records it.
async fn record_pass(shared: &Shared, visit: &Visit, base: &str, place: &str, pass: &str) {
    let claims = shared.keys.verify(&shared.http, base, pass).await;
    let record = RoomRecord {
        person: visit.person,
        room: visit.room.clone(),
        place: place.to_string(),
        iat: claims.as_ref().map_or(0, |c| c.iat),
        exp: claims.as_ref().map_or(0, |c| c.exp),
        verified: claims.is_some(),
        received_ms: now_ms(),
        left_ms: None,
    };
    shared.journal.with(|r| r.rooms.push(record));
}
