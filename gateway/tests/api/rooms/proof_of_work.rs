//! Proof of work at a room's door: a join without a valid solution is refused with nothing
//! written, a solution buys one place once, and adaptive rooms ask more when joins come faster.
//! (What checking a solution costs is measured by `sluice-bench-work`.)

use std::time::{Duration, Instant};

use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_gateway::rooms::work_challenge;

use super::kit::*;
use crate::support::*;

const ROOMS: &str = r#"
[[room]]
code = "guarded"
max_active = 100
proof_of_work = { bits = 12 }

[[room]]
code = "surge"
max_active = 1000
proof_of_work = { min_bits = 2, max_bits = 12, calm_joins_per_second = 4 }

[[room]]
code = "open"
max_active = 100
"#;

/// What PostgreSQL holds of a room: places, arrival counter, waiting count.
async fn written(stack: &Stack, room: &str) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM room_places WHERE room = $1), next_seq, waiting
           FROM rooms WHERE code = $1",
    )
    .bind(room)
    .fetch_one(&stack.pg)
    .await
    .expect("read the room")
}

async fn challenge(stack: &Stack, room: &str, subject: &str) -> Reply {
    stack
        .post(
            &format!("/v1/rooms/{room}:challenge"),
            Some(&stack.subject_token(subject)),
            "",
        )
        .await
}

async fn join_with(stack: &Stack, room: &str, subject: &str, proof: Value) -> Reply {
    stack
        .post(
            &format!("/v1/rooms/{room}:join"),
            Some(&stack.subject_token(subject)),
            &json!({ "proof_of_work": proof }).to_string(),
        )
        .await
}

/// A challenge for `subject` and a nonce that solves it, found here by brute force.
async fn solved(stack: &Stack, room: &str, subject: &str) -> Value {
    let reply = challenge(stack, room, subject).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let text = reply.data()["challenge"].as_str().expect("a challenge");
    let bits = u8::try_from(reply.data()["bits"].as_u64().expect("bits")).expect("small");
    json!({ "challenge": text, "nonce": work_challenge::solve(text, bits) })
}

