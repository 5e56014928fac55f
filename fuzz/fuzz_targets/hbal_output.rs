#![no_main]
//! hbal's stdout (`-C` commands and the job sets): any text gives a plan or a clear error, and
//! a plan resolves against names or fails cleanly.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(plan) = nodecare_roll::hbal::parse(text) {
        let nodes = vec!["node1.example.com".to_owned(), "node2.example.com".to_owned()];
        let instances = vec!["inst1.example.com".to_owned()];
        if let Ok(plan) = plan.resolve(&nodes, &instances) {
            let _ = plan.first_jobset(&Default::default());
        }
    }
});
