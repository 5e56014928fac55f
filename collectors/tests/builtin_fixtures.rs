//! The built-in parsers and collectors on real samples: Ganeti's own test data (Debian package
//! `ganeti-testsuite`) compared with what Ganeti 3.0.2's `mon-collector` printed for the same
//! files (`fixtures/mond-3.0.2/`), plus our fixtures for formats mond cannot read.
//!
//! Without the Ganeti test data the Ganeti-sample tests skip, unless `NODECARE_REQUIRE_GANETI=1`
//! (CI), where they fail.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nodecare_collectors::builtin::{self, BuiltinConfig, cpu, diskstats, drbd, lv};
use nodecare_collectors::confd::{
    ClusterView, InstanceInfo, NodeInstances, ViewHandle, logical_volumes_of_disks, parse_node_drbd,
};
use nodecare_collectors::{Collector, Registry};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Ganeti's test data directory, or `None` (test skipped) when it is not installed.
fn ganeti_data() -> Option<PathBuf> {
    let dir = std::env::var_os("NODECARE_GANETI_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/ganeti/testsuite/test/data"));
    if dir.join("proc_drbd8.txt").is_file() {
        return Some(dir);
    }
    if std::env::var("NODECARE_REQUIRE_GANETI").as_deref() == Ok("1") {
        panic!(
            "Ganeti test data missing at {} (install ganeti-testsuite)",
            dir.display()
        );
    }
    eprintln!(
        "skipping: Ganeti test data not found at {} (install ganeti-testsuite)",
        dir.display()
    );
    None
}

