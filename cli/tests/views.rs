//! `nodecare incidents`, `incidents show`, `nodes` and `watch` against a canned coordinator:
//! every output form compared with golden files under `tests/views/` (regenerate with
//! `UPDATE_GOLDEN=1`), gnt-* errors and exit codes.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

/// The time ages are measured from in these tests (the fixtures' round started then).
const NOW_MS: &str = "1795431210000";

/// Serves `bodies` (200 OK), one per connection, then stops; returns the base URL and a
/// receiver of the request lines.
fn coordinator(bodies: Vec<String>) -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for body in bodies {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            let mut first = true;
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if first {
                    let _ignored = tx.send(line.trim_end().to_owned());
                    first = false;
                }
                line.clear();
            }
            let mut stream = reader.into_inner();
            let _ignored = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, rx)
}

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(path)
}

fn overview() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("status/overview.json")).unwrap())
        .unwrap()
}

/// What `/1/status` and `/1/agents` answer, from the same fixture as `nodecare status`.
fn body_for(command: &str) -> String {
    match command {
        "incidents" => overview()["incidents"].to_string(),
        "nodes" => overview()["agents"].to_string(),
        "overview" => std::fs::read_to_string(fixture("status/overview.json")).unwrap(),
        _ => std::fs::read_to_string(fixture("views/incident.json")).unwrap(),
    }
}

fn nodecare(args: &[&str], url: &str) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .args(args)
        .args(["--url", url])
        .env_remove("NODECARE_COORDINATOR_URL")
        .env("NODECARE_NOW_MS", NOW_MS)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(fixture("views").join(name), actual);
}

/// Each list command in each form: plain, `--no-headers`, `--separator`, `-o`, `-o +`, `--json`.
#[test]
fn every_list_form_matches_its_golden_file() {
    let forms: &[(&str, &[&str])] = &[
        ("plain", &[]),
        ("no-headers", &["--no-headers"]),
        ("separator", &["--separator", "|"]),
        (
            "separator-no-headers",
            &["--no-headers", "--separator", ":"],
        ),
        ("fields", &["-o", "node,status,blocked_by"]),
        ("plus-fields", &["-o", "+mtime,failure"]),
        ("json", &["--json"]),
        ("json-fields", &["--json", "-o", "node,jobs"]),
    ];
    for command in ["incidents", "nodes"] {
        for (form, options) in forms {
            let options: Vec<&str> = options
                .iter()
                .map(|o| match (command, *o) {
                    ("nodes", "node,status,blocked_by") => "node,agent,error",
                    ("nodes", "+mtime,failure") => "+last_ok,checked,sequence",
                    ("nodes", "node,jobs") => "node,verdict,age",
                    _ => o,
                })
                .collect();
            let (url, requests) = coordinator(vec![body_for(command)]);
            let mut args = vec![command];
            args.extend(&options);
            let (code, stdout, stderr) = nodecare(&args, &url);
            assert_eq!(code, Some(0), "{command} {options:?}: {stderr}");
            let path = if command == "incidents" {
                "GET /1/status HTTP/1.1"
            } else {
                "GET /1/agents HTTP/1.1"
            };
            assert_eq!(requests.recv().unwrap(), path);
            if form.starts_with("json") {
                let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert!(rows.as_array().is_some_and(|r| !r.is_empty()), "{stdout}");
            }
            golden(&format!("{command}-{form}.txt"), &stdout);
        }
    }
}

/// `status` and `watch` take the list options too: `-o` for the incidents table, `-O` for the
/// agents table, `--no-headers`/`--separator` for both (no summary lines), `--json` for both.
#[test]
fn status_and_watch_take_every_list_form() {
    let forms: &[(&str, &[&str])] = &[
        ("no-headers", &["--no-headers"]),
        ("separator", &["--separator", "|"]),
        (
            "separator-no-headers",
            &["--no-headers", "--separator", ":"],
        ),
        (
            "fields",
            &["-o", "node,status,jobs", "-O", "node,sequence,age"],
        ),
        ("plus-fields", &["-a", "-o", "+mtime", "-O", "+sequence"]),
        ("json", &["--json"]),
        (
            "json-fields",
            &["--json", "-a", "-o", "node,jobs", "-O", "node,verdict"],
        ),
    ];
    for command in ["status", "watch"] {
        for (form, options) in forms {
            let (url, requests) = coordinator(vec![body_for("overview")]);
            let mut args = vec![command];
            if command == "watch" {
                args.extend(["--count", "1"]);
            }
            args.extend(*options);
            let (code, stdout, stderr) = nodecare(&args, &url);
            assert_eq!(code, Some(0), "{command} {options:?}: {stderr}");
            assert_eq!(requests.recv().unwrap(), "GET /1/overview HTTP/1.1");
            if command == "status" && form.starts_with("json") {
                let view: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert!(
                    view["incidents"].as_array().is_some_and(|r| !r.is_empty())
                        && view["agents"].as_array().is_some_and(|r| !r.is_empty()),
                    "{stdout}"
                );
            }
            golden(&format!("{command}-{form}.txt"), &stdout);
        }
    }
    let (code, _, stderr) = nodecare(&["status", "-O", "node,bogus"], "http://127.0.0.1:9");
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("-O: unknown output field(s) selected: bogus"),
        "{stderr}"
    );
}

