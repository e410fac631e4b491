use super::*;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::{Value, json};

const NOW: i64 = 1_750_000_000;
const SECRET: &[u8] = b"namespace-subject-key-0123456789abcdef";
const DAY: i64 = MAX_LIFETIME_SECS;

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(v.to_string())
}

/// Builds a token from arbitrary header/claims JSON, correctly HS256-signed with `SECRET`.
fn craft(header: Value, claims: Value) -> String {
    let message = format!("{}.{}", b64(&header), b64(&claims));
    let tag = keyed_mac(SECRET)
        .chain_update(&message)
        .finalize()
        .into_bytes();
    format!("{message}.{}", URL_SAFE_NO_PAD.encode(tag))
}

fn good_claims() -> Value {
    json!({"sub": "user-1", "iat": NOW, "exp": NOW + 600})
}

fn check(token: &str) -> Result<SubjectClaims, SubjectTokenError> {
    verify(token, SECRET, NOW)
}

fn times(iat: i64, exp: i64) -> Result<SubjectClaims, SubjectTokenError> {
    check(&issue("k1", SECRET, "user-1", iat, exp))
}

#[test]
fn valid_token_round_trips() {
    let token = issue("k1", SECRET, "user-1", NOW, NOW + 600);
    assert!(looks_like_jwt(&token));
    assert_eq!(peek_kid(&token), Ok("k1".to_owned()));
    let expected = SubjectClaims {
        subject: "user-1".to_owned(),
        expires_at_unix: NOW + 600,
        issued_at_unix: NOW,
    };
    assert_eq!(check(&token), Ok(expected));
}

#[test]
fn interoperates_with_jsonwebtoken_both_ways() {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("backend-key".to_owned());
    let key = EncodingKey::from_secret(SECRET).expect("test fixture");
    let theirs = jsonwebtoken::encode(&header, &good_claims(), &key).expect("test fixture");
    assert_eq!(peek_kid(&theirs), Ok("backend-key".to_owned()));
    assert_eq!(check(&theirs).expect("test fixture").subject, "user-1");

    let ours = issue("k", SECRET, "user-1", NOW, NOW + 60);
    let mut validation = Validation::new(Algorithm::HS256);
    validation.validate_exp = false;
    let decoded = jsonwebtoken::decode::<Value>(
        &ours,
        &DecodingKey::from_secret(SECRET).expect("test fixture"),
        &validation,
    )
    .expect("test fixture");
    assert_eq!(decoded.claims["sub"], "user-1");
    assert_eq!(decoded.header.kid.as_deref(), Some("k"));
}

#[test]
fn long_secrets_sign_like_jsonwebtoken() {
    let secret = [7u8; 200];
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".to_owned());
    let key = EncodingKey::from_secret(&secret).expect("test fixture");
    let theirs = jsonwebtoken::encode(&header, &good_claims(), &key).expect("test fixture");
    assert!(verify(&theirs, &secret, NOW).is_ok());
    assert!(verify(&issue("k1", &secret, "u", NOW, NOW + 1), &secret, NOW).is_ok());
}

#[test]
fn wrong_or_empty_secret_is_bad_signature() {
    let token = issue("k1", SECRET, "user-1", NOW, NOW + 600);
    assert_eq!(
        verify(&token, b"another-secret", NOW),
        Err(SubjectTokenError::BadSignature)
    );
    assert_eq!(
        verify(&token, b"", NOW),
        Err(SubjectTokenError::BadSignature)
    );
    let unsigned = issue("k1", b"", "user-1", NOW, NOW + 600);
    assert_eq!(
        verify(&unsigned, b"", NOW),
        Err(SubjectTokenError::BadSignature)
    );
}

#[test]
fn only_hs256_is_accepted() {
    let claims = b64(&good_claims());
    for alg in [
        "none", "None", "hs256", "HS384", "HS512", "RS256", "ES256", "PS256", "EdDSA",
    ] {
        let header = b64(&json!({"alg": alg, "kid": "k1"}));
        for sig in ["", "c2ln"] {
            let token = format!("{header}.{claims}.{sig}");
            assert_eq!(
                peek_kid(&token),
                Err(SubjectTokenError::UnsupportedAlgorithm),
                "{alg}"
            );
            assert_eq!(
                check(&token),
                Err(SubjectTokenError::UnsupportedAlgorithm),
                "{alg}"
            );
        }
    }
    // A genuine HS512 token made with the right secret is still refused.
    let mut header = Header::new(Algorithm::HS512);
    header.kid = Some("k1".to_owned());
    let key = EncodingKey::from_secret(SECRET).expect("test fixture");
    let hs512 = jsonwebtoken::encode(&header, &good_claims(), &key).expect("test fixture");
    assert_eq!(check(&hs512), Err(SubjectTokenError::UnsupportedAlgorithm));
    let no_alg = craft(json!({"kid": "k1"}), good_claims());
    assert_eq!(check(&no_alg), Err(SubjectTokenError::Malformed));
    let twice = format!(
        "{}.{claims}.c2ln",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","alg":"none","kid":"k"}"#)
    );
    assert_eq!(check(&twice), Err(SubjectTokenError::Malformed));
}

