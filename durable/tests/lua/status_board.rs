//! `status_board.lua` and `land.lua`'s outcome counting, alone in a real Redis: the board reads
//! only its own namespace and live permits, keeps the deepest queues in order, and each
//! command's outcome is counted exactly once whoever lands it, however many times. (The board
//! through the gateway, against PostgreSQL's own figures, is in the gateway's `status_board`
//! tests.)

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_durable::lifecycle::redis::{AdmitLimits, Ending as Landing, land};
use sluice_durable::status_board::{self, OUTCOME_SECONDS, RESOURCES_SCANNED, TOP};
use sluice_redis::AppKeys;
use sluice_testkit::{eventually, now_ms, scan_keys};
use uuid::Uuid;

use crate::lua_fixture;

const TERMINAL: [&str; 5] = ["succeeded", "rejected", "failed", "expired", "cancelled"];

/// The helpers of this file on the shared Lua bench.
enum StatusCalls {}

type LuaBench = lua_fixture::Bench<StatusCalls>;

impl LuaBench {
    /// Queues a command of this bench's namespace the way `accept.lua` leaves it (its status
    /// hash names its namespace and command, which the outcome counting reads).
    async fn queue_waiting(&self, command: &str, resource: &str) -> CommandId {
        let ns = self.namespace.to_string();
        self.queue_command(
            command,
            resource,
            self.next_seq(),
            vec![
                ("status".into(), "accepted".into()),
                ("ns".into(), ns.clone()),
                ("cmd".into(), command.into()),
            ],
            vec![
                "unfinished".into(),
                format!("waiting:{ns}"),
                format!("queued:{ns}:{command}"),
            ],
        )
        .await
    }

    async fn figures(
        &self,
        commands: &[&str],
        limit_keys: &[&str],
        scan: i64,
    ) -> status_board::ProjectionFigures {
        status_board::projection(
            &self.redis,
            &self.keys,
            self.namespace,
            commands,
            limit_keys,
            scan,
        )
        .await
        .expect("status_board.lua")
    }

    async fn zadd(&self, key: &str, score: f64, member: &str) {
        let _: i64 = self
            .redis
            .pool()
            .next()
            .zadd(key, None, None, false, false, (score, member))
            .await
            .expect("zadd");
    }
}

/// Outcomes of every second `figures` shows, per final status.
fn outcome_totals(figures: &status_board::ProjectionFigures) -> BTreeMap<&'static str, i64> {
    let mut totals = BTreeMap::new();
    for o in &figures.outcomes {
        for (status, n) in [
            ("succeeded", o.succeeded),
            ("rejected", o.rejected),
            ("failed", o.failed),
            ("expired", o.expired),
            ("cancelled", o.cancelled),
        ] {
            *totals.entry(status).or_insert(0) += n;
        }
    }
    totals
}

