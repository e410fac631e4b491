//! Many callers at once: every answer explicit, the rows exactly the acceptances, queue
//! positions dense and in acceptance order.

use std::collections::{HashMap, HashSet};

use hyper::StatusCode;
use uuid::Uuid;

use crate::support::*;

/// The shared claim declaration with an intake bucket the callers will outrun.
fn declaration() -> String {
    CLAIM_DECLARATION.replace(
        "intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }",
        "intake = { per_second = 2000, burst = 1500, max_in_flight = 150 }",
    )
}

/// 5,000 enqueues from 200 concurrent tasks over 50 resources: every call is answered 202 or an
/// explicit 429; the accepted rows in PostgreSQL are exactly the 202 answers; positions within a
/// resource are 0..n-1 in acceptance (queue sequence) order; Redis counts agree with the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_enqueues_from_two_hundred_tasks_over_fifty_resources() {
    let stack = std::sync::Arc::new(Stack::with_declaration(&declaration()).await);
    let offers: Vec<String> = (0..50).map(|_| offer()).collect();
    let mut tasks = Vec::new();
    for task in 0..200 {
        let stack = stack.clone();
        let offers = offers.clone();
        tasks.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            for i in 0..25 {
                let offer = &offers[(task * 25 + i) % offers.len()];
                let reply = stack
                    .enqueue(&format!("user-{task}-{i}"), &key(), offer)
                    .await;
                answers.push((reply, offer.clone()));
            }
            answers
        }));
    }
    let mut accepted: HashMap<Uuid, (String, String)> = HashMap::new();
    let mut refused = 0;
    for task in tasks {
        for (reply, offer) in task.await.expect("task") {
            match reply.status {
                StatusCode::ACCEPTED => {
                    let data = reply.data();
                    assert_eq!(data["deduplicated"], false);
                    let id =
                        Uuid::parse_str(data["command_id"].as_str().expect("id")).expect("uuid");
                    let ticket = data["ticket"].as_str().expect("ticket").to_string();
                    assert!(
                        accepted.insert(id, (offer, ticket)).is_none(),
                        "command id answered twice"
                    );
                }
                StatusCode::TOO_MANY_REQUESTS => {
                    assert_eq!(reply.code(), "RATE_LIMITED", "{:?}", reply.body);
                    assert!(reply.headers.contains_key("retry-after"));
                    refused += 1;
                }
                other => panic!("unexpected answer {other}: {:?}", reply.body),
            }
        }
    }
    assert_eq!(accepted.len() + refused, 5_000);
    assert!(!accepted.is_empty());

    let rows: Vec<(Uuid, String, i64)> = sqlx::query_as(
        "SELECT id, resource_key, queue_seq FROM commands WHERE application_id = $1",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("rows");
    let row_ids: HashSet<Uuid> = rows.iter().map(|r| r.0).collect();
    let answered: HashSet<Uuid> = accepted.keys().copied().collect();
    assert_eq!(row_ids, answered, "rows must be exactly the 202 answers");

    let mut by_resource: HashMap<String, Vec<(i64, Uuid)>> = HashMap::new();
    for (id, resource, seq) in &rows {
        assert_eq!(&accepted[id].0, resource, "resource key of {id}");
        by_resource
            .entry(resource.clone())
            .or_default()
            .push((*seq, *id));
    }
    for (resource, mut queue) in by_resource {
        queue.sort();
        for (expected, (_, id)) in queue.iter().enumerate() {
            let poll = stack.poll(&accepted[id].1).await;
            assert_eq!(poll.status, StatusCode::OK, "{:?}", poll.body);
            assert_eq!(
                poll.data()["queue"]["position"].as_u64(),
                Some(expected as u64),
                "position of {id} in {resource}"
            );
        }
    }

    let counters = stack.counters().await;
    let total = accepted.len() as i64;
    assert_eq!(counters.get("unfinished").copied(), Some(total));
    assert_eq!(
        counters
            .get(&format!("waiting:{}", stack.creds.namespace_id))
            .copied(),
        Some(total)
    );
    assert_eq!(
        stack.reservations("claim").await,
        0,
        "no reservation may outlive its request"
    );
    assert_eq!(
        stack
            .gateway
            .stats
            .postgres_fallbacks
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}
