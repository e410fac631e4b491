//! What the room tests share: a stack with rooms, a person's moves, and passes verified as an
//! origin would verify them (`jsonwebtoken` against the published JWK Set, never Sluice's own
//! code).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::support::*;

/// A stack whose declaration is the usual one plus `rooms` (`[[room]]` tables).
pub async fn stack_with_rooms(rooms: &str) -> Stack {
    Stack::with_declaration(&format!("{CLAIM_DECLARATION}\n{rooms}")).await
}

pub async fn join(stack: &Stack, room: &str, subject: &str) -> Reply {
    stack
        .post(
            &format!("/v1/rooms/{room}:join"),
            Some(&stack.subject_token(subject)),
            "",
        )
        .await
}

/// `count` waiting places written straight into `room` (subjects `person-1`…, join keys
/// `key-1`…, queue order = arrival number), past the room's counters, so the admission ticker
/// leaves them alone: a room at the size of a drop for tests of its statements.
pub async fn insert_waiting_places(stack: &Stack, room: &str, count: i64) {
    sqlx::query(
        "INSERT INTO room_places (id, namespace_id, room, subject, seq, prequeue, ord, state,
                                  joined_at, join_key)
         SELECT gen_random_uuid(), $1, $2, 'person-' || i, i, false, i, 'waiting', now(),
                'key-' || i
           FROM generate_series(1, $3) AS i",
    )
    .bind(stack.creds.namespace_id)
    .bind(room)
    .bind(count)
    .execute(&stack.pg)
    .await
    .unwrap_or_else(|e| panic!("{count} places in {room}: {e}"));
}

/// A join sent with `Idempotency-Key: key`.
pub async fn join_keyed(stack: &Stack, room: &str, subject: &str, key: &str) -> Reply {
    stack
        .request_with(
            hyper::Method::POST,
            &format!("/v1/rooms/{room}:join"),
            Some(&stack.subject_token(subject)),
            None,
            &[("idempotency-key", key)],
        )
        .await
}

/// Runs `attempt` until it says done (`Ok` with its value) or `within` has passed (`Err` with
/// the last value), 50 ms apart.
pub async fn until<T, F, Fut>(within: Duration, mut attempt: F) -> Result<T, T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (bool, T)>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (done, value) = attempt().await;
        if done {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(value);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `ticket` until its place's status is `status`, within `within`; that answer.
pub async fn poll_until(stack: &Stack, ticket: &str, status: &str, within: Duration) -> Value {
    until(within, || async move {
        let reply = stack.poll(ticket).await;
        assert_eq!(reply.status, hyper::StatusCode::OK, "{:?}", reply.body);
        (reply.data()["status"] == status, reply.data().clone())
    })
    .await
    .unwrap_or_else(|last| panic!("never {status}: {last}"))
}

pub async fn heartbeat(stack: &Stack, subject: &str, pass: &str) -> Reply {
    stack
        .post(
            "/v1/passes:heartbeat",
            Some(&stack.subject_token(subject)),
            &serde_json::json!({ "pass": pass }).to_string(),
        )
        .await
}

pub async fn leave(stack: &Stack, subject: &str, field: &str, value: &str) -> Reply {
    stack
        .post(
            "/v1/passes:leave",
            Some(&stack.subject_token(subject)),
            &serde_json::json!({ field: value }).to_string(),
        )
        .await
}

/// The published keys, fetched over HTTP as an origin would.
pub async fn key_set(stack: &Stack) -> JwkSet {
    let reply = stack.get("/.well-known/jwks.json", None).await;
    assert_eq!(reply.status, hyper::StatusCode::OK, "{:?}", reply.body);
    serde_json::from_value(reply.body).expect("a JWK Set")
}

/// Verifies `pass` as a protected origin does: the `kid`'s key from `set`, EdDSA only, `exp`
/// with no leeway, for `room`.
pub fn verify_pass(set: &JwkSet, pass: &str, room: &str) -> Result<Value, String> {
    let header = jsonwebtoken::decode_header(pass).map_err(|e| e.to_string())?;
    let jwk = set
        .find(header.kid.as_deref().unwrap_or_default())
        .ok_or("unknown kid")?;
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.leeway = 0;
    validation.set_required_spec_claims(&["exp", "sub", "jti"]);
    let key = DecodingKey::from_jwk(jwk).map_err(|e| e.to_string())?;
    let claims = jsonwebtoken::decode::<Value>(pass, &key, &validation)
        .map_err(|e| e.to_string())?
        .claims;
    if claims["room"] != room {
        return Err(format!("a pass for room {}", claims["room"]));
    }
    Ok(claims)
}

/// A protected origin: accepts a request whose pass verifies ([`verify_pass`]), and counts on
/// its own, sharing nothing with Sluice's bookkeeping. A place counts as live from the first
/// pass of it the origin accepted until the latest `exp` it accepted has passed (whole seconds,
/// as `jsonwebtoken` compares them), whether or not its holder still shows it: a pass handed out
/// cannot be recalled.
pub struct Origin {
    keys: JwkSet,
    room: String,
    state: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    /// Per place (`jti`): the latest `exp` of a pass accepted.
    latest_exp: HashMap<String, i64>,
    /// Per place: the `iat`s of the passes accepted (a place admitted once, with no heartbeat,
    /// has one).
    issued: HashMap<String, BTreeSet<i64>>,
    /// Per subject (`sub`): the places it got in with.
    places_of: HashMap<String, BTreeSet<String>>,
    /// The most places live at once.
    most: usize,
}

impl Origin {
    pub fn new(keys: JwkSet, room: &str) -> Origin {
        Origin {
            keys,
            room: room.to_owned(),
            state: Mutex::default(),
        }
    }

    /// One request with `pass`: its claims when the origin accepts it.
    pub fn serve(&self, pass: &str) -> Result<Value, String> {
        let claims = verify_pass(&self.keys, pass, &self.room)?;
        let jti = claims["jti"].as_str().unwrap_or_default().to_owned();
        let sub = claims["sub"].as_str().unwrap_or_default().to_owned();
        let exp = claims["exp"].as_i64().unwrap_or_default();
        let iat = claims["iat"].as_i64().unwrap_or_default();
        // What `jsonwebtoken` accepts: `exp` not before this whole second.
        let now = sluice_gateway::identity::auth::now_unix();
        let mut seen = self.state.lock().expect("origin state");
        let latest = seen.latest_exp.entry(jti.clone()).or_insert(exp);
        *latest = (*latest).max(exp);
        seen.issued.entry(jti.clone()).or_default().insert(iat);
        seen.places_of.entry(sub).or_default().insert(jti);
        let live = seen.latest_exp.values().filter(|exp| **exp >= now).count();
        seen.most = seen.most.max(live);
        Ok(claims)
    }

    /// The most places live at once.
    pub fn most(&self) -> usize {
        self.state.lock().expect("origin state").most
    }

    /// The places the origin let in.
    pub fn places(&self) -> usize {
        self.state.lock().expect("origin state").latest_exp.len()
    }

    /// Per place, the `iat`s of its accepted passes.
    pub fn issued(&self) -> HashMap<String, BTreeSet<i64>> {
        self.state.lock().expect("origin state").issued.clone()
    }

    /// Per subject, the places it got in with.
    pub fn places_of(&self) -> HashMap<String, BTreeSet<String>> {
        self.state.lock().expect("origin state").places_of.clone()
    }
}
