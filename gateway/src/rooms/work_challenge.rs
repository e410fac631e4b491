//! Proof of work at a room's door: hashcash-style challenges a join must solve.
//!
//! A challenge is stateless and signed with the ticket keys, so any gateway verifies any
//! gateway's challenge with one HMAC and one SHA-256 (microseconds), and solving it costs the
//! joiner about 2^bits SHA-256 evaluations. It is bound to the namespace, the room and the
//! subject, so a solution cannot be handed to another person; its random id is recorded with
//! the place it bought (`room_places.challenge_id`, unique), so it buys one place, once.
//!
//! Wire format, base64url without padding:
//! `version(1)=1 | kid_len(1) | kid | namespace_id(16) | challenge_id(16) | issued_at_unix(i64
//! BE) | bits(1) | HMAC-SHA256(32)`, where the MAC covers the domain `sluice-work-v1`, every
//! byte before it, then the room code, a zero byte and the subject.
//!
//! A solution is a nonce of 1 to 20 decimal digits such that SHA-256 of the ASCII text
//! `challenge + ":" + nonce` begins with `bits` zero bits (most significant bit of the first
//! byte first).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use sha2::{Digest, Sha256};
use sluice_durable::ids::NamespaceId;
use uuid::Uuid;

use crate::identity::mac::HmacSha256;
use crate::identity::ticket::TicketKeys;

const DOMAIN: &[u8] = b"sluice-work-v1";
const VERSION: u8 = 1;
const MAC_LEN: usize = 32;
const BODY_LEN: usize = 16 + 16 + 8 + 1;
/// How long a challenge can be solved and used: long enough for the hardest a room may ask
/// (`MAX_WORK_BITS` on a slow phone), short enough that solutions cannot be stockpiled for a
/// drop long in advance.
pub const CHALLENGE_SECONDS: i64 = 600;
/// Gateways' clocks may differ by this much; a challenge issued further in the future is not
/// one of ours.
const CLOCK_SKEW_SECONDS: i64 = 60;
/// Longest challenge text accepted: a 16-character kid gives 2 + 16 + 41 + 32 bytes.
const MAX_CHALLENGE_LEN: usize = 128;
/// Longest nonce: any u64 in decimal.
const MAX_NONCE_LEN: usize = 20;
/// The name of the puzzle, as the challenge answer states it.
pub const ALGORITHM: &str = "sha256-leading-zero-bits";

/// Who a challenge is for, and where: all of it is covered by the MAC.
#[derive(Debug, Clone, Copy)]
pub struct Holder<'a> {
    pub namespace_id: NamespaceId,
    pub room: &'a str,
    pub subject: &'a str,
}

/// A challenge as issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub text: String,
    pub id: Uuid,
    pub bits: u8,
    pub expires_at_unix: i64,
}

/// Why a proof was refused; each has a stable `reason` for the error's details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WorkError {
    #[error("the proof of work's challenge is malformed")]
    Malformed,
    #[error("the nonce must be 1 to 20 decimal digits")]
    BadNonce,
    #[error("the challenge was not issued for this room and subject (or its key was retired)")]
    NotIssued,
    #[error("the challenge has expired; ask for a new one")]
    Expired,
    #[error("the nonce does not solve the challenge")]
    Unsolved,
}

impl WorkError {
    pub fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "challenge_malformed",
            Self::BadNonce => "nonce_malformed",
            Self::NotIssued => "challenge_not_issued",
            Self::Expired => "challenge_expired",
            Self::Unsolved => "proof_of_work_unsolved",
        }
    }
}

/// Issues a challenge of `bits` for `holder` at `now_unix`.
pub fn issue(keys: &TicketKeys, holder: Holder<'_>, bits: u8, now_unix: i64) -> Challenge {
    let id = Uuid::new_v4();
    let Some((kid, mac)) = keys.signer() else {
        // `TicketKeys` is never empty; a challenge no key can verify is refused at the join.
        return Challenge {
            text: String::new(),
            id,
            bits,
            expires_at_unix: now_unix,
        };
    };
    let mut bytes = Vec::with_capacity(2 + kid.len() + BODY_LEN + MAC_LEN);
    bytes.push(VERSION);
    bytes.push(kid.len() as u8);
    bytes.extend_from_slice(kid.as_bytes());
    bytes.extend_from_slice(holder.namespace_id.as_uuid().as_bytes());
    bytes.extend_from_slice(id.as_bytes());
    bytes.extend_from_slice(&now_unix.to_be_bytes());
    bytes.push(bits);
    let tag = tag(mac, &bytes, holder).finalize().into_bytes();
    bytes.extend_from_slice(&tag);
    Challenge {
        text: URL_SAFE_NO_PAD.encode(bytes),
        id,
        bits,
        expires_at_unix: now_unix + CHALLENGE_SECONDS,
    }
}

