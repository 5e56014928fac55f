//! The agent end to end, in-process on 127.0.0.1:0: mond's endpoints, hostile diagnose
//! scripts, isolation of failing collectors, the signed report and restarts.
//!
//! Needs root (the whitelist requires root:root files); skips otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::os::unix::fs::chown;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecare_agent::config::Config;
use nodecare_collectors::{CollectError, CollectFuture, Collector, CollectorSpec, Registry};
use nodecare_protocol::diagnose::DiagnosePayload;
use nodecare_protocol::{DiagnoseStatus, HmacKey, KeyRing, ReportKind, VerifyPolicy};
use serde_json::Value;
use support::{Fixture, fixture, get, request, root_test, script};

mod support;

fn config(fixture: &Fixture) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: Some("node1.example.com".into()),
        hmac_key: fixture.key.clone(),
        state_dir: fixture.state.clone(),
        diagnose_dir: fixture.diagnose.clone(),
        diagnose_timeout_secs: 1,
        ..Config::default()
    }
}

/// Waits until the diagnose report is a real verdict (not the start-up placeholder).
async fn wait_for_verdict(address: std::net::SocketAddr, limit: Duration) -> Value {
    let started = Instant::now();
    loop {
        let data = get(address, "/1/report/node/diagnose").await.json()["data"].clone();
        if data.get("fingerprint").is_some() {
            return data;
        }
        assert!(
            started.elapsed() < limit,
            "no verdict within {limit:?}: {data}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn children() -> usize {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            let after = &stat[stat.rfind(')').unwrap() + 1..];
            after.split_whitespace().nth(1) == Some(me.as_str())
        })
        .count()
}