fn golden(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join("mond-3.0.2").join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

const DRBD_SAMPLES: [&str; 10] = [
    "proc_drbd8",
    "proc_drbd80-emptyline",
    "proc_drbd80-emptyversion",
    "proc_drbd83",
    "proc_drbd83_sync",
    "proc_drbd83_sync_krnl2.6.39",
    "proc_drbd83_sync_want",
    "proc_drbd84",
    "proc_drbd84_emptyfirst",
    "proc_drbd84_sync",
];

#[test]
fn drbd_matches_mond_on_every_ganeti_sample() {
    let Some(data) = ganeti_data() else { return };
    let pairing: Value =
        serde_json::from_str(&read(&data.join("instance-minor-pairing.txt"))).unwrap();
    let minors = parse_node_drbd(&pairing).unwrap();
    for sample in DRBD_SAMPLES {
        let mut status = drbd::parse_proc_drbd(&read(&data.join(format!("{sample}.txt"))))
            .unwrap_or_else(|error| panic!("{sample}: {error}"));
        drbd::pair_instances(&mut status, &minors);
        let ours = drbd::to_report_data(&status);
        let mond = golden(&format!("{sample}.json"));
        assert_eq!(ours, mond["data"], "{sample}");
    }
}

#[test]
fn diskstats_matches_mond_on_the_ganeti_sample() {
    let Some(data) = ganeti_data() else { return };
    let stats = diskstats::parse_diskstats(&read(&data.join("proc_diskstats.txt"))).unwrap();
    assert_eq!(diskstats::to_json(&stats), golden("diskstats.json")["data"]);
}

#[test]
fn lv_matches_mond_on_the_ganeti_sample() {
    let Some(data) = ganeti_data() else { return };
    let mut volumes = lv::parse_lvs(&read(&data.join("lvs_lv.txt"))).unwrap();
    // The sample's owners come from confd's disk lists (here: mon-collector's -i file).
    let instance_disks: Value =
        serde_json::from_str(&read(&data.join("instance-disks.txt"))).unwrap();
    let mut owners = BTreeMap::new();
    for entry in instance_disks.as_array().unwrap() {
        let instance = entry[0]["name"].as_str().unwrap().to_owned();
        for volume in logical_volumes_of_disks(&entry[1]) {
            owners.insert(volume, instance.clone());
        }
    }
    assert!(!owners.is_empty());
    lv::join_owners(&mut volumes, &owners);
    assert_eq!(
        serde_json::to_value(&volumes).unwrap(),
        golden("lv.json")["data"]
    );
}

#[test]
fn modern_diskstats_parse_where_mond_fails() {
    for (file, devices) in [
        ("proc_diskstats_linux418.txt", 4),
        ("proc_diskstats_linux6.txt", 2),
    ] {
        let stats = diskstats::parse_diskstats(&read(&fixtures().join(file))).unwrap();
        assert_eq!(stats.len(), devices, "{file}");
    }
    let stats =
        diskstats::parse_diskstats(&read(&fixtures().join("proc_diskstats_linux418.txt"))).unwrap();
    assert_eq!(stats[0].name, "sda");
    assert_eq!(stats[0].reads, 48213);
    assert_eq!(stats[0].weighted_io_millis, 204_444);
}

#[test]
fn drbd9_status_json_maps_to_mond_shape() {
    let header = drbd::parse_proc_drbd(&read(&fixtures().join("proc_drbd9.txt"))).unwrap();
    assert_eq!(header.version.major(), Some(9));
    assert!(header.devices.is_empty());
    let mut status = drbd::DrbdStatus {
        version: header.version,
        devices: drbd::parse_drbdsetup_json(&read(&fixtures().join("drbdsetup_status_drbd9.json")))
            .unwrap(),
    };
    let pairing: Value =
        serde_json::from_str(&read(&fixtures().join("drbd9-pairing.json"))).unwrap();
    drbd::pair_instances(&mut status, &parse_node_drbd(&pairing).unwrap());
    let data = drbd::to_report_data(&status);
    assert_eq!(data["versionInfo"]["version"], "9.2.12");
    assert_eq!(data["versionInfo"]["api"], "2");
    let devices = data["deviceInfos"].as_array().unwrap();
    assert_eq!(devices.len(), 4);
    assert_eq!(devices[0]["connectionState"], "Connected");
    assert_eq!(devices[0]["instance"], "instance1.example.com");
    assert_eq!(devices[0]["perfIndicators"]["networkSend"], 1_048_576);
    assert_eq!(devices[1]["connectionState"], "SyncTarget");
    assert_eq!(devices[1]["syncStatus"]["percentage"], 43.88);
    assert_eq!(devices[1]["instance"], "instance2.example.com");
    assert_eq!(devices[2]["connectionState"], "Connecting");
    assert_eq!(devices[2]["instance"], Value::Null);
    assert_eq!(devices[3]["connectionState"], "StandAlone");
    // Worst is StandAlone (4); messages newest device first, like mond.
    assert_eq!(
        data["status"],
        json!({"code": 4, "message": "\n3: No network config available\n2: Trying to establish a network connection"})
    );
}

#[test]
fn modern_lvs_output_parses_with_tag_owners() {
    let volumes = lv::parse_lvs(&read(&fixtures().join("lvs_lvm2_03.txt"))).unwrap();
    assert_eq!(volumes.len(), 4);
    assert_eq!(volumes[0].instance.as_deref(), Some("web1.example.com"));
    assert_eq!(volumes[2].instance, None);
    assert_eq!(volumes[3].seg_start, 16_106_127_360);
}

#[test]
fn proc_stat_of_linux6_parses() {
    let lines = cpu::parse_proc_stat(&read(&fixtures().join("proc_stat_linux6.txt"))).unwrap();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0].work, 59104 + 1 + 21419 + 666 + 221 + 53);
}

fn fake_proc(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::copy(fixtures().join("proc_stat_linux6.txt"), root.join("stat")).unwrap();
    std::fs::copy(
        fixtures().join("proc_diskstats_linux6.txt"),
        root.join("diskstats"),
    )
    .unwrap();
    std::fs::write(root.join("uptime"), "1000.00 1800.00\n").unwrap();
}