/// `status_board.lua`: the busiest queues are this namespace's non-empty ones among the first `scan`
/// resources with waiting work of its commands, deepest first; another namespace's queue and a
/// served queue still in its command's set never show; permits count only while live; ten whole
/// seconds of outcomes; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lua_reads_its_namespace_and_live_permits_only() {
    let bench = LuaBench::new().await;
    let ns = bench.namespace;
    for _ in 0..3 {
        bench.queue_waiting("claim", "r1").await;
    }
    bench.queue_waiting("claim", "r2").await;
    for _ in 0..2 {
        bench.queue_waiting("ocr", "r3").await;
    }
    // Another namespace's deeper queue, and a queue of this one that admit.lua emptied but has
    // not yet dropped from the ready set.
    let other = Uuid::now_v7();
    let other_suffix = AppKeys::queue_suffix(NamespaceId::from_uuid(other), "claim", "z");
    for i in 0..5 {
        bench
            .zadd(
                &bench.keys.queue_by_suffix(&other_suffix),
                i as f64,
                &Uuid::now_v7().to_string(),
            )
            .await;
    }
    bench
        .zadd(
            &bench
                .keys
                .resource_ready(NamespaceId::from_uuid(other), "claim"),
            0.0,
            &other_suffix,
        )
        .await;
    let stale = bench.suffix("claim", "served");
    // Turn order within claim: r1, r2, the emptied one.
    for (turn, suffix) in [
        &bench.suffix("claim", "r1"),
        &bench.suffix("claim", "r2"),
        &stale,
    ]
    .into_iter()
    .enumerate()
    {
        bench
            .zadd(&bench.keys.resource_ready(ns, "claim"), turn as f64, suffix)
            .await;
    }
    // Permits: live ones and lapsed ones.
    let (ahead, behind) = (now_ms() + 60_000.0, now_ms() - 60_000.0);
    for (key, score) in [
        (bench.keys.application_leases(), ahead),
        (bench.keys.application_leases(), ahead),
        (bench.keys.application_leases(), behind),
        (bench.keys.command_leases(ns, "claim"), ahead),
        (bench.keys.command_leases(ns, "claim"), behind),
        (
            bench
                .keys
                .command_leases(NamespaceId::from_uuid(other), "claim"),
            ahead,
        ),
        (bench.keys.limit_leases(ns, "acct:a"), ahead),
        (bench.keys.limit_leases(ns, "acct:b"), behind),
        (
            bench.keys.resource_leases(&bench.suffix("claim", "r1")),
            ahead,
        ),
    ] {
        bench.zadd(&key, score, &Uuid::now_v7().to_string()).await;
    }
    let mut before = scan_keys(bench.redis.pool(), &bench.keys.pattern()).await;
    before.sort();

    let figures = bench
        .figures(
            &["claim", "ocr", "gone"],
            &["acct:a", "acct:b", "acct:none"],
            RESOURCES_SCANNED,
        )
        .await;
    assert_eq!(figures.generation, Some(1));
    assert!(figures.ready);
    assert_eq!(
        (figures.resources_scanned, figures.resources_waiting),
        (4, 3)
    );
    assert_eq!(figures.application_in_flight, 2);
    assert_eq!(figures.command_in_flight, [1, 0, 0]);
    assert_eq!(figures.limit_key_in_flight, [1, 0, 0]);
    let busiest: Vec<(&str, &str, i64, i64)> = figures
        .busiest
        .iter()
        .map(|b| {
            (
                b.command.as_str(),
                b.resource_key.as_str(),
                b.waiting,
                b.in_flight,
            )
        })
        .collect();
    assert_eq!(
        busiest,
        [
            ("claim", "r1", 3, 1),
            ("ocr", "r3", 2, 0),
            ("claim", "r2", 1, 0)
        ]
    );
    assert_eq!(figures.outcomes.len(), OUTCOME_SECONDS as usize);
    let seconds: Vec<i64> = figures.outcomes.iter().map(|o| o.unix_second).collect();
    assert!(seconds.windows(2).all(|w| w[1] == w[0] + 1), "{seconds:?}");
    let now_s = (now_ms() / 1000.0) as i64;
    assert!(
        (now_s - 2..=now_s).contains(&(seconds[9] + 1)),
        "the last whole second: {seconds:?} at {now_s}"
    );
    assert!(outcome_totals(&figures).values().all(|n| *n == 0));

    // Only the first resource looked at: r1.
    let first = bench.figures(&["claim"], &[], 1).await;
    assert_eq!((first.resources_scanned, first.resources_waiting), (1, 1));
    assert_eq!(first.busiest.len(), 1);
    assert_eq!(first.busiest[0].resource_key, "r1");

    let mut after = scan_keys(bench.redis.pool(), &bench.keys.pattern()).await;
    after.sort();
    assert_eq!(before, after, "status_board.lua created or removed keys");
}

