//! `/metrics` after real diagnose runs and repair refusals, and the cluster's data collector
//! configuration (enablement, intervals) applied to the running agent, in-process on
//! 127.0.0.1:0.
//!
//! Needs root (the whitelist requires root:root files); skips otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nodecare_agent::config::Config;
use nodecare_collectors::builtin::ClusterGated;
use nodecare_collectors::confd::{ClusterView, CollectorConfig, ViewHandle};
use nodecare_collectors::{CollectFuture, Collector, CollectorSpec, Registry};
use nodecare_protocol::repair::{RepairRequest, sign_repair_request};
use nodecare_protocol::{HmacKey, ReportKind, Signer};
use serde_json::{Value, json};
use support::{Fixture, fixture, get, request, root_dir, root_test, script};

mod support;

const NODE: &str = "node1.example.com";

fn config(fixture: &Fixture) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        node_name: Some(NODE.into()),
        hmac_key: fixture.key.clone(),
        state_dir: fixture.state.clone(),
        diagnose_dir: fixture.diagnose.clone(),
        diagnose_timeout_secs: 2,
        repair_dir: fixture.repair.clone(),
        repair_invalid_request_delay_ms: 10,
        ..Config::default()
    }
}

/// The value of the sample whose line starts with `series ` (exact name and labels).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(|value| value.parse().unwrap())
    })
}

