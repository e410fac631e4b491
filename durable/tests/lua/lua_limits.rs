//! Limit keys against a real Redis: `admit.lua` takes every permit and start token of a command's
//! limit keys or none, lets the next of the first `lookahead` commands pass a head held back only
//! by its own keys, and records the leases it took in `held`; `land.lua` and `requeue.lua` release
//! exactly those; `start_tokens.lua` takes a token from every bucket or none.
//! The `cfg` hash, queues and status hashes are written by the test itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use fred::prelude::*;
use serde_json::{Map, Value as Json, json};
use sluice_durable::declaration::{parse, render_limit_keys};
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{
    AdmitLimits, AdmittedHead, RateKey, Requeue, Requeued, Retake, requeue, take_start_tokens,
};
use sluice_redis::admission_config::{admission_spec, limit_specs, write_admission_config};
use tokio::sync::mpsc;

use crate::lua_fixture;

/// Permissive numbers for a command: its own limits never stand in the way.
const OPEN: &str = "100000 1000000 1000000 0";
/// A long lease: nothing lapses during a test.
const LEASE_MS: u64 = 60_000;
const LOOKAHEAD: u32 = 16;

/// The helpers of this file on the shared bench: the limit keys these tests write and read.
enum LimitKeys {}

type Bench = lua_fixture::Bench<LimitKeys>;

impl Bench {
    async fn push(&self, command: &str, resource: &str, lim: &[(&str, &str)]) -> CommandId {
        self.queue_limited(command, resource, lim).await
    }

    async fn admit_with(&self, max_heads: u32, lookahead: u32) -> Vec<AdmittedHead> {
        self.admitted_heads(AdmitLimits {
            min_generation: 1,
            max_heads,
            scan_limit: 256,
            lease_ms: LEASE_MS,
            lookahead,
        })
        .await
    }

    async fn admit(&self, max_heads: u32) -> Vec<AdmittedHead> {
        self.admit_with(max_heads, LOOKAHEAD).await
    }

    /// `land.lua` for the command `id` of `command` in `resource`: whether it counted the command
    /// out.
    async fn finish(&self, command: &str, resource: &str, id: CommandId, status: &str) -> bool {
        self.land(command, resource, id, status)
            .await
            .expect("the projection is ready")
    }

    /// Redis time in milliseconds, the clock every script uses.
    async fn now_ms(&self) -> i64 {
        self.redis.pool().next()
            .eval(
                "local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)",
                Vec::<String>::new(),
                Vec::<String>::new(),
            )
            .await
            .expect("TIME")
    }

    fn limit_leases(&self, key: &str) -> String {
        self.keys.limit_leases(self.namespace, key)
    }

    fn limit_bucket(&self, key: &str) -> String {
        self.keys.limit_bucket(self.namespace, key)
    }

    fn command_leases(&self, command: &str) -> String {
        self.keys.command_leases(self.namespace, command)
    }

    async fn members(&self, key: &str) -> HashSet<String> {
        self.zmembers(key).await.into_iter().collect()
    }

    /// Members of a lease zset whose expiry is still ahead of Redis time.
    async fn live(&self, key: &str) -> i64 {
        let now = self.now_ms().await;
        self.redis
            .pool()
            .next()
            .zcount(key, now as f64 + 0.5, f64::INFINITY)
            .await
            .expect("zcount")
    }

    async fn queue(&self, command: &str, resource: &str) -> Vec<CommandId> {
        self.zmembers(&self.keys.queue(self.namespace, command, resource))
            .await
            .iter()
            .map(|m| m.parse::<CommandId>().expect("uuid"))
            .collect()
    }

    /// The lease zsets a command's status hash says it holds, or None without `held`.
    async fn held(&self, id: CommandId) -> Option<Vec<String>> {
        self.field(id, "held")
            .await
            .map(|text| serde_json::from_str(&text).expect("held is a JSON list of strings"))
    }

    async fn exists(&self, key: &str) -> bool {
        let n: i64 = self.redis.pool().next().exists(key).await.expect("exists");
        n == 1
    }

    async fn unfinished(&self) -> i64 {
        self.counter("unfinished").await
    }

    /// Tokens and refill time of a bucket, as a script left them.
    async fn bucket(&self, key: &str) -> (f64, i64) {
        let b = self.hash(key).await;
        let tokens = b["tokens"].parse::<f64>().expect("tokens");
        let ts = b["ts"].parse::<i64>().expect("ts");
        (tokens, ts)
    }
}

fn ids(heads: &[AdmittedHead]) -> Vec<CommandId> {
    heads.iter().map(|h| h.command_id).collect()
}

fn set(keys: &[String]) -> HashSet<String> {
    keys.iter().cloned().collect()
}

