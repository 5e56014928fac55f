#![no_main]
//! Strict JSON (every wire document and script output): never a panic; what it accepts,
//! serde_json reads as the same value. (A document refused for a repeated key may be malformed
//! further on too: the reader stops at the first problem it meets.)
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match nodecare_protocol::json::from_slice(data) {
        Ok(value) => {
            let loose: serde_json::Value =
                serde_json::from_slice(data).expect("strict accepts only what serde_json accepts");
            assert_eq!(value, loose);
        }
        Err(error) => assert!(!error.to_string().is_empty(), "a refusal says why"),
    }
});
