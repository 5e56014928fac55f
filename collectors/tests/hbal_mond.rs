//! Ganeti's own htools read our reports unchanged: `hbal --mond=yes --mond-data FILE` balances
//! a cluster by the `cpu-avg-load` reports our collector produced (with a `kvm-inst-rss`
//! report alongside, which hbal 3.0.2 does not use but must not choke on).
//!
//! Skips without `hbal` unless `NODECARE_REQUIRE_GANETI=1` (CI installs `ganeti-htools-3.0`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(clippy::disallowed_methods, reason = "the test runs Ganeti's hbal")]

use std::path::{Path, PathBuf};
use std::process::Command;

use nodecare_collectors::Collector;
use nodecare_collectors::builtin::{BuiltinConfig, cpu::CpuAvgLoad, kvm::KvmInstRss};
use nodecare_protocol::Report;
use serde_json::{Value, json};

fn hbal() -> Option<PathBuf> {
    let found = ["/usr/bin/hbal", "/usr/local/bin/hbal"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file());
    if found.is_none() {
        if std::env::var("NODECARE_REQUIRE_GANETI").as_deref() == Ok("1") {
            panic!("hbal is missing (install ganeti-htools-3.0)");
        }
        eprintln!("skipping: hbal not installed (install ganeti-htools-3.0)");
    }
    found
}

const CLUSTER: &str = "group-01|fake-uuid-01|preferred||

node1.example.com|16384|0|16000|100000|96000|8|N|fake-uuid-01|8||N|8|1|1.0
node2.example.com|16384|0|16000|100000|96000|8|N|fake-uuid-01|8||N|8|1|1.0

inst1|1024|1000|2|running|Y|node1.example.com|node2.example.com|drbd|
inst2|1024|1000|2|running|Y|node1.example.com|node2.example.com|drbd|
inst3|1024|1000|2|running|Y|node2.example.com|node1.example.com|drbd|
inst4|1024|1000|2|running|Y|node2.example.com|node1.example.com|drbd|

";

fn stat(work: u64) -> String {
    format!(
        "cpu  {} 0 0 100000 0 0 0 0 0 0\ncpu0 {} 0 0 50000 0 0 0 0 0 0\ncpu1 {} 0 0 50000 0 0 0 0 0 0\nintr 1\n",
        work * 2,
        work,
        work
    )
}

fn envelope(collector: &dyn Collector, data: Value) -> Value {
    let spec = collector.spec();
    serde_json::to_value(Report {
        name: spec.name.clone(),
        version: spec.version.clone(),
        format_version: spec.format_version,
        timestamp: 1_795_000_000_000_000_000,
        category: spec.category.clone(),
        kind: spec.kind,
        data,
    })
    .unwrap()
}

/// The reports one node's agent would serve: cpu-avg-load after `busy_ticks` of work per
/// CPU between samples, and kvm-inst-rss of one instance.
async fn node_reports(root: &Path, busy_ticks: u64) -> Vec<Value> {
    let proc_root = root.join("proc");
    let run_dir = root.join("run");
    std::fs::create_dir_all(proc_root.join("77")).unwrap();
    std::fs::create_dir_all(run_dir.join("kvm-hypervisor/pid")).unwrap();
    std::fs::write(proc_root.join("stat"), stat(1000)).unwrap();
    std::fs::write(run_dir.join("kvm-hypervisor/pid/inst1"), "77\n").unwrap();
    std::fs::write(proc_root.join("77/cmdline"), "kvm\0-name\0inst1\0").unwrap();
    std::fs::write(proc_root.join("77/statm"), "90000 65536 100 1 0 100 0\n").unwrap();
    let config = BuiltinConfig {
        proc_root,
        ganeti_run_dir: run_dir,
        ..BuiltinConfig::default()
    };
    let cpu = CpuAvgLoad::new(&config);
    cpu.collect().await.unwrap();
    std::fs::write(config.proc_root.join("stat"), stat(1000 + busy_ticks)).unwrap();
    let load = cpu.collect().await.unwrap();
    let rss = KvmInstRss::new(&config);
    let pages = rss.collect().await.unwrap();
    assert_eq!(pages, json!({"inst1": 65536}));
    vec![envelope(&cpu, load), envelope(&rss, pages)]
}

fn run_hbal(hbal: &Path, dir: &Path, mond_data: &Value) -> String {
    let cluster = dir.join("cluster.data");
    std::fs::write(&cluster, CLUSTER).unwrap();
    let data = dir.join("mond-data.json");
    std::fs::write(&data, serde_json::to_vec(mond_data).unwrap()).unwrap();
    let output = Command::new(hbal)
        .arg("-t")
        .arg(&cluster)
        .args(["--mond=yes", "--exit-on-missing-mond-data", "--mond-data"])
        .arg(&data)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "hbal failed:\n{text}");
    assert!(
        !text.contains("Didn't receive an answer"),
        "hbal ignored our data:\n{text}"
    );
    text
}

#[tokio::test]
async fn hbal_balances_by_our_cpu_avg_load_reports() {
    let Some(hbal) = hbal() else { return };
    let temp = tempfile::tempdir().unwrap();
    let busy = node_reports(&temp.path().join("n1"), 5000).await;
    let idle = node_reports(&temp.path().join("n2"), 1).await;
    let loaded = json!([
        {"node": "node1.example.com", "reports": busy},
        {"node": "node2.example.com", "reports": idle.clone()},
    ]);
    let text = run_hbal(&hbal, temp.path(), &loaded);
    // A busy node1 makes hbal move an instance away from it.
    assert!(text.contains("Initial score"), "{text}");
    assert!(
        text.lines()
            .any(|line| line.contains("node1.example.com:node2.example.com =>")),
        "no move away from the busy node:\n{text}"
    );

    let even = json!([
        {"node": "node1.example.com", "reports": idle.clone()},
        {"node": "node2.example.com", "reports": idle},
    ]);
    let text = run_hbal(&hbal, temp.path(), &even);
    assert!(text.contains("No solution found"), "{text}");
}
