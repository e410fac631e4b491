//! The Ed25519 keys that sign waiting-room passes, and the signing itself: a pass is a JWT
//! (`alg: EdDSA`, `kid`) that any origin verifies with a standard JWT library against the keys
//! the gateway publishes (`GET /.well-known/jwks.json`), without calling Sluice.
//!
//! PostgreSQL holds the keys, so every gateway signs with the same live key and publishes the
//! same set. Rotation retires the live key and creates the next in one transaction; a retired
//! key stays published for [`RETIRED_KEY_LISTED`], longer than any pass lives.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use crate::DurableError;

/// The longest a pass may live (a day), plus a margin for clocks: a key retired this long ago
/// signed no pass that is still valid.
pub const RETIRED_KEY_LISTED: Duration = Duration::from_secs(86_400 + 300);

/// One signing key. `Debug` never shows the seed.
#[derive(Clone, PartialEq, Eq)]
pub struct PassKey {
    pub kid: String,
    seed: [u8; 32],
    pub public_key: [u8; 32],
    pub retired_at: Option<DateTime<Utc>>,
}

impl std::fmt::Debug for PassKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassKey")
            .field("kid", &self.kid)
            .field("retired_at", &self.retired_at)
            .finish_non_exhaustive()
    }
}

impl PassKey {
    /// A new key from 32 random bytes; its id names its public key (`p-` and 16 hex digits of
    /// its SHA-256), so two keys never share an id.
    pub fn generate() -> Self {
        let seed: [u8; 32] = rand::random();
        let public_key = SigningKey::from_bytes(&seed).verifying_key().to_bytes();
        let kid = format!("p-{}", hex::encode(&Sha256::digest(public_key)[..8]));
        Self {
            kid,
            seed,
            public_key,
            retired_at: None,
        }
    }

    /// Signs `claims` as a compact JWT: header `{"alg":"EdDSA","typ":"JWT","kid"}`.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let header = serde_json::json!({"alg": "EdDSA", "typ": "JWT", "kid": self.kid});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = SigningKey::from_bytes(&self.seed).sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
    }

    /// The key as a JSON Web Key (RFC 8037: `kty: OKP`, `crv: Ed25519`).
    pub fn jwk(&self) -> serde_json::Value {
        serde_json::json!({
            "kty": "OKP",
            "crv": "Ed25519",
            "x": URL_SAFE_NO_PAD.encode(self.public_key),
            "kid": self.kid,
            "alg": "EdDSA",
            "use": "sig",
        })
    }
}

struct Row {
    kid: String,
    seed: Vec<u8>,
    public_key: Vec<u8>,
    retired_at: Option<DateTime<Utc>>,
}

impl Row {
    fn into_key(self) -> Result<PassKey, DurableError> {
        let broken =
            || DurableError::Misconfigured(format!("pass key {} is not 32 bytes", self.kid));
        Ok(PassKey {
            seed: self.seed.as_slice().try_into().map_err(|_| broken())?,
            public_key: self
                .public_key
                .as_slice()
                .try_into()
                .map_err(|_| broken())?,
            kid: self.kid,
            retired_at: self.retired_at,
        })
    }
}

/// The live key, created first if there is none (concurrent creators end with the same one).
/// Read first: a key is made and an insert tried only while none exists, not on every call.
pub async fn live(pg: &PgPool) -> Result<PassKey, DurableError> {
    if let Some(key) = live_row(pg).await? {
        return key.into_key();
    }
    let fresh = PassKey::generate();
    sqlx::query!(
        "INSERT INTO pass_keys (kid, seed, public_key) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
        fresh.kid,
        &fresh.seed[..],
        &fresh.public_key[..],
    )
    .execute(pg)
    .await?;
    live_row(pg)
        .await?
        .ok_or_else(|| DurableError::Unavailable("no live pass key; try again".into()))?
        .into_key()
}

async fn live_row(pg: &PgPool) -> Result<Option<Row>, DurableError> {
    Ok(sqlx::query_as!(
        Row,
        "SELECT kid, seed, public_key, retired_at FROM pass_keys WHERE retired_at IS NULL",
    )
    .fetch_optional(pg)
    .await?)
}

/// Retires the live key and makes a new one live, in one transaction; returns the new key.
pub async fn rotate(pg: &PgPool) -> Result<PassKey, DurableError> {
    let next = PassKey::generate();
    let mut tx = pg.begin().await?;
    sqlx::query!("UPDATE pass_keys SET retired_at = now() WHERE retired_at IS NULL")
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "INSERT INTO pass_keys (kid, seed, public_key) VALUES ($1, $2, $3)",
        next.kid,
        &next.seed[..],
        &next.public_key[..],
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(next)
}

/// The keys an origin may meet on a valid pass: the live one and those retired within
/// [`RETIRED_KEY_LISTED`], newest first.
pub async fn published(pg: &PgPool) -> Result<Vec<PassKey>, DurableError> {
    let keys = listed(pg).await?;
    if keys.iter().any(|key| key.retired_at.is_none()) {
        return Ok(keys);
    }
    // None live yet (a new installation, before its first pass): make one, then list again.
    live(pg).await?;
    listed(pg).await
}

