//! Strict bodies on any bytes: never a panic; what is accepted is what serde_json reads, with
//! no U+0000 anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice_gateway::strict_json::{ObjectReader, parse_object};

fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(map) = parse_object(data) else { return };
    let plain: Value = match serde_json::from_slice(data) {
        Ok(value) => value,
        Err(e) => panic!("strict accepted what serde_json refuses: {e}"),
    };
    assert_eq!(Value::Object(map.clone()), plain);
    assert!(!has_nul(&plain), "U+0000 accepted");
    let mut reader = ObjectReader::new(map, "body");
    let _ = reader.optional_string("request_key");
    let _ = reader.optional_u64_in("limit", 1..=20);
    let _ = reader.optional_i64_in("n", -5..=5);
    let _ = reader.optional_decimal_string_u64("expected_revision");
    let _ = reader.optional_object("input");
    let _ = reader.optional_bool("paused");
    let _ = reader.finish();
});
