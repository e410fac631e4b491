//! Many callers at once: every answer explicit, the rows exactly the acceptances, queue
//! positions dense and in acceptance order.

use std::collections::{HashMap, HashSet};

use hyper::StatusCode;
use uuid::Uuid;

use crate::support::*;

/// The intake bucket of [`declaration`]: far below what 200 callers ask for (thousands of
/// enqueues a second), so they outrun it whatever the machine's speed.
const INTAKE_PER_SECOND: f64 = 200.0;
const INTAKE_BURST: f64 = 300.0;

/// The shared claim declaration with an intake bucket the callers will outrun.
fn declaration() -> String {
    CLAIM_DECLARATION.replace(
        "intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }",
        "intake = { per_second = 200, burst = 300, max_in_flight = 150 }",
    )
}

/// 5,000 enqueues from 200 concurrent tasks over 50 resources: every call is answered 202 or an
/// explicit 429; the 202s are no more than the intake bucket allows over the time the test took
/// (`burst + per_second × elapsed`, the bucket's declared numbers) and the callers did outrun it
/// (some `429 RATE_LIMITED`); the accepted rows in PostgreSQL are exactly the 202 answers;
/// positions within a resource are 0..n-1 in acceptance (queue sequence) order; Redis counts
/// agree with the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_enqueues_from_two_hundred_tasks_over_fifty_resources() {
    let stack = std::sync::Arc::new(Stack::with_declaration(&declaration()).await);
    let offers: Vec<String> = (0..50).map(|_| offer()).collect();
    let started = std::time::Instant::now();
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
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.expect("task"));
    }
    // From before the first request to after the last answer: at least the span of Redis time
    // over which the bucket decided.
    let elapsed = started.elapsed().as_secs_f64();
    let mut accepted: HashMap<Uuid, (String, String)> = HashMap::new();
    let (mut refused, mut rate_limited) = (0, 0);
    for (reply, offer) in answers {
        match reply.status {
            StatusCode::ACCEPTED => {
                let data = reply.data();
                assert_eq!(data["deduplicated"], false);
                let id = Uuid::parse_str(data["command_id"].as_str().expect("id")).expect("uuid");
                let ticket = data["ticket"].as_str().expect("ticket").to_string();
                assert!(
                    accepted.insert(id, (offer, ticket)).is_none(),
                    "command id answered twice"
                );
            }
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(reply.headers.contains_key("retry-after"));
                refused += 1;
                rate_limited += usize::from(reply.code() == "RATE_LIMITED");
            }
            other => panic!("unexpected answer {other}: {:?}", reply.body),
        }
    }
    assert_eq!(accepted.len() + refused, 5_000);
    assert_eq!(rate_limited, refused, "every 429 is RATE_LIMITED");
    // Redis's clock is read in whole milliseconds: two more of them, at most, between the first
    // decision and the last than the test measured.
    let ceiling = INTAKE_BURST + INTAKE_PER_SECOND * (elapsed + 0.002);
    eprintln!(
        "{} accepted, {rate_limited} RATE_LIMITED in {elapsed:.2} s (the bucket allows {ceiling:.1})",
        accepted.len()
    );
    assert!(
        accepted.len() as f64 <= ceiling,
        "{} accepted in {elapsed:.2} s: more than burst {INTAKE_BURST} + {INTAKE_PER_SECOND}/s \
         × elapsed = {ceiling:.1}",
        accepted.len()
    );
    assert!(rate_limited > 0, "the callers never outran the bucket");
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

/// `sluice_intake_batch_entries`'s (sum, count) in a process's `/metrics`: the enqueues it
/// decided and the `intake.lua` calls it took for them.
async fn intake_batches(gateway: &crate::support::gateway_process::GatewayProcess) -> (f64, f64) {
    let exposition = crate::operators::metrics::scrape(&gateway.admin_base, "/metrics").await;
    (
        exposition.value("sluice_intake_batch_entries_sum", &[]),
        exposition.value("sluice_intake_batch_entries_count", &[]),
    )
}

