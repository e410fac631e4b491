//! The hosted room page (`/room/{namespace_id}/{room}`): what the gateway serves, and real
//! Chromium pages (gateway/tests/ui/room_page.mjs) checked where the truth is: the places' rows
//! in PostgreSQL and the passes the pages posted to the protected origin, verified as an origin
//! verifies them (`jsonwebtoken` against the published keys) and counted by [`Origin`].

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{Value, json};
use sluice_store::tenancy;

use super::kit::*;
use crate::support::browser_driver::run_script;
use crate::support::*;

const PAGES: usize = 50;
const CROWD_MAX_ACTIVE: usize = 20;

/// `hall` opens at `opens_at` with a pre-queue and posts passes to the origin; `lounge` has no
/// return URL (its page keeps the pass); `crowd` takes fifty pages through twenty slots.
fn declaration(opens_at: chrono::DateTime<chrono::Utc>, app_port: u16) -> String {
    let enter = format!("http://127.0.0.1:{app_port}/enter");
    format!(
        r##"{CLAIM_DECLARATION}
[[room]]
code = "hall"
max_active = 5
pass_seconds = 60
heartbeat_seconds = 5
opens_at = "{opens_at}"
prequeue_seconds = 7200
page = {{ title = "Launch day </script><b>", accent_color = "#0b6e4f", return_url = "{enter}" }}

[[room]]
code = "lounge"
max_active = 1
pass_seconds = 60
heartbeat_seconds = 5

[[room]]
code = "crowd"
max_active = {CROWD_MAX_ACTIVE}
pass_seconds = 60
heartbeat_seconds = 5
page = {{ return_url = "{enter}" }}
"##,
        opens_at = opens_at.format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// `subject`'s places in `room`: (id, state, prequeue, renewed after its admission).
async fn places_of(stack: &Stack, room: &str, subject: &str) -> Vec<(String, String, bool, bool)> {
    sqlx::query_as(
        "SELECT id::text, state, prequeue, coalesce(renewed_at > admitted_at, false)
           FROM room_places WHERE room = $1 AND subject = $2 ORDER BY joined_at",
    )
    .bind(room)
    .bind(subject)
    .fetch_all(&stack.pg)
    .await
    .expect("read the places")
}

/// A header of `reply` as text ("" when absent).
fn header<'a>(reply: &'a Reply, name: &str) -> &'a str {
    reply
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_room_page_is_served_from_the_declaration_under_a_strict_policy() {
    let app_port = free_port();
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let stack = Stack::with_declaration(&declaration(later, app_port)).await;
    let ns = stack.creds.namespace_id;
    let hall = stack.get(&format!("/room/{ns}/hall"), None).await;
    assert_eq!(hall.status, StatusCode::OK);
    let policy = header(&hall, "content-security-policy");
    assert!(
        policy.ends_with(&format!("; form-action http://127.0.0.1:{app_port}")),
        "{policy}"
    );
    assert!(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"));
    assert_eq!(header(&hall, "referrer-policy"), "no-referrer");
    assert!(!hall.headers.contains_key("set-cookie"));
    // The declared texts are data in a JSON block, never markup.
    let html = hall.body.as_str().expect("html");
    assert!(
        html.contains(r#"Launch day \u003c/script>\u003cb>"#),
        "{html}"
    );
    assert!(!html.contains("</script><b>"));
    let lounge = stack.get(&format!("/room/{ns}/lounge"), None).await;
    assert_eq!(lounge.status, StatusCode::OK);
    assert!(header(&lounge, "content-security-policy").ends_with("; form-action 'none'"));
    for missing in [
        format!("/room/{ns}/nowhere"),
        format!("/room/{}/hall", uuid::Uuid::new_v4()),
        "/room/not-a-namespace/hall".to_string(),
    ] {
        let reply = stack.get(&missing, None).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{missing}");
    }
    let script = stack.get("/sdk/v1/room/room.js", None).await;
    assert_eq!(script.status, StatusCode::OK);
    assert!(
        script
            .body
            .as_str()
            .is_some_and(|js| js.contains("createClient"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_waits_for_the_start_keeps_its_place_on_reload_and_posts_its_pass() {
    let app_port = free_port();
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let stack = Arc::new(Stack::with_declaration(&declaration(later, app_port)).await);
    let tokens = json!({
        "hall-user": stack.subject_token("hall-user"),
        "lounge-user": stack.subject_token("lounge-user"),
    });
    let setup = json!({
        "namespace": stack.creds.namespace_id, "app_port": app_port, "tokens": tokens,
    });
    let place: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let run = run_script(
        "room_page.mjs",
        &stack.base,
        &setup.to_string(),
        &["--scenario".into(), "page".into()],
        |event, detail| {
            let (stack, place) = (stack.clone(), place.clone());
            async move {
                match event.as_str() {
                    "prequeued" | "reloaded" => {
                        let rows = places_of(&stack, "hall", "hall-user").await;
                        assert_eq!(rows.len(), 1, "one place, whatever the reloads: {rows:?}");
                        let (id, state, prequeue, _) = &rows[0];
                        assert_eq!((state.as_str(), *prequeue), ("waiting", true), "{rows:?}");
                        let mut known = place.lock().expect("place");
                        assert_eq!(
                            known.get_or_insert_with(|| id.clone()),
                            id,
                            "the same place"
                        );
                    }
                    "opening" => {
                        let soon = chrono::Utc::now() + chrono::Duration::seconds(1);
                        tenancy::apply_declaration(
                            &stack.pg,
                            stack.creds.namespace_id,
                            &declaration(soon, app_port),
                            "test",
                            None,
                        )
                        .await
                        .expect("open the hall");
                    }
                    "handed" => {
                        let fields: Value = serde_json::from_str(&detail).expect("fields");
                        let id = place.lock().expect("place").clone().expect("a place");
                        assert_eq!(fields["join_id"], id.as_str(), "{fields}");
                        assert_eq!(fields["room"], "hall", "{fields}");
                        let pass = fields["pass"].as_str().expect("pass");
                        let claims = verify_pass(&key_set(&stack).await, pass, "hall")
                            .unwrap_or_else(|e| panic!("the posted pass does not verify: {e}"));
                        assert_eq!(
                            (claims["sub"].as_str(), claims["jti"].as_str()),
                            (Some("hall-user"), Some(id.as_str()))
                        );
                    }
                    "lounging" => {
                        let rows = places_of(&stack, "lounge", "lounge-user").await;
                        assert_eq!(rows.len(), 1, "{rows:?}");
                        let (_, state, _, renewed) = &rows[0];
                        assert_eq!(state, "admitted", "{rows:?}");
                        assert!(renewed, "the open page heartbeats: {rows:?}");
                    }
                    "left" => {
                        let rows = places_of(&stack, "lounge", "lounge-user").await;
                        assert_eq!(rows[0].1, "left", "{rows:?}");
                    }
                    other => panic!("unexpected @@{other}"),
                }
            }
        },
    )
    .await;
    assert!(run.success, "room_page.mjs failed: {}", run.failure());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_pages_in_one_room_never_give_the_origin_more_than_max_active() {
    let app_port = free_port();
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let stack = Arc::new(Stack::with_declaration(&declaration(later, app_port)).await);
    let tokens: serde_json::Map<String, Value> = (0..PAGES)
        .map(|i| {
            let subject = format!("crowd-{i}");
            let token = stack.subject_token(&subject);
            (subject, json!(token))
        })
        .collect();
    let setup = json!({
        "namespace": stack.creds.namespace_id, "app_port": app_port, "tokens": tokens,
    });
    let origin = Arc::new(Origin::new(key_set(&stack).await, "crowd"));
    let run = run_script(
        "room_page.mjs",
        &stack.base,
        &setup.to_string(),
        &["--scenario".into(), "crowd".into()],
        |event, detail| {
            let origin = origin.clone();
            async move {
                assert_eq!(event, "handed", "{detail}");
                let fields: Value = serde_json::from_str(&detail).expect("fields");
                let pass = fields["pass"].as_str().expect("pass");
                let claims = origin
                    .serve(pass)
                    .unwrap_or_else(|e| panic!("the origin refuses a posted pass: {e}"));
                assert_eq!(claims["sub"], fields["subject"], "{fields}");
                assert_eq!(claims["jti"], fields["join_id"], "{fields}");
            }
        },
    )
    .await;
    assert!(run.success, "room_page.mjs failed: {}", run.failure());
    assert_eq!(origin.places(), PAGES, "every page got in once");
    assert!(
        origin.most() <= CROWD_MAX_ACTIVE,
        "the origin saw {} live passes at once (max_active {CROWD_MAX_ACTIVE})",
        origin.most()
    );
    assert!(origin.places_of().values().all(|places| places.len() == 1));
    let (places, subjects): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT subject) FROM room_places WHERE room = 'crowd'",
    )
    .fetch_one(&stack.pg)
    .await
    .expect("count");
    assert_eq!((places, subjects), (PAGES as i64, PAGES as i64));
}
