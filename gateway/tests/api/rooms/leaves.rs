//! Leaves at the size of a drop: concurrent leaves share one transaction, each ends its own
//! live place once and nothing else. Judged by PostgreSQL's rows (`state`, `xmin`).

use std::collections::HashMap;

use sluice_durable::batching::BatchWriter;
use sluice_durable::rooms::leaves::{LeaveRequest, Leaves};
use sluice_durable::rooms::places::PassChange;
use uuid::Uuid;

use super::heartbeats::{BEAT, admitted_crowd};
use super::kit::*;

/// One batch: every live place it names leaves in one transaction; a place named twice is
/// answered changed once; a place named by another subject is refused and stays; an unknown id
/// is answered none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_leaves_each_named_place_once_and_nothing_else() {
    let stack = stack_with_rooms(BEAT).await;
    let crowd = admitted_crowd(&stack).await;
    let namespace_id = stack.creds.namespace_id;
    let place = |subject: &str| crowd[subject].0;
    let job = |subject: &str, id: Uuid| LeaveRequest {
        namespace_id,
        id,
        subject: subject.to_string(),
    };
    let jobs = [
        job("p0", place("p0")),
        job("p1", place("p1")),
        job("p0", place("p0")),
        job("p2", place("p3")),
        job("p4", Uuid::new_v4()),
    ];
    let outcomes = Leaves
        .write(&stack.pg, &jobs)
        .await
        .expect("the batch commits");
    let shapes: Vec<&str> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Some(PassChange::Changed(_)) => "changed",
            Some(PassChange::Unchanged(_)) => "unchanged",
            Some(PassChange::NotTheHolders) => "not the holder's",
            Some(PassChange::Ended(_)) => "ended",
            None => "none",
        })
        .collect();
    assert_eq!(
        shapes,
        [
            "changed",
            "changed",
            "unchanged",
            "not the holder's",
            "none"
        ]
    );

    let rows: HashMap<Uuid, (String, String)> = sqlx::query_as::<_, (Uuid, String, String)>(
        "SELECT id, state, xmin::text FROM room_places WHERE namespace_id = $1 AND room = 'beat'",
    )
    .bind(namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("the places")
    .into_iter()
    .map(|(id, state, xmin)| (id, (state, xmin)))
    .collect();
    let (p0, p1) = (&rows[&place("p0")], &rows[&place("p1")]);
    assert_eq!((p0.0.as_str(), p1.0.as_str()), ("left", "left"));
    assert_eq!(p0.1, p1.1, "both leaves in one transaction");
    for (id, (state, _)) in &rows {
        if *id != place("p0") && *id != place("p1") {
            assert_eq!(state, "admitted", "place {id} changed by another's leave");
        }
    }
}
