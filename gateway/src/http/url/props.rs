//! Properties of path and query decoding, on arbitrary input: it never panics, it inverts
//! percent-encoding exactly (U+0000 refused), and a query is read back pair for pair, with
//! repeats and unknown names refused on the name.

use super::*;
use proptest::prelude::*;

/// `s` with every byte outside `[A-Za-z0-9._~-]` escaped (and, when `random` says so for a
/// byte, the safe ones too, in either case of hex digit).
fn encode(s: &str, random: &[bool], form: bool) -> String {
    let mut out = String::new();
    for (i, byte) in s.bytes().enumerate() {
        let force = random
            .get(i % random.len().max(1))
            .copied()
            .unwrap_or(false);
        let safe = byte.is_ascii_alphanumeric() || b"._~-".contains(&byte);
        if form && byte == b' ' && !force {
            out.push('+');
        } else if safe && !force {
            out.push(char::from(byte));
        } else if force && i % 2 == 0 {
            out.push_str(&format!("%{byte:02x}"));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

const NAMES: &[&str] = &["limit", "cursor", "resource_key", "subject"];

proptest! {
    #![proptest_config(sluice_testkit::props::config(256))]

    #[test]
    fn decoding_is_total(s in any::<String>(), raw in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_segment(&s, "path");
        let _ = parse_query(Some(&s), NAMES);
        // `%` followed by anything, and escapes of bytes that are not UTF-8.
        let escapes: String = raw.iter().map(|b| format!("%{b:02x}")).collect();
        let decoded = decode_segment(&escapes, "path");
        let expected = String::from_utf8(raw).ok().filter(|s| !s.contains('\0'));
        prop_assert_eq!(decoded.ok(), expected);
    }

    #[test]
    fn segments_round_trip(s in any::<String>(), random in proptest::collection::vec(any::<bool>(), 1..8)) {
        // U+0000 is refused, however it is written; everything else decodes back.
        let expected = if s.contains('\0') { None } else { Some(s.clone()) };
        prop_assert_eq!(decode_segment(&encode(&s, &random, false), "path").ok(), expected.clone());
        // In a path `+` is a plus: only a query reads it as a space.
        prop_assert_eq!(decode_segment(&s.replace('%', "%25"), "path").ok(), expected);
    }

    #[test]
    fn queries_round_trip(
        pairs in proptest::collection::btree_map(proptest::sample::select(NAMES), any::<String>(), 0..4),
        random in proptest::collection::vec(any::<bool>(), 1..8),
    ) {
        let query: Vec<String> = pairs
            .iter()
            .map(|(name, value)| format!("{}={}", encode(name, &random, true), encode(value, &random, true)))
            .collect();
        let parsed = parse_query(Some(&query.join("&")), NAMES);
        let expected: Vec<(String, String)> =
            pairs.iter().map(|(n, v)| ((*n).to_owned(), v.clone())).collect();
        if pairs.values().any(|v| v.contains('\0')) {
            prop_assert!(parsed.is_err());
        } else {
            prop_assert_eq!(parsed, Ok(expected));
        }
    }

    #[test]
    fn repeats_and_unknown_names_are_refused_on_the_name(
        name in proptest::sample::select(NAMES),
        first in "[a-z0-9]{0,5}",
        second in "[a-z0-9]{0,5}",
        unknown in "[a-z_]{1,12}",
    ) {
        let repeated = parse_query(Some(&format!("{name}={first}&{name}={second}")), NAMES);
        prop_assert_eq!(repeated.map_err(|e| e.field), Err(name.to_owned()));
        prop_assume!(!NAMES.contains(&unknown.as_str()));
        let refused = parse_query(Some(&format!("{name}={first}&{unknown}={second}")), NAMES);
        prop_assert_eq!(refused.map_err(|e| e.field), Err(unknown));
    }

    #[test]
    fn command_codes_and_ids_are_refused_by_value(s in any::<String>()) {
        let _ = crate::handlers::is_command_code(&s);
        let parsed = crate::handlers::commands::parse_command_id(&s);
        prop_assert_eq!(parsed.is_ok(), uuid::Uuid::parse_str(&s).is_ok());
    }
}
