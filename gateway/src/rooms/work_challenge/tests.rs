use super::*;

fn keys(spec: &str) -> TicketKeys {
    match TicketKeys::parse(spec) {
        Ok(keys) => keys,
        Err(error) => panic!("test keys must parse: {error}"),
    }
}

const K1: &str = "k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
const K2: &str = "k2:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA";
const NOW: i64 = 1_800_000_000;

fn holder(room: &str, subject: &str) -> Holder<'static> {
    Holder {
        namespace_id: NamespaceId::from(Uuid::from_u128(7)),
        room: Box::leak(room.to_owned().into_boxed_str()),
        subject: Box::leak(subject.to_owned().into_boxed_str()),
    }
}

/// A nonce that does not solve `challenge` at `bits` (bits above 0).
fn wrong_nonce(challenge: &str, bits: u8) -> String {
    (0u64..)
        .map(|n| n.to_string())
        .find(|n| leading_zero_bits(&work_hash(challenge, n)) < u32::from(bits))
        .unwrap_or_default()
}

#[test]
fn a_solved_challenge_verifies_once_for_its_holder_only() {
    let keys = keys(K1);
    let alice = holder("drop", "alice");
    let challenge = issue(&keys, alice, 10, NOW);
    assert_eq!(challenge.expires_at_unix, NOW + CHALLENGE_SECONDS);
    let nonce = solve(&challenge.text, 10);
    assert!(leading_zero_bits(&work_hash(&challenge.text, &nonce)) >= 10);
    assert_eq!(
        verify(&keys, alice, &challenge.text, &nonce, NOW + 5),
        Ok((challenge.id, 10))
    );
    let elsewhere = [
        holder("drop", "bob"),
        holder("other", "alice"),
        holder("dro", "palice"),
        Holder {
            namespace_id: NamespaceId::from(Uuid::from_u128(8)),
            ..alice
        },
    ];
    for other in elsewhere {
        assert_eq!(
            verify(&keys, other, &challenge.text, &nonce, NOW + 5),
            Err(WorkError::NotIssued),
            "{other:?}"
        );
    }
}

#[test]
fn time_and_work_are_enforced() {
    let keys = keys(K1);
    let alice = holder("drop", "alice");
    let challenge = issue(&keys, alice, 12, NOW);
    let nonce = solve(&challenge.text, 12);
    let at = |now| verify(&keys, alice, &challenge.text, &nonce, now);
    assert!(at(NOW + CHALLENGE_SECONDS - 1).is_ok());
    assert_eq!(at(NOW + CHALLENGE_SECONDS), Err(WorkError::Expired));
    assert!(at(NOW - CLOCK_SKEW_SECONDS).is_ok());
    assert_eq!(at(NOW - CLOCK_SKEW_SECONDS - 1), Err(WorkError::NotIssued));
    let wrong = wrong_nonce(&challenge.text, 12);
    assert_eq!(
        verify(&keys, alice, &challenge.text, &wrong, NOW),
        Err(WorkError::Unsolved)
    );
}

#[test]
fn lowering_the_bits_breaks_the_signature() {
    let keys = keys(K1);
    let alice = holder("drop", "alice");
    let challenge = issue(&keys, alice, 20, NOW);
    let mut bytes = URL_SAFE_NO_PAD.decode(&challenge.text).unwrap_or_default();
    let bits_at = bytes.len() - MAC_LEN - 1;
    assert_eq!(bytes[bits_at], 20);
    bytes[bits_at] = 0;
    let forged = URL_SAFE_NO_PAD.encode(&bytes);
    assert_eq!(
        verify(&keys, alice, &forged, "0", NOW),
        Err(WorkError::NotIssued)
    );
}

#[test]
fn rotated_keys_verify_until_retired() {
    let alice = holder("drop", "alice");
    let old = issue(&keys(K1), alice, 4, NOW);
    let nonce = solve(&old.text, 4);
    let rotated = keys(&format!("{K2},{K1}"));
    assert!(verify(&rotated, alice, &old.text, &nonce, NOW).is_ok());
    assert_eq!(
        verify(&keys(K2), alice, &old.text, &nonce, NOW),
        Err(WorkError::NotIssued)
    );
}

#[test]
fn any_input_is_answered_without_panicking() {
    let keys = keys(K1);
    let alice = holder("drop", "alice");
    let good = issue(&keys, alice, 1, NOW);
    let long = "A".repeat(MAX_CHALLENGE_LEN + 1);
    let cut = &good.text[..good.text.len() - 4];
    for challenge in ["", "!!!", "AAAA", long.as_str(), cut] {
        assert_eq!(
            verify(&keys, alice, challenge, "1", NOW),
            Err(WorkError::Malformed),
            "{challenge:?}"
        );
    }
    for nonce in ["", "-1", "1.5", "12345678901234567890123", "１"] {
        assert_eq!(
            verify(&keys, alice, &good.text, nonce, NOW),
            Err(WorkError::BadNonce),
            "{nonce:?}"
        );
    }
}

#[test]
fn leading_zero_bits_counts_from_the_first_byte() {
    assert_eq!(leading_zero_bits(&[0x80]), 0);
    assert_eq!(leading_zero_bits(&[0x01, 0xff]), 7);
    assert_eq!(leading_zero_bits(&[0x00, 0x40]), 9);
    assert_eq!(leading_zero_bits(&[0x00, 0x00, 0x00]), 24);
    assert_eq!(leading_zero_bits(&[]), 0);
}