/// A token bucket refilled from `ts` to `now` at `rate` per second, capped at `burst`.
fn refilled(tokens: f64, ts: i64, now: i64, rate: f64, burst: f64) -> f64 {
    if now > ts {
        burst.min(tokens + (now - ts) as f64 * rate / 1000.0)
    } else {
        tokens
    }
}

/// Many commands of one command in many resources all name `account:x` (max_in_flight 2). Eight
/// tasks race admit.lua: exactly two are admitted until a permit is released; then, released one
/// by one, every command gets through, never more than two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_key_caps_concurrency_under_concurrent_callers() {
    const N: usize = 24;
    let bench = Bench::new().await;
    let template = "account:{account}";
    bench
        .configure(&[("sync", OPEN)], &[(template, "2 0 0")])
        .await;
    let mut resource_of = HashMap::new();
    for i in 0..N {
        let resource = format!("r{i}");
        let id = bench
            .push("sync", &resource, &[(template, "account:x")])
            .await;
        resource_of.insert(id, resource);
    }
    let resource_of = Arc::new(resource_of);
    let lease = bench.limit_leases("account:x");

    // No release: eight racing tasks admit exactly two between them.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let bench = bench.clone();
        let lease = lease.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..10 {
                mine.extend(bench.admit(4).await);
                let live = bench.live(&lease).await;
                assert!(live <= 2, "{live} live permits on account:x");
            }
            mine
        }));
    }
    let mut first = Vec::new();
    for task in tasks {
        first.extend(task.await.expect("task"));
    }
    assert_eq!(first.len(), 2, "exactly max_in_flight admitted: {first:?}");
    let first_ids: HashSet<String> = first.iter().map(|h| h.command_id.to_string()).collect();
    assert_eq!(first_ids.len(), 2);
    assert_eq!(bench.members(&lease).await, first_ids);
    assert_eq!(bench.live(&lease).await, 2);
    assert_eq!(bench.waiting().await, (N - 2) as i64);

    // Released one by one while eight tasks keep admitting: everyone gets through, two at most
    // at any time. `in_flight` counts admitted commands whose release has not begun: it can only
    // exceed 2 if Redis handed out a third permit.
    let in_flight = Arc::new(AtomicI64::new(2));
    let peak = Arc::new(AtomicI64::new(2));
    let admitted = Arc::new(AtomicUsize::new(2));
    let (sender, mut receiver) = mpsc::unbounded_channel::<CommandId>();
    for head in &first {
        sender.send(head.command_id).expect("send");
    }
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (bench, lease, sender) = (bench.clone(), lease.clone(), sender.clone());
        let (in_flight, peak, admitted) = (in_flight.clone(), peak.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while admitted.load(Ordering::SeqCst) < N {
                assert!(tokio::time::Instant::now() < deadline, "stalled");
                for head in bench.admit(4).await {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    admitted.fetch_add(1, Ordering::SeqCst);
                    sender.send(head.command_id).expect("send");
                }
                let live = bench.live(&lease).await;
                assert!(live <= 2, "{live} live permits on account:x");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    drop(sender);
    let releaser = {
        let (bench, resource_of, in_flight) =
            (bench.clone(), resource_of.clone(), in_flight.clone());
        tokio::spawn(async move {
            let mut released = Vec::new();
            while released.len() < N {
                let Some(id) = receiver.recv().await else {
                    break;
                };
                in_flight.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    bench
                        .finish("sync", &resource_of[&id], id, "succeeded")
                        .await,
                    "counted out once"
                );
                released.push(id);
            }
            released
        })
    };
    for task in tasks {
        task.await.expect("admitting task");
    }
    let released = releaser.await.expect("releaser");
    assert_eq!(released.len(), N, "every command was admitted and released");
    let unique: HashSet<CommandId> = released.iter().copied().collect();
    assert_eq!(unique.len(), N, "no command admitted twice");
    assert_eq!(admitted.load(Ordering::SeqCst), N);
    assert!(
        peak.load(Ordering::SeqCst) <= 2,
        "{} in flight at once",
        peak.load(Ordering::SeqCst)
    );
    assert!(bench.members(&lease).await.is_empty(), "every permit back");
    assert_eq!(bench.waiting().await, 0);
    assert_eq!(bench.unfinished().await, 0);
    for id in resource_of.keys() {
        assert_eq!(bench.status(*id).await.as_deref(), Some("succeeded"));
    }
}