const HOSTILE: &[(&str, &str, u32, &str)] = &[
    (
        "hangs",
        "#!/bin/sh\nexec sleep 1000\n",
        0o755,
        "timed out after 1s",
    ),
    (
        "grandchild",
        "#!/bin/sh\n( sleep 1000 ) &\necho '{\"status\":\"Ok\"}'\n",
        0o755,
        "timed out",
    ),
    (
        "ten-megabytes",
        "#!/bin/sh\nhead -c 10000000 /dev/zero | tr '\\0' x\n",
        0o755,
        "more than 65536 bytes",
    ),
    (
        "invalid-utf8",
        "#!/bin/sh\nprintf '\\377{}'\n",
        0o755,
        "not valid UTF-8",
    ),
    (
        "invalid-json",
        "#!/bin/sh\necho '{\"status\":'\n",
        0o755,
        "not exactly one JSON value",
    ),
    (
        "two-objects",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}{\"status\":\"Ok\"}'\n",
        0o755,
        "not exactly one JSON value",
    ),
    (
        "exits-nonzero",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\necho 'disk probe failed' >&2\nexit 3\n",
        0o755,
        "exit code 3; stderr: disk probe failed",
    ),
    (
        "world-writable",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n",
        0o757,
        "bits outside 0755",
    ),
    (
        "bad.name",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n",
        0o755,
        "name must match",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_scripts_end_unknown_and_the_agent_keeps_serving() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    for (name, body, mode, _) in HOSTILE {
        script(&fixture.diagnose, name, body, *mode);
    }
    // No `#!` line: run by /bin/sh, as Ganeti's execvp does.
    script(
        &fixture.diagnose,
        "no-shebang",
        "echo '{\"status\":\"Ok\"}'\n",
        0o755,
    );
    script(
        &fixture.diagnose,
        "healthy",
        "#!/bin/sh\necho '{\"status\":\"Ok\",\"details\":{\"disks\":2}}'\n",
        0o755,
    );
    // Wrong owner and a symbolic link.
    script(
        &fixture.diagnose,
        "wrong-owner",
        "#!/bin/sh\necho '{}'\n",
        0o755,
    );
    chown(fixture.diagnose.join("wrong-owner"), Some(65534), Some(0)).unwrap();
    std::os::unix::fs::symlink("/bin/true", fixture.diagnose.join("symlink")).unwrap();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let started = Instant::now();
    let agent = nodecare_agent::serve(config(&fixture), listener)
        .await
        .unwrap();
    let address = agent.local_addr();

    // While the scripts run (and hang), every endpoint answers at once.
    for path in ["/", "/1/list/collectors", "/1/report/all", "/healthz"] {
        let asked = Instant::now();
        assert_eq!(get(address, path).await.status, 200, "{path}");
        assert!(
            asked.elapsed() < Duration::from_millis(500),
            "{path} was slow"
        );
    }

    let data = wait_for_verdict(address, Duration::from_secs(4)).await;
    // Eleven scripts, four at a time, the slowest ones 1 s each.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(data["status"], "unknown");
    assert_eq!(data["details"]["healthy"]["status"], "Ok");
    assert_eq!(data["details"]["no-shebang"]["status"], "Ok");
    let mut expectations: Vec<(&str, &str)> = HOSTILE
        .iter()
        .map(|(name, _, _, reason)| (*name, *reason))
        .collect();
    expectations.push(("wrong-owner", "owned by 65534:0"));
    expectations.push(("symlink", "symbolic link"));
    for (name, reason) in expectations {
        let verdict = &data["details"][name];
        assert_eq!(verdict["status"], "unknown", "{name}: {verdict}");
        let text = verdict["reason"].as_str().unwrap_or_default();
        assert!(text.contains(reason), "{name}: {text:?} lacks {reason:?}");
    }

    // The signed report verifies and carries the same verdict (signed right after the run).
    let signed = fresh_signed(&fixture, address, Duration::from_secs(1)).await;
    let ring = KeyRing::single(HmacKey::from_file(&fixture.key).unwrap());
    let envelope = ring
        .verify_json(
            &signed.body,
            nodecare_protocol::now_ms(),
            VerifyPolicy::default(),
            Some("node1.example.com"),
            None,
        )
        .unwrap();
    let payload: DiagnosePayload = serde_json::from_value(envelope.payload).unwrap();
    assert!(!payload.stale);
    assert_eq!(payload.verdict.status, DiagnoseStatus::Unknown);
    assert_eq!(
        payload.verdict.fingerprint,
        data["fingerprint"].as_str().unwrap()
    );
    assert!(envelope.expires_at_ms - envelope.issued_at_ms == 180_000);

    agent.shutdown().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(children(), 0, "children or zombies left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mond_endpoints_errors_head_and_methods() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config(&fixture), listener)
        .await
        .unwrap();
    let address = agent.local_addr();

    let root = get(address, "/").await;
    assert_eq!(
        (root.status, root.body.as_slice()),
        (200, b"[1]".as_slice())
    );
    assert_eq!(root.headers["content-type"], "application/json");
    assert_eq!(get(address, "/1").await.body, b"null");
    assert_eq!(get(address, "/1/").await.body, b"null");
    // The built-in collectors in mond's order, the diagnose collector last.
    assert_eq!(
        get(address, "/1/list/collectors").await.json(),
        serde_json::json!([
            ["cpu-avg-load", "default", 0],
            ["xen-cpu-avg-load", "default", 0],
            ["kvm-inst-rss", "default", 0],
            ["diskstats", "storage", 0],
            ["drbd", "storage", 1],
            ["inst-status-kvm", "instance", 1],
            ["lv", "storage", 0],
            ["diagnose", "node", 1]
        ])
    );
    assert_eq!(get(address, "/1/list/collectors/extra").await.status, 200);
    for (path, body) in [
        ("/foo", "Resource not found"),
        ("/1/list", "Resource not found"),
        (
            "/1/report/node/nope",
            "Unable to produce a report for the requested resource",
        ),
        (
            "/1/report/bogus/diagnose",
            "Unable to produce a report for the requested resource",
        ),
        (
            "/1/report/default/diagnose",
            "Unable to produce a report for the requested resource",
        ),
    ] {
        let answer = get(address, path).await;
        assert_eq!(answer.status, 404, "{path}");
        assert_eq!(String::from_utf8_lossy(&answer.body), body, "{path}");
    }
    // No scripts: Ganeti's built-in "always Ok".
    let data = wait_for_verdict(address, Duration::from_secs(3)).await;
    assert_eq!(data["status"], "Ok");
    let report = get(address, "/1/report/node/diagnose").await.json();
    assert_eq!(report["name"], "diagnose");
    assert_eq!(report["category"], "node");
    assert_eq!(report["kind"], 1);
    assert_eq!(report["version"], "B");
    assert_eq!(report["format_version"], 1);
    assert!(report["timestamp"].as_u64().unwrap() % 1000 == 0);
    // As mond on a node without Xen: listed, and reports no instance.
    let xen = get(address, "/1/report/default/xen-cpu-avg-load").await;
    assert_eq!(xen.status, 200);
    let xen = xen.json();
    assert_eq!(xen["name"], "xen-cpu-avg-load");
    assert_eq!(xen["data"], serde_json::json!({}));

    let head = request(address, "HEAD", "/1/report/all", b"").await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.headers["content-length"].parse::<usize>().unwrap(),
        get(address, "/1/report/all").await.body.len()
    );
    assert!(head.headers.contains_key("age"));
    let post = request(address, "POST", "/1/report/all", b"").await;
    assert_eq!(post.status, 405);
    assert_eq!(post.headers["allow"], "GET, HEAD");
    agent.shutdown().await;
}

#[derive(Debug)]
enum Behaviour {
    Fails,
    Panics,
    Hangs,
    Works,
}

#[derive(Debug)]
struct Fake(CollectorSpec, Behaviour);

impl Collector for Fake {
    fn spec(&self) -> &CollectorSpec {
        &self.0
    }
    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            match self.1 {
                Behaviour::Fails => Err(CollectError::Source {
                    source_name: "/proc/nothing".into(),
                    reason: "gone".into(),
                }),
                Behaviour::Panics => panic!("collector bug"),
                Behaviour::Hangs => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Ok(Value::Null)
                }
                Behaviour::Works => Ok(serde_json::json!({"cpu_number": 2})),
            }
        })
    }
}

