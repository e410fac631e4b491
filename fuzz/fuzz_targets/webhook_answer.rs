//! A backend's answer on any bytes (status, `Retry-After`, body): never a panic; a decision
//! carries nothing PostgreSQL cannot store and a code `:complete` would take.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_executor::webhook::{Answer, classify_for_fuzzing};

fuzz_target!(|data: &[u8]| {
    let [high, low, header_len, rest @ ..] = data else {
        return;
    };
    let status = u16::from_be_bytes([*high, *low]) % 1000;
    let (header, body) = rest.split_at(usize::from(*header_len).min(rest.len()));
    let header = String::from_utf8_lossy(header);
    let Some(Answer::Decided(reported)) = classify_for_fuzzing(status, &header, body) else {
        return;
    };
    if let Some((code, _)) = &reported.error {
        assert!((1..=64).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_graphic()));
    }
    if let Some(result) = &reported.result {
        assert!(!result.to_string().contains("\\u0000"), "{result}");
    }
    assert!(reported.invalidate.len() <= 100);
});
