//! Measurements of the coordinator under a connection flood and under agents that cannot hold
//! its watches (docs/RELIABILITY.md, "Hostile callers of the coordinator"). Ignored by default:
//! run with `cargo test -p nodecare-tests --test api_flood -- --ignored --nocapture
//! --test-threads=1` (`NODECARE_FLOOD_SOURCES=many`: the flood from 10 000 addresses). The load only targets 127.0.0.1, bounded in count and time.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "measurements print"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    kib / 1024.0
}

#[allow(
    clippy::disallowed_methods,
    reason = "the measurement raises its own descriptor limit with a system tool"
)]
fn raise_descriptor_limit() {
    let hard = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(4).map(str::to_owned))
        .unwrap();
    let status = std::process::Command::new("prlimit")
        .arg("--pid")
        .arg(std::process::id().to_string())
        .arg(format!("--nofile={hard}:{hard}"))
        .status()
        .unwrap();
    assert!(status.success());
}

#[allow(
    clippy::disallowed_methods,
    reason = "the measurement's load runs in its own process"
)]
fn flood(port: u16) -> std::process::Child {
    let sources = std::env::var("NODECARE_FLOOD_SOURCES").unwrap_or_else(|_| "one".into());
    std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tools/slow-clients.py"
        ))
        .args([port.to_string(), "10000".into(), "45".into(), sources])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 10 000 connections for 40 s"]
async fn api_watches_and_rounds_survive_10000_slow_connections() {
    raise_descriptor_limit();
    let h = Harness::new(8, "", |config| config.round_interval = 2.0)
        .await
        .unwrap();
    let api = h.coordinator.api().clone();
    let agents = h.agents;
    let coordinator = h.coordinator;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(coordinator.run(listener, async {
        let _stopped = stopped.await;
    }));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_before = rss_mib();
    let round_before = api.board.last_round.read().unwrap().number;
    // The flood, in its own process: 10 000 connections from 127.0.0.2, each sending an
    // unfinished head, reopened 5 s after the coordinator closes one, for 45 s.
    let flood_until = Instant::now() + Duration::from_secs(45);
    let flood = flood(addr.port());
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The API from the operator's address.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut latencies = Vec::new();
    let mut failures = 0;
    // A verdict changes: the watch must see it and a round must open the incident.
    let changed = Instant::now();
    agents.get(&node(3)).unwrap().set_verdict(verdict(
        "evacuate",
        serde_json::json!({"disk": "sdb"}),
        None,
    ));
    let mut incident_after = None;
    while Instant::now() + Duration::from_secs(2) < flood_until {
        let started = Instant::now();
        match client.get(format!("http://{addr}/1/status")).send().await {
            Ok(answer) if answer.status() == 200 => latencies.push(started.elapsed()),
            _ => failures += 1,
        }
        if incident_after.is_none() && !api.store.incidents().unwrap().is_empty() {
            incident_after = Some(changed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let rss_during = rss_mib();
    let round_after = api.board.last_round.read().unwrap().number;
    let metrics = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let flood = flood.wait_with_output().unwrap();
    let _sent = stop.send(());
    let _ended = daemon.await;
    latencies.sort();
    let refused: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("nodecare_coordinator_api_refused_total"))
        .collect();
    let breaker = api.store.breaker().unwrap();
    println!(
        "flood: 10000 clients ({} source addresses) for 45 s: {}",
        std::env::var("NODECARE_FLOOD_SOURCES").unwrap_or_else(|_| "one".into()),
        String::from_utf8_lossy(&flood.stdout).trim()
    );
    println!(
        "API /1/status from 127.0.0.1: {} answered, {failures} failed; latency median {:?}, max {:?}",
        latencies.len(),
        latencies.get(latencies.len() / 2),
        latencies.last()
    );
    println!("rounds during the flood: {}", round_after - round_before);
    println!("changed verdict to incident: {incident_after:?}");
    println!(
        "RSS of the coordinator's process (with the fake agents) before {rss_before:.1} MiB, during {rss_during:.1} MiB"
    );
    println!("breaker open: {} {:?}", breaker.open, breaker.why);
    for line in refused {
        println!("{line}");
    }
    if std::env::var("NODECARE_FLOOD_SOURCES").as_deref() != Ok("many") {
        assert_eq!(failures, 0);
    }
    assert!(incident_after.is_some());
    assert!(round_after > round_before + 5);
    assert!(!breaker.open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 20 s of CPU time"]
async fn watches_of_agents_that_answer_at_once_cost_no_cpu() {
    // 50 agents whose waiters are all taken (100 others' long-polls each): they answer every
    // watch at once, half with 304, half with 503 and Retry-After.
    let mut targets = Vec::new();
    for i in 0..50 {
        let answer: &'static str = if i % 2 == 0 {
            "HTTP/1.1 304 Not Modified\r\ncontent-length: 0\r\n\r\n"
        } else {
            "HTTP/1.1 503 Service Unavailable\r\nretry-after: 5\r\ncontent-length: 4\r\n\r\nfull"
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = vec![0u8; 4096];
                    let _read = stream.read(&mut request).await;
                    let _written = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        targets.push(nodecare_coordinator::scrape::AgentTarget {
            node: format!("n{i}"),
            node_uuid: format!("u{i}"),
            base_url: format!("http://{address}"),
        });
    }
    let ring = Arc::new(nodecare_protocol::KeyRing::single(
        nodecare_tests::harness::test_key(),
    ));
    let board = Arc::new(nodecare_coordinator::board::Board::default());
    let mut watches = nodecare_coordinator::watch::Watches::new(
        ring,
        nodecare_coordinator::watch::WatchSettings::default(),
    )
    .with_board(&board);
    let idle_start = cpu_seconds();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = cpu_seconds() - idle_start;
    watches.sync(&targets);
    let start = cpu_seconds();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let used = cpu_seconds() - start;
    drop(watches);
    println!(
        "50 agents answering every watch at once: {used:.2} s of CPU in 20 s ({:.1} % of a core); idle: {idle:.2} s in 10 s",
        used / 20.0 * 100.0
    );
    let text = board.metrics.render(&[], std::iter::empty());
    for line in text
        .lines()
        .filter(|l| l.starts_with("nodecare_coordinator_watch_backoffs_total"))
    {
        println!("{line}");
    }
    assert!(used / 20.0 < 0.02, "{used}");
}