/// `nodes` shows the reason of an `unknown` verdict and why an agent gave no verified report.
#[test]
fn nodes_explain_unknown_and_unreachable() {
    let (url, _requests) = coordinator(vec![body_for("nodes")]);
    let (code, stdout, stderr) = nodecare(&["nodes", "--no-headers", "--separator", "|"], &url);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(
            "node6.example.com|ok|unknown|1m|smart-disk: exit code 2: smartctl: not found"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("node4.example.com|unreachable|-|3m|http://"),
        "{stdout}"
    );
    assert!(
        stdout.contains("node5.example.com|unverifiable|-|-|signature"),
        "{stdout}"
    );
}

/// `incidents show` gives the history, each job with its status, the verdict and each script.
#[test]
fn incident_show_has_history_jobs_and_scripts() {
    let id = "0b1e0000-0000-4000-8000-000000000005";
    let (url, requests) = coordinator(vec![body_for("show"), body_for("show")]);
    let (code, stdout, stderr) = nodecare(&["incidents", "show", id], &url);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        requests.recv().unwrap(),
        format!("GET /1/incidents/{id} HTTP/1.1")
    );
    for needle in [
        "job 31: failed, migrate inst5 from node6.example.com to its DRBD secondary: Instance inst5 has file disks",
        // An older coordinator's step (no `what`): its kind and key.
        "job 32: succeeded, tag tag:failed",
        "2026-11-23 10:52:10 UTC failed: job 31 error",
        "smart-temp: unknown",
        "reason: exit code 2: smartctl: not found",
        "\"reallocated_sectors\":812",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in\n{stdout}");
    }
    golden("incident-show.txt", &stdout);
    let (code, stdout, stderr) = nodecare(&["incidents", "show", id, "--json"], &url);
    assert_eq!(code, Some(0), "{stderr}");
    golden("incident-show-json.txt", &stdout);
}

/// A canceled incident reads canceled: its tag was never set (and never will be), the jobs
/// Ganeti canceled read canceled.
#[test]
fn a_canceled_incident_reads_canceled() {
    let id = "0b1e0000-0000-4000-8000-000000000005";
    let body = std::fs::read_to_string(fixture("views/incident-canceled.json")).unwrap();
    let (url, _requests) = coordinator(vec![body]);
    let (code, stdout, stderr) = nodecare(&["incidents", "show", id], &url);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stdout.contains("not yet on the node"), "{stdout}");
    golden("incident-show-canceled.txt", &stdout);
}

/// Not on a terminal, `watch` prints the view with a time stamp, then only when it changes.
#[test]
fn watch_prints_changes_only() {
    let first = std::fs::read_to_string(fixture("status/overview.json")).unwrap();
    let mut changed = overview();
    changed["round"]["number"] = 43.into();
    let (url, _requests) = coordinator(vec![first.clone(), first, changed.to_string()]);
    let (code, stdout, stderr) = nodecare(&["watch", "--interval", "0.1", "--count", "3"], &url);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.matches("--- 2026-11-23 10:53:30 UTC").count(),
        2,
        "{stdout}"
    );
    assert!(
        stdout.contains("round 42") && stdout.contains("round 43"),
        "{stdout}"
    );
    golden("watch.txt", &stdout);
}

/// gnt-* habits: an unknown field is an error (exit 1) listing the valid fields; a bad option
/// is a usage error (exit 2); an unreachable coordinator is an error (exit 1).
#[test]
fn errors_and_exit_codes() {
    let unreachable = "http://127.0.0.1:9";
    let (code, stdout, stderr) = nodecare(&["incidents", "-o", "id,nonsense"], unreachable);
    assert_eq!(code, Some(1));
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("nonsense") && stderr.contains("valid fields: id, node, node_uuid, action"),
        "{stderr}"
    );
    let (code, _, stderr) = nodecare(&["nodes", "-o", "+bogus"], unreachable);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("bogus") && stderr.contains("fingerprint"),
        "{stderr}"
    );
    let (code, _, _) = nodecare(&["nodes", "--frobnicate"], unreachable);
    assert_eq!(code, Some(2));
    let (code, _, _) = nodecare(&["watch", "--interval", "0"], unreachable);
    assert_eq!(code, Some(2));
    let (code, _, stderr) = nodecare(&["nodes"], unreachable);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot reach the coordinator"), "{stderr}");
    let (code, _, stderr) = nodecare(&["incidents", "show", "../etc"], unreachable);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not an incident uuid"), "{stderr}");
    let (url, _requests) = coordinator(vec![r#"{"id":"x"}"#.to_owned()]);
    let (code, _, stderr) = nodecare(&["incidents"], &url);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not a list of incidents"), "{stderr}");
}

/// ^C (SIGINT) ends `watch` cleanly: exit code 0, promptly.
#[test]
fn watch_ends_cleanly_on_sigint() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .args(["watch", "--interval", "0.2", "--url", "http://127.0.0.1:9"])
        .env_remove("NODECARE_COORDINATOR_URL")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("--- "), "{first}");
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(0), "{status:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "watch did not end on SIGINT"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
