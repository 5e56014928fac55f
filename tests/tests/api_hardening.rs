//! The coordinator's API against hostile clients: slow and idle connections are closed, the
//! connection cap answers 503 and keeps the API serving, bodies are bounded in size and time,
//! cross-site writes and non-JSON writes are refused, password guessing is throttled, and
//! floods from many addresses leave operators the connections kept for them and the local socket.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    reason = "tests; the CLI's binary runs as an operator would run it"
)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nodecare_coordinator::server::{ServerLimits, serve};
use nodecare_tests::harness::Harness;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(limits: ServerLimits) -> (Harness, SocketAddr, tokio::task::JoinHandle<()>) {
    let h = Harness::new(2, "", |_| {}).await.unwrap();
    let (addr, server) = serve_with(&h, "admin secret write\n", limits).await;
    (h, addr, server)
}

/// Serves `h`'s API with the users file `users` (written now) and `limits`.
async fn serve_with(
    h: &Harness,
    users: &str,
    limits: ServerLimits,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let path = h.state_dir.path().join("users");
    nodecare_tests::harness::write_secret(&path, users).unwrap();
    let mut api = h.coordinator.api().clone();
    api.users = Some(path);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let board = std::sync::Arc::clone(&api.board);
    let app = nodecare_coordinator::http::router_with(api, limits);
    let server = tokio::spawn(serve(listener, app, limits, board, std::future::pending()));
    (addr, server)
}

fn small_limits() -> ServerLimits {
    ServerLimits {
        max_connections: 8,
        max_per_client: 32,
        reserved: 0,
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        max_body_bytes: 64 * 1024,
        connection_lifetime: Duration::from_secs(4),
        reads_need_login: false,
    }
}

/// Reads until the peer closes (or `limit` passes): how long that took, and what was read.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (Option<Duration>, Vec<u8>) {
    let started = Instant::now();
    let mut all = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(
            tokio::time::Instant::from_std(started + limit),
            stream.read(&mut buffer),
        )
        .await
        {
            Ok(Ok(0) | Err(_)) => return (Some(started.elapsed()), all),
            Ok(Ok(n)) => all.extend_from_slice(&buffer[..n]),
            Err(_) => return (None, all),
        }
    }
}

