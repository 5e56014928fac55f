#![no_main]
//! lvs output: any bytes must parse or give a clear error, never panic.
use libfuzzer_sys::fuzz_target;
use nodecare_collectors::builtin::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = lv::parse_lvs(text);
    }
});
