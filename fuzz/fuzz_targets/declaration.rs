//! Declarations on any text: never a panic; what parses round-trips through JSON, as it is
//! stored.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_durable::declaration::{Declaration, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(declaration) = parse(text) else { return };
    let stored = serde_json::to_string(&declaration).unwrap_or_default();
    let loaded: Result<Declaration, _> = serde_json::from_str(&stored);
    assert_eq!(loaded.ok().as_ref(), Some(&declaration));
});
