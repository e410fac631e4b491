//! The epoch prelude (`lua/lib/epoch.lua`) deciding when to ask Redis which process it is.
//!
//! Each test runs on a Redis of its own: what the prelude decides depends on the server's
//! `LASTSAVE`, which a `SAVE` by another test would move.

use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, InfoKind};
use sluice_durable::declaration::IntakeBudget;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    Admission, AdmitLimits, IntakeRequest, IntakeVerdict, reserve,
};
use sluice_testkit::{RedisServer, eventually};

use crate::lua_fixture;

enum EpochCalls {}

type Bench = lua_fixture::Bench<EpochCalls>;

/// The run_id of no Redis process.
const FOREIGN_RUN_ID: &str = "0000000000000000000000000000000000000000";

impl Bench {
    /// Redis's clock, in milliseconds.
    async fn redis_now_ms(&self) -> i64 {
        let (seconds, micros): (String, String) = self.command("TIME").await;
        let seconds: i64 = seconds.parse().expect("TIME seconds");
        let micros: i64 = micros.parse().expect("TIME microseconds");
        seconds * 1000 + micros / 1000
    }

    /// A command with no arguments that fred has no method for.
    async fn command<R: FromValue>(&self, name: &'static str) -> R {
        let command = CustomCommand::new_static(name, ClusterHash::Random, false);
        self.redis
            .pool()
            .next()
            .custom(command, Vec::<String>::new())
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Makes the projection's meta what a process restarted from an RDB saved in the second it
    /// started would load: the current `LASTSAVE` (a `SAVE` just now), a verification just
    /// after it, and the run_id of the process that wrote the file.
    async fn pose_as_restored_in_the_second_of_its_save(&self) {
        let client = self.redis.pool().next();
        let _: Value = self.command("SAVE").await;
        let lastsave: i64 = client.lastsave().await.expect("LASTSAVE");
        let checked_at = self.redis_now_ms().await;
        self.record_verification(FOREIGN_RUN_ID, lastsave, checked_at)
            .await;
    }

    async fn record_verification(&self, run_id: &str, lastsave: i64, checked_at: i64) {
        let _: () = self
            .redis
            .pool()
            .next()
            .hset(
                self.keys.meta(),
                [
                    ("run_id", run_id.to_string()),
                    ("lastsave", lastsave.to_string()),
                    ("checked_at", checked_at.to_string()),
                ],
            )
            .await
            .expect("hset meta");
    }

    /// The value after `prefix` on a line of `INFO <kind>`.
    async fn info_field(&self, kind: InfoKind, prefix: &str) -> Option<String> {
        let info: String = self
            .redis
            .pool()
            .next()
            .info(Some(kind))
            .await
            .expect("INFO");
        info.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .map(|value| value.trim().to_string())
    }

    /// `run_id` of this server, as a verification by it records.
    async fn run_id(&self) -> String {
        self.info_field(InfoKind::Server, "run_id:")
            .await
            .expect("INFO server names run_id")
    }

    /// How many times scripts and clients asked `INFO` (Redis counts calls from scripts too).
    async fn info_calls(&self) -> u64 {
        self.info_field(InfoKind::CommandStats, "cmdstat_info:calls=")
            .await
            .and_then(|rest| rest.split(',').next().map(str::to_string))
            .map_or(0, |calls| calls.parse().expect("a count of calls"))
    }

    async fn intake(&self) -> IntakeVerdict {
        let budget = IntakeBudget {
            per_second: 1_000_000,
            burst: 1_000_000,
            max_in_flight: 1_000_000,
            per_subject: None,
        };
        let field = format!("3:sub{}", uuid::Uuid::new_v4());
        let digest = "a".repeat(64);
        let request = IntakeRequest {
            keys: &self.keys,
            min_generation: 1,
            namespace_id: self.namespace,
            command: "claim",
            subject: "sub",
            request_key_field: &field,
            content_sha256_hex: &digest,
            command_id: CommandId::new_v7(),
            max_unfinished: 1_000_000,
            max_waiting: 1_000_000,
            max_queue: 1_000_000,
            intake: &budget,
            reservation_ttl_ms: 60_000,
        };
        reserve(&self.redis, &request).await.expect("intake.lua")
    }

    async fn admit(&self) -> Admission {
        self.admission(AdmitLimits {
            min_generation: 1,
            max_heads: 10,
            scan_limit: 256,
            lease_ms: 60_000,
            lookahead: 16,
        })
        .await
    }

    /// Every key of the application but its meta (where a refusal marks the projection lost).
    async fn snapshot_but_meta(&self) -> Vec<(String, String)> {
        let meta = self.keys.meta();
        let mut keys = self.snapshot().await;
        keys.retain(|(key, _)| *key != meta);
        keys
    }

    async fn marked_ready(&self) -> Option<String> {
        self.hash(&self.keys.meta()).await.get("ready").cloned()
    }
}

/// A bench on a Redis of the test's own, with `claim` configured and two commands queued.
async fn own_bench() -> (RedisServer, std::sync::Arc<Bench>) {
    let server = RedisServer::start();
    let bench = Bench::on(&server.url()).await;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    bench.queue_accepted("claim", "r", 2).await;
    (server, bench)
}

/// A Redis restarted from an RDB saved in the second it started shows the `LASTSAVE` the
/// projection recorded and a verification that looks recent: only its run_id tells it is
/// another process. Admission asks, so no permit the RDB lost is granted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_asks_the_process_in_the_seconds_after_a_save() {
    let (_server, bench) = own_bench().await;
    bench.pose_as_restored_in_the_second_of_its_save().await;
    assert_eq!(bench.admit().await, Admission::NotReady);
    assert_eq!(
        bench.marked_ready().await.as_deref(),
        Some("0"),
        "the projection is marked for a rebuild"
    );
    let leases = bench
        .zmembers(&bench.keys.command_leases(bench.namespace, "claim"))
        .await;
    assert!(leases.is_empty(), "no permit was granted: {leases:?}");
}

