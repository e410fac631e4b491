//! HMAC-SHA256 with a key of any length, for the two MACs the gateway makes itself: tickets
//! and subject tokens.

use hmac::{Hmac, KeyInit};
use sha2::{Digest, Sha256};

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC (RFC 2104) zero-pads keys up to the hash's block size and hashes longer keys first.
/// Doing that here lets us call the infallible fixed-size constructor; `new_from_slice`
/// returns a `Result` only because the trait also serves fixed-key ciphers.
pub(crate) fn keyed_mac(secret: &[u8]) -> HmacSha256 {
    let mut block = [0u8; 64];
    if secret.len() > block.len() {
        let digest = Sha256::digest(secret);
        block[..digest.len()].copy_from_slice(&digest);
    } else {
        block[..secret.len()].copy_from_slice(secret);
    }
    HmacSha256::new(&block.into())
}
