#![no_main]
//! A diagnose script's stdout: any bytes must give a verdict or a clear error, never a panic.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::{NodeVerdict, ScriptVerdict};

fuzz_target!(|data: &[u8]| {
    if let Ok(verdict) = ScriptVerdict::parse(data) {
        let merged = NodeVerdict::merge([("script".to_owned(), verdict)].into_iter().collect());
        assert!(merged.is_ok(), "a parsed verdict must always merge");
    }
});
