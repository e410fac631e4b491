//! `admit.lua` alone against a real Redis: permits, round robin, start buckets, lease expiry,
//! queue order and counters, with the `cfg` hash and the queues written by the test itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use sluice_durable::ids::{CommandId, NamespaceId};
use sluice_durable::lifecycle::redis::{Admission, AdmitLimits, AdmittedHead};
use sluice_redis::AppKeys;

use crate::lua_fixture;
use sluice_testkit::eventually;

/// A long lease: nothing lapses during a test unless it asks for it.
const LONG_LEASE_MS: u64 = 60_000;

/// The helpers of this file on the shared bench: commands queued the way these tests need them.
enum AdmitCalls {}

type Bench = lua_fixture::Bench<AdmitCalls>;

impl Bench {
    async fn admit_with(&self, min_generation: i64, max_heads: u32, lease_ms: u64) -> Admission {
        self.admission(limits(min_generation, max_heads, lease_ms))
            .await
    }

    async fn heads_with_lease(&self, max_heads: u32, lease_ms: u64) -> Vec<AdmittedHead> {
        self.admitted_heads(limits(1, max_heads, lease_ms)).await
    }

    async fn heads(&self, max_heads: u32) -> Vec<AdmittedHead> {
        self.heads_with_lease(max_heads, LONG_LEASE_MS).await
    }

    async fn queued(&self, command: &str) -> i64 {
        self.counter(&format!("queued:{}", self.nscmd(command)))
            .await
    }

    async fn command_leases(&self, command: &str) -> Vec<String> {
        self.zmembers(&self.keys.command_leases(self.namespace, command))
            .await
    }

    async fn queue(&self, command: &str, resource: &str) -> Vec<String> {
        self.zmembers(&self.keys.queue(self.namespace, command, resource))
            .await
    }

    /// Commands with waiting work (the first round-robin level).
    async fn ready(&self) -> Vec<String> {
        self.zmembers(&self.keys.ready()).await
    }

    /// A command's resources with waiting work (the second level).
    async fn ready_resources(&self, command: &str) -> Vec<String> {
        self.zmembers(&self.keys.resource_ready(self.namespace, command))
            .await
    }

    /// Gives one permit back the way `land.lua` does.
    async fn release(&self, command: &str, head: &AdmittedHead) {
        let client = self.redis.pool().next();
        let id = head.command_id.to_string();
        let _: i64 = client
            .zrem(self.keys.command_leases(self.namespace, command), &id)
            .await
            .expect("zrem command lease");
        let _: i64 = client
            .zrem(self.keys.resource_leases(&head.queue_suffix), &id)
            .await
            .expect("zrem resource lease");
    }
}

/// `admit.lua`'s limits in these tests: 256 queues scanned, a lookahead of 16.
fn limits(min_generation: i64, max_heads: u32, lease_ms: u64) -> AdmitLimits {
    AdmitLimits {
        min_generation,
        max_heads,
        scan_limit: 256,
        lease_ms,
        lookahead: 16,
    }
}

fn ids(heads: &[AdmittedHead]) -> Vec<CommandId> {
    heads.iter().map(|h| h.command_id).collect()
}

/// Heads per queue suffix.
fn per_suffix(heads: &[AdmittedHead]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for head in heads {
        *counts.entry(head.queue_suffix.clone()).or_insert(0) += 1;
    }
    counts
}

/// Eight tasks race `admit.lua` over one queue of 100 with `max_in_flight` 5: exactly five heads
/// come out in total, five permits are held and the counters drop by exactly five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_is_exact_under_concurrency() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "5 1000000 1000000 0")], &[])
        .await;
    let queued = bench.queue_accepted("claim", "r1", 100).await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let bench = bench.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..10 {
                mine.extend(bench.heads(3).await);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    assert_eq!(all.len(), 5, "exactly max_in_flight heads: {all:?}");
    let unique: HashSet<CommandId> = ids(&all).into_iter().collect();
    assert_eq!(unique.len(), 5, "no head handed out twice");
    let expected: HashSet<CommandId> = queued[..5].iter().copied().collect();
    assert_eq!(unique, expected, "the five oldest commands");
    let leases: HashSet<String> = bench.command_leases("claim").await.into_iter().collect();
    assert_eq!(
        leases,
        expected
            .iter()
            .map(CommandId::to_string)
            .collect::<HashSet<_>>()
    );
    assert_eq!(bench.queue("claim", "r1").await.len(), 95);
    assert_eq!(bench.waiting().await, 95);
    assert_eq!(bench.queued("claim").await, 95);
}

