#![no_main]
//! The htools text parser must never panic, and whatever it accepts must
//! survive a serialise/parse round trip and planning.

use libfuzzer_sys::fuzz_target;
use nodecare_roll::{htext, schedule};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(cluster) = htext::parse(text) else { return };
    let again = htext::parse(&htext::serialize(&cluster));
    assert!(again.is_ok(), "round trip failed: {again:?}");
    if cluster.nodes.len() <= 64 && cluster.instances.len() <= 256 {
        let opts = schedule::RollOptions { force: true, ..Default::default() }.with_default_budgets();
        let _ = schedule::plan(&cluster, &opts);
    }
});
