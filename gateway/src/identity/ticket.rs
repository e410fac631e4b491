//! HMAC-signed tickets: the read capability for one command's status.
//!
//! A ticket lets whoever holds it poll a command without the application's credentials, so it
//! must be unforgeable (HMAC-SHA256), self-describing about which key signed it (keys rotate:
//! the newest signs, older ones keep verifying until retired), short-lived, URL-safe and small.
//!
//! Wire format, base64url without padding:
//! `version(1)=3 | kid_len(1) | kid | application_id(16) | namespace_id(16) | command_id(16) |
//! expires_at_unix(i64 BE) | queue_seq(u64 BE) | queue_tag(u64 BE) | accepted_at_ms(i64 BE) |
//! HMAC-SHA256(32)`, where the MAC covers the fixed prefix `sluice-ticket-v3` followed by every
//! byte before it: at most 2 + 16 + 80 + 32 = 130 bytes, 174 characters.
//!
//! Version 3 adds what lets a gateway answer a waiting command's polls from memory
//! (`crate::polls::waiting_view`): its queue sequence (the score of its queue entry, handed out by
//! `intake.lua`), a 64-bit tag of its queue (the first 8 bytes of SHA-256 of the queue suffix
//! `<ns>:<cmd>:<resource>`, so the ticket stays small whatever the resource key's length) and
//! its acceptance time (the `updated_at` a waiting command shows). A ticket minted where the
//! sequence is not known (replays, reads), or while `gateway.polls_from_memory` is off, has no
//! queue claim: always answered from Redis.
//!
//! Version 4 is a different capability: reading one waiting-room place
//! (`version(1)=4 | kid_len(1) | kid | namespace_id(16) | place_id(16) | expires_at_unix(i64 BE)
//! | HMAC-SHA256(32)`, domain `sluice-ticket-room-v1`), so a place ticket can never verify as a
//! command's, nor a command ticket as a place's.
//!
//! Version 5 is a place's ticket that also states where the place waits, so its polls can be
//! answered from the gateway's memory (`crate::rooms::board`): `version(1)=5 | kid_len(1) | kid |
//! namespace_id(16) | place_id(16) | expires_at_unix(i64 BE) | ord(i64 BE) | joined_at_ms(i64
//! BE) | prequeue(1) | room_len(1) | room | HMAC-SHA256(32)`, domain `sluice-ticket-room-v2`;
//! `ord` is the place's queue order, 0 for a pre-queue place not drawn yet. Version 4 tickets still verify,
//! without a seat: their polls read PostgreSQL.
//!
//! Version 2 is version 3 without those three fields (domain `sluice-ticket-v2`): what a ticket
//! without a queue claim is still signed as (byte for byte what gateways before version 3 sign
//! and verify), and it verifies with no queue claim, so an upgrade breaks no browser that is
//! polling.
//!
//! Version 1 also carried the projection's generation (u64 BE, before the expiry). Nothing ever
//! checked it, and nothing could: a command id is never reused, so a ticket stays right for its
//! command across every rebuild. Version 2 drops it; version 1 tickets still verify (with their
//! own domain) until they expire, so an upgrade breaks no browser that is polling.

use sluice_durable::ids::{ApplicationId, CommandId, NamespaceId};
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use uuid::Uuid;

use crate::identity::mac::{HmacSha256, keyed_mac};

