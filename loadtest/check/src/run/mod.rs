//! One checked run: start the stack, apply the plan's declaration, carry out its operations on
//! their schedule (with a poller per accepted command and the faults), let everything drain,
//! then hand every record to the checks.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_servers::PgServer;
use tokio::sync::Mutex as AsyncMutex;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

mod faults;
mod intents;
mod rooms;
mod setup;

use faults::fault_op;
use intents::{cancel, enqueue_intent};
use rooms::visit_room;
use setup::{apply, configure_application, sluice_apply};

use crate::backend::{Backend, BackendSpec};
use crate::client::{Http, now_ms};
use crate::journal::{Journal, RaiseRecord};
use crate::judge::{self, Evidence, Violation};
use crate::plan::{Declaration, Handler, Op, OpKind, Plan};
use crate::recorder::Recorder;
use crate::rows;
use crate::stack::Stack;

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
    /// What an apply during the run needs: where to write the declaration, the credentials'
    /// file, the webhook backend's URL.
    reapply: Reapply,
}

struct Reapply {
    file: std::path::PathBuf,
    credentials: String,
    backend_url: String,
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
        reapply: Reapply {
            file: ctx.dir.join("raised.toml"),
            credentials: creds_arg.clone(),
            backend_url: backend.url.clone(),
        },
    });
    // The supervisor: every second, processes that died are reported and started again (those a
    // fault holds excepted), as systemd would.
    let supervisor = {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            while !shared.over.is_cancelled() {
                tokio::select! {
                    _ = shared.over.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                let exits = shared.stack.lock().await.revive().await;
                shared.journal.with(|r| r.exits.extend(exits));
            }
        })
    };
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
        // Commands ended, and every reserved unit confirmed, released or expired.
        if let Ok(open) = rows::open_rows(&pg, &creds.application_id).await
            && open == 0
            && rows::open_reservations(&pg, &creds.namespace_id).await.ok() == Some(0)
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
    let places = rows::places(&pg, &creds.namespace_id)
        .await
        .unwrap_or_default();
    let records = journal.snapshot();
    let _ = supervisor.await;
    let mut exited = stack.lock().await.exited();
    exited.extend(journal.with(|r| r.exits.clone()));
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
        places,
        drained,
        exited,
    };
    // Everything the checks read, to read a failure afterwards or judge it again.
    let saved = judge::Saved::of(&evidence);
    if let Ok(text) = serde_json::to_string(&saved) {
        let _ = std::fs::write(ctx.dir.join("evidence.json"), text);
    }
    Ok(judge::judge(&evidence))
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
        OpKind::RaiseRoom { room, max_active } => raise_room(shared, &room, max_active).await,
        OpKind::Fault(fault) => fault_op(shared, &fault).await,
    }
}

/// Applies the declaration in force again with `room`'s `max_active` raised, recording when
/// the apply started and whether it took (it may not, while a fault holds PostgreSQL).
async fn raise_room(shared: &Shared, room: &str, max_active: u32) {
    let mut decl = shared.decl.clone();
    for declared in decl.rooms.iter_mut().filter(|r| r.code == room) {
        declared.max_active = max_active;
    }
    let started_ms = now_ms();
    let target = &shared.reapply;
    let stack = shared.stack.lock().await;
    let (applied, output) = sluice_apply(
        &stack,
        &target.file,
        &target.credentials,
        &decl,
        &target.backend_url,
    )
    .await
    .unwrap_or_else(|error| (false, error.to_string()));
    drop(stack);
    shared.journal.with(|r| {
        r.raises.push(RaiseRecord {
            room: room.to_string(),
            max_active,
            started_ms,
            applied,
            output,
        })
    });
}

/// Gateway `i` (any index: taken modulo the gateways).
fn gateway(shared: &Shared, i: usize) -> &str {
    &shared.gateways[i % shared.gateways.len().max(1)]
}
