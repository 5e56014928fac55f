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

use nodecare_core::incident::RepairStatus;
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
    // Steps for people: what each job did, the moves from where to where.
    for needle in [
        format!(": succeeded, drain {}", node(2)),
        format!(" from {} to ", node(2)),
    ] {
        assert!(stdout.contains(&needle), "{needle:?} not in\n{stdout}");
    }

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

/// `nodecare roll --execute` starts a campaign on the real coordinator, `roll status` shows it,
/// `pause`, `resume` and `abort` steer it, and `roll status --wait` ends with exit code 1 once
/// it is aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roll_execute_status_and_control_a_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let users_path = users.clone();
    let mut h = Harness::new(4, "a:drbd:2,b:drbd:3", move |config| {
        config.users = users_path;
    })
    .await
    .unwrap();
    h.round().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let write = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(["--user".into(), "ops".into()]);
        all
    };
    let run = |args: Vec<String>| {
        let url = url.clone();
        async move {
            let mut command = Command::new(nodecare_bin());
            command
                .args(&args)
                .args(["--url", &url])
                .env_remove("NODECARE_COORDINATOR_URL")
                .env_remove("NODECARE_USER")
                .env("NODECARE_PASSWORD", "secret");
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
    };

    // Without credentials: refused, and told how to give them.
    let (code, _, stderr) = nodecare(&url, &["roll", "--execute", "--hook", "reboot"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--user"), "{stderr}");

    let (code, stdout, stderr) = run(write(&[
        "roll",
        "--execute",
        "--hook",
        "reboot",
        "--reason",
        "cli test",
        "--json",
    ]))
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    let started: nodecare_protocol::maintenance::Campaign = serde_json::from_str(&stdout).unwrap();
    assert_eq!(started.request.hook, "reboot");
    assert_eq!(started.request.reason.as_deref(), Some("cli test"));
    assert_eq!(started.who, "ops");
    let id = started.id.clone();

    let (code, stdout, stderr) = nodecare(
        &url,
        &["roll", "status", "--no-headers", "-o", "id,state,hook"],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, format!("{id} running reboot\n"));
    let (code, stdout, stderr) = nodecare(&url, &["roll", "status", &id]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "campaign {id}: running\nhook reboot, by ops, reason: cli test\n"
        )),
        "{stdout}"
    );

    for (verb, state) in [("pause", "paused"), ("resume", "running")] {
        let (code, stdout, stderr) = run(write(&["roll", verb, &id])).await;
        assert_eq!(code, Some(0), "{verb}: {stderr}");
        assert_eq!(stdout, format!("campaign {id}: {state}\n"), "{verb}");
    }
    let (code, stdout, stderr) = run(write(&["roll", "abort", &id])).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout == format!("campaign {id}: aborting\n")
            || stdout == format!("campaign {id}: aborted\n"),
        "{stdout}"
    );
    for _ in 0..20 {
        h.round().await.unwrap();
        let (_, stdout, _) =
            nodecare(&url, &["roll", "status", "--no-headers", "-o", "state"]).await;
        if stdout.trim() == "aborted" {
            break;
        }
    }
    let (code, stdout, stderr) =
        nodecare(&url, &["roll", "status", &id, "--wait", "--interval", "1"]).await;
    assert_eq!(
        code,
        Some(1),
        "an aborted campaign did not complete: {stdout}{stderr}"
    );
    assert!(
        stdout.contains(&format!("campaign {id}: aborted\n")),
        "{stdout}"
    );
    let (code, _, stderr) = nodecare(
        &url,
        &["roll", "status", "0190c0de-0000-7000-8000-000000000000"],
    )
    .await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("404"), "{stderr}");
    server.abort();
}

