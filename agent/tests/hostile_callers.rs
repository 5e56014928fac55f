//! The agent against hostile callers on 127.0.0.1, in-process: unsigned replica pushes, long-poll
//! and connection floods, replayed checks across a restart, refusals counted instead of logged,
//! and a cluster key others can read or write.
//!
//! `unsigned_replica_pushes_keep_memory_flat` is also the measurement of `docs/RELIABILITY.md`
//! ("Hostile callers of the agent"); `NODECARE_PUSHES` sets how many pushes (default 100).
//!
//! Needs root (the whitelist requires root:root files); skips otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nodecare_agent::config::Config;
use nodecare_protocol::repair::{CheckRequest, sign_check_request};
use nodecare_protocol::{HmacKey, Signer, now_ms};
use support::{Fixture, fixture, get, request, root_test, script};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

mod support;

const NODE: &str = "node1.example.com";

fn config(fixture: &Fixture) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: Some(NODE.into()),
        hmac_key: fixture.key.clone(),
        state_dir: fixture.state.clone(),
        diagnose_dir: fixture.diagnose.clone(),
        diagnose_timeout_secs: 5,
        ..Config::default()
    }
}

async fn start(fixture: &Fixture) -> nodecare_agent::RunningAgent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    nodecare_agent::serve(config(fixture), listener)
        .await
        .unwrap()
}

fn ok_script(fixture: &Fixture) {
    script(
        &fixture.diagnose,
        "ok",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n",
        0o755,
    );
}

