#![no_main]
//! /proc/drbd (DRBD 8.x): any bytes must parse or give a clear error, never panic.
use libfuzzer_sys::fuzz_target;
use nodecare_collectors::builtin::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(status) = drbd::parse_proc_drbd(text) {
            let _ = drbd::to_report_data(&status);
        }
    }
});
