//! The browser module's room handle in real Chromium (gateway/tests/ui/rooms.mjs), against a
//! room with proof of work at its door. What the pages claim is checked where it is true: the
//! places' rows in PostgreSQL (one per subject, the challenge it spent recorded) and the passes
//! verified as an origin verifies them (`jsonwebtoken` against the published keys).
//! - a page on the gateway's origin solves in the gateway's worker file, is admitted, keeps its
//!   pass alive with heartbeats, reloads without going through the door again, and leaves;
//! - a page on another origin (served by the script) solves in a Blob-URL worker; a page whose CSP forbids workers
//!   solves on the main thread in slices;
//! - the solver's hash rate in a Chromium Worker is measured and printed.

use std::sync::Arc;

use serde_json::{Value, json};

use super::kit::*;
use crate::support::browser_driver::run_script;
use crate::support::*;

const BITS: u64 = 14;
/// The page without workers solves more, so that its solve spans many main-thread slices.
const STEEP_BITS: u64 = 18;

/// The application's origin (`app_origin`) may call the API; `doors` asks 14 bits at its door
/// and a heartbeat every 2 s (a third of `heartbeat_seconds`); `steep` asks 18 bits.
fn declaration(app_origin: &str) -> String {
    format!(
        r#"
[namespace]
allowed_origins = ["{app_origin}"]
{CLAIM_DECLARATION}
[[room]]
code = "doors"
max_active = 10
pass_seconds = 60
heartbeat_seconds = 6
proof_of_work = {{ bits = {BITS} }}

[[room]]
code = "steep"
max_active = 10
proof_of_work = {{ bits = {STEEP_BITS} }}
"#
    )
}

/// The rows of `subject`'s places, in any room: (id, state, challenge id).
async fn places_of(stack: &Stack, subject: &str) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as(
        "SELECT id::text, state, challenge_id::text FROM room_places
          WHERE subject = $1 ORDER BY joined_at",
    )
    .bind(subject)
    .fetch_all(&stack.pg)
    .await
    .expect("read the places")
}

/// One place for `subject`, in `state`, bought with a challenge; its id.
async fn one_place(stack: &Stack, subject: &str, state: &str) -> String {
    let rows = places_of(stack, subject).await;
    assert_eq!(rows.len(), 1, "{subject}: one place, one join: {rows:?}");
    let (id, found, challenge) = &rows[0];
    assert_eq!(found, state, "{subject}: {rows:?}");
    assert!(
        challenge.is_some(),
        "{subject}: the place records no challenge"
    );
    id.clone()
}

/// The page's pass verifies with the published keys, for this room, subject and place.
async fn check_pass(stack: &Stack, room: &str, subject: &str, place: &str, pass: &str) {
    let claims = verify_pass(&key_set(stack).await, pass, room)
        .unwrap_or_else(|e| panic!("{subject}'s pass does not verify: {e}"));
    assert_eq!(claims["sub"], subject);
    assert_eq!(claims["jti"], place);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_solves_the_door_in_a_worker_is_admitted_reloads_without_joining_again_and_leaves() {
    // The application's pages come from a server of the script's own on this port: another
    // origin than the gateway's, on loopback like it (Chromium refuses a public page's requests
    // to a loopback address, and a page Playwright fulfils has no address at all).
    let app_origin = format!("http://127.0.0.1:{}", free_port());
    let stack = Arc::new(Stack::with_declaration(&declaration(&app_origin)).await);
    let subjects = ["same-origin", "cross-origin", "no-worker"];
    let tokens: serde_json::Map<String, Value> = subjects
        .iter()
        .map(|s| ((*s).to_string(), json!(stack.subject_token(s))))
        .collect();
    let setup = json!({
        "room": "doors", "bits": BITS, "steep_room": "steep", "steep_bits": STEEP_BITS,
        "app_origin": app_origin, "tokens": tokens,
    });
    let rate: Arc<std::sync::Mutex<Option<Value>>> = Arc::default();
    let run = run_script(
        "rooms.mjs",
        &stack.base,
        &setup.to_string(),
        &[],
        |event, detail| {
            let (stack, rate) = (stack.clone(), rate.clone());
            async move {
                let detail: Value = serde_json::from_str(&detail).unwrap_or(Value::Null);
                match event.as_str() {
                    "admitted" => {
                        let subject = detail["subject"].as_str().expect("subject");
                        let room = detail["room"].as_str().expect("room");
                        let place = one_place(&stack, subject, "admitted").await;
                        let pass = detail["pass"].as_str().expect("pass");
                        check_pass(&stack, room, subject, &place, pass).await;
                        let bits = if room == "steep" { STEEP_BITS } else { BITS };
                        assert_eq!(detail["work"]["bits"], bits, "{detail}");
                        println!("{subject}: admitted to {room} after {}", detail["work"]);
                    }
                    "heartbeat" => {
                        let place = one_place(&stack, "same-origin", "admitted").await;
                        let pass = detail["pass"].as_str().expect("pass");
                        check_pass(&stack, "doors", "same-origin", &place, pass).await;
                    }
                    "reloaded" => {
                        let place = one_place(&stack, "same-origin", "admitted").await;
                        assert_eq!(detail["join_id"], place.as_str(), "the same place");
                    }
                    "left" => {
                        one_place(&stack, "same-origin", "left").await;
                    }
                    "hash-rate" => *rate.lock().expect("rate") = Some(detail),
                    other => panic!("unexpected @@{other}"),
                }
            }
        },
    )
    .await;
    assert!(run.success, "rooms.mjs failed:\n{}", run.transcript);
    let rate = rate.lock().expect("rate").clone().expect("a hash rate");
    println!("the browser module's solver in a Chromium Worker: {rate}");
    assert!(
        rate["hashes_per_ms"].as_f64().unwrap_or(0.0) > 0.0,
        "{rate}"
    );
    // Every place is one of the three pages': nothing joined twice.
    let places: i64 = sqlx::query_scalar("SELECT count(*) FROM room_places")
        .fetch_one(&stack.pg)
        .await
        .expect("count");
    assert_eq!(places, 3);
}
