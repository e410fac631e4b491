//! Properties of subject-token verification, on arbitrary input: it never panics, it accepts
//! exactly the tokens the documented rules accept (checked against a model of them), and any
//! one-character change or another secret is refused.

use super::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_testkit::props::{json_object, json_value};

const NOW: i64 = 1_750_000_000;
const SECRET: &[u8] = b"namespace-subject-key-0123456789abcdef";
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A token over any header and claims JSON, correctly signed with `secret`.
fn signed(header: &Value, claims: &Value, secret: &[u8]) -> String {
    let message = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let tag = keyed_mac(secret)
        .chain_update(&message)
        .finalize()
        .into_bytes();
    format!("{message}.{}", b64(&tag))
}

/// The rules `verify` documents, written out once more: what a correctly signed HS256 token
/// with these claims must come to.
fn model(sub: &str, iat: i64, exp: i64, now: i64) -> Result<(), SubjectTokenError> {
    if now >= exp.saturating_add(EXPIRY_LEEWAY_SECS) {
        return Err(SubjectTokenError::Expired);
    }
    if iat > now.saturating_add(CLOCK_SKEW_SECS) {
        return Err(SubjectTokenError::IssuedInFuture);
    }
    if exp > iat.saturating_add(MAX_LIFETIME_SECS)
        || exp > now.saturating_add(MAX_LIFETIME_SECS + CLOCK_SKEW_SECS)
    {
        return Err(SubjectTokenError::ExpiryTooFar);
    }
    let chars = sub.chars().count();
    if !(1..=128).contains(&chars) || sub.chars().any(char::is_control) {
        return Err(SubjectTokenError::InvalidSubject);
    }
    Ok(())
}

/// Times around `NOW`: the edges of every rule, and any `i64` at all.
fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => (-2 * MAX_LIFETIME_SECS..=2 * MAX_LIFETIME_SECS).prop_map(|d| NOW + d),
        1 => any::<i64>(),
    ]
}

/// Subjects: mostly valid, sometimes empty, too long or with control characters.
fn subject() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[^\\p{Cc}]{1,128}",
        1 => any::<String>(),
        1 => "[^\\p{Cc}]{129,140}",
    ]
}

/// Bearer strings a caller may send: anything, three dot-separated base64url parts of arbitrary
/// bytes, and tokens whose header or claims are arbitrary JSON.
fn caller_token() -> impl Strategy<Value = String> {
    let part = || proptest::collection::vec(any::<u8>(), 0..120).prop_map(|b| b64(&b));
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(proptest::sample::select(ALPHABET), 0..300)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        (part(), part(), part()).prop_map(|(a, b, c)| format!("{a}.{b}.{c}")),
        (json_value(), json_value()).prop_map(|(h, c)| signed(&h, &c, SECRET)),
        (json_object(json_value()), json_value()).prop_map(|(mut h, c)| {
            h.insert("alg".into(), "HS256".into());
            h.insert("kid".into(), "k1".into());
            signed(&Value::Object(h), &c, SECRET)
        }),
    ]
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(256))]

    #[test]
    fn parsing_is_total(token in caller_token(), now in time()) {
        let _ = peek_kid(&token);
        let _ = looks_like_jwt(&token);
        if let Ok(claims) = verify(&token, SECRET, now) {
            // Whatever got through obeys the rules.
            prop_assert_eq!(
                model(&claims.subject, claims.issued_at_unix, claims.expires_at_unix, now),
                Ok(())
            );
        }
    }

    #[test]
    fn verification_follows_the_documented_rules(
        sub in subject(),
        iat in time(),
        exp in time(),
        kid in "[^\\p{Cc}]{1,32}",
    ) {
        let token = issue(&kid, SECRET, &sub, iat, exp);
        prop_assert_eq!(peek_kid(&token), Ok(kid));
        let expected = model(&sub, iat, exp, NOW).map(|()| SubjectClaims {
            subject: sub.clone(),
            expires_at_unix: exp,
            issued_at_unix: iat,
        });
        prop_assert_eq!(verify(&token, SECRET, NOW), expected);
    }

    #[test]
    fn any_one_character_change_is_refused(
        sub in "[^\\p{Cc}]{1,128}",
        at in any::<prop::sample::Index>(),
        replacement in proptest::sample::select(ALPHABET),
    ) {
        let token = issue("k1", SECRET, &sub, NOW, NOW + 600);
        let at = at.index(token.len());
        let mut bytes = token.into_bytes();
        prop_assume!(bytes[at] != replacement);
        bytes[at] = replacement;
        let changed = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert!(verify(&changed, SECRET, NOW).is_err(), "{} verified", changed);
    }

    #[test]
    fn other_secrets_and_algorithms_are_refused(
        secret in proptest::collection::vec(any::<u8>(), 0..100),
        alg in "[A-Za-z0-9]{0,8}",
    ) {
        prop_assume!(secret != SECRET);
        let token = issue("k1", SECRET, "user-1", NOW, NOW + 600);
        prop_assert_eq!(verify(&token, &secret, NOW), Err(SubjectTokenError::BadSignature));
        prop_assume!(alg != "HS256");
        let claims = json!({"sub": "user-1", "iat": NOW, "exp": NOW + 600});
        let other = signed(&json!({"alg": alg, "kid": "k1"}), &claims, SECRET);
        prop_assert_eq!(peek_kid(&other), Err(SubjectTokenError::UnsupportedAlgorithm));
        prop_assert_eq!(verify(&other, SECRET, NOW), Err(SubjectTokenError::UnsupportedAlgorithm));
    }
}
