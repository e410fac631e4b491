//! Subject tokens as a backend mints them (HS256 with the namespace's subject key, `kid` in the
//! header), for the calls only the subject may make: room joins, passes, reserved units.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::json;
use sha2::Sha256;

pub fn subject_token(kid: &str, secret: &str, subject: &str, now_s: i64) -> String {
    let head =
        URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "typ": "JWT", "kid": kid}).to_string());
    let body = URL_SAFE_NO_PAD
        .encode(json!({"sub": subject, "iat": now_s, "exp": now_s + 3600}).to_string());
    let signing = format!("{head}.{body}");
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return signing;
    };
    mac.update(signing.as_bytes());
    format!(
        "{signing}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}
