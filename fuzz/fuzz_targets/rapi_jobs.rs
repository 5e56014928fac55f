#![no_main]
//! RAPI's job answers the executor follows its jobs with (a job query's rows, a bulk job list):
//! decode or fail cleanly, never panic.
use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
// The RAPI client is built with the coordinator (`--features coordinator`).
use nodecare_ganeti::rapi::client::{job_list_jobs, job_query_jobs};

fuzz_target!(|data: &[u8]| {
    let _ = job_query_jobs(data);
    let _ = job_list_jobs(data, None);
    let _ = job_list_jobs(data, Some(&BTreeSet::from([1, 5, 7])));
});
