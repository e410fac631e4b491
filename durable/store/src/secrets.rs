//! Secrets: random, shown once, stored as hashes.
//!
//! Credentials are 256-bit random values, so a plain SHA-256 is a sufficient one-way function;
//! a slow password hash would only add latency to every request.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Prefix that makes a leaked credential recognisable by secret scanners.
pub const CREDENTIAL_PREFIX: &str = "slc_";

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

pub fn new_credential_secret() -> String {
    format!(
        "{CREDENTIAL_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(random_bytes::<32>())
    )
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

pub fn credential_hash(secret: &str) -> [u8; 32] {
    sha256(secret.as_bytes())
}

/// A key id for a subject key: globally unique, so a token's header alone names its namespace.
pub fn new_key_id() -> String {
    format!("sk{}", hex::encode(random_bytes::<8>()))
}

/// Whether `text` has the shape [`new_credential_secret`] gives (`slc_` and 43 base64url
/// characters). Anything else cannot be a credential, so it is refused without a lookup.
pub fn is_credential_format(text: &str) -> bool {
    text.strip_prefix(CREDENTIAL_PREFIX).is_some_and(|rest| {
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// Whether `text` has the shape [`new_key_id`] gives (`sk` and 16 lowercase hex digits).
pub fn is_key_id_format(text: &str) -> bool {
    text.strip_prefix("sk").is_some_and(|rest| {
        rest.len() == 16
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// A secret's text as it is shown and used: 32 random bytes, base64url without padding. Every
/// secret Sluice makes (subject keys, webhook secrets) is used as exactly this text, its
/// ASCII bytes being the HMAC key.
pub fn encode_secret(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A value that must never reach a log: its `Debug` says only whether it is set, so a struct
/// holding one may derive `Debug`. Serialized as the value itself (a file the secret is written
/// to must hold it).
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Redacted<T>(pub T);

impl<T> Redacted<T> {
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> std::fmt::Debug for Redacted<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_a_secret() {
        let output = crate::tenancy::BootstrapOutput {
            application_id: crate::ids::ApplicationId::new_v7(),
            namespace_id: crate::ids::NamespaceId::from_uuid(uuid::Uuid::nil()),
            namespace: "main".into(),
            credential: new_credential_secret(),
            scopes: vec![],
            subject_key: crate::tenancy::SubjectKeyOutput {
                id: new_key_id(),
                secret: encode_secret(&random_bytes::<32>()),
            },
            webhook_secret: encode_secret(&random_bytes::<32>()),
        };
        let shown = format!("{output:?} {:?}", Redacted("k1:secret"));
        for secret in [
            output.credential.as_str(),
            &output.subject_key.secret,
            &output.webhook_secret,
            "k1:secret",
        ] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains(&output.subject_key.id),
            "ids are not secrets"
        );
    }

    #[test]
    fn credential_secrets_are_unique_and_prefixed() {
        let a = new_credential_secret();
        let b = new_credential_secret();
        assert_ne!(a, b);
        assert!(a.starts_with(CREDENTIAL_PREFIX));
        assert_eq!(a.len(), CREDENTIAL_PREFIX.len() + 43);
        assert_ne!(credential_hash(&a), credential_hash(&b));
    }

    #[test]
    fn generated_secrets_and_key_ids_have_the_checked_format() {
        for _ in 0..100 {
            assert!(is_credential_format(&new_credential_secret()));
            assert!(is_key_id_format(&new_key_id()));
        }
        let good = new_credential_secret();
        for bad in [
            "",
            "slc_",
            &good[..good.len() - 1],
            &format!("{good}A"),
            &good.replacen("slc_", "slk_", 1),
            &format!("slc_{}", "+".repeat(43)),
        ] {
            assert!(!is_credential_format(bad), "{bad:?} passed");
        }
        for bad in [
            "",
            "sk",
            "sk0123456789abcdeF",
            "sk0123456789abcde",
            "xk0123456789abcdef",
        ] {
            assert!(!is_key_id_format(bad), "{bad:?} passed");
        }
    }

    #[test]
    fn key_ids_are_short_and_distinct() {
        let a = new_key_id();
        assert_eq!(a.len(), 18);
        assert_ne!(a, new_key_id());
    }
}
