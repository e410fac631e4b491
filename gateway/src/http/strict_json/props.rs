//! Properties of the strict body reader, on arbitrary input: it never panics, it accepts what
//! serde_json writes and reads it as serde_json does, it refuses a repeated key at any depth on
//! that key's path (however the key is escaped), and the typed accessors and `finish` take
//! exactly what the API's rules allow.

use super::*;
use proptest::prelude::*;
use serde_json::json;
use sluice_testkit::props::{json_key, json_object, json_value};

/// The key written with every character as a `\uXXXX` escape (surrogate pairs beyond the BMP):
/// the same key to a JSON reader, different bytes on the wire.
fn escaped(key: &str) -> String {
    let mut out = String::from("\"");
    for unit in key.encode_utf16() {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
    out
}

fn text(value: &Value) -> String {
    value.to_string()
}

/// Whether U+0000 is in any string or key of `value`.
fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// `object` (non-empty) written out with a second entry for `key` before its closing brace.
fn with_repeat(object: &Map<String, Value>, key: &str, escape: bool, repeat: &Value) -> String {
    let written = text(&Value::Object(object.clone()));
    let name = if escape {
        escaped(key)
    } else {
        text(&Value::from(key))
    };
    format!(
        "{},{name}:{}}}",
        &written[..written.len() - 1],
        text(repeat)
    )
}

/// Bodies a caller may send: any bytes, any JSON value, and a JSON object with one byte
/// changed, cut or added.
fn caller_body() -> impl Strategy<Value = Vec<u8>> {
    let mutated = (
        json_object(json_value()),
        any::<prop::sample::Index>(),
        any::<u8>(),
        0..3u8,
    )
        .prop_map(|(object, at, byte, how)| {
            let mut bytes = text(&Value::Object(object)).into_bytes();
            let at = at.index(bytes.len());
            match how {
                0 => bytes[at] = byte,
                1 => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, byte),
            }
            bytes
        });
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        json_value().prop_map(|v| text(&v).into_bytes()),
        mutated,
    ]
}

