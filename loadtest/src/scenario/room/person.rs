//! One person of a room run: joins at its arrival (retrying explicit retryable refusals and
//! lost answers: one live place per subject makes a repeat harmless), polls its place honouring
//! `poll_after_ms`, has every pass it receives verified by the witness, then acts out its exit:
//! uses the room for its visit, heartbeating when advised, and leaves or lets the pass run out,
//! or abandons the pass at once.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};

use super::witness::Witness;
use crate::api::Outcome;
use crate::invariants::room::{Exit, Told, Witnessed};
use crate::record::Ending;
use crate::scenario::journey::Context;

/// Endpoint names in the report.
pub(super) const JOIN: &str = "join room";
pub(super) const POLL: &str = "poll place";
pub(super) const HEARTBEAT: &str = "heartbeat pass";
pub(super) const LEAVE: &str = "leave room";

/// The fractional part of the golden ratio: spreads the exits over [0, 1) in admission order,
/// so even a handful of people takes every exit with a share above zero.
const GOLDEN: f64 = 0.618_033_988_749_894_9;

/// What every person of the run shares.
pub(super) struct Room {
    pub(super) code: String,
    pub(super) witness: Witness,
    pub(super) visit: Duration,
    pub(super) leave_share: f64,
    pub(super) abandon_share: f64,
    /// `opens_at` (Unix µs): a pre-queue place waits from there.
    pub(super) opens_at_us: i64,
    admitted: AtomicU64,
    pub(super) log: Mutex<Log>,
}

/// What the people did, beyond the recorder's tallies.
#[derive(Default)]
pub(super) struct Log {
    pub(super) witnessed: Vec<Witnessed>,
    /// From the join's answer (or `opens_at`) to the poll that saw the pass, µs.
    pub(super) waits_us: Vec<i64>,
    pub(super) polls: Vec<u64>,
    pub(super) polls_early: u64,
    /// Every position told to a waiting place.
    pub(super) positions: Vec<Told>,
    pub(super) passes_verified: u64,
    /// Why the witness refused a pass, one line each.
    pub(super) passes_refused: Vec<String>,
    pub(super) heartbeats: u64,
    pub(super) heartbeats_refused: u64,
    pub(super) leaves_unanswered: u64,
}

impl Room {
    pub(super) fn new(
        code: &str,
        witness: Witness,
        options: &crate::scenario::Options,
        opens_at_us: i64,
    ) -> Self {
        Self {
            code: code.to_string(),
            witness,
            visit: Duration::from_millis(options.visit_ms),
            leave_share: options.leave_share,
            abandon_share: options.abandon_share,
            opens_at_us,
            admitted: AtomicU64::new(0),
            log: Mutex::new(Log::default()),
        }
    }

