//! `max_active` as a protected origin sees it. The origin verifies every pass itself
//! (`jsonwebtoken`, the published keys, no leeway) and counts the places whose newest pass it
//! has accepted and would still accept: that count never exceeds `max_active`, whatever the
//! holders do (heartbeat, leave, or stop heartbeating and go on using their pass, which the
//! origin refuses once it has expired). The origin's count shares nothing with Sluice's
//! bookkeeping; the room's own counters are not read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::kit::*;
use crate::support::*;
use sluice_store::rooms::FIRST_PASS_PICKUP;

const MAX_ACTIVE: usize = 3;

const ROOM: &str = r#"
[[room]]
code = "gate"
max_active = 3
pass_seconds = 30
heartbeat_seconds = 5
"#;

#[derive(Clone, Copy, Debug)]
enum Role {
    /// Uses the pass, heartbeats once, gives it back.
    Leaver,
    /// Uses the pass and never heartbeats, but goes on using it until the origin refuses.
    Abandoner,
    /// Heartbeats every second for three seconds of use, then gives the pass back.
    Stayer,
}

/// One person: joins, waits, then acts out `role` against the origin. Returns how many of its
/// requests the origin refused after its pass expired (abandoners only).
async fn person(stack: &Stack, origin: &Origin, subject: String, role: Role) -> usize {
    let joined = join(stack, "gate", &subject).await;
    assert_eq!(joined.status, StatusCode::ACCEPTED, "{:?}", joined.body);
    let ticket = joined.data()["ticket"].as_str().expect("ticket").to_owned();
    let admitted = poll_until(stack, &ticket, "admitted", Duration::from_secs(60)).await;
    let mut pass = admitted["pass"].as_str().expect("pass").to_owned();
    let started = Instant::now();
    let mut beats = 0;
    loop {
        let elapsed = started.elapsed();
        match role {
            Role::Abandoner => {
                if let Err(refused) = origin.serve(&pass) {
                    assert!(refused.contains("Expired"), "{subject}: {refused}");
                    return 1;
                }
                assert!(
                    elapsed < FIRST_PASS_PICKUP + Duration::from_secs(3),
                    "{subject}'s pass never expired"
                );
            }
            Role::Leaver | Role::Stayer => {
                origin.serve(&pass).expect("a held pass is accepted");
                let (beat_every, hold) = match role {
                    Role::Leaver => (Duration::from_millis(1200), Duration::from_millis(1500)),
                    _ => (Duration::from_secs(1), Duration::from_secs(3)),
                };
                if elapsed >= hold {
                    let left = leave(stack, &subject, "pass", &pass).await;
                    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
                    return 0;
                }
                if elapsed >= beat_every * (beats + 1) {
                    beats += 1;
                    let beat = heartbeat(stack, &subject, &pass).await;
                    assert_eq!(beat.status, StatusCode::OK, "{:?}", beat.body);
                    pass = beat.data()["pass"].as_str().expect("pass").to_owned();
                    origin.serve(&pass).expect("a renewed pass is accepted");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_never_accepts_more_than_max_active_places() {
    let stack = Arc::new(stack_with_rooms(ROOM).await);
    let origin = Arc::new(Origin::new(key_set(&stack).await, "gate"));
    let roles = [
        Role::Abandoner,
        Role::Leaver,
        Role::Stayer,
        Role::Abandoner,
        Role::Leaver,
        Role::Stayer,
        Role::Leaver,
    ];
    let mut people = tokio::task::JoinSet::new();
    for (i, role) in roles.iter().enumerate() {
        let (stack, origin, role) = (stack.clone(), origin.clone(), *role);
        people.spawn(async move { person(&stack, &origin, format!("person-{i}"), role).await });
    }
    let mut refused = 0;
    while let Some(outcome) = people.join_next().await {
        refused += outcome.expect("a person's task");
    }

    let (most, served) = (origin.most(), origin.places());
    assert_eq!(served, roles.len(), "everyone got in, in the end");
    assert_eq!(most, MAX_ACTIVE, "the origin saw {most} places at once");
    assert_eq!(refused, 2, "each abandoner's expired pass was refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_pass_frees_its_place_within_heartbeat_seconds_and_a_second() {
    let stack = stack_with_rooms(
        "[[room]]\ncode = \"gate\"\nmax_active = 1\npass_seconds = 60\nheartbeat_seconds = 5\n",
    )
    .await;
    let alice = join(&stack, "gate", "alice").await;
    let alice_ticket = alice.data()["ticket"].as_str().expect("ticket").to_owned();
    let admitted = poll_until(&stack, &alice_ticket, "admitted", Duration::from_secs(5)).await;
    let bob = join(&stack, "gate", "bob").await;
    let bob_ticket = bob.data()["ticket"].as_str().expect("ticket").to_owned();

    // Alice's last heartbeat, the first that extends her pass (the first pass lasts
    // FIRST_PASS_PICKUP); then she is gone.
    let pass = admitted["pass"].as_str().expect("pass");
    until(Duration::from_secs(8), || async {
        let beat = heartbeat(&stack, "alice", pass).await;
        assert_eq!(beat.status, StatusCode::OK, "{:?}", beat.body);
        (beat.data()["extended"] == serde_json::json!(true), ())
    })
    .await
    .expect("a heartbeat extends the pass once the first one's end is near");
    let last_beat = chrono::Utc::now();

    let bob_in = poll_until(&stack, &bob_ticket, "admitted", Duration::from_secs(10)).await;
    let (admitted_at,): (chrono::DateTime<chrono::Utc>,) =
        sqlx::query_as("SELECT admitted_at FROM room_places WHERE id = $1::uuid")
            .bind(bob_in["join_id"].as_str().expect("join_id"))
            .fetch_one(&stack.pg)
            .await
            .expect("bob's admission");
    let freed_after = (admitted_at - last_beat).to_std().unwrap_or_default();
    // heartbeat_seconds, the second of grace, and one admission tick (200 ms) with slack.
    assert!(
        freed_after <= Duration::from_millis(5_000 + 1_000 + 500),
        "bob was admitted {freed_after:?} after alice's last heartbeat"
    );
    assert!(
        freed_after >= Duration::from_secs(4),
        "bob was admitted only {freed_after:?} after alice's last heartbeat: her pass was live"
    );
    let alice_now = stack.poll(&alice_ticket).await;
    assert_eq!(alice_now.data()["status"], "expired");
}
