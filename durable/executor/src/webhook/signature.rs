//! `Sluice-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">[,v1=…]`.
//!
//! The key is the namespace's webhook secret exactly as it was shown (`sluice bootstrap`,
//! `sluice webhook-secret rotate`): the bytes of that text, as every HMAC library takes a string
//! key. The timestamp is inside the MAC, so a backend refuses replays older than its tolerance
//! (we suggest five minutes; a request is signed when it goes out, and a retry is signed again).
//!
//! During a rotation the namespace has two live secrets and each request carries one `v1` per
//! secret, the new one first: a backend that checks any `v1` against the secret it knows keeps
//! verifying while it moves from the old secret to the new one, and the old one stops being sent
//! when the rotation is finished (`sluice webhook-secret retire`).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The live secrets of a namespace: the current one, and the one a rotation replaced until it
/// is retired. Its `Debug` shows neither, so a struct holding it may derive `Debug` safely.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecrets {
    pub current: String,
    pub previous: Option<String>,
}

impl std::fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSecrets")
            .field("current", &"<redacted>")
            .field("previous", &self.previous.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl WebhookSecrets {
    /// The header value for `body` signed at `unix_seconds`, one `v1` per live secret.
    pub fn header(&self, unix_seconds: i64, body: &[u8]) -> String {
        let mut header = format!(
            "t={unix_seconds},v1={}",
            mac_hex(&self.current, unix_seconds, body)
        );
        if let Some(previous) = &self.previous {
            header.push_str(",v1=");
            header.push_str(&mac_hex(previous, unix_seconds, body));
        }
        header
    }
}

/// The header value for `body` signed at `unix_seconds` with one secret.
pub fn sign(secret: &str, unix_seconds: i64, body: &[u8]) -> String {
    WebhookSecrets {
        current: secret.to_owned(),
        previous: None,
    }
    .header(unix_seconds, body)
}

fn mac_hex(secret: &str, unix_seconds: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// What a backend does with the header: true when any `v1` is `secret`'s MAC of `"<t>.<body>"`
/// and `t` is within `tolerance_seconds` of `now_unix` (either way). A reference for backends
/// written in Rust (the load generator's uses it); the comparison is constant-time.
pub fn verify(
    secret: &str,
    header: &str,
    body: &[u8],
    now_unix: i64,
    tolerance_seconds: i64,
) -> bool {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => signatures.extend(hex::decode(value).ok()),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if now_unix.abs_diff(t) > tolerance_seconds.unsigned_abs() {
        return false;
    }
    signatures.iter().any(|signature| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(signature).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_independent_hmac() {
        // HMAC-SHA256(key = "secret", "1700000000.{}"), computed with openssl:
        // printf '1700000000.{}' | openssl dgst -sha256 -hmac secret
        let header = sign("secret", 1_700_000_000, b"{}");
        assert_eq!(
            header,
            "t=1700000000,v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }

    /// During a rotation both secrets sign: a backend that knows either one verifies; one that
    /// knows neither does not; outside the tolerance nothing verifies.
    #[test]
    fn a_rotation_sends_both_signatures() {
        let both = WebhookSecrets {
            current: "new".into(),
            previous: Some("secret".into()),
        };
        let header = both.header(1_700_000_000, b"{}");
        assert!(
            header
                .ends_with(",v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"),
            "the old secret's signature, second: {header}"
        );
        for secret in ["new", "secret"] {
            assert!(
                verify(secret, &header, b"{}", 1_700_000_100, 300),
                "{secret}"
            );
        }
        assert!(!verify("other", &header, b"{}", 1_700_000_100, 300));
        assert!(!verify("new", &header, b"{ }", 1_700_000_100, 300));
        assert!(
            !verify("new", &header, b"{}", 1_700_000_301, 300),
            "a replay"
        );
    }
}
