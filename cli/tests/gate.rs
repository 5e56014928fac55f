//! `nodecare disruption`, `nodecare budget` and `nodecare breaker` against a canned
//! coordinator: what they send (method, path, credentials, body), what they print (golden files
//! under `tests/gate/`, regenerate with `UPDATE_GOLDEN=1`) and their exit codes (0 done,
//! 3 refused, 1 errors, 2 usage).
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
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/gate")
            .join(name),
        actual,
    );
}

const GRANT: &str = r#"{"id":"9a000000-0000-4000-8000-000000000001","node":"node1","reason":"kernel update","requester":"reboot@node1","granted_ms":1795431000000,"expires_ms":1795432800000,"who":"ops"}"#;

#[test]
fn a_request_is_granted_renewed_or_refused_with_its_exit_code() {
    let refusal = r#"{"blocked_by":"failure domain rack:r1 is disrupted (node2: incident x); rack:r2 waits","blocked":{"kind":"domain","busy":"rack:r1","holders":["node2: incident x"],"wanted":"rack:r2"}}"#;
    let (url, seen) = coordinator(vec![
        ("201 Created", GRANT.to_owned()),
        ("200 OK", GRANT.to_owned()),
        ("429 Too Many Requests", refusal.to_owned()),
        (
            "503 Service Unavailable",
            r#"{"code":503,"message":"the coordinator has not finished a round yet"}"#.to_owned(),
        ),
    ]);
    let args = [
        "disruption",
        "request",
        "node1",
        "--reason",
        "kernel update",
        "--requester",
        "reboot@node1",
        "--ttl",
        "30m",
        "--user",
        "ops",
    ];
    let (code, stdout, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "granted disruption 9a000000-0000-4000-8000-000000000001 of node1 to reboot@node1 until 2026-11-23 11:20:00 UTC\n"
    );
    let (code, stdout, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("renewed disruption 9a00"), "{stdout}");
    let (code, stdout, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(3), "{stdout}{stderr}");
    assert_eq!(
        stderr,
        "nodecare disruption request: refused: failure domain rack:r1 is disrupted (node2: incident x); rack:r2 waits (retry later)\n"
    );
    let (code, _, stderr) = nodecare(&url, &args);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("HTTP 503") && stderr.contains("not finished a round"),
        "{stderr}"
    );

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/1/disruptions")
    );
    // ops:s3cret
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some("Basic b3BzOnMzY3JldA==")
    );
    let body: serde_json::Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"node": "node1", "reason": "kernel update", "requester": "reboot@node1", "ttl_s": 1800})
    );
}

