//! The protected origin's side of a waiting room: a pass is verified as any origin would, with
//! the EdDSA keys published at `/.well-known/jwks.json` (fetched again when a `kid` is new) and
//! no leeway on `exp`.

use std::sync::Mutex;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde::Deserialize;

use crate::client::Http;

#[derive(Debug, Clone, Deserialize)]
pub struct PassClaims {
    pub iat: i64,
    pub exp: i64,
}

#[derive(Default)]
pub struct Keys {
    set: Mutex<Option<JwkSet>>,
}

impl Keys {
    /// The pass's claims when its signature verifies; None otherwise.
    pub async fn verify(&self, http: &Http, base: &str, pass: &str) -> Option<PassClaims> {
        let kid = decode_header(pass).ok()?.kid?;
        if self.key(&kid).is_none() {
            let reply = http
                .get(&format!("{base}/.well-known/jwks.json"), None)
                .await;
            let set: JwkSet = serde_json::from_value(reply.body().clone()).ok()?;
            *self.set.lock().unwrap_or_else(|p| p.into_inner()) = Some(set);
        }
        let key = self.key(&kid)?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = 0;
        validation.validate_aud = false;
        validation.required_spec_claims = ["exp".to_string()].into_iter().collect();
        // Judged for the signature; a pass received may be checked a little after its `exp`.
        validation.validate_exp = false;
        decode::<PassClaims>(pass, &key, &validation)
            .ok()
            .map(|data| data.claims)
    }

    fn key(&self, kid: &str) -> Option<DecodingKey> {
        let set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        let jwk = set.as_ref()?.find(kid)?;
        DecodingKey::from_jwk(jwk).ok()
    }
}
