use super::*;
use hmac::KeyInit;
use sluice_durable::ids::{ApplicationId, CommandId, NamespaceId};

const NOW: i64 = 1_750_000_000;

fn secret(fill: u8) -> String {
    URL_SAFE_NO_PAD.encode([fill; 32])
}

fn keys(spec: &str) -> TicketKeys {
    TicketKeys::parse(spec).expect("test fixture")
}

fn claims() -> TicketClaims {
    TicketClaims {
        application_id: ApplicationId::new_v7(),
        namespace_id: NamespaceId::from_uuid(Uuid::new_v4()),
        command_id: CommandId::new_v7(),
        expires_at_unix: NOW + 600,
        queue: Some(QueueClaim {
            seq: 7_000_001,
            tag: queue_tag("ns:job:r"),
            accepted_at_ms: NOW * 1000,
        }),
    }
}

#[test]
fn round_trip() {
    let k = keys(&format!("k1:{}", secret(1)));
    let c = claims();
    let t = k.sign(&c);
    assert_eq!(k.verify(&t, NOW), Ok(c));
    assert!(
        t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
}

#[test]
fn format_is_pinned() {
    let k = keys(&format!("abc:{}", secret(9)));
    let c = TicketClaims {
        application_id: ApplicationId::from_uuid(Uuid::from_bytes([1; 16])),
        namespace_id: NamespaceId::from_uuid(Uuid::from_bytes([2; 16])),
        command_id: CommandId::from_uuid(Uuid::from_bytes([3; 16])),
        expires_at_unix: -2,
        queue: Some(QueueClaim {
            seq: 0x0102,
            tag: 0x0a0b_0c0d_0e0f_1011,
            accepted_at_ms: -3,
        }),
    };
    let bytes = URL_SAFE_NO_PAD.decode(k.sign(&c)).expect("test fixture");
    let mut expected = vec![3u8, 3, b'a', b'b', b'c'];
    expected.extend([1; 16]);
    expected.extend([2; 16]);
    expected.extend([3; 16]);
    expected.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
    expected.extend([0, 0, 0, 0, 0, 0, 1, 2]);
    expected.extend([0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11]);
    expected.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd]);
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&[9; 32]).expect("test fixture");
    mac.update(b"sluice-ticket-v3");
    mac.update(&expected);
    expected.extend(mac.finalize().into_bytes().as_slice());
    assert_eq!(bytes, expected);
    assert_eq!(
        queue_tag("abc"),
        0xba78_16bf_8f01_cfea,
        "the first 8 bytes of SHA-256(\"abc\")"
    );
}

/// A ticket minted without its sequence (a replay, a read) carries none: its polls go to Redis.
#[test]
fn a_ticket_without_a_sequence_has_no_queue_claim() {
    let k = keys(&format!("k1:{}", secret(1)));
    let mut c = claims();
    c.queue = Some(QueueClaim {
        seq: 0,
        tag: 5,
        accepted_at_ms: 6,
    });
    let verified = k.verify(&k.sign(&c), NOW).expect("verifies");
    assert_eq!(verified.queue, None);
    c.queue = None;
    let ticket = k.sign(&c);
    assert_eq!(k.verify(&ticket, NOW), Ok(c));
    let bytes = URL_SAFE_NO_PAD.decode(&ticket).expect("base64url");
    assert_eq!(
        bytes[0], 2,
        "version 2, as gateways before version 3 sign it"
    );
    assert_eq!(bytes.len(), 2 + 2 + BODY_LEN_V2 + MAC_LEN);
}

