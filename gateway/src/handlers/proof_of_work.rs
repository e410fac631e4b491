//! Proof of work at a room's door: `POST /v1/rooms/{room}:challenge`, and the check a join
//! makes of the solution it carries (see `crate::rooms::work_challenge` for the puzzle).
//!
//! The challenge states its bits, signed, so a change of difficulty (adaptive rooms follow the
//! arrival rate) never fails a challenge already being solved. Verification is one HMAC and
//! one SHA-256, done before the join touches PostgreSQL, so a flood of bad solutions costs the
//! database nothing; the challenge's id is spent in the join's own transaction.

use hyper::{HeaderMap, StatusCode};
use serde::Serialize;
use serde_json::{Map, Value};
use sluice_durable::declaration::{ProofOfWork, RoomDecl};
use sluice_store::outbox::rfc3339;
use uuid::Uuid;

use super::answers::to_data;
use super::{Handled, require_json};
use crate::http::error::ApiError;
use crate::http::strict_json::{ObjectReader, parse_object};
use crate::identity::auth::{Caller, now_unix};
use crate::rooms::work_challenge::{self, ALGORITHM, Holder};
use crate::state::Gateway;

/// The answer of `POST /v1/rooms/{room}:challenge`.
#[derive(Debug, Serialize)]
struct ChallengeAnswer<'a> {
    room: &'a str,
    /// Whether a join must carry a solution; when false the other fields are null (or 0).
    required: bool,
    challenge: Option<String>,
    bits: u8,
    algorithm: &'static str,
    expires_at: Option<String>,
    /// The arrival rate the bits were chosen for (adaptive rooms; null otherwise).
    joins_per_second: Option<f64>,
}

/// `POST /v1/rooms/{room}:challenge`: a challenge for the caller's subject, with the bits the
/// room asks for now.
pub async fn challenge(
    gateway: &Gateway,
    caller: &Caller,
    room: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Handled {
    let subject = caller.subject().ok_or_else(|| {
        ApiError::permission_denied("a challenge is one person's: this needs a subject token")
    })?;
    if !body.is_empty() {
        require_json(headers)?;
        ObjectReader::new(parse_object(body)?, "").finish()?;
    }
    let decl = declared_room(gateway, caller, room).await?;
    let (bits, rate) = match decl.proof_of_work {
        ProofOfWork::Off => {
            let answer = ChallengeAnswer {
                room,
                required: false,
                challenge: None,
                bits: 0,
                algorithm: ALGORITHM,
                expires_at: None,
                joins_per_second: None,
            };
            return Ok((StatusCode::OK, to_data(&answer)?));
        }
        ProofOfWork::Fixed { bits } => (bits, None),
        work @ ProofOfWork::Adaptive { .. } => {
            let rate = gateway
                .arrivals
                .joins_per_second(&gateway.pg, caller.namespace_id, room)
                .await?;
            (work.bits_at(rate), Some((rate * 100.0).round() / 100.0))
        }
    };
    let holder = Holder {
        namespace_id: caller.namespace_id,
        room,
        subject,
    };
    let issued = work_challenge::issue(&gateway.tickets, holder, bits, now_unix());
    let expires_at = chrono::DateTime::from_timestamp(issued.expires_at_unix, 0).map(rfc3339);
    let answer = ChallengeAnswer {
        room,
        required: true,
        challenge: Some(issued.text),
        bits,
        algorithm: ALGORITHM,
        expires_at,
        joins_per_second: rate,
    };
    Ok((StatusCode::OK, to_data(&answer)?))
}

/// The challenge id a join spends: `None` when the room asks for no work (a solution sent
/// anyway is ignored), else the id of the valid solution in the join's `proof_of_work`.
pub async fn spent_challenge(
    gateway: &Gateway,
    caller: &Caller,
    subject: &str,
    room: &str,
    proof: Option<Map<String, Value>>,
) -> Result<Option<Uuid>, ApiError> {
    let decl = declared_room(gateway, caller, room).await?;
    if decl.proof_of_work == ProofOfWork::Off {
        return Ok(None);
    }
    let Some(proof) = proof else {
        // The least a challenge of this room can ask (adaptive rooms ask more under load).
        let bits = decl.proof_of_work.bits_at(0.0);
        return Err(ApiError::permission_denied(format!(
            "room {room:?} asks for proof of work: solve a challenge from \
             POST /v1/rooms/{room}:challenge and send it as proof_of_work"
        ))
        .with_detail("reason", "proof_of_work_required")
        .with_detail("min_bits", bits));
    };
    let mut reader = ObjectReader::new(proof, "proof_of_work");
    let challenge = reader.required_string("challenge")?;
    let nonce = reader.required_string("nonce")?;
    reader.finish()?;
    let holder = Holder {
        namespace_id: caller.namespace_id,
        room,
        subject,
    };
    let (id, _bits) =
        work_challenge::verify(&gateway.tickets, holder, &challenge, &nonce, now_unix()).map_err(
            |error| {
                ApiError::permission_denied(error.to_string()).with_detail("reason", error.reason())
            },
        )?;
    Ok(Some(id))
}

/// The room as the namespace's declaration has it; a room the declaration does not list takes
/// no joins, so it has no door either.
async fn declared_room(
    gateway: &Gateway,
    caller: &Caller,
    room: &str,
) -> Result<RoomDecl, ApiError> {
    let namespace = gateway.namespace(caller.namespace_id).await?;
    namespace
        .declaration
        .room(room)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("no room {room:?}")))
}

/// A spent challenge, as a join refuses it.
pub fn challenge_used() -> ApiError {
    ApiError::permission_denied("this challenge was already spent on a place; ask for a new one")
        .with_detail("reason", "challenge_used")
}
