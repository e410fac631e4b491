//! Waiting places' polls answered from the gateway's memory: what they tell against what
//! PostgreSQL holds (never a smaller position than the places really ahead, the queue's own
//! order once the front is read again), how few reads of the room they cost, a leave seen by
//! the next poll here and within a read elsewhere, and a leave that does not wait for the
//! admission ticker's hold on the room's row.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::json;
use uuid::Uuid;

use super::kit::*;
use crate::support::*;

/// Five places admitted, and nobody else until a minute has passed.
const CROWD: &str = r#"
[[room]]
code = "crowd"
max_active = 5
pass_seconds = 60
"#;

const PEOPLE: usize = 40;

/// Per waiting place in PostgreSQL: its order and how many waiting places are ahead of it.
async fn truth(stack: &Stack) -> HashMap<Uuid, (i64, u64)> {
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT id, ord FROM room_places WHERE room = 'crowd' AND state = 'waiting' ORDER BY ord",
    )
    .fetch_all(&stack.pg)
    .await
    .expect("waiting places");
    rows.into_iter()
        .enumerate()
        .map(|(ahead, (id, ord))| (id, (ord, ahead as u64)))
        .collect()
}

async fn admitted_through(stack: &Stack) -> i64 {
    sqlx::query_scalar("SELECT admitted_through FROM rooms WHERE code = 'crowd'")
        .fetch_one(&stack.pg)
        .await
        .expect("the room")
}