/// A version 2 ticket (issued before the queue claim) still verifies, without a queue claim;
/// under the v3 domain (or relabelled as v3) it is refused.
#[test]
fn a_version_2_ticket_still_verifies() {
    let k = keys(&format!("abc:{}", secret(9)));
    let mut body = vec![2u8, 3, b'a', b'b', b'c'];
    body.extend([1; 16]);
    body.extend([2; 16]);
    body.extend([3; 16]);
    body.extend((NOW + 60).to_be_bytes());
    let claims = k
        .verify(&sign(&body, b"sluice-ticket-v2"), NOW)
        .expect("a v2 ticket verifies");
    assert_eq!(claims.expires_at_unix, NOW + 60);
    assert_eq!(claims.queue, None);
    assert_eq!(
        k.verify(&sign(&body, b"sluice-ticket-v3"), NOW),
        Err(TicketError::BadSignature)
    );
    let mut relabelled = body.clone();
    relabelled[0] = 3;
    assert_eq!(
        k.verify(&sign(&relabelled, b"sluice-ticket-v3"), NOW),
        Err(TicketError::Malformed),
        "a v2 body is too short for v3"
    );
}

/// A version 1 ticket (issued before the generation was dropped) still verifies until it
/// expires, its generation read past; its MAC is checked under its own domain, so a v1 body
/// relabelled as v2 (or the reverse) is refused.
#[test]
fn a_version_1_ticket_still_verifies() {
    let k = keys(&format!("abc:{}", secret(9)));
    let mut body = vec![1u8, 3, b'a', b'b', b'c'];
    body.extend([1; 16]);
    body.extend([2; 16]);
    body.extend([3; 16]);
    body.extend([1, 2, 3, 4, 5, 6, 7, 8]);
    body.extend((NOW + 60).to_be_bytes());
    let claims = k
        .verify(&sign(&body, b"sluice-ticket-v1"), NOW)
        .expect("a v1 ticket verifies");
    assert_eq!(
        claims.command_id,
        CommandId::from_uuid(Uuid::from_bytes([3; 16]))
    );
    assert_eq!(claims.expires_at_unix, NOW + 60);
    assert_eq!(
        k.verify(&sign(&body, b"sluice-ticket-v2"), NOW),
        Err(TicketError::BadSignature),
        "a v1 body signed under the v2 domain"
    );
    assert_eq!(
        k.verify(&sign(&body, b"sluice-ticket-v1"), NOW + 60),
        Err(TicketError::Expired)
    );
}

#[test]
fn keyed_mac_matches_hmac_for_every_key_length() {
    for len in [0usize, 1, 31, 32, 63, 64, 65, 128, 1000] {
        let secret: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let ours = keyed_mac(&secret)
            .chain_update(b"msg")
            .finalize()
            .into_bytes();
        let reference = <HmacSha256 as KeyInit>::new_from_slice(&secret)
            .expect("test fixture")
            .chain_update(b"msg")
            .finalize()
            .into_bytes();
        assert_eq!(ours, reference, "key length {len}");
    }
}

#[test]
fn every_flipped_bit_is_refused() {
    let k = keys(&format!("k1:{}", secret(1)));
    let bytes = URL_SAFE_NO_PAD
        .decode(k.sign(&claims()))
        .expect("test fixture");
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let res = k.verify(&URL_SAFE_NO_PAD.encode(&b), NOW);
            assert!(res.is_err(), "byte {i} bit {bit} accepted");
        }
    }
}

#[test]
fn every_changed_character_is_refused() {
    let k = keys(&format!("k1:{}", secret(1)));
    let t = k.sign(&claims());
    for i in 0..t.len() {
        for replacement in ['A', 'z', '0', '-', '_', '=', '.', '+', '/', ' ', 'é'] {
            let mut chars: Vec<char> = t.chars().collect();
            if chars[i] == replacement {
                continue;
            }
            chars[i] = replacement;
            let changed: String = chars.into_iter().collect();
            assert!(
                k.verify(&changed, NOW).is_err(),
                "position {i} -> {replacement:?}"
            );
        }
    }
}

