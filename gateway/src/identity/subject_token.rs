//! Browser subject tokens: HS256 JWTs minted by an application's backend.
//!
//! Browsers cannot hold application credentials, so the application's backend vouches for an
//! end user ("subject") by signing a short-lived JWT with its namespace's subject key. The
//! header's `kid` picks the key, so several keys can be live while the backend rotates.
//!
//! Only HS256 is accepted, and the algorithm is checked before any key is chosen: accepting
//! whatever `alg` the token names is the classic JWT downgrade (`none`, or an RSA public key
//! used as an HMAC secret). Time rules are applied here with an explicit `now_unix`, not by
//! jsonwebtoken's clock, so they are deterministic and testable.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::Mac;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;

use crate::identity::mac::keyed_mac;

/// Longest `exp - iat`, and (plus [`CLOCK_SKEW_SECS`]) longest `exp - now`.
pub const MAX_LIFETIME_SECS: i64 = 24 * 60 * 60;
/// Backend and gateway clocks may disagree by this much about `iat` and the lifetime bound.
pub const CLOCK_SKEW_SECS: i64 = 60;
/// A token is still accepted this many seconds after `exp`, to absorb small clock drift.
pub const EXPIRY_LEEWAY_SECS: i64 = 5;
/// Tokens are a few hundred bytes; anything this large is refused before decoding.
pub const MAX_TOKEN_LEN: usize = 4096;
const MAX_KID_LEN: usize = 128;
const MAX_SUBJECT_CHARS: usize = 128;

/// What a verified token says about its subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectClaims {
    pub subject: String,
    pub expires_at_unix: i64,
    pub issued_at_unix: i64,
}

/// Why a subject token was refused. Messages are safe for a 401 body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubjectTokenError {
    #[error("subject token is malformed")]
    Malformed,
    #[error("subject token must be signed with HS256")]
    UnsupportedAlgorithm,
    #[error("subject token header has no kid")]
    MissingKeyId,
    #[error("subject token signature is not valid")]
    BadSignature,
    #[error("subject token has expired")]
    Expired,
    #[error("subject token expires more than 24 hours ahead")]
    ExpiryTooFar,
    #[error("subject token is issued in the future")]
    IssuedInFuture,
    #[error("subject token sub must be 1-128 characters without control characters")]
    InvalidSubject,
}

#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
}

#[derive(Deserialize)]
struct RawClaims {
    sub: String,
    exp: i64,
    iat: i64,
}

/// Cheap shape test to tell a JWT bearer apart from other credentials.
pub fn looks_like_jwt(bearer: &str) -> bool {
    let mut parts = bearer.split('.');
    let three = [parts.next(), parts.next(), parts.next()];
    parts.next().is_none() && three.iter().all(|p| p.is_some_and(|p| !p.is_empty()))
}

/// Reads the `kid` from the header so the caller can pick the key to verify with.
///
/// Nothing here is trusted: it only selects a key, and [`verify`] checks the signature over
/// this same header. The algorithm is refused here already, so a token naming `none` or RS256
/// never reaches key lookup.
pub fn peek_kid(token: &str) -> Result<String, SubjectTokenError> {
    if token.len() > MAX_TOKEN_LEN || token.split('.').count() != 3 {
        return Err(SubjectTokenError::Malformed);
    }
    let (encoded, _) = token.split_once('.').ok_or(SubjectTokenError::Malformed)?;
    let json = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| SubjectTokenError::Malformed)?;
    let header: RawHeader =
        serde_json::from_slice(&json).map_err(|_| SubjectTokenError::Malformed)?;
    if header.alg != "HS256" {
        return Err(SubjectTokenError::UnsupportedAlgorithm);
    }
    match header.kid {
        None => Err(SubjectTokenError::MissingKeyId),
        Some(kid) if kid.is_empty() => Err(SubjectTokenError::MissingKeyId),
        Some(kid) if kid.len() > MAX_KID_LEN || kid.chars().any(char::is_control) => {
            Err(SubjectTokenError::Malformed)
        }
        Some(kid) => Ok(kid),
    }
}

/// Verifies `token` with the subject key `secret` (the one its `kid` selected) at `now_unix`.
///
/// `sub`, `exp` and `iat` are required integers/strings. Accepted when: the HS256 signature
/// is valid; `now < exp + 5 s`; `iat <= now + 60 s`; `exp <= iat + 24 h` and
/// `exp <= now + 24 h + 60 s` (a backend cannot mint long-lived tokens by back- or
/// forward-dating `iat`); `sub` has 1–128 characters and no control characters.
pub fn verify(
    token: &str,
    secret: &[u8],
    now_unix: i64,
) -> Result<SubjectClaims, SubjectTokenError> {
    peek_kid(token)?;
    if !looks_like_jwt(token) {
        return Err(SubjectTokenError::Malformed);
    }
    // jsonwebtoken refuses empty HMAC keys; a namespace without a usable key verifies nothing.
    let key = DecodingKey::from_secret(secret).map_err(|_| SubjectTokenError::BadSignature)?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.leeway = 0;
    let claims = jsonwebtoken::decode::<RawClaims>(token, &key, &validation)
        .map_err(|e| match e.kind() {
            ErrorKind::InvalidSignature => SubjectTokenError::BadSignature,
            ErrorKind::InvalidAlgorithm | ErrorKind::UnsupportedAlgorithm => {
                SubjectTokenError::UnsupportedAlgorithm
            }
            _ => SubjectTokenError::Malformed,
        })?
        .claims;

    if now_unix >= claims.exp.saturating_add(EXPIRY_LEEWAY_SECS) {
        return Err(SubjectTokenError::Expired);
    }
    if claims.iat > now_unix.saturating_add(CLOCK_SKEW_SECS) {
        return Err(SubjectTokenError::IssuedInFuture);
    }
    let latest = now_unix.saturating_add(MAX_LIFETIME_SECS + CLOCK_SKEW_SECS);
    if claims.exp > claims.iat.saturating_add(MAX_LIFETIME_SECS) || claims.exp > latest {
        return Err(SubjectTokenError::ExpiryTooFar);
    }
    let chars = claims.sub.chars().count();
    if !(1..=MAX_SUBJECT_CHARS).contains(&chars) || claims.sub.chars().any(char::is_control) {
        return Err(SubjectTokenError::InvalidSubject);
    }
    Ok(SubjectClaims {
        subject: claims.sub,
        expires_at_unix: claims.exp,
        issued_at_unix: claims.iat,
    })
}

/// Mints a token the way an application backend would (for tests, the CLI and the load
/// generator). It does not validate its inputs, so tests can mint deliberately bad tokens.
pub fn issue(
    kid: &str,
    secret: &[u8],
    subject: &str,
    issued_at_unix: i64,
    expires_at_unix: i64,
) -> String {
    let header = serde_json::json!({ "alg": "HS256", "typ": "JWT", "kid": kid });
    let claims =
        serde_json::json!({ "sub": subject, "iat": issued_at_unix, "exp": expires_at_unix });
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let tag = keyed_mac(secret)
        .chain_update(&message)
        .finalize()
        .into_bytes();
    format!("{message}.{}", URL_SAFE_NO_PAD.encode(tag))
}

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