/// Fed into the MAC first so a ticket MAC can never be confused with any other MAC made with
/// the same secret (and so a future format version cannot verify as this one).
const DOMAIN: &[u8] = b"sluice-ticket-v3";
const VERSION: u8 = 3;
/// A waiting-room place's ticket.
const DOMAIN_PLACE: &[u8] = b"sluice-ticket-room-v1";
const VERSION_PLACE: u8 = 4;
const BODY_LEN_PLACE: usize = 2 * 16 + 8;
/// A place's ticket with its seat: the fixed fields, then the room's length and the room.
const DOMAIN_SEATED: &[u8] = b"sluice-ticket-room-v2";
const VERSION_SEATED: u8 = 5;
const FIXED_LEN_SEATED: usize = BODY_LEN_PLACE + 2 * 8 + 1;
/// Room codes are at most 64 characters (as every declared code).
const MAX_ROOM_LEN: usize = 64;
/// The format before the queue claim, still verified.
const DOMAIN_V2: &[u8] = b"sluice-ticket-v2";
const VERSION_V2: u8 = 2;
/// The earlier format, still verified (its generation is read past and ignored).
const DOMAIN_V1: &[u8] = b"sluice-ticket-v1";
const VERSION_V1: u8 = 1;
const MAC_LEN: usize = 32;
const MAX_KID_LEN: usize = 16;
/// The API promises tickets of at most 512 bytes; longer input is refused before decoding.
pub const MAX_TICKET_LEN: usize = 512;
const MIN_SECRET_LEN: usize = 32;
/// Bytes after the kid: three uuids, the expiry and the queue claim (version 2: no queue claim;
/// version 1: a generation before the expiry).
const BODY_LEN_V2: usize = 3 * 16 + 8;
const BODY_LEN: usize = BODY_LEN_V2 + 3 * 8;
const BODY_LEN_V1: usize = BODY_LEN_V2 + 8;

/// What a ticket grants: reading the status of one command of one application/namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketClaims {
    /// Application that submitted the command.
    pub application_id: ApplicationId,
    /// Namespace the command belongs to.
    pub namespace_id: NamespaceId,
    /// The command whose status this ticket may read.
    pub command_id: CommandId,
    /// Unix seconds; the ticket is refused from this instant on.
    pub expires_at_unix: i64,
    /// Where the command waits, when the ticket was minted knowing it (version 3, sequence
    /// above 0); None: its polls are answered from Redis.
    pub queue: Option<QueueClaim>,
}

/// What a waiting-room ticket grants: reading one place of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceClaims {
    pub namespace_id: NamespaceId,
    pub place_id: Uuid,
    /// Unix seconds; the ticket is refused from this instant on.
    pub expires_at_unix: i64,
    /// Where the place waits, when the ticket was minted knowing it (version 5); `None`: its
    /// polls read PostgreSQL.
    pub seat: Option<Seat>,
}

/// Where a place waits, as its ticket states it: what never changes about a waiting place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seat {
    pub room: String,
    /// The place's queue order; 0 for a pre-queue place whose order is not drawn yet.
    pub ord: i64,
    /// When it joined, Unix milliseconds.
    pub joined_at_ms: i64,
    /// Joined before the start: its order comes from the draw.
    pub prequeue: bool,
}

/// Either capability a ticket can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ticket {
    Command(TicketClaims),
    Place(PlaceClaims),
}

impl Ticket {
    pub fn namespace_id(&self) -> NamespaceId {
        match self {
            Self::Command(claims) => claims.namespace_id,
            Self::Place(claims) => claims.namespace_id,
        }
    }
}

/// A waiting command's place as its ticket states it, for answers from memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueClaim {
    /// The command's queue sequence (its queue entry's score), above 0.
    pub seq: u64,
    /// [`queue_tag`] of its queue's suffix.
    pub tag: u64,
    /// When it was accepted, Unix milliseconds (its `updated_at` while it waits).
    pub accepted_at_ms: i64,
}

/// The 64-bit tag of a queue suffix (`<ns>:<cmd>:<resource>`): the first 8 bytes of its
/// SHA-256, big-endian. A ticket names its queue by it; the gateway learns which suffix a tag
/// stands for when it mints a ticket or when Redis answers a poll of a waiting command.
pub fn queue_tag(suffix: &str) -> u64 {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(suffix.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// Why a ticket was refused. Messages are safe for a 401 body: they say nothing about keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("ticket is malformed")]
    Malformed,
    #[error("ticket is not valid")]
    UnknownKey,
    #[error("ticket is not valid")]
    BadSignature,
    #[error("ticket has expired")]
    Expired,
}

/// Why a ticket key configuration was refused. Never includes the secret (nor any part of the
/// entry, since a typo could put the secret where the kid should be).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketKeyError {
    #[error("ticket key spec is empty")]
    Empty,
    /// `position` is 1-based, counting comma-separated entries.
    #[error("ticket key entry {position}: {reason}")]
    InvalidEntry {
        position: usize,
        reason: &'static str,
    },
}