/// `status_board.lua` keeps the [`TOP`] deepest of many queues, deepest first and equal depths by
/// name, whatever the turn order, and counts every non-empty queue it looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lua_keeps_the_deepest_queues_in_order() {
    let bench = LuaBench::new().await;
    // 40 resources, depths 1..=8 in a scrambled turn order (so many ties).
    let mut expected: Vec<(i64, String)> = Vec::new();
    for i in 0..40_i64 {
        let resource = format!("r{:02}", (i * 17) % 40);
        let depth = 1 + (i * 7) % 8;
        for _ in 0..depth {
            bench.queue_waiting("claim", &resource).await;
        }
        bench
            .zadd(
                &bench.keys.resource_ready(bench.namespace, "claim"),
                i as f64,
                &bench.suffix("claim", &resource),
            )
            .await;
        expected.push((depth, resource));
    }
    expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    expected.truncate(TOP as usize);
    let figures = bench.figures(&["claim"], &[], RESOURCES_SCANNED).await;
    let shown: Vec<(i64, String)> = figures
        .busiest
        .iter()
        .map(|b| (b.waiting, b.resource_key.clone()))
        .collect();
    assert_eq!(shown, expected);
    assert_eq!(
        (figures.resources_scanned, figures.resources_waiting),
        (40, 40)
    );
}