/// Checks that `nonce` solves `challenge`, issued by a gateway of ours for `holder` and not
/// expired at `now_unix`; returns the challenge's id and bits. Total on any input: lengths are
/// checked before slicing, the MAC comparison is constant-time, and the work is checked last.
pub fn verify(
    keys: &TicketKeys,
    holder: Holder<'_>,
    challenge: &str,
    nonce: &str,
    now_unix: i64,
) -> Result<(Uuid, u8), WorkError> {
    if nonce.is_empty() || nonce.len() > MAX_NONCE_LEN || !nonce.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(WorkError::BadNonce);
    }
    if challenge.is_empty() || challenge.len() > MAX_CHALLENGE_LEN {
        return Err(WorkError::Malformed);
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(challenge)
        .map_err(|_| WorkError::Malformed)?;
    let [VERSION, kid_len, rest @ ..] = bytes.as_slice() else {
        return Err(WorkError::Malformed);
    };
    let kid_len = usize::from(*kid_len);
    if rest.len() != kid_len + BODY_LEN + MAC_LEN {
        return Err(WorkError::Malformed);
    }
    let (kid, body) = rest.split_at(kid_len);
    let mac = keys.verifier(kid).ok_or(WorkError::NotIssued)?;
    let (signed, given) = bytes.split_at(bytes.len() - MAC_LEN);
    tag(mac, signed, holder)
        .verify_slice(given)
        .map_err(|_| WorkError::NotIssued)?;
    let field = |at: usize, len: usize| body.get(at..at + len).ok_or(WorkError::Malformed);
    let namespace = Uuid::from_slice(field(0, 16)?).map_err(|_| WorkError::Malformed)?;
    if namespace != holder.namespace_id.as_uuid() {
        return Err(WorkError::NotIssued);
    }
    let id = Uuid::from_slice(field(16, 16)?).map_err(|_| WorkError::Malformed)?;
    let issued_at = i64::from_be_bytes(field(32, 8)?.try_into().map_err(|_| WorkError::Malformed)?);
    let bits = field(40, 1)?[0];
    if issued_at > now_unix + CLOCK_SKEW_SECONDS {
        return Err(WorkError::NotIssued);
    }
    if now_unix >= issued_at.saturating_add(CHALLENGE_SECONDS) {
        return Err(WorkError::Expired);
    }
    if leading_zero_bits(&work_hash(challenge, nonce)) < u32::from(bits) {
        return Err(WorkError::Unsolved);
    }
    Ok((id, bits))
}

/// The MAC of a challenge's bytes for `holder`, fed in an order that cannot be ambiguous: the
/// fixed-size body, then the room code (which cannot hold a zero byte), a zero byte and the
/// subject.
fn tag(mac: &HmacSha256, bytes: &[u8], holder: Holder<'_>) -> HmacSha256 {
    mac.clone()
        .chain_update(DOMAIN)
        .chain_update(bytes)
        .chain_update(holder.room.as_bytes())
        .chain_update([0u8])
        .chain_update(holder.subject.as_bytes())
}

/// SHA-256 of `challenge:nonce`.
pub fn work_hash(challenge: &str, nonce: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(challenge.as_bytes())
        .chain_update(b":")
        .chain_update(nonce.as_bytes())
        .finalize()
        .into()
}

/// Leading zero bits of `digest`, most significant bit of the first byte first.
pub fn leading_zero_bits(digest: &[u8]) -> u32 {
    let mut bits = 0;
    for byte in digest {
        if *byte == 0 {
            bits += 8;
        } else {
            return bits + byte.leading_zeros();
        }
    }
    bits
}

/// The smallest nonce that solves `challenge` at `bits`: what a client does, here for tests
/// and the load generator's reference.
pub fn solve(challenge: &str, bits: u8) -> String {
    let mut nonce: u64 = 0;
    loop {
        let text = nonce.to_string();
        if leading_zero_bits(&work_hash(challenge, &text)) >= u32::from(bits) {
            return text;
        }
        nonce += 1;
    }
}

#[cfg(test)]
mod tests;
