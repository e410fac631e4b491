//! Budgets and fairness: no head-of-line blocking, start rates, graceful drain.

use super::*;

/// A command with a tiny start rate and a long queue does not hold back another command: the
/// other one's single command runs within about two seconds while most of the first still wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_command_does_not_block_another() {
    let declaration = quota_command(
        "slow",
        "per_second = 2, burst = 1, max_queue = 1000",
        "",
        "stock",
    ) + &quota_command("fast", OPEN_ADMISSION, "", "stock")
        + &pool("stock", 1000);
    let stack = Stack::with_declaration(&declaration).await;
    let resource_a = offer();
    for i in 0..40 {
        let reply = enqueue_command(&stack, "slow", &format!("s-{i}"), &key(), &resource_a).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
    }
    let shutdown = start_executor(&stack, fast_executor());
    assert!(
        eventually(Duration::from_secs(5), || async {
            count_status(&stack, &["succeeded"]).await >= 1
        })
        .await,
        "the slow command is being served"
    );
    let fast = enqueue_command(&stack, "fast", "f-1", &key(), &offer()).await;
    assert_eq!(fast.status, StatusCode::ACCEPTED, "{:?}", fast.body);
    let ticket = ticket_of(&fast);
    let started = tokio::time::Instant::now();
    let done = eventually(Duration::from_millis(2_500), || async {
        stack.poll(&ticket).await.data()["status"] == "succeeded"
    })
    .await;
    let took = started.elapsed();
    assert!(done, "the other command ran within ~2 s (waited {took:?})");
    let still_waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM commands WHERE application_id = $1 AND command = 'slow'
            AND status = 'accepted'",
    )
    .bind(stack.creds.application_id)
    .fetch_one(&stack.pg)
    .await
    .expect("count");
    assert!(
        still_waiting >= 25,
        "most of the slow command still waits: {still_waiting}"
    );
    shutdown.cancel();
}

/// per_second 5, burst 5: over the run the executor never has started more than
/// burst + 5 × elapsed (+1 for rounding) of 30 commands, and it does finish them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_start_rate_is_respected() {
    let declaration = quota_command(
        "claim",
        "per_second = 5, burst = 5, max_in_flight = 100, max_queue = 1000",
        "",
        "stock",
    ) + &pool("stock", 100);
    let stack = Stack::with_declaration(&declaration).await;
    let offer = offer();
    for i in 0..30 {
        let reply = stack.enqueue(&format!("user-{i}"), &key(), &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED);
    }
    let t0 = tokio::time::Instant::now();
    let shutdown = start_executor(&stack, fast_executor());
    let deadline = t0 + Duration::from_secs(15);
    let mut samples = Vec::new();
    loop {
        // Started = no longer waiting in PostgreSQL (a claim follows its admission).
        let started = 30 - count_status(&stack, &["accepted", "retry_wait"]).await;
        let elapsed = t0.elapsed().as_secs_f64();
        samples.push((elapsed, started));
        assert!(
            started as f64 <= 5.0 + 5.0 * elapsed + 1.0,
            "{started} starts after {elapsed:.2} s: {samples:?}"
        );
        if count_status(&stack, &["succeeded"]).await == 30 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "30 commands at 5/s finish within 15 s: {samples:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    assert!(
        elapsed >= (30.0 - 5.0 - 1.0) / 5.0,
        "30 starts took only {elapsed:.2} s"
    );
    shutdown.cancel();
}

/// Cancelling the executor's token while batches are in hand: `run` returns only after they
/// landed, so no row is left `executing`, every permit is back and the waiting work is intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_drain_leaves_nothing_executing() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 10_000);
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let offer = Arc::new(offer());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (stack, offer, next) = (stack.clone(), offer.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 400 {
                let reply = stack
                    .enqueue(&format!("u-{}", uuid::Uuid::new_v4()), &key(), &offer)
                    .await;
                assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    // One transaction per command makes batches slow enough to be caught in hand.
    let config = ExecutorConfig {
        batch_quota: false,
        batch_size: 32,
        ..fast_executor()
    };
    let shutdown = CancellationToken::new();
    let executor = Executor::new(stack.pg.clone(), stack.redis.clone(), config);
    let running = tokio::spawn(executor.run(shutdown.clone()));
    assert!(
        eventually(Duration::from_secs(10), || async {
            count_status(&stack, &["executing"]).await >= 1
        })
        .await,
        "work in hand"
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .expect("run returns after draining")
        .expect("run does not panic");
    let counts = status_counts(&stack).await;
    assert_eq!(
        count_status(&stack, &["executing", "running"]).await,
        0,
        "nothing left executing: {counts:?}"
    );
    let succeeded = count_status(&stack, &["succeeded"]).await;
    assert!(succeeded >= 1, "{counts:?}");
    assert_eq!(allocations(&stack).await.len() as i64, succeeded);
    let waiting = count_status(&stack, &["accepted", "retry_wait"]).await;
    assert_eq!(succeeded + waiting, 400, "{counts:?}");
    assert_eq!(held_permits(&stack, "claim").await, 0, "every permit back");
    let ns = stack.creds.namespace_id;
    assert_eq!(counter(&stack, "unfinished").await, waiting);
    assert_eq!(counter(&stack, &format!("waiting:{ns}")).await, waiting);
    // The rest is still there for the next executor.
    let shutdown = start_executor(&stack, fast_executor());
    assert!(all_terminal(&stack, Duration::from_secs(15)).await);
    assert_eq!(count_status(&stack, &["succeeded"]).await, 400);
    assert_counters_settle_at_zero(&stack, &["claim"]).await;
    shutdown.cancel();
}

/// Once the token is cancelled the executor admits nothing more: it finishes the batch in hand
/// and stops, even when it was waiting for a free batch slot at that moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_executor_admits_nothing_new() {
    let declaration = quota_command("claim", OPEN_ADMISSION, "", "stock") + &pool("stock", 10_000);
    let stack = Stack::with_declaration(&declaration).await;
    let offer = offer();
    for i in 0..120 {
        let reply = stack.enqueue(&format!("u-{i}"), &key(), &offer).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED);
    }
    // One batch at a time, slow enough (one transaction per command) to be caught in hand.
    let config = ExecutorConfig {
        batch_quota: false,
        batch_size: 32,
        parallel_batches: 1,
        ..fast_executor()
    };
    let shutdown = CancellationToken::new();
    let executor = Executor::new(stack.pg.clone(), stack.redis.clone(), config);
    let running = tokio::spawn(executor.run(shutdown.clone()));
    assert!(
        eventually(Duration::from_secs(10), || async {
            count_status(&stack, &["executing"]).await >= 1
        })
        .await,
        "a batch in hand"
    );
    shutdown.cancel();
    let started_at_cancel = 120 - count_status(&stack, &["accepted", "retry_wait"]).await;
    tokio::time::timeout(Duration::from_secs(15), running)
        .await
        .expect("run returns")
        .expect("run does not panic");
    assert_eq!(count_status(&stack, &["executing"]).await, 0);
    let started_after_drain = 120 - count_status(&stack, &["accepted", "retry_wait"]).await;
    assert_eq!(
        started_after_drain, started_at_cancel,
        "commands were started after the shutdown token was cancelled"
    );
}
