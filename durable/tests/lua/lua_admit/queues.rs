//! Heads come out in queue order; not ready on an older generation; no spec, no admission; the waiting counters drop by exactly the heads.

use super::*;

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
