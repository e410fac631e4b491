//! The protected origin's view: every pass a person receives is verified here as an origin
//! would verify it, with a standard JWT library against the published JWK Set (EdDSA only, no
//! leeway, this room and this namespace), never with Sluice's own code. What it accepted is
//! the evidence of the capacity and nothing-lost checks.

use std::sync::RwLock;

use hyper::Method;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use uuid::Uuid;

use crate::api::{Outcome, exchange};
use crate::bench_stack::BoxError;
use crate::driver::HttpClient;

/// A pass the witness accepted: its place, `iat` and `exp`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Accepted {
    pub(super) jti: Uuid,
    pub(super) iat: i64,
    pub(super) exp: i64,
}

pub(super) struct Witness {
    client: HttpClient,
    uri: String,
    room: String,
    namespace: String,
    keys: RwLock<JwkSet>,
}

impl Witness {
    /// Fetches the published keys once (again later only for a `kid` it does not know).
    pub(super) async fn start(
        client: &HttpClient,
        base: &str,
        room: &str,
        namespace: String,
    ) -> Result<Self, BoxError> {
        let uri = format!("{base}/.well-known/jwks.json");
        let keys = fetch(client, &uri).await?;
        Ok(Self {
            client: client.clone(),
            uri,
            room: room.to_string(),
            namespace,
            keys: RwLock::new(keys),
        })
    }

    /// Accepts `pass` if an origin would, now: a published key, EdDSA, not expired (no
    /// leeway), this room and namespace, held by `subject`.
    pub(super) async fn accept(&self, pass: &str, subject: &str) -> Result<Accepted, String> {
        let header = jsonwebtoken::decode_header(pass).map_err(|e| e.to_string())?;
        let kid = header.kid.unwrap_or_default();
        if self.key(&kid).is_none() {
            let keys = fetch(&self.client, &self.uri)
                .await
                .map_err(|e| e.to_string())?;
            *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
        }
        let key = self
            .key(&kid)
            .ok_or_else(|| format!("no published key {kid:?}"))??;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub", "jti"]);
        let claims = jsonwebtoken::decode::<Value>(pass, &key, &validation)
            .map_err(|e| e.to_string())?
            .claims;
        if claims["room"] != self.room.as_str() || claims["namespace"] != self.namespace.as_str() {
            return Err(format!(
                "a pass for room {} of namespace {}",
                claims["room"], claims["namespace"]
            ));
        }
        if claims["sub"] != subject {
            return Err(format!("a pass of {}", claims["sub"]));
        }
        let jti = claims["jti"]
            .as_str()
            .and_then(|jti| jti.parse().ok())
            .ok_or("no jti")?;
        let (Some(iat), Some(exp)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
            return Err("no iat or exp".into());
        };
        Ok(Accepted { jti, iat, exp })
    }

    fn key(&self, kid: &str) -> Option<Result<DecodingKey, String>> {
        let keys = self.keys.read().unwrap_or_else(|p| p.into_inner());
        keys.find(kid)
            .map(|jwk| DecodingKey::from_jwk(jwk).map_err(|e| e.to_string()))
    }
}

/// The JWK Set, a plain document (no envelope).
async fn fetch(client: &HttpClient, uri: &str) -> Result<JwkSet, BoxError> {
    use http_body_util::BodyExt;
    let request = hyper::Request::builder()
        .method(Method::GET)
        .uri(uri)
        .body(http_body_util::Full::new(bytes::Bytes::new()))?;
    let response = client.request(request).await?;
    if !response.status().is_success() {
        return Err(format!("{uri} answered {}", response.status()).into());
    }
    let body = response.into_body().collect().await?.to_bytes();
    Ok(serde_json::from_slice(&body)?)
}

/// `GET` of an enveloped answer's `data` (the room and its pre-queue).
pub(super) async fn read_data(
    client: &HttpClient,
    uri: &str,
    bearer: &str,
) -> Result<Value, BoxError> {
    match exchange(client, Method::GET, uri, Some(bearer), None)
        .await
        .outcome
    {
        Outcome::Success { data, .. } => Ok(data),
        other => Err(format!("{uri}: {other:?}").into()),
    }
}
