//! An intent's life as a client lives it: the enqueue (sent again with the same key while its
//! outcome is unknown), its ticket polled until it ends, a reserved unit confirmed or released,
//! a cancel.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{Shared, gateway};
use crate::client::{Reply, millis, now_ms};
use crate::journal::{CancelRecord, EnqueueRecord, PollRecord, ReservationRecord};
use crate::plan::{Enqueue, Reservation};
use crate::token::subject_token;

/// One intent (or its replay): sent again with the same key while the outcome is unknown.
pub(super) async fn enqueue_intent(
    shared: &Arc<Shared>,
    e: &Enqueue,
    replay: bool,
    other_input: bool,
    first_gateway: usize,
) {
    let Some(decl) = shared.decl.command(&e.command) else {
        return;
    };
    let mut input = e.input(decl);
    if other_input {
        // Other content under the same key, still naming the same intent for the backend.
        input.insert("n".into(), format!("00{}", e.n).into());
    }
    let body = json!({"request_key": e.request_key(), "subject": e.subject, "input": input});
    let mut turn = first_gateway;
    for attempt in 0..30 {
        let url = format!(
            "{}/v1/commands/{}:enqueue",
            gateway(shared, turn),
            e.command
        );
        let sent_ms = now_ms();
        let reply = shared
            .http
            .post(&url, Some(&shared.creds.credential), &body)
            .await;
        let answered_ms = now_ms();
        let data = reply.data();
        let record = EnqueueRecord {
            n: e.n,
            replay,
            other_input,
            sent_ms,
            answered_ms,
            status: reply.status(),
            code: reply.error_code().map(str::to_string),
            retry_after: match &reply {
                Reply::Answered { retry_after, .. } => retry_after.clone(),
                Reply::Unanswered(_) => None,
            },
            command_id: data["command_id"].as_str().map(str::to_string),
            deduplicated: data["deduplicated"].as_bool(),
            position: data["queue"]["position"].as_u64(),
            observed_ms: data["queue"]["observed_at"].as_str().and_then(millis),
            resource_key: data["resource_key"].as_str().map(str::to_string),
            body: reply.body().clone(),
            gateway: turn % shared.gateways.len().max(1),
            unanswered: reply.unanswered(),
        };
        shared.journal.with(|r| r.enqueues.push(record));
        match reply.status() {
            Some(200 | 202) if !other_input => {
                let command_id = data["command_id"].as_str().map(str::to_string);
                let ticket = data["ticket"].as_str().map(str::to_string);
                let start = {
                    let mut intents = shared.intents.lock().unwrap_or_else(|p| p.into_inner());
                    let intent = intents.entry(e.n).or_default();
                    if intent.command_id.is_none() {
                        intent.command_id = command_id;
                        intent.ticket = ticket;
                    }
                    let start = !intent.polling && intent.ticket.is_some();
                    intent.polling |= start;
                    start
                };
                if start {
                    let shared = Arc::clone(shared);
                    let e = e.clone();
                    tokio::spawn(async move { poll_until_final(&shared, &e).await });
                }
                return;
            }
            // A refusal to retry later (the same key), or an outcome that is not known.
            Some(429) | Some(503) | None if !replay && attempt < 29 => {
                let wait = match &reply {
                    Reply::Answered { retry_after, .. } => retry_after
                        .as_deref()
                        .and_then(|s| s.parse::<u64>().ok())
                        .map_or(300, |s| (s * 1000).min(2000)),
                    Reply::Unanswered(_) => 300,
                };
                if reply.status() == Some(429) && attempt >= 2 {
                    return;
                }
                if reply.status().is_none() {
                    turn += 1;
                }
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            _ => return,
        }
    }
}

/// Polls the command's ticket at the advised pace (held between 40 and 300 ms so positions are
/// sampled densely) over every gateway in turn, until it ends or the run is over.
async fn poll_until_final(shared: &Arc<Shared>, e: &Enqueue) {
    let (command_id, ticket) = {
        let intents = shared.intents.lock().unwrap_or_else(|p| p.into_inner());
        let Some(intent) = intents.get(&e.n) else {
            return;
        };
        match (&intent.command_id, &intent.ticket) {
            (Some(c), Some(t)) => (c.clone(), t.clone()),
            _ => return,
        }
    };
    let mut turn = e.gateway;
    let mut reserved_done = false;
    loop {
        let url = format!("{}/v1/tickets/{ticket}", gateway(shared, turn));
        let asked = turn % shared.gateways.len().max(1);
        turn += 1;
        let sent_ms = now_ms();
        let reply = shared.http.get(&url, None).await;
        let data = reply.data();
        let state = data["status"].as_str().map(str::to_string);
        shared.journal.with(|r| {
            r.polls.push(PollRecord {
                n: e.n,
                command_id: command_id.clone(),
                sent_ms,
                answered_ms: now_ms(),
                status: reply.status(),
                state: state.clone(),
                position: data["queue"]["position"].as_u64(),
                observed_ms: data["queue"]["observed_at"].as_str().and_then(millis),
                generation: data["generation"].as_str().map(str::to_string),
                code: reply.error_code().map(str::to_string),
                gateway: asked,
                unanswered: reply.unanswered(),
            })
        });
        let final_state = state.as_deref().is_some_and(|s| {
            matches!(
                s,
                "succeeded" | "rejected" | "failed" | "expired" | "cancelled"
            )
        });
        if state.as_deref() == Some("succeeded")
            && !reserved_done
            && let Some(allocation) = data["result"]["allocation_id"].as_str()
            && data["result"]["state"].as_str() == Some("reserved")
        {
            reserved_done = true;
            let shared = Arc::clone(shared);
            let (allocation, e) = (allocation.to_string(), e.clone());
            tokio::spawn(async move { follow_reservation(&shared, &e, &allocation).await });
        }
        if final_state || shared.over.is_cancelled() {
            return;
        }
        let advised = data["poll_after_ms"].as_u64().unwrap_or(200);
        let wait = advised.clamp(40, 300);
        tokio::select! {
            _ = shared.over.cancelled() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
        }
    }
}

async fn follow_reservation(shared: &Arc<Shared>, e: &Enqueue, allocation: &str) {
    let (action, after_ms) = match e.reservation {
        Reservation::Confirm { after_ms } => ("confirm", after_ms),
        Reservation::Release { after_ms } => ("release", after_ms),
        Reservation::Lapse => return,
    };
    tokio::time::sleep(Duration::from_millis(after_ms)).await;
    let token = subject_token(
        &shared.creds.subject_key.id,
        &shared.creds.subject_key.secret,
        &e.subject,
        now_ms() / 1000,
    );
    for attempt in 0..10 {
        let sent_ms = now_ms();
        let url = format!(
            "{}/v1/allocations/{allocation}:{action}",
            gateway(shared, e.gateway + attempt)
        );
        let reply = shared.http.post(&url, Some(&token), &json!({})).await;
        shared.journal.with(|r| {
            r.reservations.push(ReservationRecord {
                n: e.n,
                allocation_id: allocation.to_string(),
                action: action.to_string(),
                sent_ms,
                status: reply.status(),
                state: reply.data()["state"].as_str().map(str::to_string),
                code: reply.error_code().map(str::to_string),
            })
        });
        if !matches!(reply.status(), None | Some(503)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub(super) async fn cancel(shared: &Arc<Shared>, n: u32, first_gateway: usize) {
    let command_id = {
        let intents = shared.intents.lock().unwrap_or_else(|p| p.into_inner());
        intents.get(&n).and_then(|i| i.command_id.clone())
    };
    let Some(command_id) = command_id else { return };
    for attempt in 0..10 {
        let url = format!(
            "{}/v1/commands/{command_id}:cancel",
            gateway(shared, first_gateway + attempt)
        );
        let sent_ms = now_ms();
        let reply = shared
            .http
            .post(&url, Some(&shared.creds.credential), &json!({}))
            .await;
        shared.journal.with(|r| {
            r.cancels.push(CancelRecord {
                n,
                sent_ms,
                answered_ms: now_ms(),
                status: reply.status(),
                state: reply.data()["status"].as_str().map(str::to_string),
                code: reply.error_code().map(str::to_string),
            })
        });
        if !matches!(reply.status(), None | Some(503)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