/// The same state for intake: it refuses to reserve (a queue sequence the RDB lost would be
/// handed out a second time) and touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intake_asks_the_process_in_the_seconds_after_a_save() {
    let (_server, bench) = own_bench().await;
    bench.pose_as_restored_in_the_second_of_its_save().await;
    let before = bench.snapshot_but_meta().await;
    assert!(matches!(bench.intake().await, IntakeVerdict::NotReady));
    assert_eq!(
        bench.snapshot_but_meta().await,
        before,
        "a refused intake changes nothing"
    );
    assert_eq!(bench.marked_ready().await.as_deref(), Some("0"));
}

/// Once the last save is two seconds old, a projection verified by this process a moment ago is
/// trusted without asking: the shortcut that keeps `INFO` off the hot path still works, and it
/// still asks once the verification is a second old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_save_and_a_fresh_verification_do_not_ask() {
    let (_server, bench) = own_bench().await;
    let client = bench.redis.pool().next();
    let lastsave: i64 = client.lastsave().await.expect("LASTSAVE");
    let save_is_old = eventually(Duration::from_secs(10), || async {
        bench.redis_now_ms().await - lastsave * 1000 >= 2_500
    })
    .await;
    assert!(save_is_old, "Redis's clock never passed LASTSAVE + 2.5 s");
    let run_id = bench.run_id().await;
    let verified_at = bench.redis_now_ms().await;
    bench
        .record_verification(&run_id, lastsave, verified_at)
        .await;
    let asked_before = bench.info_calls().await;
    for _ in 0..20 {
        assert!(matches!(
            bench.intake().await,
            IntakeVerdict::Reserved { .. }
        ));
    }
    let asked_after = bench.info_calls().await;
    // Redis counts a command after it ran: of our two INFO commandstats calls, the second sees
    // the first, so 1 means no script asked.
    assert_eq!(
        asked_after - asked_before,
        1,
        "20 intakes within a second of a verification asked INFO"
    );
    bench
        .record_verification(&run_id, lastsave, verified_at - 1_000)
        .await;
    let asked_before = bench.info_calls().await;
    assert!(matches!(
        bench.intake().await,
        IntakeVerdict::Reserved { .. }
    ));
    assert_eq!(
        bench.info_calls().await - asked_before,
        2,
        "a verification a second old is made again"
    );
}

/// The reads that tell positions (`ticket.lua`, `waiting.lua`) trust the projection only in the
/// process that built or verified it, as the life-cycle scripts do: a Redis restarted from an
/// older snapshot holds its queues as they were then, and a rank read there is not the truth
/// (the model checker saw a poll told 5 where the rank had been 3 and the rebuild gave 2). They
/// answer not ready and mark the projection for its rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn position_reads_ask_the_process_too() {
    use sluice_redis::ticket::read_status;
    use sluice_redis::waiting::{RunLimits, pull};

    let (_server, bench) = own_bench().await;
    let waiting = bench.queue_accepted("claim", "r", 1).await[0];
    let before = read_status(&bench.redis, &bench.keys, waiting, None)
        .await
        .expect("ticket.lua");
    assert!(before.ready, "trusted before: {before:?}");

    bench.pose_as_restored_in_the_second_of_its_save().await;
    let after = read_status(&bench.redis, &bench.keys, waiting, None)
        .await
        .expect("ticket.lua");
    assert!(!after.ready, "a restored process is not trusted: {after:?}");
    assert_eq!(bench.marked_ready().await.as_deref(), Some("0"));

    // The pull of the gateway's memory, on the same state (marked ready again first, so only
    // the process check can refuse it).
    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(bench.keys.meta(), [("ready", "1")])
        .await
        .expect("hset meta");
    bench.pose_as_restored_in_the_second_of_its_save().await;
    let runs = RunLimits {
        entries: 1024,
        reads: 1024,
    };
    let suffixes = vec![bench.suffix("claim", "r")];
    let snapshot = pull(&bench.redis, &bench.keys, &suffixes, 0, 1024, runs)
        .await
        .expect("waiting.lua");
    assert!(!snapshot.ready, "a restored process is not trusted");
    assert_eq!(bench.marked_ready().await.as_deref(), Some("0"));
}