fn repair_request(command: &str, nonce: &str) -> RepairRequest {
    RepairRequest {
        node: NODE.into(),
        incident_id: "3f1c5a2e-8b7d-4c3a-9e1f-0a2b3c4d5e6f".into(),
        command: command.into(),
        input: json!({"status": "live-repair"}),
        nonce: nonce.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_script_runs_verdict_signatures_and_refusals() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    script(
        &fixture.diagnose,
        "healthy",
        "#!/bin/sh\nsleep 0.2\necho '{\"status\":\"Ok\"}'\n",
        0o755,
    );
    script(
        &fixture.diagnose,
        "broken",
        "#!/bin/sh\necho 'disk gone' >&2\nexit 3\n",
        0o755,
    );
    // Group-writable: the whitelist refuses it.
    script(
        &fixture.diagnose,
        "writable",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n",
        0o775,
    );
    let config = config(&fixture);
    let collectors = nodecare_agent::collectors(&config, Registry::new()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let before = nodecare_protocol::now_s();
    let agent = nodecare_agent::serve_with(config, collectors, listener)
        .await
        .unwrap();
    let address = agent.local_addr();

    // Wait for the first run to be published and signed (the second envelope: the first is the
    // stale `unknown` served before any run).
    let started = Instant::now();
    let metrics = loop {
        let answer = get(address, "/metrics").await;
        assert_eq!(answer.status, 200);
        let text = answer.text();
        if sample(&text, "nodecare_signed_envelopes_total") >= Some(2.0) {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no signed run:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // scripts/test.d/prometheus.sh checks the real output with `promtool check metrics`.
    if let Some(dir) = std::env::var_os("NODECARE_METRICS_OUT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join("agent.txt"), &metrics).unwrap();
    }
    let after = nodecare_protocol::now_s();

    let value = |series: &str| {
        sample(&metrics, series).unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    };
    // The ok script: ran about 0.2 s, exit 0, a last success within the test.
    let duration = value("nodecare_diagnose_script_duration_seconds{script=\"healthy\"}");
    assert!((0.15..2.0).contains(&duration), "{duration}");
    assert_eq!(
        value("nodecare_diagnose_script_exit_code{script=\"healthy\"}"),
        0.0
    );
    let success =
        value("nodecare_diagnose_script_last_success_timestamp_seconds{script=\"healthy\"}");
    assert!(
        before - 1.0 <= success && success <= after + 1.0,
        "{success}"
    );
    assert_eq!(
        value("nodecare_diagnose_script_verdict{script=\"healthy\",status=\"Ok\"}"),
        1.0
    );
    // The failing script: exit 3, never succeeded, verdict unknown.
    assert_eq!(
        value("nodecare_diagnose_script_exit_code{script=\"broken\"}"),
        3.0
    );
    assert!(value("nodecare_diagnose_script_duration_seconds{script=\"broken\"}") < 2.0);
    assert_eq!(
        value("nodecare_diagnose_script_outcome{script=\"broken\",outcome=\"exited\"}"),
        1.0
    );
    assert_eq!(
        sample(
            &metrics,
            "nodecare_diagnose_script_last_success_timestamp_seconds{script=\"broken\"}"
        ),
        None
    );
    assert_eq!(
        value("nodecare_diagnose_script_verdict{script=\"broken\",status=\"unknown\"}"),
        1.0
    );
    // The refused script never started and is counted.
    assert_eq!(
        value("nodecare_diagnose_script_started{script=\"writable\"}"),
        0.0
    );
    assert_eq!(
        value("nodecare_diagnose_script_outcome{script=\"writable\",outcome=\"refused\"}"),
        1.0
    );
    assert_eq!(
        value("nodecare_whitelist_refusals_total{kind=\"diagnose-script\"}"),
        1.0
    );
    // The merged verdict: unknown, fresh.
    assert_eq!(value("nodecare_verdict_status{status=\"unknown\"}"), 1.0);
    assert_eq!(value("nodecare_verdict_status{status=\"Ok\"}"), 0.0);
    assert!(value("nodecare_verdict_age_seconds") < 5.0);
    assert_eq!(value("nodecare_verdict_stale"), 0.0);
    assert_eq!(value("nodecare_sign_failures_total"), 0.0);
    // Every repair refusal reason is present, at zero.
    assert_eq!(
        value("nodecare_repair_refusals_total{reason=\"not-whitelisted\"}"),
        0.0
    );
    assert_eq!(
        value("nodecare_signature_verify_failures_total{reason=\"bad-signature\"}"),
        0.0
    );

    // Two repair refusals: a command that is not whitelisted, and another key's signature.
    let key = HmacKey::from_file(&fixture.key).unwrap();
    let ours = Signer::new(key, NODE);
    let now = nodecare_protocol::now_ms();
    let missing = sign_repair_request(&ours, repair_request("missing", "n1"), 1, now, 60_000);
    let answer = request(
        address,
        "POST",
        "/1/repair",
        &serde_json::to_vec(&missing.unwrap()).unwrap(),
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    let stranger = Signer::new(HmacKey::new(b"another key".to_vec()), NODE);
    let forged = sign_repair_request(&stranger, repair_request("fix", "n2"), 2, now, 60_000);
    let answer = request(
        address,
        "POST",
        "/1/repair",
        &serde_json::to_vec(&forged.unwrap()).unwrap(),
    )
    .await;
    assert_eq!(answer.status, 401, "{}", answer.text());
    let metrics = get(address, "/metrics").await.text();
    for (series, expected) in [
        (
            "nodecare_repair_refusals_total{reason=\"not-whitelisted\"}",
            1.0,
        ),
        (
            "nodecare_repair_refusals_total{reason=\"bad-signature\"}",
            1.0,
        ),
        ("nodecare_repair_refusals_total{reason=\"replayed\"}", 0.0),
        (
            "nodecare_signature_verify_failures_total{reason=\"bad-signature\"}",
            1.0,
        ),
        ("nodecare_whitelist_refusals_total{kind=\"repair\"}", 1.0),
    ] {
        assert_eq!(
            sample(&metrics, series),
            Some(expected),
            "{series}\n{metrics}"
        );
    }
    agent.shutdown().await;
}

/// Counts its runs.
#[derive(Debug)]
struct Counting {
    spec: CollectorSpec,
    runs: AtomicUsize,
}

impl Collector for Counting {
    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }
    fn collect(&self) -> CollectFuture<'_> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move { Ok(json!({ "run": run })) })
    }
}

fn counting(name: &str, category: Option<&str>) -> Arc<Counting> {
    Arc::new(Counting {
        spec: CollectorSpec::builtin(
            name,
            category,
            ReportKind::Performance,
            Duration::from_secs(60),
            Duration::from_secs(1),
        ),
        runs: AtomicUsize::new(0),
    })
}

fn collectors_config(entries: &[(&str, bool, u64)]) -> ClusterView {
    ClusterView {
        data_collectors: Some(
            entries
                .iter()
                .map(|(name, active, micros)| {
                    (
                        (*name).to_owned(),
                        CollectorConfig {
                            active: *active,
                            interval: Duration::from_micros(*micros),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
        ),
        ..ClusterView::default()
    }
}

async fn wait_until(limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_disables_collectors_and_sets_their_intervals() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let cpu = counting("cpu-avg-load", None);
    let lv = counting("lv", Some("storage"));
    let drbd = counting("drbd", Some("storage"));
    let (sender, view) = ViewHandle::channel(collectors_config(&[
        ("cpu-avg-load", true, 1_000_000),
        ("lv", false, 5_000_000),
        // Below the floor: runs every second, not every millisecond.
        ("drbd", true, 1_000),
    ]));
    let mut registry = Registry::new();
    for collector in [&cpu, &lv, &drbd] {
        let inner: Arc<dyn Collector> = collector.clone();
        registry.register(Arc::new(ClusterGated::new(inner, view.clone())));
    }
    let config = config(&fixture);
    let mut collectors = nodecare_agent::collectors(&config, registry).unwrap();
    collectors.cluster = Some(view.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve_with(config, collectors, listener)
        .await
        .unwrap();
    let address = agent.local_addr();

    // The disabled collector is absent everywhere, as in mond.
    wait_until(Duration::from_secs(5), async || {
        get(address, "/1/report/all")
            .await
            .json()
            .as_array()
            .unwrap()
            .len()
            == 3
    })
    .await;
    assert_eq!(
        get(address, "/1/list/collectors").await.json(),
        json!([
            ["cpu-avg-load", "default", 0],
            ["drbd", "storage", 0],
            ["diagnose", "node", 1]
        ])
    );
    let names: Vec<Value> = get(address, "/1/report/all")
        .await
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|report| report["name"].clone())
        .collect();
    assert_eq!(
        names,
        [json!("cpu-avg-load"), json!("drbd"), json!("diagnose")]
    );
    let direct = get(address, "/1/report/storage/lv").await;
    assert_eq!(direct.status, 404);
    assert_eq!(
        direct.text(),
        "Unable to produce a report for the requested resource"
    );
    assert_eq!(lv.runs.load(Ordering::SeqCst), 0);
    let health = get(address, "/healthz").await.json();
    assert_eq!(health["collectors"]["lv"]["enabled"], false);
    assert_eq!(health["confd"]["data_collectors"]["drbd"]["interval_ms"], 1);
    assert!(
        !get(address, "/metrics")
            .await
            .text()
            .contains("collector=\"lv\"")
    );

    // The cluster's 1 s interval is honoured although the collector's own is 60 s; the
    // sub-second one is floored at 1 s.
    let cpu_before = cpu.runs.load(Ordering::SeqCst);
    let drbd_before = drbd.runs.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let cpu_runs = cpu.runs.load(Ordering::SeqCst) - cpu_before;
    let drbd_runs = drbd.runs.load(Ordering::SeqCst) - drbd_before;
    assert!(
        (2..=5).contains(&cpu_runs),
        "cpu ran {cpu_runs} times in 3.5 s"
    );
    assert!(
        (2..=5).contains(&drbd_runs),
        "drbd ran {drbd_runs} times in 3.5 s"
    );

    // Re-enable lv, disable drbd, slow cpu down to an hour: effective within the recheck.
    sender.send_replace(Arc::new(collectors_config(&[
        ("cpu-avg-load", true, 3_600_000_000),
        ("lv", true, 5_000_000),
        ("drbd", false, 5_000_000),
    ])));
    let changed = Instant::now();
    wait_until(Duration::from_secs(3), async || {
        get(address, "/1/list/collectors").await.json()
            == json!([
                ["cpu-avg-load", "default", 0],
                ["lv", "storage", 0],
                ["diagnose", "node", 1]
            ])
    })
    .await;
    wait_until(Duration::from_secs(3), async || {
        get(address, "/1/report/storage/lv").await.status == 200
    })
    .await;
    assert!(changed.elapsed() < Duration::from_secs(3));
    assert_eq!(get(address, "/1/report/storage/drbd").await.status, 404);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let cpu_settled = cpu.runs.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(cpu.runs.load(Ordering::SeqCst), cpu_settled);
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_plugins_become_reports_and_refused_ones_do_not() {
    let Some(_serial) = root_test().await else {
        return;
    };
    let fixture = fixture();
    let plugins = fixture.state.with_file_name("collectors.d");
    root_dir(&plugins);
    script(
        &plugins,
        "raid",
        "#!/bin/sh\necho '{\"name\":\"raid\",\"category\":\"storage\",\"kind\":1,\
         \"data\":{\"status\":{\"code\":0,\"message\":\"\"},\"arrays\":2}}'\n",
        0o755,
    );
    // Declares another collector's name: refused, never listed.
    script(
        &plugins,
        "impostor",
        "#!/bin/sh\necho '{\"name\":\"raid\",\"category\":\"storage\",\"kind\":0,\"data\":{}}'\n",
        0o755,
    );
    let config = Config {
        plugin_dir: plugins,
        plugin_interval_secs: 1,
        ..config(&fixture)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent = nodecare_agent::serve(config, listener).await.unwrap();
    let address = agent.local_addr();

    let list = get(address, "/1/list/collectors").await.json();
    let entries = list.as_array().unwrap();
    assert!(entries.contains(&json!(["raid", "storage", 1])), "{list}");
    assert!(
        !entries.iter().any(|entry| entry[0] == "impostor"),
        "{list}"
    );
    let mut report = Value::Null;
    wait_until(Duration::from_secs(10), async || {
        report = get(address, "/1/report/storage/raid").await.json();
        report["data"]["arrays"] == 2
    })
    .await;
    assert_eq!(report["name"], "raid");
    assert_eq!(report["kind"], 1);
    assert_eq!(report["data"]["status"]["code"], 0);
    agent.shutdown().await;
}
