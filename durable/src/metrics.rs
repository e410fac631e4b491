//! Prometheus metrics of the gateway and the executor (`GET /metrics`, text format 0.0.4).
//!
//! The counters and histograms are process-global: one process is one gateway or one executor,
//! and the code that counts (the enqueue handler, the group committer, the handlers, the
//! sweepers) should not need a handle threaded through to it. Each process renders only its
//! own families ([`gateway_text`], [`executor_text`]), so a gateway never exports an executor's
//! always-zero counters and the other way round.
//!
//! The projection figures (generation, readiness, queue depths, permits in flight) are not
//! counted but read from Redis when scraped, for every application (at most
//! [`MAX_APPLICATIONS`], the list cached for [`APPLICATION_LIST_TTL`]), one `metrics.lua` call
//! per application. A read that fails never fails the scrape: that application is exported with
//! `sluice_projection_up 0` and the scrape goes on.

use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::{Pool, Value};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sqlx::PgPool;
use uuid::Uuid;

use crate::DurableError;
use crate::projection::{AppKeys, Scripts};

/// The `Content-Type` of [`gateway_text`] and [`executor_text`].
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Applications whose projection figures one scrape reads at most: a scrape must stay cheap
/// and its answer bounded however many applications there are.
pub const MAX_APPLICATIONS: i64 = 1_000;

/// How long the list of applications is reused between scrapes.
pub const APPLICATION_LIST_TTL: Duration = Duration::from_secs(5);

/// The time one scrape may spend on projection reads; applications not read by then are
/// exported as down rather than making the scraper time out.
const PROJECTION_BUDGET: Duration = Duration::from_secs(5);

/// One label, e.g. `("outcome", "accepted")`.
type Label = [(&'static str, String); 1];

fn label(name: &'static str, value: impl Into<String>) -> Label {
    [(name, value.into())]
}

/// Latency buckets in seconds: half a millisecond to a minute.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Every counted family, created on first use.
struct Families {
    intake_decisions: Family<Label, Counter>,
    acceptance_seconds: Histogram,
    group_commit_batch_size: Histogram,
    group_commit_failed_batches: Counter,
    postgres_fallbacks: Counter,
    fallbacks_refused: Counter,
    executions: Family<Label, Counter>,
    handler_seconds: Family<Label, Histogram>,
    lease_rescues: Family<Label, Counter>,
    storage_errors: Family<Label, Counter>,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let families = Families {
        intake_decisions: Family::default(),
        acceptance_seconds: latency_histogram(),
        // 1, 2, 4, … 1024 commands per transaction (the default `max_batch` is 256).
        group_commit_batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
        group_commit_failed_batches: Counter::default(),
        postgres_fallbacks: Counter::default(),
        fallbacks_refused: Counter::default(),
        executions: Family::default(),
        handler_seconds: Family::new_with_constructor(latency_histogram),
        lease_rescues: Family::default(),
        storage_errors: Family::default(),
    };
    // The label values known in advance are exported from the start, at zero: a series that
    // appears only with its first event hides that first event from `rate()` and `increase()`.
    for outcome in ["accepted", "replayed"] {
        let _ = families
            .intake_decisions
            .get_or_create_owned(&label("outcome", outcome));
    }
    for status in STATUSES {
        let _ = families
            .executions
            .get_or_create_owned(&label("status", status));
    }
    for kind in [HandlerKind::Quota, HandlerKind::Webhook] {
        let _ = families
            .handler_seconds
            .get_or_create_owned(&label("handler", kind.as_str()));
    }
    for outcome in RESCUES {
        let _ = families
            .lease_rescues
            .get_or_create_owned(&label("outcome", outcome));
    }
    for store in ["redis", "postgres"] {
        let _ = families
            .storage_errors
            .get_or_create_owned(&label("store", store));
    }
    families
});

/// The states an executor's handler lands a command in.
const STATUSES: [&str; 6] = [
    "succeeded",
    "rejected",
    "failed",
    "expired",
    "cancelled",
    "needs_review",
];

/// The states the lease sweeper gives a rescued row.
const RESCUES: [&str; 3] = ["retry_wait", "expired", "needs_review"];

/// The final answer to one enqueue request: `accepted` (202), `replayed` (200, the same key
/// answered again) or the refusal's error code, lowercased (`queue_full`, `rate_limited`, …).
pub fn intake_decision(outcome: &str) {
    FAMILIES
        .intake_decisions
        .get_or_create(&label("outcome", outcome.to_ascii_lowercase()))
        .inc();
}

/// How long an enqueue that was answered `202` or `200` (replay) took in the handler.
pub fn acceptance_latency(elapsed: Duration) {
    FAMILIES.acceptance_seconds.observe(elapsed.as_secs_f64());
}

/// One group-commit transaction of `size` commands, observed whether it commits or not.
pub fn group_commit_batch(size: usize) {
    FAMILIES.group_commit_batch_size.observe(size as f64);
}

/// A group-commit transaction that failed (every command of it answered `UNAVAILABLE`).
pub fn group_commit_failed() {
    FAMILIES.group_commit_failed_batches.inc();
}

/// A ticket poll or look-up that asked PostgreSQL instead of Redis.
pub fn postgres_fallback() {
    FAMILIES.postgres_fallbacks.inc();
}

/// A PostgreSQL fallback refused because the per-process budget was spent.
pub fn fallback_refused() {
    FAMILIES.fallbacks_refused.inc();
}

/// A state an executor's handler landed in PostgreSQL. Only the statuses a command can end in
/// are labels (anything else is `other`), so a bug cannot grow the label set without bound.
pub fn execution_landed(status: &str) {
    let status = if STATUSES.contains(&status) {
        status
    } else {
        "other"
    };
    FAMILIES
        .executions
        .get_or_create(&label("status", status))
        .inc();
}

/// The kinds of handler whose calls are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerKind {
    /// One quota transaction (a batch of one pool).
    Quota,
    /// One webhook delivery attempt.
    Webhook,
}

