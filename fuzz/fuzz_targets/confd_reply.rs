#![no_main]
//! A confd datagram from the network: any bytes must be rejected cleanly unless correctly
//! signed, and answer parsers must never panic.
use libfuzzer_sys::fuzz_target;
use nodecare_collectors::confd;

fuzz_target!(|data: &[u8]| {
    let key = confd::ConfdKey::new(b"fuzz-key\n".to_vec());
    let _ = confd::decode_reply(&key, data, "rsalt");
    let _ = confd::decode_request(&key, data, std::time::SystemTime::now());
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = confd::parse_node_drbd(&value);
        let _ = confd::parse_node_instances(&value);
        let _ = confd::parse_data_collectors(&value);
        let _ = confd::logical_volumes_of_disks(&value);
    }
});