/// Three resources of ten: six heads are two from each; later calls continue with the least
/// recently served resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_are_served_round_robin() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    let mut queued = HashMap::new();
    for resource in ["ra", "rb", "rc"] {
        queued.insert(
            bench.suffix("claim", resource),
            bench.queue_accepted("claim", resource, 10).await,
        );
    }
    let first = bench.heads(6).await;
    assert_eq!(first.len(), 6);
    let counts = per_suffix(&first);
    assert_eq!(counts.len(), 3, "every resource served: {counts:?}");
    assert!(counts.values().all(|n| *n == 2), "two each: {counts:?}");
    // One head per resource per pass: the first three heads are three different resources.
    let order: Vec<String> = first[..3].iter().map(|h| h.queue_suffix.clone()).collect();
    assert_eq!(order.iter().collect::<HashSet<_>>().len(), 3);
    assert_eq!(
        first[3..]
            .iter()
            .map(|h| h.queue_suffix.clone())
            .collect::<Vec<_>>(),
        order,
        "the second pass visits them in the same order"
    );

    // Four heads: one full pass plus the first of the order again.
    let second = bench.heads(4).await;
    let suffixes: Vec<String> = second.iter().map(|h| h.queue_suffix.clone()).collect();
    assert_eq!(
        suffixes,
        vec![
            order[0].clone(),
            order[1].clone(),
            order[2].clone(),
            order[0].clone()
        ]
    );
    // Now the least recently served are order[1], then order[2], then order[0].
    let third: Vec<String> = bench
        .heads(2)
        .await
        .into_iter()
        .map(|h| h.queue_suffix)
        .collect();
    assert_eq!(third, vec![order[1].clone(), order[2].clone()]);
    let mut singles = Vec::new();
    for _ in 0..4 {
        let head = bench.heads(1).await;
        assert_eq!(head.len(), 1);
        singles.push(head[0].queue_suffix.clone());
    }
    assert_eq!(
        singles,
        vec![
            order[0].clone(),
            order[1].clone(),
            order[2].clone(),
            order[0].clone()
        ],
        "one head at a time rotates too"
    );
    // Within each resource the heads came out in queue order.
    let mut all = first;
    all.extend(second);
    for (suffix, ids_in_order) in &queued {
        let taken: Vec<CommandId> = all
            .iter()
            .filter(|h| &h.queue_suffix == suffix)
            .map(|h| h.command_id)
            .collect();
        assert_eq!(taken[..], ids_in_order[..taken.len()], "{suffix}");
    }
    assert_eq!(bench.waiting().await, 30 - 6 - 4 - 2 - 4);
}

/// A resource at its per-resource limit is skipped; its neighbour is still served; a released
/// permit lets exactly one more head of that resource in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_resource_is_skipped_until_a_permit_is_released() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1000 1000000 1000000 1")], &[])
        .await;
    let a = bench.queue_accepted("claim", "ra", 5).await;
    let b = bench.queue_accepted("claim", "rb", 5).await;
    let first = bench.heads(10).await;
    let got: HashSet<CommandId> = ids(&first).into_iter().collect();
    assert_eq!(got, HashSet::from([a[0], b[0]]), "one head per resource");
    assert!(
        bench.heads(10).await.is_empty(),
        "both resources are at their limit"
    );
    assert_eq!(
        bench
            .zmembers(&bench.keys.resource_leases(&bench.suffix("claim", "ra")))
            .await,
        vec![a[0].to_string()]
    );
    let head_a = first.iter().find(|h| h.command_id == a[0]).expect("head a");
    bench.release("claim", head_a).await;
    let again = bench.heads(10).await;
    assert_eq!(ids(&again), vec![a[1]], "only the released resource moves");
    assert!(bench.heads(10).await.is_empty());
    assert_eq!(bench.waiting().await, 7);
    // Both queues are still ready: saturated is not empty.
    assert_eq!(bench.ready_resources("claim").await.len(), 2);
    assert_eq!(bench.ready().await, vec![bench.nscmd("claim")]);
}

