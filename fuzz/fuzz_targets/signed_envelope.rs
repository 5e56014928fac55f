#![no_main]
//! A signed envelope from the network: any bytes must verify or be rejected, never panic.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::{HmacKey, KeyRing, VerifyPolicy};

fuzz_target!(|data: &[u8]| {
    let ring = KeyRing::single(HmacKey::new(b"fuzz key\n".to_vec()));
    let _ = ring.verify_json(data, 1_800_000_000_000, VerifyPolicy::default(), None, None);
});
