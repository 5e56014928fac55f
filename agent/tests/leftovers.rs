//! An agent killed with SIGKILL in the middle of a diagnose run leaves the run's processes
//! behind (its script and what the script started with `setsid`); the next agent kills them at
//! start.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test helpers")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test starts the agent binary itself"
)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{fixture, root_test, script};

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let after = stat.get(stat.rfind(')')? + 1..)?;
            after.split_whitespace().next().map(|state| state != "Z")
        })
        .unwrap_or(false)
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

async fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    condition()
}

fn kill(pid: i32) {
    let _gone = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_kills_what_a_killed_one_left_running() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let marks = tempfile::tempdir().unwrap();
    let leader = marks.path().join("leader");
    let escaped = marks.path().join("escaped");
    script(
        &fixture.diagnose,
        "hangs",
        &format!(
            "#!/bin/sh\nsetsid sh -c 'echo $$ > {escaped}.tmp; mv {escaped}.tmp {escaped}; exec sleep 1000' &\n\
             echo $$ > {leader}.tmp\nmv {leader}.tmp {leader}\nexec sleep 1000\n",
            escaped = escaped.display(),
            leader = leader.display(),
        ),
        0o755,
    );
    let config = marks.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nnode_name = \"node1.example.com\"\nhmac_key = {:?}\n\
             state_dir = {:?}\ndiagnose_dir = {:?}\nplugin_dir = {:?}\nrepair_dir = {:?}\n\
             diagnose_timeout_secs = 600\nlog = \"warn\"\n",
            fixture.key,
            fixture.state,
            fixture.diagnose,
            marks.path().join("no-plugins"),
            fixture.repair,
        ),
    )
    .unwrap();
    let start = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_nodecare-agent"))
            .arg("--config")
            .arg(&config)
            .arg("serve")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };

    let mut first = start();
    let started = wait_for(Duration::from_secs(20), || {
        read_pid(&leader).is_some() && read_pid(&escaped).is_some()
    })
    .await;
    let (old_leader, old_escaped) = (read_pid(&leader), read_pid(&escaped));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(started, "the script did not start");
    let (old_leader, old_escaped) = (old_leader.unwrap(), old_escaped.unwrap());
    // Killing the agent alone leaves them running.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(alive(old_leader) && alive(old_escaped));
    std::fs::remove_file(&leader).unwrap();
    std::fs::remove_file(&escaped).unwrap();

    let mut second = start();
    let cleaned = wait_for(Duration::from_secs(20), || {
        !alive(old_leader) && !alive(old_escaped)
    })
    .await;
    // The second agent runs the script again; stop it and what it started.
    let _started_again = wait_for(Duration::from_secs(20), || {
        read_pid(&leader).is_some() && read_pid(&escaped).is_some()
    })
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(second.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let stopped = wait_for(Duration::from_secs(20), || {
        matches!(second.try_wait(), Ok(Some(_)))
    })
    .await;
    if !stopped {
        second.kill().unwrap();
        second.wait().unwrap();
    }
    let new_pids: Vec<i32> = [read_pid(&leader), read_pid(&escaped)]
        .into_iter()
        .flatten()
        .collect();
    let stopped_cleanly = wait_for(Duration::from_secs(5), || {
        new_pids.iter().all(|pid| !alive(*pid))
    })
    .await;
    for pid in [old_leader, old_escaped].iter().chain(&new_pids) {
        kill(*pid);
    }
    assert!(cleaned, "the leftovers of the killed agent were not killed");
    assert!(stopped, "the agent did not stop on SIGTERM");
    assert!(
        stopped_cleanly,
        "an agent stopped with SIGTERM left its scripts running"
    );
}
