//! Sales: exactly the pool, one unit per subject, one result per command.

use super::*;

/// A small sale end to end: 30 subjects for 10 units; exactly 10 succeed, the rest are
/// `SOLD_OUT`, tickets show the results, and the Redis counts return to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_sale_lands_one_result_per_command() {
    let stack = Arc::new(Stack::with_declaration(&sale_declaration(10)).await);
    sale(&stack, 30, 10).await;
}

/// The declaration of [`sale`]: a pool of `units`.
pub(crate) fn sale_declaration(units: u32) -> String {
    CLAIM_DECLARATION.replace("capacity = 100", &format!("capacity = {units}"))
}

/// `subjects` people (16 at a time) for the `units` of a stack of [`sale_declaration`], with an
/// executor of its own, checked as [`a_small_sale_lands_one_result_per_command`] says.
pub(crate) async fn sale(stack: &Arc<Stack>, subjects: usize, units: usize) {
    let offer = Arc::new(offer());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (stack, offer, next) = (stack.clone(), offer.clone(), next.clone());
        callers.spawn(async move {
            let mut tickets = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= subjects {
                    return tickets;
                }
                let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer).await;
                assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
                tickets.push(reply.data()["ticket"].as_str().expect("ticket").to_string());
            }
        });
    }
    let tickets: Vec<String> = callers.join_all().await.into_iter().flatten().collect();
    assert_eq!(tickets.len(), subjects);
    let shutdown = start_executor(stack, fast_executor());
    assert!(
        all_terminal(stack, Duration::from_secs(60)).await,
        "every command lands"
    );
    // Redis's side of each landing (`land.lua`: the status and the counts in one script)
    // follows PostgreSQL's commit; the polls below are answered from Redis.
    assert!(
        eventually(Duration::from_secs(5), || async {
            stack.counters().await.get("unfinished").copied() == Some(0)
        })
        .await,
        "Redis saw every landing: {:?}",
        stack.counters().await
    );
    let mut succeeded = 0;
    let mut allocations = HashSet::new();
    for ticket in &tickets {
        let poll = stack.poll(ticket).await;
        match poll.data()["status"].as_str() {
            Some("succeeded") => {
                succeeded += 1;
                assert!(allocations.insert(poll.data()["result"]["allocation_id"].to_string()));
            }
            Some("rejected") => assert_eq!(poll.data()["error"]["code"], "SOLD_OUT"),
            other => panic!("unexpected status {other:?}: {:?}", poll.body),
        }
    }
    assert_eq!(succeeded, units);
    let allocated: i64 =
        sqlx::query_scalar("SELECT allocated FROM quota_pools WHERE namespace_id = $1")
            .bind(stack.creds.namespace_id)
            .fetch_one(&stack.pg)
            .await
            .expect("pool");
    assert_eq!(allocated, units as i64);
    let rows = super::allocations(stack).await;
    assert_eq!(rows.len(), units, "one allocation row per unit");
    let subjects: HashSet<&String> = rows.values().collect();
    assert_eq!(subjects.len(), units, "no subject holds two units");
    let counters = stack.counters().await;
    assert_eq!(counters.get("unfinished").copied(), Some(0));
    assert_eq!(
        counters
            .get(&format!("waiting:{}", stack.creds.namespace_id))
            .copied(),
        Some(0)
    );
    shutdown.cancel();
}

