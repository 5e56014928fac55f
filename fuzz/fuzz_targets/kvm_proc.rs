#![no_main]
//! KVM pid files, /proc/<pid>/statm and /proc/<pid>/stat, QMP replies: any bytes must parse or give a clear error, never panic.
use libfuzzer_sys::fuzz_target;
use nodecare_collectors::builtin::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = kvm::parse_pid_file(text);
        let _ = kvm::parse_statm_rss(text);
        let _ = kvm::parse_process_stat(text);
        let _ = kvm::parse_qmp_status(text);
    }
});
