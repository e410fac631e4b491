//! Late writes at the script level: a command that ended stays ended whatever arrives late (a
//! requeue, a status mark or a renewal of the attempt that held it, a second landing, a late
//! acceptance), and a late requeue never touches the attempt that replaced it.

use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    Acceptance, Accepted, AdmitLimits, Mark, Requeue, Requeued, accept, renew, requeue,
    set_attempt_status,
};
use uuid::Uuid;

use crate::lua_fixture;

enum LateWrites {}

type Bench = lua_fixture::Bench<LateWrites>;

impl Bench {
    async fn start(&self) -> Vec<sluice_durable::lifecycle::redis::AdmittedHead> {
        self.admitted_heads(AdmitLimits {
            min_generation: 1,
            max_heads: 10,
            scan_limit: 64,
            lease_ms: 60_000,
            lookahead: 1,
        })
        .await
    }

    async fn requeue(
        &self,
        id: Uuid,
        attempt: sluice_durable::lifecycle::AttemptId,
        resource: &str,
        seq: i64,
    ) -> Requeue {
        requeue(
            &self.redis,
            &self.keys,
            &Requeued {
                command_id: CommandId::from_uuid(id),
                attempt: Some(attempt),
                namespace_id: self.namespace,
                command: "job",
                resource_key: resource,
                queue_seq: seq,
                status: sluice_model::CommandStatus::RetryWait,
                updated_at: "2026-12-01T00:00:00.000Z".into(),
            },
        )
        .await
        .expect("requeue.lua")
    }

    async fn mark(
        &self,
        id: Uuid,
        attempt: sluice_durable::lifecycle::AttemptId,
        status: &str,
    ) -> Mark {
        set_attempt_status(
            &self.redis,
            &self.keys,
            CommandId::from_uuid(id),
            attempt,
            sluice_model::CommandStatus::parse(status).expect("a status"),
            "2026-12-01T00:00:00.000Z".into(),
            None,
            &[],
        )
        .await
        .expect("attempt_status.lua")
    }

    /// unfinished, waiting and queued of `job`, and the live permits of `job`.
    async fn figures(&self) -> (i64, i64, i64, usize) {
        let ns = self.namespace;
        (
            self.counter("unfinished").await,
            self.counter(&format!("waiting:{ns}")).await,
            self.counter(&format!("queued:{ns}:job")).await,
            self.zmembers(&self.keys.command_leases(ns, "job"))
                .await
                .len(),
        )
    }
}

/// A command that ended (cancelled, completed) stays ended whatever arrives late: the requeue of
/// the attempt that held it, a status mark of that attempt, its renewal, a second landing as
/// `needs_review`, and a late `accept` of its commit change nothing, and it is never started
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_writes_never_resurrect_an_ended_command() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", "100 1000000 1000000 0")], &[])
        .await;
    let id = bench.queue_job("r").await;
    let heads = bench.start().await;
    assert_eq!(heads.len(), 1);
    let head = heads[0].clone();
    assert_eq!(bench.land("job", "r", id, "cancelled").await, Some(true));
    let ended = (0, 0, 0, 0);
    assert_eq!(bench.figures().await, ended);

    assert_eq!(
        bench
            .requeue(id.as_uuid(), head.attempt, "r", head.queue_seq)
            .await,
        Requeue::Stale
    );
    assert_eq!(
        bench.mark(id.as_uuid(), head.attempt, "retry_wait").await,
        Mark::Lost
    );
    assert_eq!(
        bench.mark(id.as_uuid(), head.attempt, "running").await,
        Mark::Lost
    );
    let renewed = renew(
        &bench.redis,
        &bench.keys,
        &[(id, head.attempt)],
        &[],
        60_000,
    )
    .await
    .expect("renew.lua");
    assert_eq!(
        renewed,
        Some(vec![false]),
        "an ended command's attempt is lost"
    );
    assert_eq!(
        bench.land("job", "r", id, "needs_review").await,
        Some(false)
    );
    let late = accept(
        &bench.redis,
        &bench.keys,
        1,
        &[Accepted {
            command_id: id,
            namespace_id: bench.namespace,
            command: "job".into(),
            resource_key: "r".into(),
            request_key_field: "1:uk".into(),
            content_sha256_hex: "a".repeat(64),
            queue_seq: head.queue_seq,
            accepted_at: "2026-12-01T00:00:00.000Z".into(),
            deadline_at: "2026-12-01T01:00:00.000Z".into(),
            limit_keys: String::new(),
        }],
    )
    .await
    .expect("accept.lua");
    assert!(
        matches!(&late, Acceptance::Projected(p) if p.positions == vec![None]),
        "{late:?}"
    );
    assert_eq!(bench.status(id).await.as_deref(), Some("cancelled"));
    assert_eq!(bench.figures().await, ended, "nothing counted again");
    assert!(bench.start().await.is_empty(), "never started again");
}

/// An attempt given back and started again: the first attempt's late requeue and marks touch
/// nothing of the second (its permits stay, it stays out of its queue and executing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_requeue_never_touches_the_attempt_that_replaced_it() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", "100 1000000 1000000 0")], &[])
        .await;
    let id = bench.queue_job("r").await;
    let first = bench.start().await[0].clone();
    assert_eq!(
        bench
            .requeue(id.as_uuid(), first.attempt, "r", first.queue_seq)
            .await,
        Requeue::Done
    );
    let second = bench.start().await[0].clone();
    assert_ne!(
        first.attempt, second.attempt,
        "every start mints its attempt"
    );
    let before = bench.figures().await;
    assert_eq!(before, (1, 0, 0, 1));

    assert_eq!(
        bench
            .requeue(id.as_uuid(), first.attempt, "r", first.queue_seq)
            .await,
        Requeue::Stale
    );
    assert_eq!(
        bench.mark(id.as_uuid(), first.attempt, "retry_wait").await,
        Mark::Lost
    );
    assert_eq!(
        bench.figures().await,
        before,
        "the second attempt keeps its permits"
    );
    assert_eq!(bench.status(id).await.as_deref(), Some("executing"));
    assert_eq!(
        bench.field(id, "attempt").await,
        Some(second.attempt.to_string())
    );
    assert!(bench.start().await.is_empty(), "not queued twice");
    assert_eq!(
        renew(
            &bench.redis,
            &bench.keys,
            &[(id, first.attempt), (id, second.attempt)],
            &[],
            60_000,
        )
        .await
        .expect("renew.lua"),
        Some(vec![false, true])
    );
}
