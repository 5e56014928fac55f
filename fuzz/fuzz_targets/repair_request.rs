#![no_main]
//! Repair and check requests reaching the agent: any payload, once signed with the cluster key,
//! must open as a well-formed request for the node or be refused with a clear error, never
//! panic; and the raw bodies (unsigned) must decode or fail cleanly.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::repair::{
    CheckRequest, RepairRecord, RepairRefusal, RepairRequest, open_check_request,
    open_repair_request,
};
use nodecare_protocol::{HmacKey, KeyRing, Signer, VerifyPolicy};

const NOW: u64 = 1_800_000_000_000;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = nodecare_protocol::json::decode::<RepairRequest>(data) {
        if request.validate().is_ok() {
            let _ = request.input_fingerprint();
        }
    }
    if let Ok(request) = nodecare_protocol::json::decode::<CheckRequest>(data) {
        let _ = request.validate();
    }
    // What the agent answers, read by the coordinator.
    let _ = nodecare_protocol::json::decode::<RepairRecord>(data);
    let _ = nodecare_protocol::json::decode::<RepairRefusal>(data);
    let Ok(payload) = nodecare_protocol::json::from_slice(data) else {
        return;
    };
    let key = HmacKey::new(b"fuzz key\n".to_vec());
    let ring = KeyRing::single(key.clone());
    let signer = Signer::new(key, "node1.example.com");
    if let Ok(envelope) = signer.sign(payload, 1, NOW, 60_000) {
        let repair = open_repair_request(&ring, &envelope, NOW, VerifyPolicy::default(), "node1.example.com");
        let check = open_check_request(&ring, &envelope, NOW, VerifyPolicy::default(), "node1.example.com");
        assert!(
            repair.is_err() || check.is_err(),
            "a payload must never read as both a repair and a check request"
        );
        if let Ok(request) = repair {
            assert_eq!(request.node, "node1.example.com");
        }
    }
});