/// A command at `max_in_flight` is skipped, not waited on: another command's resources are
/// still served in the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_command_does_not_block_another() {
    let bench = Bench::new().await;
    bench
        .configure(
            &[
                ("busy", "1 1000000 1000000 0"),
                ("free", "100 1000000 1000000 0"),
            ],
            &[],
        )
        .await;
    let busy = bench.queue_accepted("busy", "r", 10).await;
    let free = bench.queue_accepted("free", "r", 10).await;
    let first = bench.heads(4).await;
    let got: Vec<CommandId> = ids(&first);
    assert_eq!(got.iter().filter(|id| busy.contains(id)).count(), 1);
    assert_eq!(got.iter().filter(|id| free.contains(id)).count(), 3);
    let second = ids(&bench.heads(4).await);
    assert_eq!(
        second,
        free[3..7].to_vec(),
        "busy is full, free keeps going"
    );
    assert_eq!(bench.queue("busy", "r").await.len(), 9);
    assert_eq!(bench.queued("busy").await, 9);
    assert_eq!(bench.queued("free").await, 3);
}

/// per_second 1, burst 3: the first call starts three, the next ones nothing until a token has
/// accrued; over the run never more than burst + rate × elapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_bucket_limits_starts() {
    let bench = Bench::new().await;
    bench.configure(&[("claim", "1000 1 3 0")], &[]).await;
    bench.queue_accepted("claim", "ra", 10).await;
    bench.queue_accepted("claim", "rb", 10).await;
    let started = Instant::now();
    let first = bench.heads(20).await;
    assert_eq!(first.len(), 3, "the burst");
    let second = bench.heads(20).await;
    assert!(second.is_empty(), "no token left: {second:?}");
    let bucket = bench.hash(&bench.command_bucket("claim")).await;
    assert!(
        bucket.contains_key("tokens"),
        "bucket persisted: {bucket:?}"
    );
    let refilled = eventually(Duration::from_secs(3), || {
        let bench = bench.clone();
        async move { !bench.heads(20).await.is_empty() }
    })
    .await;
    let refilled_after = started.elapsed();
    assert!(refilled, "a token accrues within three seconds");
    assert!(
        refilled_after >= Duration::from_millis(900),
        "at 1/s a token came back after only {refilled_after:?}"
    );
    // Every head holds a permit (60 s leases): the permits count the starts.
    let total = bench.command_leases("claim").await.len();
    let elapsed = started.elapsed().as_secs_f64();
    assert!(total > first.len());
    assert!(
        (total as f64) <= 3.0 + elapsed + 1.0,
        "{total} starts in {elapsed:.2} s"
    );
    assert_eq!(bench.waiting().await, 20 - total as i64);
}

/// A permit leased for 1 ms lapses: once it has expired it no longer counts and the next call
/// admits again; the lapsed member is left for the executors' sweeper to reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_give_their_permit_back() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1 1000000 1000000 1")], &[])
        .await;
    let queued = bench.queue_accepted("claim", "r", 3).await;
    let first = bench.heads_with_lease(5, 1).await;
    assert_eq!(ids(&first), vec![queued[0]]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = Arc::new(std::sync::Mutex::new(Vec::new()));
    let lapsed = eventually(Duration::from_secs(2), || {
        let bench = bench.clone();
        let second = second.clone();
        async move {
            let heads = bench.heads(5).await;
            let got = !heads.is_empty();
            second.lock().expect("lock").extend(heads);
            got
        }
    })
    .await;
    assert!(lapsed, "the expired permit comes back");
    assert_eq!(ids(&second.lock().expect("lock")), vec![queued[1]]);
    let mut leases = bench.command_leases("claim").await;
    leases.sort();
    let mut expected = vec![queued[0].to_string(), queued[1].to_string()];
    expected.sort();
    assert_eq!(
        leases, expected,
        "the lapsed member stays (uncounted) for the sweeper to reconcile; the new one is held"
    );
    assert!(
        bench.heads(5).await.is_empty(),
        "a 60 s lease does not lapse"
    );
}

