//! Properties of ticket verification, on arbitrary input: it never panics, a signed ticket
//! verifies to its claims, and any one-character change, truncation or other key is refused.

use super::*;
use proptest::prelude::*;

const NOW: i64 = 1_750_000_000;
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn keys_of(kid: &str, secret: &[u8; 32]) -> TicketKeys {
    let spec = format!("{kid}:{}", URL_SAFE_NO_PAD.encode(secret));
    match TicketKeys::parse(&spec) {
        Ok(keys) => keys,
        Err(e) => panic!("generated spec refused: {e}"),
    }
}

fn kid() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,16}"
}

prop_compose! {
    fn claims()(
        application in any::<[u8; 16]>(),
        namespace in any::<[u8; 16]>(),
        command in any::<[u8; 16]>(),
        lifetime in 1..=i64::MAX - NOW,
        queue in proptest::option::of((1..=u64::MAX, any::<u64>(), any::<i64>())),
    ) -> TicketClaims {
        TicketClaims {
            application_id: Uuid::from_bytes(application).into(),
            namespace_id: Uuid::from_bytes(namespace).into(),
            command_id: Uuid::from_bytes(command).into(),
            expires_at_unix: NOW + lifetime,
            queue: queue.map(|(seq, tag, accepted_at_ms)| QueueClaim { seq, tag, accepted_at_ms }),
        }
    }
}

/// Strings a caller may send in the path: anything at all, base64url text of plausible
/// lengths, and base64url of bytes that start like a ticket (a version and a kid length), so
/// every later check is reached too.
fn caller_ticket() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::collection::vec(proptest::sample::select(ALPHABET), 0..=600)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        (
            1u8..=4,
            any::<u8>(),
            proptest::collection::vec(any::<u8>(), 0..=200)
        )
            .prop_map(|(version, kid_len, rest)| {
                // Version 3 signs now; versions 1 and 2 still verify until they expire.
                let mut bytes = vec![version, kid_len % 20];
                bytes.extend(rest);
                URL_SAFE_NO_PAD.encode(bytes)
            }),
    ]
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(256))]

    #[test]
    fn verify_is_total(ticket in caller_ticket(), now in any::<i64>()) {
        let keys = keys_of("k1", &[7; 32]);
        // Any refusal is a value; a forged ticket never verifies.
        prop_assert!(keys.verify(&ticket, now).is_err());
    }

    #[test]
    fn signed_tickets_verify_to_their_claims(
        kid in kid(),
        secret in any::<[u8; 32]>(),
        claims in claims(),
    ) {
        let keys = keys_of(&kid, &secret);
        let ticket = keys.sign(&claims);
        prop_assert!(ticket.len() <= MAX_TICKET_LEN);
        prop_assert_eq!(keys.verify(&ticket, NOW), Ok(claims));
        prop_assert_eq!(
            keys.verify(&ticket, claims.expires_at_unix),
            Err(TicketError::Expired)
        );
    }

    #[test]
    fn any_one_character_change_is_refused(
        kid in kid(),
        secret in any::<[u8; 32]>(),
        claims in claims(),
        at in any::<prop::sample::Index>(),
        replacement in proptest::sample::select(ALPHABET),
    ) {
        let keys = keys_of(&kid, &secret);
        let ticket = keys.sign(&claims);
        let at = at.index(ticket.len());
        let mut bytes = ticket.clone().into_bytes();
        prop_assume!(bytes[at] != replacement);
        bytes[at] = replacement;
        let changed = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert!(keys.verify(&changed, NOW).is_err(), "{} verified", changed);
    }

    #[test]
    fn truncated_extended_or_shifted_tickets_are_refused(
        secret in any::<[u8; 32]>(),
        claims in claims(),
        cut in any::<prop::sample::Index>(),
        extra in proptest::collection::vec(proptest::sample::select(ALPHABET), 1..8),
    ) {
        let keys = keys_of("k1", &secret);
        let ticket = keys.sign(&claims);
        let cut = cut.index(ticket.len());
        let truncated = &ticket[..cut];
        prop_assert!(keys.verify(truncated, NOW).is_err());
        let extra = String::from_utf8_lossy(&extra).into_owned();
        let (head, tail) = ticket.split_at(cut);
        for changed in [
            format!("{ticket}{extra}"),
            format!("{extra}{ticket}"),
            format!("{head}{extra}{tail}"),
        ] {
            prop_assert!(keys.verify(&changed, NOW).is_err(), "{} verified", changed);
        }
    }

    #[test]
    fn other_keys_refuse(
        secret in any::<[u8; 32]>(),
        other in any::<[u8; 32]>(),
        claims in claims(),
    ) {
        prop_assume!(secret != other);
        let ticket = keys_of("k1", &secret).sign(&claims);
        prop_assert_eq!(
            keys_of("k1", &other).verify(&ticket, NOW),
            Err(TicketError::BadSignature)
        );
        prop_assert_eq!(
            keys_of("k2", &secret).verify(&ticket, NOW),
            Err(TicketError::UnknownKey)
        );
    }

    #[test]
    fn key_specs_parse_or_refuse_without_panicking(spec in any::<String>()) {
        // Configuration, not caller bytes, but refused by value all the same.
        let _ = TicketKeys::parse(&spec);
    }
}
