//! Waiting rooms: `POST /v1/rooms/{room}:join`, `GET /v1/rooms/{room}` and its `/prequeue`,
//! a place ticket's poll, and `POST /v1/passes:heartbeat` and `:leave`.
//!
//! A place is one person's: joining, heartbeats and leaving take a subject token of that
//! subject. PostgreSQL alone admits (see `sluice_store::rooms`): a waiting place's poll is
//! answered from the gateway's memory of its room (`crate::rooms::board`), never ahead of what
//! PostgreSQL committed, and everything else about a place is read from PostgreSQL; a pass is
//! signed here, on the way out, for the times the database committed, so it never claims more
//! than the place holds.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hyper::{HeaderMap, StatusCode};
use serde::Serialize;
use sluice_store::outbox::rfc3339;
use sluice_store::pass_keys::{self, PassClaims, PassKey};
use sluice_store::rooms::fair_order::{self, RoomView};
use sluice_store::rooms::heartbeats::HeartbeatRequest;
use sluice_store::rooms::join::{JoinRequest, Joined};
use sluice_store::rooms::leaves::LeaveRequest;
use sluice_store::rooms::places::{self, PassChange};
use sluice_store::rooms::{Place, PlaceState, RoomRefusal};
use uuid::Uuid;

use super::answers::to_data;
use super::{Handled, check_declared_code, pages, require_json};
use crate::http::error::{ApiError, ErrorCode};
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::identity::auth::{Caller, now_unix};
use crate::identity::ticket::{PlaceClaims, Seat};
use crate::polls::poll_policy;
use crate::rooms::board::Look;
use crate::rooms::poll_policy::{Standing, place_poll_after_ms};
use crate::state::Gateway;
use sluice_store::rooms::board::Front;

/// A place's ticket lives this long after the later of its issue and the room's start: long
/// enough for any wait a room can have, and it reads nothing but that one place.
const PLACE_TICKET_SECONDS: i64 = 2 * 86_400;

/// The name of the pre-queue's order function, as `GET /v1/rooms/{room}` states it.
const ORDER_FUNCTION: &str = "sha256(seed || join_id)";

/// A room code as declarations allow it; anything else cannot exist.
pub fn check_room_code(code: &str) -> Result<(), ApiError> {
    check_declared_code("room", code)
}

/// A place as every answer about it shows it (`GET /v1/tickets/{ticket}` and the join).
#[derive(Debug, Serialize)]
struct PlaceAnswer {
    join_id: Uuid,
    room: String,
    status: PlaceState,
    prequeue: bool,
    queue: Option<QueuePosition>,
    opens_at: Option<String>,
    eta_seconds: Option<u64>,
    /// None once the place is admitted (heartbeat instead) or ended.
    poll_after_ms: Option<u64>,
    /// While admitted: the pass and when it ends.
    pass: Option<String>,
    pass_expires_at: Option<String>,
    /// While admitted and the room requires heartbeats: when to send the next.
    heartbeat_after_ms: Option<u64>,
    joined_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deduplicated: Option<bool>,
}

#[derive(Debug, Serialize)]
struct QueuePosition {
    position: u64,
    observed_at: String,
}

/// `POST /v1/rooms/{room}:join`: `202` with a new place, `200` with the subject's live one or
/// the one its `Idempotency-Key` made.
pub async fn join(
    gateway: &Gateway,
    caller: &Caller,
    room: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    let subject = caller.subject().ok_or_else(|| {
        ApiError::permission_denied("joining a room needs a subject token: a place is one person's")
    })?;
    let join_key = super::optional_idempotency_key(headers)?;
    let mut proof = None;
    if !body.is_empty() {
        require_json(headers)?;
        let mut reader = ObjectReader::new(parse_object(body)?, "");
        proof = reader.optional_object("proof_of_work")?;
        reader.finish()?;
    }
    let challenge_id =
        super::proof_of_work::spent_challenge(gateway, caller, subject, room, proof).await?;
    let joined = gateway
        .room_joins
        .submit(JoinRequest {
            namespace_id: caller.namespace_id,
            room: room.to_string(),
            subject: subject.to_string(),
            challenge_id,
            join_key,
        })
        .await?;
    let (status, place, deduplicated) = match joined {
        Ok(Joined::New(place)) => (StatusCode::ACCEPTED, place, false),
        Ok(Joined::Existing(place)) => (StatusCode::OK, place, true),
        Err(refusal) => return Err(refused(room, refusal)),
    };
    let mut answer = place_answer(gateway, &place, Duration::ZERO).await?;
    answer.ticket = Some(place_ticket(gateway, &place));
    answer.deduplicated = Some(deduplicated);
    Ok((status, to_data(&answer)?))
}

