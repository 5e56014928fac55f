//! The `nodecare` read commands against a live coordinator on the simulated cluster: what the
//! coordinator serves decodes into the CLI's wire types and shows what happened.
//!
//! The test runs the real `nodecare` binary from this test's target directory
//! (`target/<profile>/nodecare`, built by `cargo build -p nodecare-cli` or any
//! `--workspace` build); `NODECARE_BIN` names another one.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::path::PathBuf;
use std::process::Command;

use nodecare_coordinator::incident::RepairStatus;
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

/// The `nodecare` binary: `NODECARE_BIN`, else `nodecare` in the profile directory this test
/// binary was built into (`target/<profile>/deps/cli_live-*` → `target/<profile>/nodecare`).
fn nodecare_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("NODECARE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .filter(|dir| dir.ends_with("deps"))
        .and_then(|deps| deps.parent())
        .unwrap_or_else(|| {
            panic!(
                "{} is not in a target/<profile>/deps directory",
                exe.display()
            )
        });
    let bin = profile_dir.join("nodecare");
    assert!(
        bin.is_file(),
        "{} does not exist: build it first with `cargo build -p nodecare-cli` \
         (same profile as the tests), or set NODECARE_BIN",
        bin.display()
    );
    bin
}

/// Runs `nodecare ARGS --url URL` off the async workers; returns exit code and stdout/stderr.
async fn nodecare(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut command = Command::new(nodecare_bin());
    command
        .args(args)
        .args(["--url", url])
        .env_remove("NODECARE_COORDINATOR_URL");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_commands_show_a_completed_evacuation_and_an_unknown_verdict() {
    let mut h = Harness::new(4, "a:drbd:2,b:drbd:3", |_| {}).await.unwrap();
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.agents
        .get(&node(4))
        .unwrap()
        .set_verdict(verdict("no-such-status", json!({}), None));
    let done = h
        .until(20, |i| {
            i.len() == 1 && i[0].repair_status == RepairStatus::Completed
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents().unwrap());
    let id = h.incidents().unwrap()[0].uuid.to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let (code, stdout, stderr) = nodecare(
        &url,
        &[
            "incidents",
            "--no-headers",
            "--separator",
            "|",
            "-o",
            "id,node,status,tag",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let line = format!("{id}|{}|completed|maintd:repairready:{id}", node(2));
    assert_eq!(stdout.trim_end(), line);

    let (code, stdout, stderr) = nodecare(&url, &["incidents", "show", &id]).await;
    assert_eq!(code, Some(0), "{stderr}");
    for needle in [
        "status: completed",
        "verdict: evacuate",
        "- disk: evacuate",
        "history:",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in\n{stdout}");
    }
    let succeeded_jobs = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("- job ") && l.contains(": succeeded, "))
        .count();
    assert!(succeeded_jobs >= 3, "drain, moves and tag:\n{stdout}");

    let (code, stdout, stderr) =
        nodecare(&url, &["nodes", "--no-headers", "-o", "node,agent,verdict"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout.lines().count(), 4, "{stdout}");
    let (code, stdout, stderr) =
        nodecare(&url, &["nodes", "--json", "-o", "node,verdict,reason"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let unknown = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node"] == node(4).as_str())
        .unwrap();
    assert_eq!(unknown["verdict"], "unknown");
    assert!(
        unknown["reason"]
            .as_str()
            .is_some_and(|r| r.contains("disk")),
        "{unknown}"
    );

    let (code, stdout, stderr) = nodecare(
        &url,
        &[
            "status",
            "-a",
            "--no-headers",
            "--separator",
            "|",
            "-o",
            "id,status",
            "-O",
            "node,verdict",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let (incidents, agents) = stdout.split_once("\n\n").unwrap();
    assert_eq!(incidents, format!("{id}|completed"));
    assert_eq!(agents.lines().count(), 4, "{stdout}");
    assert!(agents.contains(&format!("{}|unknown", node(4))), "{stdout}");

    let (code, stdout, stderr) = nodecare(&url, &["watch", "--count", "1"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("--- ") && stdout.contains(&id),
        "{stdout}"
    );
    server.abort();
}
