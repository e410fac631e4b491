//! Waiting commands: max_wait, deadlines, ETAs, how long an ended one stays readable.

use super::*;

/// A command that waits longer than its max_wait expires with MAX_WAIT_EXCEEDED (ticket and
/// record), leaves the queue (the next command moves up) and gives its counts back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_max_wait_expires() {
    let declaration = quota_command(
        "claim",
        "max_wait_seconds = 2, max_queue = 1000",
        "deadline_seconds = 600",
        "stock",
    ) + &pool("stock", 100);
    let stack = Stack::with_declaration(&declaration).await;
    let offer = offer();
    let first = stack.enqueue("early", &key(), &offer).await;
    assert_eq!(first.status, StatusCode::ACCEPTED);
    let (first_id, first_ticket) = (id_of(&first), ticket_of(&first));
    // Not due yet: the sweeper leaves it alone.
    assert_eq!(
        sluice_durable::lifecycle::sweep::expire_waiting(stack.stores(), SWEEP_SIDE)
            .await
            .expect("sweep"),
        0
    );
    // Real time passes beyond the first command's max_wait (no executor runs anything).
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let later = stack.enqueue("late", &key(), &offer).await;
    assert_eq!(later.status, StatusCode::ACCEPTED);
    let later_ticket = ticket_of(&later);
    assert_eq!(
        stack.poll(&later_ticket).await.data()["queue"]["position"],
        1
    );
    let expired = eventually(Duration::from_secs(3), || async {
        sluice_durable::lifecycle::sweep::expire_waiting(stack.stores(), SWEEP_SIDE)
            .await
            .expect("sweep")
            >= 1
    })
    .await;
    assert!(expired, "the sweeper expires the overdue command");

    let poll = stack.poll(&first_ticket).await;
    assert_eq!(poll.data()["status"], "expired", "{:?}", poll.body);
    assert_eq!(poll.data()["error"]["code"], "MAX_WAIT_EXCEEDED");
    let full = record(&stack, &first_id).await;
    assert_eq!(full.status, StatusCode::OK);
    assert_eq!(full.data()["status"], "expired");
    assert_eq!(full.data()["error"]["code"], "MAX_WAIT_EXCEEDED");
    assert!(full.data()["finished_at"].is_string());

    let moved = stack.poll(&later_ticket).await;
    assert_eq!(moved.data()["status"], "accepted", "{:?}", moved.body);
    assert_eq!(
        moved.data()["queue"]["position"],
        0,
        "the later command moved up"
    );
    let ns = stack.creds.namespace_id;
    assert_eq!(counter(&stack, "unfinished").await, 1);
    assert_eq!(counter(&stack, &format!("waiting:{ns}")).await, 1);
    assert_eq!(counter(&stack, &format!("queued:{ns}:claim")).await, 1);

    // The later one expires in its turn; then everything is back to zero.
    let expired = eventually(Duration::from_secs(5), || async {
        sluice_durable::lifecycle::sweep::expire_waiting(stack.stores(), SWEEP_SIDE)
            .await
            .expect("sweep")
            >= 1
    })
    .await;
    assert!(expired);
    assert_eq!(stack.poll(&later_ticket).await.data()["status"], "expired");
    assert_counters_settle_at_zero(&stack, &["claim"]).await;
}

/// A waiting command past its deadline expires with DEADLINE_EXCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_command_past_its_deadline_expires() {
    let declaration = quota_command(
        "claim",
        "max_wait_seconds = 1, max_queue = 1000",
        "deadline_seconds = 1",
        "stock",
    ) + &pool("stock", 100);
    let stack = Stack::with_declaration(&declaration).await;
    let reply = stack.enqueue("someone", &key(), &offer()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let (id, ticket) = (id_of(&reply), ticket_of(&reply));
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let expired = eventually(Duration::from_secs(3), || async {
        sluice_durable::lifecycle::sweep::expire_waiting(stack.stores(), SWEEP_SIDE)
            .await
            .expect("sweep")
            >= 1
    })
    .await;
    assert!(expired, "the sweeper expires it");
    let poll = stack.poll(&ticket).await;
    assert_eq!(poll.data()["status"], "expired", "{:?}", poll.body);
    assert_eq!(poll.data()["error"]["code"], "DEADLINE_EXCEEDED");
    let full = record(&stack, &id).await;
    assert_eq!(full.data()["status"], "expired");
    assert_eq!(full.data()["error"]["code"], "DEADLINE_EXCEEDED");
    assert_eq!(full.data()["attempts"], 0, "it never ran");
    assert_counters_settle_at_zero(&stack, &["claim"]).await;
}

/// A queue held back by its declared start rate: 5 per second, a burst of 2 (a start the
/// executor takes a little late leaves its token in the bucket for the next one, so the pace
/// stays the declared one).
const PACE: f64 = 5.0;