    fn log<T>(&self, f: impl FnOnce(&mut Log) -> T) -> T {
        f(&mut self.log.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The next admitted person's exit.
    fn choose(&self) -> Exit {
        let k = self.admitted.fetch_add(1, Ordering::Relaxed);
        let u = (k as f64 * GOLDEN).fract();
        if u < self.leave_share {
            Exit::Left
        } else if u < self.leave_share + self.abandon_share {
            Exit::Abandoned
        } else {
            Exit::RanOut
        }
    }

    /// A pass the person just received, through the witness; `false` if it was refused.
    async fn verify(&self, place: &mut Witnessed, pass: &str) -> bool {
        match self.witness.accept(pass, &place.subject).await {
            Ok(accepted) => {
                place.jtis.insert(accepted.jti);
                place.first_iat = Some(
                    place
                        .first_iat
                        .map_or(accepted.iat, |i| i.min(accepted.iat)),
                );
                place.last_exp = Some(place.last_exp.map_or(accepted.exp, |e| e.max(accepted.exp)));
                self.log(|l| l.passes_verified += 1);
                true
            }
            Err(why) => {
                self.log(|l| l.passes_refused.push(format!("{}: {why}", place.subject)));
                false
            }
        }
    }
}

fn unix_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

fn after_ms(data: &Value, field: &str) -> Option<Duration> {
    data.get(field)
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
}

/// One person: `token` is its subject token, held before it arrives.
pub(super) async fn person(
    context: &Context,
    room: &Room,
    subject: String,
    token: String,
    arrive_at: Instant,
) {
    tokio::time::sleep_until(arrive_at.into()).await;
    let arrived = Instant::now();
    context.recorder.arrival(arrived);
    context.recorder.entered();
    let ending = journey(context, room, subject, &token, arrived).await;
    // The person's final answer is the pass (or the refusal): the rest of the visit is theirs.
    if let Some(ending) = ending {
        context.recorder.ending(arrived, ending);
    }
}

/// Everything from the join on; `Some` ending when the person did not get a pass (the ending
/// of one who did is recorded when the pass arrives).
async fn journey(
    context: &Context,
    room: &Room,
    subject: String,
    token: &str,
    arrived: Instant,
) -> Option<Ending> {
    let (joined, sent_us, answered_us) = match join(context, room, token, arrived).await {
        Ok(joined) => joined,
        Err(ending) => return Some(ending),
    };
    let (Some(join_id), Some(ticket)) = (
        joined
            .get("join_id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse().ok()),
        joined.get("ticket").and_then(Value::as_str),
    ) else {
        return Some(Ending::Unknown);
    };
    context.recorder.joined();
    let mut place = Witnessed {
        join_id,
        subject,
        prequeue: joined.get("prequeue").and_then(Value::as_bool) == Some(true),
        join_sent_us: sent_us,
        join_answered_us: answered_us,
        jtis: HashSet::new(),
        first_iat: None,
        last_exp: None,
        exit: Exit::NotAdmitted,
    };
    let ending = match poll_until_admitted(context, room, ticket, &joined, arrived).await {
        Ok(admitted) => {
            let waited_from = if place.prequeue {
                answered_us.max(room.opens_at_us)
            } else {
                answered_us
            };
            room.log(|l| l.waits_us.push(unix_us() - waited_from));
            context.recorder.ending(arrived, Ending::Succeeded);
            visit(context, room, &mut place, token, admitted).await;
            None
        }
        Err(ending) => Some(ending),
    };
    room.log(|l| l.witnessed.push(place));
    ending
}

/// The join's `data` and when the answered attempt was sent and answered, or the ending of a
/// person who never got a place.
async fn join(
    context: &Context,
    room: &Room,
    token: &str,
    arrived: Instant,
) -> Result<(Value, i64, i64), Ending> {
    let path = format!("/v1/rooms/{}:join", room.code);
    // One key for every attempt of this join: an attempt whose answer was lost may have made a
    // place, and the retry must be answered that place (even once it has ended), not a second.
    let join_key = format!("join-{}", uuid::Uuid::new_v4());
    for retry in 0.. {
        let sent_us = unix_us();
        let answer = context
            .call_with(
                JOIN,
                Method::POST,
                &path,
                Some(token),
                None,
                &[("idempotency-key", &join_key)],
            )
            .await;
        let (ending, advice) = match answer.outcome {
            Outcome::Success { data, .. } => return Ok((data, sent_us, unix_us())),
            Outcome::Refused {
                code,
                retryable: true,
                retry_after,
                ..
            } => (Ending::Refused(code), retry_after),
            Outcome::Refused { code, .. } => return Err(Ending::Refused(code)),
            Outcome::Unknown { .. } => (Ending::Unknown, None),
        };
        if !context.wait_to_retry(arrived, advice, retry).await {
            return Err(ending);
        }
    }
    Err(Ending::Unknown)
}

/// Polls the place after each advised `poll_after_ms` until it is admitted; that answer.
async fn poll_until_admitted(
    context: &Context,
    room: &Room,
    ticket: &str,
    joined: &Value,
    arrived: Instant,
) -> Result<Value, Ending> {
    let path = format!("/v1/tickets/{ticket}");
    let mut advice = after_ms(joined, "poll_after_ms").unwrap_or(Duration::from_secs(1));
    let mut answered = Instant::now();
    let (mut polls, mut early) = (0u64, 0u64);
    let mut told = Vec::new();
    let joined_id = joined
        .get("join_id")
        .and_then(Value::as_str)
        .and_then(|id| id.parse().ok())
        .unwrap_or_default();
    let result = loop {
        if Instant::now() + advice > arrived + context.patience {
            break Err(Ending::Unknown);
        }
        tokio::time::sleep(advice).await;
        if Instant::now() < answered + advice {
            early += 1;
        }
        polls += 1;
        let sent_us = chrono::Utc::now().timestamp_micros();
        let answer = context.call(POLL, Method::GET, &path, None, None).await;
        answered = Instant::now();
        match answer.outcome {
            Outcome::Success { data, .. } => match data.get("status").and_then(Value::as_str) {
                Some("admitted") => break Ok(data),
                Some("waiting") => {
                    if let Some(position) = data["queue"]["position"].as_u64() {
                        told.push(Told {
                            join_id: joined_id,
                            sent_us,
                            answered_us: chrono::Utc::now().timestamp_micros(),
                            position,
                        });
                    }
                    advice = after_ms(&data, "poll_after_ms").unwrap_or(Duration::from_secs(1));
                }
                // A place that ended before its holder saw a pass: never expected.
                other => break Err(Ending::Rejected(other.unwrap_or("unknown").to_uppercase())),
            },
            Outcome::Refused { retry_after, .. } => {
                advice = retry_after.unwrap_or(Duration::from_secs(1));
            }
            Outcome::Unknown { .. } => advice = Duration::from_secs(1),
        }
    };
    room.log(|l| {
        l.polls.push(polls);
        l.polls_early += early;
        l.positions.extend(told);
    });
    result
}

/// The admitted person's exit: abandon at once, or use the room for the visit, heartbeating
/// when advised, then leave or let the pass run out.
async fn visit(
    context: &Context,
    room: &Room,
    place: &mut Witnessed,
    token: &str,
    admitted: Value,
) {
    let Some(mut pass) = admitted
        .get("pass")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        room.log(|l| {
            l.passes_refused
                .push(format!("{}: admitted without a pass", place.subject))
        });
        return;
    };
    if !room.verify(place, &pass).await {
        return;
    }
    place.exit = room.choose();
    if place.exit == Exit::Abandoned {
        return;
    }
    let visit_ends = Instant::now() + room.visit;
    let mut advice = after_ms(&admitted, "heartbeat_after_ms");
    while let Some(wait) = advice {
        let next = Instant::now() + wait;
        if next >= visit_ends {
            break;
        }
        tokio::time::sleep_until(next.into()).await;
        room.log(|l| l.heartbeats += 1);
        let answer = context
            .call(
                HEARTBEAT,
                Method::POST,
                "/v1/passes:heartbeat",
                Some(token),
                Some(json!({ "pass": pass }).to_string()),
            )
            .await;
        match answer.outcome {
            Outcome::Success { data, .. } => {
                if let Some(renewed) = data.get("pass").and_then(Value::as_str) {
                    pass = renewed.to_string();
                    if !room.verify(place, &pass).await {
                        return;
                    }
                }
                advice = after_ms(&data, "heartbeat_after_ms");
            }
            Outcome::Refused { status: 409, .. } => {
                // The pass lapsed under its holder: the place is over.
                room.log(|l| l.heartbeats_refused += 1);
                return;
            }
            Outcome::Refused { retry_after, .. } => {
                room.log(|l| l.heartbeats_refused += 1);
                advice = Some(retry_after.unwrap_or(Duration::from_secs(1)));
            }
            Outcome::Unknown { .. } => {
                room.log(|l| l.heartbeats_refused += 1);
                advice = Some(Duration::from_secs(1));
            }
        }
    }
    tokio::time::sleep_until(visit_ends.into()).await;
    if place.exit == Exit::Left {
        leave(context, room, token, &pass).await;
    }
}

/// Gives the pass back; a repeat of a leave is a `200` no-op, so a lost answer is retried.
async fn leave(context: &Context, room: &Room, token: &str, pass: &str) {
    let body = json!({ "pass": pass }).to_string();
    for _ in 0..5 {
        let answer = context
            .call(
                LEAVE,
                Method::POST,
                "/v1/passes:leave",
                Some(token),
                Some(body.clone()),
            )
            .await;
        match answer.outcome {
            Outcome::Success { .. } => return,
            Outcome::Refused {
                retryable: true,
                retry_after,
                ..
            } => tokio::time::sleep(retry_after.unwrap_or(Duration::from_secs(1))).await,
            Outcome::Unknown { .. } => tokio::time::sleep(Duration::from_secs(1)).await,
            Outcome::Refused { .. } => break,
        }
    }
    room.log(|l| l.leaves_unanswered += 1);
}
