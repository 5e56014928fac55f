#![no_main]
//! xl list and xl uptime: any bytes must parse or give a clear error, never panic.
use libfuzzer_sys::fuzz_target;
use nodecare_collectors::builtin::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = xen::parse_xl_list(text);
        let _ = xen::parse_xl_uptime(text);
    }
});
