//! Shared fixtures for the repair tests: a whitelist directory owned by the test's user, a
//! signer, a repair server on loopback and a minimal HTTP/1.1 client.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecare_agent::repair::http::serve;
use nodecare_agent::repair::{RepairConfig, RepairService};
use nodecare_collectors::whitelist::Owner;
use nodecare_protocol::repair::{RepairRequest, sign_repair_request};
use nodecare_protocol::sign::{HmacKey, KeyRing, SignedEnvelope, Signer};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

pub const NODE: &str = "node1.example.com";
pub const KEY: &[u8] = b"0123456789abcdef0123456789abcdef01234567\n";
pub const DELAY: Duration = Duration::from_millis(150);

pub struct Fixture {
    pub root: tempfile::TempDir,
    pub commands: PathBuf,
    pub state: PathBuf,
    pub marks: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let commands = root.path().join("node-repair-commands");
        let state = root.path().join("state");
        let marks = root.path().join("marks");
        for dir in [&commands, &state, &marks] {
            std::fs::create_dir(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::set_permissions(&marks, std::fs::Permissions::from_mode(0o777)).unwrap();
        Self {
            root,
            commands,
            state,
            marks,
        }
    }

    /// Whitelists a shell script. `@MARKS@` in the body becomes the marks directory.
    pub fn command(&self, name: &str, body: &str) -> PathBuf {
        let path = self.commands.join(name);
        let body = body.replace("@MARKS@", &self.marks.display().to_string());
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// A command that appends one line per run to `marks/<name>.runs`, echoes its stdin, and
    /// exits with `code`.
    pub fn counting_command(&self, name: &str, code: i32) -> PathBuf {
        self.command(
            name,
            &format!("echo run >> @MARKS@/{name}.runs\ncat\nexit {code}"),
        )
    }

    pub fn runs_of(&self, name: &str) -> usize {
        std::fs::read_to_string(self.marks.join(format!("{name}.runs")))
            .map(|text| text.lines().count())
            .unwrap_or(0)
    }

    pub fn config(&self) -> RepairConfig {
        let mut config = RepairConfig::new(NODE, &self.state);
        config.commands_dir = self.commands.clone();
        config.whitelist_owner = Owner {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        };
        config.invalid_request_delay = DELAY;
        config.lock_timeout = Duration::from_millis(300);
        config.output_grace = Duration::from_millis(300);
        config
    }

    /// The lines of both audit logs (accepted and refused requests), in time order.
    pub fn audit_lines(&self) -> Vec<Value> {
        let mut lines = self.audit_file_lines("repair-audit.jsonl");
        lines.extend(self.audit_file_lines("repair-refused.jsonl"));
        lines.sort_by_key(|line| line["at"].as_u64().unwrap_or(0));
        lines
    }

    /// The lines of one audit file under the state directory.
    pub fn audit_file_lines(&self, name: &str) -> Vec<Value> {
        std::fs::read_to_string(self.state.join(name))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

pub fn ring() -> KeyRing {
    KeyRing::single(HmacKey::new(KEY.to_vec()))
}

pub use nodecare_protocol::now_ms;

static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub fn request(incident: &str, command: &str) -> RepairRequest {
    let nonce = NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    RepairRequest {
        node: NODE.into(),
        incident_id: incident.into(),
        command: command.into(),
        input: json!({"status": "live-repair", "command": command,
                      "details": {"unit": "multipathd.service"}}),
        nonce: format!("nonce-{nonce}-{}", std::process::id()),
    }
}

pub fn sign(request: RepairRequest) -> SignedEnvelope {
    let signer = Signer::new(HmacKey::new(KEY.to_vec()), request.node.clone());
    sign_repair_request(&signer, request, 1, now_ms(), 60_000).unwrap()
}

pub fn incident(n: u32) -> String {
    format!("0190a1b2-c3d4-7e5f-8a9b-{n:012x}")
}

pub struct Server {
    pub addr: SocketAddr,
    pub service: Arc<RepairService>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start(config: RepairConfig) -> Self {
        let service = RepairService::open(config, ring()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, Arc::clone(&service), 4096, async move {
            let _ignored = stopped.await;
        }));
        Self {
            addr,
            service,
            stop: Some(stop),
            task,
        }
    }

    /// Stops accepting and abandons running commands, as a crash would.
    pub async fn crash(mut self) {
        self.service.abandon_runs();
        if let Some(stop) = self.stop.take() {
            let _ignored = stop.send(());
        }
        let _ignored = self.task.await;
    }

    /// Stops accepting once every run is over.
    pub async fn stop(mut self) {
        wait_until(Duration::from_secs(10), || self.service.is_idle()).await;
        if let Some(stop) = self.stop.take() {
            let _ignored = stop.send(());
        }
        let _ignored = self.task.await;
    }
}

pub async fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub elapsed: Duration,
}

/// Sends one HTTP/1.1 request on a new connection and reads the whole reply.
pub async fn http(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> Reply {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{headers}\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer and close before reading an oversized body.
    let _ignored = stream.write_all(body).await;
    let mut reply = Vec::new();
    let _ignored = stream.read_to_end(&mut reply).await;
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&reply).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_default();
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    Reply {
        status,
        body,
        elapsed,
    }
}

pub async fn post_bytes(addr: SocketAddr, body: &[u8]) -> Reply {
    let headers = format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    http(addr, "POST", "/1/repair", &headers, body).await
}

pub async fn post(addr: SocketAddr, envelope: &SignedEnvelope) -> Reply {
    post_bytes(addr, &serde_json::to_vec(envelope).unwrap()).await
}

pub async fn get(addr: SocketAddr, incident: &str) -> Reply {
    http(addr, "GET", &format!("/1/repair/{incident}"), "", b"").await
}

/// Polls `GET` until the record is final.
pub async fn wait_final(addr: SocketAddr, incident: &str) -> Value {
    let started = Instant::now();
    loop {
        let reply = get(addr, incident).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        if reply.body["state"] != "running" {
            return reply.body;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn path_exists(path: &Path) -> bool {
    path.exists()
}
