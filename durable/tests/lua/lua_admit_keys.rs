//! `admit.lua` touches only the keys it is given: the keys of the work it chooses come from what
//! earlier answers named (`durable/redis/src/admission_keys.rs`), and a key it lacks is asked
//! for, never touched. These tests call it with chosen keys and check what it wrote, asked and
//! started; the whole suite runs it behind `lua/lib/strict_keys.lua` besides.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use fred::prelude::*;
use sluice_durable::faults::{self, Point};
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::redis::{Admission, admit, own_keys};
use sluice_redis::{Projection, connect_redis};
use sluice_testkit::test_redis_url;
use tokio::sync::mpsc;

use crate::lua_fixture::{self, admit_limits};

enum AdmitKeys {}

type Bench = lua_fixture::Bench<AdmitKeys>;

/// One raw call's answer: the heads started, how many keys it asked for, the keys it named.
struct Answer {
    started: Vec<CommandId>,
    asked: i64,
    named: HashSet<String>,
}

impl Bench {
    /// The keys of `command` a call needs to look at it: permits, start bucket, resources.
    fn command_keys(&self, command: &str) -> Vec<String> {
        vec![
            self.keys.command_leases(self.namespace, command),
            self.command_bucket(command),
            self.keys.resource_ready(self.namespace, command),
        ]
    }

    /// One `admit.lua` call with exactly `extra` besides the application's own keys.
    async fn call_with(&self, extra: Vec<String>, max_heads: u32) -> Answer {
        let mut keys = own_keys(&self.keys);
        keys.extend(extra);
        let mut args: Vec<Value> = vec![
            1.into(),
            i64::from(max_heads).into(),
            256.into(),
            60_000.into(),
            16.into(),
        ];
        args.extend(
            (0..max_heads).map(|i| Value::from(format!("00000000-0000-7000-8000-{i:012}"))),
        );
        let answer: Vec<Value> = self.redis.admit(keys, args).await.expect("admit.lua");
        assert_eq!(answer[0].as_str().as_deref(), Some("OK"), "{answer:?}");
        let count = answer[3].as_i64().expect("a head count") as usize;
        let started = (0..count)
            .map(|i| {
                let id = answer[4 + 4 * i].as_string().expect("an id");
                id.parse().expect("a command id")
            })
            .collect();
        let rest = 4 + 4 * count;
        let asked = answer[rest].as_i64().expect("asked");
        let done = answer[rest + 1].as_i64().expect("done") as usize;
        let named = answer[rest + 2 + done..]
            .iter()
            .map(|v| v.as_string().expect("a key"))
            .collect();
        Answer {
            started,
            asked,
            named,
        }
    }

    async fn push(&self, command: &str, resource: &str, lim: &[(&str, &str)]) -> CommandId {
        self.queue_limited(command, resource, lim).await
    }

    async fn started_through(&self, redis: &Projection, max_heads: u32) -> Vec<CommandId> {
        match admit(redis, &self.keys, admit_limits(max_heads))
            .await
            .expect("admit")
        {
            Admission::Heads { heads, .. } => heads.into_iter().map(|h| h.command_id).collect(),
            Admission::NotReady => panic!("the projection is ready"),
        }
    }
}

/// Given only the application's own keys, a call writes nothing and asks for the keys of every
/// command in its window; its caller then goes on with them and starts the queue in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_knows_no_command_writes_nothing_and_asks_for_the_window() {
    let bench = Bench::new().await;
    bench
        .configure(
            &[("claim", "10 1000 1000 0"), ("other", "10 1000 1000 0")],
            &[],
        )
        .await;
    let claims = vec![
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
    ];
    let other = bench.push("other", "r1", &[]).await;

    let before = bench.snapshot().await;
    let answer = bench.call_with(Vec::new(), 10).await;
    assert!(answer.started.is_empty());
    assert_eq!(bench.snapshot().await, before, "nothing written");
    let mut window = bench.command_keys("claim");
    window.extend(bench.command_keys("other"));
    assert_eq!(answer.asked, window.len() as i64);
    for key in &window {
        assert!(answer.named.contains(key), "{key} asked for");
    }

    // Through its caller: the levels are asked for and the calls go on within one admission.
    bench.redis.admission_keys().forget(&bench.keys.meta());
    let mut started = bench.started_through(&bench.redis, 10).await;
    assert_eq!(started.len(), 4, "{started:?}");
    started.retain(|id| *id != other);
    assert_eq!(started, claims, "the queue's order");
}