/// A command whose second key is saturated (by concurrency, or by its start rate) takes nothing:
/// no lease on its first key, no token from its first key's bucket, no command permit or token.
/// Once the second key has room it takes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_takes_all_of_its_limit_keys_or_none() {
    let bench = Bench::new().await;
    bench
        .configure(
            &[("job", "100 1 3 0")],
            &[("acct:{a}", "5 1 3"), ("global", "1 0 0")],
        )
        .await;
    let acct = ("acct:{a}", "acct:1");
    let global = ("global", "global");
    let early = bench.push("job", "r0", &[acct]).await;
    let holder = bench.push("job", "r1", &[global]).await;
    let got: HashSet<CommandId> = ids(&bench.admit(10).await).into_iter().collect();
    assert_eq!(got, HashSet::from([early, holder]));

    let acct_lease = bench.limit_leases("acct:1");
    let acct_bucket = bench.limit_bucket("acct:1");
    let command_bucket = bench.command_bucket("job");
    let acct_bucket_before = bench.hash(&acct_bucket).await;
    let command_bucket_before = bench.hash(&command_bucket).await;
    assert!(
        !acct_bucket_before.is_empty(),
        "the first key's bucket gave a token"
    );

    let victim = bench.push("job", "r2", &[acct, global]).await;
    assert!(bench.admit(10).await.is_empty(), "its second key is full");
    assert_eq!(
        bench.members(&acct_lease).await,
        HashSet::from([early.to_string()]),
        "no lease taken on the first key"
    );
    assert_eq!(
        bench.hash(&acct_bucket).await,
        acct_bucket_before,
        "no token taken from the first key's bucket"
    );
    assert_eq!(
        bench.hash(&command_bucket).await,
        command_bucket_before,
        "no command start token taken"
    );
    assert_eq!(
        bench.members(&bench.command_leases("job")).await,
        HashSet::from([early.to_string(), holder.to_string()])
    );
    assert_eq!(bench.queue("job", "r2").await, vec![victim]);
    assert_eq!(bench.status(victim).await.as_deref(), Some("accepted"));
    assert_eq!(bench.held(victim).await, None);

    // The second key has room again: both are taken together.
    assert!(bench.finish("job", "r1", holder, "succeeded").await);
    let (tokens_before, ts_before) = bench.bucket(&acct_bucket).await;
    assert_eq!(ids(&bench.admit(10).await), vec![victim]);
    assert_eq!(
        bench.members(&acct_lease).await,
        HashSet::from([early.to_string(), victim.to_string()])
    );
    assert_eq!(
        bench.members(&bench.limit_leases("global")).await,
        HashSet::from([victim.to_string()])
    );
    let (tokens_after, ts_after) = bench.bucket(&acct_bucket).await;
    let expected = refilled(tokens_before, ts_before, ts_after, 1.0, 3.0) - 1.0;
    assert!(
        (tokens_after - expected).abs() < 1e-6,
        "one token taken: {tokens_before}@{ts_before} -> {tokens_after}@{ts_after}"
    );
}

/// The same with a second key held back by its start rate: the first key's lease and bucket stay
/// untouched (the bucket is not even created).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_second_key_without_a_token_takes_nothing() {
    let bench = Bench::new().await;
    bench
        .configure(
            &[("job", OPEN)],
            &[("acct:{a}", "5 1 3"), ("slow", "0 1 1")],
        )
        .await;
    let slow_bucket = bench.limit_bucket("slow");
    let acct_lease = bench.limit_leases("acct:2");
    let acct_bucket = bench.limit_bucket("acct:2");
    // Retried when the machine stalls for a second (a token would have accrued meanwhile).
    for attempt in 0.. {
        assert!(
            attempt < 5,
            "Redis time kept jumping a second between two calls"
        );
        let before = bench.now_ms().await;
        let _: () = bench
            .redis
            .pool()
            .next()
            .hset(
                &slow_bucket,
                [("tokens", "0".to_string()), ("ts", before.to_string())],
            )
            .await
            .expect("empty the slow bucket");
        let resource = format!("r{attempt}");
        let victim = bench
            .push(
                "job",
                &resource,
                &[("acct:{a}", "acct:2"), ("slow", "slow")],
            )
            .await;
        let heads = bench.admit(10).await;
        let after = bench.now_ms().await;
        if after - before >= 900 {
            // Inconclusive: take it out of the way and try again.
            for head in &heads {
                bench
                    .finish("job", &resource, head.command_id, "succeeded")
                    .await;
            }
            let _: i64 = bench
                .redis
                .pool()
                .next()
                .del(&acct_bucket)
                .await
                .expect("del");
            bench.finish("job", &resource, victim, "cancelled").await;
            let _: i64 = bench
                .redis
                .pool()
                .next()
                .zrem(
                    bench.keys.queue(bench.namespace, "job", &resource),
                    victim.to_string(),
                )
                .await
                .expect("zrem");
            continue;
        }
        assert!(
            heads.is_empty(),
            "no start token on its second key: {heads:?}"
        );
        assert!(bench.members(&acct_lease).await.is_empty());
        assert!(
            !bench.exists(&acct_bucket).await,
            "the first key's bucket was not touched"
        );
        assert!(bench.members(&bench.command_leases("job")).await.is_empty());
        assert_eq!(bench.queue("job", &resource).await, vec![victim]);
        break;
    }
}

