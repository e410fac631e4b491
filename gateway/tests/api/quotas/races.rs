//! Reservations under contention, with two real `sluice execute` processes sweeping every 20 ms:
//! a thousand confirms sent at their reservations' expiry instants, and a mixed run where
//! reservations are confirmed, released and left to expire while an operator lowers and raises
//! the capacity. The witnesses are PostgreSQL's rows, read in one snapshot.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use hyper::Method;
use sluice_gateway::gateway_config::GatewayConfig;
use tokio::task::JoinSet;

use super::*;
use crate::execution::processes::ExecutorProcess;

/// Sweeps every 20 ms, so expiry by the sweeper really races the confirms.
const FAST_SWEEPS: &[&str] = &["--set", "executor.sweep_interval_ms=20"];

/// A stack whose gateway does not ration these tests' allocation calls (the races, not the
/// read budget, are under test here).
async fn racing_stack(capacity: u64, seconds: u32) -> Arc<Stack> {
    Arc::new(
        Stack::start_with(StackOptions {
            declaration: reserved_declaration(capacity, seconds),
            config: GatewayConfig {
                command_reads_per_second: 1_000_000,
                command_reads_concurrency: 100_000,
                command_reads_per_subject_per_second: 1_000,
                ..GatewayConfig::default()
            },
            ..StackOptions::default()
        })
        .await,
    )
}

/// Two executor processes sweeping fast, both running.
async fn two_fast_executors(stack: &Stack, dir: &std::path::Path) -> [ExecutorProcess; 2] {
    let mut executors = [
        ExecutorProcess::spawn_with(stack, dir, "first", FAST_SWEEPS),
        ExecutorProcess::spawn_with(stack, dir, "second", FAST_SWEEPS),
    ];
    for executor in &mut executors {
        executor.running().await;
    }
    executors
}

/// Enqueues `hold` for each subject from `workers` tasks; every one must be accepted.
async fn hold_all(
    stack: &Arc<Stack>,
    subjects: Vec<String>,
    workers: usize,
) -> Vec<(String, Reply)> {
    let subjects = Arc::new(subjects);
    let next = Arc::new(AtomicUsize::new(0));
    let offer = Arc::new(offer());
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (stack, subjects, next, offer) =
            (stack.clone(), subjects.clone(), next.clone(), offer.clone());
        tasks.spawn(async move {
            let mut mine = Vec::new();
            while let Some(subject) = subjects.get(next.fetch_add(1, Ordering::SeqCst)) {
                let receipt = hold(&stack, subject, &offer).await;
                assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
                mine.push((subject.clone(), receipt));
            }
            mine
        });
    }
    let mut all = Vec::new();
    while let Some(done) = tasks.join_next().await {
        all.extend(done.expect("enqueue task"));
    }
    all
}

/// Waits until no allocation of `seats` is reserved any more.
async fn no_reservation_left(stack: &Stack, within: Duration) -> bool {
    eventually(within, || async {
        states(&stack.pg, "seats")
            .await
            .get("reserved")
            .copied()
            .unwrap_or(0)
            == 0
    })
    .await
}

/// The allocation rows: id → (subject, state).
async fn allocation_rows(pg: &PgPool) -> HashMap<String, (String, String)> {
    sqlx::query_as::<_, (uuid::Uuid, String, String)>(
        "SELECT id, subject, state FROM allocations WHERE pool = 'seats'",
    )
    .fetch_all(pg)
    .await
    .expect("allocations")
    .into_iter()
    .map(|(id, subject, state)| (id.to_string(), (subject, state)))
    .collect()
}