/// A head whose status hash the call was not given holds its resource back (nothing of it
/// starts, not the commands behind it either, whose keys it has), while another resource of the
/// same command starts; the next call, given the head, starts that resource in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_not_given_holds_its_own_resource_back_and_no_other() {
    let bench = Bench::new().await;
    bench.configure(&[("claim", "10 1000 1000 0")], &[]).await;
    let r1 = vec![
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
    ];
    let r2 = bench.push("claim", "r2", &[]).await;
    let mut given = bench.command_keys("claim");
    given.push(bench.keys.queue(bench.namespace, "claim", "r1"));
    given.push(bench.keys.queue(bench.namespace, "claim", "r2"));
    given.push(bench.keys.command(r1[1]));
    given.push(bench.keys.command(r1[2]));
    given.push(bench.keys.command(r2));

    let answer = bench.call_with(given.clone(), 10).await;
    assert_eq!(answer.started, vec![r2], "only the other resource starts");
    assert_eq!(answer.asked, 1);
    assert!(answer.named.contains(&bench.keys.command(r1[0])));
    for id in &r1 {
        assert_eq!(bench.status(*id).await.as_deref(), Some("accepted"));
    }
    let queued: Vec<String> = bench
        .zmembers(&bench.keys.queue(bench.namespace, "claim", "r1"))
        .await;
    assert_eq!(
        queued,
        r1.iter().map(ToString::to_string).collect::<Vec<_>>()
    );

    given.push(bench.keys.command(r1[0]));
    let answer = bench.call_with(given, 10).await;
    assert_eq!(answer.asked, 0);
    let mut started = answer.started;
    started.sort_by_key(|id| r1.iter().position(|x| x == id));
    assert_eq!(started, r1);
}

/// A head whose limit key's permits the call was not given waits, with the commands behind it,
/// even those of other keys it was given: the lookahead past a head held back by its own keys
/// applies only to a head known to be held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_key_not_given_holds_the_head_and_the_lookahead_behind_it() {
    let bench = Bench::new().await;
    let template = "account:{account}";
    bench
        .configure(&[("sync", "100 1000 1000 0")], &[(template, "1 0 0")])
        .await;
    let head = bench.push("sync", "r", &[(template, "account:a")]).await;
    let behind = bench.push("sync", "r", &[(template, "account:b")]).await;
    let mut given = bench.command_keys("sync");
    given.push(bench.keys.queue(bench.namespace, "sync", "r"));
    given.push(bench.keys.command(head));
    given.push(bench.keys.command(behind));
    given.push(bench.keys.limit_leases(bench.namespace, "account:b"));

    let answer = bench.call_with(given.clone(), 10).await;
    assert!(answer.started.is_empty(), "{:?}", answer.started);
    assert!(answer.asked >= 1);
    let lease_a = bench.keys.limit_leases(bench.namespace, "account:a");
    assert!(answer.named.contains(&lease_a));
    assert!(bench.zmembers(&lease_a).await.is_empty());

    given.push(lease_a);
    let answer = bench.call_with(given, 10).await;
    assert_eq!(answer.asked, 0);
    assert_eq!(answer.started, vec![head, behind]);
}