/// Heads come out lowest sequence first whatever the insertion order, leave their queue, turn
/// `executing`; an emptied queue leaves the ready set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_come_out_in_queue_order_and_empty_queues_leave_ready() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    let mut by_seq = Vec::new();
    for seq in [50, 10, 40, 20, 30] {
        by_seq.push((seq, bench.queue_accepted_with_seq("claim", "r", seq).await));
    }
    by_seq.sort();
    let other = bench.queue_accepted("claim", "other", 3).await;
    let suffix = bench.suffix("claim", "r");

    let first = bench.heads(2).await;
    let from_r: Vec<&AdmittedHead> = first.iter().filter(|h| h.queue_suffix == suffix).collect();
    assert_eq!(from_r.len(), 1);
    assert_eq!(from_r[0].command_id, by_seq[0].1);
    assert_eq!(from_r[0].queue_seq, 10);

    let rest = bench.heads(100).await;
    let rest_r: Vec<(i64, CommandId)> = rest
        .iter()
        .filter(|h| h.queue_suffix == suffix)
        .map(|h| (h.queue_seq, h.command_id))
        .collect();
    assert_eq!(rest_r, by_seq[1..].to_vec(), "lowest sequence first");
    assert_eq!(first.len() + rest.len(), 8);
    assert!(bench.queue("claim", "r").await.is_empty());
    assert!(bench.queue("claim", "other").await.is_empty());
    for (_, id) in &by_seq {
        assert_eq!(bench.status(*id).await.as_deref(), Some("executing"));
    }
    for id in &other {
        assert_eq!(bench.status(*id).await.as_deref(), Some("executing"));
    }
    assert!(
        bench.ready().await.is_empty(),
        "empty queues left the ready set"
    );
    assert!(bench.heads(100).await.is_empty());
    assert_eq!(bench.waiting().await, 0);
    assert_eq!(bench.queued("claim").await, 0);
}

/// An older generation than required, or a projection not marked ready, is NOT_READY and
/// touches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_when_the_generation_is_older_or_the_projection_not_ready() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    let queued = bench.queue_accepted("claim", "r", 3).await;
    assert_eq!(
        bench.admit_with(2, 10, LONG_LEASE_MS).await,
        Admission::NotReady
    );
    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(bench.keys.meta(), [("ready", "0")])
        .await
        .expect("hset");
    assert_eq!(
        bench.admit_with(1, 10, LONG_LEASE_MS).await,
        Admission::NotReady
    );
    assert_eq!(bench.queue("claim", "r").await.len(), 3);
    assert!(bench.command_leases("claim").await.is_empty());
    assert_eq!(bench.waiting().await, 3);
    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(bench.keys.meta(), [("ready", "1"), ("generation", "2")])
        .await
        .expect("hset");
    assert_eq!(
        ids(&bench.heads_with_lease(10, LONG_LEASE_MS).await),
        queued,
        "ready at generation 2 satisfies min_generation 1"
    );
}

/// A command without a `cfg` entry (no executor can run it) is never admitted and stays ready;
/// once its spec is written it moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_without_a_spec_is_never_admitted() {
    let bench = Bench::new().await;
    bench
        .configure(&[("claim", "1000 1000000 1000000 0")], &[])
        .await;
    let unknown = bench.queue_accepted("webhook", "r", 3).await;
    let known = bench.queue_accepted("claim", "r", 2).await;
    let heads = bench.heads(10).await;
    assert_eq!(ids(&heads), known, "only the configured command");
    assert!(bench.heads(10).await.is_empty());
    assert_eq!(bench.queue("webhook", "r").await.len(), 3);
    assert_eq!(bench.queued("webhook").await, 3);
    assert_eq!(bench.status(unknown[0]).await.as_deref(), Some("accepted"));
    assert!(
        bench.ready().await.contains(&bench.nscmd("webhook")),
        "skipped, not dropped from the ready set"
    );
    assert_eq!(
        bench.ready_resources("webhook").await,
        vec![bench.suffix("webhook", "r")]
    );
    bench
        .configure(
            &[
                ("claim", "1000 1000000 1000000 0"),
                ("webhook", "1000 1000000 1000000 0"),
            ],
            &[],
        )
        .await;
    assert_eq!(ids(&bench.heads(10).await), unknown);
}

