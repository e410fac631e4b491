//! Every permit and start token of a command's limit keys, or none: under concurrent callers, with a rate-limited second key.

use super::*;

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