/// `acct:sat`, the key of [`holding_acct_sat`]'s holder.
const SAT: (&str, &str) = ("acct:{a}", "acct:sat");

/// A bench whose `ocr` commands name `acct:{a}` (one in flight), with [`SAT`] held by a command
/// admitted from resource `elsewhere`: that command is returned, to be finished later.
async fn holding_acct_sat() -> (Arc<Bench>, CommandId) {
    let bench = Bench::new().await;
    bench
        .configure(&[("ocr", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    let holder = bench.push("ocr", "elsewhere", &[SAT]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![holder]);
    (bench, holder)
}

/// Lookahead: a head held back only by its own saturated key lets the next command (other key)
/// go and stays first in line; it is admitted as soon as its key has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookahead_passes_a_head_held_back_by_its_own_key() {
    let (bench, holder) = holding_acct_sat().await;
    let free = ("acct:{a}", "acct:free");

    let head = bench.push("ocr", "r", &[SAT]).await;
    let second = bench.push("ocr", "r", &[free]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![second], "the second goes");
    assert_eq!(
        bench.queue("ocr", "r").await,
        vec![head],
        "the head stays first"
    );
    assert_eq!(bench.status(head).await.as_deref(), Some("accepted"));
    assert_eq!(
        bench.members(&bench.limit_leases("acct:free")).await,
        HashSet::from([second.to_string()])
    );
    let third = bench.push("ocr", "r", &[SAT]).await;
    assert!(
        bench.admit(10).await.is_empty(),
        "acct:sat and acct:free are full"
    );

    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(
        ids(&bench.admit(10).await),
        vec![head],
        "the head, not the later one"
    );
    assert_eq!(bench.queue("ocr", "r").await, vec![third]);
}

/// Two commands with the same saturated key keep their order behind it (neither goes); a later
/// command with another key still passes both; released, the older of the two goes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_with_the_same_key_keep_their_order() {
    let (bench, holder) = holding_acct_sat().await;
    let first = bench.push("ocr", "r", &[SAT]).await;
    let second = bench.push("ocr", "r", &[SAT]).await;
    let other = bench.push("ocr", "r", &[("acct:{a}", "acct:other")]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![other]);
    assert_eq!(bench.queue("ocr", "r").await, vec![first, second]);

    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(ids(&bench.admit(10).await), vec![first]);
    assert_eq!(bench.queue("ocr", "r").await, vec![second]);
    assert!(bench.admit(10).await.is_empty());
    assert!(bench.finish("ocr", "r", first, "succeeded").await);
    assert_eq!(ids(&bench.admit(10).await), vec![second]);
}

/// A head held back by one of its two keys keeps the other from the commands behind it: a
/// follower needing only the free key waits (taking it would let the head wait as long as
/// followers keep taking each key as it frees), a follower sharing no key with the head goes.
/// Released, the head takes both keys, then the follower its one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_back_head_keeps_its_free_keys_from_those_behind_it() {
    let (bench, holder) = holding_acct_sat().await;
    let region = ("region:{r}", "region:eu");
    bench
        .configure(
            &[("ocr", OPEN)],
            &[("acct:{a}", "1 0 0"), ("region:{r}", "1 0 0")],
        )
        .await;
    let head = bench.push("ocr", "r", &[SAT, region]).await;
    let follower = bench.push("ocr", "r", &[region]).await;
    let unrelated = bench.push("ocr", "r", &[("acct:{a}", "acct:free")]).await;
    assert_eq!(
        ids(&bench.admit(10).await),
        vec![unrelated],
        "only the command sharing no key with the head"
    );
    assert!(
        bench
            .members(&bench.limit_leases("region:eu"))
            .await
            .is_empty(),
        "region:eu is kept for the head"
    );
    assert!(bench.admit(10).await.is_empty(), "still held back");

    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(
        ids(&bench.admit(10).await),
        vec![head],
        "the head, both keys"
    );
    assert!(
        bench.admit(10).await.is_empty(),
        "region:eu is the head's now"
    );
    assert!(bench.finish("ocr", "r", head, "succeeded").await);
    assert_eq!(ids(&bench.admit(10).await), vec![follower]);
}