#[test]
fn every_truncation_and_extension_is_refused() {
    let k = keys(&format!("k1:{}", secret(1)));
    let t = k.sign(&claims());
    for len in 0..t.len() {
        assert!(
            k.verify(&t[..len], NOW).is_err(),
            "prefix of {len} accepted"
        );
    }
    let bytes = URL_SAFE_NO_PAD.decode(&t).expect("test fixture");
    for len in 0..bytes.len() {
        let cut = URL_SAFE_NO_PAD.encode(&bytes[..len]);
        assert_eq!(
            k.verify(&cut, NOW),
            Err(TicketError::Malformed),
            "{len} bytes"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        k.verify(&URL_SAFE_NO_PAD.encode(longer), NOW),
        Err(TicketError::Malformed)
    );
    assert!(k.verify(&format!("{t}A"), NOW).is_err());
}

#[test]
fn garbage_never_panics() {
    let k = keys(&format!("k1:{}", secret(1)));
    let big = "A".repeat(1 << 20);
    let over = "A".repeat(MAX_TICKET_LEN + 1);
    for input in ["", "!", "====", "a.b.c", "AQ", "AQE", "\u{0}", &big, &over] {
        assert_eq!(
            k.verify(input, NOW),
            Err(TicketError::Malformed),
            "{:?}",
            &input[..1.min(input.len())]
        );
    }
    // Every length of structurally plausible bytes, including kid lengths of up to 255.
    for len in 0..200 {
        for kid_len in [0u8, 1, 16, 17, 255] {
            let mut b = vec![0x41u8; len];
            if len > 1 {
                b[0] = VERSION;
                b[1] = kid_len;
            }
            let _ = k.verify(&URL_SAFE_NO_PAD.encode(&b), NOW);
        }
    }
}

#[test]
fn other_keys_are_refused() {
    let k1 = keys(&format!("k1:{}", secret(1)));
    let same_kid_other_secret = keys(&format!("k1:{}", secret(2)));
    let other_kid = keys(&format!("k2:{}", secret(1)));
    let t = k1.sign(&claims());
    assert_eq!(
        same_kid_other_secret.verify(&t, NOW),
        Err(TicketError::BadSignature)
    );
    assert_eq!(other_kid.verify(&t, NOW), Err(TicketError::UnknownKey));
}

#[test]
fn rotation_newest_signs_older_still_verify() {
    let old = keys(&format!("old:{}", secret(1)));
    let rotated = keys(&format!("new:{},old:{}", secret(2), secret(1)));
    let c = claims();
    let old_ticket = old.sign(&c);
    assert_eq!(rotated.verify(&old_ticket, NOW), Ok(c));
    let new_ticket = rotated.sign(&c);
    assert_eq!(
        keys(&format!("new:{}", secret(2))).verify(&new_ticket, NOW),
        Ok(c)
    );
    assert_eq!(old.verify(&new_ticket, NOW), Err(TicketError::UnknownKey));
    let retired = keys(&format!("new:{}", secret(2)));
    assert_eq!(
        retired.verify(&old_ticket, NOW),
        Err(TicketError::UnknownKey)
    );
}

#[test]
fn expiry() {
    let k = keys(&format!("k1:{}", secret(1)));
    let c = claims();
    let t = k.sign(&c);
    assert_eq!(k.verify(&t, c.expires_at_unix - 1), Ok(c));
    assert_eq!(k.verify(&t, c.expires_at_unix), Err(TicketError::Expired));
    assert_eq!(k.verify(&t, i64::MAX), Err(TicketError::Expired));
}

#[test]
fn longest_ticket_fits_the_limit() {
    let k = keys(&format!("{}:{}", "k".repeat(16), secret(1)));
    let t = k.sign(&claims());
    assert!(t.len() <= MAX_TICKET_LEN, "{}", t.len());
    assert!(k.verify(&t, NOW).is_ok());
}

#[test]
fn key_spec_errors_name_the_entry_but_not_the_secret() {
    let s = secret(7);
    let short = URL_SAFE_NO_PAD.encode([7u8; 31]);
    let cases = [
        (format!("k1{s}"), 1, "expected kid:secret"),
        (format!("k1:{s},"), 2, "expected kid:secret"),
        (
            format!(":{s}"),
            1,
            "kid must be 1-16 characters of A-Z a-z 0-9 _ -",
        ),
        (
            format!("{}:{s}", "k".repeat(17)),
            1,
            "kid must be 1-16 characters of A-Z a-z 0-9 _ -",
        ),
        (
            format!("k.1:{s}"),
            1,
            "kid must be 1-16 characters of A-Z a-z 0-9 _ -",
        ),
        (format!("a:{s},a:{s}"), 2, "duplicate kid"),
        (
            format!("a:{s},b:{s}="),
            2,
            "secret must be base64url without padding",
        ),
        (
            format!("a:+{}", &s[1..]),
            1,
            "secret must be base64url without padding",
        ),
        (
            format!("a:{short}"),
            1,
            "secret must decode to at least 32 bytes",
        ),
    ];
    for (spec, position, reason) in cases {
        let e = TicketKeys::parse(&spec).expect_err("should be refused");
        assert_eq!(
            e,
            TicketKeyError::InvalidEntry { position, reason },
            "{spec}"
        );
        assert!(!e.to_string().contains(&s) && !e.to_string().contains(&short));
    }
    assert_eq!(
        TicketKeys::parse("").expect_err("should be refused"),
        TicketKeyError::Empty
    );
    assert_eq!(
        TicketKeys::parse("  ").expect_err("should be refused"),
        TicketKeyError::Empty
    );
    assert!(TicketKeys::parse(&format!(" a:{s} , b_-9:{s}\n")).is_ok());
}

#[test]
fn debug_hides_secrets_and_generate_works() {
    let (spec, generated) = TicketKeys::generate();
    let secret = spec.strip_prefix("k1:").expect("test fixture");
    assert_eq!(
        URL_SAFE_NO_PAD.decode(secret).expect("test fixture").len(),
        32
    );
    let debug = format!("{generated:?}");
    assert!(debug.contains("k1") && !debug.contains(secret), "{debug}");
    let parsed = keys(&spec);
    let c = claims();
    assert_eq!(parsed.verify(&generated.sign(&c), NOW), Ok(c));
    assert_ne!(TicketKeys::generate().0, spec);
}

#[test]
fn error_messages_do_not_distinguish_keys() {
    assert_eq!(
        TicketError::UnknownKey.to_string(),
        TicketError::BadSignature.to_string()
    );
}

/// A ticket of an older format as its gateway signed it: `body` MACed under `domain` with the
/// secret `[9; 32]` (the secret of `keys(&format!("abc:{}", secret(9)))`).
fn sign(body: &[u8], domain: &[u8]) -> String {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&[9; 32]).expect("test fixture");
    mac.update(domain);
    mac.update(body);
    let mut signed = body.to_vec();
    signed.extend(mac.finalize().into_bytes().as_slice());
    URL_SAFE_NO_PAD.encode(signed)
}