/// `waiting:<ns>` and `queued:<ns>:<cmd>` drop by exactly the number of heads, per command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_counters_drop_by_exactly_the_heads() {
    let bench = Bench::new().await;
    bench
        .configure(
            &[
                ("claim", "1000 1000000 1000000 0"),
                ("enroll", "2 1000000 1000000 0"),
            ],
            &[],
        )
        .await;
    bench.queue_accepted("claim", "r1", 6).await;
    bench.queue_accepted("claim", "r2", 6).await;
    bench.queue_accepted("enroll", "r1", 5).await;
    assert_eq!(bench.waiting().await, 17);
    let heads = bench.heads(7).await;
    assert_eq!(heads.len(), 7);
    let enroll_prefix = format!("{}:", bench.nscmd("enroll"));
    let enroll = heads
        .iter()
        .filter(|h| h.queue_suffix.starts_with(&enroll_prefix))
        .count() as i64;
    assert_eq!(enroll, 2, "enroll capped at its max_in_flight");
    assert_eq!(bench.waiting().await, 17 - 7);
    assert_eq!(bench.queued("claim").await, 12 - (7 - enroll));
    assert_eq!(bench.queued("enroll").await, 5 - enroll);
    let more = bench.heads(100).await.len() as i64;
    assert_eq!(more, 12 - (7 - enroll));
    assert_eq!(bench.waiting().await, 3);
    assert_eq!(bench.queued("claim").await, 0);
    assert_eq!(bench.queued("enroll").await, 3);
}

/// What keeps every resource of the `hog` command from starting in the starvation tests below.
#[derive(Debug, Clone, Copy)]
enum Blocker {
    /// Its `max_in_flight` (1) is held.
    Permits,
    /// Its start bucket is empty.
    Tokens,
    /// Every head shares one limit key whose only permit is held.
    LimitKey,
    /// No executor can run it: no `cfg` entry.
    Configuration,
}

