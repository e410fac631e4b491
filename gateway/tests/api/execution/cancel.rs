//! Cancels: at once while waiting, an intent once started, decided exactly one way.

use super::*;

/// Cancelled while waiting: `cancelled` at once, out of the queue; the executor started later
/// runs the others and never allocates for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cancelled_while_waiting_never_runs() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 100);
    let stack = Stack::with_declaration(&declaration).await;
    let offer = offer();
    let mut replies = Vec::new();
    for i in 0..5 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED);
        replies.push(reply);
    }
    let victim = id_of(&replies[1]);
    let answer = cancel(&stack, &victim).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.data()["status"], "cancelled");
    assert_eq!(answer.data()["cancel_requested"], false);
    let poll = stack.poll(&ticket_of(&replies[1])).await;
    assert_eq!(poll.data()["status"], "cancelled");
    // The command behind it moved up; the counts gave one back.
    assert_eq!(
        stack.poll(&ticket_of(&replies[2])).await.data()["queue"]["position"],
        1
    );
    let ns = stack.creds.namespace_id;
    assert_eq!(counter(&stack, "unfinished").await, 4);
    assert_eq!(counter(&stack, &format!("waiting:{ns}")).await, 4);
    // Cancelling again changes nothing.
    let again = cancel(&stack, &victim).await;
    assert_eq!(again.data()["status"], "cancelled");
    assert_eq!(counter(&stack, "unfinished").await, 4);

    let shutdown = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(15)).await);
    for (i, reply) in replies.iter().enumerate() {
        let full = record(&stack, &id_of(reply)).await;
        let expected = if i == 1 { "cancelled" } else { "succeeded" };
        assert_eq!(full.data()["status"], expected, "{:?}", full.body);
        // The ticket is answered from Redis, whose side of the landing follows PostgreSQL's
        // commit (on a Redis Cluster, by a few milliseconds more).
        let ticket = ticket_of(reply);
        let shown = eventually(Duration::from_secs(5), || async {
            stack.poll(&ticket).await.data()["status"] == expected
        })
        .await;
        assert!(
            shown,
            "the ticket of {i} shows {expected}: {:?}",
            stack.poll(&ticket).await.body
        );
    }
    let allocated = allocations(&stack).await;
    assert_eq!(allocated.len(), 4);
    assert!(!allocated.contains_key(&victim.parse().expect("uuid")));
    assert_counters_settle_at_zero(&stack, &["claim"]).await;
    shutdown.cancel();
}

/// 200 commands on one resource, each cancelled right after its acceptance while the executor
/// runs: every command ends exactly one way (cancelled without allocation, or decided by the
/// handler with the intent recorded), never more allocations than units, counters at zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_racing_the_executor_end_exactly_one_way() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 100);
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let shutdown = start_executor(&stack, fast_executor());
    let offer = Arc::new(offer());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (stack, offer, next) = (stack.clone(), offer.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            // (command id, ticket, status the cancel answered, cancel_requested it answered)
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= 200 {
                    return mine;
                }
                let reply = stack.enqueue(&format!("racer-{i}"), &key(), &offer).await;
                assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
                let id = id_of(&reply);
                let answer = cancel(&stack, &id).await;
                assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
                let status = answer.data()["status"]
                    .as_str()
                    .expect("status")
                    .to_string();
                let requested = answer.data()["cancel_requested"].as_bool().expect("bool");
                mine.push((id, ticket_of(&reply), status, requested));
            }
        }));
    }
    let mut cancels = Vec::new();
    for task in tasks {
        cancels.extend(task.await.expect("task"));
    }
    assert_eq!(cancels.len(), 200);
    assert!(
        all_terminal(&stack, Duration::from_secs(15)).await,
        "{:?}",
        status_counts(&stack).await
    );
    let allocated = allocations(&stack).await;
    assert!(allocated.len() <= 100);
    assert_eq!(
        pool_allocated(&stack, "stock").await,
        allocated.len() as i64
    );
    let by_id: std::collections::HashMap<String, Row> = rows(&stack)
        .await
        .into_iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let mut tally: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (id, ticket, answered, requested) in &cancels {
        let row = &by_id[id];
        *tally
            .entry(format!("{} (cancel answered {answered})", row.status))
            .or_default() += 1;
        match row.status.as_str() {
            "cancelled" => {
                assert!(
                    !allocated.contains_key(&row.id),
                    "cancelled and allocated: {row:?}"
                );
                assert_eq!(answered, "cancelled", "only a waiting command is cancelled");
                assert!(!row.cancel_requested);
            }
            "succeeded" => {
                assert!(allocated.contains_key(&row.id), "{row:?}");
                assert_ne!(answered, "cancelled", "{row:?}");
            }
            "rejected" => {
                assert!(!allocated.contains_key(&row.id), "{row:?}");
                assert_eq!(row.error_code.as_deref(), Some("SOLD_OUT"));
                assert_ne!(answered, "cancelled", "{row:?}");
            }
            other => panic!("unexpected final status {other}: {row:?}"),
        }
        let in_flight = answered == "executing" || answered == "running";
        assert_eq!(*requested, in_flight, "the answer's intent: {answered}");
        assert_eq!(
            row.cancel_requested, in_flight,
            "the intent is recorded exactly when the command was executing: {row:?} ({answered})"
        );
        let poll = stack.poll(ticket).await;
        assert_eq!(
            poll.data()["status"].as_str(),
            Some(row.status.as_str()),
            "the ticket mirrors PostgreSQL"
        );
    }
    eprintln!("cancel race outcomes: {tally:?}");
    assert_counters_settle_at_zero(&stack, &["claim"]).await;
    assert_eq!(held_permits(&stack, "claim").await, 0);
    shutdown.cancel();
}
