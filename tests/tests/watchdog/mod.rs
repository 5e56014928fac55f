//! The systemd watchdog is fed by the round loop's progress: the coordinator binary, run with
//! `NOTIFY_SOCKET` and `WATCHDOG_USEC` as systemd sets them, pings while rounds complete, stops
//! pinging while a round hangs (RAPI never answers) past `round_stall_timeout`, and pings again
//! once the round ends.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure is the test failing"
)]
#![allow(
    clippy::disallowed_methods,
    reason = "the test starts the coordinator binary"
)]

use std::time::{Duration, Instant};

use nodecare_ganeti_sim::model::SimConfig;
use nodecare_ganeti_sim::{HttpFaults, Simulation};
use nodecare_tests::harness::{DOMAIN, node};

/// The `WATCHDOG=1` datagrams received within `window`.
async fn pings(socket: &tokio::net::UnixDatagram, window: Duration) -> usize {
    let deadline = Instant::now() + window;
    let mut count = 0;
    let mut buffer = [0_u8; 512];
    while let Ok(Ok(n)) = tokio::time::timeout(
        deadline.saturating_duration_since(Instant::now()),
        socket.recv(&mut buffer),
    )
    .await
    {
        if String::from_utf8_lossy(&buffer[..n])
            .lines()
            .any(|line| line == "WATCHDOG=1")
        {
            count += 1;
        }
    }
    count
}

/// The coordinator binary on `sim`'s RAPI, as systemd starts it (notify socket, watchdog
/// every 200 ms, rounds every 100 ms, a round stalled after 1 s).
async fn start(
    sim: &Simulation,
) -> (
    tokio::process::Child,
    tokio::net::UnixDatagram,
    tempfile::TempDir,
    nodecare_ganeti_sim::SimServer,
) {
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("hmac.key");
    std::fs::write(&key_path, b"nodecare-test-cluster-hmac-key\n").unwrap();
    // Secrets are refused when others can read them.
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let config = format!(
        "node_name = {:?}\nstate_dir = {:?}\nhmac_key = {:?}\nlisten = \"127.0.0.1:0\"\n\
         round_interval = 0.1\nround_stall_timeout = 1.0\nssconf_dir = {:?}\n\
         [rapi]\nurl = {:?}\nallow_plain_http = true\ntimeout = 30\n",
        node(1),
        dir.path().join("state"),
        key_path,
        dir.path().join("no-ssconf"),
        server.url,
    );
    let config_path = dir.path().join("coordinator.toml");
    std::fs::write(&config_path, config).unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path).unwrap();
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_nodecare-coordinator-under-test"))
        .arg("--config")
        .arg(&config_path)
        .env("NODECARE_LOG", "warn")
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    (child, socket, dir, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_round_starves_the_watchdog() {
    let sim = Simulation::new(SimConfig::from_spec(2, "", DOMAIN).unwrap()).unwrap();
    let (mut child, socket, _dir, _server) = start(&sim).await;
    let healthy = pings(&socket, Duration::from_secs(2)).await;
    assert!(
        healthy >= 5,
        "rounds complete: pings every 100 ms, got {healthy} in 2 s"
    );

    // RAPI stops answering for 4 s: the next round hangs in its mastership check.
    sim.set_http_faults(HttpFaults {
        hang: 1000,
        hang_ms: 4000,
        path_contains: Some("/2/info".into()),
        ..HttpFaults::default()
    });
    // Within the stall limit (1 s) the loop may still ping; after it, never.
    let _within_limit = pings(&socket, Duration::from_millis(1600)).await;
    let hung = pings(&socket, Duration::from_millis(1500)).await;
    assert_eq!(hung, 0, "a hung round must not feed the watchdog");

    sim.set_http_faults(HttpFaults::default());
    let again = pings(&socket, Duration::from_secs(4)).await;
    assert!(again >= 3, "pings resume once the round ends, got {again}");
    child.start_kill().unwrap();
    let _status = child.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_coordinator_during_a_hung_round() {
    let sim = Simulation::new(SimConfig::from_spec(2, "", DOMAIN).unwrap()).unwrap();
    let (mut child, socket, _dir, _server) = start(&sim).await;
    assert!(
        pings(&socket, Duration::from_secs(2)).await >= 5,
        "rounds complete"
    );
    // RAPI stops answering for a minute: the next round hangs in its mastership check.
    sim.set_http_faults(HttpFaults {
        hang: 1000,
        hang_ms: 60_000,
        path_contains: Some("/2/info".into()),
        ..HttpFaults::default()
    });
    let _within_limit = pings(&socket, Duration::from_millis(1600)).await;
    assert_eq!(
        pings(&socket, Duration::from_millis(500)).await,
        0,
        "the round hangs"
    );
    let pid = child.id().unwrap().to_string();
    // The shell's own `kill` (no procps needed).
    let sent = std::process::Command::new("sh")
        .args(["-c", &format!("kill -TERM {pid}")])
        .status()
        .unwrap();
    assert!(sent.success());
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("SIGTERM must stop the coordinator within 5 s, even during a hung round")
        .unwrap();
    assert_eq!(status.code(), Some(0), "stopped by a signal: exit code 0");
}
