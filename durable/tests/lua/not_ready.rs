//! Every script of the life cycle trusts the projection only while it is open: on a fenced
//! projection (a rebuild under way, or a Redis that lost writes) each one answers not ready and
//! writes nothing, whatever it was asked (a reservation, an acceptance, a release, an admission,
//! a renewal, a mark, a retake, a requeue, a landing, a holding check).

use sluice_durable::declaration::IntakeBudget;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::rebuild::fence;
use sluice_durable::lifecycle::redis::{
    Acceptance, Accepted, Admission, AdmitLimits, Ending, Extend, IntakeRequest, IntakeVerdict,
    Mark, RateKey, Release, Requeue, Requeued, Retake, accept, land, release, renew, requeue,
    reserve, set_attempt_status, still_held, take_start_tokens,
};
use std::time::Duration;
use uuid::Uuid;

use crate::lua_fixture;

enum NotReady {}

type Bench = lua_fixture::Bench<NotReady>;

const LIMITS: AdmitLimits = AdmitLimits {
    min_generation: 1,
    max_heads: 10,
    scan_limit: 64,
    lease_ms: 60_000,
    lookahead: 1,
};

fn budget() -> IntakeBudget {
    IntakeBudget {
        per_second: 1_000,
        burst: 1_000,
        max_in_flight: 1_000,
        per_subject: None,
    }
}

impl Bench {
    async fn reserve(&self, id: Uuid, field: &str) -> IntakeVerdict {
        let budget = budget();
        reserve(
            &self.redis,
            &IntakeRequest {
                keys: &self.keys,
                min_generation: 1,
                namespace_id: self.namespace,
                command: "job",
                subject: "sub",
                request_key_field: field,
                content_sha256_hex: &"a".repeat(64),
                command_id: CommandId::from_uuid(id),
                max_unfinished: 1_000,
                max_waiting: 1_000,
                max_queue: 1_000,
                intake: &budget,
                reservation_ttl_ms: 60_000,
            },
        )
        .await
        .expect("intake.lua")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_refuses_a_fenced_projection_and_writes_nothing() {
    let bench = Bench::new().await;
    bench.configure(&[("job", "10 1000 1000 0")], &[]).await;
    // A started command (its permits and attempt), a waiting one, and a reservation between
    // its intake and its commit: what each script would otherwise act on.
    let started = bench.queue_job("r1").await;
    let waiting = bench.queue_job("r2").await;
    let heads = bench.admitted_heads(LIMITS).await;
    let head = heads
        .iter()
        .find(|h| h.command_id == started)
        .expect("the first command started");
    let attempt = head.attempt;
    let heads_started: Vec<CommandId> = heads.iter().map(|h| h.command_id).collect();
    assert_eq!(
        heads_started,
        vec![started, waiting],
        "both resources start"
    );
    let reserved = Uuid::now_v7();
    let field = format!("3:sub{}", Uuid::new_v4());
    assert!(matches!(
        bench.reserve(reserved, &field).await,
        IntakeVerdict::Reserved { .. }
    ));

    fence(&bench.redis, &bench.keys)
        .await
        .expect("fence the projection");
    let before = bench.snapshot().await;
    let (redis, keys) = (&bench.redis, &bench.keys);
    let ns = bench.namespace;

    assert_eq!(
        bench.reserve(Uuid::now_v7(), "3:another").await,
        IntakeVerdict::NotReady,
        "reserve"
    );
    let committed = Accepted {
        command_id: CommandId::from_uuid(reserved),
        namespace_id: ns,
        command: "job".into(),
        resource_key: "r3".into(),
        request_key_field: field.clone(),
        content_sha256_hex: "a".repeat(64),
        queue_seq: 3,
        accepted_at: "2026-12-01T00:00:00.000Z".into(),
        deadline_at: "2026-12-02T00:00:00.000Z".into(),
        limit_keys: String::new(),
    };
    assert_eq!(
        accept(redis, keys, 1, &[committed])
            .await
            .expect("accept.lua"),
        Acceptance::NotReady,
        "accept"
    );
    let released = release(
        redis,
        keys,
        &Release {
            command_id: CommandId::from_uuid(reserved),
            namespace_id: ns,
            command: "job",
            request_key_field: &field,
            existing: None,
        },
    )
    .await
    .expect("release.lua");
    assert!(!released, "release");
    assert_eq!(bench.admission(LIMITS).await, Admission::NotReady, "admit");
    assert_eq!(
        renew(redis, keys, &[(started, attempt)], &[], 60_000)
            .await
            .expect("renew.lua"),
        None,
        "renew"
    );
    assert_eq!(
        still_held(redis, keys, &[(started, attempt)])
            .await
            .expect("still_held.lua"),
        None,
        "holding"
    );
    for extend in [
        None,
        Some(Extend::Live(Duration::from_secs(600))),
        Some(Extend::Restore(Duration::from_secs(600))),
    ] {
        assert_eq!(
            set_attempt_status(
                redis,
                keys,
                started,
                attempt,
                sluice_model::CommandStatus::Running,
                "2026-12-01T00:00:01.000Z".into(),
                extend,
                &[],
            )
            .await
            .expect("attempt_status.lua"),
            Mark::NotReady,
            "mark with {extend:?}"
        );
    }
    let bucket = RateKey {
        bucket: bench.command_bucket("job"),
        per_second: 1_000,
        burst: 1_000,
    };
    assert_eq!(
        take_start_tokens(redis, keys, &[bucket])
            .await
            .expect("start_tokens.lua"),
        Retake::NotReady,
        "retake"
    );
    let back = Requeued {
        command_id: started,
        attempt: Some(attempt),
        namespace_id: ns,
        command: "job",
        resource_key: "r1",
        queue_seq: 1,
        status: sluice_model::CommandStatus::RetryWait,
        updated_at: "2026-12-01T00:00:02.000Z".into(),
    };
    assert_eq!(
        requeue(redis, keys, &back).await.expect("requeue.lua"),
        Requeue::NotReady,
        "requeue"
    );
    let end = Ending {
        command_id: started,
        namespace_id: ns,
        command: "job",
        resource_key: "r1",
        limit_keys: &[],
        status: sluice_model::CommandStatus::Succeeded,
        updated_at: "2026-12-01T00:00:03.000Z".into(),
        result: Some("{}".into()),
        error: None,
        retention_ms: 600_000,
    };
    assert_eq!(
        land(redis, keys, &end).await.expect("land.lua"),
        None,
        "land"
    );

    assert_eq!(
        bench.snapshot().await,
        before,
        "a script wrote to a fenced projection"
    );
}