/// 1,000 reservations, each confirmed by its holder around its own `expires_at` (-600…+200 ms),
/// while two executors' sweepers expire what is overdue: every allocation ends confirmed or
/// expired, exactly as its confirm was answered (200 confirmed, 409 expired), and the pool's
/// counts equal the rows. Both outcomes must occur, or the instant was never hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_confirms_racing_their_expiry_each_end_in_exactly_one_state() {
    const UNITS: usize = 1_000;
    let stack = racing_stack(UNITS as u64, 4).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let executors = two_fast_executors(&stack, dir.path()).await;
    let subjects: Vec<String> = (0..UNITS).map(|i| format!("racer-{i}")).collect();
    // Each reservation's confirm is scheduled as soon as it lands, so however long the drop
    // takes to land, every confirm is sent at its own instant.
    let scheduler = {
        let stack = stack.clone();
        tokio::spawn(async move {
            let mut confirms = JoinSet::new();
            let mut scheduled: HashSet<uuid::Uuid> = HashSet::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
            while scheduled.len() < UNITS && tokio::time::Instant::now() < deadline {
                let landed: Vec<(uuid::Uuid, String, DateTime<Utc>)> = sqlx::query_as(
                    "SELECT id, subject, expires_at FROM allocations WHERE pool = 'seats'",
                )
                .fetch_all(&stack.pg)
                .await
                .expect("reservations");
                for (id, subject, expires_at) in landed {
                    if !scheduled.insert(id) {
                        continue;
                    }
                    let stack = stack.clone();
                    // From 600 ms before the expiry instant to 200 ms after it, spread evenly:
                    // how late a confirm is decided depends on the machine, so the spread is
                    // wide enough that some are decided before the instant and some after.
                    let offset =
                        chrono::TimeDelta::milliseconds((scheduled.len() % 41) as i64 * 20 - 600);
                    confirms.spawn(async move {
                        let token = stack.subject_token(&subject);
                        let wait = (expires_at + offset - Utc::now())
                            .to_std()
                            .unwrap_or_default();
                        tokio::time::sleep(wait).await;
                        (
                            id.to_string(),
                            act(&stack, &id.to_string(), "confirm", &token).await,
                        )
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(scheduled.len(), UNITS, "every subject holds one unit");
            confirms
        })
    };
    hold_all(&stack, subjects, 32).await;
    assert!(
        all_terminal(&stack, Duration::from_secs(60)).await,
        "every hold lands\nfirst:\n{}\nsecond:\n{}",
        executors[0].log_text(),
        executors[1].log_text()
    );
    let mut confirms = scheduler.await.expect("scheduler");
    let mut answered: HashMap<String, Reply> = HashMap::new();
    while let Some(done) = confirms.join_next().await {
        let (id, answer) = done.expect("confirm task");
        answered.insert(id, answer);
    }
    assert!(
        no_reservation_left(&stack, Duration::from_secs(10)).await,
        "the sweepers expire what is left"
    );

    let rows = allocation_rows(&stack.pg).await;
    let (mut won, mut lost) = (0, 0);
    for (id, answer) in &answered {
        let (_, state) = &rows[id];
        match (answer.status, state.as_str()) {
            (StatusCode::OK, "confirmed") => {
                assert_eq!(answer.data()["changed"], true, "{:?}", answer.body);
                won += 1;
            }
            (StatusCode::CONFLICT, "expired") => {
                assert_eq!(answer.body["error"]["details"]["state"], "expired");
                lost += 1;
            }
            (status, state) => panic!("{id}: answered {status} {:?}, row {state}", answer.body),
        }
    }
    assert_eq!(won + lost, UNITS);
    assert!(
        won > 0 && lost > 0,
        "the expiry instant was hit: {won} confirmed, {lost} expired"
    );
    let by_state = states(&stack.pg, "seats").await;
    assert_eq!(by_state.get("confirmed").copied().unwrap_or(0), won as i64);
    assert_eq!(by_state.get("expired").copied().unwrap_or(0), lost as i64);
    assert_counts_match_rows(&stack.pg, "seats").await;
    let (_, allocated, reserved, _) = pool_row(&stack.pg, "seats").await;
    assert_eq!((allocated, reserved), (won as i64, 0));
    eprintln!("confirm vs expiry: {won} confirmed, {lost} expired");
}

/// What one subject's worker did with its reservation, and how it was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    Confirm,
    Release,
    Lapse,
}

/// A mixed run: 600 subjects for a pool of 150 held 1 s; each winner confirms (40 %), releases
/// (30 %) or lets the reservation lapse (30 %) after up to 0.8 s, while an operator lowers the
/// capacity to what is held and raises it again every 100 ms. Sampled every few milliseconds in
/// one snapshot: `allocated + reserved <= capacity` and the counts equal the rows. At the end: no
/// subject holds two units, and every 200 to a confirm or release is its row's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_run_keeps_the_pool_equal_to_its_rows_while_capacity_moves() {
    const SUBJECTS: usize = 600;
    let stack = racing_stack(150, 1).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _executors = two_fast_executors(&stack, dir.path()).await;
    let running = tokio_util::sync::CancellationToken::new();

    let sampler = {
        let (pg, running) = (stack.pg.clone(), running.clone());
        tokio::spawn(async move {
            let mut samples = 0;
            while !running.is_cancelled() {
                assert_counts_match_rows(&pg, "seats").await;
                samples += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            samples
        })
    };
    let operator = {
        let (stack, running) = (stack.clone(), running.clone());
        tokio::spawn(async move {
            let (mut lowered, mut raised, mut round) = (0, 0, 0);
            while !running.is_cancelled() {
                round += 1;
                let pool = stack
                    .get("/v1/quota-pools/seats", Some(&stack.credential()))
                    .await;
                assert_eq!(pool.status, StatusCode::OK, "{:?}", pool.body);
                let used = pool.data()["allocated"].as_i64().unwrap_or(0)
                    + pool.data()["reserved"].as_i64().unwrap_or(0);
                let lower = round % 2 == 0;
                let capacity = if lower { used } else { used + 40 };
                let body = json!({
                    "expected_revision": pool.data()["revision"],
                    "reason": if lower { "hold the line" } else { "release a block" },
                    "capacity": capacity,
                });
                let answer = stack
                    .request_with(
                        Method::POST,
                        "/v1/quota-pools/seats:configure",
                        Some(&stack.credential()),
                        Some(body.to_string().into()),
                        &[("idempotency-key", &format!("round-{round}"))],
                    )
                    .await;
                match (answer.status, lower) {
                    (StatusCode::OK, true) => lowered += 1,
                    (StatusCode::OK, false) => raised += 1,
                    // Something was reserved between the read and the change.
                    (StatusCode::CONFLICT, _) => assert_eq!(answer.code(), "STATE_CONFLICT"),
                    (status, _) => panic!("configure answered {status}: {:?}", answer.body),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (lowered, raised)
        })
    };

    let next = Arc::new(AtomicUsize::new(0));
    let offer = Arc::new(offer());
    let mut workers = JoinSet::new();
    for _ in 0..48 {
        let (stack, next, offer) = (stack.clone(), next.clone(), offer.clone());
        workers.spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= SUBJECTS {
                    return done;
                }
                let subject = format!("buyer-{i}");
                let receipt = hold(&stack, &subject, &offer).await;
                assert_eq!(receipt.status, StatusCode::ACCEPTED, "{:?}", receipt.body);
                let landed = landed_within(&stack, &receipt, Duration::from_secs(30)).await;
                let Some((status, value, code)) = landed else {
                    panic!("{subject}'s hold did not land");
                };
                if status != "succeeded" {
                    assert_eq!(code.as_deref(), Some("SOLD_OUT"), "{subject}: {status}");
                    done.push((subject, None, Choice::Lapse, None));
                    continue;
                }
                let id = value["allocation_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let choice = match i % 10 {
                    0..=3 => Choice::Confirm,
                    4..=6 => Choice::Release,
                    _ => Choice::Lapse,
                };
                tokio::time::sleep(Duration::from_millis((i as u64 * 37) % 800)).await;
                let answer = match choice {
                    Choice::Confirm => {
                        Some(act(&stack, &id, "confirm", &stack.subject_token(&subject)).await)
                    }
                    Choice::Release => {
                        Some(act(&stack, &id, "release", &stack.subject_token(&subject)).await)
                    }
                    Choice::Lapse => None,
                };
                done.push((subject, Some(id), choice, answer));
            }
        });
    }
    let mut outcomes = Vec::new();
    while let Some(done) = workers.join_next().await {
        outcomes.extend(done.expect("worker"));
    }
    assert!(no_reservation_left(&stack, Duration::from_secs(10)).await);
    running.cancel();
    let samples = sampler.await.expect("sampler");
    let (lowered, raised) = operator.await.expect("operator");
    assert!(samples > 50, "{samples} samples");
    assert!(
        lowered > 0 && raised > 0,
        "capacity moved both ways: {lowered} lowered, {raised} raised"
    );

    let rows = allocation_rows(&stack.pg).await;
    let mut subjects = HashSet::new();
    for (subject, _) in rows.values() {
        assert!(
            subjects.insert(subject.clone()),
            "{subject} holds two units"
        );
    }
    let twice: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT subject FROM commands WHERE status = 'succeeded'
           GROUP BY subject HAVING count(*) > 1) twice",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("twice");
    assert_eq!(twice, 0, "no subject's command succeeded twice");
    let (mut confirmed, mut released, mut sold_out) = (0, 0, 0);
    for (subject, id, choice, answer) in &outcomes {
        let Some(id) = id else {
            sold_out += 1;
            continue;
        };
        let (holder, state) = &rows[id];
        assert_eq!(holder, subject);
        match (choice, answer.as_ref().map(|a| a.status)) {
            (Choice::Lapse, None) => assert_eq!(state, "expired", "{subject} let it lapse"),
            (Choice::Confirm, Some(StatusCode::OK)) => {
                assert_eq!(state, "confirmed");
                confirmed += 1;
            }
            (Choice::Release, Some(StatusCode::OK)) => {
                assert_eq!(state, "released");
                released += 1;
            }
            (_, Some(StatusCode::CONFLICT)) => {
                assert_eq!(state, "expired", "{subject}: {answer:?}")
            }
            other => panic!("{subject}: {other:?} {answer:?}"),
        }
    }
    assert!(
        confirmed > 0 && released > 0 && sold_out > 0,
        "{confirmed} confirmed, {released} released, {sold_out} sold out"
    );
    assert_counts_match_rows(&stack.pg, "seats").await;
    eprintln!(
        "mixed run: {confirmed} confirmed, {released} released, {sold_out} sold out, {lowered} lowerings, {raised} raises, {samples} samples"
    );
}
