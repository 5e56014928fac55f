//! Compatibility with Debian's real `ganeti-mond` 3.0.2, side by side on loopback: the same
//! paths give the same status codes, bodies, list rows and report envelopes (field order, field
//! types and values), except where nodecare deliberately differs (Content-Type, HEAD, the
//! diagnose collector, cached timestamps).
//!
//! Needs root and the Ganeti packages (`ganeti`, `ganeti-haskell-3.0`); skips without them,
//! unless `NODECARE_REQUIRE_GANETI=1`, where a missing mond is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]
#![allow(clippy::disallowed_methods, reason = "the test runs shell helpers")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodecare_agent::config::Config;
use nodecare_collectors::{CollectFuture, Collector, CollectorSpec, Registry};
use nodecare_protocol::ReportKind;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MOND: &str = "/usr/sbin/ganeti-mond";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ganeti/mond-loopback.sh")
}

/// Whether to run; panics when Ganeti is required but missing.
fn prerequisites() -> bool {
    let required = std::env::var("NODECARE_REQUIRE_GANETI").is_ok_and(|value| value == "1");
    let mut missing = Vec::new();
    if !Path::new(MOND).exists() {
        missing.push(format!(
            "{MOND} (apt-get install ganeti ganeti-haskell-3.0)"
        ));
    }
    if !script().exists() {
        missing.push(script().display().to_string());
    }
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_owned());
    }
    if missing.is_empty() {
        return true;
    }
    assert!(
        !required,
        "NODECARE_REQUIRE_GANETI=1 but missing: {}",
        missing.join(", ")
    );
    eprintln!("skipped: missing {}", missing.join(", "));
    false
}

struct Mond {
    port: u16,
}

impl Mond {
    fn start() -> Self {
        // A free port: bind, read, release.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let output = std::process::Command::new("bash")
            .arg(script())
            .args(["start", &port.to_string(), "--confd-stub"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "mond-loopback.sh start failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Self { port }
    }

    fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for Mond {
    fn drop(&mut self) {
        let _stopped = std::process::Command::new("bash")
            .arg(script())
            .args(["stop", &self.port.to_string()])
            .output();
    }
}

struct Answer {
    status: u16,
    body: Vec<u8>,
}

async fn get(address: SocketAddr, path: &str) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let text = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(text.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut raw))
        .await
        .expect("answer in time")
        .unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Answer { status, body }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16)
            .unwrap();
        raw = &raw[line_end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// A stand-in with the identity of one of mond's collectors.
#[derive(Debug)]
struct SameIdentity(CollectorSpec, Value);

impl Collector for SameIdentity {
    fn spec(&self) -> &CollectorSpec {
        &self.0
    }
    fn collect(&self) -> CollectFuture<'_> {
        let value = self.1.clone();
        Box::pin(async move { Ok(value) })
    }
}

fn registry_like(list: &Value) -> Registry {
    let mut registry = Registry::new();
    for row in list.as_array().unwrap() {
        let name = row[0].as_str().unwrap();
        let category = row[1].as_str().unwrap();
        let kind = if row[2] == 0 {
            ReportKind::Performance
        } else {
            ReportKind::Status
        };
        let category = (category != "default").then_some(category);
        registry.register(Arc::new(SameIdentity(
            CollectorSpec::builtin(
                name,
                category,
                kind,
                Duration::from_secs(5),
                Duration::from_secs(2),
            ),
            serde_json::json!([]),
        )));
    }
    registry
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(number) if number.is_u64() => "unsigned",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Field names in serialised order (serde_json without preserve_order sorts maps, so read the
/// raw text).
fn field_order(raw: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut depth = 0_i32;
    let mut chars = raw.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            '"' => {
                let start = at + 1;
                let mut end = start;
                let mut escaped = false;
                for (i, c) in chars.by_ref() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        end = i;
                        break;
                    }
                }
                let rest = raw[end + 1..].trim_start();
                if depth == 1 && rest.starts_with(':') {
                    fields.push(raw[start..end].to_owned());
                }
            }
            _ => {}
        }
    }
    fields
}

