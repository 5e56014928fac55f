//! Shared fixtures for the in-process agent tests: root-owned temporary directories and
//! diagnose scripts (the whitelist requires root:root files) and a minimal HTTP/1.1 client.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// These tests count child processes and share the agent's metrics, so they run one at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn am_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The start of every root-only test: the [`SERIAL`] guard, or `None` (with a note) when not
/// running as root.
pub async fn root_test() -> Option<tokio::sync::MutexGuard<'static, ()>> {
    let serial = SERIAL.lock().await;
    if !am_root() {
        eprintln!("skipped: needs root for root:root whitelist files");
        return None;
    }
    Some(serial)
}

/// Creates `path` as a root-owned directory with mode 0755.
pub fn root_dir(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(path, Some(0), Some(0)).unwrap();
}

/// Writes a root-owned script `dir/name` with the given mode.
pub fn script(dir: &Path, name: &str, body: &str, mode: u32) {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    chown(&path, Some(0), Some(0)).unwrap();
}

/// A root-owned temporary tree: `diagnose/` and `repair/` whitelists, an HMAC key and a
/// state directory path.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub diagnose: PathBuf,
    pub repair: PathBuf,
    pub key: PathBuf,
    pub state: PathBuf,
}

pub fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    root_dir(dir.path());
    let diagnose = dir.path().join("diagnose");
    root_dir(&diagnose);
    let repair = dir.path().join("repair");
    root_dir(&repair);
    let key = dir.path().join("hmac.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef01234567\n").unwrap();
    // A secret readable by root alone, as the agent requires.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    Fixture {
        diagnose,
        repair,
        key,
        state: dir.path().join("state"),
        _dir: dir,
    }
}

pub struct Answer {
    pub status: u16,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Sends one request on a new connection and reads the whole answer.
pub async fn request(address: SocketAddr, method: &str, path: &str, body: &[u8]) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("answer within 10 s")
        .unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

pub async fn get(address: SocketAddr, path: &str) -> Answer {
    request(address, "GET", path, b"").await
}