/// Only the first `lookahead` commands are looked at: with lookahead 1 a held-back head blocks
/// its queue; a free command third in line goes with lookahead 3, not 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookahead_is_bounded() {
    let (bench, holder) = holding_acct_sat().await;
    let head = bench.push("ocr", "r", &[SAT]).await;
    let second = bench.push("ocr", "r", &[SAT]).await;
    let free = bench.push("ocr", "r", &[("acct:{a}", "acct:free")]).await;
    assert!(bench.admit_with(10, 1).await.is_empty(), "lookahead 1");
    assert!(bench.admit_with(10, 2).await.is_empty(), "lookahead 2");
    assert_eq!(bench.queue("ocr", "r").await, vec![head, second, free]);
    assert!(
        bench
            .members(&bench.limit_leases("acct:free"))
            .await
            .is_empty()
    );
    assert_eq!(ids(&bench.admit_with(10, 3).await), vec![free]);
    assert_eq!(bench.queue("ocr", "r").await, vec![head, second]);
    // Lookahead 1 with a free head: the head goes as usual.
    assert!(bench.finish("ocr", "elsewhere", holder, "succeeded").await);
    assert_eq!(ids(&bench.admit_with(10, 1).await), vec![head]);
}

/// Pushes `n` `ocr` commands naming `key` for the template `provider:{p}`, one in each of the
/// resources `<prefix>0`, `<prefix>1`, …
async fn push_per_resource(bench: &Bench, prefix: &str, n: usize, key: &str) -> HashSet<CommandId> {
    let mut pushed = HashSet::new();
    for i in 0..n {
        let resource = format!("{prefix}{i}");
        pushed.insert(bench.push("ocr", &resource, &[("provider:{p}", key)]).await);
    }
    pushed
}

/// A rate-limited key (per_second 1, burst 3): one call with ten eligible heads starts exactly
/// three (another key's commands are not held back by it); later starts never exceed
/// burst + rate × elapsed, measured on the Redis times admit.lua records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_key_starts_at_most_its_burst_then_its_rate() {
    let bench = Bench::new().await;
    bench
        .configure(&[("ocr", OPEN)], &[("provider:{p}", "0 1 3")])
        .await;
    let gitee = push_per_resource(&bench, "g", 10, "provider:gitee").await;
    let baidu = push_per_resource(&bench, "b", 2, "provider:baidu").await;
    let first = ids(&bench.admit(20).await);
    assert_eq!(
        first.iter().filter(|id| gitee.contains(id)).count(),
        3,
        "the burst of provider:gitee"
    );
    assert_eq!(
        first.iter().filter(|id| baidu.contains(id)).count(),
        2,
        "provider:baidu has its own bucket"
    );
    assert_eq!(first.len(), 5);
    assert!(
        bench
            .members(&bench.limit_leases("provider:gitee"))
            .await
            .is_empty(),
        "a rate-only key holds no lease"
    );
    let bucket = bench.limit_bucket("provider:gitee");
    let ttl: i64 = bench.redis.pool().next().pttl(&bucket).await.expect("pttl");
    assert!(ttl > 0, "the bucket expires once full again: {ttl}");

    // Keep admitting for a while: a token comes back about every second.
    let mut all = first;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(2_500);
    while tokio::time::Instant::now() < deadline {
        all.extend(ids(&bench.admit(20).await));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut starts = Vec::new();
    for id in all.iter().filter(|id| gitee.contains(id)) {
        let at: i64 = bench
            .field(*id, "updated_at")
            .await
            .expect("updated_at")
            .parse()
            .expect("ms");
        starts.push(at);
    }
    starts.sort();
    assert!(starts.len() > 3, "tokens accrue: {starts:?}");
    let t0 = starts[0];
    for (i, at) in starts.iter().enumerate() {
        let allowed = 3.0 + (at - t0) as f64 / 1000.0;
        assert!(
            (i + 1) as f64 <= allowed + 1e-9,
            "{} starts by {} ms: {starts:?}",
            i + 1,
            at - t0
        );
    }
}

