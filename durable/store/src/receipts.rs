//! Idempotency receipts of management calls (a configure sent with an `Idempotency-Key`): what
//! identifies a request's content, and what a repeat of it is answered. Each kind of call keeps
//! its receipts in its own table, written in the transaction of the change it records.

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::DurableError;

/// The SHA-256 of a request's content, given as a JSON array of its fields in a fixed order
/// (the key itself is the receipt's address, not part of it).
pub fn digest(canonical: &serde_json::Value) -> Vec<u8> {
    Sha256::digest(canonical.to_string().as_bytes()).to_vec()
}

/// What a call whose key has a receipt is answered: the first answer, stored with the receipt,
/// when the content is the same; `IdempotencyConflict` when the key was used for another request.
pub fn replay<T: DeserializeOwned>(
    stored_digest: &[u8],
    answer: serde_json::Value,
    digest: &[u8],
) -> Result<T, DurableError> {
    if stored_digest != digest {
        return Err(DurableError::IdempotencyConflict(
            "this Idempotency-Key was used with another request".into(),
        ));
    }
    serde_json::from_value(answer)
        .map_err(|e| DurableError::StateConflict(format!("stored receipt does not load: {e}")))
}
