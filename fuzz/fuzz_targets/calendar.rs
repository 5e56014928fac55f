#![no_main]
//! Maintenance windows and moments as operators and API callers write them (`[calendar]`
//! windows, `/1/freezes` `from` and `until`), and freeze requests: parse or fail cleanly.
use libfuzzer_sys::fuzz_target;
use nodecare_core::calendar::{Calendar, FreezeRequest, Window};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let calendar = Calendar::always_open();
    for line in text.lines() {
        if let Ok(window) = Window::parse(line) {
            let mut with = Calendar::always_open();
            with.windows.push(window);
            let _ = with.at(1_800_000_000_000);
            let _ = with.at(0);
            let _ = with.at(u64::MAX);
        }
        let _ = calendar.parse_moment(line);
    }
    if let Ok(request) = serde_json::from_slice::<FreezeRequest>(data) {
        let _ = calendar.freeze_of(&request, "fuzz", 1_800_000_000_000, Default::default());
    }
});
