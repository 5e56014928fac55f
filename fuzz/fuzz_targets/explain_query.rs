#![no_main]
//! `GET /1/explain`'s query string (any caller may send one) and the explanation the CLI
//! decodes: parse or fail cleanly, and a query that parses writes back to one that reads the
//! same.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::explain::{Explanation, Query};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(query) = Query::parse(Some(text)) {
            assert_eq!(Query::parse(Some(&query.to_query_string())), Ok(query));
        }
        let _ = Query::from_subject(text, None);
    }
    let _ = serde_json::from_slice::<Explanation>(data);
});