/// How far a first ETA may be from the actual wait in a queue drained at its declared pace
/// (docs/features.md): half a second of rounding to whole seconds, two start intervals (the
/// next start may be due at once or a whole interval away, and the burst may let one start
/// early), and the executor's own delay in taking a start that is due (its ticks are 20 ms
/// here; a loaded machine delays it more).
fn eta_bound(pace: f64) -> f64 {
    0.5 + 2.0 / pace + 0.2
}

/// The poll hint that goes with an ETA of `eta` whole seconds (`poll_policy`): a quarter of the
/// unrounded ETA, clamped to 0.5–5 s, then ±20 % of jitter.
fn hint_range(eta: u64) -> std::ops::RangeInclusive<u64> {
    let quarter = |seconds: f64| (seconds * 1000.0 / 4.0).clamp(500.0, 5_000.0);
    let low = quarter(eta as f64 - 0.5) * 0.8;
    let high = quarter(eta as f64 + 0.5) * 1.2;
    (low.floor() as u64)..=(high.ceil() as u64)
}

/// The start rate measured from admissions of the ticket's queue turns a waiting ticket's
/// position into an ETA and a poll hint that grows with the wait. The witness is PostgreSQL:
/// each waiter's first ETA is compared with its actual wait, from the Redis time its position was
/// read (`queue.observed_at`) to its command's `started_at` (the Redis time of the admission that
/// started it), and must be within [`eta_bound`] of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tickets_get_an_eta_from_the_measured_starts() {
    let declaration = quota_command(
        "slow",
        "per_second = 5, burst = 2, max_in_flight = 64, max_queue = 1000",
        "",
        "stock",
    ) + &pool("stock", 1000);
    let stack = Stack::with_declaration(&declaration).await;
    let resource = offer();
    let mut waiters = Vec::new();
    for i in 0..40 {
        let reply = enqueue_command(&stack, "slow", &format!("s-{i}"), &key(), &resource).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        waiters.push((id_of(&reply), ticket_of(&reply)));
    }
    let (_, last) = waiters.last().expect("a ticket").clone();
    let before = stack.poll(&last).await;
    assert_eq!(
        before.data()["eta_seconds"],
        serde_json::Value::Null,
        "nothing started yet"
    );
    let shutdown = start_executor(&stack, fast_executor());
    drain_begins(&stack, 3).await;
    // Each waiter's first ETA and hint, with the Redis time of the position they came from.
    let mut told = Vec::new();
    for (id, ticket) in &waiters {
        let poll = stack.poll(ticket).await;
        let data = poll.data();
        if let (Some(eta), Some(observed), Some(position), Some(hint)) = (
            data["eta_seconds"].as_u64(),
            data["queue"]["observed_at"].as_str(),
            data["queue"]["position"].as_u64(),
            data["poll_after_ms"].as_u64(),
        ) {
            let observed = chrono::DateTime::parse_from_rfc3339(observed)
                .expect("an RFC 3339 time")
                .timestamp_millis();
            told.push((id.clone(), position, eta, hint, observed));
        }
    }
    assert!(
        all_terminal(&stack, Duration::from_secs(30)).await,
        "the drain ends"
    );
    shutdown.cancel();
    let started_ms: std::collections::HashMap<String, f64> =
        sqlx::query_as::<_, (uuid::Uuid, f64)>(
            "SELECT id, (extract(epoch FROM started_at) * 1000)::float8 FROM commands
          WHERE application_id = $1",
        )
        .bind(stack.creds.application_id)
        .fetch_all(&stack.pg)
        .await
        .expect("started_at of every command")
        .into_iter()
        .map(|(id, at)| (id.to_string(), at))
        .collect();
    assert!(
        told.len() >= 25,
        "{} of 40 waiters were told an ETA",
        told.len()
    );
    let bound = eta_bound(PACE);
    let mut off = Vec::new();
    let mut worst = 0.0f64;
    for (id, position, eta, hint, observed) in &told {
        let actual = (started_ms[id] - *observed as f64) / 1000.0;
        let error = *eta as f64 - actual;
        worst = worst.max(error.abs());
        if error.abs() > bound {
            off.push(format!(
                "position {position}: told {eta} s, started after {actual:.2} s"
            ));
        }
        assert!(
            hint_range(*eta).contains(hint),
            "position {position}: poll_after_ms {hint} for an ETA of {eta} s"
        );
    }
    eprintln!(
        "{} first ETAs at {PACE}/s: the farthest {worst:.2} s from the actual wait (bound {bound:.1} s)",
        told.len()
    );
    assert!(
        off.is_empty(),
        "{} of {} first ETAs more than {bound:.1} s from the actual wait: {off:#?}",
        off.len(),
        told.len()
    );
    // The far end of the queue waits seconds: its ETAs, and so its hints, are not the near end's.
    let longest = told.iter().map(|t| t.2).max().unwrap_or_default();
    assert!(longest >= 5, "the longest ETA told is {longest} s");
}