struct TicketKey {
    kid: String,
    /// Keyed once at parse time; cloned per ticket so signing never needs a fallible step.
    mac: HmacSha256,
}

/// The gateway's ticket keys: the first signs, all verify.
pub struct TicketKeys {
    keys: Vec<TicketKey>,
}

impl fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kids: Vec<&str> = self.keys.iter().map(|k| k.kid.as_str()).collect();
        f.debug_struct("TicketKeys")
            .field("kids", &kids)
            .finish_non_exhaustive()
    }
}

fn valid_kid(kid: &[u8]) -> bool {
    (1..=MAX_KID_LEN).contains(&kid.len())
        && kid
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'-')
}

impl TicketKeys {
    /// Parses `"kid:secret,kid:secret"`; the first entry signs, every entry verifies.
    ///
    /// A kid is 1–16 of `[A-Za-z0-9_-]`; a secret is base64url without padding and decodes to
    /// at least 32 bytes. Kids must be distinct so verification is unambiguous.
    pub fn parse(spec: &str) -> Result<Self, TicketKeyError> {
        if spec.trim().is_empty() {
            return Err(TicketKeyError::Empty);
        }
        let mut keys: Vec<TicketKey> = Vec::new();
        for (index, entry) in spec.split(',').enumerate() {
            let position = index + 1;
            let invalid = |reason| TicketKeyError::InvalidEntry { position, reason };
            let (kid, secret) = entry
                .trim()
                .split_once(':')
                .ok_or(invalid("expected kid:secret"))?;
            if !valid_kid(kid.as_bytes()) {
                return Err(invalid("kid must be 1-16 characters of A-Z a-z 0-9 _ -"));
            }
            if keys.iter().any(|k| k.kid == kid) {
                return Err(invalid("duplicate kid"));
            }
            let secret = URL_SAFE_NO_PAD
                .decode(secret)
                .map_err(|_| invalid("secret must be base64url without padding"))?;
            if secret.len() < MIN_SECRET_LEN {
                return Err(invalid("secret must decode to at least 32 bytes"));
            }
            keys.push(TicketKey {
                kid: kid.to_owned(),
                mac: keyed_mac(&secret),
            });
        }
        Ok(Self { keys })
    }

    /// A fresh single-key configuration (kid `k1`, 32 random bytes) and its spec string, for
    /// development setups and for printing by the CLI.
    pub fn generate() -> (String, Self) {
        let secret: [u8; 32] = rand::random();
        let spec = format!("k1:{}", URL_SAFE_NO_PAD.encode(secret));
        let key = TicketKey {
            kid: "k1".to_owned(),
            mac: keyed_mac(&secret),
        };
        (spec, Self { keys: vec![key] })
    }

    /// The newest key's kid and MAC, for other formats signed with the ticket keys; each such
    /// format feeds its own domain into the MAC first, so none verifies as another.
    pub(crate) fn signer(&self) -> Option<(&str, &HmacSha256)> {
        self.keys.first().map(|k| (k.kid.as_str(), &k.mac))
    }

    /// The MAC of the key `kid`, for verifying what [`TicketKeys::signer`] signed.
    pub(crate) fn verifier(&self, kid: &[u8]) -> Option<&HmacSha256> {
        self.keys
            .iter()
            .find(|k| k.kid.as_bytes() == kid)
            .map(|k| &k.mac)
    }