proptest! {
    #![proptest_config(sluice_testkit::props::config(256))]

    #[test]
    fn parse_object_is_total_and_agrees_with_serde_json(body in caller_body()) {
        match parse_object(&body) {
            Ok(map) => {
                let plain: Value = match serde_json::from_slice(&body) {
                    Ok(value) => value,
                    Err(e) => return Err(TestCaseError::fail(format!("strict accepted, serde_json refused: {e}"))),
                };
                prop_assert_eq!(Value::Object(map), plain);
            }
            Err(error) => {
                prop_assert!(!error.field.is_empty());
                prop_assert!(!error.message.is_empty());
            }
        }
    }

    #[test]
    fn what_serde_json_writes_is_read_back(object in json_object(json_value())) {
        let value = Value::Object(object);
        let body = text(&value);
        let plain: Value = serde_json::from_str(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let parsed = parse_object(body.as_bytes()).map(Value::Object);
        if has_nul(&value) {
            // PostgreSQL cannot store it: refused on its path before anything is read.
            prop_assert_eq!(parsed.map_err(|e| e.message), Err(NUL.to_owned()));
        } else {
            prop_assert_eq!(parsed, Ok(plain));
        }
    }

    #[test]
    fn u0000_is_refused_on_its_path(
        object in json_object(json_value().prop_filter("no U+0000", |v| !has_nul(v))),
        outer in "[a-z]{1,6}",
        before in "[a-z]{0,3}",
        after in "[a-z]{0,3}",
        in_key in any::<bool>(),
    ) {
        let spoiled = format!("{before}\0{after}");
        let mut inner = object.clone();
        let path = if in_key {
            inner.insert(spoiled.clone(), Value::from(1));
            format!("{outer}.{spoiled}")
        } else {
            inner.insert(outer.clone(), Value::from(spoiled.as_str()));
            format!("{outer}.{outer}")
        };
        let body = text(&json!({ outer.clone(): inner }));
        prop_assert_eq!(parse_object(body.as_bytes()), Err(FieldError::new(path, NUL)));
    }

    #[test]
    fn a_repeated_key_is_refused_on_its_path(
        object in json_object(json_value()).prop_filter("non-empty", |m| !m.is_empty()),
        pick in any::<prop::sample::Index>(),
        escape in any::<bool>(),
        repeat in json_value(),
        siblings in json_object(json_value()),
        outer in "[a-z]{1,6}",
        depth in 0..3u8,
    ) {
        prop_assume!(!has_nul(&json!([object, repeat, siblings])));
        let key = object.keys().nth(pick.index(object.len())).cloned().unwrap_or_default();
        let inner = with_repeat(&object, &key, escape, &repeat);
        let outer_key = text(&Value::from(outer.as_str()));
        let (body, path) = match depth {
            0 => (inner, key.clone()),
            1 => (format!("{{{outer_key}:{inner}}}"), format!("{outer}.{key}")),
            _ => (
                format!("{{{outer_key}:[{},{inner}]}}", text(&Value::Object(siblings))),
                format!("{outer}[1].{key}"),
            ),
        };
        prop_assert_eq!(
            parse_object(body.as_bytes()),
            Err(FieldError::new(path, "duplicate key")),
            "{}", body
        );
    }

    #[test]
    fn typed_accessors_take_exactly_their_type(
        value in json_value(),
        lo in any::<i64>(),
        hi in any::<i64>(),
        ulo in any::<u64>(),
        uhi in any::<u64>(),
    ) {
        let map = |v: &Value| match json!({ "f": v }) {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let read = |v: &Value| ObjectReader::new(map(v), "body");
        let expect_string = value.as_str().map(str::to_owned);
        prop_assert_eq!(read(&value).required_string("f").ok(), expect_string);
        prop_assert_eq!(read(&value).required_bool("f").ok(), value.as_bool());
        // JSON Schema's integers: integral numbers, floats too while one float is one integer.
        let whole = value
            .as_f64()
            .filter(|f| !value.is_i64() && !value.is_u64() && f.fract() == 0.0 && f.abs() <= 2f64.powi(53))
            .map(|f| f as i64);
        let range = lo.min(hi)..=lo.max(hi);
        prop_assert_eq!(
            read(&value).required_i64_in("f", range.clone()).ok(),
            value.as_i64().or(whole).filter(|v| range.contains(v))
        );
        let urange = ulo.min(uhi)..=ulo.max(uhi);
        prop_assert_eq!(
            read(&value).required_u64_in("f", urange.clone()).ok(),
            value
                .as_u64()
                .or(whole.and_then(|v| u64::try_from(v).ok()))
                .filter(|v| urange.contains(v))
        );
        // A canonical decimal string: exactly the strings that are some u64 printed.
        let canonical = value
            .as_str()
            .and_then(|s| s.parse::<u64>().ok().filter(|v| v.to_string() == s));
        prop_assert_eq!(read(&value).required_decimal_string_u64("f").ok(), canonical);
        // Every refusal names the field under its prefix.
        if let Err(error) = read(&value).required_string("f") {
            prop_assert_eq!(error.field, "body.f");
        }
    }

    #[test]
    fn finish_refuses_exactly_the_unasked_fields(
        object in json_object(json_value().prop_filter("not null", |v| !v.is_null())),
        asked in proptest::collection::vec(json_key(), 0..6),
    ) {
        let mut reader = ObjectReader::new(object.clone(), "");
        for name in &asked {
            prop_assert!(reader.take(name).is_ok());
        }
        let leftovers: Vec<&String> = object.keys().filter(|k| !asked.contains(k)).collect();
        match reader.finish() {
            Ok(()) => prop_assert!(leftovers.is_empty()),
            Err(error) => prop_assert!(leftovers.contains(&&error.field), "{:?}", error),
        }
    }

    #[test]
    fn request_keys_and_subjects_follow_their_rules(s in any::<String>()) {
        let key_ok = (1..=128).contains(&s.len()) && s.bytes().all(|b| (0x21..=0x7e).contains(&b));
        prop_assert_eq!(validate_request_key(&s, "request_key").is_ok(), key_ok);
        let chars = s.chars().count();
        let subject_ok = (1..=128).contains(&chars) && !s.chars().any(char::is_control);
        prop_assert_eq!(validate_subject(&s, "subject").is_ok(), subject_ok);
    }
}
