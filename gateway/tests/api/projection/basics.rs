//! The Redis projection: polls never touch PostgreSQL while Redis is healthy, a lost projection
//! is rebuilt from PostgreSQL in the original order, and a pause recorded only in PostgreSQL
//! still holds.

use sluice_durable::ids::CommandId;
use std::sync::atomic::Ordering;

use fred::prelude::*;
use hyper::StatusCode;

use crate::support::*;

/// Ticket polls are answered from Redis alone while Redis is healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticket_polls_do_not_touch_postgres() {
    let stack = Stack::start().await;
    let offer = offer();
    let mut tickets = Vec::new();
    for i in 0..5 {
        let reply = stack.enqueue(&format!("u{i}"), &key(), &offer).await;
        tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_string());
    }
    for _ in 0..20 {
        for (position, ticket) in tickets.iter().enumerate() {
            let poll = stack.poll(ticket).await;
            assert_eq!(poll.status, StatusCode::OK);
            assert_eq!(poll.data()["status"], "accepted");
            assert_eq!(poll.data()["queue"]["position"], position);
            assert!(
                poll.data()["poll_after_ms"]
                    .as_u64()
                    .is_some_and(|ms| (400..=6_000).contains(&ms))
            );
            assert_eq!(poll.data()["generation"], "1");
        }
    }
    assert_eq!(
        stack
            .gateway
            .stats
            .postgres_fallbacks
            .load(Ordering::Relaxed),
        0
    );
}

/// Losing every key of the application: the next enqueue rebuilds the projection from
/// PostgreSQL; queues keep their original order, counts are right, the generation moves on and
/// old tickets stay valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_projection_is_rebuilt_in_original_order() {
    let stack = Stack::start().await;
    let offer = offer();
    let mut tickets = Vec::new();
    for i in 0..10 {
        let reply = stack.enqueue(&format!("u{i}"), &key(), &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED);
        tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_string());
    }
    // Cancel one in the middle so the rebuilt queue must skip it.
    let cancelled = stack.poll(&tickets[4]).await.data()["command_id"]
        .as_str()
        .expect("id")
        .to_string();
    let cancel = stack
        .post(
            &format!("/v1/commands/{cancelled}:cancel"),
            Some(&stack.credential()),
            "",
        )
        .await;
    assert_eq!(cancel.data()["status"], "cancelled");

    stack.lose_projection().await;

    let after = stack.enqueue("late", &key(), &offer).await;
    assert_eq!(after.status, StatusCode::ACCEPTED, "{:?}", after.body);
    assert_eq!(after.data()["queue"]["position"], 9);
    let mut expected = 0;
    for (i, ticket) in tickets.iter().enumerate() {
        let poll = stack.poll(ticket).await;
        assert_eq!(poll.status, StatusCode::OK);
        if i == 4 {
            // Terminal commands are not projected again; their poll comes from PostgreSQL.
            assert_eq!(poll.data()["status"], "cancelled");
            continue;
        }
        assert_eq!(poll.data()["generation"], "2");
        assert_eq!(poll.data()["queue"]["position"], expected, "ticket {i}");
        expected += 1;
    }
    let counters = stack.counters().await;
    assert_eq!(counters.get("unfinished").copied(), Some(10));
    assert_eq!(
        counters
            .get(&format!("queued:{}:claim", stack.creds.namespace_id))
            .copied(),
        Some(10)
    );
}

/// A pause that only PostgreSQL knows (Redis lost the flag) still refuses intake, and the
/// refused call leaves no row, reservation or count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_recorded_in_postgres_holds_without_redis() {
    let stack = Stack::start().await;
    sqlx::query("INSERT INTO controls (namespace_id, command, paused, reason) VALUES ($1, 'claim', true, 'test')")
        .bind(stack.creds.namespace_id)
        .execute(&stack.pg)
        .await
        .expect("pause in PostgreSQL only");
    let refused = stack.enqueue("u1", &key(), &offer()).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.code(), "INTAKE_PAUSED");
    assert!(refused.headers.contains_key("retry-after"));
    assert_eq!(stack.count_rows().await, 0);
    assert_eq!(stack.reservations("claim").await, 0);
    assert_eq!(
        stack
            .counters()
            .await
            .get("unfinished")
            .copied()
            .unwrap_or(0),
        0
    );
}

/// The Redis pause flag refuses at once, before any reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_flag_in_redis_refuses_and_replays_still_answer() {
    let stack = Stack::start().await;
    let offer = offer();
    let key = key();
    assert_eq!(
        stack.enqueue("u1", &key, &offer).await.status,
        StatusCode::ACCEPTED
    );
    let field = format!("paused:{}", stack.creds.namespace_id);
    let _: () = stack
        .redis
        .pool()
        .next()
        .hset(stack.keys().meta(), (field.as_str(), "1"))
        .await
        .expect("pause");
    let refused = stack.enqueue("u2", &key, &offer).await;
    assert_eq!(refused.code(), "INTAKE_PAUSED");
    let replay = stack.enqueue("u1", &key, &offer).await;
    assert_eq!(
        replay.status,
        StatusCode::OK,
        "a replay is an answer about existing work"
    );
    assert_eq!(stack.count_rows().await, 1);
}

/// A command back in line after a lapsed lease (`retry_wait`) still shows its queue position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeued_command_shows_its_position() {
    let stack = Stack::start().await;
    let offer = offer();
    let first = stack.enqueue("u1", &key(), &offer).await;
    let second = stack.enqueue("u2", &key(), &offer).await;
    let id = second.data()["command_id"].as_str().expect("id");
    let id = uuid::Uuid::parse_str(id).expect("uuid");
    let _: () = stack
        .redis
        .pool()
        .next()
        .hset(
            stack.keys().command(CommandId::from_uuid(id)),
            ("status", "retry_wait"),
        )
        .await
        .expect("requeued status");
    let poll = stack
        .poll(second.data()["ticket"].as_str().expect("ticket"))
        .await;
    assert_eq!(poll.data()["status"], "retry_wait");
    assert_eq!(poll.data()["queue"]["position"], 1);
    assert_eq!(first.status, StatusCode::ACCEPTED);
}