fn place() -> PlaceClaims {
    PlaceClaims {
        namespace_id: NamespaceId::from_uuid(Uuid::new_v4()),
        place_id: Uuid::new_v4(),
        expires_at_unix: NOW + 600,
        seat: Some(Seat {
            room: "launch-day".into(),
            ord: 4_242,
            joined_at_ms: 1_700_000_000_123,
            prequeue: false,
        }),
    }
}

#[test]
fn a_place_ticket_round_trips_and_is_pinned() {
    let k = keys(&format!("abc:{}", secret(9)));
    let c = PlaceClaims {
        namespace_id: NamespaceId::from_uuid(Uuid::from_bytes([2; 16])),
        place_id: Uuid::from_bytes([5; 16]),
        expires_at_unix: -2,
        seat: None,
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(k.sign_place(&c))
        .expect("test fixture");
    let mut expected = vec![4u8, 3, b'a', b'b', b'c'];
    expected.extend([2; 16]);
    expected.extend([5; 16]);
    expected.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&[9; 32]).expect("test fixture");
    mac.update(b"sluice-ticket-room-v1");
    mac.update(&expected);
    expected.extend(mac.finalize().into_bytes().as_slice());
    assert_eq!(bytes, expected);

    let live = place();
    let t = k.sign_place(&live);
    let expires_at_unix = live.expires_at_unix;
    assert_eq!(k.verify_any(&t, NOW), Ok(Ticket::Place(live)));
    assert_eq!(k.verify_any(&t, expires_at_unix), Err(TicketError::Expired));
}

