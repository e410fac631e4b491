//! The checks: every promise judged against the model, from the witnesses' records (the
//! backend's deliveries, the queue recorder's samples, PostgreSQL's rows, the origin's verified
//! passes) and the answers the checker got, never from Sluice's own books.
//!
//! | promise | judged by |
//! | --- | --- |
//! | a declaration with templates that render one key with other numbers is refused | the model's overlap decision ([`answers`]) |
//! | every answer is explicit and of the contract's shape | each answer ([`answers`]) |
//! | nothing accepted is lost, nothing appears unasked, each command ends once | PostgreSQL rows, polls ([`lifecycle`]) |
//! | a decided command ends as the backend decided | the backend's decisions, PostgreSQL ([`lifecycle`]) |
//! | no limit exceeded: keys, commands, resources, the application | the backend's own intervals, PostgreSQL's start times ([`limits`]) |
//! | FIFO within a resource, except the documented lookahead | the recorder's queues, PostgreSQL's start times ([`order`]) |
//! | a told position is the rank at its `observed_at`, and never grows without an arrival ahead | the recorder's samples ([`positions`]) |
//! | quota units: never over capacity, one per subject, reserved units end as their holders said | PostgreSQL's allocations ([`quota`]) |
//! | a room's `max_active` at the origin | passes verified by the origin ([`rooms`]) |

use std::collections::HashMap;

use crate::backend::{Decision, Delivery};
use crate::journal::Records;
use crate::plan::{Declaration, Enqueue, FaultKind, OpKind, Plan};
use crate::recorder::Span;
use crate::rows::{AllocationRow, CommandRow, PlaceRow};

mod answers;
mod lifecycle;
mod limits;
mod order;
mod positions;
mod quota;
mod rooms;

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Violation {
    /// A stable name of the promise (what shrinking keeps failing on).
    pub kind: String,
    pub detail: String,
}

impl Violation {
    pub fn new(kind: &str, detail: impl Into<String>) -> Self {
        Violation {
            kind: kind.to_string(),
            detail: detail.into(),
        }
    }
}

/// How much each check judged (a check that judged nothing proves nothing).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Stats {
    pub intents: usize,
    /// Declarations `apply` refused as the model predicted (templates rendering one key).
    pub refused_declarations: usize,
    pub accepted: usize,
    pub deliveries: usize,
    pub positions_judged: usize,
    pub positions_unjudged: usize,
    pub positions_exact: usize,
    pub position_pairs: usize,
    /// Pairs of one resource that waited together, the later started: judged for their order.
    pub order_pairs: usize,
    /// Of those, the later started first (allowed by the lookahead, excused, or reported).
    pub order_overtakes: usize,
    pub order_excused: usize,
    pub limit_checks: usize,
    pub peak_concurrency: usize,
    pub passes: usize,
    pub faults: usize,
    pub allocations: usize,
    pub places: usize,
    /// Waiting places' told positions compared with PostgreSQL's rows, and leaves of the queue
    /// followed by a poll at the other gateway.
    pub place_positions: usize,
    pub quits: usize,
    /// Waits advised to waiting places whose first pass came: judged against that pass's `exp`.
    pub advised_waits: usize,
    /// Joins sent again with their key after their place ended.
    pub rejoins: usize,
}

pub struct Evidence<'a> {
    pub plan: &'a Plan,
    pub decl: &'a Declaration,
    pub records: &'a Records,
    pub deliveries: Vec<Delivery>,
    pub decisions: HashMap<u32, (Decision, i64)>,
    pub spans: Vec<Span>,
    /// (command, resource) → the recorder's queue index.
    pub queue_index: HashMap<(String, String), usize>,
    pub rows: Vec<CommandRow>,
    pub allocations: Vec<AllocationRow>,
    pub places: Vec<PlaceRow>,
    pub drained: bool,
    pub exited: Vec<String>,
}

/// Everything a run's checks read, saved beside the run (`evidence.json`) so the checks can be
/// run again on it without running the system (`sluice-check judge <dir>`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Saved {
    pub plan: Plan,
    pub decl: Declaration,
    pub records: Records,
    pub deliveries: Vec<Delivery>,
    pub decisions: Vec<(u32, Decision, i64)>,
    pub spans: Vec<Span>,
    pub queue_index: Vec<(String, String, usize)>,
    pub rows: Vec<CommandRow>,
    pub allocations: Vec<AllocationRow>,
    #[serde(default)]
    pub places: Vec<PlaceRow>,
    pub drained: bool,
    pub exited: Vec<String>,
}