/// `GET /v1/tickets/{ticket}` for a place's ticket, and its `Cache-Control`.
///
/// A waiting or left place whose ticket states its seat is answered from memory
/// ([`crate::rooms::board`]); one the admission front reached reads PostgreSQL (its pass is
/// there); one memory cannot place reads it within the fallback budget. A ticket without a
/// seat (minted before seats) reads PostgreSQL.
pub async fn poll(gateway: &Gateway, claims: &PlaceClaims) -> Handled {
    if let Some(seat) = &claims.seat {
        let look = gateway
            .room_boards
            .look(&gateway.pg, claims.namespace_id, claims.place_id, seat)
            .await?;
        let from_memory = match look {
            Look::Waiting {
                position,
                front,
                age,
            } => Some((
                remembered(claims, seat, PlaceState::Waiting, position, &front),
                age,
            )),
            Look::Left { front } => Some((
                remembered(claims, seat, PlaceState::Left, None, &front),
                Duration::ZERO,
            )),
            Look::AtItsTurn => None,
            Look::Unknown => {
                let _permit = gateway.fallback_permit()?;
                return read_place(gateway, claims).await;
            }
        };
        if let Some((place, age)) = from_memory {
            sluice_metrics::ticket_poll("memory");
            let answer = place_answer(gateway, &place, age).await?;
            return Ok((StatusCode::OK, to_data(&answer)?));
        }
    }
    read_place(gateway, claims).await
}

/// A place's poll answered from PostgreSQL.
async fn read_place(gateway: &Gateway, claims: &PlaceClaims) -> Handled {
    sluice_metrics::ticket_poll("postgres");
    let place = places::read(&gateway.pg, claims.namespace_id, claims.place_id)
        .await?
        .ok_or_else(|| ApiError::not_found("the place no longer exists"))?;
    let answer = place_answer(gateway, &place, Duration::ZERO).await?;
    Ok((StatusCode::OK, to_data(&answer)?))
}

/// A waiting or left place as memory knows it. Its subject is not needed: neither answer
/// carries a pass.
fn remembered(
    claims: &PlaceClaims,
    seat: &Seat,
    state: PlaceState,
    position: Option<u64>,
    front: &Front,
) -> Place {
    Place {
        id: claims.place_id,
        namespace_id: claims.namespace_id,
        room: seat.room.clone(),
        subject: String::new(),
        state,
        prequeue: seat.prequeue,
        ord: (seat.ord > 0).then_some(seat.ord),
        joined_at: DateTime::from_timestamp_millis(seat.joined_at_ms).unwrap_or_default(),
        renewed_at: None,
        pass_until: None,
        position,
        opens_at: front.opens_at,
        pace: front.pace,
        crowd: front.crowd,
        observed_at: front.observed_at,
    }
}

/// What a cache may keep of a place poll: an ended place never changes again.
pub fn cache_control(data: &serde_json::Value) -> &'static str {
    match data["status"].as_str() {
        Some("left" | "expired") => "private, max-age=3600, immutable",
        _ => "no-store",
    }
}

/// `GET /v1/rooms/{room}`: the subject token of anyone in the namespace, or `status:read`.
pub async fn read(gateway: &Gateway, caller: &Caller, room: &str) -> Handled {
    require_reader(caller)?;
    let view = fair_order::view(&gateway.pg, caller.namespace_id, room)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no room {room:?}")))?;
    Ok((StatusCode::OK, to_data(&RoomAnswer::of(&view))?))
}

/// Join ids per page of `GET /v1/rooms/{room}/prequeue` at most (and by default): about 380 KB
/// of JSON, so a pre-queue of 100,000 is ten requests.
pub const PREQUEUE_PAGE: i64 = 10_000;

