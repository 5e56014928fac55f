#![no_main]
//! mond-style data: confd answers the agent reads (data collectors, node instances, DRBD
//! minors), reports and storage payloads the coordinator reads, plugin collector output.
use libfuzzer_sys::fuzz_target;
use nodecare_collectors::confd::{parse_data_collectors, parse_node_drbd, parse_node_instances};

fuzz_target!(|data: &[u8]| {
    let _ = nodecare_collectors::plugin::parse_output("fuzz-collector", data);
    let _ = serde_json::from_slice::<nodecare_protocol::Report>(data);
    let _ = serde_json::from_slice::<Vec<nodecare_protocol::Report>>(data);
    let _ = serde_json::from_slice::<nodecare_protocol::StoragePayload>(data);
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = parse_data_collectors(&value);
    let _ = parse_node_instances(&value);
    let _ = parse_node_drbd(&value);
});
