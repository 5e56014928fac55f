#![no_main]
//! A signed envelope from the network: any bytes must verify or be rejected, never panic; what
//! parses is decoded as the diagnose payload the coordinator expects, or refused.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::{DiagnosePayload, HmacKey, KeyRing, SignedEnvelope, VerifyPolicy};

fuzz_target!(|data: &[u8]| {
    let ring = KeyRing::single(HmacKey::new(b"fuzz key\n".to_vec()));
    let _ = ring.verify_json(data, 1_800_000_000_000, VerifyPolicy::default(), None, None);
    if let Ok(envelope) = SignedEnvelope::from_json(data) {
        // The canonical form either exists or is a clear error.
        let _ = envelope.signed_bytes();
        let _ = serde_json::from_value::<DiagnosePayload>(envelope.payload);
    }
});