impl Saved {
    pub fn of(evidence: &Evidence<'_>) -> Saved {
        Saved {
            plan: evidence.plan.clone(),
            decl: evidence.decl.clone(),
            records: evidence.records.clone(),
            deliveries: evidence.deliveries.clone(),
            decisions: evidence
                .decisions
                .iter()
                .map(|(n, (d, at))| (*n, *d, *at))
                .collect(),
            spans: evidence.spans.clone(),
            queue_index: evidence
                .queue_index
                .iter()
                .map(|((c, r), q)| (c.clone(), r.clone(), *q))
                .collect(),
            rows: evidence.rows.clone(),
            allocations: evidence.allocations.clone(),
            places: evidence.places.clone(),
            drained: evidence.drained,
            exited: evidence.exited.clone(),
        }
    }

    /// The checks, on what was saved.
    pub fn judge(&self) -> (Vec<Violation>, Stats) {
        judge(&Evidence {
            plan: &self.plan,
            decl: &self.decl,
            records: &self.records,
            deliveries: self.deliveries.clone(),
            decisions: self
                .decisions
                .iter()
                .map(|(n, d, at)| (*n, (*d, *at)))
                .collect(),
            spans: self.spans.clone(),
            queue_index: self
                .queue_index
                .iter()
                .map(|(c, r, q)| ((c.clone(), r.clone()), *q))
                .collect(),
            rows: self.rows.clone(),
            allocations: self.allocations.clone(),
            places: self.places.clone(),
            drained: self.drained,
            exited: self.exited.clone(),
        })
    }
}

impl Evidence<'_> {
    pub fn intent(&self, n: u32) -> Option<&Enqueue> {
        self.plan.ops.iter().find_map(|op| match &op.kind {
            OpKind::Enqueue(e) if e.n == n => Some(e),
            _ => None,
        })
    }

    /// The intent a row belongs to (its request key is `intent-<n>`).
    pub fn intent_of(row: &CommandRow) -> Option<u32> {
        row.request_key.strip_prefix("intent-")?.parse().ok()
    }

    /// Whether a fault of the run that may strand admitted work was active within `slack_ms`
    /// of the interval.
    pub fn strand_excuse(&self, from_ms: i64, to_ms: i64) -> bool {
        self.fault_within_a_lease(from_ms, to_ms, FaultKind::may_strand_work)
    }

    /// Whether a fault that can leave an attempt's outcome unknown was active within the lease
    /// and sweeps of the interval.
    pub fn doubt_excuse(&self, from_ms: i64, to_ms: i64) -> bool {
        self.fault_within_a_lease(from_ms, to_ms, FaultKind::may_leave_outcome_unknown)
    }

    /// Whether a fault of the kind `counts` was active from half a second before the interval
    /// until a lease, two sweeps and two seconds after it: what it stranded has been swept by then.
    fn fault_within_a_lease(
        &self,
        from_ms: i64,
        to_ms: i64,
        counts: impl Fn(&FaultKind) -> bool,
    ) -> bool {
        let slack = self.plan.timing.lease_ms as i64
            + self.plan.timing.sweep_interval_ms as i64 * 2
            + 2_000;
        self.records.faults.iter().any(|f| {
            counts(&f.kind) && f.started_ms - 500 <= to_ms && f.ended_ms + slack >= from_ms
        })
    }

    /// Whether, near `at_ms`, executors may have admitted heads whose claim then failed and
    /// given them straight back (PostgreSQL restarting, or an executor's link to it faulty): a
    /// queue's entries may then leave and come back between two samples of the recorder.
    ///
    /// The same around a Redis that lost its data: what was queued just before vanishes, and
    /// comes back with the rebuild.
    pub fn churn_near(&self, at_ms: i64) -> bool {
        self.records.faults.iter().any(|f| {
            (f.kind.fails_claims() || f.kind.loses_redis_data())
                && f.started_ms - 1_000 <= at_ms
                && f.ended_ms + 3_000 >= at_ms
        })
    }

    /// Whether any fault was active within `slack_ms` of the interval.
    pub fn any_fault(&self, from_ms: i64, to_ms: i64, slack_ms: i64) -> bool {
        self.records
            .faults
            .iter()
            .any(|f| f.started_ms - slack_ms <= to_ms && f.ended_ms + slack_ms >= from_ms)
    }
}

pub fn judge(evidence: &Evidence<'_>) -> (Vec<Violation>, Stats) {
    let mut violations = Vec::new();
    let mut stats = Stats {
        faults: evidence.records.faults.len(),
        deliveries: evidence.deliveries.len(),
        allocations: evidence.allocations.len(),
        ..Stats::default()
    };
    for text in &evidence.records.strays {
        violations.push(Violation::new("stray-answer", text.clone()));
    }
    for text in &evidence.exited {
        violations.push(Violation::new("process-exited", text.clone()));
    }
    answers::check(evidence, &mut violations, &mut stats);
    lifecycle::check(evidence, &mut violations, &mut stats);
    limits::check(evidence, &mut violations, &mut stats);
    order::check(evidence, &mut violations, &mut stats);
    positions::check(evidence, &mut violations, &mut stats);
    quota::check(evidence, &mut violations, &mut stats);
    rooms::check(evidence, &mut violations, &mut stats);
    (violations, stats)
}