#[test]
fn kid_is_required() {
    let missing = SubjectTokenError::MissingKeyId;
    assert_eq!(
        check(&craft(json!({"alg": "HS256"}), good_claims())),
        Err(missing)
    );
    assert_eq!(
        check(&craft(json!({"alg": "HS256", "kid": null}), good_claims())),
        Err(missing)
    );
    assert_eq!(
        peek_kid(&issue("", SECRET, "u", NOW, NOW + 1)),
        Err(missing)
    );
    let numeric = craft(json!({"alg": "HS256", "kid": 7}), good_claims());
    assert_eq!(peek_kid(&numeric), Err(SubjectTokenError::Malformed));
    let long = issue(&"k".repeat(129), SECRET, "u", NOW, NOW + 1);
    assert_eq!(peek_kid(&long), Err(SubjectTokenError::Malformed));
}

#[test]
fn expiry_rules() {
    use SubjectTokenError::*;
    assert!(times(NOW, NOW).is_ok());
    assert!(times(NOW - 100, NOW - 4).is_ok(), "within 5 s leeway");
    assert_eq!(times(NOW - 100, NOW - 5), Err(Expired));
    assert_eq!(times(NOW - 2 * DAY, NOW - DAY), Err(Expired));
    assert!(times(NOW, NOW + DAY).is_ok());
    assert_eq!(times(NOW, NOW + DAY + 1), Err(ExpiryTooFar));
    assert!(
        times(NOW + 60, NOW + 60 + DAY).is_ok(),
        "skewed iat, at the bound"
    );
    assert_eq!(
        times(NOW - 3600, NOW + DAY),
        Err(ExpiryTooFar),
        "exp > iat + 24 h"
    );
    assert_eq!(times(NOW + 61, NOW + 600), Err(IssuedInFuture));
    assert_eq!(times(i64::MIN, i64::MAX), Err(ExpiryTooFar));
    assert_eq!(times(i64::MAX, i64::MAX), Err(IssuedInFuture));
    assert_eq!(times(i64::MIN, i64::MIN), Err(Expired));
}

#[test]
fn subject_rules() {
    let sub = |s: &str| check(&issue("k1", SECRET, s, NOW, NOW + 60));
    assert_eq!(
        sub(&"é".repeat(128))
            .expect("test fixture")
            .subject
            .chars()
            .count(),
        128
    );
    assert!(sub("user with spaces ✓").is_ok());
    for bad in [
        String::new(),
        "x".repeat(129),
        "a\nb".to_owned(),
        "\u{0}".to_owned(),
    ] {
        assert_eq!(sub(&bad), Err(SubjectTokenError::InvalidSubject), "{bad:?}");
    }
}

#[test]
fn claims_must_be_present_and_typed() {
    let bad_claims = [
        json!({"iat": NOW, "exp": NOW + 60}),
        json!({"sub": "u", "exp": NOW + 60}),
        json!({"sub": "u", "iat": NOW}),
        json!({"sub": 5, "iat": NOW, "exp": NOW + 60}),
        json!({"sub": "u", "iat": NOW, "exp": (NOW + 60).to_string()}),
        json!({"sub": "u", "iat": NOW, "exp": 1.75e9}),
        json!({"sub": null, "iat": NOW, "exp": NOW + 60}),
        json!([1, 2]),
    ];
    for claims in bad_claims {
        let token = craft(json!({"alg": "HS256", "kid": "k1"}), claims.clone());
        assert_eq!(check(&token), Err(SubjectTokenError::Malformed), "{claims}");
    }
    // Extra claims (jti, aud, nbf, ...) from common JWT libraries are ignored.
    let extra = json!({"sub": "u", "iat": NOW, "exp": NOW + 60, "aud": "x", "nbf": NOW + 999});
    assert!(check(&craft(json!({"alg": "HS256", "kid": "k1"}), extra)).is_ok());
}

#[test]
fn tampering_is_refused_without_panics() {
    let token = issue("k1", SECRET, "user-1", NOW, NOW + 600);
    let parts: Vec<&str> = token.split('.').collect();
    let forged = json!({"sub": "admin", "iat": NOW, "exp": NOW + 600});
    let swapped = format!("{}.{}.{}", parts[0], b64(&forged), parts[2]);
    assert_eq!(check(&swapped), Err(SubjectTokenError::BadSignature));
    let other_kid = issue("k2", SECRET, "user-1", NOW, NOW + 600);
    let mixed = format!(
        "{}.{}.{}",
        other_kid.split('.').next().expect("test fixture"),
        parts[1],
        parts[2]
    );
    assert_eq!(check(&mixed), Err(SubjectTokenError::BadSignature));
    for i in 0..token.len() {
        for replacement in ['A', 'b', '-', '_', '.', '='] {
            let mut bytes = token.clone().into_bytes();
            if bytes[i] == replacement as u8 {
                continue;
            }
            bytes[i] = replacement as u8;
            let changed = String::from_utf8(bytes).expect("test fixture");
            assert!(check(&changed).is_err(), "position {i} -> {replacement}");
        }
    }
    for len in 0..token.len() {
        assert!(check(&token[..len]).is_err(), "prefix {len}");
    }
}

#[test]
fn shapes_and_garbage() {
    assert!(looks_like_jwt("a.b.c"));
    for s in [
        "", "a", "a.b", "a.b.c.d", ".b.c", "a..c", "a.b.", "..", "tk_abc",
    ] {
        assert!(!looks_like_jwt(s), "{s}");
    }
    let huge = format!("{}.{}.{}", "a".repeat(MAX_TOKEN_LEN), "b", "c");
    for s in ["", ".", "..", "a.b.c", "!!!.!!!.!!!", "e30.e30.e30", &huge] {
        assert_eq!(peek_kid(s), Err(SubjectTokenError::Malformed), "{:.10}", s);
        assert_eq!(check(s), Err(SubjectTokenError::Malformed), "{:.10}", s);
    }
}
