//! `held` lists the leases `admit.lua` took; landing and requeueing release exactly those.

use super::*;

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