/// The first ETA a waiter is told predicts when its command starts. 80 claims on one offer are
/// drained at a declared `per_second = 10` (burst 1); once the first few started, each waiting
/// ticket is polled once and its `eta_seconds` compared with when its command really started
/// (`started_at` in PostgreSQL, the Redis time of its admission, the clock `queue.observed_at`
/// is on). The completions-based estimate this replaced divided a drain seen for a fraction of
/// a second by a whole one, and completions lag starts: early in a drain its ETAs were too long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_etas_predict_when_a_paced_drain_starts_each_command() {
    let declaration = quota_command(
        "paced",
        "per_second = 10, burst = 1, max_in_flight = 64, max_queue = 1000",
        "",
        "stock",
    ) + &pool("stock", 1000);
    let stack = Stack::with_declaration(&declaration).await;
    let resource = offer();
    let mut waiters = Vec::new();
    for i in 0..80 {
        let reply = enqueue_command(&stack, "paced", &format!("p-{i}"), &key(), &resource).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        waiters.push((id_of(&reply), ticket_of(&reply)));
    }
    let shutdown = start_executor(&stack, fast_executor());
    drain_begins(&stack, 4).await;
    // Each waiter's first ETA, with the Redis time of the position it was computed from.
    let mut told = Vec::new();
    for (id, ticket) in &waiters {
        let poll = stack.poll(ticket).await;
        let data = poll.data();
        if let (Some(eta), Some(observed)) = (
            data["eta_seconds"].as_u64(),
            data["queue"]["observed_at"].as_str(),
        ) {
            let observed = chrono::DateTime::parse_from_rfc3339(observed)
                .expect("an RFC 3339 time")
                .timestamp_millis();
            told.push((id.clone(), eta, observed));
        }
    }
    assert!(
        all_terminal(&stack, Duration::from_secs(30)).await,
        "the drain ends"
    );
    shutdown.cancel();
    let rows: Vec<(uuid::Uuid, f64)> = sqlx::query_as(
        "SELECT id, (extract(epoch FROM started_at) * 1000)::float8 FROM commands
          WHERE application_id = $1",
    )
    .bind(stack.creds.application_id)
    .fetch_all(&stack.pg)
    .await
    .expect("started_at of every command");
    let started_ms: std::collections::HashMap<String, f64> = rows
        .into_iter()
        .map(|(id, at)| (id.to_string(), at))
        .collect();
    // Waits of 2 s and more: whole seconds cost at most 0.5 s, a quarter of the wait.
    let mut errors = Vec::new();
    let mut ratios = Vec::new();
    for (id, eta, observed) in &told {
        let actual = (started_ms[id] - *observed as f64) / 1000.0;
        if actual >= 2.0 {
            errors.push((*eta as f64 - actual).abs() / actual);
            ratios.push(*eta as f64 / actual);
        }
    }
    assert!(
        errors.len() >= 30,
        "{} of {} told ETAs wait 2 s or more",
        errors.len(),
        told.len()
    );
    errors.sort_by(f64::total_cmp);
    ratios.sort_by(f64::total_cmp);
    let p90 = errors[errors.len() * 9 / 10];
    let median_ratio = ratios[ratios.len() / 2];
    eprintln!(
        "{} first ETAs of waits ≥ 2 s: p90 error {p90:.2}, median told / actual {median_ratio:.2}",
        errors.len()
    );
    assert!(
        p90 < 0.35,
        "p90 ETA error {p90:.2} (told / actual: median {median_ratio:.2}, all {ratios:?})"
    );
    assert!(
        (0.8..1.25).contains(&median_ratio),
        "told / actual: median {median_ratio:.2}"
    );
}

/// A command that ends while waiting (cancelled, expired) keeps its status hash in Redis for
/// the retention period, like one that ran (`land.lua` sets the same PEXPIRE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ends_waiting_keeps_its_status_for_the_retention() {
    let stack = Stack::start().await;
    let reply = stack.enqueue("someone", &key(), &offer()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED);
    let id = id_of(&reply);
    let answer = cancel(&stack, &id).await;
    assert_eq!(answer.data()["status"], "cancelled");
    let ttl_ms: i64 = stack
        .redis
        .pool()
        .next()
        .pttl(stack.keys().command(id.parse().expect("uuid")))
        .await
        .expect("pttl");
    assert!(
        ttl_ms > 0,
        "the cancelled command's status hash expires with the retention (PTTL {ttl_ms})"
    );
}

/// Waits until at least `starts` commands of the application started (PostgreSQL's
/// `started_at`): the drain has begun and the queue's start rate is measured.
async fn drain_begins(stack: &Stack, starts: i64) {
    let started = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM commands WHERE application_id = $1 AND started_at IS NOT NULL",
        )
        .bind(stack.creds.application_id)
        .fetch_one(&stack.pg)
        .await
        .expect("count started")
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            started().await >= starts
        })
        .await,
        "the drain begins"
    );
}
