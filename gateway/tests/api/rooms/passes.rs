//! The keys that verify waiting-room passes: `GET /.well-known/jwks.json` is a plain JWK Set a
//! standard JWT library reads as is; a pass signed by the live key verifies with it (EdDSA), a
//! tampered or expired one does not, and after `sluice pass-key rotate` passes of the old key
//! still verify against the published set while new ones carry the new key's id. The witness is
//! `jsonwebtoken`'s own EdDSA verification, not Sluice's code.

use hyper::StatusCode;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};
use sluice_store::pass_keys;

use crate::support::*;

/// The published set, fetched over HTTP.
async fn key_set(stack: &Stack) -> (JwkSet, Value) {
    let reply = stack.get("/.well-known/jwks.json", None).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(
        reply
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let set: JwkSet = serde_json::from_value(reply.body.clone()).expect("a JWK Set");
    (set, reply.body)
}

/// Verifies `token` as an origin would: its `kid` looked up in `set`, EdDSA only, `exp` checked
/// without leeway.
fn verify(set: &JwkSet, token: &str) -> Result<Value, jsonwebtoken::errors::Error> {
    let header = jsonwebtoken::decode_header(token)?;
    let kid = header.kid.unwrap_or_default();
    let jwk = set.find(&kid).ok_or_else(|| {
        jsonwebtoken::errors::Error::from(jsonwebtoken::errors::ErrorKind::InvalidKeyFormat)
    })?;
    let mut validation = Validation::new(Algorithm::EdDSA);
    validation.leeway = 0;
    validation.set_required_spec_claims(&["exp", "sub"]);
    jsonwebtoken::decode::<Value>(token, &DecodingKey::from_jwk(jwk)?, &validation)
        .map(|d| d.claims)
}

fn claims(subject: &str, exp_in: i64) -> Value {
    let now = sluice_gateway::identity::auth::now_unix();
    json!({"sub": subject, "room": "doors", "namespace": "main", "iat": now, "exp": now + exp_in})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_verify_with_the_published_keys_across_a_rotation() {
    let stack = Stack::start().await;
    let (set, raw) = key_set(&stack).await;
    assert_eq!(set.keys.len(), 1, "{raw}");
    let published = &raw["keys"][0];
    assert_eq!(
        (
            &published["kty"],
            &published["crv"],
            &published["alg"],
            &published["use"]
        ),
        (
            &json!("OKP"),
            &json!("Ed25519"),
            &json!("EdDSA"),
            &json!("sig")
        )
    );
    assert!(
        published.get("d").is_none(),
        "no private part is published: {raw}"
    );

    let old = pass_keys::live(&stack.pg).await.expect("live key");
    assert_eq!(published["kid"], old.kid);
    let pass = old.sign(&claims("alice", 600));
    assert_eq!(verify(&set, &pass).expect("verifies")["sub"], "alice");

    // Tampered: another subject in the payload, the signature kept.
    let parts: Vec<&str> = pass.split('.').collect();
    use base64::Engine;
    let forged_payload =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims("mallory", 600).to_string());
    let forged = format!("{}.{forged_payload}.{}", parts[0], parts[2]);
    assert!(verify(&set, &forged).is_err(), "a tampered pass fails");
    let expired = old.sign(&claims("alice", -5));
    assert!(verify(&set, &expired).is_err(), "an expired pass fails");

    // Rotation with the CLI: both keys published; old passes still verify, new ones carry
    // the new key's id.
    let rotated = crate::operators::cli::sluice(&stack.database_url, &["pass-key", "rotate"]);
    assert!(
        rotated.status.success(),
        "{}",
        crate::operators::cli::text(&rotated)
    );
    let printed: Value = serde_json::from_slice(&rotated.stdout).expect("json");
    let new = pass_keys::live(&stack.pg).await.expect("live key");
    assert_eq!(printed["kid"], new.kid);
    assert_ne!(new.kid, old.kid);
    let (set, raw) = key_set(&stack).await;
    let kids: Vec<&str> = raw["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .filter_map(|k| k["kid"].as_str())
        .collect();
    assert_eq!(
        kids,
        vec![new.kid.as_str(), old.kid.as_str()],
        "newest first"
    );
    assert_eq!(verify(&set, &pass).expect("old pass")["sub"], "alice");
    let fresh = new.sign(&claims("bob", 600));
    assert_eq!(
        jsonwebtoken::decode_header(&fresh)
            .expect("header")
            .kid
            .as_deref(),
        Some(new.kid.as_str())
    );
    assert_eq!(verify(&set, &fresh).expect("new pass")["sub"], "bob");
    // A key retired longer ago than any pass lives is no longer published.
    sqlx::query("UPDATE pass_keys SET retired_at = now() - interval '2 days' WHERE kid = $1")
        .bind(&old.kid)
        .execute(&stack.pg)
        .await
        .expect("age the old key");
    let (set, _) = key_set(&stack).await;
    assert_eq!(set.keys.len(), 1);
    assert!(verify(&set, &pass).is_err(), "its passes have all expired");
}
