//! Leaves at the size of a drop: concurrent leaves share one transaction, each ends its own
//! live place once and nothing else. Judged by PostgreSQL's rows (`state`, `xmin`).

use std::collections::HashMap;
use std::time::Duration;

use sluice_store::batching::BatchWriter;
use sluice_store::rooms::leaves::{LeaveRequest, Leaves};
use sluice_store::rooms::places::PassChange;
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

/// One slot, two waiting places.
const RACE: &str = r#"
[[room]]
code = "race"
max_active = 1
pass_seconds = 60
"#;

/// A leave that commits while the admission step is admitting its place: the step waits for
/// it and skips the place, which stays left; the slot goes to the next place. Witness:
/// PostgreSQL's rows, and its own record of the step waiting for the leave's row lock. (The
/// table's check that an admitted place has not ended would refuse the admission of a left
/// place, failing the whole step; the step's statement skips it instead.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_committed_during_an_admission_is_never_admitted() {
    let stack = stack_with_rooms(RACE).await;
    let namespace_id = stack.creds.namespace_id;
    // Past the room's counters: the ticker leaves the room alone until they are set below.
    insert_waiting_places(&stack, "race", 2).await;
    let place = |subject: &'static str| {
        let pg = stack.pg.clone();
        async move {
            sqlx::query_scalar::<_, Uuid>(
                "SELECT id FROM room_places WHERE namespace_id = $1 AND room = 'race'
                    AND subject = $2",
            )
            .bind(namespace_id)
            .bind(subject)
            .fetch_one(&pg)
            .await
            .expect("the place")
        }
    };
    let (first, second) = (place("person-1").await, place("person-2").await);

    // The first place leaves, as `leaves.rs` writes it, and holds its row until told.
    let mut leave = stack.pg.begin().await.expect("begin");
    sqlx::query(
        "UPDATE room_places SET state = 'left', ended_at = clock_timestamp(),
                leave_counted = false
          WHERE id = $1",
    )
    .bind(first)
    .execute(&mut *leave)
    .await
    .expect("the leave");
    sqlx::query(
        "UPDATE rooms SET waiting = 2, next_seq = 3 WHERE namespace_id = $1 AND code = 'race'",
    )
    .bind(namespace_id)
    .execute(&stack.pg)
    .await
    .expect("the room's counters");
    // The ticker's step reaches the first place and waits for its row.
    until(Duration::from_secs(10), || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE wait_event_type = 'Lock' AND query LIKE '%SET state = ''admitted''%'",
        )
        .fetch_one(&stack.pg)
        .await
        .expect("pg_stat_activity");
        (waiting == 1, waiting)
    })
    .await
    .unwrap_or_else(|waiting| panic!("{waiting} admission steps waiting for the leave"));
    leave.commit().await.expect("the leave commits");

    let states = until(Duration::from_secs(10), || async {
        let states: HashMap<Uuid, String> = sqlx::query_as::<_, (Uuid, String)>(
            "SELECT id, state FROM room_places WHERE namespace_id = $1 AND room = 'race'",
        )
        .bind(namespace_id)
        .fetch_all(&stack.pg)
        .await
        .expect("the places")
        .into_iter()
        .collect();
        (states[&second] == "admitted", states)
    })
    .await
    .unwrap_or_else(|states| panic!("the slot never went to the next place: {states:?}"));
    assert_eq!(states[&first], "left", "the place that left was admitted");
    let (active, waiting): (i64, i64) = sqlx::query_as(
        "SELECT active, waiting FROM rooms WHERE namespace_id = $1 AND code = 'race'",
    )
    .bind(namespace_id)
    .fetch_one(&stack.pg)
    .await
    .expect("the room");
    assert_eq!((active, waiting), (1, 0), "the room's figures");
}