/// The sequence of the first signed report served.
/// The sequence of the first fresh signed report (not the stale one served before the first run).
async fn signed_sequence(address: SocketAddr) -> u64 {
    let started = Instant::now();
    loop {
        let answer = get(address, "/1/report/node/diagnose/signed").await;
        if answer.status == 200 && answer.json()["payload"]["stale"] == false {
            return answer.json()["sequence"].as_u64().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no signed report: {} {}",
            answer.status,
            answer.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A connection from `source` (an address of 127.0.0.0/8) to `to`.
async fn connect_from(source: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// The status of an HTTP answer read from `stream` (0 when closed without one).
async fn status_of(stream: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let _ignored = stream.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// One unsigned push announcing the largest frame and streaming zeros after a junk envelope
/// line until the agent answers or closes: its status (0: closed without an answer).
async fn unsigned_push(address: SocketAddr, deadline: Instant) -> u16 {
    let Ok(mut stream) = TcpStream::connect(address).await else {
        return 0;
    };
    let length = nodecare_protocol::replica::MAX_REPLICA_BYTES
        + nodecare_protocol::replica::MAX_ENVELOPE_LINE_BYTES as u64
        + 1;
    let head = format!(
        "PUT /1/replica HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {length}\r\n\r\n{{\"payload\":\"not signed\"}}\n"
    );
    if stream.write_all(head.as_bytes()).await.is_err() {
        return 0;
    }
    let (mut reader, mut writer) = stream.into_split();
    let zeros = vec![0_u8; 64 * 1024];
    let sender = tokio::spawn(async move {
        let mut sent = 0_u64;
        while sent < length && Instant::now() < deadline {
            if writer.write_all(&zeros).await.is_err() {
                break;
            }
            sent += zeros.len() as u64;
        }
    });
    let mut raw = Vec::new();
    let _ignored = tokio::time::timeout(
        deadline.saturating_duration_since(Instant::now()),
        reader.read_to_end(&mut raw),
    )
    .await;
    sender.abort();
    String::from_utf8_lossy(&raw)
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_replica_pushes_keep_memory_flat() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let pushes: usize = std::env::var("NODECARE_PUSHES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(100)
        .min(1_000);
    let fixture = fixture();
    ok_script(&fixture);
    let agent = start(&fixture).await;
    let address = agent.local_addr();
    signed_sequence(address).await;
    let baseline = rss_kib();
    let peak = Arc::new(AtomicU64::new(baseline));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // Signed reports keep being served meanwhile.
    let reader = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let (mut served, mut failed) = (0_u32, 0_u32);
            while !done.load(Ordering::Relaxed) {
                match tokio::time::timeout(
                    Duration::from_secs(5),
                    get(address, "/1/report/node/diagnose/signed"),
                )
                .await
                {
                    Ok(answer) if answer.status == 200 => served += 1,
                    _ => failed += 1,
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (served, failed)
        })
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    // In waves of 25 at once, below the per-address connection cap: every push reaches the
    // replica endpoint.
    for wave in (0..pushes).collect::<Vec<_>>().chunks(25) {
        let mut wave_tasks = tokio::task::JoinSet::new();
        for _ in wave {
            wave_tasks.spawn(unsigned_push(address, deadline));
        }
        while let Some(status) = wave_tasks.join_next().await {
            *statuses.entry(status.unwrap()).or_insert(0) += 1;
        }
    }
    let elapsed = started.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let (served, failed) = reader.await.unwrap();
    let after = rss_kib();
    let peak = peak.load(Ordering::Relaxed);
    println!(
        "pushes {pushes} in {:.1} s, statuses {statuses:?}; RSS baseline {} KiB, peak {} KiB (+{} KiB), after {} KiB; signed reports served {served}, failed {failed}",
        elapsed.as_secs_f64(),
        baseline,
        peak,
        peak.saturating_sub(baseline),
        after
    );
    assert_eq!(
        statuses.get(&403).copied().unwrap_or(0),
        pushes,
        "{statuses:?}"
    );
    assert!(
        peak.saturating_sub(baseline) < 16 * 1024,
        "RSS grew by {} KiB",
        peak.saturating_sub(baseline)
    );
    assert!(
        served > 0 && failed == 0,
        "served {served}, failed {failed}"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_beyond_their_caps_get_503_and_the_coordinator_still_waits() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    ok_script(&fixture);
    let agent = start(&fixture).await;
    let address = agent.local_addr();
    let sequence = signed_sequence(address).await;
    let poll = format!(
        "GET /1/report/node/diagnose/signed?after={sequence}&wait=30 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    // 70 long-polls from one address: a few wait, the others are told to come back later.
    let mut waiting = Vec::new();
    let mut refused = 0;
    for _ in 0..70 {
        let mut stream = connect_from([127, 0, 0, 1], address).await;
        stream.write_all(poll.as_bytes()).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(300), status_of(&mut stream)).await {
            Ok((status, text)) => {
                assert_eq!(status, 503, "{text}");
                assert!(
                    text.to_ascii_lowercase().contains("retry-after: 5"),
                    "{text}"
                );
                refused += 1;
            }
            Err(_) => waiting.push(stream),
        }
    }
    assert_eq!(waiting.len(), nodecare_agent::limits::MAX_WAITERS_PER_PEER);
    assert_eq!(refused, 70 - waiting.len());
    // The coordinator's watch, from its own address, still waits for a change.
    let mut watch = connect_from([127, 0, 0, 2], address).await;
    watch.write_all(poll.as_bytes()).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), status_of(&mut watch))
            .await
            .is_err(),
        "the coordinator's long-poll was answered at once"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_per_address_cap_are_closed_and_others_still_served() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let agent = start(&fixture).await;
    let address = agent.local_addr();
    // Slow pushes that never finish their header.
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut stream = connect_from([127, 0, 0, 1], address).await;
        let _ignored = stream
            .write_all(b"PUT /1/replica HTTP/1.1\r\nHost: x\r\n")
            .await;
        slow.push(stream);
    }
    let mut closed = 0;
    for stream in &mut slow {
        let mut byte = [0_u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(100), stream.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    assert_eq!(
        closed,
        100 - nodecare_agent::limits::MAX_CONNECTIONS_PER_PEER,
        "connections beyond the per-address cap are closed at once"
    );
    // Another address is served.
    let mut other = connect_from([127, 0, 0, 3], address).await;
    other
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (status, text) = tokio::time::timeout(Duration::from_secs(5), status_of(&mut other))
        .await
        .unwrap();
    assert_eq!(status, 200, "{text}");
    drop(slow);
    agent.shutdown().await;
}

fn check_body(key: &HmacKey, nonce: &str) -> Vec<u8> {
    let signer = Signer::new(key.clone(), NODE);
    let envelope = sign_check_request(
        &signer,
        CheckRequest {
            node: NODE.into(),
            check_nonce: nonce.into(),
        },
        1,
        now_ms(),
        60_000,
    )
    .unwrap();
    serde_json::to_vec(&envelope).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_check_is_refused_after_a_restart() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    ok_script(&fixture);
    let key = HmacKey::from_file(&fixture.key).unwrap();
    let body = check_body(&key, "captured-check");
    let agent = start(&fixture).await;
    let answer = request(agent.local_addr(), "POST", "/1/check", &body).await;
    assert_eq!(answer.status, 202, "{}", answer.text());
    agent.shutdown().await;
    let agent = start(&fixture).await;
    let answer = request(agent.local_addr(), "POST", "/1/check", &body).await;
    assert_eq!(answer.status, 409, "{}", answer.text());
    assert!(answer.text().contains("already used"), "{}", answer.text());
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_are_counted_not_logged_one_by_one() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let agent = start(&fixture).await;
    let forged = check_body(&HmacKey::new(b"not the cluster key".to_vec()), "forged");
    for _ in 0..20 {
        let answer = request(agent.local_addr(), "POST", "/1/check", &forged).await;
        assert_eq!(answer.status, 403);
    }
    let metrics = get(agent.local_addr(), "/metrics").await.text();
    assert!(
        metrics.contains(
            "nodecare_agent_requests_refused_total{endpoint=\"check\",status=\"403\"} 20"
        ),
        "{metrics}"
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_key_others_can_write_or_read_is_refused() {
    let Some(_serial) = root_test().await else {
        return;
    };
    for mode in [0o666, 0o644, 0o620] {
        let fixture = fixture();
        ok_script(&fixture);
        std::fs::set_permissions(&fixture.key, std::fs::Permissions::from_mode(mode)).unwrap();
        let agent = start(&fixture).await;
        let address = agent.local_addr();
        // The diagnose run happens; only what needs the key is unavailable, with the reason.
        let started = Instant::now();
        while get(address, "/1/report/node/diagnose").await.json()["data"]
            .get("fingerprint")
            .is_none()
        {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let answer = get(address, "/1/report/node/diagnose/signed").await;
        assert_eq!(answer.status, 503, "mode {mode:o}: {}", answer.text());
        assert!(
            answer.text().contains("refusing secret file"),
            "mode {mode:o}: {}",
            answer.text()
        );
        let check = request(address, "POST", "/1/check", b"{}").await;
        assert_eq!(check.status, 503, "mode {mode:o}");
        agent.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_connections_are_closed() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let config = config(&fixture);
    let collectors =
        nodecare_agent::collectors(&config, nodecare_collectors::Registry::new()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let limits = nodecare_agent::limits::ConnectionLimits {
        idle_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        ..nodecare_agent::limits::ConnectionLimits::default()
    };
    let agent = nodecare_agent::serve_with_limits(config, collectors, listener, Some(limits))
        .await
        .unwrap();
    let address = agent.local_addr();
    // Silent from the start; half a header; idle after an answered request (keep-alive).
    let silent = TcpStream::connect(address).await.unwrap();
    let mut half = TcpStream::connect(address).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut idle = TcpStream::connect(address).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    for (name, mut stream) in [("silent", silent), ("half a header", half), ("idle", idle)] {
        let mut raw = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw)).await;
        assert!(read.is_ok(), "{name}: still open after 5 s");
        if name == "idle" {
            assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
        }
    }
    assert!(started.elapsed() < Duration::from_secs(4));
    agent.shutdown().await;
}

/// One request from `source` on a new connection: its status and body, or `None` when the
/// connection was closed (or not answered within 5 s).
async fn try_request(
    source: [u8; 4],
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(u16, Vec<u8>)> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::from((source, 0))).ok()?;
    let mut stream = socket.connect(address).await.ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.write_all(body).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let status = String::from_utf8_lossy(&raw[..split])
        .split(' ')
        .nth(1)?
        .parse()
        .ok()?;
    Some((status, raw[split + 4..].to_vec()))
}

/// `addresses` addresses (127.0.1.1, 127.0.1.2, …) each keeping `per_address` connections open
/// with an unfinished request head, reopening each one the agent closes 10 ms later, until
/// dropped. Counts the connections refused (closed at once).
struct Flood {
    _tasks: tokio::task::JoinSet<()>,
    refused: Arc<AtomicU64>,
}

impl Flood {
    fn start(address: SocketAddr, addresses: u8, per_address: usize) -> Self {
        let refused = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 1..=addresses {
            for _ in 0..per_address {
                let refused = Arc::clone(&refused);
                tasks.spawn(async move {
                    loop {
                        let Some(mut stream) = connect_or_none([127, 0, 1, n], address).await
                        else {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        };
                        if stream
                            .write_all(b"PUT /1/replica HTTP/1.1\r\nHost: x\r\n")
                            .await
                            .is_ok()
                        {
                            let mut byte = [0_u8; 1];
                            // Held until the agent closes it (at once when over a cap).
                            let _closed = stream.read(&mut byte).await;
                        }
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                });
            }
        }
        Self {
            _tasks: tasks,
            refused,
        }
    }
}

async fn connect_or_none(source: [u8; 4], to: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::from((source, 0))).ok()?;
    socket.connect(to).await.ok()
}

/// [`try_request`] as the coordinator's clients make it: a call that got no answer at all (its
/// connection never accepted: a full listen queue drops the SYN) is made once more, as the
/// next round or replication interval would; one answered with an error is not. Counted in
/// `retried`.
async fn coordinator_request(
    retried: &mut usize,
    source: [u8; 4],
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Option<(u16, Vec<u8>)> {
    if let Some(answer) = try_request(source, address, method, path, body).await {
        return Some(answer);
    }
    *retried += 1;
    tokio::time::sleep(Duration::from_millis(100)).await;
    try_request(source, address, method, path, body).await
}

/// What the coordinator's calls from 127.0.0.1 got during one flood.
#[derive(Debug, Default)]
struct CoordinatorCalls {
    scrapes_ok: usize,
    pushes_ok: usize,
    reads_ok: usize,
    takeover_read_ok: bool,
    calls: usize,
    slowest: Duration,
    /// What the calls that did not get 200 got (`None`: no answer).
    missed: Vec<String>,
    /// Calls that got no answer and were made once more.
    retried: usize,
}

async fn coordinator_calls(address: SocketAddr, key: &HmacKey, epoch: u64) -> CoordinatorCalls {
    const ROUNDS: u64 = 10;
    let coordinator = [127, 0, 0, 1];
    let signer = Signer::new(key.clone(), NODE);
    let mut calls = CoordinatorCalls::default();
    let timed = |started: Instant, calls: &mut CoordinatorCalls| {
        calls.calls += 1;
        calls.slowest = calls.slowest.max(started.elapsed());
    };
    for number in 0..ROUNDS {
        let started = Instant::now();
        let scrape = coordinator_request(
            &mut calls.retried,
            coordinator,
            address,
            "GET",
            "/1/report/node/diagnose/signed",
            b"",
        )
        .await;
        timed(started, &mut calls);
        if scrape.is_some_and(|(status, _)| status == 200) {
            calls.scrapes_ok += 1;
        }
        let snapshot = format!("state {epoch}.{number}").into_bytes();
        let header = nodecare_protocol::replica::ReplicaHeader::describe(
            NODE,
            "node0.example.com",
            nodecare_protocol::replica::Generation { epoch, number },
            &snapshot,
            now_ms(),
        );
        let frame = nodecare_protocol::replica::sign_push(
            &signer,
            &header,
            &snapshot,
            number,
            now_ms(),
            60_000,
        )
        .unwrap();
        let started = Instant::now();
        let push = coordinator_request(
            &mut calls.retried,
            coordinator,
            address,
            "PUT",
            "/1/replica",
            &frame,
        )
        .await;
        timed(started, &mut calls);
        if push.as_ref().is_some_and(|(status, _)| *status == 200) {
            calls.pushes_ok += 1;
        } else {
            calls.missed.push(format!(
                "push {number}: {:?}",
                push.map(|(status, body)| (status, String::from_utf8_lossy(&body).into_owned()))
            ));
        }
        let read = |read_epoch: Option<u64>| {
            nodecare_protocol::replica::sign_read(
                &signer,
                &nodecare_protocol::replica::ReplicaRead {
                    node: NODE.into(),
                    read_nonce: format!("read{epoch}x{number}"),
                    epoch: read_epoch,
                },
                number,
                now_ms(),
                30_000,
            )
            .unwrap()
        };
        let started = Instant::now();
        let answer = coordinator_request(
            &mut calls.retried,
            coordinator,
            address,
            "POST",
            "/1/replica/read",
            &read(None),
        )
        .await;
        timed(started, &mut calls);
        if answer.is_some_and(|(status, _)| status == 200) {
            calls.reads_ok += 1;
        }
        if number + 1 == ROUNDS {
            // A takeover's read, promising the next epoch.
            let answer = coordinator_request(
                &mut calls.retried,
                coordinator,
                address,
                "POST",
                "/1/replica/read",
                &read(Some(epoch + 1)),
            )
            .await;
            calls.takeover_read_ok = answer.is_some_and(|(status, body)| {
                status == 200
                    && nodecare_protocol::replica::open_answer(
                        &nodecare_protocol::KeyRing::single(key.clone()),
                        &body,
                        now_ms(),
                        nodecare_protocol::VerifyPolicy::default(),
                        NODE,
                        &format!("read{epoch}x{number}"),
                        Some(epoch + 1),
                    )
                    .is_ok()
            });
        }
    }
    calls
}

/// A flood of unfinished requests from 10, then 40 addresses (64 connections each, reopened
/// as soon as closed) fills every connection open to them; the coordinator's scrapes, replica
/// pushes and reads and a takeover's read, from an address ssconf lists as a master candidate,
/// are all served. Also the figure of `docs/RELIABILITY.md` (`--nocapture` prints it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_many_addresses_leaves_the_coordinator_its_connections() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    ok_script(&fixture);
    let ssconf = tempfile::tempdir().unwrap();
    std::fs::write(
        ssconf.path().join("ssconf_master_candidates_ips"),
        "127.0.0.1\n127.0.0.2\n",
    )
    .unwrap();
    let config = Config {
        ssconf_dir: ssconf.path().to_owned(),
        ..config(&fixture)
    };
    let collectors =
        nodecare_agent::collectors(&config, nodecare_collectors::Registry::new()).unwrap();
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let limits = nodecare_agent::limits::ConnectionLimits::default();
    let agent = nodecare_agent::serve_with_limits(config, collectors, listener, Some(limits))
        .await
        .unwrap();
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    signed_sequence(address).await;
    let key = nodecare_agent::signing::load_key(&fixture.key).unwrap();
    let shared = limits.max_connections - limits.reserved;
    for (round, addresses) in [(1_u64, 10_u8), (2, 40)] {
        let flood = Flood::start(
            address,
            addresses,
            nodecare_agent::limits::MAX_CONNECTIONS_PER_PEER,
        );
        // Wait until the flood holds every connection open to it.
        let started = Instant::now();
        loop {
            if flood.refused.load(Ordering::Relaxed) as usize
                >= usize::from(addresses) * nodecare_agent::limits::MAX_CONNECTIONS_PER_PEER
                    - shared
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the flood never filled the shared connections"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let calls = coordinator_calls(address, &key, round * 2 - 1).await;
        let refused = flood.refused.load(Ordering::Relaxed);
        eprintln!(
            "flood from {addresses} addresses x {}: {refused} flood connections refused; coordinator: scrapes {}/10, pushes {}/10, reads {}/10, takeover read {}, slowest call {:?}, {} call(s) unanswered and made again",
            nodecare_agent::limits::MAX_CONNECTIONS_PER_PEER,
            calls.scrapes_ok,
            calls.pushes_ok,
            calls.reads_ok,
            calls.takeover_read_ok,
            calls.slowest,
            calls.retried
        );
        assert_eq!(
            (calls.scrapes_ok, calls.pushes_ok, calls.reads_ok),
            (10, 10, 10),
            "{addresses} addresses: {calls:?}"
        );
        assert!(calls.takeover_read_ok, "{addresses} addresses: {calls:?}");
        // The flood still gets nothing beyond the shared connections: another address is refused.
        let outsider = try_request([127, 0, 2, 1], address, "GET", "/healthz", b"").await;
        assert_eq!(outsider, None, "{addresses} addresses: an outsider got in");
        drop(flood);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    agent.shutdown().await;
}
