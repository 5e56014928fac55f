//! A round in which the coordinator itself runs out of descriptors is an error of the round:
//! no agent is counted unreachable and the storm breaker stays closed. Alone in its test binary,
//! since it lowers the process's descriptor limit.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use nodecare_coordinator::reconcile::RoundError;
use nodecare_tests::harness::Harness;

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// Sets this process's soft descriptor limit with util-linux's `prlimit` (no unsafe code here).
#[allow(
    clippy::disallowed_methods,
    reason = "the test changes its own limit with a system tool"
)]
fn set_soft_limit(soft: u64, hard: &str) {
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={soft}:{hard}"))
        .status()
        .unwrap();
    assert!(status.success());
}

/// A process that sets the soft limit back to 4096 once it reads a line.
#[allow(
    clippy::disallowed_methods,
    reason = "the test changes its own limit with a system tool"
)]
fn restorer(hard: &str) -> std::process::Child {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "read _ && exec prlimit --pid {} --nofile=4096:{hard}",
            std::process::id()
        ))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_descriptors_is_no_storm() {
    // More agents than the coordinator keeps connections to: every round opens new sockets (with
    // fewer, the kept connections would read them without a new descriptor).
    let count = nodecare_coordinator::scrape::MAX_KEPT_CONNECTIONS + 1;
    let mut h = Harness::new(count, "", |_| {}).await.unwrap();
    h.round().await.unwrap();
    // Hold the limit just above what is open: the next socket() fails with EMFILE.
    let hard = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(4).map(str::to_owned))
        .unwrap();
    // The limit comes back through a process started now: spawning one later needs descriptors.
    let mut restore = restorer(&hard);
    // Not one descriptor free (read_dir's own is counted while it lists).
    set_soft_limit(open_descriptors() - 1, &hard);
    let mut results = Vec::new();
    for _ in 0..3 {
        results.push(h.coordinator.round().await);
    }
    {
        use std::io::Write as _;
        restore.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    assert!(restore.wait().unwrap().success());
    for result in &results {
        assert!(
            matches!(result, Err(RoundError::Local(why)) if why.contains("Too many open files")),
            "{result:?}"
        );
    }
    assert!(!h.coordinator.api().store.breaker().unwrap().open);
    // With descriptors back, rounds read every agent again.
    let summary = h.round().await.unwrap();
    assert_eq!(summary.agents, count);
}
