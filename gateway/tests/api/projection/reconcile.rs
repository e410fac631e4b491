//! The reconciler repairs waiting commands whose Redis projection is missing (committed while
//! the projection write failed) or whose queue entry is missing, counting each exactly once and
//! keeping acceptance order.

use std::time::Duration;

use fred::prelude::*;
use sluice_durable::ids::CommandId;
use sluice_durable::lifecycle::repair::Cursor;
use uuid::Uuid;

use crate::execution::{all_terminal, fast_executor, start_executor};
use crate::support::*;

async fn reconcile(stack: &Stack, cursor: &mut Cursor) -> usize {
    stack.reconcile(cursor).await
}

#[tokio::test]
async fn lost_projections_are_restored_once_in_acceptance_order() {
    let stack = Stack::start().await;
    let offer = offer();
    let mut ids = Vec::new();
    for subject in ["a", "b", "c", "d"] {
        let reply = stack.enqueue(subject, &key(), &offer).await;
        assert_eq!(reply.status.as_u16(), 202, "{:?}", reply.body);
        ids.push(
            reply.data()["command_id"]
                .as_str()
                .expect("id")
                .parse::<Uuid>()
                .expect("uuid"),
        );
    }
    assert_eq!(stack.open_counts("claim").await, (4, 4, 4));
    let keys = stack.keys();
    let queue = keys.queue(stack.creds.namespace_id, "claim", &offer);
    let client = stack.redis.pool().next();
    // b: committed, never projected (its reservation long expired: no counts either).
    let _: i64 = client.zrem(&queue, ids[1].to_string()).await.expect("zrem");
    let _: i64 = client
        .del(keys.command(CommandId::from_uuid(ids[1])))
        .await
        .expect("del");
    for field in [
        "unfinished",
        &format!("waiting:{}", stack.creds.namespace_id),
        &format!("queued:{}:claim", stack.creds.namespace_id),
    ] {
        let _: i64 = client
            .hincrby(keys.count(), field, -1)
            .await
            .expect("hincrby");
    }
    // c: its status hash says accepted but a failed requeue left it out of its queue (its waiting
    // counts went with the queue entry).
    let _: i64 = client.zrem(&queue, ids[2].to_string()).await.expect("zrem");
    for field in [
        format!("waiting:{}", stack.creds.namespace_id),
        format!("queued:{}:claim", stack.creds.namespace_id),
    ] {
        let _: i64 = client
            .hincrby(keys.count(), field, -1)
            .await
            .expect("hincrby");
    }
    assert_eq!(stack.open_counts("claim").await, (3, 2, 2));

    let mut cursor = Cursor::default();
    assert_eq!(reconcile(&stack, &mut cursor).await, 2);
    assert_eq!(
        stack.open_counts("claim").await,
        (4, 4, 4),
        "each counted exactly once"
    );
    let order: Vec<String> = client
        .zrange(&queue, 0, -1, None, false, None, false)
        .await
        .expect("zrange");
    let expected: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    assert_eq!(order, expected, "acceptance order");
    let status: Option<String> = client
        .hget(keys.command(CommandId::from_uuid(ids[1])), "status")
        .await
        .expect("hget");
    assert_eq!(status.as_deref(), Some("accepted"));
    // A second round finds nothing to repair and changes no count.
    assert_eq!(reconcile(&stack, &mut cursor).await, 0);
    assert_eq!(stack.open_counts("claim").await, (4, 4, 4));
    // And the repaired commands run like the others.
    let executor = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(20)).await);
    // The terminal states are mirrored right after PostgreSQL commits them.
    let drained = eventually(Duration::from_secs(10), || async {
        stack.open_counts("claim").await == (0, 0, 0)
    })
    .await;
    assert!(drained, "{:?}", stack.open_counts("claim").await);
    executor.cancel();
}