fn reason(reply: &Reply) -> &str {
    reply.body["error"]["details"]["reason"]
        .as_str()
        .unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_without_a_valid_solution_is_refused_and_writes_nothing() {
    let stack = stack_with_rooms(ROOMS).await;

    let offer = challenge(&stack, "guarded", "alice").await;
    assert_eq!(offer.status, StatusCode::OK, "{:?}", offer.body);
    let data = offer.data();
    assert_eq!(
        (&data["required"], &data["bits"], &data["algorithm"]),
        (&json!(true), &json!(12), &json!("sha256-leading-zero-bits"))
    );
    assert!(data["expires_at"].is_string() && data["joins_per_second"].is_null());
    let open = challenge(&stack, "open", "alice").await;
    assert_eq!(
        (&open.data()["required"], &open.data()["challenge"]),
        (&json!(false), &Value::Null)
    );
    let unknown = challenge(&stack, "nowhere", "alice").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let by_credential = stack
        .post("/v1/rooms/guarded:challenge", Some(&stack.credential()), "")
        .await;
    assert_eq!(by_credential.status, StatusCode::FORBIDDEN);

    let before = written(&stack, "guarded").await;
    let alices = solved(&stack, "guarded", "alice").await;
    let text = alices["challenge"].as_str().expect("text").to_owned();
    let unsolved = (0u64..)
        .map(|n| n.to_string())
        .find(|n| work_challenge::leading_zero_bits(&work_challenge::work_hash(&text, n)) < 12)
        .expect("a wrong nonce");
    let bare = join(&stack, "guarded", "alice").await;
    assert_eq!(
        (bare.status, reason(&bare)),
        (StatusCode::FORBIDDEN, "proof_of_work_required"),
        "{:?}",
        bare.body
    );
    assert_eq!(bare.body["error"]["details"]["min_bits"], 12);
    let refusals = [
        (
            "alice",
            json!({"challenge": text, "nonce": unsolved}),
            "proof_of_work_unsolved",
        ),
        ("bob", alices.clone(), "challenge_not_issued"),
        (
            "alice",
            json!({"challenge": "AAAA", "nonce": "1"}),
            "challenge_malformed",
        ),
        (
            "alice",
            json!({"challenge": text, "nonce": "0x1f"}),
            "nonce_malformed",
        ),
    ];
    for (subject, proof, expected) in refusals {
        let reply = join_with(&stack, "guarded", subject, proof.clone()).await;
        assert_eq!(
            (reply.status, reason(&reply)),
            (StatusCode::FORBIDDEN, expected),
            "{subject} {proof}: {:?}",
            reply.body
        );
    }
    // Alice's solution of a challenge for another room opens nothing here.
    let elsewhere = solved(&stack, "surge", "alice").await;
    let reply = join_with(&stack, "guarded", "alice", elsewhere).await;
    assert_eq!(reason(&reply), "challenge_not_issued", "{:?}", reply.body);
    let extra = join_with(
        &stack,
        "guarded",
        "alice",
        json!({"challenge": text, "nonce": "1", "bits": 0}),
    )
    .await;
    assert_eq!(
        (extra.status, extra.field()),
        (StatusCode::BAD_REQUEST, "proof_of_work.bits")
    );
    assert_eq!(written(&stack, "guarded").await, before, "a refusal wrote");

    // The solution buys one place. A repeated join must show work too (the proof is checked
    // before the database is asked anything), and the place it finds spends nothing.
    let first = join_with(&stack, "guarded", "alice", alices.clone()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
    assert_eq!(
        reason(&join(&stack, "guarded", "alice").await),
        "proof_of_work_required"
    );
    let another = solved(&stack, "guarded", "alice").await;
    let again = join_with(&stack, "guarded", "alice", another).await;
    assert_eq!(
        (again.status, &again.data()["deduplicated"]),
        (StatusCode::OK, &json!(true)),
        "{:?}",
        again.body
    );
    let spent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM room_places WHERE room = 'guarded' AND challenge_id IS NOT NULL",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("count spent challenges");
    assert_eq!(spent, 1);

    // After leaving, the same solution does not buy a second place.
    let ticket = first.data()["ticket"].as_str().expect("ticket").to_owned();
    poll_until(&stack, &ticket, "admitted", Duration::from_secs(5)).await;
    let pass = stack.poll(&ticket).await.data()["pass"]
        .as_str()
        .expect("pass")
        .to_owned();
    assert_eq!(
        leave(&stack, "alice", "pass", &pass).await.status,
        StatusCode::OK
    );
    let after_leave = written(&stack, "guarded").await;
    let replay = join_with(&stack, "guarded", "alice", alices).await;
    assert_eq!(
        (replay.status, reason(&replay)),
        (StatusCode::FORBIDDEN, "challenge_used"),
        "{:?}",
        replay.body
    );
    assert_eq!(written(&stack, "guarded").await, after_leave);
    let fresh = solved(&stack, "guarded", "alice").await;
    assert_eq!(
        join_with(&stack, "guarded", "alice", fresh).await.status,
        StatusCode::ACCEPTED
    );

    // A room without proof of work takes a join with or without one.
    assert_eq!(
        join(&stack, "open", "alice").await.status,
        StatusCode::ACCEPTED
    );
}

/// Joins per second over the last ten seconds, from the places' own join times.
async fn rate_in_postgres(stack: &Stack, room: &str) -> f64 {
    sqlx::query_scalar(
        "SELECT count(*)::float8 / 10 FROM room_places
          WHERE room = $1 AND joined_at > now() - interval '10 seconds'",
    )
    .bind(room)
    .fetch_one(&stack.pg)
    .await
    .expect("count recent joins")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_work_rises_with_the_arrival_rate() {
    let stack = stack_with_rooms(ROOMS).await;
    let calm = challenge(&stack, "surge", "watcher").await;
    assert_eq!(calm.data()["bits"], 2, "{:?}", calm.body);

    // A burst of joins, each with its solution, well above 4 per second for over a second.
    let started = Instant::now();
    let mut joined = 0;
    while started.elapsed() < Duration::from_millis(1500) || joined < 40 {
        let subject = format!("surge-{joined}");
        let proof = solved(&stack, "surge", &subject).await;
        let reply = join_with(&stack, "surge", &subject, proof).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{:?}", reply.body);
        joined += 1;
    }
    let busy = challenge(&stack, "surge", "watcher").await;
    let bits = busy.data()["bits"].as_u64().expect("bits");
    let reported = busy.data()["joins_per_second"].as_f64().expect("a rate");
    let counted = rate_in_postgres(&stack, "surge").await;
    println!(
        "adaptive proof of work: {joined} joins in {:?}; gateway measured {reported:.1} joins/s \
         (PostgreSQL's join times: {counted:.1} over 10 s), asks {bits} bits (calm: 2)",
        started.elapsed()
    );
    // The gateway's rate spans less than ten seconds, so it is at least the ten-second count.
    assert!(reported >= counted * 0.9, "{reported} vs {counted}");
    let expected = 2.0 + (reported / 4.0).log2().ceil();
    assert_eq!(bits as f64, expected.min(12.0), "{:?}", busy.body);
    assert!(bits > 2, "the burst raised nothing: {:?}", busy.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_joins_with_one_solution_make_one_place() {
    let stack = std::sync::Arc::new(stack_with_rooms(ROOMS).await);
    let proof = solved(&stack, "guarded", "dana").await;
    let joins: Vec<_> = (0..8)
        .map(|_| {
            let (stack, proof) = (stack.clone(), proof.clone());
            tokio::spawn(async move { join_with(&stack, "guarded", "dana", proof).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for join in joins {
        let reply = join.await.expect("join task");
        statuses.push(reply.status);
        assert!(
            matches!(reply.status, StatusCode::ACCEPTED | StatusCode::OK),
            "{:?}",
            reply.body
        );
    }
    let created = statuses
        .iter()
        .filter(|s| **s == StatusCode::ACCEPTED)
        .count();
    assert_eq!(created, 1, "{statuses:?}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM room_places WHERE subject = 'dana'")
        .fetch_one(&stack.pg)
        .await
        .expect("count dana's places");
    assert_eq!(rows, 1);
}
