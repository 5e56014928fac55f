//! `nodecare status` against a canned coordinator: the tables people read, compared with golden
//! files under `tests/status/` (regenerate with `UPDATE_GOLDEN=1`), and clear errors.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

/// Serves `answers` (status line, body; an empty status line closes the connection without an
/// answer), one per connection, then stops; returns the base URL.
fn coordinator(answers: Vec<(&'static str, String)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (status, body) in answers {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            let mut stream = reader.into_inner();
            if status.is_empty() {
                // No answer: the connection closes under the request.
                continue;
            }
            let _ignored = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/status")
        .join(name)
}

fn nodecare(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .arg("status")
        .args(args)
        .args(["--url", url])
        .env_remove("NODECARE_COORDINATOR_URL")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(fixture(name), actual);
}

/// Every incident state: the tag only when it is on the node, `blocked_by` for blocked
/// incidents, `acknowledged` and when, failures; agents that are not `ok`.
#[test]
fn status_shows_each_incident_state() {
    let body = std::fs::read_to_string(fixture("overview.json")).unwrap();
    let url = coordinator(vec![("200 OK", body)]);
    let (ok, stdout, stderr) = nodecare(&url, &[]);
    assert!(ok, "{stderr}");
    golden("status.txt", &stdout);
}

/// `-a` also lists agents that are fine, and an `unknown` verdict shows its reason.
#[test]
fn status_all_shows_the_reason_of_an_unknown_verdict() {
    let body = std::fs::read_to_string(fixture("overview.json")).unwrap();
    let url = coordinator(vec![("200 OK", body)]);
    let (ok, stdout, stderr) = nodecare(&url, &["-a"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("smart-disk: exit code 2: smartctl: not found"),
        "{stdout}"
    );
    golden("status-all.txt", &stdout);
}

#[test]
fn status_without_incidents() {
    let body = r#"{"node":"n1","round":{"number":1,"started_ms":0,"duration_ms":3,"agents":1,
        "agents_failed":0,"jobs_submitted":0,"error":null},"incidents":[],"agents":[{"node":"n1",
        "state":"ok","verdict":"Ok","fingerprint":"a","sequence":1,"error":null,"checked_at_ms":0,
        "last_ok_ms":0}],"intents":[],"jobs":[]}"#;
    let url = coordinator(vec![("200 OK", body.to_owned())]);
    let (ok, stdout, stderr) = nodecare(&url, &[]);
    assert!(ok, "{stderr}");
    golden("status-empty.txt", &stdout);
}

#[test]
fn status_before_the_first_round() {
    let body = r#"{"node":"n1","round":{"number":0,"started_ms":0,"duration_ms":0,"agents":0,
        "agents_failed":0,"jobs_submitted":0,"error":null},"incidents":[],"agents":[],
        "intents":[],"jobs":[]}"#;
    let url = coordinator(vec![("200 OK", body.to_owned())]);
    let (ok, stdout, stderr) = nodecare(&url, &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("coordinator on n1: no round finished yet\n"),
        "{stdout}"
    );
    golden("status-before-first-round.txt", &stdout);
}

#[test]
fn errors_are_clear() {
    let url = coordinator(vec![
        (
            "500 Internal Server Error",
            r#"{"code":500,"message":"database is locked"}"#.to_owned(),
        ),
        ("200 OK", r#"{"node":"n1"}"#.to_owned()),
        ("200 OK", "<html>".to_owned()),
    ]);
    let (ok, _, stderr) = nodecare(&url, &[]);
    assert!(!ok);
    assert!(
        stderr.contains("HTTP 500") && stderr.contains("database is locked"),
        "{stderr}"
    );
    let (ok, _, stderr) = nodecare(&url, &[]);
    assert!(!ok);
    assert!(
        stderr.contains("not a coordinator overview") && stderr.contains("round"),
        "{stderr}"
    );
    let (ok, _, stderr) = nodecare(&url, &[]);
    assert!(!ok);
    assert!(stderr.contains("not a coordinator overview"), "{stderr}");
}

/// The gate: the breaker, the failure domains (busy ones with their holders, overrides), what
/// waits and why, the grants and the overrides.
#[test]
fn status_shows_the_domains_grants_overrides_and_breaker() {
    let body = std::fs::read_to_string(fixture("overview-gate.json")).unwrap();
    let url = coordinator(vec![("200 OK", body)]);
    let (ok, stdout, stderr) = nodecare(&url, &[]);
    assert!(ok, "{stderr}");
    for needle in [
        "storm breaker OPEN since",
        "rack:r1: 4 node(s), disrupted: node2.example.com (incident",
        "node-repair node node3.example.com: failure domain rack:r1 is disrupted",
        "reboot@node1",
        "revoked by ops",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in\n{stdout}");
    }
    golden("status-gate.txt", &stdout);
}

fn cancel(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .args([
            "cancel",
            "6f1f0b0e-3c1d-4b8e-9d2a-7c5e4f3a2b10",
            "--url",
            url,
        ])
        .args(args)
        .env_remove("NODECARE_COORDINATOR_URL")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// A cancel whose answer never comes (the coordinator recorded it, the answer was lost or
/// late) is not reported as a failure: the incident, read again, says it is canceled.
#[test]
fn a_cancel_whose_answer_is_lost_reads_the_incident() {
    let incident = serde_json::json!({
        "id": "6f1f0b0e-3c1d-4b8e-9d2a-7c5e4f3a2b10", "node": "node2", "action": "evacuate",
        "repair-status": "canceled", "jobs": [7, 8], "tag": "repairready:x", "tag_applied": false,
        "acknowledged": false, "mtime": 0.0
    })
    .to_string();
    let url = coordinator(vec![("", String::new()), ("200 OK", incident)]);
    let (ok, stdout, stderr) = cancel(&url, &[]);
    assert!(ok, "{stdout}{stderr}");
    let stdout = stdout.replace(&url, "URL");
    let first = stdout.lines().next().unwrap_or_default().to_owned();
    assert_eq!(
        first,
        "incident 6f1f0b0e-3c1d-4b8e-9d2a-7c5e4f3a2b10 canceled"
    );
    assert!(
        stdout.contains("but the incident reads canceled"),
        "{stdout}"
    );
    // Not canceled after all: a failure that says so.
    let not = serde_json::json!({
        "id": "6f1f0b0e-3c1d-4b8e-9d2a-7c5e4f3a2b10", "node": "node2", "action": "evacuate",
        "repair-status": "pending", "tag": "repairready:x", "tag_applied": false,
        "acknowledged": false, "mtime": 0.0
    })
    .to_string();
    let url = coordinator(vec![("", String::new()), ("200 OK", not)]);
    let (ok, stdout, stderr) = cancel(&url, &[]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("the incident does not read canceled"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot reach"), "{stderr}");
}

/// The coordinator answers once the cancel is recorded; Ganeti's answers that follow are
/// announced.
#[test]
fn a_cancel_answered_before_ganeti_s_answers_says_they_follow() {
    let answer = serde_json::json!({
        "id": "6f1f0b0e-3c1d-4b8e-9d2a-7c5e4f3a2b10", "result": "canceled",
        "jobs": [{"job": 7, "intent": "migrate-web", "canceled": true, "message": ""}],
        "following": "Ganeti's answers to 2 more cancels follow in the incident's history"
    })
    .to_string();
    let url = coordinator(vec![("200 OK", answer)]);
    let (ok, stdout, stderr) = cancel(&url, &[]);
    assert!(ok, "{stderr}");
    golden("cancel-following.txt", &stdout);
}