/// `held` lists exactly the lease zsets admit.lua took (command, resource, the concurrency-limited
/// key; not a rate-only key, not an undeclared template); finish releases every one of them and
/// deletes `held`; `needs_review` releases the permits but keeps `unfinished`, and a later
/// `succeeded` counts the command out exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_lists_the_leases_taken_and_finish_releases_them() {
    let bench = Bench::new().await;
    bench
        .configure(
            &[("job", "100 1000000 1000000 1")],
            &[("acct:{a}", "2 0 0"), ("prov:{p}", "0 100 100")],
        )
        .await;
    let lim = [
        ("acct:{a}", "acct:1"),
        ("prov:{p}", "prov:x"),
        ("gone:{g}", "gone:1"),
    ];
    let a = bench.push("job", "ra", &lim).await;
    let b = bench.push("job", "rb", &lim).await;
    assert_eq!(bench.unfinished().await, 2);
    let got: HashSet<CommandId> = ids(&bench.admit(10).await).into_iter().collect();
    assert_eq!(got, HashSet::from([a, b]));

    let command_lease = bench.command_leases("job");
    let acct_lease = bench.limit_leases("acct:1");
    for (id, resource) in [(a, "ra"), (b, "rb")] {
        let held = bench.held(id).await.expect("held recorded");
        let res_lease = bench.keys.resource_leases(&bench.suffix("job", resource));
        let expected = vec![
            bench.keys.application_leases(),
            command_lease.clone(),
            res_lease.clone(),
            acct_lease.clone(),
        ];
        assert_eq!(held.len(), expected.len(), "no duplicates: {held:?}");
        assert_eq!(set(&held), set(&expected));
        for lease in &held {
            assert!(
                bench.members(lease).await.contains(&id.to_string()),
                "{lease}"
            );
        }
    }
    assert!(!bench.exists(&bench.limit_leases("prov:x")).await);
    assert!(!bench.exists(&bench.limit_leases("gone:1")).await);
    assert!(bench.exists(&bench.limit_bucket("prov:x")).await);

    // succeeded: every permit back, `held` gone, counted out once.
    let a_held = bench.held(a).await.expect("held");
    assert!(bench.finish("job", "ra", a, "succeeded").await);
    for lease in &a_held {
        assert!(
            !bench.members(lease).await.contains(&a.to_string()),
            "{lease}"
        );
    }
    assert_eq!(bench.field(a, "held").await, None);
    assert_eq!(bench.unfinished().await, 1);
    assert!(
        !bench.finish("job", "ra", a, "succeeded").await,
        "only once"
    );
    assert_eq!(bench.unfinished().await, 1);

    // needs_review: the permits go back, the command still counts as unfinished.
    let b_held = bench.held(b).await.expect("held");
    assert!(!bench.finish("job", "rb", b, "needs_review").await);
    for lease in &b_held {
        assert!(
            !bench.members(lease).await.contains(&b.to_string()),
            "{lease}"
        );
    }
    assert_eq!(bench.field(b, "held").await, None);
    assert_eq!(bench.status(b).await.as_deref(), Some("needs_review"));
    assert_eq!(bench.unfinished().await, 1, "needs_review keeps unfinished");
    assert!(bench.members(&acct_lease).await.is_empty());
    assert!(
        bench.finish("job", "rb", b, "succeeded").await,
        "counted out now"
    );
    assert_eq!(bench.unfinished().await, 0);
    assert!(!bench.finish("job", "rb", b, "succeeded").await);
    assert_eq!(bench.unfinished().await, 0, "exactly once");
}

/// requeue.lua and land.lua release every lease in `held` too (a lapsed lease put back in line; a
/// command between two webhook attempts cancelled or sent to review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_and_land_release_held_leases() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    let acct_lease = bench.limit_leases("acct:1");
    let command_lease = bench.command_leases("job");
    let c = bench.push("job", "rc", &[("acct:{a}", "acct:1")]).await;
    let admitted = bench.admit(10).await;
    assert_eq!(ids(&admitted), vec![c]);
    let now = bench.now_ms().await;
    assert_eq!(
        requeue(
            &bench.redis,
            &bench.keys,
            &Requeued {
                command_id: c,
                attempt: Some(admitted[0].attempt),
                namespace_id: bench.namespace,
                command: "job",
                resource_key: "rc",
                queue_seq: admitted[0].queue_seq,
                status: sluice_model::CommandStatus::Accepted,
                updated_at: now.to_string(),
            },
        )
        .await
        .expect("requeue.lua"),
        Requeue::Done
    );
    assert!(bench.members(&acct_lease).await.is_empty());
    assert!(bench.members(&command_lease).await.is_empty());
    assert_eq!(bench.field(c, "held").await, None);
    assert_eq!(bench.queue("job", "rc").await, vec![c]);
    assert_eq!(bench.waiting().await, 1);
    assert_eq!(ids(&bench.admit(10).await), vec![c], "admitted again");
    assert_eq!(
        bench.members(&acct_lease).await,
        HashSet::from([c.to_string()])
    );

    // Between two attempts (held by its executor, out of its queue): sent to review, then
    // cancelled.
    let waiting_done = |status: &'static str| {
        let bench = bench.clone();
        async move { bench.finish("job", "rc", c, status).await }
    };
    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(bench.keys.command(c), [("status", "retry_wait")])
        .await
        .expect("retry_wait");
    assert_eq!(bench.unfinished().await, 1);
    assert!(
        !waiting_done("needs_review").await,
        "needs_review is not counted out"
    );
    assert!(bench.members(&acct_lease).await.is_empty(), "permit back");
    assert!(bench.members(&command_lease).await.is_empty());
    assert_eq!(bench.field(c, "held").await, None);
    assert_eq!(bench.unfinished().await, 1, "needs_review keeps unfinished");
    assert!(waiting_done("cancelled").await, "counted out now");
    assert_eq!(bench.unfinished().await, 0);
    assert!(!waiting_done("cancelled").await);
    assert_eq!(bench.unfinished().await, 0, "exactly once");
    assert_eq!(bench.waiting().await, 0);
}