/// 3,000 subjects (a tenth retrying the same request, a tenth trying a second key) race for a
/// pool of 100 through the API while the executor drains: exactly 100 allocations, no subject
/// twice, every command terminal with SOLD_OUT or ALREADY_ALLOCATED when rejected, the pool and
/// the Redis counters consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flash_sale_allocates_exactly_the_pool() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 100);
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let offer = Arc::new(offer());
    const SUBJECTS: usize = 3_000;
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (stack, offer, next) = (stack.clone(), offer.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            // (subject index, subject, command ids)
            let mut mine: Vec<(usize, String, Vec<String>)> = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= SUBJECTS {
                    return mine;
                }
                let subject = format!("shopper-{i}");
                let first_key = key();
                let first = stack.enqueue(&subject, &first_key, &offer).await;
                assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
                let mut ids = vec![id_of(&first)];
                match shopper(i) {
                    Shopper::Once => {}
                    Shopper::Replays => {
                        let again = stack.enqueue(&subject, &first_key, &offer).await;
                        assert_eq!(again.status, StatusCode::OK, "{:?}", again.body);
                        assert_eq!(again.data()["deduplicated"], true);
                        assert_eq!(id_of(&again), ids[0], "a replay is the same command");
                    }
                    Shopper::SecondKey => {
                        let other = stack.enqueue(&subject, &key(), &offer).await;
                        assert_eq!(other.status, StatusCode::ACCEPTED, "{:?}", other.body);
                        ids.push(id_of(&other));
                        assert_ne!(ids[0], ids[1]);
                    }
                }
                mine.push((i, subject, ids));
            }
        }));
    }
    // Start the executor while the sale is running.
    assert!(
        eventually(Duration::from_secs(20), || async {
            stack.count_rows().await >= 300
        })
        .await,
        "the first commands are accepted"
    );
    let shutdown = start_executor(&stack, fast_executor());
    let mut shoppers: Vec<(usize, String, Vec<String>)> = Vec::new();
    for task in tasks {
        shoppers.extend(task.await.expect("enqueue task"));
    }
    assert_eq!(shoppers.len(), SUBJECTS);
    let expected_rows = (SUBJECTS + SUBJECTS / 10) as i64;
    assert_eq!(stack.count_rows().await, expected_rows);
    assert!(
        all_terminal(&stack, Duration::from_secs(30)).await,
        "every command lands: {:?}",
        status_counts(&stack).await
    );

    let allocated = allocations(&stack).await;
    assert_eq!(allocated.len(), 100, "exactly the pool");
    let twice: Vec<(String, i64)> = sqlx::query_as(
        "SELECT subject, count(*) FROM allocations WHERE namespace_id = $1
          GROUP BY subject HAVING count(*) > 1",
    )
    .bind(stack.creds.namespace_id)
    .fetch_all(&stack.pg)
    .await
    .expect("double allocations");
    assert!(twice.is_empty(), "no subject twice: {twice:?}");
    assert_eq!(pool_allocated(&stack, "stock").await, 100);

    let by_id: std::collections::HashMap<String, Row> = rows(&stack)
        .await
        .into_iter()
        .map(|r| (r.id.to_string(), r))
        .collect();
    let holders: HashSet<&str> = allocated.values().map(String::as_str).collect();
    for (i, subject, ids) in &shoppers {
        let i = *i;
        for id in ids {
            let row = &by_id[id];
            assert_eq!(&row.subject, subject);
            match row.status.as_str() {
                "succeeded" => assert_eq!(
                    allocated.get(&row.id).map(String::as_str),
                    Some(subject.as_str()),
                    "a success is an allocation of its subject"
                ),
                "rejected" => {
                    assert!(!allocated.contains_key(&row.id));
                    let code = row.error_code.as_deref().unwrap_or("");
                    assert!(code == "SOLD_OUT" || code == "ALREADY_ALLOCATED", "{row:?}");
                    if shopper(i) != Shopper::SecondKey {
                        assert_eq!(code, "SOLD_OUT", "a single command: {row:?}");
                    }
                }
                other => panic!("unexpected final status {other}: {row:?}"),
            }
        }
        if shopper(i) == Shopper::SecondKey && holders.contains(subject.as_str()) {
            let statuses: Vec<(&str, Option<&str>)> = ids
                .iter()
                .map(|id| (by_id[id].status.as_str(), by_id[id].error_code.as_deref()))
                .collect();
            assert!(
                statuses.contains(&("succeeded", None))
                    && statuses.contains(&("rejected", Some("ALREADY_ALLOCATED"))),
                "a winner's other command is ALREADY_ALLOCATED: {subject} {statuses:?}"
            );
        }
    }
    assert_counters_settle_at_zero(&stack, &["claim"]).await;
    assert_eq!(held_permits(&stack, "claim").await, 0, "every permit back");
    shutdown.cancel();
}

/// A subject that holds no unit of a sold-out pool is SOLD_OUT on every command; it is never
/// told ALREADY_ALLOCATED ("this subject already holds an allocation of the pool").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_without_a_unit_is_sold_out_not_already_allocated() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 1);
    let stack = Stack::with_declaration(&declaration).await;
    let offer = offer();
    let winner = stack.enqueue("winner", &key(), &offer).await;
    let loser_1 = stack.enqueue("loser", &key(), &offer).await;
    let loser_2 = stack.enqueue("loser", &key(), &offer).await;
    for reply in [&winner, &loser_1, &loser_2] {
        assert_eq!(reply.status, StatusCode::ACCEPTED);
    }
    // All three are admitted, claimed and decided in one batch.
    let shutdown = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(15)).await);
    assert_eq!(
        record(&stack, &id_of(&winner)).await.data()["status"],
        "succeeded"
    );
    let allocated = allocations(&stack).await;
    assert!(!allocated.values().any(|s| s == "loser"));
    for reply in [&loser_1, &loser_2] {
        let full = record(&stack, &id_of(reply)).await;
        assert_eq!(full.data()["status"], "rejected");
        assert_eq!(
            full.data()["error"]["code"],
            "SOLD_OUT",
            "the loser holds no allocation: {:?}",
            full.body
        );
    }
    shutdown.cancel();
}