    /// Signs `claims` with the newest key.
    pub fn sign(&self, claims: &TicketClaims) -> String {
        // `parse` and `generate` never build an empty set; the fallback keeps this total.
        let Some(key) = self.keys.first() else {
            return String::new();
        };
        // Without a queue claim the ticket is version 2, byte for byte what gateways before
        // version 3 sign and verify (a rolling upgrade with `polls_from_memory` off mints
        // nothing they refuse).
        let queue = claims.queue.filter(|q| q.seq > 0);
        let (version, domain) = match queue {
            Some(_) => (VERSION, DOMAIN),
            None => (VERSION_V2, DOMAIN_V2),
        };
        let mut bytes = Vec::with_capacity(2 + key.kid.len() + BODY_LEN + MAC_LEN);
        bytes.push(version);
        bytes.push(key.kid.len() as u8);
        bytes.extend_from_slice(key.kid.as_bytes());
        bytes.extend_from_slice(claims.application_id.as_uuid().as_bytes());
        bytes.extend_from_slice(claims.namespace_id.as_uuid().as_bytes());
        bytes.extend_from_slice(claims.command_id.as_uuid().as_bytes());
        bytes.extend_from_slice(&claims.expires_at_unix.to_be_bytes());
        if let Some(q) = queue {
            bytes.extend_from_slice(&q.seq.to_be_bytes());
            bytes.extend_from_slice(&q.tag.to_be_bytes());
            bytes.extend_from_slice(&q.accepted_at_ms.to_be_bytes());
        }
        let tag = key
            .mac
            .clone()
            .chain_update(domain)
            .chain_update(&bytes)
            .finalize();
        bytes.extend_from_slice(&tag.into_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// Signs a waiting-room place's ticket with the newest key.
    /// Version 5 when the claims carry a seat whose room fits, version 4 otherwise.
    pub fn sign_place(&self, claims: &PlaceClaims) -> String {
        let Some(key) = self.keys.first() else {
            return String::new();
        };
        let seat = claims
            .seat
            .as_ref()
            .filter(|seat| (1..=MAX_ROOM_LEN).contains(&seat.room.len()));
        let mut bytes =
            Vec::with_capacity(3 + key.kid.len() + FIXED_LEN_SEATED + MAX_ROOM_LEN + MAC_LEN);
        let (version, domain) = match seat {
            Some(_) => (VERSION_SEATED, DOMAIN_SEATED),
            None => (VERSION_PLACE, DOMAIN_PLACE),
        };
        bytes.push(version);
        bytes.push(key.kid.len() as u8);
        bytes.extend_from_slice(key.kid.as_bytes());
        bytes.extend_from_slice(claims.namespace_id.as_uuid().as_bytes());
        bytes.extend_from_slice(claims.place_id.as_bytes());
        bytes.extend_from_slice(&claims.expires_at_unix.to_be_bytes());
        if let Some(seat) = seat {
            bytes.extend_from_slice(&seat.ord.to_be_bytes());
            bytes.extend_from_slice(&seat.joined_at_ms.to_be_bytes());
            bytes.push(u8::from(seat.prequeue));
            bytes.push(seat.room.len() as u8);
            bytes.extend_from_slice(seat.room.as_bytes());
        }
        let tag = key
            .mac
            .clone()
            .chain_update(domain)
            .chain_update(&bytes)
            .finalize();
        bytes.extend_from_slice(&tag.into_bytes());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// A command's ticket's claims; a place's ticket is refused as malformed here.
    pub fn verify(&self, ticket: &str, now_unix: i64) -> Result<TicketClaims, TicketError> {
        match self.verify_any(ticket, now_unix)? {
            Ticket::Command(claims) => Ok(claims),
            Ticket::Place(_) => Err(TicketError::Malformed),
        }
    }

    /// Checks a ticket and returns its claims. Total on any input: every length is checked
    /// before slicing, the MAC comparison is constant-time, and expiry is checked only once
    /// the claims are known to be authentic.
    pub fn verify_any(&self, ticket: &str, now_unix: i64) -> Result<Ticket, TicketError> {
        if ticket.is_empty() || ticket.len() > MAX_TICKET_LEN {
            return Err(TicketError::Malformed);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(ticket)
            .map_err(|_| TicketError::Malformed)?;
        let [version, kid_len, rest @ ..] = bytes.as_slice() else {
            return Err(TicketError::Malformed);
        };
        let kid_len = usize::from(*kid_len);
        let (domain, body_len, expiry_at) = match *version {
            VERSION => (DOMAIN, BODY_LEN, BODY_LEN_V2 - 8),
            VERSION_V2 => (DOMAIN_V2, BODY_LEN_V2, BODY_LEN_V2 - 8),
            VERSION_V1 => (DOMAIN_V1, BODY_LEN_V1, BODY_LEN_V1 - 8),
            VERSION_PLACE => (DOMAIN_PLACE, BODY_LEN_PLACE, BODY_LEN_PLACE - 8),
            VERSION_SEATED => {
                // The room's length sits after the fixed fields; a short ticket has none.
                let room_len = rest
                    .get(kid_len + FIXED_LEN_SEATED)
                    .map(|len| usize::from(*len))
                    .filter(|len| (1..=MAX_ROOM_LEN).contains(len))
                    .ok_or(TicketError::Malformed)?;
                (
                    DOMAIN_SEATED,
                    FIXED_LEN_SEATED + 1 + room_len,
                    BODY_LEN_PLACE - 8,
                )
            }
            _ => return Err(TicketError::Malformed),
        };
        if rest.len() != kid_len + body_len + MAC_LEN {
            return Err(TicketError::Malformed);
        }
        let (kid, rest) = rest.split_at(kid_len);
        if !valid_kid(kid) {
            return Err(TicketError::Malformed);
        }
        let key = self
            .keys
            .iter()
            .find(|k| k.kid.as_bytes() == kid)
            .ok_or(TicketError::UnknownKey)?;
        let (signed, tag) = bytes.split_at(bytes.len() - MAC_LEN);
        key.mac
            .clone()
            .chain_update(domain)
            .chain_update(signed)
            .verify_slice(tag)
            .map_err(|_| TicketError::BadSignature)?;
        let (ticket, expires_at_unix) = if matches!(*version, VERSION_PLACE | VERSION_SEATED) {
            let claims = decode_place(
                rest.get(..body_len).unwrap_or_default(),
                *version == VERSION_SEATED,
            )
            .ok_or(TicketError::Malformed)?;
            let expires_at_unix = claims.expires_at_unix;
            (Ticket::Place(claims), expires_at_unix)
        } else {
            let claims =
                decode_body(rest, expiry_at, *version == VERSION).ok_or(TicketError::Malformed)?;
            (Ticket::Command(claims), claims.expires_at_unix)
        };
        if now_unix >= expires_at_unix {
            return Err(TicketError::Expired);
        }
        Ok(ticket)
    }
}

/// Reads a place ticket's fields after the kid, with its seat when `seated` (version 5);
/// `None` if the slice is too short or the room is not text.
fn decode_place(body: &[u8], seated: bool) -> Option<PlaceClaims> {
    let word = |at: usize| -> Option<i64> {
        Some(i64::from_be_bytes(body.get(at..at + 8)?.try_into().ok()?))
    };
    let seat = if seated {
        let room = body.get(FIXED_LEN_SEATED + 1..)?;
        Some(Seat {
            room: std::str::from_utf8(room).ok()?.to_string(),
            ord: word(BODY_LEN_PLACE)?,
            joined_at_ms: word(BODY_LEN_PLACE + 8)?,
            prequeue: match body.get(BODY_LEN_PLACE + 16)? {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    } else {
        None
    };
    Some(PlaceClaims {
        namespace_id: Uuid::from_bytes(body.get(..16)?.try_into().ok()?).into(),
        place_id: Uuid::from_bytes(body.get(16..32)?.try_into().ok()?),
        expires_at_unix: word(32)?,
        seat,
    })
}

/// Reads the fixed-size fields after the kid, the expiry at `expiry_at` and, when `queued`
/// (version 3), the queue claim after it; `None` only if the slice is too short.
fn decode_body(body: &[u8], expiry_at: usize, queued: bool) -> Option<TicketClaims> {
    let uuid = |at: usize| Some(Uuid::from_bytes(body.get(at..at + 16)?.try_into().ok()?));
    let word = |at: usize| -> Option<[u8; 8]> { body.get(at..at + 8)?.try_into().ok() };
    let queue = if queued {
        let seq = u64::from_be_bytes(word(expiry_at + 8)?);
        let claim = QueueClaim {
            seq,
            tag: u64::from_be_bytes(word(expiry_at + 16)?),
            accepted_at_ms: i64::from_be_bytes(word(expiry_at + 24)?),
        };
        (seq > 0).then_some(claim)
    } else {
        None
    };
    Some(TicketClaims {
        application_id: uuid(0)?.into(),
        namespace_id: uuid(16)?.into(),
        command_id: uuid(32)?.into(),
        expires_at_unix: i64::from_be_bytes(word(expiry_at)?),
        queue,
    })
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
