#![no_main]
//! harep's instance tags (`ganeti:watcher:autorepair:…`): any tag text parses or is ignored.
use libfuzzer_sys::fuzz_target;
use nodecare_core::duty::instance_repair::{RepairData, RepairResult, RepairType};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        let _ = RepairData::parse_tag(line);
        let _ = RepairType::parse(line);
        let _ = RepairResult::parse(line);
    }
});