/// Executors that each remember different keys (each its own handle, so its own memory) admit
/// from many resources sharing a limit key: every command starts exactly once, and the count the
/// test keeps itself of commands admitted and not yet ended never exceeds the key's limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_with_their_own_memories_keep_a_limit_key_and_start_each_once() {
    const RESOURCES: usize = 40;
    const PER_RESOURCE: usize = 3;
    const LIMIT: i64 = 3;
    const ACCOUNTS: usize = 4;
    let total = RESOURCES * PER_RESOURCE;
    let bench = Bench::new().await;
    let template = "account:{account}";
    bench
        .configure(
            &[("sync", "100000 1000000 1000000 0")],
            &[(template, "3 0 0")],
        )
        .await;
    let mut resource_of = HashMap::new();
    for round in 0..PER_RESOURCE {
        for r in 0..RESOURCES {
            let resource = format!("r{r}");
            let account = (r + round) % ACCOUNTS;
            let key = format!("account:{account}");
            let id = bench.push("sync", &resource, &[(template, &key)]).await;
            resource_of.insert(id, (resource, account));
        }
    }
    let resource_of = Arc::new(resource_of);
    // Per account: commands admitted whose release has not begun, and the most at once.
    let in_flight: Arc<Vec<AtomicI64>> =
        Arc::new((0..ACCOUNTS).map(|_| AtomicI64::new(0)).collect());
    let peak: Arc<Vec<AtomicI64>> = Arc::new((0..ACCOUNTS).map(|_| AtomicI64::new(0)).collect());
    let admitted = Arc::new(AtomicUsize::new(0));
    let (sender, mut receiver) = mpsc::unbounded_channel::<CommandId>();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let redis = connect_redis(&test_redis_url(), 1).await.expect("redis");
        let (bench, sender, resource_of) = (bench.clone(), sender.clone(), resource_of.clone());
        let (in_flight, peak, admitted) = (in_flight.clone(), peak.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let mut mine = Vec::new();
            while admitted.load(Ordering::SeqCst) < total {
                assert!(tokio::time::Instant::now() < deadline, "stalled");
                for id in bench.started_through(&redis, 4).await {
                    let account = resource_of[&id].1;
                    let now = in_flight[account].fetch_add(1, Ordering::SeqCst) + 1;
                    peak[account].fetch_max(now, Ordering::SeqCst);
                    admitted.fetch_add(1, Ordering::SeqCst);
                    sender.send(id).expect("send");
                    mine.push(id);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            mine
        }));
    }
    drop(sender);
    let releaser = {
        let (bench, resource_of, in_flight) =
            (bench.clone(), resource_of.clone(), in_flight.clone());
        tokio::spawn(async move {
            let mut released = 0;
            while let Some(id) = receiver.recv().await {
                let (resource, account) = &resource_of[&id];
                in_flight[*account].fetch_sub(1, Ordering::SeqCst);
                assert_eq!(
                    bench.land("sync", resource, id, "succeeded").await,
                    Some(true),
                    "counted out once"
                );
                released += 1;
            }
            released
        })
    };
    let mut started = Vec::new();
    for task in tasks {
        started.extend(task.await.expect("an admitting task"));
    }
    assert_eq!(releaser.await.expect("releaser"), total);
    let unique: HashSet<CommandId> = started.iter().copied().collect();
    assert_eq!(started.len(), total, "every command started");
    assert_eq!(unique.len(), total, "none twice");
    let peaks: Vec<i64> = peak.iter().map(|p| p.load(Ordering::SeqCst)).collect();
    assert!(
        peaks.iter().all(|p| *p <= LIMIT),
        "in flight at once per account: {peaks:?}"
    );
    assert!(peaks.contains(&LIMIT), "the limit was reached: {peaks:?}");
    for id in resource_of.keys() {
        assert_eq!(bench.status(*id).await.as_deref(), Some("succeeded"));
    }
}