async fn metric(addr: SocketAddr, reason: &str) -> u64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let needle = format!("nodecare_coordinator_api_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&needle))
        .unwrap_or_else(|| panic!("no {needle} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_closed() {
    let (_h, addr, _server) = start(small_limits()).await;
    // Slowloris: a head never finished.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /1/status HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (closed, _) = until_closed(&mut slow, Duration::from_secs(8)).await;
    let closed = closed.expect("a head never finished is closed");
    assert!(closed < Duration::from_secs(3), "{closed:?}");
    // Idle after one answered request (keep-alive).
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (closed, answer) = until_closed(&mut idle, Duration::from_secs(8)).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    let closed = closed.expect("an idle kept-alive connection is closed");
    assert!(closed < Duration::from_secs(5), "{closed:?}");
    // A body that never arrives: 408.
    let mut body = TcpStream::connect(addr).await.unwrap();
    body.write_all(
        b"POST /1/breaker/reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    let (_, answer) = until_closed(&mut body, Duration::from_secs(8)).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(metric(addr, "body_timeout").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_answers_503_and_the_api_keeps_serving() {
    let limits = ServerLimits {
        header_timeout: Duration::from_secs(30),
        connection_lifetime: Duration::from_secs(60),
        ..small_limits()
    };
    let (_h, addr, _server) = start(limits).await;
    let mut held = Vec::new();
    for _ in 0..limits.max_connections {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut over = TcpStream::connect(addr).await.unwrap();
    let (closed, answer) = until_closed(&mut over, Duration::from_secs(5)).await;
    assert!(
        closed.is_some(),
        "a connection over the cap is closed at once"
    );
    assert!(
        answer.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // One client address holds at most its share: another address still gets in.
    let limits_per_client = ServerLimits {
        max_per_client: 2,
        ..limits
    };
    let (_h2, addr2, _server2) = start(limits_per_client).await;
    let mut greedy = Vec::new();
    for _ in 0..2 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stream = socket.connect(addr2).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        greedy.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut third = socket.connect(addr2).await.unwrap();
    let (_, answer) = until_closed(&mut third, Duration::from_secs(5)).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let status = reqwest::get(format!("http://{addr2}/1/status"))
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    assert!(metric(addr2, "client_cap").await >= 1);
    // Once the held connections go, the API serves again (and counts what it refused).
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(metric(addr, "connection_cap").await >= 1);
}

/// The reads with a cost (`explain`, `what-if`, JSON and pages) are refused from another site
/// as writes are; the same reads from the coordinator's own page, a typed address or the CLI
/// pass, and cheap reads pass from anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_reads_from_another_site_are_refused() {
    let (h, addr, _server) = start(small_limits()).await;
    let client = reqwest::Client::new();
    let before = metric(addr, "cross_site").await;
    let costly = [
        "/1/explain?node=node1.sim.test",
        "/ui/explain?node=node1.sim.test",
        "/1/what-if?verdict=node2.sim.test:evacuate",
        "/ui/what-if?verdict=node2.sim.test:evacuate",
    ];
    for path in costly {
        for (name, value) in [
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            let answer = client
                .get(format!("http://{addr}{path}"))
                .header(name, value)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 403, "{path} with {name}: {value}");
            let text = answer.text().await.unwrap();
            assert!(text.contains("costly read"), "{path}: {text}");
        }
        for (name, value) in [
            ("sec-fetch-site", "same-origin"),
            ("sec-fetch-site", "none"),
            ("x-nothing", "the CLI"),
        ] {
            let answer = client
                .get(format!("http://{addr}{path}"))
                .header(name, value)
                .send()
                .await
                .unwrap();
            assert_ne!(answer.status(), 403, "{path} with {name}: {value}");
        }
    }
    assert_eq!(metric(addr, "cross_site").await, before + 12);
    // No more than EXPLAIN_CONCURRENCY explanations at once: with every permit taken, one more
    // is answered 503 with Retry-After, as JSON and as a page.
    let permits: Vec<_> = (0..nodecare_coordinator::board::EXPLAIN_CONCURRENCY)
        .map(|_| h.coordinator.api().board.explains.try_take().unwrap())
        .collect();
    for path in [
        "/1/explain?node=node1.sim.test",
        "/ui/explain?node=node1.sim.test",
    ] {
        let answer = client
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 503, "{path}");
        assert_eq!(answer.headers()["retry-after"], "1", "{path}");
        let text = answer.text().await.unwrap();
        assert!(text.contains("try again"), "{path}: {text}");
    }
    assert_eq!(metric(addr, "explain_busy").await, 2);
    drop(permits);
    let answer = client
        .get(format!("http://{addr}/1/explain?node=node1.sim.test"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // A cheap read from another site is answered.
    let answer = client
        .get(format!("http://{addr}/1/status"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

/// `api_reads_need_login`: every read needs a user of the users file (a reader is enough),
/// answered 401 with the API's challenge or, under `/ui/`, the page's; wrong passwords count
/// as failed logins. Off (the default), reads need none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_need_a_login_when_the_site_asks_for_it() {
    let (h, open, _server) = start(small_limits()).await;
    let client = reqwest::Client::new();
    let answer = client
        .get(format!("http://{open}/1/status"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let limits = ServerLimits {
        reads_need_login: true,
        ..small_limits()
    };
    let (addr, _closed) = serve_with(&h, "admin secret write\nviewer look read\n", limits).await;
    let failures = metric(open, "auth_failure").await;
    for (path, realm) in [
        ("/1/status", "nodecare API"),
        ("/1/overview", "nodecare API"),
        ("/metrics", "nodecare API"),
        ("/ui/", "nodecare admin page"),
    ] {
        let answer = client
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 401, "{path}");
        let challenge = answer.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(challenge.contains(realm), "{path}: {challenge}");
        for (user, password, status) in [
            ("viewer", "look", 200),
            ("admin", "secret", 200),
            ("viewer", "nope", 401),
        ] {
            let answer = client
                .get(format!("http://{addr}{path}"))
                .basic_auth(user, Some(password))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), status, "{path} as {user}:{password}");
        }
    }
    // The wrong passwords were counted as failed logins (the board is shared).
    assert_eq!(metric(open, "auth_failure").await, failures + 4);
    // A reader still cannot write.
    let answer = client
        .post(format!("http://{addr}/1/breaker/reset"))
        .basic_auth("viewer", Some("look"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_cross_site_and_non_json_writes_are_refused() {
    let (_h, addr, _server) = start(small_limits()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/1/overrides");
    let body = serde_json::json!({"domain": "group:default", "duration_s": 600, "reason": "x"});
    // Too large.
    let answer = client
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .header("content-type", "application/json")
        .body(vec![b' '; 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    // The unread rest of the body is still on the connection: it is not used again.
    assert_eq!(answer.headers()["connection"], "close");
    // A form (text/plain) with the right credentials.
    let answer = client
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .header("content-type", "text/plain")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 415);
    // From another site, even as JSON.
    for (name, value) in [
        ("origin", "http://evil.example"),
        ("origin", "null"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
    ] {
        let answer = client
            .post(&url)
            .basic_auth("admin", Some("secret"))
            .header(name, value)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403, "{name}: {value}");
    }
    // The bodyless writes too.
    let answer = client
        .post(format!("http://{addr}/1/breaker/reset"))
        .basic_auth("admin", Some("secret"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    assert!(metric(addr, "cross_site").await >= 5);
    // Text past its limit: a clear 400 naming the field, nothing stored.
    for (path, body, field) in [
        (
            "/1/overrides",
            serde_json::json!({"domain": "group:default", "duration_s": 600, "reason": "r".repeat(2000)}),
            "longer than the 1024",
        ),
        (
            "/1/disruptions",
            serde_json::json!({"node": "n", "reason": "r", "requester": "q".repeat(300), "ttl_s": 60}),
            "longer than the 255",
        ),
        (
            "/1/maintenance",
            serde_json::json!({"hook": "reboot", "offline": vec!["n"; 1001]}),
            "more than the 1000",
        ),
    ] {
        let answer = client
            .post(format!("http://{addr}{path}"))
            .basic_auth("admin", Some("secret"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "{path}");
        let text = answer.text().await.unwrap();
        assert!(text.contains(field), "{path}: {text}");
    }
    // The CLI's way (basic auth, JSON, no Origin) and a same-origin page still write.
    let answer = client
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_ne!(answer.status(), 403);
    assert_ne!(answer.status(), 415);
    let answer = client
        .post(format!("http://{addr}/1/breaker/reset"))
        .basic_auth("admin", Some("secret"))
        .header("origin", format!("http://{addr}"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    // Reaches the handler (the breaker is not open).
    assert_eq!(answer.status(), 409, "{:?}", answer.text().await);
    // The API's challenge is not the page's: a browser never answers one with the other's
    // credentials.
    let api = client.post(&url).json(&body).send().await.unwrap();
    let page = client
        .get(format!("http://{addr}/ui/admin/"))
        .send()
        .await
        .unwrap();
    assert_eq!((api.status().as_u16(), page.status().as_u16()), (401, 401));
    let realm = |answer: &reqwest::Response| {
        answer.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(realm(&api), realm(&page));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_guessing_is_throttled() {
    let (_h, addr, _server) = start(small_limits()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/1/breaker/reset");
    let mut statuses = Vec::new();
    for guess in 0..15 {
        let answer = client
            .post(&url)
            .basic_auth("admin", Some(format!("guess{guess}")))
            .send()
            .await
            .unwrap();
        statuses.push(answer.status().as_u16());
    }
    assert_eq!(statuses[..10], [401; 10]);
    assert_eq!(statuses[10..], [429; 5]);
    // Even the right password waits out the window.
    let answer = client
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    let wait: u64 = answer.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(metric(addr, "auth_failure").await, 10);
    assert!(metric(addr, "auth_throttled").await >= 6);
}

/// Someone else's guessing never refuses the operator: guesses of another user from the
/// operator's address, and guesses of the operator's user from many other addresses (any local
/// user can bind 127/8), leave the right password getting in; the latter only slow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn others_guessing_never_lock_the_operator_out() {
    let (_h, addr, _server) = start(small_limits()).await;
    let url = format!("http://{addr}/1/breaker/reset");
    let from = |n: u8| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, n]))
            .build()
            .unwrap()
    };
    let operator = from(1);
    for guess in 0..15 {
        let answer = operator
            .post(&url)
            .basic_auth("mallory", Some(format!("guess{guess}")))
            .send()
            .await
            .unwrap();
        assert!([401, 429].contains(&answer.status().as_u16()));
    }
    let right = operator
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    // Reaches the handler: the breaker is not open.
    assert_eq!(right.status(), 409, "{:?}", right.text().await);
    // The operator's user guessed once from each of 32 other addresses (30 slow it).
    for n in 2..34 {
        let answer = from(n)
            .post(&url)
            .basic_auth("admin", Some("wrong"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 401);
    }
    let started = std::time::Instant::now();
    let right = operator
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 409, "{:?}", right.text().await);
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "slowed, not refused: {:?}",
        started.elapsed()
    );
    assert!(metric(addr, "auth_slowed").await >= 1);
    assert_eq!(metric(addr, "auth_throttled").await, 5);
}

/// The `nodecare` binary: `NODECARE_BIN`, else `nodecare` in the profile directory this test
/// binary was built into.
fn nodecare_bin() -> std::path::PathBuf {
    if let Some(path) = std::env::var_os("NODECARE_BIN") {
        return std::path::PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .filter(|dir| dir.ends_with("deps"))
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("nodecare");
    assert!(
        bin.is_file(),
        "{} does not exist: build it first with `cargo build -p nodecare-cli`, or set NODECARE_BIN",
        bin.display()
    );
    bin
}

/// `addresses` addresses (127.0.1.1, …) each keeping `per_address` connections open with an
/// unfinished request head, reopening each one closed 10 ms later, until dropped; counts the
/// connections closed (refused at once, or cut by the head timeout).
struct Flood {
    _tasks: tokio::task::JoinSet<()>,
    closed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Flood {
    fn start(addr: SocketAddr, addresses: u8, per_address: usize) -> Self {
        let closed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for n in 1..=addresses {
            for _ in 0..per_address {
                let closed = std::sync::Arc::clone(&closed);
                tasks.spawn(async move {
                    loop {
                        let socket = tokio::net::TcpSocket::new_v4().unwrap();
                        if socket.bind(SocketAddr::from(([127, 0, 1, n], 0))).is_ok()
                            && let Ok(mut stream) = socket.connect(addr).await
                            && stream
                                .write_all(b"GET /1/status HTTP/1.1\r\n")
                                .await
                                .is_ok()
                        {
                            let mut buffer = [0_u8; 256];
                            while let Ok(read) = stream.read(&mut buffer).await {
                                if read == 0 {
                                    break;
                                }
                            }
                        }
                        closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                });
            }
        }
        Self {
            _tasks: tasks,
            closed,
        }
    }

    fn closed(&self) -> u64 {
        self.closed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// An operator's reads and writes during a flood: over the network from an address an operator
/// authenticated from before, and with the CLI over the local socket.
#[derive(Debug, Default)]
struct OperatorCalls {
    reads_ok: usize,
    writes_ok: usize,
    cli_ok: usize,
    calls: usize,
    slowest: Duration,
    outsider: Option<u16>,
}

/// A flood of unfinished requests from 10, then 40 addresses (32 connections each, the
/// per-address cap, reopened as soon as closed) never keeps operators out of the API: an
/// address an operator authenticated from takes the reserved connections, and the CLI on the
/// master reaches the coordinator over its local socket (`nodecare breaker reset` without a
/// password, as root). Also the figure of `docs/RELIABILITY.md` (`--nocapture` prints it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_from_many_addresses_never_keep_the_operators_out() {
    let limits = ServerLimits::default();
    let (h, addr, _server) = start(limits).await;
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("coordinator.sock");
    let local = nodecare_coordinator::server::bind_local(&socket).unwrap();
    let mut api = h.coordinator.api().clone();
    api.users = Some(h.state_dir.path().join("users"));
    let board = std::sync::Arc::clone(&api.board);
    let app = nodecare_coordinator::http::router_with(api, limits);
    let _local_server = tokio::spawn(nodecare_coordinator::server::serve_local(
        local,
        app,
        limits,
        nodecare_coordinator::server::LocalAccess::default(),
        board,
        std::future::pending(),
    ));
    let from = |address: [u8; 4]| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from(address))
            .timeout(Duration::from_secs(5))
            // A new connection for every request, as after a reconnect.
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let operator = from([127, 0, 3, 1]);
    // The operator signs in once, before any flood.
    let answer = operator
        .get(format!("http://{addr}/1/breaker"))
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let shared = limits.max_connections - limits.reserved;
    for addresses in [10_u8, 40] {
        let flood = Flood::start(addr, addresses, limits.max_per_client);
        let held = (usize::from(addresses) * limits.max_per_client).min(shared);
        let started = Instant::now();
        let over = (usize::from(addresses) * limits.max_per_client).saturating_sub(shared);
        while usize::try_from(flood.closed()).unwrap() < over {
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "the flood never filled the API"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        h.coordinator
            .api()
            .store
            .set_breaker_open("test storm", nodecare_protocol::now_ms())
            .unwrap();
        let mut calls = OperatorCalls::default();
        for _ in 0..10 {
            let started = Instant::now();
            let read = operator.get(format!("http://{addr}/1/status")).send().await;
            calls.calls += 1;
            calls.slowest = calls.slowest.max(started.elapsed());
            if read.is_ok_and(|answer| answer.status() == 200) {
                calls.reads_ok += 1;
            }
        }
        for _ in 0..5 {
            let started = Instant::now();
            let write = operator
                .post(format!("http://{addr}/1/breaker/reset"))
                .basic_auth("admin", Some("secret"))
                .send()
                .await;
            calls.calls += 1;
            calls.slowest = calls.slowest.max(started.elapsed());
            // 200: reset; 409: already closed by the previous one.
            if write.is_ok_and(|answer| [200, 409].contains(&answer.status().as_u16())) {
                calls.writes_ok += 1;
            }
        }
        h.coordinator
            .api()
            .store
            .set_breaker_open("test storm", nodecare_protocol::now_ms())
            .unwrap();
        let url = format!("unix:{}", socket.display());
        for args in [&["breaker", "status"][..], &["breaker", "reset"][..]] {
            let mut command = std::process::Command::new(nodecare_bin());
            command
                .args(args)
                .args(["--url", &url])
                .env_remove("NODECARE_COORDINATOR_URL")
                .env_remove("NODECARE_USER")
                .env_remove("NODECARE_PASSWORD");
            let started = Instant::now();
            let output = tokio::task::spawn_blocking(move || command.output())
                .await
                .unwrap()
                .unwrap();
            calls.calls += 1;
            calls.slowest = calls.slowest.max(started.elapsed());
            let stdout = String::from_utf8_lossy(&output.stdout);
            if output.status.success()
                && (args[1] == "status" || stdout.contains("reset by local:"))
            {
                calls.cli_ok += 1;
            } else {
                eprintln!(
                    "nodecare {args:?}: {:?} {stdout} {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
        // An address no operator authenticated from shares what the flood left.
        calls.outsider = from([127, 0, 4, 1])
            .get(format!("http://{addr}/1/status"))
            .send()
            .await
            .ok()
            .map(|answer| answer.status().as_u16());
        eprintln!(
            "flood from {addresses} addresses x {}: {} flood connections held at most, {} closed; operator: reads {}/10, writes {}/5, CLI over the local socket {}/2, slowest call {:?}; an address never signed in: {:?}",
            limits.max_per_client,
            held,
            flood.closed(),
            calls.reads_ok,
            calls.writes_ok,
            calls.cli_ok,
            calls.slowest,
            calls.outsider,
        );
        assert_eq!(
            (calls.reads_ok, calls.writes_ok, calls.cli_ok),
            (10, 5, 2),
            "{addresses} addresses: {calls:?}"
        );
        if usize::from(addresses) * limits.max_per_client > shared {
            assert_ne!(
                calls.outsider,
                Some(200),
                "the flood filled the shared connections"
            );
        }
        drop(flood);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