/// start_tokens.lua: one of two buckets empty → the wait, and nothing taken from the other; both with
/// a token → one taken from each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retake_takes_a_token_from_every_bucket_or_none() {
    let bench = Bench::new().await;
    let full = RateKey {
        bucket: bench.limit_bucket("provider:a"),
        per_second: 1,
        burst: 5,
    };
    let empty = RateKey {
        bucket: bench.limit_bucket("provider:b"),
        per_second: 2,
        burst: 2,
    };
    let set_bucket = |key: String, tokens: &'static str| {
        let bench = bench.clone();
        async move {
            let now = bench.now_ms().await;
            let _: () = bench
                .redis
                .pool()
                .next()
                .hset(
                    &key,
                    [("tokens", tokens.to_string()), ("ts", now.to_string())],
                )
                .await
                .expect("hset bucket");
        }
    };
    let fresh = RateKey {
        bucket: bench.limit_bucket("provider:c"),
        per_second: 1,
        burst: 1,
    };
    let buckets = [full.clone(), empty.clone()];
    // Retried when the machine stalls: at 2/s provider:b has a token again after 500 ms.
    for attempt in 0.. {
        assert!(attempt < 5, "Redis time kept jumping between two calls");
        let _: i64 = bench
            .redis
            .pool()
            .next()
            .del(&fresh.bucket)
            .await
            .expect("del");
        let before = bench.now_ms().await;
        set_bucket(full.bucket.clone(), "3").await;
        set_bucket(empty.bucket.clone(), "0").await;
        let full_before = bench.hash(&full.bucket).await;
        let wait = take_start_tokens(&bench.redis, &bench.keys, &buckets)
            .await
            .expect("start_tokens.lua");
        // A missing bucket is full: the wait comes from the empty one alone, whatever the order.
        let wait_fresh =
            take_start_tokens(&bench.redis, &bench.keys, &[empty.clone(), fresh.clone()])
                .await
                .expect("start_tokens.lua");
        if bench.now_ms().await - before >= 400 {
            continue;
        }
        let Retake::Wait(wait) = wait else {
            panic!("a wait: provider:b has no token, got {wait:?}")
        };
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "at 2/s a token is at most 500 ms away: {wait:?}"
        );
        assert_eq!(
            bench.hash(&full.bucket).await,
            full_before,
            "nothing taken from provider:a"
        );
        assert!(
            matches!(wait_fresh, Retake::Wait(_)),
            "provider:b still has no token"
        );
        assert!(
            !bench.exists(&fresh.bucket).await,
            "nothing written to provider:c"
        );
        break;
    }

    // Both with a token: one from each.
    set_bucket(empty.bucket.clone(), "2").await;
    let (a_tokens, a_ts) = bench.bucket(&full.bucket).await;
    let (b_tokens, b_ts) = bench.bucket(&empty.bucket).await;
    assert_eq!(
        take_start_tokens(&bench.redis, &bench.keys, &buckets)
            .await
            .expect("start_tokens.lua"),
        Retake::Taken
    );
    let (a_after, a_now) = bench.bucket(&full.bucket).await;
    let (b_after, b_now) = bench.bucket(&empty.bucket).await;
    assert_eq!(a_now, b_now, "one Redis time for both");
    let a_expected = refilled(a_tokens, a_ts, a_now, 1.0, 5.0) - 1.0;
    let b_expected = refilled(b_tokens, b_ts, b_now, 2.0, 2.0) - 1.0;
    assert!(
        (a_after - a_expected).abs() < 1e-6,
        "{a_after} vs {a_expected}"
    );
    assert!(
        (b_after - b_expected).abs() < 1e-6,
        "{b_after} vs {b_expected}"
    );
    assert_eq!(b_after, 1.0);
    // No bucket: nothing to wait for.
    assert_eq!(
        take_start_tokens(&bench.redis, &bench.keys, &[])
            .await
            .expect("retake"),
        Retake::Taken
    );
}

