//! People visiting a waiting room, and the origin that verifies their passes.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Shared, gateway};
use crate::client::now_ms;
use crate::journal::{PlacePollRecord, QuitRecord, RejoinRecord, RoomRecord};
use crate::plan::{RoomExit, Visit, visitor_subject};
use crate::token::subject_token;

/// A person's visit: join, wait for the pass, verify it as an origin would, then heartbeat and
/// leave, or walk away.
pub(super) async fn visit_room(shared: &Arc<Shared>, visit: &Visit) {
    let subject = visitor_subject(visit.person);
    let token = || {
        subject_token(
            &shared.creds.subject_key.id,
            &shared.creds.subject_key.secret,
            &subject,
            now_ms() / 1000,
        )
    };
    let base = gateway(shared, visit.gateway).to_string();
    let join_url = format!("{base}/v1/rooms/{}:join", visit.room);
    // Every attempt of the visit's join carries one key: a retry of an attempt whose answer was
    // lost is answered the place that attempt made, never a second one.
    let join_key = format!("visit-{}", visit.person);
    let send_join = |bearer: String| {
        let (url, key) = (join_url.clone(), join_key.clone());
        async move {
            shared
                .http
                .send(
                    hyper::Method::POST,
                    &url,
                    Some(&bearer),
                    Some(&json!({})),
                    &[("idempotency-key", &key)],
                )
                .await
        }
    };
    let mut joined = None;
    for attempt in 0..20 {
        let reply = if visit.twice && attempt == 0 {
            // Twice at once: both answers must name one place.
            let bearer = token();
            let (first, second) = tokio::join!(send_join(bearer.clone()), send_join(bearer));
            let ids = [&first, &second].map(|r| {
                matches!(r.status(), Some(200 | 202))
                    .then(|| r.data()["join_id"].as_str().map(str::to_string))
                    .flatten()
            });
            if let [Some(a), Some(b)] = &ids
                && a != b
            {
                shared.journal.stray(format!(
                    "person {} joined room {} twice at once and was told of two places: {a}, {b}",
                    visit.person, visit.room
                ));
            }
            if ids[0].is_some() { first } else { second }
        } else {
            send_join(token()).await
        };
        match reply.status() {
            Some(200 | 202) => {
                joined = reply.data()["ticket"].as_str().map(str::to_string);
                break;
            }
            Some(503) | None => tokio::time::sleep(Duration::from_millis(300)).await,
            _ => {
                shared.journal.stray(format!(
                    "room join answered {:?}: {}",
                    reply.status(),
                    reply.body()
                ));
                return;
            }
        }
    }
    let Some(ticket) = joined else { return };
    let mut place = String::new();
    let mut pass = None;
    let mut waiting_polls = 0;
    // A person gives up after two minutes (the run's drain does not wait for a room).
    let give_up = tokio::time::Instant::now() + Duration::from_secs(120);
    while !shared.over.is_cancelled() && tokio::time::Instant::now() < give_up {
        let data = poll_place(shared, visit, visit.gateway, &ticket).await;
        place = data["join_id"].as_str().unwrap_or_default().to_string();
        if let Some(p) = data["pass"].as_str() {
            pass = Some(p.to_string());
            break;
        }
        if matches!(
            data["status"].as_str(),
            Some("left" | "abandoned" | "expired")
        ) {
            return;
        }
        if data["status"] == "waiting" {
            waiting_polls += 1;
            if visit.quit_after_polls == Some(waiting_polls) {
                let ended = quit(shared, visit, &base, &place, &ticket, &token()).await;
                if ended && visit.rejoin_after_end {
                    rejoin(shared, visit, &place, send_join(token()).await);
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let Some(mut pass) = pass else { return };
    record_pass(shared, visit, &base, &place, &pass).await;
    match visit.after {
        RoomExit::Abandon => {}
        RoomExit::Leave { stay_ms, beats } => {
            let every = stay_ms / u64::from(beats + 1);
            for _ in 0..beats {
                tokio::time::sleep(Duration::from_millis(every)).await;
                let reply = shared
                    .http
                    .post(
                        &format!("{base}/v1/passes:heartbeat"),
                        Some(&token()),
                        &json!({"pass": pass}),
                    )
                    .await;
                if let Some(next) = reply.data()["pass"].as_str() {
                    pass = next.to_string();
                    record_pass(shared, visit, &base, &place, &pass).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(every)).await;
            let reply = shared
                .http
                .post(
                    &format!("{base}/v1/passes:leave"),
                    Some(&token()),
                    &json!({"pass": pass}),
                )
                .await;
            if reply.status() == Some(200) {
                let left = now_ms();
                shared.journal.with(|r| {
                    for room in r
                        .rooms
                        .iter_mut()
                        .filter(|x| x.person == visit.person && x.room == visit.room)
                    {
                        room.left_ms = Some(left);
                    }
                });
                if visit.rejoin_after_end {
                    rejoin(shared, visit, &place, send_join(token()).await);
                }
            }
        }
    }
}

/// Polls the place's ticket at `gateway`, recording an answered poll; the answer's data.
async fn poll_place(shared: &Shared, visit: &Visit, at: usize, ticket: &str) -> serde_json::Value {
    let sent_ms = now_ms();
    let reply = shared
        .http
        .get(
            &format!("{}/v1/tickets/{ticket}", gateway(shared, at)),
            None,
        )
        .await;
    let data = reply.data().clone();
    if reply.status() == Some(200) {
        let record = PlacePollRecord {
            person: visit.person,
            room: visit.room.clone(),
            place: data["join_id"].as_str().unwrap_or_default().to_string(),
            gateway: at,
            sent_ms,
            answered_ms: now_ms(),
            status: data["status"].as_str().unwrap_or_default().to_string(),
            position: data["queue"]["position"].as_u64(),
            advice_ms: data["poll_after_ms"].as_u64(),
        };
        shared.journal.with(|r| r.place_polls.push(record));
    }
    data
}

/// Records the answer to a join sent again, with the first join's key, after `place` ended.
fn rejoin(shared: &Shared, visit: &Visit, place: &str, reply: crate::client::Reply) {
    let record = RejoinRecord {
        person: visit.person,
        room: visit.room.clone(),
        place: place.to_string(),
        status: reply.status(),
        answered_place: reply.data()["join_id"].as_str().map(str::to_string),
    };
    shared.journal.with(|r| r.rejoins.push(record));
}

/// Leaves the queue with the ticket, then, a second later (a gateway reads its rooms again
/// five times a second), polls at the other gateway: it must know. Whether the leave ended the
/// place (`left`; a place whose turn had come meanwhile holds a pass instead).
async fn quit(
    shared: &Shared,
    visit: &Visit,
    base: &str,
    place: &str,
    ticket: &str,
    bearer: &str,
) -> bool {
    let reply = shared
        .http
        .post(
            &format!("{base}/v1/passes:leave"),
            Some(bearer),
            &json!({ "ticket": ticket }),
        )
        .await;
    if reply.status() != Some(200) {
        return false;
    }
    let record = QuitRecord {
        person: visit.person,
        room: visit.room.clone(),
        place: place.to_string(),
        answered_ms: now_ms(),
        status: reply.data()["status"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    let ended = record.status == "left";
    shared.journal.with(|r| r.quits.push(record));
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    poll_place(shared, visit, visit.gateway + 1, ticket).await;
    ended
}

/// Verifies a pass as an origin does (EdDSA against the published keys) and records it.
async fn record_pass(shared: &Shared, visit: &Visit, base: &str, place: &str, pass: &str) {
    let claims = shared.keys.verify(&shared.http, base, pass).await;
    let record = RoomRecord {
        person: visit.person,
        room: visit.room.clone(),
        place: place.to_string(),
        iat: claims.as_ref().map_or(0, |c| c.iat),
        exp: claims.as_ref().map_or(0, |c| c.exp),
        verified: claims.is_some(),
        received_ms: now_ms(),
        left_ms: None,
    };
    shared.journal.with(|r| r.rooms.push(record));
}