/// The bytes of a seated place ticket (version 5) signed with kid `abc`, secret `[9; 32]`.
fn seated_bytes(ord: i64, prequeue: u8, room: &[u8]) -> Vec<u8> {
    let mut body = vec![5u8, 3, b'a', b'b', b'c'];
    body.extend([2; 16]);
    body.extend([5; 16]);
    body.extend((NOW + 60).to_be_bytes());
    body.extend(ord.to_be_bytes());
    body.extend(1_700_000_000_123i64.to_be_bytes());
    body.push(prequeue);
    body.push(room.len() as u8);
    body.extend(room);
    body
}

#[test]
fn a_seated_place_ticket_is_pinned() {
    let k = keys(&format!("abc:{}", secret(9)));
    let claims = PlaceClaims {
        namespace_id: NamespaceId::from_uuid(Uuid::from_bytes([2; 16])),
        place_id: Uuid::from_bytes([5; 16]),
        expires_at_unix: NOW + 60,
        seat: Some(Seat {
            room: "gate".into(),
            ord: 0,
            joined_at_ms: 1_700_000_000_123,
            prequeue: true,
        }),
    };
    let expected = sign(&seated_bytes(0, 1, b"gate"), b"sluice-ticket-room-v2");
    assert_eq!(k.sign_place(&claims), expected);
    assert_eq!(k.verify_any(&expected, NOW), Ok(Ticket::Place(claims)));
}

#[test]
fn a_seated_ticket_with_a_bad_seat_is_refused_though_signed() {
    let k = keys(&format!("abc:{}", secret(9)));
    let long = [b'r'; 65];
    for body in [
        seated_bytes(7, 2, b"gate"),
        seated_bytes(7, 0, b""),
        seated_bytes(7, 0, &long),
        seated_bytes(7, 0, &[0xff, 0xfe]),
    ] {
        let ticket = sign(&body, b"sluice-ticket-room-v2");
        assert_eq!(k.verify_any(&ticket, NOW), Err(TicketError::Malformed));
    }
    // A room length past the end, or short of it.
    let mut body = seated_bytes(7, 0, b"gate");
    let at = body.len() - 5;
    for len in [5u8, 3] {
        body[at] = len;
        let ticket = sign(&body, b"sluice-ticket-room-v2");
        assert_eq!(k.verify_any(&ticket, NOW), Err(TicketError::Malformed));
    }
    // A seated body under version 4's domain, or a version 4 one relabelled 5: the MAC differs.
    let mut relabelled = seated_bytes(7, 0, b"gate");
    relabelled[0] = 4;
    let ticket = sign(&relabelled, b"sluice-ticket-room-v1");
    assert!(k.verify_any(&ticket, NOW).is_err());
    let ticket = sign(&seated_bytes(7, 0, b"gate"), b"sluice-ticket-room-v1");
    assert_eq!(k.verify_any(&ticket, NOW), Err(TicketError::BadSignature));
}

#[test]
fn a_place_ticket_is_never_a_command_ticket_nor_the_reverse() {
    let k = keys(&format!("k1:{}", secret(1)));
    let place_ticket = k.sign_place(&place());
    assert_eq!(k.verify(&place_ticket, NOW), Err(TicketError::Malformed));
    let command = claims();
    assert_eq!(
        k.verify_any(&k.sign(&command), NOW),
        Ok(Ticket::Command(command))
    );
    // Relabelled as a command ticket (or a command ticket as a place's), the MAC's domain
    // differs: refused, never read as the other capability.
    let mut bytes = URL_SAFE_NO_PAD.decode(&place_ticket).expect("test fixture");
    for version in [1u8, 2, 3] {
        bytes[0] = version;
        assert!(k.verify_any(&URL_SAFE_NO_PAD.encode(&bytes), NOW).is_err());
    }
}

#[test]
fn every_flipped_bit_of_a_place_ticket_is_refused() {
    let k = keys(&format!("k1:{}", secret(1)));
    let bytes = URL_SAFE_NO_PAD
        .decode(k.sign_place(&place()))
        .expect("test fixture");
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            let res = k.verify_any(&URL_SAFE_NO_PAD.encode(&b), NOW);
            assert!(res.is_err(), "byte {i} bit {bit} accepted");
        }
    }
}