/// `GET /v1/rooms/{room}/prequeue`: the pre-queue's join ids sorted by id, a page at a time
/// (`cursor`, `limit`); `complete` once the pre-queue was drawn (the draw takes the room's lock,
/// so no pre-queue join commits after it, and pages read from then on make the whole set).
pub async fn prequeue(
    gateway: &Gateway,
    caller: &Caller,
    room: &str,
    query: &[(String, String)],
) -> Handled {
    let limit = pages::limit(query, PREQUEUE_PAGE, PREQUEUE_PAGE)?;
    let after = pages::cursor(query)?;
    require_reader(caller)?;
    let view = fair_order::view(&gateway.pg, caller.namespace_id, room)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no room {room:?}")))?;
    let mut ids =
        fair_order::prequeue_ids(&gateway.pg, caller.namespace_id, room, after, limit + 1).await?;
    let more = ids.len() as i64 > limit;
    ids.truncate(limit as usize);
    let next_cursor = if more {
        ids.last().copied().map(pages::encode)
    } else {
        None
    };
    Ok((
        StatusCode::OK,
        serde_json::json!({
            "room": view.code,
            "complete": view.drawn_at.is_some(),
            "total": view.prequeue,
            "join_ids": ids,
            "next_cursor": next_cursor,
        }),
    ))
}

fn require_reader(caller: &Caller) -> Result<(), ApiError> {
    if caller.subject().is_some() {
        return Ok(());
    }
    caller.require_scope("status:read")
}

/// `POST /v1/passes:heartbeat` with `{"pass"}`: extends the live pass, answers the new one.
pub async fn heartbeat(
    gateway: &Gateway,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    let (subject, mut reader) = holder_body(caller, headers, body)?;
    let pass = reader.required_string("pass")?;
    reader.finish()?;
    let claims = read_pass(gateway, caller, subject, &pass).await?;
    let change = gateway
        .pass_heartbeats
        .submit(HeartbeatRequest {
            namespace_id: caller.namespace_id,
            id: claims.jti,
            subject: subject.to_string(),
        })
        .await?
        .ok_or_else(|| ApiError::not_found("no such place"))?;
    let (place, extended) = outcome(change)?;
    let mut answer = to_data(&place_answer(gateway, &place, Duration::ZERO).await?)?;
    answer["extended"] = extended.into();
    Ok((StatusCode::OK, answer))
}

/// `POST /v1/passes:leave` with `{"pass"}` (admitted) or `{"ticket"}` (still waiting): the
/// place ends at once; an admitted one's slot goes to the next person once its last pass can
/// no longer be accepted (`exp` plus a second). Leaving an ended place changes nothing.
pub async fn leave(
    gateway: &Gateway,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    let (subject, mut reader) = holder_body(caller, headers, body)?;
    let pass = reader.optional_string("pass")?;
    let ticket = reader.optional_string("ticket")?;
    reader.finish()?;
    let place_id = match (pass, ticket) {
        (Some(pass), None) => read_pass(gateway, caller, subject, &pass).await?.jti,
        (None, Some(ticket)) => {
            let crate::identity::ticket::Ticket::Place(claims) =
                super::tickets::verify(gateway, &ticket)?
            else {
                return Err(ApiError::invalid(
                    "ticket",
                    "is a command's ticket, not a place's",
                ));
            };
            if claims.namespace_id != caller.namespace_id {
                return Err(ApiError::permission_denied(
                    "the ticket is of another namespace",
                ));
            }
            claims.place_id
        }
        _ => {
            return Err(ApiError::invalid(
                "pass",
                "give exactly one of pass (an admitted place) and ticket (a waiting one)",
            ));
        }
    };
    let change = gateway
        .place_leaves
        .submit(LeaveRequest {
            namespace_id: caller.namespace_id,
            id: place_id,
            subject: subject.to_string(),
        })
        .await?
        .ok_or_else(|| ApiError::not_found("no such place"))?;
    let (place, changed) = outcome(change)?;
    if changed {
        gateway
            .room_boards
            .left(caller.namespace_id, &place.room, place.id)
            .await;
    }
    Ok((
        StatusCode::OK,
        serde_json::json!({
            "join_id": place.id,
            "room": place.room,
            "status": place.state,
            "changed": changed,
        }),
    ))
}