/// `nodecare explain` against a live coordinator: two nodes of two racks report `evacuate`; the
/// one of the second rack waits. Its explanation names the rule and the holders its
/// `blocked_by` names, the node's explanation at the time shows the same, and every Ganeti job
/// nodecare submitted leads, by its reason trail, to the round that admitted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_the_rule_of_a_refusal_and_traces_every_job_to_its_round() {
    let mut h = Harness::new(6, "a:diskless:2,b:diskless:5,c:diskless:3", |config| {
        config.failure_domains = "rack:".into();
        config.max_disrupted_nodes = 3;
        config.breaker.max_incident_percent = 100.0;
    })
    .await
    .unwrap();
    h.sim.with_cluster(|c| {
        for i in 1..=6 {
            let rack = if i <= 3 { "rack:a" } else { "rack:b" };
            c.nodes.get_mut(&node(i)).unwrap().tags.push(rack.into());
        }
    });
    let evacuate = || verdict("evacuate", json!({"disk": "evacuate"}), None);
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    h.agents.get(&node(5)).unwrap().set_verdict(evacuate());
    let done = h
        .until(20, |i| {
            i.iter()
                .any(|i| i.node == node(2) && i.repair_status == RepairStatus::Completed)
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents().unwrap());
    let incidents = h.incidents().unwrap();
    let waiting = incidents.iter().find(|i| i.node == node(5)).unwrap();
    let blocked_by = waiting.blocked_by.clone().expect("node 5 waits");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // The waiting incident: its last judgement is the refusal its blocked_by shows.
    let id = waiting.uuid.to_string();
    let (code, stdout, stderr) = nodecare(&url, &["explain", &id, "--json"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let explanation: nodecare_protocol::explain::Explanation =
        serde_json::from_str(&stdout).unwrap();
    let last = explanation.rounds.last().expect("a recorded round");
    let judgement = &last.judgements[0];
    assert!(!judgement.admitted);
    let refusal = judgement.blocked_by.as_ref().expect("refused");
    assert_eq!(refusal.to_string(), blocked_by);
    assert_eq!(judgement.rule, "one failure domain at a time");
    let holders = last
        .in_force
        .iter()
        .find(|d| d.domain == "rack:a")
        .expect("rack a in force");
    assert!(
        holders
            .held
            .iter()
            .any(|h| h.starts_with(&format!("{}: incident ", node(2)))),
        "{holders:?}"
    );
    // In words, for people.
    let (code, text, stderr) = nodecare(&url, &["explain", &id]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        text.contains("REFUSED by the rule \"one failure domain at a time\""),
        "{text}"
    );
    // The web page links the incident to the same explanation, for people.
    let page = reqwest::get(format!("{url}/ui/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains(&format!("href=\"/ui/explain?record={id}\"")));
    let answer = reqwest::get(format!("{url}/ui/explain?record={id}"))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let html = answer.text().await.unwrap();
    assert!(
        html.contains("Refused by the rule <b>one failure domain at a time</b>"),
        "{html}"
    );
    let bad = reqwest::get(format!("{url}/ui/explain?record=nope"))
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    // The node, now.
    let (code, text, stderr) = nodecare(&url, &["explain", &node(5)]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(text.contains(&blocked_by), "{blocked_by} not in\n{text}");

    // Every job with nodecare's reason trail leads to a recorded round that admitted its holder.
    let jobs = h.sim.with_cluster(|c| {
        c.jobs
            .values()
            .filter(|j| {
                j.reason
                    .iter()
                    .any(|(_, text, _)| nodecare_ganeti::Reason::parse_text(text).is_some())
            })
            .map(|j| j.id)
            .collect::<Vec<_>>()
    });
    assert!(jobs.len() >= 3, "drain, move, tag: {jobs:?}");
    for job in jobs {
        let (code, stdout, stderr) = nodecare(&url, &["explain", &job.to_string(), "--json"]).await;
        assert_eq!(code, Some(0), "job {job}: {stderr}");
        let explanation: nodecare_protocol::explain::Explanation =
            serde_json::from_str(&stdout).unwrap();
        let traced = explanation.job.clone().expect("the job's operation");
        assert!(traced.round.is_some(), "job {job}: {explanation:?}");
        assert!(
            explanation.rounds[0].judgements.iter().any(|j| j.admitted),
            "job {job}: {explanation:?}"
        );
    }
    // A job nodecare did not submit: a clear error.
    let (code, _, stderr) = nodecare(&url, &["explain", "999999"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not an operation of nodecare"), "{stderr}");
    server.abort();
}

/// `nodecare what-if` against a live coordinator: two nodes turning `evacuate` under a cap of
/// one: the first is drained and evacuated, the second waits for the cap; with the cap at two
/// both go. The web page's form answers the same. Nothing is written or submitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_if_shows_the_jobs_and_the_waits_and_changes_nothing() {
    let mut h = Harness::new(5, "a:diskless:2,b:diskless:3", |_| {})
        .await
        .unwrap();
    h.round().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let before = h.coordinator.api().store.snapshot().unwrap();
    let two = [
        "what-if".to_owned(),
        "--verdict".to_owned(),
        format!("{}=evacuate", node(2)),
        "--verdict".to_owned(),
        format!("{}=evacuate", node(3)),
    ];
    let args: Vec<&str> = two.iter().map(String::as_str).collect();

    let (code, text, stderr) = nodecare(&url, &args).await;
    assert_eq!(code, Some(0), "{stderr}");
    for says in [
        format!("JOB OP_NODE_SET_PARAMS {}: draining {}", node(2), node(2)),
        "JOB OP_INSTANCE_MIGRATE a.sim.test".to_owned(),
        format!("WAITS node {}", node(3)),
        "cap on disrupted nodes".to_owned(),
        "end: nothing changes after".to_owned(),
    ] {
        assert!(text.contains(&says), "{says} not in\n{text}");
    }
    assert!(
        !text.contains(&format!("OP_NODE_SET_PARAMS {}", node(3))),
        "{text}"
    );

    let mut raised = args.clone();
    raised.extend(["--policy", "max_disrupted_nodes=2", "--json"]);
    let (code, json, stderr) = nodecare(&url, &raised).await;
    assert_eq!(code, Some(0), "{stderr}");
    let what_if: nodecare_protocol::what_if::WhatIf = serde_json::from_str(&json).unwrap();
    for n in [2, 3] {
        assert!(
            what_if
                .jobs
                .iter()
                .any(|j| j.opcode == "OP_NODE_SET_PARAMS" && j.target == node(n)),
            "{:?}",
            what_if.jobs
        );
    }

    let (code, _, stderr) = nodecare(&url, &["what-if", "--drain", "node9.sim.test"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("unknown node node9.sim.test"), "{stderr}");
    let (code, _, stderr) = nodecare(&url, &["what-if", "--verdict", "node2=broken"]).await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not a verdict"), "{stderr}");

    let page = reqwest::get(format!("{url}/ui/what-if?node={}&change=evacuate", node(2)))
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("OP_NODE_SET_PARAMS"), "{html}");
    let form = reqwest::get(format!("{url}/ui/")).await.unwrap();
    assert!(form.text().await.unwrap().contains("href=\"/ui/what-if\""));

    assert_eq!(h.coordinator.api().store.snapshot().unwrap(), before);
    assert!(h.sim.submissions().is_empty(), "{:?}", h.sim.submissions());
    server.abort();
}
