#![no_main]
//! The agent's signed long-poll query string (`after=`, `wait=`): any text parses or is refused.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nodecare_agent::http::parse_signed_query(Some(text));
});
