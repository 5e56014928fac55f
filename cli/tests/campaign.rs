//! `nodecare roll --execute` and `nodecare roll status|pause|resume|abort` against a canned
//! coordinator: what they send (method, path, credentials, body), what they print (golden files
//! under `tests/campaign/`, regenerate with `UPDATE_GOLDEN=1`) and their exit codes.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use nodecare_protocol::maintenance::{Campaign, CampaignList, CampaignRequest, CampaignState};

/// The time every output is computed at (2026-11-23 11:06:40 UTC).
const NOW_MS: &str = "1795432000000";

/// One request as the canned coordinator saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    method: String,
    path: String,
    authorization: Option<String>,
    body: String,
}

/// Serves `answers` (status line, body), one per connection; returns the base URL and the
/// requests seen.
fn coordinator(answers: Vec<(&'static str, String)>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for (status, body) in answers {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            let mut request = Seen::default();
            let mut length = 0usize;
            let mut first = true;
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if first {
                    let mut parts = line.split_whitespace();
                    request.method = parts.next().unwrap_or("").to_owned();
                    request.path = parts.next().unwrap_or("").to_owned();
                    first = false;
                } else if let Some((name, value)) = line.split_once(':') {
                    let value = value.trim().to_owned();
                    match name.to_ascii_lowercase().as_str() {
                        "content-length" => length = value.parse().unwrap_or(0),
                        "authorization" => request.authorization = Some(value),
                        _ => {}
                    }
                }
                line.clear();
            }
            let mut bytes = vec![0u8; length];
            let _ignored = reader.read_exact(&mut bytes);
            request.body = String::from_utf8_lossy(&bytes).into_owned();
            log.lock().unwrap().push(request);
            let mut stream = reader.into_inner();
            let _ignored = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, seen)
}

fn nodecare(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .args(args)
        .args(["--url", url])
        .env_remove("NODECARE_COORDINATOR_URL")
        .env_remove("NODECARE_USER")
        .env("NODECARE_PASSWORD", "s3cret")
        .env("NODECARE_NOW_MS", NOW_MS)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/campaign")
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(dir().join(name), actual);
}

fn running() -> Campaign {
    serde_json::from_str(&std::fs::read_to_string(dir().join("running.json")).unwrap()).unwrap()
}

fn json(campaign: &Campaign) -> String {
    serde_json::to_string(campaign).unwrap()
}

const ID: &str = "0190c0de-0000-7000-8000-00000000c0de";

#[test]
fn status_of_one_campaign_shows_groups_nodes_and_times() {
    let (url, seen) = coordinator(vec![("200 OK", json(&running()))]);
    let (code, stdout, stderr) = nodecare(&url, &["roll", "status", ID]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("running.txt", &stdout);
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].path, format!("/1/maintenance/{ID}"));
}

/// A failed campaign shows where it stopped and why; nothing of it reads as pending (no step
/// timing out, nothing waited for, no group planned to run).
#[test]
fn status_of_a_failed_campaign_shows_where_it_stopped_and_why() {
    let failed: Campaign =
        serde_json::from_str(&std::fs::read_to_string(dir().join("failed.json")).unwrap()).unwrap();
    let (url, _seen) = coordinator(vec![("200 OK", json(&failed))]);
    let (code, stdout, stderr) = nodecare(&url, &["roll", "status", ID]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("failed.txt", &stdout);
    for pending in [
        "times out in",
        "waiting for",
        "planned:",
        "estimated time left",
    ] {
        assert!(!stdout.contains(pending), "{pending:?} in {stdout}");
    }
}

#[test]
fn status_lists_campaigns() {
    let mut done = running();
    done.id = "0190c0de-0000-7000-8000-000000000001".into();
    done.state = CampaignState::Completed;
    done.created_ms -= 86_400_000;
    done.finished_ms = Some(done.created_ms + 5_400_000);
    done.planned.clear();
    let list = CampaignList {
        campaigns: vec![running(), done],
    };
    let body = serde_json::to_string(&list).unwrap();
    let (url, _) = coordinator(vec![("200 OK", body.clone()), ("200 OK", body)]);
    let (code, stdout, stderr) = nodecare(&url, &["roll", "status"]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("list.txt", &stdout);
    let (code, stdout, _) = nodecare(
        &url,
        &[
            "roll",
            "status",
            "-o",
            "id,blocked_by,failure",
            "--no-headers",
        ],
    );
    assert_eq!(code, Some(0));
    assert_eq!(
        stdout,
        format!("{ID} - -\n0190c0de-0000-7000-8000-000000000001 - -\n")
    );
}

#[test]
fn execute_posts_the_selection_with_credentials() {
    let (url, seen) = coordinator(vec![
        ("201 Created", json(&running())),
        (
            "400 Bad Request",
            r#"{"code":400,"message":"hook: no such repair command on node3"}"#.to_owned(),
        ),
    ]);
    let args = [
        "roll",
        "--execute",
        "-G",
        "default",
        "-O",
        "node9.example.com",
        "--node-tags",
        "kernel,db",
        "--failure-domains",
        "rack:",
        "--full-evacuation",
        "--hook",
        "apt-upgrade-and-reboot",
        "--only-if-required",
        "--continue-on-failure",
        "--healthy-timeout",
        "45m",
        "--reason",
        "kernel 6.1.0-27",
        "--user",
        "ops",
    ];
    let (code, stdout, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "started campaign {ID}: 4 groups, 8 nodes planned, hook apt-upgrade-and-reboot\n\
             follow it with: nodecare roll status {ID}\n"
        )
    );
    let (code, _, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        "nodecare roll --execute: HTTP 400 Bad Request: hook: no such repair command on node3\n"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/1/maintenance")
    );
    // ops:s3cret
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Basic b3BzOnMzY3JldA==")
    );
    let sent: CampaignRequest = serde_json::from_str(&seen[0].body).unwrap();
    let mut expected = CampaignRequest::new("apt-upgrade-and-reboot");
    expected.group = Some("default".into());
    expected.offline = vec!["node9.example.com".into()];
    expected.node_tags = Some(vec!["kernel".into(), "db".into()]);
    expected.failure_domains = Some("rack:".into());
    expected.full_evacuation = true;
    expected.only_if_required = true;
    expected.continue_on_failure = true;
    expected.timeouts.healthy_s = 2700;
    expected.reason = Some("kernel 6.1.0-27".into());
    assert_eq!(sent, expected);
}

