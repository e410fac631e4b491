//! Asked keys (durable/redis/src/asked_keys.rs): scripts that learn which keys they need by
//! reading others touch only keys their caller passed in `KEYS`. Given too few, a script answers
//! `{"KEYS", key, ...}` and does nothing else; the Rust callers then call again with them. The
//! permit scripts (land, requeue, renew, mark, holding: lib/epoch.lua's declared permits) and the
//! readers (holders, metrics, status, ticket). And `land.lua`'s outcomes per second go to one
//! declared ring per namespace, which `status_board.lua` reads back without counting a second the ring
//! no longer holds.

use std::collections::HashSet;

use fred::prelude::*;
use serde_json::json;
use sluice_durable::figures::read_app_figures;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::attempt::AttemptId;
use sluice_durable::lifecycle::redis::{AdmittedHead, permit_holders, renew, still_held};
use sluice_durable::status_board;
use sluice_redis::ticket::read_status;

use crate::lua_fixture::{Bench, admit_limits};

enum AskedKeys {}

type Fixture = Bench<AskedKeys>;

/// A command of `job` in resource `r` (with a per-resource limit), holding the limit key `acct:1`
/// as well, admitted: its `held` names four leases (application, command, resource, limit key).
async fn admitted_with_a_limit_key(bench: &Fixture) -> AdmittedHead {
    bench
        .configure(&[("job", "100 1000 1000 5")], &[("acct:{a}", "5 0 0")])
        .await;
    let seq = bench.next_seq();
    let lim = json!([["acct:{a}", "acct:1"]]).to_string();
    bench
        .queue_command(
            "job",
            "r",
            seq,
            vec![
                ("status".into(), "accepted".into()),
                ("seq".into(), seq.to_string()),
                ("lim".into(), lim),
            ],
            vec![
                "unfinished".into(),
                format!("waiting:{}", bench.namespace),
                format!("queued:{}", bench.nscmd("job")),
            ],
        )
        .await;
    let mut heads = bench.admitted_heads(admit_limits(1)).await;
    assert_eq!(heads.len(), 1, "the command is admitted");
    heads.remove(0)
}

fn limit_lease(bench: &Fixture) -> String {
    bench.keys.limit_leases(bench.namespace, "acct:1")
}

/// Every lease the command holds, from its status hash.
async fn held(bench: &Fixture, id: CommandId) -> HashSet<String> {
    let text = bench
        .field(id, "held")
        .await
        .expect("an admitted command has `held`");
    serde_json::from_str::<Vec<String>>(&text)
        .expect("held is a JSON list")
        .into_iter()
        .collect()
}