/// Everyone joins; once the first five are admitted, the rest wait for a minute.
async fn crowd(stack: &Stack) -> Vec<(String, Uuid, String)> {
    let mut people = Vec::new();
    for person in 0..PEOPLE {
        let subject = format!("p{person}");
        let reply = join(stack, "crowd", &subject).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        let id: Uuid = reply.data()["join_id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .expect("join_id");
        let ticket = reply.data()["ticket"].as_str().expect("ticket").to_owned();
        people.push((subject, id, ticket));
    }
    until(Duration::from_secs(10), || async {
        (admitted_through(stack).await == 5, ())
    })
    .await
    .expect("the first five admitted");
    people
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_polls_come_from_memory_and_never_tell_fewer_ahead_than_postgresql() {
    let stack = stack_with_rooms(CROWD).await;
    let people = crowd(&stack).await;
    let truth_before = truth(&stack).await;
    assert_eq!(truth_before.len(), PEOPLE - 5);

    let boards = &stack.gateway.room_boards;
    let (answered, reads) = (
        boards.answered.load(Ordering::Relaxed),
        boards.reads.load(Ordering::Relaxed),
    );
    let started = Instant::now();
    let mut polls = 0u64;
    for _ in 0..10 {
        for (_, id, ticket) in &people {
            let reply = stack.poll(ticket).await;
            assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
            let Some(&(ord, ahead)) = truth_before.get(id) else {
                assert_eq!(reply.data()["status"], "admitted", "{:?}", reply.body);
                continue;
            };
            polls += 1;
            assert_eq!(reply.data()["status"], "waiting");
            let told = reply.data()["queue"]["position"]
                .as_u64()
                .expect("position");
            // Nobody left and the front stood still: the told position is the queue's.
            assert_eq!(told, ahead, "place of order {ord}: {:?}", reply.body);
            assert_eq!(told, (ord - 5 - 1) as u64);
        }
    }
    let elapsed = started.elapsed();
    let answered = boards.answered.load(Ordering::Relaxed) - answered;
    let reads = boards.reads.load(Ordering::Relaxed) - reads;
    assert_eq!(answered, polls, "every waiting place's poll from memory");
    // One read of the room per freshness period at most (and the first).
    let bound = elapsed.as_millis() as u64 / 200 + 2;
    assert!(
        reads <= bound,
        "{reads} reads of the room for {polls} polls in {elapsed:?}"
    );
    assert!(polls >= 300, "{polls}");

    // Three people leave the queue here: their next poll says so. One more leaves through
    // PostgreSQL alone (as through another gateway): seen within a read of the room.
    for (subject, _, ticket) in &people[10..13] {
        let left = leave(&stack, subject, "ticket", ticket).await;
        assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
        let polled = stack.poll(ticket).await;
        assert_eq!(polled.data()["status"], "left", "{:?}", polled.body);
    }
    let (subject, id, ticket) = &people[20];
    sluice_store::rooms::leaves::leave(&stack.pg, stack.creds.namespace_id, *id, subject)
        .await
        .expect("leave")
        .expect("the place");
    poll_until(&stack, ticket, "left", Duration::from_secs(3)).await;

    // Those behind are never told fewer ahead than there are.
    let truth_after = truth(&stack).await;
    assert_eq!(truth_after.len(), PEOPLE - 5 - 4);
    for (_, id, ticket) in &people {
        let Some(&(_, ahead)) = truth_after.get(id) else {
            continue;
        };
        let reply = stack.poll(ticket).await;
        let told = reply.data()["queue"]["position"]
            .as_u64()
            .expect("position");
        assert!(
            told >= ahead,
            "told {told}, {ahead} ahead: {:?}",
            reply.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_does_not_wait_for_the_rooms_row_and_is_counted_at_the_next_step() {
    let stack = stack_with_rooms(CROWD).await;
    let people = crowd(&stack).await;
    let room_before = stack
        .get("/v1/rooms/crowd", Some(&stack.subject_token("p0")))
        .await;
    assert_eq!(room_before.data()["waiting"], json!(PEOPLE - 5));

    // The ticker's hold on the room's row, held here for as long as the leaves take.
    let mut holder = stack.pg.begin().await.expect("begin");
    sqlx::query("SELECT code FROM rooms WHERE code = 'crowd' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .expect("hold the room's row");
    let (waiting_subject, _, waiting_ticket) = &people[30];
    let left = tokio::time::timeout(
        Duration::from_secs(3),
        leave(&stack, waiting_subject, "ticket", waiting_ticket),
    )
    .await
    .expect("a leave answers while the room's row is held");
    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
    assert_eq!(left.data()["changed"], json!(true));
    let admitted = stack.poll(&people[0].2).await;
    let pass = admitted.data()["pass"].as_str().expect("pass").to_owned();
    let left_admitted = tokio::time::timeout(
        Duration::from_secs(3),
        leave(&stack, &people[0].0, "pass", &pass),
    )
    .await
    .expect("an admitted place's leave too");
    assert_eq!(
        left_admitted.status,
        StatusCode::OK,
        "{:?}",
        left_admitted.body
    );
    holder.rollback().await.expect("let go");

    // The ticker counts both into the room's figures, once.
    let room = until(Duration::from_secs(5), || async {
        let room = stack
            .get("/v1/rooms/crowd", Some(&stack.subject_token("p0")))
            .await;
        (room.data()["left_total"] == json!(2), room.data().clone())
    })
    .await
    .unwrap_or_else(|last| panic!("leaves never counted: {last}"));
    assert_eq!(room["waiting"], json!(PEOPLE - 5 - 1), "{room}");
    assert_eq!(room["active"], json!(4), "{room}");
    let (waiting, active): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE state = 'waiting'), count(*) FILTER (WHERE state = 'admitted')
           FROM room_places WHERE room = 'crowd'",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("count places");
    assert_eq!((waiting, active), (PEOPLE as i64 - 5 - 1, 4));
}

/// Admits twenty places a second, whoever waits.
const PACED: &str = r#"
[[room]]
code = "paced"
admit_per_minute = 1200
pass_seconds = 60
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_flush_mid_room_loses_no_place_and_breaks_no_order() {
    let redis = start_private_redis().await;
    let stack = Stack::start_with(StackOptions {
        declaration: format!("{CLAIM_DECLARATION}\n{PACED}"),
        redis_url: Some(redis.url()),
        ..StackOptions::default()
    })
    .await;
    let mut tickets = Vec::new();
    for person in 0..40 {
        if person == 20 {
            stack.flush_redis().await;
        }
        let reply = join(&stack, "paced", &format!("p{person}")).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_owned());
    }
    for ticket in &tickets {
        let admitted = poll_until(&stack, ticket, "admitted", Duration::from_secs(20)).await;
        assert!(admitted["pass"].is_string(), "{admitted}");
    }
    // PostgreSQL's rows: forty places, one per person, numbered 1…40 and admitted in that order.
    let rows: Vec<(i64, String, Option<chrono::DateTime<chrono::Utc>>)> = sqlx::query_as(
        "SELECT seq, subject, admitted_at FROM room_places WHERE room = 'paced' ORDER BY seq",
    )
    .fetch_all(&stack.pg)
    .await
    .expect("the places");
    assert_eq!(rows.len(), 40);
    assert!(
        rows.iter()
            .enumerate()
            .all(|(i, (seq, _, _))| *seq == i as i64 + 1)
    );
    let subjects: std::collections::HashSet<&String> = rows.iter().map(|(_, s, _)| s).collect();
    assert_eq!(subjects.len(), 40);
    let admitted: Vec<_> = rows
        .iter()
        .map(|(_, _, at)| at.expect("admitted"))
        .collect();
    assert!(admitted.windows(2).all(|w| w[0] <= w[1]), "{admitted:?}");
    drop(redis);
}