#[test]
fn bad_execute_requests_are_refused_before_sending() {
    let (url, seen) = coordinator(vec![]);
    for (args, code, message) in [
        (vec!["roll", "--execute"], 2, "--hook"),
        (vec!["roll", "--hook", "reboot"], 2, "--execute"),
        (
            vec!["roll", "--execute", "--hook", "reboot", "-t", "x.data"],
            2,
            "cannot be used",
        ),
        (vec!["roll", "--execute", "--hook", "../reboot"], 1, "hook"),
        (
            vec![
                "roll",
                "--execute",
                "--hook",
                "reboot",
                "--skip-non-redundant",
                "--ignore-non-redundant",
            ],
            1,
            "exclude each other",
        ),
        (
            vec![
                "roll",
                "--execute",
                "--hook",
                "reboot",
                "--hook-timeout",
                "0s",
            ],
            2,
            "duration",
        ),
    ] {
        let (got, _, stderr) = nodecare(&url, &args);
        assert_eq!(got, Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    assert!(seen.lock().unwrap().is_empty());
}

#[test]
fn pause_resume_and_abort_post_to_the_campaign() {
    let mut paused = running();
    paused.state = CampaignState::Paused;
    let mut aborting = running();
    aborting.state = CampaignState::Aborting;
    let (url, seen) = coordinator(vec![
        ("200 OK", json(&paused)),
        ("200 OK", json(&running())),
        ("200 OK", json(&aborting)),
        (
            "401 Unauthorized",
            r#"{"code":401,"message":"authentication required"}"#.to_owned(),
        ),
    ]);
    for (verb, state) in [
        ("pause", "paused"),
        ("resume", "running"),
        ("abort", "aborting"),
    ] {
        let (code, stdout, stderr) = nodecare(&url, &["roll", verb, ID, "--user", "ops"]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(stdout, format!("campaign {ID}: {state}\n"));
    }
    let (code, _, stderr) = nodecare(&url, &["roll", "pause", ID]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--user USER"), "{stderr}");
    let seen = seen.lock().unwrap();
    let paths: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("POST", format!("/1/maintenance/{ID}/pause").as_str()),
            ("POST", format!("/1/maintenance/{ID}/resume").as_str()),
            ("POST", format!("/1/maintenance/{ID}/abort").as_str()),
            ("POST", format!("/1/maintenance/{ID}/pause").as_str()),
        ]
    );
}

#[test]
fn wait_follows_through_a_coordinator_restart_until_the_end() {
    let mut completed = running();
    completed.state = CampaignState::Completed;
    completed.finished_ms = Some(1_795_432_000_000);
    let mut failed = running();
    failed.state = CampaignState::Failed;
    failed.finished_ms = Some(1_795_432_000_000);
    let (url, _) = coordinator(vec![
        ("200 OK", json(&running())),
        (
            "503 Service Unavailable",
            r#"{"code":503,"message":"starting"}"#.to_owned(),
        ),
        ("200 OK", json(&completed)),
        ("200 OK", json(&failed)),
        (
            "404 Not Found",
            r#"{"code":404,"message":"no such campaign"}"#.to_owned(),
        ),
    ]);
    let args = ["roll", "status", ID, "--wait", "--interval", "1"];
    let (code, stdout, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].ends_with("running: group 2 of 4: node3.example.com failed, node4.example.com wait-healthy, node5.example.com migrate-back; nodes 3 of 8 finished (elapsed 33m20s, left ~30m00s)"), "{stdout}");
    assert!(
        lines[1].contains("cannot read the campaign, retrying: "),
        "{stdout}"
    );
    assert!(lines[2].contains("completed: group 2 of 4"), "{stdout}");
    assert!(
        stdout.contains(&format!("campaign {ID}: completed\n")),
        "{stdout}"
    );
    // A campaign that failed ends the wait with exit code 1.
    let (code, stdout, _) = nodecare(&url, &args);
    assert_eq!(code, Some(1));
    assert!(
        stdout.contains(&format!("campaign {ID}: failed\n")),
        "{stdout}"
    );
    let (code, _, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("no such campaign"), "{stderr}");
}