/// How one command ends, as the landings of its final status would race in production (every
/// one is `land.lua`, whatever Redis thought of the command).
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// Cancelled or expired while waiting, landed from three callers.
    Waiting(&'static str),
    /// Landed after running, from three callers (a landing made again).
    Landed(&'static str),
    /// Ended by a sweeper while its executor lands the same status.
    Both(&'static str),
    /// `needs_review` first (mirrored before the race: not final, counts nothing), then
    /// decided: counted once, at the decision.
    Reviewed(&'static str),
}

impl Ending {
    fn status(self) -> &'static str {
        match self {
            Ending::Waiting(s) | Ending::Landed(s) | Ending::Both(s) | Ending::Reviewed(s) => s,
        }
    }
}

/// What the mirrors of one command need to know about it.
#[derive(Debug, Clone)]
struct Mirrored {
    id: CommandId,
    resource: String,
}

impl Mirrored {
    fn landed(&self, namespace: NamespaceId, status: &'static str) -> Landing<'_> {
        Landing {
            command_id: self.id,
            namespace_id: namespace,
            command: "claim",
            resource_key: &self.resource,
            limit_keys: &[],
            status: sluice_model::CommandStatus::parse(status).expect("a status"),
            updated_at: "2026-01-01T00:00:00.000Z".into(),
            result: None,
            error: None,
            retention_ms: 60_000,
        }
    }
}

/// `land.lua` raced from eight tasks, three landings per command:
/// each command is counted out once and its outcome counted once, in its final status, and the
/// outcome seconds `status_board.lua` returns add up to exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_outcome_is_counted_once_whoever_mirrors_it() {
    const N: usize = 200;
    let bench = LuaBench::new().await;
    let ns = bench.namespace;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    let mut commands = Vec::with_capacity(N);
    for i in 0..N {
        let resource = format!("r{}", i % 8);
        let id = bench.queue_waiting("claim", &resource).await;
        commands.push(Mirrored { id, resource });
    }
    // Half of them start (admit.lua: executing, permits held).
    let heads = bench
        .admitted_heads(AdmitLimits {
            min_generation: 1,
            max_heads: (N / 2) as u32,
            scan_limit: 100,
            lease_ms: 60_000,
            lookahead: 1,
        })
        .await;
    assert_eq!(heads.len(), N / 2);
    let started: HashSet<CommandId> = heads.iter().map(|h| h.command_id).collect();
    let (mut w, mut s) = (0, 0);
    let mut jobs: Vec<(Mirrored, Ending)> = Vec::new();
    for command in commands {
        let ending = if started.contains(&command.id) {
            s += 1;
            match s % 4 {
                0 => Ending::Landed("succeeded"),
                1 => Ending::Landed("rejected"),
                2 => Ending::Both("expired"),
                _ if s % 8 == 3 => Ending::Reviewed("succeeded"),
                _ => Ending::Reviewed("failed"),
            }
        } else {
            w += 1;
            Ending::Waiting(if w % 2 == 0 { "cancelled" } else { "expired" })
        };
        jobs.push((command, ending));
    }
    let mut expected: BTreeMap<&'static str, i64> = TERMINAL.iter().map(|s| (*s, 0)).collect();
    for (_, ending) in &jobs {
        *expected.get_mut(ending.status()).expect("a final status") += 1;
    }
    // Reviewed ones go to needs_review first, twice: the permits go back, nothing is counted.
    for (command, ending) in &jobs {
        if let Ending::Reviewed(_) = ending {
            for _ in 0..2 {
                land(
                    &bench.redis,
                    &bench.keys,
                    &command.landed(ns, "needs_review"),
                )
                .await
                .expect("land.lua");
            }
        }
    }
    let reviewed = jobs
        .iter()
        .filter(|(_, e)| matches!(e, Ending::Reviewed(_)))
        .count() as i64;
    assert_eq!(
        bench.counter("unfinished").await,
        N as i64,
        "needs_review stays unfinished"
    );
    assert!(reviewed > 0);

    // Three mirror calls per command, shuffled over eight tasks.
    let jobs = Arc::new(jobs);
    let mut calls: Vec<(usize, usize)> = (0..N).flat_map(|j| (0..3).map(move |k| (j, k))).collect();
    {
        use rand::seq::SliceRandom;
        calls.shuffle(&mut rand::rng());
    }
    let calls = Arc::new(Mutex::new(calls));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (bench, calls, jobs) = (bench.clone(), calls.clone(), jobs.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some((j, k)) = calls.lock().expect("calls").pop() else {
                    return;
                };
                let (command, ending) = &jobs[j];
                let _ = k;
                let done = command.landed(ns, ending.status());
                land(&bench.redis, &bench.keys, &done)
                    .await
                    .expect("land.lua")
                    .expect("the projection is ready");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a mirroring task");
    }

    for (command, ending) in jobs.iter() {
        assert_eq!(
            bench.status(command.id).await.as_deref(),
            Some(ending.status()),
            "{command:?} {ending:?}"
        );
    }
    assert_eq!(
        bench.counter("unfinished").await,
        0,
        "each counted out once"
    );
    assert_eq!(bench.waiting().await, 0);
    assert_eq!(bench.counter(&format!("queued:{ns}:claim")).await, 0);
    assert_eq!(
        sluice_testkit::live_leases(bench.redis.pool(), &bench.keys.command_leases(ns, "claim"))
            .await,
        0,
        "every permit given back"
    );
    // Every mirror call ran within the last seconds: once the current second is over, the ten
    // seconds status_board.lua returns hold them all.
    let totals =
        || async { outcome_totals(&bench.figures(&["claim"], &[], RESOURCES_SCANNED).await) };
    let counted = eventually(Duration::from_secs(5), || async {
        totals().await == expected
    })
    .await;
    assert!(
        counted,
        "outcomes {:?}, expected {expected:?}",
        totals().await
    );
}

// ---------------------------------------------------------------------------------------------
// Late mirrors.
// ---------------------------------------------------------------------------------------------

/// A late `needs_review` mirror (the running-deadline sweeper committed `needs_review`, then
/// `:complete` committed `succeeded`, and the sweeper's Redis call arrives last) turns the
/// status hash from `succeeded` back to `needs_review`: ticket polls show `needs_review` for a
/// command PostgreSQL says succeeded, and the next mirror of the final status counts the
/// command out (and its outcome) a second time — unless `land.lua` never moves a terminal hash
/// back to a non-terminal status, which it refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_needs_review_mirror_never_reopens_a_final_status() {
    let bench = LuaBench::new().await;
    let ns = bench.namespace;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    let id = bench.queue_waiting("claim", "r").await;
    let heads = bench
        .admitted_heads(AdmitLimits {
            min_generation: 1,
            max_heads: 1,
            scan_limit: 10,
            lease_ms: 60_000,
            lookahead: 1,
        })
        .await;
    assert_eq!(heads.len(), 1);
    let command = Mirrored {
        id,
        resource: "r".into(),
    };
    let mirror = |status| command.landed(ns, status);
    for status in ["succeeded", "needs_review"] {
        land(&bench.redis, &bench.keys, &mirror(status))
            .await
            .expect("land.lua");
    }
    let after_late = bench.status(id).await;
    land(&bench.redis, &bench.keys, &mirror("succeeded"))
        .await
        .expect("land.lua");
    assert_eq!(
        (after_late.as_deref(), bench.counter("unfinished").await),
        (Some("succeeded"), 0),
        "the status after the late mirror, and unfinished after one more final mirror"
    );
}
