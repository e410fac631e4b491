//! The waiting-room contract: who may join, one place per subject, the pass and what its holder
//! does with it, and every refusal leaving PostgreSQL as it was.

use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::json;
use sluice_store::rooms::FIRST_PASS_PICKUP;

use super::kit::*;
use crate::support::*;

const DOORS: &str = r#"
[[room]]
code = "doors"
max_active = 1
pass_seconds = 60
heartbeat_seconds = 5
"#;

async fn places(stack: &Stack) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM room_places")
        .fetch_one(&stack.pg)
        .await
        .expect("count places")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_poll_pass_heartbeat_and_leave() {
    let stack = stack_with_rooms(DOORS).await;
    let patience = Duration::from_secs(5);

    // Refusals first: each leaves no place behind.
    let by_credential = stack
        .post("/v1/rooms/doors:join", Some(&stack.credential()), "")
        .await;
    assert_eq!(
        by_credential.status,
        StatusCode::FORBIDDEN,
        "{:?}",
        by_credential.body
    );
    let anonymous = stack.post("/v1/rooms/doors:join", None, "").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let unknown = join(&stack, "nowhere", "alice").await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::NOT_FOUND, "NOT_FOUND")
    );
    let extra = stack
        .request_with(
            Method::POST,
            "/v1/rooms/doors:join",
            Some(&stack.subject_token("alice")),
            Some(json!({"priority": 1}).to_string().into()),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(
        (extra.status, extra.field()),
        (StatusCode::BAD_REQUEST, "priority")
    );
    let wrong_method = stack.get("/v1/passes:heartbeat", None).await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(places(&stack).await, 0, "a refused join wrote nothing");

    // Alice joins; again, she gets the same place.
    let first = join(&stack, "doors", "alice").await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{:?}", first.body);
    assert_eq!(first.data()["deduplicated"], json!(false));
    let join_id = first.data()["join_id"]
        .as_str()
        .expect("join_id")
        .to_owned();
    let ticket = first.data()["ticket"].as_str().expect("ticket").to_owned();
    let again = join(&stack, "doors", "alice").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.data()["deduplicated"], json!(true));
    assert_eq!(again.data()["join_id"], json!(join_id));
    assert_eq!(places(&stack).await, 1);

    // Admitted by the ticker: the poll answers a pass an origin verifies on its own.
    let admitted = poll_until(&stack, &ticket, "admitted", patience).await;
    assert_eq!(admitted["poll_after_ms"], json!(null));
    assert_eq!(admitted["heartbeat_after_ms"], json!(5_000 / 3));
    let pass = admitted["pass"].as_str().expect("pass").to_owned();
    let set = key_set(&stack).await;
    let claims = verify_pass(&set, &pass, "doors").expect("alice's pass verifies");
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["jti"], json!(join_id));
    assert_eq!(
        claims["namespace"],
        json!(stack.creds.namespace_id.to_string())
    );
    let lifetime = claims["exp"].as_i64().unwrap_or(0) - claims["iat"].as_i64().unwrap_or(0);
    assert_eq!(
        lifetime,
        FIRST_PASS_PICKUP.as_secs() as i64,
        "the first pass lives long enough to be picked up, longer than heartbeat_seconds: {claims}"
    );

    // Bob waits behind her, first in line.
    let bob = join(&stack, "doors", "bob").await;
    assert_eq!(bob.status, StatusCode::ACCEPTED);
    let bob_ticket = bob.data()["ticket"].as_str().expect("ticket").to_owned();
    let waiting = stack.poll(&bob_ticket).await;
    assert_eq!(waiting.data()["status"], "waiting");
    assert_eq!(waiting.data()["queue"]["position"], json!(0));
    assert_eq!(waiting.data()["pass"], json!(null));

    // Only the holder heartbeats her pass; a tampered pass is no pass.
    let stolen = heartbeat(&stack, "bob", &pass).await;
    assert_eq!(stolen.status, StatusCode::FORBIDDEN, "{:?}", stolen.body);
    let mut tampered = pass.clone();
    tampered.replace_range(tampered.len() - 3.., "AAA");
    let forged = heartbeat(&stack, "alice", &tampered).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED, "{:?}", forged.body);
    assert!(verify_pass(&set, &tampered, "doors").is_err());
    // A heartbeat extends the pass once now + heartbeat_seconds passes the first pass's end
    // (before that it answers the pass as it is, `extended: false`): a later `exp`, signed anew.
    let renewed = until(Duration::from_secs(8), || {
        let (stack, pass) = (&stack, &pass);
        async move {
            let reply = heartbeat(stack, "alice", pass).await;
            assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
            (
                reply.data()["extended"] == json!(true),
                reply.data().clone(),
            )
        }
    })
    .await
    .unwrap_or_else(|last| panic!("never extended: {last}"));
    let new_pass = renewed["pass"].as_str().expect("a new pass");
    let new_claims = verify_pass(&set, new_pass, "doors").expect("the new pass verifies");
    assert!(
        new_claims["exp"].as_i64() > claims["exp"].as_i64(),
        "{new_claims} {claims}"
    );

    // Carol waits, then gives up her place with her ticket.
    let carol = join(&stack, "doors", "carol").await;
    let carol_ticket = carol.data()["ticket"].as_str().expect("ticket").to_owned();
    let gone = leave(&stack, "carol", "ticket", &carol_ticket).await;
    assert_eq!(gone.status, StatusCode::OK, "{:?}", gone.body);
    assert_eq!(
        (
            gone.data()["status"].clone(),
            gone.data()["changed"].clone()
        ),
        (json!("left"), json!(true))
    );
    // Another subject's ticket reads the place but cannot end it: 403, as for a pass.
    let not_hers = leave(&stack, "alice", "ticket", &carol_ticket).await;
    assert_eq!(
        (not_hers.status, not_hers.code()),
        (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
        "{:?}",
        not_hers.body
    );

    // Alice leaves: bob is admitted once her last pass can no longer be accepted.
    let left = leave(&stack, "alice", "pass", new_pass).await;
    assert_eq!(left.status, StatusCode::OK, "{:?}", left.body);
    assert_eq!(left.data()["changed"], json!(true));
    let twice = leave(&stack, "alice", "pass", new_pass).await;
    assert_eq!(
        (twice.status, twice.data()["changed"].clone()),
        (StatusCode::OK, json!(false))
    );
    let after_leave = heartbeat(&stack, "alice", new_pass).await;
    assert_eq!(
        after_leave.status,
        StatusCode::CONFLICT,
        "{:?}",
        after_leave.body
    );
    assert_eq!(after_leave.body["error"]["details"]["state"], "left");
    let bob_in = poll_until(&stack, &bob_ticket, "admitted", Duration::from_secs(10)).await;
    let bob_claims = verify_pass(&set, bob_in["pass"].as_str().expect("pass"), "doors")
        .expect("bob's pass verifies");
    let alice_exp = new_claims["exp"].as_i64().unwrap_or(i64::MAX);
    assert!(
        bob_claims["iat"].as_i64().unwrap_or(0) >= alice_exp,
        "bob's pass began before alice's could lapse: {bob_claims} {new_claims}"
    );

    // The room as the namespace sees it.
    let room = stack
        .get("/v1/rooms/doors", Some(&stack.subject_token("dave")))
        .await;
    assert_eq!(room.status, StatusCode::OK, "{:?}", room.body);
    assert_eq!(
        (
            room.data()["waiting"].clone(),
            room.data()["active"].clone(),
            room.data()["left_total"].clone()
        ),
        (json!(0), json!(1), json!(2))
    );
    assert_eq!(room.data()["seed_sha256"], json!(null), "no start, no draw");
    let final_poll = stack.poll(&ticket).await;
    assert_eq!(final_poll.data()["status"], "left");
    assert_eq!(
        final_poll
            .headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("private, max-age=3600, immutable")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_namespace_refuses_joins_and_writes_nothing() {
    let stack = stack_with_rooms(DOORS).await;
    let paused = stack
        .post(
            "/v1/control",
            Some(&stack.credential()),
            &json!({"paused": true, "reason": "doors stay shut"}).to_string(),
        )
        .await;
    assert_eq!(paused.status, StatusCode::OK, "{:?}", paused.body);
    let refused = join(&stack, "doors", "alice").await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::SERVICE_UNAVAILABLE, "INTAKE_PAUSED"),
        "{:?}",
        refused.body
    );
    assert_eq!(places(&stack).await, 0);
    let counters: (i64, i64) =
        sqlx::query_as("SELECT next_seq, waiting FROM rooms WHERE code = 'doors'")
            .fetch_one(&stack.pg)
            .await
            .expect("room row");
    assert_eq!(counters, (0, 0), "a refused join takes no number");

    let resumed = stack
        .post(
            "/v1/control",
            Some(&stack.credential()),
            &json!({"paused": false, "reason": "open"}).to_string(),
        )
        .await;
    assert_eq!(resumed.status, StatusCode::OK, "{:?}", resumed.body);
    assert_eq!(
        join(&stack, "doors", "alice").await.status,
        StatusCode::ACCEPTED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prequeue_refuses_joins_before_its_window() {
    let opens = chrono::Utc::now() + chrono::Duration::hours(2);
    let stack = stack_with_rooms(&format!(
        "[[room]]\ncode = \"drop\"\nmax_active = 10\nopens_at = \"{}\"\nprequeue_seconds = 3600\n",
        opens.format("%Y-%m-%dT%H:%M:%SZ")
    ))
    .await;
    let early = join(&stack, "drop", "alice").await;
    assert_eq!(
        (early.status, early.code()),
        (StatusCode::CONFLICT, "STATE_CONFLICT"),
        "{:?}",
        early.body
    );
    let window = early.body["error"]["details"]["prequeue_opens_at"]
        .as_str()
        .expect("when the window opens");
    let window: chrono::DateTime<chrono::Utc> = window.parse().expect("a time");
    assert_eq!(window.timestamp(), opens.timestamp() - 3600);
    assert_eq!(places(&stack).await, 0);
    // The commitment is public before the window; the seed is not.
    let room = stack.get("/v1/rooms/drop", Some(&stack.credential())).await;
    assert_eq!(room.status, StatusCode::OK, "{:?}", room.body);
    assert_eq!(room.data()["seed_sha256"].as_str().map(str::len), Some(64));
    assert_eq!(room.data()["seed"], json!(null));
}
