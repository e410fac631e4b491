//! Round robin over the resources of a command.

use super::*;

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