impl HandlerKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Quota => "quota",
            Self::Webhook => "webhook",
        }
    }
}

/// How long one handler call took: a quota transaction, or one webhook delivery attempt.
pub fn handler_latency(kind: HandlerKind, elapsed: Duration) {
    FAMILIES
        .handler_seconds
        .get_or_create(&label("handler", kind.as_str()))
        .observe(elapsed.as_secs_f64());
}

/// A row whose executor's lease lapsed, taken over by the sweeper: `retry_wait` (back in its
/// queue), `expired` or `needs_review` (past its deadline).
pub fn lease_rescued(outcome: &str) {
    let outcome = if RESCUES.contains(&outcome) {
        outcome
    } else {
        "other"
    };
    FAMILIES
        .lease_rescues
        .get_or_create(&label("outcome", outcome))
        .inc();
}

/// Counts a failure of Redis or PostgreSQL (other errors are not storage failures and are not
/// counted). Call it once where a failure is handled: where it becomes an API error, or where
/// the executor logs it and carries on.
pub fn storage_error(error: &DurableError) {
    let store = match error {
        DurableError::Postgres(_) | DurableError::CommitFailed(_) => "postgres",
        DurableError::Redis(_) => "redis",
        _ => return,
    };
    FAMILIES
        .storage_errors
        .get_or_create(&label("store", store))
        .inc();
}

fn register_common(registry: &mut Registry) {
    registry.register(
        "sluice_storage_errors",
        "Failures of Redis or PostgreSQL seen by this process, by store",
        FAMILIES.storage_errors.clone(),
    );
}

/// The gateway's exposition: its counters, then the projection figures of every application
/// (read now, see the module's doc).
pub async fn gateway_text(pg: &PgPool, redis: &Pool, scripts: &Scripts) -> String {
    let mut registry = Registry::default();
    register_common(&mut registry);
    let f = &*FAMILIES;
    registry.register(
        "sluice_intake_decisions",
        "Enqueue requests that reached the handler, by final answer: accepted, replayed, or the refusal's code lowercased",
        f.intake_decisions.clone(),
    );
    registry.register(
        "sluice_acceptance_duration_seconds",
        "Time from the enqueue handler's start to its 202 or 200 (replay) answer",
        f.acceptance_seconds.clone(),
    );
    registry.register(
        "sluice_group_commit_batch_size",
        "Commands per group-commit transaction",
        f.group_commit_batch_size.clone(),
    );
    registry.register(
        "sluice_group_commit_failed_batches",
        "Group-commit transactions that failed (their commands were answered UNAVAILABLE)",
        f.group_commit_failed_batches.clone(),
    );
    registry.register(
        "sluice_postgres_fallbacks",
        "Ticket polls and look-ups answered from PostgreSQL because Redis could not answer",
        f.postgres_fallbacks.clone(),
    );
    registry.register(
        "sluice_fallbacks_refused",
        "PostgreSQL fallbacks refused because the per-process fallback budget was spent",
        f.fallbacks_refused.clone(),
    );
    projection_figures(pg, redis, scripts)
        .await
        .register(&mut registry);
    encode(&registry)
}

/// The executor's exposition: its counters.
pub fn executor_text() -> String {
    let mut registry = Registry::default();
    register_common(&mut registry);
    let f = &*FAMILIES;
    registry.register(
        "sluice_executions",
        "States landed by this executor's handlers, by status",
        f.executions.clone(),
    );
    registry.register(
        "sluice_handler_duration_seconds",
        "Handler calls by kind: one quota transaction (a batch of one pool) or one webhook delivery attempt",
        f.handler_seconds.clone(),
    );
    registry.register(
        "sluice_lease_rescues",
        "Rows of a lapsed executor lease taken over by the sweeper, by the status they got",
        f.lease_rescues.clone(),
    );
    encode(&registry)
}

fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(error) = prometheus_text::encode(&mut text, registry) {
        // Writing to a String cannot fail; if the encoder ever does, say so in the answer.
        tracing::error!(%error, "metrics encoding failed");
        let _ = writeln!(text, "# metrics encoding failed: {error}");
    }
    text
}

/// One application's figures as `metrics.lua` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFigures {
    /// None when the projection is missing (`meta` has no generation).
    pub generation: Option<i64>,
    pub ready: bool,
    pub unfinished: i64,
    /// Live members of the application's lease zset.
    pub application_permits: i64,
    pub commands: Vec<CommandFigures>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandFigures {
    pub namespace_id: Uuid,
    pub command: String,
    /// `queued:<ns>:<cmd>`: waiting commands and live reservations.
    pub queued: i64,
    /// Live members of the command's lease zset.
    pub permits: i64,
}

/// Reads one application's figures with `metrics.lua` (one round trip).
pub async fn read_app_figures(
    redis: &Pool,
    scripts: &Scripts,
    application_id: Uuid,
) -> Result<AppFigures, DurableError> {
    let keys = AppKeys::new(application_id);
    let answer: Vec<Value> = scripts
        .metrics
        .call(
            redis,
            vec![
                keys.meta(),
                keys.count(),
                keys.admission_config(),
                keys.application_leases(),
            ],
            vec![],
        )
        .await?;
    parse_figures(&answer)
}

fn parse_figures(answer: &[Value]) -> Result<AppFigures, DurableError> {
    let bad = |detail: &str| DurableError::script("metrics.lua", detail.to_string());
    if answer.len() < 4 || !(answer.len() - 4).is_multiple_of(3) {
        return Err(bad("not four figures and command triples"));
    }
    let number = |v: &Value| v.as_i64().ok_or_else(|| bad("not a number"));
    let mut commands = Vec::with_capacity((answer.len() - 4) / 3);
    for triple in answer[4..].chunks(3) {
        let name = triple[0].as_string().ok_or_else(|| bad("command name"))?;
        let (namespace, command) = name
            .split_once(':')
            .ok_or_else(|| bad("command name is not <ns>:<cmd>"))?;
        commands.push(CommandFigures {
            namespace_id: Uuid::parse_str(namespace).map_err(|_| bad("namespace id"))?,
            command: command.to_string(),
            queued: number(&triple[1])?,
            permits: number(&triple[2])?,
        });
    }
    Ok(AppFigures {
        generation: answer[0].as_i64(),
        ready: answer[1].as_string().as_deref() == Some("1"),
        unfinished: number(&answer[2])?,
        application_permits: number(&answer[3])?,
        commands,
    })
}

/// The applications listed last, and when.
static APPLICATIONS: Mutex<Option<(Instant, Arc<Vec<Uuid>>)>> = Mutex::new(None);

/// Applications with a projection, at most [`MAX_APPLICATIONS`], cached for
/// [`APPLICATION_LIST_TTL`]. If PostgreSQL cannot answer, the last list is used (or none).
async fn applications(pg: &PgPool) -> Arc<Vec<Uuid>> {
    let cached = APPLICATIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if let Some((at, list)) = &cached
        && at.elapsed() < APPLICATION_LIST_TTL
    {
        return list.clone();
    }
    let listed: Result<Vec<Uuid>, sqlx::Error> = sqlx::query_scalar(
        "SELECT application_id FROM projections ORDER BY application_id LIMIT $1",
    )
    .bind(MAX_APPLICATIONS)
    .fetch_all(pg)
    .await;
    match listed {
        Ok(list) => {
            let list = Arc::new(list);
            *APPLICATIONS.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((Instant::now(), list.clone()));
            list
        }
        Err(error) => {
            let error = DurableError::from(error);
            storage_error(&error);
            tracing::warn!(%error, "metrics: cannot list the applications; using the last list");
            cached.map(|(_, list)| list).unwrap_or_default()
        }
    }
}

