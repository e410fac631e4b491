//! `Sluice-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, keyed with the
//! namespace's webhook secret (its text, as `sluice bootstrap` printed it). The timestamp is
//! inside the MAC so a backend can refuse replays older than its tolerance.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header value for `body` signed at `unix_seconds`.
pub fn sign(secret: &str, unix_seconds: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!(
        "t={unix_seconds},v1={}",
        hex::encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::sign;

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
}