/// An admission whose later call fails (a reset connection, a timeout) still hands over the heads
/// its earlier calls started: Redis shows them `executing` with their permits, so a caller that
/// dropped them would leave them to lapse while the commands behind them started first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_later_call_keeps_the_heads_earlier_calls_started() {
    let bench = Bench::new().await;
    bench.configure(&[("claim", "10 1000 1000 0")], &[]).await;
    let r1 = [
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
    ];
    // Warm: r1's queue and the heads after its first are known to the next call.
    assert_eq!(bench.started_through(&bench.redis, 1).await, r1[..1]);
    // A resource the next call does not know: it starts r1's heads, then asks for r2's keys.
    let r2 = bench.push("claim", "r2", &[]).await;
    let application = bench.keys.application_id();
    faults::arm(Point::LaterAdmitCall, application, true);
    let admitted = admit(&bench.redis, &bench.keys, admit_limits(10)).await;
    faults::arm(Point::LaterAdmitCall, application, false);
    let heads: Vec<CommandId> = match admitted {
        Ok(Admission::Heads { heads, .. }) => heads.into_iter().map(|h| h.command_id).collect(),
        other => panic!("the heads the first call started, not {other:?}"),
    };
    let mut executing = Vec::new();
    for id in r1[1..].iter().chain([&r2]) {
        if bench.status(*id).await.as_deref() == Some("executing") {
            executing.push(*id);
        }
    }
    assert_eq!(
        executing,
        r1[1..],
        "the first call started r1's heads, not r2's"
    );
    assert_eq!(heads, executing, "every head Redis started is handed over");
}

/// A head started by a later call of an admission carries that call's Redis time, which the
/// claim records as its `started_at`: it may have been queued after the first call, so the first
/// call's time would say it started before it was waiting at all (the model checker saw a
/// command's `started_at` 3 ms before the poll that still found it queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_started_by_a_later_call_carries_that_calls_time() {
    let bench = Bench::new().await;
    bench.configure(&[("claim", "10 1000 1000 0")], &[]).await;
    let r1 = [
        bench.push("claim", "r1", &[]).await,
        bench.push("claim", "r1", &[]).await,
    ];
    assert_eq!(bench.started_through(&bench.redis, 1).await, r1[..1]);
    // A resource the next call does not know: its first call starts r1's head and asks for
    // r2's keys; the second call, held until Redis's clock has moved on, starts r2's.
    let r2 = bench.push("claim", "r2", &[]).await;
    let application = bench.keys.application_id();
    let pause = faults::pause(Point::LaterAdmitCall, application);
    let admitting = {
        let (redis, keys) = (bench.redis.clone(), bench.keys.clone());
        tokio::spawn(async move { admit(&redis, &keys, admit_limits(10)).await })
    };
    pause.reached().await;
    let held_at = redis_ms(&bench.redis).await;
    // Redis's clock passes the held moment (a poll of TIME, not a sleep standing in for it).
    while redis_ms(&bench.redis).await <= held_at + 5 {
        tokio::task::yield_now().await;
    }
    pause.release();
    let heads = match admitting.await.expect("the admission") {
        Ok(Admission::Heads { heads, .. }) => heads,
        other => panic!("heads, not {other:?}"),
    };
    let time_of = |id: CommandId| {
        heads
            .iter()
            .find(|h| h.command_id == id)
            .map(|h| h.started_ms)
            .unwrap_or_else(|| panic!("{id} was not started: {heads:?}"))
    };
    assert!(
        time_of(r1[1]) <= held_at,
        "the first call's head: {heads:?}"
    );
    assert!(
        time_of(r2) > held_at + 5,
        "the later call's head carries its own call's time, not the first's: {heads:?} (held at {held_at})"
    );
}

/// Redis's clock in Unix milliseconds.
async fn redis_ms(redis: &Projection) -> i64 {
    let time: Vec<String> = redis
        .pool()
        .next()
        .custom(fred::cmd!("TIME"), Vec::<String>::new())
        .await
        .expect("TIME");
    let seconds: i64 = time[0].parse().expect("seconds");
    let micros: i64 = time[1].parse().expect("microseconds");
    seconds * 1000 + micros / 1000
}
