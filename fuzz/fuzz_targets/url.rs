//! Path segments and queries on any bytes: never a panic; a decoded value holds no U+0000.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_gateway::url::{decode_segment, parse_query};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(segment) = decode_segment(&text, "path") {
        assert!(!segment.contains('\0'));
    }
    if let Ok(pairs) = parse_query(Some(&text), &["limit", "cursor", "resource_key", "subject"]) {
        for (name, value) in pairs {
            assert!(!value.contains('\0'), "{name}");
        }
    }
});
