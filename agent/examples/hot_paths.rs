//! The agent's hot paths, N times each, for instruction counts under
//! `valgrind --tool=callgrind` (the same binary and input give the same count whatever the
//! machine is doing; see `bench/agent/callgrind.sh`). Not part of the agent.
//!
//! `hot_paths request N`: N `GET /1/report/all` on one keep-alive connection to an in-process
//! agent (the diagnose collector only, no scripts).
//! `hot_paths sign N`: N signed diagnose reports (sequence number included).
//! The per-operation figure is (count with N) − (count with 0), divided by N.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::Context;
use nodecare_agent::config::Config;
use nodecare_agent::signing::DiagnoseSigner;
use nodecare_agent::state::StateDir;
use nodecare_collectors::Registry;
use nodecare_collectors::diagnose::DiagnoseRun;
use nodecare_protocol::{HmacKey, NodeVerdict, Signer};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let what = args.next().context("usage: hot_paths request|sign N")?;
    let count: u64 = args
        .next()
        .context("usage: hot_paths request|sign N")?
        .parse()?;
    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    match what.as_str() {
        "request" => runtime.block_on(requests(dir.path(), count)),
        "sign" => runtime.block_on(signs(dir.path(), count)),
        other => anyhow::bail!("unknown hot path {other}"),
    }
}

async fn requests(dir: &std::path::Path, count: u64) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let diagnose = dir.join("diagnose");
    std::fs::create_dir(&diagnose)?;
    std::fs::set_permissions(&diagnose, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(dir.join("key"), "00112233445566778899aabbccddeeff\n")?;
    let config = Config {
        listen: "127.0.0.1:0".parse()?,
        node_name: Some("node1".into()),
        hmac_key: dir.join("key"),
        state_dir: dir.join("state"),
        diagnose_dir: diagnose,
        ..Config::default()
    };
    let collectors = nodecare_agent::collectors(&config, Registry::new())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let agent = nodecare_agent::serve_with(config, collectors, listener).await?;
    let address = agent.local_addr();
    // The first diagnose run (no scripts) ends before the requests start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let client = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.set_nodelay(true)?;
        let mut buffer = vec![0_u8; 65_536];
        for _ in 0..count {
            stream.write_all(b"GET /1/report/all HTTP/1.1\r\nHost: a\r\n\r\n")?;
            let mut answer = Vec::new();
            // Headers, then Content-Length bytes of body.
            loop {
                let read = stream.read(&mut buffer)?;
                anyhow::ensure!(read > 0, "the agent closed the connection");
                answer.extend_from_slice(&buffer[..read]);
                if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&answer[..end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .context("no content-length")?
                        .trim()
                        .parse()?;
                    if answer.len() >= end + 4 + length {
                        break;
                    }
                }
            }
        }
        Ok(())
    });
    client.await??;
    agent.shutdown().await;
    Ok(())
}

async fn signs(dir: &std::path::Path, count: u64) -> anyhow::Result<()> {
    let state = StateDir::open(&dir.join("state"))?;
    let signer = Signer::new(
        HmacKey::new(b"00112233445566778899aabbccddeeff\n".to_vec()),
        "node1",
    );
    let mut diagnose = DiagnoseSigner::new(
        Ok(signer),
        state,
        Duration::from_secs(180),
        Duration::from_secs(60),
    )?;
    let run = DiagnoseRun {
        verdict: NodeVerdict::merge(std::collections::BTreeMap::new())?,
        collected_at_ms: 1,
    };
    // One signing before the measured ones: the counter's first block is reserved here.
    diagnose.sign(&run, false).await?;
    for _ in 0..count {
        diagnose.sign(&run, false).await?;
    }
    Ok(())
}