fn fake(name: &str, category: Option<&str>, behaviour: Behaviour) -> Arc<dyn Collector> {
    Arc::new(Fake(
        CollectorSpec::builtin(
            name,
            category,
            ReportKind::Performance,
            Duration::from_secs(60),
            // Long enough that a loaded machine still runs the failing and panicking collectors
            // within it; only the hanging one reaches it.
            Duration::from_secs(3),
        ),
        behaviour,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failing_collector_never_breaks_another() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let mut registry = Registry::new();
    registry.register(fake("cpu-avg-load", None, Behaviour::Works));
    registry.register(fake("diskstats", Some("storage"), Behaviour::Fails));
    registry.register(fake("drbd", Some("storage"), Behaviour::Panics));
    registry.register(fake("lv", Some("storage"), Behaviour::Hangs));
    let config = config(&fixture);
    let collectors = nodecare_agent::collectors(&config, registry).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve_with(config, collectors, listener)
        .await
        .unwrap();
    let address = agent.local_addr();
    // Wait until every collector has had its first run (the hanging one ends at its timeout),
    // however slow the machine is.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let all = get(address, "/1/report/all").await.json();
        let settled = all[0]["data"] == serde_json::json!({"cpu_number": 2})
            && [(1, "gone"), (2, "panicked"), (3, "timed out")]
                .iter()
                .all(|(index, message)| {
                    all[*index]["data"]["status"]["message"]
                        .as_str()
                        .is_some_and(|text| text.contains(message))
                });
        if settled || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let list = get(address, "/1/list/collectors").await.json();
    assert_eq!(
        list,
        serde_json::json!([
            ["cpu-avg-load", "default", 0],
            ["diskstats", "storage", 0],
            ["drbd", "storage", 0],
            ["lv", "storage", 0],
            ["diagnose", "node", 1]
        ])
    );
    let all = get(address, "/1/report/all").await;
    assert_eq!(all.status, 200);
    let all = all.json();
    assert_eq!(all[0]["data"], serde_json::json!({"cpu_number": 2}));
    for (index, message) in [(1, "gone"), (2, "panicked"), (3, "timed out")] {
        let status = &all[index]["data"]["status"];
        assert_eq!(status["code"], 2, "{}", all[index]);
        assert!(
            status["message"].as_str().unwrap().contains(message),
            "{status}"
        );
    }
    let cpu = get(address, "/1/report/default/cpu-avg-load").await.json();
    assert_eq!(cpu["category"], Value::Null);
    agent.shutdown().await;
}

/// The first fresh signed diagnose report (not the stale one served before the first run is
/// signed), within `limit`.
async fn fresh_signed(
    fixture: &Fixture,
    address: std::net::SocketAddr,
    limit: Duration,
) -> support::Answer {
    let started = Instant::now();
    loop {
        let answer = get(address, "/1/report/node/diagnose/signed").await;
        if answer.status == 200 && !verified(fixture, &answer.body).1.stale {
            return answer;
        }
        assert!(
            started.elapsed() < limit,
            "no fresh signed report within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The sequence and payload of a signed diagnose report, verified with `fixture`'s key.
fn verified(fixture: &Fixture, body: &[u8]) -> (u64, DiagnosePayload) {
    let ring = KeyRing::single(HmacKey::from_file(&fixture.key).unwrap());
    let envelope = ring
        .verify_json(
            body,
            nodecare_protocol::now_ms(),
            VerifyPolicy::default(),
            None,
            None,
        )
        .unwrap();
    let payload: DiagnosePayload = serde_json::from_value(envelope.payload.clone()).unwrap();
    (envelope.sequence, payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_serves_a_signed_stale_unknown_until_the_first_run() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    script(
        &fixture.diagnose,
        "disk",
        "#!/bin/sh\nsleep 0.8\necho '{\"status\":\"Ok\"}'\n",
        0o755,
    );
    let verify = |body: &[u8]| verified(&fixture, body).1;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config(&fixture), listener)
        .await
        .unwrap();
    let address = agent.local_addr();
    // Before any run: authentic, stale, unknown (an agent that answers, with nothing to act
    // on), never a 503 that the coordinator counts as unreachable.
    let answer = get(address, "/1/report/node/diagnose/signed").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let pending = verify(&answer.body);
    assert!(pending.stale);
    assert_eq!(pending.verdict.status, DiagnoseStatus::Unknown);
    let started = Instant::now();
    loop {
        let payload = verify(&get(address, "/1/report/node/diagnose/signed").await.body);
        if !payload.stale {
            assert_eq!(payload.verdict.status, DiagnoseStatus::Ok);
            break;
        }
        assert_eq!(payload.verdict.status, DiagnoseStatus::Unknown);
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_serves_the_persisted_verdict_as_stale_until_a_fresh_run() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    script(
        &fixture.diagnose,
        "disk",
        "#!/bin/sh\necho '{\"status\":\"evacuate\",\"details\":{\"disk\":\"sdc\"}}'\n",
        0o755,
    );
    let verify = |body: &[u8]| verified(&fixture, body);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config(&fixture), listener)
        .await
        .unwrap();
    let first = wait_for_verdict(agent.local_addr(), Duration::from_secs(3)).await;
    assert_eq!(first["status"], "evacuate");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (first_sequence, payload) = verify(
        &get(agent.local_addr(), "/1/report/node/diagnose/signed")
            .await
            .body,
    );
    assert!(!payload.stale);
    agent.shutdown().await;

    // The script now takes a while: the restarted agent serves the old verdict, stale.
    script(
        &fixture.diagnose,
        "disk",
        "#!/bin/sh\nsleep 0.8\necho '{\"status\":\"Ok\"}'\n",
        0o755,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config(&fixture), listener)
        .await
        .unwrap();
    let address = agent.local_addr();
    let (stale_sequence, stale) =
        verify(&get(address, "/1/report/node/diagnose/signed").await.body);
    assert!(stale.stale);
    assert_eq!(stale.verdict.status, DiagnoseStatus::Evacuate);
    assert!(stale_sequence > first_sequence);
    let report = get(address, "/1/report/node/diagnose").await.json();
    assert_eq!(report["data"]["status"], "evacuate");

    let started = Instant::now();
    loop {
        let (sequence, payload) =
            verify(&get(address, "/1/report/node/diagnose/signed").await.body);
        if !payload.stale {
            assert_eq!(payload.verdict.status, DiagnoseStatus::Ok);
            assert!(sequence > stale_sequence);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_key_leaves_mond_endpoints_working() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let mut config = config(&fixture);
    config.hmac_key = fixture.state.join("absent.key");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config, listener).await.unwrap();
    wait_for_verdict(agent.local_addr(), Duration::from_secs(3)).await;
    let signed = get(agent.local_addr(), "/1/report/node/diagnose/signed").await;
    assert_eq!(signed.status, 503);
    assert!(
        signed.json()["error"]
            .as_str()
            .unwrap()
            .contains("absent.key")
    );
    assert_eq!(get(agent.local_addr(), "/1/report/all").await.status, 200);
    // The storage report, too, is never served unsigned.
    let started = Instant::now();
    loop {
        let storage = get(agent.local_addr(), "/1/report/storage/drbd/signed").await;
        assert_eq!(storage.status, 503);
        let error = storage.json()["error"].as_str().unwrap().to_owned();
        if error.contains("absent.key") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    agent.shutdown().await;
}

/// The signed storage report: verifies, decodes as a storage payload, shares the node's one
/// sequence with the diagnose report, refreshes, and an older envelope is a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_storage_report_verifies_and_replays_are_refused() {
    use nodecare_protocol::{DrbdState, StoragePayload, VerifyError};
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let proc_root = fixture.state.with_file_name("proc");
    std::fs::create_dir_all(&proc_root).unwrap();
    std::fs::write(
        proc_root.join("drbd"),
        "version: 8.4.11 (api:1/proto:86-101)\n 0: cs:WFConnection ro:Primary/Unknown ds:UpToDate/DUnknown C r-----\n    ns:0 nr:0 dw:0 dr:0 al:0 bm:0 lo:0 pe:0 ua:0 ap:0 ep:1 wo:f oos:2048\n",
    )
    .unwrap();
    let config = config(&fixture);
    let mut collectors = nodecare_agent::collectors(&config, Registry::new()).unwrap();
    let builtin = nodecare_collectors::builtin::BuiltinConfig {
        proc_root: proc_root.clone(),
        ..Default::default()
    };
    collectors.storage = Some(nodecare_agent::storage::StorageSource {
        drbd: Arc::new(nodecare_collectors::builtin::drbd::Drbd::new(&builtin)),
        interval: Duration::from_millis(200),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve_with(config, collectors, listener)
        .await
        .unwrap();
    let address = agent.local_addr();
    let ring = KeyRing::single(HmacKey::from_file(&fixture.key).unwrap());
    let read = |body: Vec<u8>, min_sequence: Option<u64>| {
        ring.verify_json(
            &body,
            nodecare_protocol::now_ms(),
            VerifyPolicy::default(),
            Some("node1.example.com"),
            min_sequence,
        )
    };
    let started = Instant::now();
    let first = loop {
        let answer = get(address, "/1/report/storage/drbd/signed").await;
        if answer.status == 200 {
            break read(answer.body, None).unwrap();
        }
        assert_eq!(answer.status, 503);
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let payload: StoragePayload = serde_json::from_value(first.payload.clone()).unwrap();
    let DrbdState::Minors { minors } = &payload.drbd else {
        panic!("{payload:?}")
    };
    assert_eq!(minors.len(), 1);
    assert_eq!(minors[0].connection, "WFConnection");
    assert_eq!(minors[0].out_of_sync_kib, Some(2048));
    assert!(!minors[0].is_whole());
    assert_eq!(payload.interval_ms, 200);
    // Not a diagnose payload.
    assert!(serde_json::from_value::<DiagnosePayload>(first.payload.clone()).is_err());

    // The module goes away: the next reading says so, with a higher sequence.
    std::fs::remove_file(proc_root.join("drbd")).unwrap();
    let started = Instant::now();
    let second = loop {
        let envelope = read(
            get(address, "/1/report/storage/drbd/signed").await.body,
            None,
        )
        .unwrap();
        let payload: StoragePayload = serde_json::from_value(envelope.payload.clone()).unwrap();
        if payload.drbd == (DrbdState::NotInstalled {}) {
            break envelope;
        }
        assert!(started.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(second.sequence > first.sequence);
    // The first again, after the second was accepted: a replay.
    assert!(matches!(
        read(serde_json::to_vec(&first).unwrap(), Some(second.sequence)),
        Err(VerifyError::Replay { .. })
    ));
    // The diagnose report's sequence comes from the same counter: never equal to a storage one.
    let diagnose = loop {
        let answer = get(address, "/1/report/node/diagnose/signed").await;
        if answer.status == 200 {
            break read(answer.body, None).unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(diagnose.sequence, first.sequence);
    assert_ne!(diagnose.sequence, second.sequence);
    // No query is accepted; the mond endpoints and /metrics are unchanged.
    let bad = get(address, "/1/report/storage/drbd/signed?after=1").await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("no query"));
    assert_eq!(get(address, "/metrics").await.status, 200);
    assert_eq!(get(address, "/1/report/all").await.status, 200);
    assert_eq!(
        get(address, "/healthz").await.json()["signed_storage"],
        true
    );
    assert_eq!(
        request(address, "POST", "/1/report/storage/drbd/signed", b"")
            .await
            .status,
        405
    );
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_answers_on_a_new_report_and_a_gone_client_frees_its_wait() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    script(
        &fixture.diagnose,
        "disk",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n",
        0o755,
    );
    let mut config = config(&fixture);
    config.diagnose_interval_secs = 1;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config, listener).await.unwrap();
    let address = agent.local_addr();
    wait_for_verdict(address, Duration::from_secs(3)).await;
    let ring = KeyRing::single(HmacKey::from_file(&fixture.key).unwrap());
    let sequence_of = |body: &[u8]| {
        ring.verify_json(
            body,
            nodecare_protocol::now_ms(),
            VerifyPolicy::default(),
            None,
            None,
        )
        .unwrap()
        .sequence
    };
    let current = fresh_signed(&fixture, address, Duration::from_secs(5)).await;
    let first = sequence_of(&current.body);

    // Nothing newer: 304 at once without `wait`.
    let answer = get(
        address,
        &format!("/1/report/node/diagnose/signed?after={first}"),
    )
    .await;
    assert_eq!(answer.status, 304);
    assert!(answer.body.is_empty());
    // A waiter is answered by the next run's report (diagnose every second), well before 30 s.
    let started = Instant::now();
    let answer = get(
        address,
        &format!("/1/report/node/diagnose/signed?after={first}&wait=30"),
    )
    .await;
    assert_eq!(answer.status, 200);
    let next = sequence_of(&answer.body);
    assert!(next > first);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Bad queries get a clear 400.
    let answer = get(address, "/1/report/node/diagnose/signed?wait=5").await;
    assert_eq!(answer.status, 400);
    assert!(answer.text().contains("needs"), "{}", answer.text());

    // A client that goes away while waiting frees its slot.
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "GET /1/report/node/diagnose/signed?after={}&wait=60 HTTP/1.1\r\nHost: x\r\n\r\n",
        u64::MAX - 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    while agent.cache().waiting() == 0 {
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut byte = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte))
            .await
            .is_err(),
        "the waiter answered early"
    );
    drop(stream);
    let started = Instant::now();
    while agent.cache().waiting() != 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the waiter of a gone client is still held"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.shutdown().await;
}

/// `nodecare check`: a signed check request runs the diagnose scripts at once (the interval is
/// an hour here), its answer names the sequence after which the new verdict appears, a second
/// check within the rate limit is refused with 429, and an unsigned one with 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_check_runs_the_diagnose_scripts_at_once() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let state = fixture.key.with_file_name("verdict");
    std::fs::write(&state, "{\"status\":\"Ok\"}\n").unwrap();
    script(
        &fixture.diagnose,
        "disk",
        &format!("#!/bin/sh\ncat {}\n", state.display()),
        0o755,
    );
    let mut config = config(&fixture);
    config.diagnose_interval_secs = 3600;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config, listener).await.unwrap();
    let address = agent.local_addr();
    wait_for_verdict(address, Duration::from_secs(5)).await;
    // The first verdict is signed just after it is published: the check answers the sequence
    // of the signed report it then serves.
    fresh_signed(&fixture, address, Duration::from_secs(5)).await;
    let key = HmacKey::from_file(&fixture.key).unwrap();
    let signer = nodecare_protocol::Signer::new(key, "node1.example.com");
    let envelope = |nonce: &str| {
        let now = nodecare_protocol::now_ms();
        let request = nodecare_protocol::repair::CheckRequest {
            node: "node1.example.com".into(),
            check_nonce: nonce.into(),
        };
        serde_json::to_vec(
            &nodecare_protocol::repair::sign_check_request(&signer, request, now, now, 60_000)
                .unwrap(),
        )
        .unwrap()
    };
    std::fs::write(&state, "{\"status\":\"evacuate\",\"details\":\"disk\"}\n").unwrap();
    let started = Instant::now();
    let answer = request(address, "POST", "/1/check", &envelope("first")).await;
    assert_eq!(answer.status, 202, "{}", answer.text());
    let after = answer.json()["after_sequence"].as_u64().unwrap();
    let report = get(
        address,
        &format!("/1/report/node/diagnose/signed?after={after}&wait=30"),
    )
    .await;
    assert_eq!(report.status, 200);
    let envelope_json: Value = serde_json::from_slice(&report.body).unwrap();
    let payload: DiagnosePayload =
        serde_json::from_value(envelope_json["payload"].clone()).unwrap();
    assert_eq!(payload.verdict.status, DiagnoseStatus::Evacuate);
    assert!(started.elapsed() < Duration::from_secs(10));
    let again = request(address, "POST", "/1/check", &envelope("second")).await;
    assert_eq!(again.status, 429, "{}", again.text());
    assert!(again.json()["retry_after_ms"].as_u64().is_some());
    let forged = request(address, "POST", "/1/check", b"{\"node\":\"x\"}").await;
    assert_eq!(forged.status, 400, "{}", forged.text());
}
