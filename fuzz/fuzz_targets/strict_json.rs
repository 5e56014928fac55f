#![no_main]
//! Strict JSON (every wire document and script output): never a panic; what it accepts,
//! serde_json reads as the same value; a document it refuses for a repeated key is one where
//! serde_json would have silently kept the last value.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match nodecare_protocol::json::from_slice(data) {
        Ok(value) => {
            let loose: serde_json::Value =
                serde_json::from_slice(data).expect("strict accepts only what serde_json accepts");
            assert_eq!(value, loose);
        }
        Err(error) => {
            if error.to_string().contains("repeated key") {
                assert!(serde_json::from_slice::<serde_json::Value>(data).is_ok());
            }
        }
    }
});
