//! Ticket verification on any bytes: never a panic, never a forgery (no input verifies
//! under a key it was not signed with).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_gateway::ticket::TicketKeys;

fuzz_target!(|data: &[u8]| {
    let Ok(keys) = TicketKeys::parse("k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE") else {
        panic!("the fixed key spec parses");
    };
    let text = String::from_utf8_lossy(data);
    assert!(
        keys.verify(&text, 0).is_err(),
        "forged ticket verified: {text:?}"
    );
});