/// The projection figures of one scrape, as gauge families.
struct ProjectionGauges {
    applications: Gauge,
    up: Family<Label, Gauge>,
    generation: Family<Label, Gauge>,
    ready: Family<Label, Gauge>,
    unfinished: Family<Label, Gauge>,
    application_permits: Family<Label, Gauge>,
    queue_depth: Family<[(&'static str, String); 3], Gauge>,
    command_permits: Family<[(&'static str, String); 3], Gauge>,
}

impl ProjectionGauges {
    fn register(self, registry: &mut Registry) {
        registry.register(
            "sluice_projection_applications",
            "Applications whose projection this scrape read (at most 1000)",
            self.applications,
        );
        registry.register(
            "sluice_projection_up",
            "1 if this scrape could read the application's projection from Redis, else 0",
            self.up,
        );
        registry.register(
            "sluice_projection_generation",
            "The projection generation in Redis (absent when the projection is missing)",
            self.generation,
        );
        registry.register(
            "sluice_projection_ready",
            "1 if the application's projection is marked ready in Redis, else 0",
            self.ready,
        );
        registry.register(
            "sluice_unfinished_commands",
            "Accepted commands not yet terminal (needs_review included), from the projection",
            self.unfinished,
        );
        registry.register(
            "sluice_queue_depth",
            "Commands waiting (and intake reservations) per command, from the projection",
            self.queue_depth,
        );
        registry.register(
            "sluice_application_permits_in_flight",
            "Live executing permits of the application (its max_concurrency), all namespaces",
            self.application_permits,
        );
        registry.register(
            "sluice_command_permits_in_flight",
            "Live executing permits of a command (its admission max_in_flight)",
            self.command_permits,
        );
    }
}

/// Reads every listed application within [`PROJECTION_BUDGET`].
async fn projection_figures(pg: &PgPool, redis: &Pool, scripts: &Scripts) -> ProjectionGauges {
    let gauges = ProjectionGauges {
        applications: Gauge::default(),
        up: Family::default(),
        generation: Family::default(),
        ready: Family::default(),
        unfinished: Family::default(),
        application_permits: Family::default(),
        queue_depth: Family::default(),
        command_permits: Family::default(),
    };
    let apps = applications(pg).await;
    gauges
        .applications
        .set(i64::try_from(apps.len()).unwrap_or(i64::MAX));
    let deadline = tokio::time::Instant::now() + PROJECTION_BUDGET;
    for &application_id in apps.iter() {
        let app = application_id.to_string();
        let read =
            tokio::time::timeout_at(deadline, read_app_figures(redis, scripts, application_id))
                .await;
        let figures = match read {
            Ok(Ok(figures)) => figures,
            Ok(Err(error)) => {
                storage_error(&error);
                tracing::warn!(%application_id, %error, "metrics: projection not read");
                gauges.up.get_or_create(&label("application", app)).set(0);
                continue;
            }
            Err(_) => {
                gauges.up.get_or_create(&label("application", app)).set(0);
                continue;
            }
        };
        let app_label = label("application", app.clone());
        gauges.up.get_or_create(&app_label).set(1);
        if let Some(generation) = figures.generation {
            gauges.generation.get_or_create(&app_label).set(generation);
        }
        gauges
            .ready
            .get_or_create(&app_label)
            .set(i64::from(figures.ready));
        gauges
            .unfinished
            .get_or_create(&app_label)
            .set(figures.unfinished);
        gauges
            .application_permits
            .get_or_create(&app_label)
            .set(figures.application_permits);
        for command in figures.commands {
            let labels = [
                ("application", app.clone()),
                ("namespace", command.namespace_id.to_string()),
                ("command", command.command),
            ];
            gauges
                .queue_depth
                .get_or_create(&labels)
                .set(command.queued);
            gauges
                .command_permits
                .get_or_create(&labels)
                .set(command.permits);
        }
    }
    gauges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_parse_with_and_without_commands() {
        let ns = Uuid::now_v7();
        let answer = vec![
            Value::from("3"),
            Value::from("1"),
            Value::from(7),
            Value::from(2),
            Value::from(format!("{ns}:claim")),
            Value::from(5),
            Value::from(1),
        ];
        let figures = parse_figures(&answer).expect("parses");
        assert_eq!(figures.generation, Some(3));
        assert!(figures.ready);
        assert_eq!((figures.unfinished, figures.application_permits), (7, 2));
        assert_eq!(
            figures.commands,
            vec![CommandFigures {
                namespace_id: ns,
                command: "claim".into(),
                queued: 5,
                permits: 1,
            }]
        );
        let missing = vec![Value::Null, Value::Null, Value::from(0), Value::from(0)];
        let figures = parse_figures(&missing).expect("parses");
        assert_eq!(figures.generation, None);
        assert!(!figures.ready);
        assert!(parse_figures(&answer[..6]).is_err(), "a broken triple");
    }

    #[test]
    fn the_executor_exposition_has_a_type_for_every_family() {
        execution_landed("succeeded");
        execution_landed("made-up");
        let text = executor_text();
        assert!(
            text.contains("# TYPE sluice_executions_total counter"),
            "{text}"
        );
        assert!(
            text.contains("sluice_executions_total{status=\"other\"}"),
            "{text}"
        );
        assert!(
            text.contains("sluice_executions_total{status=\"needs_review\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE sluice_handler_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE sluice_storage_errors_total counter"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "Prometheus text, not OpenMetrics");
    }
}
