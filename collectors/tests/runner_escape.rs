//! Processes that leave the run's process group (`setsid`) are killed with the run, and a run
//! that times out because of them leaks no descriptor.
//!
//! One test binary of its own: it makes the test process a child subreaper, as the agent is.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers")]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nodecare_collectors::runner::{self, ExecError, ExecLimits};
use nodecare_collectors::whitelist::Whitelist;
use support::{SERIAL, open_fds, owner, script};

mod support;

/// The pids the escaped grandchildren wrote, one a line.
fn escaped_pids(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a running (not zombie) process.
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].split_whitespace().next().map(str::to_owned));
    state.as_deref() != Some("Z")
}

/// Waits up to a second for every pid to be gone; returns the survivors.
async fn survivors(pids: &[i32]) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kill_all(pids: &[i32]) {
    for pid in pids {
        let _gone = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn setup() {
    runner::init_reaper(None).unwrap();
}

/// A script whose `setsid` grandchild keeps stdout and stderr open and sleeps; the script
/// itself `exits` at once or `waits` for it.
fn escaping_script(pid_file: &Path, script_exits: bool) -> String {
    let tail = if script_exits { "exit 0" } else { "wait" };
    format!(
        "#!/bin/sh\nsetsid sh -c 'echo $$ >> {}; exec sleep 1000' &\necho '{{\"status\":\"Ok\"}}'\n{tail}\n",
        pid_file.display()
    )
}

async fn escapes_are_killed(script_exits: bool) {
    let _serial = SERIAL.lock().await;
    setup();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pid_file = dir.path().join("pids.txt");
    script(
        dir.path(),
        "escapes",
        &escaping_script(&pid_file, script_exits),
    );
    script(dir.path(), "warm", "#!/bin/sh\necho '{}'\n");
    let whitelist = Whitelist::with_owner(dir.path(), owner());
    let limits = ExecLimits {
        timeout: Duration::from_millis(500),
        ..ExecLimits::default()
    };
    runner::run(&whitelist.open("warm").unwrap(), None, &limits)
        .await
        .unwrap();
    let fds_before = open_fds();
    let mut outlived = Vec::new();
    for round in 0..25 {
        let started = Instant::now();
        let error = runner::run(&whitelist.open("escapes").unwrap(), None, &limits)
            .await
            .unwrap_err();
        assert!(matches!(error, ExecError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < limits.timeout + Duration::from_secs(2));
        let left = survivors(&escaped_pids(&pid_file)).await;
        if !left.is_empty() {
            outlived.push((round, left));
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fds_after = open_fds();
    for (_, left) in &outlived {
        kill_all(left);
    }
    assert_eq!(
        fds_after, fds_before,
        "descriptors leaked over 25 rounds: {fds_before} before, {fds_after} after"
    );
    assert!(
        outlived.is_empty(),
        "setsid grandchildren outlived their runs (round, pids): {outlived:?}"
    );
    // A run killed before its grandchild wrote its pid still killed it, unseen; the test only
    // means something if most rounds were seen.
    let seen = escaped_pids(&pid_file).len();
    assert!((20..=25).contains(&seen), "{seen} of 25 rounds escaped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_grandchild_of_an_exited_script_is_killed() {
    escapes_are_killed(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_grandchild_of_a_running_script_is_killed() {
    escapes_are_killed(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setsid_grandchild_of_a_repair_style_run_is_killed_after_the_grace() {
    use nodecare_collectors::runner::{
        OutputPolicy, Program, RunEnd, RunSpec, execute, shared_output,
    };
    let _serial = SERIAL.lock().await;
    setup();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pid_file = dir.path().join("pids.txt");
    script(dir.path(), "escapes", &escaping_script(&pid_file, true));
    let whitelist = Whitelist::with_owner(dir.path(), owner());
    let executable = whitelist.open("escapes").unwrap();
    let spec = RunSpec {
        timeout: Duration::from_secs(10),
        policy: OutputPolicy::KeepFirst {
            grace: Duration::from_millis(300),
        },
    };
    let fds_before = open_fds();
    for round in 0..5 {
        let output = shared_output(1024, 1024);
        let (end, duration) = execute(
            Program::Verified(&executable),
            Some(b"{}".to_vec()),
            &spec,
            &output,
            |_| {},
        )
        .await;
        assert_eq!(end, RunEnd::Exited(0));
        assert!(duration < Duration::from_secs(3), "{duration:?}");
        assert_eq!(
            output.lock().unwrap().stdout.text(),
            "{\"status\":\"Ok\"}\n"
        );
        let left = survivors(&escaped_pids(&pid_file)).await;
        kill_all(&left);
        assert!(left.is_empty(), "round {round}: {left:?} outlived the run");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(open_fds(), fds_before, "descriptors leaked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeps_leave_other_runs_alone() {
    let _serial = SERIAL.lock().await;
    setup();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pid_file = dir.path().join("pids.txt");
    script(dir.path(), "escapes", &escaping_script(&pid_file, true));
    // A well-behaved script whose own children (one of them in its own session) must live
    // until it is done with them, however many other runs end meanwhile.
    script(
        dir.path(),
        "slow",
        "#!/bin/sh\n( sleep 1; echo child ) &\nsetsid sh -c 'sleep 1.2; echo session' &\nwait\necho '{\"status\":\"Ok\"}'\n",
    );
    let whitelist = Whitelist::with_owner(dir.path(), owner());
    let slow = whitelist.open("slow").unwrap();
    let escapes = whitelist.open("escapes").unwrap();
    let limits = ExecLimits {
        timeout: Duration::from_secs(5),
        ..ExecLimits::default()
    };
    let short = ExecLimits {
        timeout: Duration::from_millis(200),
        ..ExecLimits::default()
    };
    let others = async {
        for _ in 0..5 {
            let error = runner::run(&escapes, None, &short).await.unwrap_err();
            assert!(matches!(error, ExecError::Timeout { .. }), "{error}");
        }
    };
    let (output, ()) = tokio::join!(runner::run(&slow, None, &limits), others);
    let output = output.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "child\nsession\n{\"status\":\"Ok\"}\n"
    );
    let left = survivors(&escaped_pids(&pid_file)).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?} outlived their runs");
}