fn write_instance(proc_root: &Path, run_dir: &Path, name: &str, pid: u32, rss: u64) {
    let pid_dir = run_dir.join("kvm-hypervisor/pid");
    std::fs::create_dir_all(&pid_dir).unwrap();
    std::fs::write(pid_dir.join(name), format!("{pid}\n")).unwrap();
    let process = proc_root.join(pid.to_string());
    std::fs::create_dir_all(&process).unwrap();
    std::fs::write(
        process.join("cmdline"),
        format!("/usr/bin/qemu-system-x86_64\0-name\0{name}\0-m\0512\0"),
    )
    .unwrap();
    std::fs::write(
        process.join("statm"),
        format!("300000 {rss} 2000 900 0 120000 0\n"),
    )
    .unwrap();
    std::fs::write(
        process.join("stat"),
        format!("{pid} (qemu-system-x86) S 1 {pid} {pid} 0 -1 0 0 0 0 0 700 300 0 0 20 0 3 0 50000 1 1\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn collectors_run_on_a_fake_node() {
    let temp = tempfile::tempdir().unwrap();
    let proc_root = temp.path().join("proc");
    let run_dir = temp.path().join("run");
    fake_proc(&proc_root);
    write_instance(&proc_root, &run_dir, "inst1.example.com", 4242, 51_200);
    write_instance(&proc_root, &run_dir, "inst2.example.com", 4343, 25_600);
    // A stale pid file whose pid now belongs to another program.
    write_instance(&proc_root, &run_dir, "stale.example.com", 4444, 1);
    std::fs::write(proc_root.join("4444/cmdline"), "/bin/bash\0").unwrap();
    // A crashed instance: pid file left behind, process gone.
    std::fs::write(
        run_dir.join("kvm-hypervisor/pid/dead.example.com"),
        "4545\n",
    )
    .unwrap();
    let view = ClusterView {
        node_name: "node1.example.com".into(),
        instances: Some(NodeInstances {
            primary: [
                "inst1.example.com",
                "inst2.example.com",
                "stale.example.com",
                "dead.example.com",
                "down.example.com",
            ]
            .iter()
            .map(|name| InstanceInfo {
                name: (*name).into(),
                admin_state: Some(
                    if name.starts_with("down") {
                        "down"
                    } else {
                        "up"
                    }
                    .into(),
                ),
                hypervisor: Some("kvm".into()),
                ..InstanceInfo::default()
            })
            .collect(),
            secondary: vec![],
        }),
        ..ClusterView::default()
    };
    let config = BuiltinConfig {
        proc_root: proc_root.clone(),
        ganeti_run_dir: run_dir.clone(),
        lvs_path: temp.path().join("no-lvs"),
        xl_path: temp.path().join("no-xl"),
        cluster: Some(ViewHandle::fixed(view)),
        tool_timeout: Duration::from_secs(2),
        ..BuiltinConfig::default()
    };
    let mut registry = Registry::new();
    builtin::register_all(&mut registry, &config);
    let names: Vec<_> = registry.iter().map(|c| c.spec().name.clone()).collect();
    // No xl here: xen-cpu-avg-load reports `{}` as mond does; no inst-status-xen.
    assert_eq!(
        names,
        [
            "cpu-avg-load",
            "xen-cpu-avg-load",
            "kvm-inst-rss",
            "diskstats",
            "drbd",
            "inst-status-kvm",
            "lv"
        ]
    );
    let by_name = |name: &str| -> Arc<dyn Collector> {
        registry
            .iter()
            .find(|c| c.spec().name == name)
            .unwrap()
            .clone()
    };

    assert_eq!(
        by_name("xen-cpu-avg-load").collect().await.unwrap(),
        json!({})
    );
    let rss = by_name("kvm-inst-rss").collect().await.unwrap();
    assert_eq!(
        rss,
        json!({"inst1.example.com": 51_200, "inst2.example.com": 25_600})
    );

    let cpu = by_name("cpu-avg-load").collect().await.unwrap();
    assert_eq!(cpu["cpu_number"], 2);
    assert_eq!(cpu["cpus"].as_array().unwrap().len(), 2);
    // The fixture does not change between samples: no load.
    assert_eq!(cpu["cpu_total"], 0.0);

    let disks = by_name("diskstats").collect().await.unwrap();
    assert_eq!(disks.as_array().unwrap().len(), 2);

    // No /proc/drbd and no minors expected: fine.
    let drbd = by_name("drbd").collect().await.unwrap();
    assert_eq!(drbd["status"]["code"], 0);

    let status = by_name("inst-status-kvm").collect().await.unwrap();
    let states: BTreeMap<String, String> = status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap().to_owned(),
                i["actualState"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(states["inst1.example.com"], "running");
    assert_eq!(states["stale.example.com"], "crashed");
    assert_eq!(states["dead.example.com"], "crashed");
    assert_eq!(states["down.example.com"], "shutdown");
    assert_eq!(status["status"]["code"], 4);
    let first = &status["instances"][0];
    assert_eq!(first["adminState"], "up");
    assert_eq!(first["status"], json!({"code": 0, "message": ""}));
    assert!(first["uptime"].is_string());

    // lvs is not installed at the configured path: a clear error, not a panic.
    let error = by_name("lv").collect().await.unwrap_err();
    assert!(error.to_string().contains("not installed"), "{error}");
}

#[tokio::test]
async fn drbd_collector_flags_missing_module_when_minors_are_expected() {
    let temp = tempfile::tempdir().unwrap();
    let view = ClusterView {
        drbd_minors: Some(
            parse_node_drbd(&json!([["n1", 0, "i1", "disk/0", "primary", "n2"]])).unwrap(),
        ),
        ..ClusterView::default()
    };
    let config = BuiltinConfig {
        proc_root: temp.path().to_owned(),
        cluster: Some(ViewHandle::fixed(view)),
        ..BuiltinConfig::default()
    };
    let data = drbd::Drbd::new(&config).collect().await.unwrap();
    assert_eq!(data["status"]["code"], 4);
    std::fs::copy(fixtures().join("proc_drbd9.txt"), temp.path().join("drbd")).unwrap();
    let config = BuiltinConfig {
        drbdsetup_path: temp.path().join("no-drbdsetup"),
        ..config
    };
    let error = drbd::Drbd::new(&config).collect().await.unwrap_err();
    assert!(error.to_string().contains("drbdsetup"), "{error}");
}

#[tokio::test]
async fn cluster_configuration_gates_collectors() {
    use nodecare_collectors::confd::CollectorConfig;
    let temp = tempfile::tempdir().unwrap();
    fake_proc(temp.path());
    let collectors = [
        (
            "diskstats".to_owned(),
            CollectorConfig {
                active: false,
                interval: Duration::from_secs(5),
            },
        ),
        (
            "cpu-avg-load".to_owned(),
            CollectorConfig {
                active: true,
                interval: Duration::from_secs(3600),
            },
        ),
    ];
    let (sender, view) = ViewHandle::channel(ClusterView {
        data_collectors: Some(collectors.into_iter().collect()),
        ..ClusterView::default()
    });
    let config = BuiltinConfig {
        proc_root: temp.path().to_owned(),
        cluster: Some(view),
        ..BuiltinConfig::default()
    };
    let mut registry = Registry::new();
    builtin::register_all(&mut registry, &config);
    let diskstats = registry.find("storage", "diskstats").unwrap();
    assert!(!diskstats.enabled());
    let error = diskstats.collect().await.unwrap_err();
    assert!(
        error.to_string().contains("disabled by the cluster"),
        "{error}"
    );
    // The cluster's interval is what the scheduler runs the collector at.
    let cpu = registry.find("default", "cpu-avg-load").unwrap();
    assert!(cpu.enabled());
    assert_eq!(cpu.interval(), Duration::from_secs(3600));
    // Collectors the cluster does not configure keep their own interval.
    let rss = registry.find("default", "kvm-inst-rss").unwrap();
    assert_eq!(rss.interval(), Duration::from_secs(5));
    // Re-enabling takes effect on the next run.
    sender.send_replace(Arc::new(ClusterView::default()));
    assert!(diskstats.enabled());
    assert!(diskstats.collect().await.is_ok());
}