/// The holder's subject (a pass is its holder's) and the JSON body to read.
fn holder_body<'a>(
    caller: &'a Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(&'a str, ObjectReader), ApiError> {
    let subject = caller.subject().ok_or_else(|| {
        ApiError::permission_denied("a pass is its holder's: this needs the holder's subject token")
    })?;
    require_json(headers)?;
    Ok((subject, ObjectReader::new(parse_object(body)?, "")))
}

/// The place after a heartbeat or a leave, and whether it changed; an ended place is `409`.
fn outcome(change: PassChange) -> Result<(Place, bool), ApiError> {
    match change {
        PassChange::Changed(place) => Ok((place, true)),
        PassChange::Unchanged(place) => Ok((place, false)),
        PassChange::Ended(state) => Err(ended(state)),
        PassChange::NotTheHolders => Err(ApiError::permission_denied(
            "the place is another subject's: only its holder may change it",
        )),
    }
}

fn ended(state: PlaceState) -> ApiError {
    ApiError::new(
        ErrorCode::StateConflict,
        format!(
            "the pass has ended ({}); join the room again",
            state.as_str()
        ),
    )
    .with_detail("state", state.as_str())
}

/// A pass handed back: signed by a published key (the set is read again once for a key id
/// this gateway has not seen), of this namespace and of the caller's subject.
async fn read_pass(
    gateway: &Gateway,
    caller: &Caller,
    subject: &str,
    pass: &str,
) -> Result<PassClaims, ApiError> {
    let mut keys = gateway.pass_keys(false).await?;
    if let Some(kid) = pass_keys::pass_kid(pass)
        && !keys.iter().any(|key| key.kid == kid)
    {
        keys = gateway.pass_keys(true).await?;
    }
    let claims = pass_keys::verify(pass, &keys)
        .map_err(|error| ApiError::unauthenticated(format!("the pass is not valid: {error}")))?;
    if claims.namespace != caller.namespace_id.to_string() {
        return Err(ApiError::permission_denied(
            "the pass is of another namespace",
        ));
    }
    if claims.sub != subject {
        return Err(ApiError::permission_denied("the pass is another subject's"));
    }
    Ok(claims)
}

fn refused(room: &str, refusal: RoomRefusal) -> ApiError {
    match refusal {
        RoomRefusal::NoRoom => ApiError::not_found(format!("no room {room:?}")),
        RoomRefusal::NotOpenYet { prequeue_opens_at } => ApiError::new(
            ErrorCode::StateConflict,
            format!(
                "the room's pre-queue opens at {}",
                rfc3339(prequeue_opens_at)
            ),
        )
        .with_detail("prequeue_opens_at", rfc3339(prequeue_opens_at)),
        RoomRefusal::Paused => ApiError::new(
            ErrorCode::IntakePaused,
            "an operator paused intake for this namespace; joins resume when it is resumed",
        ),
        RoomRefusal::ChallengeUsed => super::proof_of_work::challenge_used(),
    }
}

fn place_ticket(gateway: &Gateway, place: &Place) -> String {
    let from = place
        .opens_at
        .map_or(now_unix(), |at| at.timestamp().max(now_unix()));
    gateway.tickets.sign_place(&PlaceClaims {
        namespace_id: place.namespace_id,
        place_id: place.id,
        expires_at_unix: from + PLACE_TICKET_SECONDS,
        seat: Some(Seat {
            room: place.room.clone(),
            ord: place.ord.unwrap_or(0),
            joined_at_ms: place.joined_at.timestamp_millis(),
            prequeue: place.prequeue,
        }),
    })
}