/// Blocked resources of one command, however many, never delay another command or another
/// namespace: with 1,000 resources of `hog` blocked (by permits, tokens, a limit key, or its
/// configuration) ahead of them in turn order, the first `admit.lua` call starts the waiting
/// head of another command and the one of another namespace, and looks at no more of `hog`'s
/// resources than its scan limit allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_number_of_blocked_resources_delays_another_command_or_namespace() {
    const BLOCKED: usize = 1_000;
    const SCAN: u32 = 64;
    for blocker in [
        Blocker::Permits,
        Blocker::Tokens,
        Blocker::LimitKey,
        Blocker::Configuration,
    ] {
        let bench = Bench::new().await;
        let ns = bench.namespace;
        let hog_spec = match blocker {
            Blocker::Permits => Some("1 1000000 1000000 0"),
            Blocker::Tokens => Some("1000 1 1 0"),
            Blocker::LimitKey => Some("1000 1000000 1000000 0"),
            Blocker::Configuration => None,
        };
        let mut commands = vec![("quick", "1000 1000000 1000000 0")];
        commands.extend(hog_spec.map(|spec| ("hog", spec)));
        bench.configure(&commands, &[("acct:{a}", "1 0 0")]).await;
        // Another namespace's command, configured in the same `cfg` hash.
        let other_ns = NamespaceId::new_v7();
        let _: () = bench
            .redis
            .pool()
            .next()
            .hset(
                bench.keys.admission_config(),
                (format!("{other_ns}:quick"), "1000 1000000 1000000 0"),
            )
            .await
            .expect("cfg of the other namespace");
        let lim = match blocker {
            Blocker::LimitKey => vec![(
                "lim".to_string(),
                serde_json::json!([["acct:{a}", "acct:x"]]).to_string(),
            )],
            _ => vec![],
        };
        for i in 0..BLOCKED {
            let mut fields = vec![("status".to_string(), "accepted".to_string())];
            fields.extend(lim.clone());
            bench
                .queue_command(
                    "hog",
                    &format!("r{i:04}"),
                    bench.next_seq(),
                    fields,
                    vec![format!("waiting:{ns}"), format!("queued:{ns}:hog")],
                )
                .await;
        }
        // What holds them back.
        let client = bench.redis.pool().next();
        match blocker {
            Blocker::Permits => {
                bench
                    .hold_forever(&bench.keys.command_leases(ns, "hog"))
                    .await
            }
            Blocker::Tokens => {
                // Last refilled in 2100: no token accrues during the test.
                let _: () = client
                    .hset(
                        bench.command_bucket("hog"),
                        [("tokens", "0"), ("ts", "4102444800000")],
                    )
                    .await
                    .expect("an empty bucket");
            }
            Blocker::LimitKey => {
                bench
                    .hold_forever(&bench.keys.limit_leases(ns, "acct:x"))
                    .await
            }
            Blocker::Configuration => {}
        }
        // The two heads that can start, last in turn order (hog's resources came first).
        let quick = bench.queue_accepted("quick", "q", 1).await[0];
        let other = CommandId::new_v7();
        let other_suffix = AppKeys::queue_suffix(other_ns, "quick", "q");
        let _: i64 = client
            .zadd(
                bench.keys.queue_by_suffix(&other_suffix),
                None,
                None,
                false,
                false,
                (1.0, other.to_string()),
            )
            .await
            .expect("queue of the other namespace");
        let _: i64 = client
            .zadd(
                bench.keys.resource_ready(other_ns, "quick"),
                None,
                None,
                false,
                false,
                (1.0, other_suffix.as_str()),
            )
            .await
            .expect("its ready resource");
        let _: i64 = client
            .zadd(
                bench.keys.ready(),
                None,
                None,
                false,
                false,
                (1.0, format!("{other_ns}:quick")),
            )
            .await
            .expect("its ready command");
        let hog_before = bench.zscores(&bench.keys.resource_ready(ns, "hog")).await;

        let heads = bench
            .admitted_heads(AdmitLimits {
                min_generation: 1,
                max_heads: 10,
                scan_limit: SCAN,
                lease_ms: LONG_LEASE_MS,
                lookahead: 16,
            })
            .await;
        let started: HashSet<CommandId> = ids(&heads).into_iter().collect();
        assert_eq!(
            started,
            HashSet::from([quick, other]),
            "{blocker:?}: the first call starts both other heads"
        );
        let hog_after = bench.zscores(&bench.keys.resource_ready(ns, "hog")).await;
        let looked_at = hog_before
            .iter()
            .filter(|(member, score)| hog_after.get(*member) != Some(score))
            .count();
        assert!(
            looked_at <= SCAN as usize,
            "{blocker:?}: the call looked at {looked_at} of hog's resources, more than its scan limit"
        );
        assert_eq!(
            bench.queued("hog").await,
            BLOCKED as i64,
            "{blocker:?}: nothing of hog started"
        );
    }
}

/// Blocked resources rotate: with 300 resources of one command blocked by a limit key and one
/// free resource behind them, repeated calls reach the free one within a bounded number of calls
/// (the scan limit's share per call), where a window that never moves would never reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_resources_of_a_command_rotate_until_a_free_one_is_reached() {
    let bench = Bench::new().await;
    let ns = bench.namespace;
    bench
        .configure(
            &[("job", "1000 1000000 1000000 0")],
            &[("acct:{a}", "1 0 0")],
        )
        .await;
    let lim = serde_json::json!([["acct:{a}", "acct:x"]]).to_string();
    for i in 0..300 {
        bench
            .queue_command(
                "job",
                &format!("r{i:03}"),
                bench.next_seq(),
                vec![
                    ("status".to_string(), "accepted".to_string()),
                    ("lim".to_string(), lim.clone()),
                ],
                vec![format!("waiting:{ns}"), format!("queued:{ns}:job")],
            )
            .await;
    }
    bench
        .hold_forever(&bench.keys.limit_leases(ns, "acct:x"))
        .await;
    let free = bench.queue_accepted("job", "z-free", 1).await[0];
    let limits = AdmitLimits {
        min_generation: 1,
        max_heads: 10,
        scan_limit: 64,
        lease_ms: LONG_LEASE_MS,
        lookahead: 1,
    };
    let mut calls = 0;
    let started = loop {
        calls += 1;
        let heads = bench.admitted_heads(limits).await;
        if !heads.is_empty() {
            break heads;
        }
        assert!(
            calls < 10,
            "the free resource was not reached in {calls} calls"
        );
    };
    assert_eq!(ids(&started), vec![free]);
    assert!(calls <= 301 / 64 + 1, "reached after {calls} calls");
}