/// The `{"KEYS", key, ...}` answer's leases, or a panic naming what came instead.
fn asked(answer: &Value, script: &str) -> HashSet<String> {
    let Value::Array(items) = answer else {
        panic!("{script} answered {answer:?}, not KEYS");
    };
    assert_eq!(
        items.first().and_then(Value::as_string).as_deref(),
        Some("KEYS"),
        "{script}: {answer:?}"
    );
    items[1..].iter().filter_map(Value::as_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_given_too_few_permits_asks_for_them_and_writes_nothing() {
    let bench = Fixture::new().await;
    let head = admitted_with_a_limit_key(&bench).await;
    let id = head.command_id;
    let all = held(&bench, id).await;
    assert_eq!(
        all.len(),
        4,
        "application, command, resource and limit key: {all:?}"
    );
    let known = bench.keys.command_permits(bench.namespace, "job", "r", &[]);
    let before = bench.snapshot().await;

    // land.lua with the permits derived from the row, the limit key's aside.
    let mut land_keys = vec![
        bench.keys.meta(),
        bench.keys.count(),
        bench.keys.command(id),
        bench.keys.queue(bench.namespace, "job", "r"),
        bench.keys.gone(),
        bench.keys.seq(),
        bench.keys.outcomes(bench.namespace),
    ];
    land_keys.extend(known.iter().cloned());
    let land_args: Vec<Value> = vec![
        id.to_string().into(),
        bench.namespace.to_string().into(),
        "job".into(),
        "succeeded".into(),
        "2026-12-06T00:00:00.000Z".into(),
        "".into(),
        "".into(),
        "".into(),
        600_000.into(),
    ];
    let answer: Value = bench
        .redis
        .land(land_keys, land_args)
        .await
        .expect("land.lua");
    assert_eq!(
        asked(&answer, "land.lua"),
        HashSet::from([limit_lease(&bench)])
    );

    // renew.lua and still_held.lua with the command's status hash only: every lease is asked for.
    let attempt = head.attempt.to_string();
    let renew_args: Vec<Value> = vec![60_000.into(), id.to_string().into(), attempt.clone().into()];
    let answer: Value = bench
        .redis
        .renew(vec![bench.keys.meta(), bench.keys.command(id)], renew_args)
        .await
        .expect("renew.lua");
    assert_eq!(asked(&answer, "renew.lua"), all);
    let answer: Value = bench
        .redis
        .still_held(
            vec![bench.keys.meta(), bench.keys.command(id)],
            vec![id.to_string().into(), attempt.clone().into()],
        )
        .await
        .expect("still_held.lua");
    assert_eq!(asked(&answer, "still_held.lua"), all);

    // attempt_status.lua extending the permits, with two of them.
    let answer: Value = bench
        .redis
        .attempt_status(
            vec![
                bench.keys.meta(),
                bench.keys.command(id),
                known[0].clone(),
                known[1].clone(),
            ],
            vec![
                id.to_string().into(),
                attempt.clone().into(),
                "running".into(),
                "2026-12-06T00:00:00.000Z".into(),
                60_000.into(),
                "".into(),
            ],
        )
        .await
        .expect("attempt_status.lua");
    assert_eq!(
        asked(&answer, "attempt_status.lua"),
        HashSet::from([known[2].clone(), limit_lease(&bench)])
    );
    assert_eq!(
        bench.snapshot().await,
        before,
        "a refused call writes nothing"
    );

    // The Rust callers pass what they know and call again with what is asked: each succeeds.
    let lim_expiry = |scores: std::collections::HashMap<String, f64>| scores[&id.to_string()];
    let first = lim_expiry(bench.zscores(&limit_lease(&bench)).await);
    let renewed = renew(
        &bench.redis,
        &bench.keys,
        &[(id, head.attempt)],
        &[],
        120_000,
    )
    .await
    .expect("renew");
    assert_eq!(renewed, Some(vec![true]));
    // Given every permit the claimed row names, as the executor passes them, it asks nothing.
    let mut given = vec![bench.keys.meta(), bench.keys.command(id)];
    given.extend(bench.keys.command_permits(
        bench.namespace,
        "job",
        "r",
        &[["acct:{a}".to_string(), "acct:1".to_string()]],
    ));
    let answer: Value = bench
        .redis
        .renew(
            given,
            vec![
                120_000.into(),
                id.to_string().into(),
                attempt.clone().into(),
            ],
        )
        .await
        .expect("renew.lua");
    assert_eq!(answer, Value::Array(vec![Value::Integer(1)]), "one call");
    let extended = lim_expiry(bench.zscores(&limit_lease(&bench)).await);
    assert!(
        extended > first,
        "the limit key's permit was extended: {first} -> {extended}"
    );
    let told = still_held(
        &bench.redis,
        &bench.keys,
        &[(id, head.attempt), (id, AttemptId::mint())],
    )
    .await
    .expect("holding");
    assert_eq!(
        told,
        Some(vec![true, false]),
        "its attempt holds; another does not"
    );
    assert_eq!(bench.land("job", "r", id, "succeeded").await, Some(true));
    for lease in &all {
        assert!(
            !bench.zmembers(lease).await.contains(&id.to_string()),
            "{lease} released"
        );
    }
    assert_eq!(bench.counter("unfinished").await, 0);
}

/// Redis time in whole seconds.
async fn redis_second(bench: &Fixture) -> i64 {
    bench
        .redis
        .pool()
        .next()
        .eval(
            "return tonumber(redis.call('TIME')[1])",
            Vec::<String>::new(),
            Vec::<String>::new(),
        )
        .await
        .expect("TIME")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_land_in_a_declared_ring_and_a_reused_slot_starts_from_nothing() {
    let bench = Fixture::new().await;
    bench.configure(&[("job", "100 1000 1000 0")], &[]).await;
    let ring = bench.keys.outcomes(bench.namespace);
    // Slots of this second and the next few hold counts of a second two minutes ago, as a ring
    // that went round would: landing must not add to them.
    let now = redis_second(&bench).await;
    let stale: Vec<(String, String)> = (now..now + 5)
        .flat_map(|s| {
            let slot = s % 120;
            [
                (format!("{slot}:at"), (s - 120).to_string()),
                (format!("{slot}:succeeded"), "7".to_string()),
                (format!("{slot}:failed"), "3".to_string()),
            ]
        })
        .collect();
    let _: () = bench
        .redis
        .pool()
        .next()
        .hset(&ring, stale)
        .await
        .expect("hset");

    for status in ["succeeded", "succeeded", "failed"] {
        let id = bench.queue_job("r").await;
        let _ = bench.admitted_heads(admit_limits(1)).await;
        assert_eq!(bench.land("job", "r", id, status).await, Some(true));
    }
    let after = redis_second(&bench).await;

    // The ring's own record: every second from `now` to `after` holds only this test's endings.
    let fields = bench.hash(&ring).await;
    let (mut succeeded, mut failed) = (0, 0);
    for s in now..=after {
        let slot = s % 120;
        if fields.get(&format!("{slot}:at")) == Some(&s.to_string()) {
            succeeded += fields
                .get(&format!("{slot}:succeeded"))
                .map_or(0, |n| n.parse::<i64>().expect("count"));
            failed += fields
                .get(&format!("{slot}:failed"))
                .map_or(0, |n| n.parse::<i64>().expect("count"));
        }
    }
    assert_eq!((succeeded, failed), (2, 1), "{fields:?}");

    // status_board.lua reads the ring: once these seconds are whole, it shows the same three, and a
    // slot still holding a second two minutes old counts for nothing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while redis_second(&bench).await <= after {
        assert!(std::time::Instant::now() < deadline, "Redis time moves on");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let figures = status_board::projection(
        &bench.redis,
        &bench.keys,
        bench.namespace,
        &["job"],
        &[],
        16,
    )
    .await
    .expect("status_board.lua");
    let shown: (i64, i64) = figures
        .outcomes
        .iter()
        .filter(|o| (now..=after).contains(&o.unix_second))
        .fold((0, 0), |(s, f), o| (s + o.succeeded, f + o.failed));
    assert_eq!(shown, (2, 1), "{:?}", figures.outcomes);
    let stale_shown: i64 = figures
        .outcomes
        .iter()
        .filter(|o| o.unix_second > after)
        .map(|o| o.succeeded + o.failed)
        .sum();
    assert_eq!(stale_shown, 0, "{:?}", figures.outcomes);
}

/// Two commands of `job` admitted in resources `r1` and `r2`, and one more waiting in `r3`.
async fn two_running_one_waiting(bench: &Fixture) -> (Vec<AdmittedHead>, CommandId) {
    bench.configure(&[("job", "100 1000 1000 0")], &[]).await;
    bench.queue_job("r1").await;
    bench.queue_job("r2").await;
    let heads = bench.admitted_heads(admit_limits(2)).await;
    assert_eq!(heads.len(), 2, "both admitted");
    let waiting = bench.queue_job("r3").await;
    (heads, waiting)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_ask_for_the_keys_they_learn_by_reading_and_answer_with_them() {
    let bench = Fixture::new().await;
    let (heads, waiting) = two_running_one_waiting(&bench).await;
    let running: HashSet<CommandId> = heads.iter().map(|h| h.command_id).collect();
    let keys = &bench.keys;
    let ns = bench.namespace;

    // permit_holders.lua with the lease zset only: it names both holders' status hashes.
    let answer: Value = bench
        .redis
        .permit_holders(
            vec![keys.command_leases(ns, "job")],
            vec![10.into(), keys.command_prefix().into()],
        )
        .await
        .expect("permit_holders.lua");
    let expected: HashSet<String> = running.iter().map(|id| keys.command(*id)).collect();
    assert_eq!(asked(&answer, "permit_holders.lua"), expected);
    let found = permit_holders(&bench.redis, keys, ns, "job", 10)
        .await
        .expect("holders");
    let found_ids: HashSet<CommandId> = found.iter().map(|h| h.command_id).collect();
    assert_eq!(found_ids, running);
    assert!(
        found.iter().all(|h| h.live && h.attempt.is_some()),
        "{found:?}"
    );

    // metrics.lua without the command's lease zset: it names it.
    let answer: Value = bench
        .redis
        .metrics(
            vec![
                keys.meta(),
                keys.count(),
                keys.admission_config(),
                keys.application_leases(),
            ],
            vec![],
        )
        .await
        .expect("metrics.lua");
    assert_eq!(
        asked(&answer, "metrics.lua"),
        HashSet::from([keys.command_leases(ns, "job")])
    );
    let figures = read_app_figures(&bench.redis, keys.application_id())
        .await
        .expect("metrics");
    let job = figures
        .commands
        .iter()
        .find(|c| c.command == "job")
        .expect("the command is reported");
    assert_eq!(
        (job.permits, job.queued),
        (2, 1),
        "two running, one waiting: {figures:?}"
    );

    // status_board.lua asking: the waiting resource's queue and lease zset.
    let status_keys = vec![
        keys.meta(),
        keys.application_leases(),
        keys.outcomes(ns),
        keys.command_leases(ns, "job"),
        keys.resource_ready(ns, "job"),
    ];
    let status_args = |mode: &str| -> Vec<Value> {
        vec![
            ns.to_string().into(),
            16.into(),
            5.into(),
            10.into(),
            1.into(),
            mode.into(),
            "job".into(),
        ]
    };
    let answer: Value = bench
        .redis
        .status_board(status_keys.clone(), status_args("ask"))
        .await
        .expect("status_board.lua");
    // Every resource still in the command's `rq` set (a resource leaves it when admit.lua finds
    // its queue empty): the two started from and the one waiting.
    let r3 = bench.suffix("job", "r3");
    let resources: HashSet<String> = ["r1", "r2", "r3"]
        .iter()
        .flat_map(|r| {
            let suffix = bench.suffix("job", r);
            [keys.queue_by_suffix(&suffix), keys.resource_leases(&suffix)]
        })
        .collect();
    assert_eq!(asked(&answer, "status_board.lua"), resources);
    // "partial" without them looks at nothing it was not given.
    let answer: Vec<Value> = bench
        .redis
        .status_board(status_keys.clone(), status_args("partial"))
        .await
        .expect("status_board.lua");
    assert_eq!(
        answer[3].as_i64(),
        Some(0),
        "no resource scanned: {answer:?}"
    );
    let figures = status_board::projection(&bench.redis, keys, ns, &["job"], &[], 16)
        .await
        .expect("status");
    assert_eq!(figures.command_in_flight, vec![2]);
    assert_eq!(figures.resources_waiting, 1, "{figures:?}");
    assert_eq!(figures.busiest.len(), 1, "{figures:?}");

    // ticket.lua without the queue names it; read_status then reads the position.
    let answer: Value = bench
        .redis
        .ticket(
            vec![keys.meta(), keys.command(waiting), keys.starts()],
            vec![],
        )
        .await
        .expect("ticket.lua");
    assert_eq!(
        asked(&answer, "ticket.lua"),
        HashSet::from([keys.queue_by_suffix(&r3)])
    );
    let read = read_status(&bench.redis, keys, waiting, None)
        .await
        .expect("ticket");
    assert_eq!(read.position, Some(0));
    assert_eq!(read.queue_suffix.as_deref(), Some(r3.as_str()));
}
