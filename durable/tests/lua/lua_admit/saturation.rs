//! A saturated resource is skipped until a permit is released, and a saturated command does not block another.

use super::*;

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
