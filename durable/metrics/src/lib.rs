//! The process-wide Prometheus families of a gateway or an executor (`GET /metrics`, text
//! format 0.0.4): what each counts, and their exposition.
//!
//! The counters and histograms are process-global: one process is one gateway or one executor,
//! and the code that counts (the enqueue handler, the group committer, the handlers, the
//! sweepers) should not need a handle threaded through to it. Each process renders only its
//! own families ([`register_gateway`], [`executor_text`]), so a gateway never exports an
//! executor's always-zero counters and the other way round. What is read rather than counted
//! when scraped (the projection's, the quota pools' and the rooms' figures) is read above this
//! crate, where PostgreSQL and Redis are (`sluice_durable::figures`).

use std::fmt::Write as _;
use std::sync::LazyLock;
use std::time::Duration;

pub mod process;

use prometheus_client::encoding::{EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use sluice_model::CommandStatus;
use sluice_model::DurableError;

/// The `Content-Type` of [`gateway_text`] and [`executor_text`].
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// One label, e.g. `("outcome", "accepted")`.
pub type Label = [(&'static str, String); 1];

pub fn label(name: &'static str, value: impl Into<String>) -> Label {
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

/// The labels of an answered HTTP request: the route's template (`/v1/tickets/{ticket}`, never
/// the raw path, so a series per ticket cannot exist), the method and the status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpAnswer {
    route: &'static str,
    method: &'static str,
    status: u16,
}

/// [`HttpAnswer`] without the status: the latency histogram's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpRoute {
    route: &'static str,
    method: &'static str,
}

/// Every counted family, created on first use.
struct Families {
    http_requests: Family<HttpAnswer, Counter>,
    http_request_seconds: Family<HttpRoute, Histogram>,
    intake_decisions: Family<Label, Counter>,
    acceptance_seconds: Histogram,
    intake_phase_seconds: Family<Label, Histogram>,
    group_commit_batch_size: Histogram,
    intake_batch_entries: Histogram,
    group_commit_failed_batches: Counter,
    postgres_fallbacks: Counter,
    fallbacks_refused: Counter,
    command_reads_refused: Family<Label, Counter>,
    executions: Family<Label, Counter>,
    handler_seconds: Family<Label, Histogram>,
    lease_rescues: Family<Label, Counter>,
    attempts_stopped: Counter,
    reservations_expired: Counter,
    retention_days_dropped: Counter,
    retention_keys_forgotten: Counter,
    retention_days_held: Gauge,
    storage_errors: Family<Label, Counter>,
    ticket_polls: Family<Label, Counter>,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| {
    let families = Families {
        http_requests: Family::default(),
        http_request_seconds: Family::new_with_constructor(latency_histogram),
        intake_decisions: Family::default(),
        acceptance_seconds: latency_histogram(),
        intake_phase_seconds: Family::new_with_constructor(latency_histogram),
        // 1, 2, 4, … 1024 commands per transaction (the default `max_batch` is 256).
        group_commit_batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 11)),
        // 1, 2, 4, … 256 enqueues per intake.lua call (the default cap is 64).
        intake_batch_entries: Histogram::new(exponential_buckets(1.0, 2.0, 9)),
        group_commit_failed_batches: Counter::default(),
        postgres_fallbacks: Counter::default(),
        fallbacks_refused: Counter::default(),
        command_reads_refused: Family::default(),
        executions: Family::default(),
        handler_seconds: Family::new_with_constructor(latency_histogram),
        lease_rescues: Family::default(),
        attempts_stopped: Counter::default(),
        reservations_expired: Counter::default(),
        retention_days_dropped: Counter::default(),
        retention_keys_forgotten: Counter::default(),
        retention_days_held: Gauge::default(),
        storage_errors: Family::default(),
        ticket_polls: Family::default(),
    };
    // The label values known in advance are exported from the start, at zero: a series that
    // appears only with its first event hides that first event from `rate()` and `increase()`.
    for outcome in ["accepted", "replayed"] {
        let _ = families
            .intake_decisions
            .get_or_create_owned(&label("outcome", outcome));
    }
    for phase in INTAKE_PHASES {
        let _ = families
            .intake_phase_seconds
            .get_or_create_owned(&label("phase", phase));
    }
    for by in ["subject", "process"] {
        let _ = families
            .command_reads_refused
            .get_or_create_owned(&label("by", by));
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
    for by in TICKET_ANSWERS {
        let _ = families
            .ticket_polls
            .get_or_create_owned(&label("answered_by", by));
    }
    families
});

/// One answered HTTP request of the gateway's public listener: `route` is the template the
/// router matched (or `other`), `method` one of the methods it serves (or `other`).
pub fn http_answered(route: &'static str, method: &'static str, status: u16, elapsed: Duration) {
    FAMILIES
        .http_requests
        .get_or_create(&HttpAnswer {
            route,
            method,
            status,
        })
        .inc();
    FAMILIES
        .http_request_seconds
        .get_or_create(&HttpRoute { route, method })
        .observe(elapsed.as_secs_f64());
}

/// A command read refused by its subject's own rate (`subject`) or the process's budget
/// (`process`).
pub fn command_read_refused(by: &'static str) {
    FAMILIES
        .command_reads_refused
        .get_or_create(&label("by", by))
        .inc();
}

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

/// The steps of an accepted enqueue, in order (lifecycle/enqueue.rs): `reserve`, its
/// reservation by the application's intake batcher (waiting for the batch's `intake.lua` call
/// included); `commit`, its row's group commit (waiting for the batch's transaction included);
/// `project`, `accept.lua` putting it in its queue. Where an acceptance's time goes.
pub const INTAKE_PHASES: [&str; 3] = ["reserve", "commit", "project"];

/// How long one step of an enqueue that was accepted took (one of [`INTAKE_PHASES`]).
pub fn intake_phase(phase: &'static str, elapsed: Duration) {
    FAMILIES
        .intake_phase_seconds
        .get_or_create(&label("phase", phase))
        .observe(elapsed.as_secs_f64());
}

/// One group-commit transaction of `size` commands, observed whether it commits or not.
pub fn group_commit_batch(size: usize) {
    FAMILIES.group_commit_batch_size.observe(size as f64);
}

/// One `intake.lua` call of the intake batcher deciding `entries` enqueues of one application.
pub fn intake_batch(entries: usize) {
    FAMILIES.intake_batch_entries.observe(entries as f64);
}

/// A group-commit transaction that failed (every command of it answered `UNAVAILABLE`).
pub fn group_commit_failed() {
    FAMILIES.group_commit_failed_batches.inc();
}

/// Where ticket polls are answered from: the gateway's memory of waiting queues, Redis
/// (`ticket.lua`), or PostgreSQL (Redis could not answer).
const TICKET_ANSWERS: [&str; 3] = ["memory", "redis", "postgres"];

/// One ticket poll answered from `answered_by` (one of `memory`, `redis`, `postgres`): the
/// share answered from memory is what waiting polls cost Redis nothing.
pub fn ticket_poll(answered_by: &'static str) {
    FAMILIES
        .ticket_polls
        .get_or_create(&label("answered_by", answered_by))
        .inc();
}

/// Ticket polls this process answered from `answered_by` so far (the load test and the bench
/// print the share answered from memory).
pub fn ticket_polls_answered(answered_by: &'static str) -> u64 {
    FAMILIES
        .ticket_polls
        .get_or_create(&label("answered_by", answered_by))
        .get()
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
pub fn execution_landed(status: CommandStatus) {
    let status = if STATUSES.contains(&status.as_str()) {
        status.as_str()
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
pub fn lease_rescued(outcome: CommandStatus) {
    let outcome = if RESCUES.contains(&outcome.as_str()) {
        outcome.as_str()
    } else {
        "other"
    };
    FAMILIES
        .lease_rescues
        .get_or_create(&label("outcome", outcome))
        .inc();
}

/// An attempt this executor stopped because it lost (or might have lost) its lease before it
/// could land: its work was abandoned, and the command is started again by another attempt.
pub fn attempt_stopped() {
    FAMILIES.attempts_stopped.inc();
}

/// Reservations this executor expired (their units went back to their pools).
pub fn reservations_expired(count: usize) {
    FAMILIES.reservations_expired.inc_by(count as u64);
}

/// One round of retention: the request keys it forgot, the days it dropped, and how many days
/// past the retention it found held by a command that is unfinished or ended too recently (set,
/// not added: the state of `commands` as this round saw it).
pub fn retention_round(keys_forgotten: usize, days_dropped: usize, days_held: usize) {
    let f = &*FAMILIES;
    f.retention_keys_forgotten.inc_by(keys_forgotten as u64);
    f.retention_days_dropped.inc_by(days_dropped as u64);
    f.retention_days_held
        .set(i64::try_from(days_held).unwrap_or(i64::MAX));
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

/// Registers the gateway's counted families in `registry`; the figures read when scraped are
/// registered beside them by the caller (`sluice_durable::figures::gateway_text`).
pub fn register_gateway(registry: &mut Registry) {
    register_common(registry);
    let f = &*FAMILIES;
    registry.register(
        "sluice_http_requests",
        "Requests answered by the public listener, by route template, method and status",
        f.http_requests.clone(),
    );
    registry.register(
        "sluice_http_request_duration_seconds",
        "Time from a request's arrival to its answer, by route template and method",
        f.http_request_seconds.clone(),
    );
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
        "sluice_intake_phase_duration_seconds",
        "Time an accepted enqueue spent in each step: reserve (the intake batcher and intake.lua), commit (the group commit), project (accept.lua)",
        f.intake_phase_seconds.clone(),
    );
    registry.register(
        "sluice_group_commit_batch_size",
        "Commands per group-commit transaction",
        f.group_commit_batch_size.clone(),
    );
    registry.register(
        "sluice_intake_batch_entries",
        "Enqueues decided per intake.lua call (the gateway's per-application intake batcher)",
        f.intake_batch_entries.clone(),
    );
    registry.register(
        "sluice_group_commit_failed_batches",
        "Group-commit transactions that failed (their commands were answered UNAVAILABLE)",
        f.group_commit_failed_batches.clone(),
    );
    registry.register(
        "sluice_ticket_polls",
        "Ticket polls answered, by source: memory (a waiting command's place from the gateway's snapshot of its queue, or a waiting room place from the gateway's board of its room), redis (ticket.lua) or postgres",
        f.ticket_polls.clone(),
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
    registry.register(
        "sluice_command_reads_refused",
        "Command reads (by id, by request key, mine, cancel) refused by the subject's own rate or the process's budget",
        f.command_reads_refused.clone(),
    );
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
    registry.register(
        "sluice_attempts_stopped",
        "Attempts abandoned because their lease lapsed or could not be renewed in time",
        f.attempts_stopped.clone(),
    );
    registry.register(
        "sluice_reservations_expired",
        "Quota reservations this executor expired (its sweeper, or its quota handler before counting a pool's free units) because the database's clock passed their expires_at",
        f.reservations_expired.clone(),
    );
    registry.register(
        "sluice_retention_days_dropped",
        "Days of commands this executor dropped whole because every command of them ended more than retention_seconds ago",
        f.retention_days_dropped.clone(),
    );
    registry.register(
        "sluice_retention_keys_forgotten",
        "Request keys of such days this executor forgot (in PostgreSQL, then in Redis) before dropping them",
        f.retention_keys_forgotten.clone(),
    );
    registry.register(
        "sluice_retention_days_held",
        "Days past the retention that this executor's last retention round found held by an unfinished command or one that ended within the retention",
        f.retention_days_held.clone(),
    );
    encode(&registry)
}

/// The Prometheus text of `registry`, then the build's and the process's own figures
/// ([`process::text`]).
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(error) = prometheus_text::encode(&mut text, registry) {
        // Writing to a String cannot fail; if the encoder ever does, say so in the answer.
        tracing::error!(%error, "metrics encoding failed");
        let _ = writeln!(text, "# metrics encoding failed: {error}");
    }
    text.push_str(&process::text());
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_executor_exposition_has_a_type_for_every_family() {
        execution_landed(CommandStatus::Succeeded);
        // Not a status a command lands in.
        execution_landed(CommandStatus::Accepted);
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