/// What a poll, a join, a heartbeat or a leave answers about `place`, read `age` ago.
async fn place_answer(
    gateway: &Gateway,
    place: &Place,
    age: Duration,
) -> Result<PlaceAnswer, ApiError> {
    let rate = place
        .pace
        .admit_per_minute
        .map(|per_minute| f64::from(per_minute) / 60.0);
    let until_open = place
        .opens_at
        .and_then(|at| (at - place.observed_at).to_std().ok())
        .filter(|until| !until.is_zero());
    let waiting = place.state == PlaceState::Waiting;
    let eta_seconds = if !waiting {
        None
    } else if place.position.is_some() {
        poll_policy::eta_seconds(place.position, rate)
    } else {
        // Not drawn yet: everyone in the pre-queue is at the start.
        until_open.map(|until| until.as_secs())
    };
    let standing = Standing {
        position: place.position,
        until_open,
        age,
        pace: place.pace,
        crowd: place.crowd,
    };
    let poll_after_ms = waiting.then(|| place_poll_after_ms(&standing, rand::random::<f64>()));
    let (pass, pass_expires_at, heartbeat_after_ms) = match places::pass_times(place) {
        Some((issued, until)) => (
            Some(sign_pass(gateway, place, issued, until).await?),
            Some(rfc3339(until)),
            place
                .pace
                .heartbeat_seconds
                .map(|seconds| u64::try_from(seconds).unwrap_or(0) * 1000 / 3),
        ),
        None => (None, None, None),
    };
    Ok(PlaceAnswer {
        join_id: place.id,
        room: place.room.clone(),
        status: place.state,
        prequeue: place.prequeue,
        queue: place.position.map(|position| QueuePosition {
            position,
            observed_at: rfc3339(place.observed_at),
        }),
        opens_at: place.opens_at.map(rfc3339),
        eta_seconds,
        poll_after_ms,
        pass,
        pass_expires_at,
        heartbeat_after_ms,
        joined_at: rfc3339(place.joined_at),
        ticket: None,
        deduplicated: None,
    })
}

/// The pass of an admitted place: `iat` and `exp` are the times PostgreSQL committed.
async fn sign_pass(
    gateway: &Gateway,
    place: &Place,
    issued: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<String, ApiError> {
    let keys = gateway.pass_keys(false).await?;
    let key: &PassKey = match keys.iter().find(|key| key.retired_at.is_none()) {
        Some(key) => key,
        None => keys
            .first()
            .ok_or_else(|| ApiError::unavailable("no pass key is live; try again"))?,
    };
    let claims = PassClaims {
        sub: place.subject.clone(),
        namespace: place.namespace_id.to_string(),
        room: place.room.clone(),
        jti: place.id,
        iat: issued.timestamp(),
        exp: until.timestamp(),
    };
    Ok(key.sign(&claims.to_json()))
}

/// `GET /v1/rooms/{room}`.
#[derive(Debug, Serialize)]
struct RoomAnswer<'a> {
    room: &'a str,
    max_active: Option<i32>,
    admit_per_minute: Option<i32>,
    pass_seconds: i32,
    heartbeat_seconds: Option<i32>,
    opens_at: Option<String>,
    prequeue_opens_at: Option<String>,
    shuffle_prequeue: bool,
    order: Option<&'static str>,
    seed_sha256: Option<&'a str>,
    seed: Option<&'a str>,
    drawn_at: Option<String>,
    waiting: i64,
    active: i64,
    prequeue_joins: i64,
    admitted_total: i64,
    left_total: i64,
    expired_total: i64,
    observed_at: String,
}

impl<'a> RoomAnswer<'a> {
    fn of(view: &'a RoomView) -> Self {
        Self {
            room: &view.code,
            max_active: view.max_active,
            admit_per_minute: view.admit_per_minute,
            pass_seconds: view.pass_seconds,
            heartbeat_seconds: view.heartbeat_seconds,
            opens_at: view.opens_at.map(rfc3339),
            prequeue_opens_at: view.prequeue_opens_at.map(rfc3339),
            shuffle_prequeue: view.shuffle_prequeue,
            order: (view.opens_at.is_some() && view.shuffle_prequeue).then_some(ORDER_FUNCTION),
            seed_sha256: view.seed_sha256.as_deref(),
            seed: view.seed.as_deref(),
            drawn_at: view.drawn_at.map(rfc3339),
            waiting: view.waiting,
            active: view.active,
            prequeue_joins: view.prequeue,
            admitted_total: view.admitted_total,
            left_total: view.left_total,
            expired_total: view.expired_total,
            observed_at: rfc3339(view.observed_at),
        }
    }
}