/// A template with no `cfg` entry (no longer declared) limits nothing and is not recorded in
/// `held`; dropping a template's entry frees the commands it held back; a command without its own
/// `cfg` entry is never admitted, whatever its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_templates_limit_nothing_and_unknown_commands_wait() {
    let bench = Bench::new().await;
    bench
        .configure(&[("job", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    let gone = ("gone:{g}", "gone:1");
    let mut free = Vec::new();
    for _ in 0..5 {
        free.push(bench.push("job", "r", &[gone]).await);
    }
    let heads = bench.admit(10).await;
    assert_eq!(ids(&heads), free, "all five, in order, one per pass");
    assert!(!bench.exists(&bench.limit_leases("gone:1")).await);
    assert!(!bench.exists(&bench.limit_bucket("gone:1")).await);
    assert_eq!(
        bench.held(free[0]).await,
        Some(vec![
            bench.keys.application_leases(),
            bench.command_leases("job")
        ])
    );

    let acct = ("acct:{a}", "acct:1");
    let holder = bench.push("job", "h", &[acct]).await;
    let held_back = bench.push("job", "w", &[acct]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![holder]);
    assert!(bench.admit(10).await.is_empty());
    // The template is no longer declared: its key no longer limits.
    bench.configure(&[("job", OPEN)], &[]).await;
    assert_eq!(ids(&bench.admit(10).await), vec![held_back]);

    // A command without a spec is never admitted, even with free keys.
    let unknown = bench.push("webhook", "r", &[("acct:{a}", "acct:2")]).await;
    assert!(bench.admit(10).await.is_empty());
    bench
        .configure(&[("job", OPEN)], &[("acct:{a}", "1 0 0")])
        .await;
    assert!(bench.admit(10).await.is_empty());
    assert_eq!(bench.queue("webhook", "r").await, vec![unknown]);
    assert_eq!(bench.status(unknown).await.as_deref(), Some("accepted"));
    assert!(!bench.exists(&bench.limit_leases("acct:2")).await);
}

/// End to end from a parsed declaration: `admission_spec` and `limit_specs` write the `cfg`
/// entries, `render_limit_keys` the `lim` field, and admit.lua's lease and bucket are the keys
/// `AppKeys::limit_leases` and `limit_bucket` name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_limits_drive_admit() {
    let declaration = parse(
        r#"
[[command]]
code = "ocr"
parameters = { provider = { type = "string", max_length = 16 }, account = { type = "string", max_length = 64 } }
resource_key = { from = "input", field = "account" }
handler = { kind = "webhook", url = "http://127.0.0.1:9000/ocr", timeout_ms = 10000 }
limits  = [ { key = "provider:{provider}", per_second = 2 }, { key = "account:{provider}:{account}", max_in_flight = 1 } ]
"#,
    )
    .expect("declaration");
    let decl = declaration.command("ocr").expect("ocr");
    let bench = Bench::new().await;
    let mut specs = vec![(format!("{}:ocr", bench.namespace), admission_spec(decl))];
    specs.extend(limit_specs(bench.namespace, decl));
    assert_eq!(
        specs[1..],
        [
            (
                format!("lim:{}:provider:{{provider}}", bench.namespace),
                "0 2 2".to_string()
            ),
            (
                format!("lim:{}:account:{{provider}}:{{account}}", bench.namespace),
                "1 0 0".to_string()
            ),
        ]
    );
    write_admission_config(&bench.redis, &bench.keys, specs)
        .await
        .expect("cfg");
    let input = |account: &str| -> Map<String, Json> {
        let Json::Object(map) = json!({"provider": "gitee", "account": account}) else {
            unreachable!()
        };
        map
    };
    let rendered = render_limit_keys(&decl.limits, &input("a"), "u1");
    assert_eq!(
        rendered,
        vec![
            [
                "provider:{provider}".to_string(),
                "provider:gitee".to_string()
            ],
            [
                "account:{provider}:{account}".to_string(),
                "account:gitee:a".to_string()
            ],
        ]
    );
    let pairs: Vec<(&str, &str)> = rendered
        .iter()
        .map(|[t, k]| (t.as_str(), k.as_str()))
        .collect();
    let first = bench.push("ocr", "a", &pairs).await;
    let second = bench.push("ocr", "a", &pairs).await;
    let rendered_b = render_limit_keys(&decl.limits, &input("b"), "u1");
    let pairs_b: Vec<(&str, &str)> = rendered_b
        .iter()
        .map(|[t, k]| (t.as_str(), k.as_str()))
        .collect();
    let other = bench.push("ocr", "b", &pairs_b).await;
    let got: HashSet<CommandId> = ids(&bench.admit(10).await).into_iter().collect();
    assert_eq!(
        got,
        HashSet::from([first, other]),
        "account:gitee:a allows one; provider:gitee's burst of 2 is used up"
    );
    assert_eq!(
        bench.members(&bench.limit_leases("account:gitee:a")).await,
        HashSet::from([first.to_string()])
    );
    let (tokens, _) = bench.bucket(&bench.limit_bucket("provider:gitee")).await;
    assert!(tokens < 1.0, "both tokens taken: {tokens}");
    assert_eq!(bench.queue("ocr", "a").await, vec![second]);
}