/// Three `sluice serve` processes, 16 callers each, enqueueing into one command whose intake
/// bucket is 40/s with a burst of 20, for 2.5 s; a quarter of the request keys are sent to two
/// gateways at once. Counted in PostgreSQL: the accepted rows stay within burst + rate ×
/// elapsed across all processes (batching changes who waits, not who is admitted) and reach most
/// of it; every 202 names a row and its ticket resolves to that command; no request key has two
/// rows or two 202s; no reservation outlives its request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateway_processes_share_one_intake_bucket_exactly() {
    use crate::support::gateway_process::GatewayProcess;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const RATE: f64 = 40.0;
    const BURST: f64 = 20.0;
    let declaration = CLAIM_DECLARATION.replace(
        "intake = { per_second = 1000000, burst = 1000000, max_in_flight = 100000 }",
        "intake = { per_second = 40, burst = 20, max_in_flight = 100000 }",
    );
    let stack = Arc::new(Stack::with_declaration(&declaration).await);
    let dir = tempfile::tempdir().expect("tempdir");
    let gateways = Arc::new([
        GatewayProcess::start(&stack, dir.path(), "one").await,
        GatewayProcess::start(&stack, dir.path(), "two").await,
        GatewayProcess::start(&stack, dir.path(), "three").await,
    ]);
    let offer = offer();
    let credential = stack.credential();
    let run_for = Duration::from_millis(2_500);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..48usize {
        let (gateways, offer, credential) = (gateways.clone(), offer.clone(), credential.clone());
        tasks.push(tokio::spawn(async move {
            // (request key, status, command id, ticket) of every answer.
            let mut answers = Vec::new();
            let mut i = 0usize;
            while started.elapsed() < run_for {
                let key = format!("t{task}-{i}");
                let body = serde_json::json!({"request_key": key, "subject": format!("user-{task}"),
                                              "input": {"offer": offer}});
                let first = &gateways[task % 3];
                let replies = if i.is_multiple_of(4) {
                    // The same key at two gateways at once.
                    let second = &gateways[(task + 1) % 3];
                    let (a, b) = tokio::join!(
                        first.post("/v1/commands/claim:enqueue", &credential, &body),
                        second.post("/v1/commands/claim:enqueue", &credential, &body)
                    );
                    vec![a, b]
                } else {
                    vec![
                        first
                            .post("/v1/commands/claim:enqueue", &credential, &body)
                            .await,
                    ]
                };
                let doubled = replies.len() == 2;
                for reply in replies {
                    let data = reply.data();
                    answers.push((
                        key.clone(),
                        doubled,
                        reply.status.as_u16(),
                        reply.code().to_string(),
                        data["command_id"].as_str().map(str::to_string),
                        data["ticket"].as_str().map(str::to_string),
                    ));
                }
                i += 1;
            }
            answers
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.expect("caller"));
    }
    let elapsed = started.elapsed().as_secs_f64();

    let mut accepted: HashMap<String, (String, String)> = HashMap::new();
    let mut replayed: Vec<(String, String)> = Vec::new();
    let mut tally: HashMap<String, usize> = HashMap::new();
    for (key, doubled, status, code, id, ticket) in &answers {
        *tally.entry(format!("{status} {code}")).or_default() += 1;
        match status {
            202 => {
                let (id, ticket) = (id.clone().expect("id"), ticket.clone().expect("ticket"));
                assert!(
                    accepted.insert(key.clone(), (id, ticket)).is_none(),
                    "request key {key} accepted twice"
                );
            }
            // A replay of the key's acceptance at the other gateway, or that call still
            // committing: only for the keys sent twice.
            200 if *doubled => replayed.push((key.clone(), id.clone().expect("replay id"))),
            503 if *doubled => assert_eq!(code, "UNAVAILABLE"),
            429 => assert_eq!(code, "RATE_LIMITED"),
            other => panic!("unexpected {other} {code} for {key}"),
        }
    }
    let rows: Vec<(Uuid, String)> =
        sqlx::query_as("SELECT id, request_key FROM commands WHERE application_id = $1")
            .bind(stack.creds.application_id)
            .fetch_all(&stack.pg)
            .await
            .expect("rows");
    let keys: HashSet<&String> = rows.iter().map(|r| &r.1).collect();
    assert_eq!(keys.len(), rows.len(), "a request key with two rows");
    let row_of: HashMap<String, Uuid> = rows.iter().map(|(id, key)| (key.clone(), *id)).collect();
    let ceiling = BURST + RATE * elapsed;
    let floor = BURST + RATE * run_for.as_secs_f64() * 0.7;
    let (decided, calls) = {
        let mut sums = (0.0, 0.0);
        for gateway in gateways.iter() {
            let (sum, count) = intake_batches(gateway).await;
            sums = (sums.0 + sum, sums.1 + count);
        }
        sums
    };
    eprintln!(
        "three gateways, intake 40/s burst 20, {elapsed:.2} s: {} rows (ceiling {ceiling:.1}, \
         floor {floor:.1}); answers {tally:?}; {decided} intake decisions in {calls} intake.lua \
         calls ({:.2} per call)",
        rows.len(),
        decided / calls.max(1.0)
    );
    assert!(
        (rows.len() as f64) <= ceiling + 1.0,
        "{} rows > burst + rate × elapsed = {ceiling:.1}",
        rows.len()
    );
    assert!(
        (rows.len() as f64) >= floor,
        "{} rows < {floor:.1}: the bucket refused what it had",
        rows.len()
    );
    assert_eq!(accepted.len(), rows.len(), "every row answered 202 once");
    for (key, id) in &replayed {
        assert_eq!(
            row_of.get(key).map(Uuid::to_string).as_ref(),
            Some(id),
            "the replay of {key} names its row"
        );
    }
    for (key, (id, ticket)) in &accepted {
        assert_eq!(
            row_of.get(key).map(Uuid::to_string).as_ref(),
            Some(id),
            "the 202 for {key} names its row"
        );
        let poll = stack.poll(ticket).await;
        assert_eq!(poll.status, StatusCode::OK, "{:?}", poll.body);
        assert_eq!(poll.data()["command_id"].as_str(), Some(id.as_str()));
    }
    let settled = eventually(Duration::from_secs(5), || async {
        stack.reservations("claim").await == 0
    })
    .await;
    assert!(settled, "no reservation may outlive its request");
    assert_eq!(
        stack.counters().await.get("unfinished").copied(),
        Some(rows.len() as i64),
        "Redis counts exactly the rows"
    );
}