#[test]
fn writes_without_credentials_say_how_to_give_them() {
    let (url, seen) = coordinator(vec![(
        "401 Unauthorized",
        r#"{"code":401,"message":"this action needs HTTP basic authentication"}"#.to_owned(),
    )]);
    let (code, _, stderr) = nodecare(
        &url,
        &[
            "disruption",
            "release",
            "9a000000-0000-4000-8000-000000000001",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("--user USER"),
        "{stderr}"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(
        (
            seen[0].method.as_str(),
            seen[0].path.as_str(),
            seen[0].authorization.as_deref()
        ),
        (
            "DELETE",
            "/1/disruptions/9a000000-0000-4000-8000-000000000001",
            None
        )
    );
}

#[test]
fn bad_input_is_refused_before_asking() {
    let url = "http://127.0.0.1:9";
    let (code, _, stderr) = nodecare(
        url,
        &[
            "disruption",
            "request",
            "n1",
            "--reason",
            "r",
            "--requester",
            "q",
            "--ttl",
            "2x",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) = nodecare(
        url,
        &[
            "disruption",
            "request",
            "n1",
            "--reason",
            " ",
            "--requester",
            "q",
            "--ttl",
            "5m",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("reason"), "{stderr}");
    let (code, _, stderr) = nodecare(
        url,
        &[
            "budget", "override", "--domain", "rack:r1", "--reason", "x", "--for", "1h", "--until",
            "18:00",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) = nodecare(
        url,
        &["budget", "override", "--domain", "rack:r1", "--reason", "x"],
    );
    assert_eq!(code, Some(2), "{stderr}");
    let (code, _, stderr) = nodecare(
        url,
        &[
            "budget",
            "override",
            "--domain",
            "rack:r1",
            "--reason",
            "x",
            "--until",
            "2020-01-01 00:00",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("past"), "{stderr}");
}

#[test]
fn overrides_are_set_revoked_and_listed() {
    let view = r#"{"id":"0e000000-0000-4000-8000-000000000001","domain":"rack:r2","until_ms":1795438350000,"reason":"firmware campaign","who":"admin","created_ms":1795431150000,"revoked_ms":null,"revoked_by":null,"active":true}"#;
    let revoked = r#"{"id":"0e000000-0000-4000-8000-000000000001","domain":"rack:r2","until_ms":1795438350000,"reason":"firmware campaign","who":"admin","created_ms":1795431150000,"revoked_ms":1795431200000,"revoked_by":"ops","active":false}"#;
    let (url, seen) = coordinator(vec![
        ("201 Created", view.to_owned()),
        ("200 OK", revoked.to_owned()),
        ("200 OK", format!("[{view},{revoked}]")),
    ]);
    let (code, stdout, stderr) = nodecare(
        &url,
        &[
            "budget",
            "override",
            "--domain",
            "rack:r2",
            "--for",
            "2h",
            "--reason",
            "firmware campaign",
            "--user",
            "admin",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    golden("override.txt", &stdout);
    let (code, stdout, stderr) = nodecare(
        &url,
        &[
            "budget",
            "revoke",
            "0e000000-0000-4000-8000-000000000001",
            "--user",
            "ops",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "revoked override 0e000000-0000-4000-8000-000000000001 of rack:r2\n"
    );
    let (code, stdout, stderr) = nodecare(&url, &["budget", "list"]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("budget-list.txt", &stdout);
    let seen = seen.lock().unwrap();
    let body: serde_json::Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"domain": "rack:r2", "duration_s": 7200, "reason": "firmware campaign"})
    );
    assert_eq!(seen[1].method, "DELETE");
    assert_eq!(seen[2].path, "/1/overrides");
}

#[test]
fn grants_and_the_breaker_are_shown() {
    let breaker = r#"{"open":true,"since_ms":1795431150000,"why":"4 of 8 agents unreachable","reset_by":null,"reset_ms":null}"#;
    let closed = r#"{"open":false,"since_ms":1795431150000,"why":"4 of 8 agents unreachable","reset_by":"ops","reset_ms":1795431300000}"#;
    let (url, seen) = coordinator(vec![
        ("200 OK", format!("[{GRANT}]")),
        ("200 OK", breaker.to_owned()),
        ("200 OK", closed.to_owned()),
        (
            "409 Conflict",
            r#"{"code":409,"message":"the storm breaker is not open"}"#.to_owned(),
        ),
    ]);
    let (code, stdout, stderr) = nodecare(&url, &["disruption", "list"]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("disruption-list.txt", &stdout);
    let (code, stdout, stderr) = nodecare(&url, &["breaker", "status"]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("breaker-status.txt", &stdout);
    let (code, stdout, stderr) = nodecare(
        &url,
        &[
            "breaker",
            "reset",
            "--reason",
            "detector fixed",
            "--user",
            "ops",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout,
        "storm breaker closed; last reset by ops at 2026-11-23 10:55:00 UTC\n"
    );
    let (code, _, stderr) = nodecare(&url, &["breaker", "reset", "--user", "ops"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("not open"), "{stderr}");
    let seen = seen.lock().unwrap();
    assert_eq!(
        (seen[2].method.as_str(), seen[2].path.as_str()),
        ("POST", "/1/breaker/reset")
    );
    assert_eq!(seen[2].body, r#"{"reason":"detector fixed"}"#);
}
