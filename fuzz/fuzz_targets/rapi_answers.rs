#![no_main]
//! The RAPI answers decoder (nodecare-ganeti's types, htools' rules in roll) must never panic.
//! Input: the four answers (info, groups, nodes, instances) separated by NUL bytes.

use libfuzzer_sys::fuzz_target;
use nodecare_roll::from_rapi::{RapiAnswers, cluster_from_rapi};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut parts = text.splitn(4, '\0');
    let (Some(info), Some(groups), Some(nodes), Some(instances)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let _ = cluster_from_rapi(RapiAnswers { info, groups, nodes, instances });
});