async fn listed(pg: &PgPool) -> Result<Vec<PassKey>, DurableError> {
    sqlx::query_as!(
        Row,
        "SELECT kid, seed, public_key, retired_at FROM pass_keys
          WHERE retired_at IS NULL
             OR retired_at > now() - make_interval(secs => $1::double precision)
          ORDER BY created_at DESC",
        RETIRED_KEY_LISTED.as_secs_f64(),
    )
    .fetch_all(pg)
    .await?
    .into_iter()
    .map(Row::into_key)
    .collect()
}

/// Longest pass the gateway reads back (heartbeat, leave); its own are far shorter.
const MAX_PASS_LEN: usize = 2048;

/// Why a pass handed back to the gateway was refused. Messages are safe for a 401 body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PassError {
    #[error("the pass is malformed")]
    Malformed,
    #[error("the pass is not signed by a published key")]
    UnknownKey,
    #[error("the pass's signature is not valid")]
    BadSignature,
}

/// What a pass says, as the gateway signs it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PassClaims {
    /// The subject the place belongs to.
    pub sub: String,
    /// The namespace's id.
    pub namespace: String,
    pub room: String,
    /// The place's id (the join id).
    pub jti: uuid::Uuid,
    pub iat: i64,
    pub exp: i64,
}

impl PassClaims {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// The key id a pass names, if it is shaped like one of ours (so a caller can refresh its
/// key set before [`verify`] on an id it does not know).
pub fn pass_kid(token: &str) -> Option<String> {
    let header = token.split('.').next()?;
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    header["kid"].as_str().map(str::to_owned)
}

/// Checks a pass's signature against `keys` and reads its claims. Expiry is not checked here:
/// the place's state in PostgreSQL is the truth a heartbeat or a leave answers with (an
/// origin checks `exp` itself). Total on any input.
pub fn verify(token: &str, keys: &[PassKey]) -> Result<PassClaims, PassError> {
    use ed25519_dalek::{Signature, VerifyingKey};
    if token.is_empty() || token.len() > MAX_PASS_LEN {
        return Err(PassError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(PassError::Malformed);
    };
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| PassError::Malformed)
    };
    let header: serde_json::Value =
        serde_json::from_slice(&decode(header)?).map_err(|_| PassError::Malformed)?;
    if header["alg"] != "EdDSA" {
        return Err(PassError::Malformed);
    }
    let kid = header["kid"].as_str().ok_or(PassError::Malformed)?;
    let key = keys
        .iter()
        .find(|key| key.kid == kid)
        .ok_or(PassError::UnknownKey)?;
    let signature: [u8; 64] = decode(signature)?
        .try_into()
        .map_err(|_| PassError::Malformed)?;
    let verifying = VerifyingKey::from_bytes(&key.public_key).map_err(|_| PassError::UnknownKey)?;
    let signed_len = token.len() - token.rsplit('.').next().map_or(0, str::len) - 1;
    verifying
        .verify_strict(
            &token.as_bytes()[..signed_len],
            &Signature::from_bytes(&signature),
        )
        .map_err(|_| PassError::BadSignature)?;
    serde_json::from_slice(&decode(payload)?).map_err(|_| PassError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> PassClaims {
        PassClaims {
            sub: "alice".into(),
            namespace: uuid::Uuid::new_v4().to_string(),
            room: "doors".into(),
            jti: uuid::Uuid::new_v4(),
            iat: 1_750_000_000,
            exp: 1_750_000_600,
        }
    }

    #[test]
    fn a_signed_pass_verifies_and_every_change_is_refused() {
        let key = PassKey::generate();
        let other = PassKey::generate();
        let pass = key.sign(&claims().to_json());
        assert_eq!(
            verify(&pass, std::slice::from_ref(&key)),
            Ok(claims_of(&pass))
        );
        assert_eq!(pass_kid(&pass).as_deref(), Some(key.kid.as_str()));
        assert_eq!(
            verify(&pass, std::slice::from_ref(&other)),
            Err(PassError::UnknownKey)
        );
        // Every character replaced: refused (a base64 character that decodes to the same
        // bytes cannot exist in the last position without padding bits set, which we refuse).
        for i in 0..pass.len() {
            let mut bytes = pass.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).expect("ascii");
            assert!(
                verify(&changed, &[key.clone(), other.clone()]).is_err(),
                "position {i} accepted"
            );
        }
        // The same key id on another key's signature.
        let mut forged = other.clone();
        forged.kid = key.kid.clone();
        assert_eq!(
            verify(
                &forged.sign(&claims().to_json()),
                std::slice::from_ref(&key)
            ),
            Err(PassError::BadSignature)
        );
        for garbage in ["", ".", "a.b.c", "a.b.c.d", &"x".repeat(5000)] {
            assert!(verify(garbage, std::slice::from_ref(&key)).is_err());
        }
    }

    fn claims_of(pass: &str) -> PassClaims {
        let payload = pass.split('.').nth(1).expect("payload");
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("b64")).expect("claims")
    }
}
