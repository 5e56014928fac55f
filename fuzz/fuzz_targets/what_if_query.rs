#![no_main]
//! `GET /1/what-if`'s query string (any reader may send one) and the answer the CLI decodes:
//! parse or fail cleanly, within the bounds, and a query that parses writes back to one that
//! reads the same.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::what_if::{MAX_CHANGES, Query, WhatIf};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(query) = Query::parse(Some(text)) {
            assert!(query.changes.len() <= MAX_CHANGES);
            assert_eq!(Query::parse(Some(&query.to_query_string())), Ok(query));
        }
    }
    let _ = serde_json::from_slice::<WhatIf>(data);
});