fn compare_envelopes(mond: &Value, ours: &Value, mond_raw: &str, ours_raw: &str) {
    assert_eq!(field_order(mond_raw), field_order(ours_raw), "field order");
    // `data` belongs to each collector (and its own compatibility tests); the stand-ins here
    // only share the identity.
    assert!(ours.get("data").is_some());
    for field in [
        "name",
        "version",
        "format_version",
        "timestamp",
        "category",
        "kind",
    ] {
        assert_eq!(
            json_type(&mond[field]),
            json_type(&ours[field]),
            "type of {field}: mond {} ours {}",
            mond[field],
            ours[field]
        );
    }
    for field in ["name", "version", "format_version", "category", "kind"] {
        assert_eq!(mond[field], ours[field], "{field}");
    }
    let (a, b) = (
        mond["timestamp"].as_u64().unwrap(),
        ours["timestamp"].as_u64().unwrap(),
    );
    assert_eq!(a % 1000, 0);
    assert_eq!(b % 1000, 0);
    assert!(
        a.abs_diff(b) < 600_000_000_000,
        "timestamps {a} and {b} are far apart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_answers_like_real_mond() {
    if !prerequisites() {
        return;
    }
    let mond = Mond::start();
    let mond_address = mond.address();
    // mond answers once confd (the stub) has told it which collectors are active.
    let mut list = Value::Null;
    for _ in 0..100 {
        if let Ok(Ok(mut stream)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(mond_address),
        )
        .await
        {
            drop(stream.shutdown().await);
            let answer = get(mond_address, "/1/list/collectors").await;
            if answer.status == 200 {
                list = serde_json::from_slice(&answer.body).unwrap();
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(list.is_array(), "mond did not come up");

    let dir = tempfile::tempdir().unwrap();
    let diagnose = dir.path().join("diagnose");
    std::fs::create_dir(&diagnose).unwrap();
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: Some("node1".into()),
        hmac_key: dir.path().join("no-key"),
        state_dir: dir.path().join("state"),
        diagnose_dir: diagnose,
        ..Config::default()
    };
    let collectors = nodecare_agent::collectors(&config, registry_like(&list)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve_with(config, collectors, listener)
        .await
        .unwrap();
    let ours_address = agent.local_addr();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Same status and body.
    for path in [
        "/",
        "/1",
        "/1/",
        "/foo",
        "/1/list",
        "/1/report",
        "/1/report/",
        "/1/report/storage",
        "/1/report/bogus/lv",
        "/1/report/storage/nope",
        "/1/report/instance/lv",
        "/1/report/default/lv",
    ] {
        let (theirs, ours) = (get(mond_address, path).await, get(ours_address, path).await);
        assert_eq!(theirs.status, ours.status, "{path}");
        assert_eq!(
            String::from_utf8_lossy(&theirs.body),
            String::from_utf8_lossy(&ours.body),
            "{path}"
        );
    }

    // The list: mond's rows, then our diagnose collector.
    for path in ["/1/list/collectors", "/1/list/collectors/extra"] {
        let theirs: Value = serde_json::from_slice(&get(mond_address, path).await.body).unwrap();
        let ours: Value = serde_json::from_slice(&get(ours_address, path).await.body).unwrap();
        let mut expected = theirs.as_array().unwrap().clone();
        expected.push(serde_json::json!(["diagnose", "node", 1]));
        assert_eq!(Value::Array(expected), ours, "{path}");
    }

    // Report envelopes, one by one and in /1/report/all.
    for row in list.as_array().unwrap() {
        let path = format!(
            "/1/report/{}/{}",
            row[1].as_str().unwrap(),
            row[0].as_str().unwrap()
        );
        for path in [path.clone(), format!("{path}/extra")] {
            let (theirs, ours) = (
                get(mond_address, &path).await,
                get(ours_address, &path).await,
            );
            assert_eq!((theirs.status, ours.status), (200, 200), "{path}");
            let (theirs_raw, ours_raw) = (
                String::from_utf8(theirs.body).unwrap(),
                String::from_utf8(ours.body).unwrap(),
            );
            compare_envelopes(
                &serde_json::from_str(&theirs_raw).unwrap(),
                &serde_json::from_str(&ours_raw).unwrap(),
                &theirs_raw,
                &ours_raw,
            );
        }
    }
    let theirs = get(mond_address, "/1/report/all").await;
    let ours = get(ours_address, "/1/report/all").await;
    assert_eq!((theirs.status, ours.status), (200, 200));
    let theirs: Vec<Value> = serde_json::from_slice(&theirs.body).unwrap();
    let ours: Vec<Value> = serde_json::from_slice(&ours.body).unwrap();
    assert_eq!(theirs.len() + 1, ours.len());
    for (mond_report, our_report) in theirs.iter().zip(&ours) {
        let (a, b) = (mond_report.to_string(), our_report.to_string());
        compare_envelopes(mond_report, our_report, &a, &b);
    }
    let diagnose = ours.last().unwrap();
    assert_eq!(diagnose["name"], "diagnose");
    assert_eq!(diagnose["category"], "node");
    assert_eq!(diagnose["kind"], 1);

    agent.shutdown().await;
    drop(mond);
}
