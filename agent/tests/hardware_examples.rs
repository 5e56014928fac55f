//! The hardware diagnose scripts and repair commands in `whitelist-examples/`, run on canned
//! output of the real tools (files under `tests/examples-data/`, in the tools' own formats):
//! healthy, each failure state, tool missing, tool failing, garbage output, and a hanging tool
//! under the agent's own runner and time limit.
//!
//! Every script takes one test-only argument, `--test-root DIR`: the absolute paths it reads or
//! runs (`/usr/sbin/mdadm`, `/proc/mdstat`, its state file) are looked up under DIR. The agent
//! runs scripts with no arguments, so it can never take effect there. Skips when
//! `/usr/bin/python3` is missing.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the example scripts directly, as the agent would"
)]

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nodecare_protocol::{DiagnoseStatus, NodeVerdict, ScriptVerdict};
use serde_json::{Value, json};

fn example(kind: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../whitelist-examples")
        .join(kind)
        .join(name)
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/examples-data")
        .join(name)
}

fn have_python() -> bool {
    if Path::new("/usr/bin/python3").exists() {
        true
    } else {
        eprintln!("SKIP: /usr/bin/python3 is missing");
        false
    }
}

/// What a fake tool does for one argument string.
enum Reply {
    /// Prints a canned file from `tests/examples-data/`.
    Canned(&'static str),
    /// Prints to stderr and exits with this code.
    Fail(i32, &'static str),
    /// Never answers.
    Hang,
    /// Runs this shell snippet (side effects on the fake root: `$ROOT`).
    Shell(String),
}

/// A fake root file system for `--test-root`.
struct FakeRoot {
    dir: tempfile::TempDir,
}

impl FakeRoot {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn at(&self, path: &str) -> PathBuf {
        self.path().join(path.trim_start_matches('/'))
    }

    fn write(&self, path: &str, content: &str) {
        let target = self.at(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, content).unwrap();
    }

    fn canned(&self, path: &str, name: &str) {
        self.write(path, &std::fs::read_to_string(data(name)).unwrap());
    }

    fn remove(&self, path: &str) {
        let target = self.at(path);
        if target.is_dir() {
            std::fs::remove_dir_all(target).unwrap();
        } else {
            std::fs::remove_file(target).unwrap();
        }
    }

    /// A fake tool at `path` answering each exact argument string; it logs its calls to
    /// `<path>.calls`.
    fn tool(&self, path: &str, replies: &[(&str, Reply)]) {
        let mut script = format!(
            "#!/bin/sh\nROOT='{}'\necho \"$*\" >> \"$0.calls\"\ncase \"$*\" in\n",
            self.path().display()
        );
        for (arguments, reply) in replies {
            let action = match reply {
                Reply::Canned(name) => format!("cat '{}'", data(name).display()),
                Reply::Fail(code, message) => format!("echo '{message}' >&2; exit {code}"),
                Reply::Hang => "exec sleep 600".to_owned(),
                Reply::Shell(snippet) => snippet.clone(),
            };
            script.push_str(&format!("'{arguments}') {action} ;;\n"));
        }
        script.push_str("*) echo \"fake tool: unexpected arguments: $*\" >&2; exit 99 ;;\nesac\n");
        self.write(path, &script);
        std::fs::set_permissions(self.at(path), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn calls(&self, path: &str) -> String {
        std::fs::read_to_string(self.at(&format!("{path}.calls"))).unwrap_or_default()
    }
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs an example as the agent would (empty environment but the fixed `PATH`, working
/// directory `/`), with the test root and `input` on stdin.
fn run(kind: &str, name: &str, root: &FakeRoot, input: &[u8]) -> Outcome {
    let mut child = Command::new(example(kind, name))
        .arg("--test-root")
        .arg(root.path())
        .env_clear()
        .env("PATH", nodecare_collectors::runner::FIXED_PATH)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ignored = child.stdin.take().unwrap().write_all(input);
    let output = child.wait_with_output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs a diagnose example; it must exit 0 with a valid verdict.
fn diagnose(name: &str, root: &FakeRoot) -> ScriptVerdict {
    let outcome = run("diagnose", name, root, b"");
    assert_eq!(
        outcome.code, 0,
        "{name}: exit {}: {}",
        outcome.code, outcome.stderr
    );
    ScriptVerdict::parse(outcome.stdout.as_bytes())
        .unwrap_or_else(|error| panic!("{name}: {error}: {:?}", outcome.stdout))
}

/// Runs a diagnose example that must give no verdict: exit 1 with the reason on stderr.
fn diagnose_unknown(name: &str, root: &FakeRoot, reason: &str) {
    let outcome = run("diagnose", name, root, b"");
    assert_eq!(
        outcome.code, 1,
        "{name}: expected exit 1, got {}: {} {}",
        outcome.code, outcome.stdout, outcome.stderr
    );
    assert!(outcome.stdout.is_empty(), "{name}: {}", outcome.stdout);
    assert!(
        outcome.stderr.contains(reason),
        "{name}: stderr {:?} lacks {reason:?}",
        outcome.stderr
    );
}

fn fingerprint(verdict: &ScriptVerdict) -> String {
    NodeVerdict::merge(BTreeMap::from([("x".to_owned(), verdict.clone())]))
        .unwrap()
        .fingerprint
}

fn problems(verdict: &ScriptVerdict) -> Vec<String> {
    serde_json::from_value(verdict.details["problems"].clone()).unwrap()
}

const NEW_DIAGNOSE: [&str; 9] = [
    "ipmi-health",
    "software-raid",
    "nvme-health",
    "machine-checks",
    "nic-health",
    "filesystems",
    "gpu-health",
    "drbd-standalone",
    "memory-pressure",
];
const NEW_REPAIR: [&str; 4] = [
    "bmc-cold-reset",
    "raid-readd-member",
    "restart-nic",
    "drop-caches",
];

#[test]
fn every_example_is_whitelistable_and_documented() {
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../whitelist-examples/README.md"),
    )
    .unwrap();
    for kind in ["diagnose", "repair"] {
        for entry in std::fs::read_dir(example(kind, "")).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            assert!(
                nodecare_collectors::whitelist::is_valid_name(&name),
                "{kind}/{name}"
            );
            let metadata = entry.metadata().unwrap();
            assert!(metadata.is_file(), "{kind}/{name} is not a regular file");
            let mode = metadata.permissions().mode() & 0o7777;
            assert_eq!(mode, 0o755, "{kind}/{name}: mode {mode:o}");
            assert!(
                readme.contains(&format!("`{name}`")),
                "{kind}/{name} is missing from whitelist-examples/README.md"
            );
            let text = std::fs::read_to_string(entry.path()).unwrap();
            if text.starts_with("#!/usr/bin/python3") {
                assert!(
                    text.contains("Needs:"),
                    "{kind}/{name}: no \"Needs:\" in its header"
                );
            }
        }
    }
}

#[test]
fn every_script_refuses_stray_arguments() {
    if !have_python() {
        return;
    }
    let older_diagnose = ["smart-disks", "ecc-memory"];
    let older_repair = ["rescan-scsi-host", "restart-failed-unit"];
    for (kind, names) in [
        ("diagnose", &NEW_DIAGNOSE[..]),
        ("repair", &NEW_REPAIR[..]),
        ("diagnose", &older_diagnose[..]),
        ("repair", &older_repair[..]),
    ] {
        for name in names {
            let output = Command::new(example(kind, name))
                .arg("--verbose")
                .env_clear()
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let expected = if kind == "diagnose" { 1 } else { 2 };
            assert_eq!(output.status.code(), Some(expected), "{name}");
            assert!(
                String::from_utf8_lossy(&output.stderr).contains("usage"),
                "{name}"
            );
        }
    }
}

#[test]
fn every_new_diagnose_script_reports_a_missing_tool() {
    if !have_python() {
        return;
    }
    // An empty root: no tool, no /proc, no /sys.
    let root = FakeRoot::new();
    diagnose_unknown("ipmi-health", &root, "ipmitool not found");
    diagnose_unknown("nvme-health", &root, "nvme not found");
    diagnose_unknown("machine-checks", &root, "neither rasdaemon");
    diagnose_unknown("nic-health", &root, "ethtool not found");
    diagnose_unknown("filesystems", &root, "journalctl not found");
    diagnose_unknown("gpu-health", &root, "nvidia-smi not found");
    diagnose_unknown("memory-pressure", &root, "/proc/pressure/memory");
    // Arrays exist but mdadm does not.
    root.canned("/proc/mdstat", "mdstat/healthy.txt");
    diagnose_unknown("software-raid", &root, "mdadm not found");
    // DRBD 9 without drbdadm.
    root.canned("/proc/drbd", "drbd/proc-9.txt");
    diagnose_unknown("drbd-standalone", &root, "drbdadm not found");
}

// --- ipmi-health ---------------------------------------------------------------------------

fn ipmi(root: &FakeRoot, sdr: &'static str, sel: &'static str) {
    root.tool(
        "/usr/bin/ipmitool",
        &[
            ("sdr elist", Reply::Canned(sdr)),
            ("sel elist", Reply::Canned(sel)),
        ],
    );
}

#[test]
fn ipmi_health_on_canned_ipmitool_output() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    ipmi(&root, "ipmi/sdr-healthy.txt", "ipmi/sel-history.txt");
    let healthy = diagnose("ipmi-health", &root);
    assert_eq!(healthy.status, DiagnoseStatus::Ok, "{healthy:?}");
    assert!(problems(&healthy).is_empty());
    // Warmer, faster fans: the same state.
    ipmi(&root, "ipmi/sdr-healthy-warmer.txt", "ipmi/sel-history.txt");
    assert_eq!(
        fingerprint(&healthy),
        fingerprint(&diagnose("ipmi-health", &root))
    );

    let cases: [(&str, &str, DiagnoseStatus, &str); 7] = [
        (
            "ipmi/sdr-psu-failed.txt",
            "ipmi/sel-empty.txt",
            DiagnoseStatus::Evacuate,
            "psu-failed: PS2 Status",
        ),
        (
            "ipmi/sdr-fan-failed.txt",
            "ipmi/sel-empty.txt",
            DiagnoseStatus::Evacuate,
            "fan-failed: FAN2",
        ),
        (
            "ipmi/sdr-temp-critical.txt",
            "ipmi/sel-empty.txt",
            DiagnoseStatus::Evacuate,
            "temperature-critical: CPU2 Temp",
        ),
        (
            "ipmi/sdr-healthy.txt",
            "ipmi/sel-ierr.txt",
            DiagnoseStatus::Evacuate,
            "cpu-ierr: Processor CPU2 Status",
        ),
        (
            "ipmi/sdr-healthy.txt",
            "ipmi/sel-ecc-limit.txt",
            DiagnoseStatus::Evacuate,
            "ecc-flood: Memory ECC Corr Err",
        ),
        (
            "ipmi/sdr-healthy.txt",
            "ipmi/sel-ecc-flood.txt",
            DiagnoseStatus::Evacuate,
            "ecc-flood: event log",
        ),
        (
            "ipmi/sdr-not-reading.txt",
            "ipmi/sel-empty.txt",
            DiagnoseStatus::LiveRepair,
            "bmc-not-reading: all sensors",
        ),
    ];
    for (sdr, sel, status, problem) in cases {
        let root = FakeRoot::new();
        root.tool(
            "/usr/bin/ipmitool",
            &[
                ("sdr elist", Reply::Canned(sdr)),
                ("sel elist", Reply::Canned(sel)),
            ],
        );
        let verdict = diagnose("ipmi-health", &root);
        assert_eq!(verdict.status, status, "{sdr} {sel}: {verdict:?}");
        assert_eq!(problems(&verdict), vec![problem.to_owned()], "{sdr} {sel}");
        if status == DiagnoseStatus::LiveRepair {
            assert_eq!(verdict.command.as_deref(), Some("bmc-cold-reset"));
        }
    }
}

#[test]
fn ipmi_health_fails_visibly() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    root.tool(
        "/usr/bin/ipmitool",
        &[(
            "sdr elist",
            Reply::Fail(1, "Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory"),
        )],
    );
    diagnose_unknown("ipmi-health", &root, "Could not open device");
    ipmi(&root, "ipmi/sdr-garbage.txt", "ipmi/sel-empty.txt");
    diagnose_unknown("ipmi-health", &root, "unexpected line");
}

// --- software-raid -------------------------------------------------------------------------

fn mdadm(root: &FakeRoot, md1: &'static str) {
    root.tool(
        "/usr/sbin/mdadm",
        &[
            (
                "--detail /dev/md0",
                Reply::Canned("mdstat/detail-clean.txt"),
            ),
            ("--detail /dev/md1", Reply::Canned(md1)),
        ],
    );
}

#[test]
fn software_raid_on_canned_mdstat() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    let absent = diagnose("software-raid", &root);
    assert_eq!(absent.status, DiagnoseStatus::Ok);
    assert_eq!(absent.details["md"], "absent");

    root.canned("/proc/mdstat", "mdstat/none.txt");
    assert_eq!(diagnose("software-raid", &root).status, DiagnoseStatus::Ok);

    mdadm(&root, "mdstat/detail-clean.txt");
    root.canned("/proc/mdstat", "mdstat/healthy.txt");
    let healthy = diagnose("software-raid", &root);
    assert_eq!(healthy.status, DiagnoseStatus::Ok);
    assert_eq!(healthy.details["arrays"]["md1"]["state"], "clean");
    // A scrub (check) in progress is not a degradation.
    root.canned("/proc/mdstat", "mdstat/checking.txt");
    assert_eq!(
        fingerprint(&healthy),
        fingerprint(&diagnose("software-raid", &root))
    );

    root.canned("/proc/mdstat", "mdstat/failed-member.txt");
    mdadm(&root, "mdstat/detail-degraded.txt");
    let failed = diagnose("software-raid", &root);
    assert_eq!(failed.status, DiagnoseStatus::LiveRepair);
    assert_eq!(failed.command.as_deref(), Some("raid-readd-member"));
    assert_eq!(
        failed.details["raid_failed_members"],
        json!({"md1": ["sdc1"]})
    );

    root.canned("/proc/mdstat", "mdstat/rebuilding.txt");
    mdadm(&root, "mdstat/detail-recovering.txt");
    let rebuilding = diagnose("software-raid", &root);
    assert_eq!(rebuilding.status, DiagnoseStatus::Ok);
    assert_eq!(rebuilding.details["arrays"]["md1"]["state"], "rebuilding");
    // Progress moves on: the same state.
    root.canned("/proc/mdstat", "mdstat/rebuilding-later.txt");
    assert_eq!(
        fingerprint(&rebuilding),
        fingerprint(&diagnose("software-raid", &root))
    );

    root.canned("/proc/mdstat", "mdstat/degraded.txt");
    mdadm(&root, "mdstat/detail-clean.txt");
    let degraded = diagnose("software-raid", &root);
    assert_eq!(degraded.status, DiagnoseStatus::Evacuate);
    assert_eq!(degraded.details["arrays"]["md0"]["state"], "degraded");

    root.canned("/proc/mdstat", "mdstat/healthy.txt");
    mdadm(&root, "mdstat/detail-failed.txt");
    let broken = diagnose("software-raid", &root);
    assert_eq!(broken.status, DiagnoseStatus::EvacuateFailover);
    assert_eq!(broken.details["arrays"]["md1"]["state"], "failed");

    root.canned("/proc/mdstat", "mdstat/inactive.txt");
    mdadm(&root, "mdstat/detail-clean.txt");
    let inactive = diagnose("software-raid", &root);
    assert_eq!(inactive.status, DiagnoseStatus::EvacuateFailover);
    assert_eq!(inactive.details["arrays"]["md127"]["state"], "inactive");

    // Intel firmware RAID: the container is always inactive; the array inside is judged.
    root.canned("/proc/mdstat", "mdstat/imsm.txt");
    root.tool(
        "/usr/sbin/mdadm",
        &[(
            "--detail /dev/md126",
            Reply::Canned("mdstat/detail-clean.txt"),
        )],
    );
    let imsm = diagnose("software-raid", &root);
    assert_eq!(imsm.status, DiagnoseStatus::Ok, "{imsm:?}");
    assert_eq!(imsm.details["arrays"]["md127"]["state"], "container");
    assert_eq!(imsm.details["arrays"]["md126"]["state"], "clean");

    root.canned("/proc/mdstat", "mdstat/garbage.txt");
    diagnose_unknown("software-raid", &root, "unexpected line");
    root.canned("/proc/mdstat", "mdstat/healthy.txt");
    root.tool(
        "/usr/sbin/mdadm",
        &[(
            "--detail /dev/md0",
            Reply::Fail(1, "mdadm: cannot open /dev/md0: Permission denied"),
        )],
    );
    diagnose_unknown("software-raid", &root, "cannot open /dev/md0");
}

// --- nvme-health ---------------------------------------------------------------------------

fn nvme(root: &FakeRoot, nvme1: &'static str) {
    root.tool(
        "/usr/sbin/nvme",
        &[
            ("list -o json", Reply::Canned("nvme/list.json")),
            (
                "smart-log /dev/nvme0 -o json",
                Reply::Canned("nvme/smart-healthy.json"),
            ),
            ("smart-log /dev/nvme1 -o json", Reply::Canned(nvme1)),
        ],
    );
}

#[test]
fn nvme_health_on_canned_smart_logs() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    nvme(&root, "nvme/smart-healthy.json");
    let healthy = diagnose("nvme-health", &root);
    assert_eq!(healthy.status, DiagnoseStatus::Ok, "{healthy:?}");
    nvme(&root, "nvme/smart-healthy-warmer.json");
    assert_eq!(
        fingerprint(&healthy),
        fingerprint(&diagnose("nvme-health", &root))
    );
    // The temperature bit is a detail, not a verdict.
    nvme(&root, "nvme/smart-hot.json");
    let hot = diagnose("nvme-health", &root);
    assert_eq!(hot.status, DiagnoseStatus::Ok);
    assert_eq!(hot.details["drives"]["nvme1"]["temperature_warning"], true);

    for (log, problem) in [
        ("nvme/smart-spare-low.json", "spare-low: S64HNE0T405678"),
        (
            "nvme/smart-reliability.json",
            "reliability-degraded: S64HNE0T405678",
        ),
        ("nvme/smart-read-only.json", "read-only: S64HNE0T405678"),
        (
            "nvme/smart-worn-out.json",
            "endurance-used-up: S64HNE0T405678",
        ),
    ] {
        let root = FakeRoot::new();
        nvme(&root, log);
        let verdict = diagnose("nvme-health", &root);
        assert_eq!(verdict.status, DiagnoseStatus::Evacuate, "{log}");
        assert_eq!(problems(&verdict), vec![problem.to_owned()], "{log}");
    }

    // Media errors: a lifetime total is not a verdict; growth is, for a day.
    let root = FakeRoot::new();
    nvme(&root, "nvme/smart-media-5.json");
    let first = diagnose("nvme-health", &root);
    assert_eq!(first.status, DiagnoseStatus::Ok, "{first:?}");
    assert_eq!(diagnose("nvme-health", &root).status, DiagnoseStatus::Ok);
    nvme(&root, "nvme/smart-media-9.json");
    let growing = diagnose("nvme-health", &root);
    assert_eq!(growing.status, DiagnoseStatus::Evacuate);
    assert_eq!(
        problems(&growing),
        vec!["media-errors-growing: S64HNE0T405678".to_owned()]
    );
    assert_eq!(
        growing.details["drives"]["nvme1"]["media_errors_last_day"],
        4
    );
    assert_eq!(
        fingerprint(&growing),
        fingerprint(&diagnose("nvme-health", &root))
    );
    assert!(
        root.at("/var/lib/nodecare/script-state/nvme-health.json")
            .is_file()
    );
    // A day later the growth has left the window.
    age_state(&root, "nvme-health", 25 * 3600);
    assert_eq!(diagnose("nvme-health", &root).status, DiagnoseStatus::Ok);

    let root = FakeRoot::new();
    root.tool(
        "/usr/sbin/nvme",
        &[("list -o json", Reply::Canned("nvme/list-empty.json"))],
    );
    let none = diagnose("nvme-health", &root);
    assert_eq!(none.status, DiagnoseStatus::Ok);
    assert_eq!(none.details["drives"], json!({}));

    nvme(&root, "nvme/smart-garbage.json");
    diagnose_unknown("nvme-health", &root, "not JSON");
    root.tool(
        "/usr/sbin/nvme",
        &[(
            "list -o json",
            Reply::Fail(1, "Failed to scan topology: No such file or directory"),
        )],
    );
    diagnose_unknown("nvme-health", &root, "Failed to scan topology");
}

/// Moves every sample in a script's state file `seconds` into the past.
fn age_state(root: &FakeRoot, name: &str, seconds: u64) {
    fn shift(value: &mut Value, seconds: f64) {
        match value {
            Value::Array(items) => {
                let is_sample = items.len() == 2 && items.iter().all(Value::is_number);
                if is_sample {
                    let then = items[0].as_f64().unwrap() - seconds;
                    items[0] = json!(then);
                } else {
                    items.iter_mut().for_each(|item| shift(item, seconds));
                }
            }
            Value::Object(map) => map.values_mut().for_each(|item| shift(item, seconds)),
            Value::Number(number) => {
                // drbd-standalone keeps first-seen times as plain numbers.
                if let Some(then) = number.as_f64()
                    && then > 1_000_000_000.0
                {
                    *value = json!(then - seconds);
                }
            }
            _ => {}
        }
    }
    let path = root.at(&format!("/var/lib/nodecare/script-state/{name}.json"));
    let mut state: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    #[allow(clippy::cast_precision_loss, reason = "test durations")]
    shift(&mut state, seconds as f64);
    std::fs::write(&path, serde_json::to_string(&state).unwrap()).unwrap();
}

// --- machine-checks ------------------------------------------------------------------------

fn ras(root: &FakeRoot, summary: &'static str) {
    root.tool(
        "/usr/sbin/ras-mc-ctl",
        &[("--summary", Reply::Canned(summary))],
    );
}

#[test]
fn machine_checks_judges_rates_from_rasdaemon() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    ras(&root, "ras/summary-clean.txt");
    assert_eq!(diagnose("machine-checks", &root).status, DiagnoseStatus::Ok);
    // 20 corrected errors on one DIMM since the last run: fewer than 24 a day, Ok.
    ras(&root, "ras/summary-ce-20.txt");
    let some = diagnose("machine-checks", &root);
    assert_eq!(some.status, DiagnoseStatus::Ok, "{some:?}");
    assert_eq!(
        some.details["counts"]["corrected: CPU_SrcID#0_MC#0_Chan#0_DIMM#0"]["last_day"],
        20
    );
    // 20 more within the day: 40.
    ras(&root, "ras/summary-ce-40.txt");
    assert_eq!(
        diagnose("machine-checks", &root).status,
        DiagnoseStatus::Evacuate
    );

    let root = FakeRoot::new();
    ras(&root, "ras/summary-ce-3.txt");
    let quiet = diagnose("machine-checks", &root);
    assert_eq!(quiet.status, DiagnoseStatus::Ok);
    assert_eq!(quiet.details["source"], "rasdaemon");
    ras(&root, "ras/summary-ce-40.txt");
    let flood = diagnose("machine-checks", &root);
    assert_eq!(flood.status, DiagnoseStatus::Evacuate);
    assert_eq!(
        problems(&flood),
        vec!["corrected-errors: CPU_SrcID#0_MC#0_Chan#0_DIMM#0".to_owned()]
    );
    // Counts keep moving: the same state; a day later, Ok again.
    ras(&root, "ras/summary-ue-1.txt");
    let uncorrected = diagnose("machine-checks", &root);
    assert_eq!(uncorrected.status, DiagnoseStatus::Evacuate);
    assert!(
        problems(&uncorrected)
            .contains(&"uncorrected-errors: CPU_SrcID#0_MC#0_Chan#0_DIMM#0".to_owned())
    );
    age_state(&root, "machine-checks", 25 * 3600);
    assert_eq!(diagnose("machine-checks", &root).status, DiagnoseStatus::Ok);

    let root = FakeRoot::new();
    ras(&root, "ras/summary-mce-4.txt");
    assert_eq!(diagnose("machine-checks", &root).status, DiagnoseStatus::Ok);
    ras(&root, "ras/summary-mce-30.txt");
    let mce = diagnose("machine-checks", &root);
    assert_eq!(mce.status, DiagnoseStatus::Evacuate);
    assert_eq!(
        problems(&mce),
        vec!["mce-errors: Corrected error, no action required.".to_owned()]
    );

    ras(&root, "ras/summary-garbage.txt");
    diagnose_unknown("machine-checks", &root, "unexpected line");
    root.tool(
        "/usr/sbin/ras-mc-ctl",
        &[(
            "--summary",
            Reply::Fail(1, "DBI connect failed: unable to open database file"),
        )],
    );
    diagnose_unknown("machine-checks", &root, "unable to open database file");
}

fn edac(root: &FakeRoot, dimms: &[(&str, &str, u64, u64)]) {
    for (dimm, label, ce, ue) in dimms {
        let base = format!("/sys/devices/system/edac/mc/mc0/{dimm}");
        root.write(&format!("{base}/dimm_label"), &format!("{label}\n"));
        root.write(&format!("{base}/dimm_ce_count"), &format!("{ce}\n"));
        root.write(&format!("{base}/dimm_ue_count"), &format!("{ue}\n"));
    }
}

#[test]
fn machine_checks_falls_back_to_edac() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    edac(
        &root,
        &[
            ("dimm0", "CPU0_DIMM_A1", 100, 0),
            ("dimm1", "CPU0_DIMM_B1", 0, 0),
        ],
    );
    let first = diagnose("machine-checks", &root);
    assert_eq!(first.status, DiagnoseStatus::Ok, "{first:?}");
    assert_eq!(first.details["source"], "edac");
    edac(
        &root,
        &[
            ("dimm0", "CPU0_DIMM_A1", 130, 0),
            ("dimm1", "CPU0_DIMM_B1", 0, 0),
        ],
    );
    let flood = diagnose("machine-checks", &root);
    assert_eq!(
        problems(&flood),
        vec!["corrected-errors: CPU0_DIMM_A1".to_owned()]
    );
    // A reboot resets EDAC's counts: a new history, not a negative rate.
    edac(
        &root,
        &[
            ("dimm0", "CPU0_DIMM_A1", 0, 0),
            ("dimm1", "CPU0_DIMM_B1", 0, 0),
        ],
    );
    assert_eq!(diagnose("machine-checks", &root).status, DiagnoseStatus::Ok);
    edac(
        &root,
        &[
            ("dimm0", "CPU0_DIMM_A1", 0, 0),
            ("dimm1", "CPU0_DIMM_B1", 0, 1),
        ],
    );
    assert_eq!(
        problems(&diagnose("machine-checks", &root)),
        vec!["uncorrected-errors: CPU0_DIMM_B1".to_owned()]
    );
    root.write("/sys/devices/system/edac/mc/mc0/dimm1/dimm_ue_count", "x\n");
    diagnose_unknown("machine-checks", &root, "not a count");
    // A corrupt state file starts afresh instead of failing forever.
    root.write("/sys/devices/system/edac/mc/mc0/dimm1/dimm_ue_count", "1\n");
    root.write("/var/lib/nodecare/script-state/machine-checks.json", "{{{");
    assert_eq!(diagnose("machine-checks", &root).status, DiagnoseStatus::Ok);
}

// --- nic-health ----------------------------------------------------------------------------

fn nic(root: &FakeRoot, name: &str, up: bool, carrier: bool, changes: u64) {
    let base = format!("/sys/class/net/{name}");
    root.write(&format!("{base}/device/vendor"), "0x15b3\n");
    root.write(
        &format!("{base}/flags"),
        if up { "0x1003\n" } else { "0x1002\n" },
    );
    root.write(
        &format!("{base}/carrier"),
        if carrier { "1\n" } else { "0\n" },
    );
    root.write(&format!("{base}/carrier_changes"), &format!("{changes}\n"));
}

fn ethtool(root: &FakeRoot, name: &str, stats: &'static str, settings: &'static str) {
    root.tool(
        "/usr/sbin/ethtool",
        &[
            (&format!("-S {name}"), Reply::Canned(stats)),
            (name, Reply::Canned(settings)),
        ],
    );
}

#[test]
fn nic_health_on_ethtool_output_captured_from_a_virtio_nic() {
    if !have_python() {
        return;
    }
    // Captured with ethtool 6.1 on a virtio NIC: no error counters, "Speed: Unknown!".
    let root = FakeRoot::new();
    nic(&root, "eth0", true, true, 2);
    ethtool(
        &root,
        "eth0",
        "ethtool/stats-virtio-captured.txt",
        "ethtool/settings-virtio-captured.txt",
    );
    let verdict = diagnose("nic-health", &root);
    assert_eq!(verdict.status, DiagnoseStatus::Ok, "{verdict:?}");
    assert_eq!(
        verdict.details["measured"]["eth0"]["speed_mbps"],
        Value::Null
    );
}

#[test]
fn nic_health_on_canned_sysfs_and_ethtool() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    nic(&root, "eno1", true, true, 2);
    nic(&root, "eno2", false, false, 0); // unused port: ignored
    root.write("/sys/class/net/lo/flags", "0x9\n"); // no device: ignored
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-clean.txt",
        "ethtool/settings-25g.txt",
    );
    let healthy = diagnose("nic-health", &root);
    assert_eq!(healthy.status, DiagnoseStatus::Ok, "{healthy:?}");
    assert_eq!(healthy.details["measured"]["eno1"]["speed_mbps"], 25000);
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-clean-later.txt",
        "ethtool/settings-25g.txt",
    );
    assert_eq!(
        fingerprint(&healthy),
        fingerprint(&diagnose("nic-health", &root))
    );

    // Error counters grow by hundreds.
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-errors.txt",
        "ethtool/settings-25g.txt",
    );
    let errors = diagnose("nic-health", &root);
    assert_eq!(errors.status, DiagnoseStatus::LiveRepair);
    assert_eq!(errors.command.as_deref(), Some("restart-nic"));
    assert_eq!(errors.details["nics"], json!({"eno1": ["errors"]}));

    // Carrier flaps.
    let root = FakeRoot::new();
    nic(&root, "eno1", true, true, 2);
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-clean.txt",
        "ethtool/settings-25g.txt",
    );
    diagnose("nic-health", &root);
    nic(&root, "eno1", true, true, 40);
    assert_eq!(
        diagnose("nic-health", &root).details["nics"],
        json!({"eno1": ["flapping"]})
    );
    age_state(&root, "nic-health", 2 * 3600);
    assert_eq!(diagnose("nic-health", &root).status, DiagnoseStatus::Ok);

    // No carrier on an interface that is up; a link slower than both ends advertise.
    let root = FakeRoot::new();
    nic(&root, "eno1", true, false, 3);
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-clean.txt",
        "ethtool/settings-25g.txt",
    );
    assert_eq!(
        diagnose("nic-health", &root).details["nics"],
        json!({"eno1": ["no-carrier"]})
    );
    nic(&root, "eno1", true, true, 4);
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-clean.txt",
        "ethtool/settings-10g-slow.txt",
    );
    assert_eq!(
        diagnose("nic-health", &root).details["nics"],
        json!({"eno1": ["slow"]})
    );
    // 10G because the switch port only offers 10G: not the NIC's problem.
    ethtool(
        &root,
        "eno1",
        "ethtool/stats-clean.txt",
        "ethtool/settings-10g-partner.txt",
    );
    assert_eq!(diagnose("nic-health", &root).status, DiagnoseStatus::Ok);

    ethtool(
        &root,
        "eno1",
        "ethtool/stats-garbage.txt",
        "ethtool/settings-25g.txt",
    );
    diagnose_unknown("nic-health", &root, "unexpected line");
    root.tool(
        "/usr/sbin/ethtool",
        &[("-S eno1", Reply::Fail(94, "no stats available"))],
    );
    diagnose_unknown("nic-health", &root, "no stats available");
}

// --- filesystems ---------------------------------------------------------------------------

fn journal(root: &FakeRoot, log: &'static str) {
    root.tool(
        "/usr/bin/journalctl",
        &[("-k --since=-1h -q -o cat --no-pager", Reply::Canned(log))],
    );
}

#[test]
fn filesystems_on_canned_mounts_and_kernel_log() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    root.canned("/proc/mounts", "mounts/proc-mounts.txt");
    root.canned("/etc/fstab", "mounts/fstab.txt");
    journal(&root, "kernel-log/quiet.txt");
    let healthy = diagnose("filesystems", &root);
    // /srv/archive disk is read-only by fstab, sr0 errors are a CD drive without a disc.
    assert_eq!(healthy.status, DiagnoseStatus::Ok, "{healthy:?}");

    root.canned("/proc/mounts", "mounts/proc-mounts-ro.txt");
    let read_only = diagnose("filesystems", &root);
    assert_eq!(read_only.status, DiagnoseStatus::Evacuate);
    assert_eq!(read_only.details["read_only"], json!(["/srv/ganeti"]));

    root.canned("/proc/mounts", "mounts/proc-mounts.txt");
    journal(&root, "kernel-log/io-errors.txt");
    let io = diagnose("filesystems", &root);
    assert_eq!(io.status, DiagnoseStatus::Evacuate);
    assert_eq!(io.details["io_errors"], json!(["sdc", "sdc1"]));
    journal(&root, "kernel-log/io-errors-later.txt");
    assert_eq!(
        fingerprint(&io),
        fingerprint(&diagnose("filesystems", &root))
    );

    journal(&root, "kernel-log/ext4-error.txt");
    assert_eq!(
        diagnose("filesystems", &root).details["io_errors"],
        json!(["dm-3"])
    );

    root.tool(
        "/usr/bin/journalctl",
        &[(
            "-k --since=-1h -q -o cat --no-pager",
            Reply::Fail(1, "Failed to open journal"),
        )],
    );
    diagnose_unknown("filesystems", &root, "Failed to open journal");
    journal(&root, "kernel-log/quiet.txt");
    root.canned("/proc/mounts", "mounts/proc-mounts-garbage.txt");
    diagnose_unknown("filesystems", &root, "unexpected line");
}

// --- gpu-health ----------------------------------------------------------------------------

fn gpu(root: &FakeRoot, xml: &'static str, log: &'static str) {
    root.tool("/usr/bin/nvidia-smi", &[("-q -x", Reply::Canned(xml))]);
    journal(root, log);
}

#[test]
fn gpu_health_on_canned_nvidia_smi() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    gpu(&root, "nvidia-smi/healthy.xml", "kernel-log/xid-13.txt");
    let healthy = diagnose("gpu-health", &root);
    // Xid 13 is an application's fault, not the GPU's.
    assert_eq!(healthy.status, DiagnoseStatus::Ok, "{healthy:?}");
    assert_eq!(healthy.details["xids"], json!({"0000:3b:00": [13]}));
    gpu(
        &root,
        "nvidia-smi/healthy-warmer.xml",
        "kernel-log/empty.txt",
    );
    assert_eq!(
        fingerprint(&healthy),
        fingerprint(&diagnose("gpu-health", &root))
    );

    for (xml, log, problem) in [
        (
            "nvidia-smi/ecc-uncorrectable.xml",
            "kernel-log/empty.txt",
            "ecc-uncorrectable: 00000000:3B:00.0",
        ),
        (
            "nvidia-smi/retirement-pending.xml",
            "kernel-log/empty.txt",
            "retirement-pending: 00000000:3B:00.0",
        ),
        (
            "nvidia-smi/remap-pending.xml",
            "kernel-log/empty.txt",
            "remap-pending: 00000000:3B:00.0",
        ),
        (
            "nvidia-smi/remap-failed.xml",
            "kernel-log/empty.txt",
            "remap-failed: 00000000:3B:00.0",
        ),
        (
            "nvidia-smi/healthy.xml",
            "kernel-log/xid-79.txt",
            "xid-79: 00000000:3B:00.0",
        ),
    ] {
        let root = FakeRoot::new();
        gpu(&root, xml, log);
        let verdict = diagnose("gpu-health", &root);
        assert_eq!(verdict.status, DiagnoseStatus::Evacuate, "{xml} {log}");
        assert_eq!(problems(&verdict), vec![problem.to_owned()], "{xml} {log}");
    }

    gpu(&root, "nvidia-smi/none.xml", "kernel-log/empty.txt");
    assert_eq!(diagnose("gpu-health", &root).status, DiagnoseStatus::Ok);
    gpu(&root, "nvidia-smi/truncated.xml", "kernel-log/empty.txt");
    diagnose_unknown("gpu-health", &root, "not XML");
    root.tool(
        "/usr/bin/nvidia-smi",
        &[(
            "-q -x",
            Reply::Fail(
                15,
                "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
            ),
        )],
    );
    diagnose_unknown("gpu-health", &root, "Unable to determine the device handle");
}

// --- drbd-standalone -----------------------------------------------------------------------

#[test]
fn drbd_standalone_counts_only_what_persists() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    assert_eq!(diagnose("drbd-standalone", &root).details["drbd"], "absent");
    root.canned("/proc/drbd", "drbd/proc-84-connected.txt");
    let connected = diagnose("drbd-standalone", &root);
    assert_eq!(connected.status, DiagnoseStatus::Ok);
    assert_eq!(connected.details["resources"], 2);

    root.canned("/proc/drbd", "drbd/proc-84-standalone.txt");
    let fresh = diagnose("drbd-standalone", &root);
    assert_eq!(fresh.status, DiagnoseStatus::Ok, "{fresh:?}");
    assert!(fresh.details["pending_seconds"].get("drbd1").is_some());
    age_state(&root, "drbd-standalone", 20 * 60);
    let persisting = diagnose("drbd-standalone", &root);
    assert_eq!(persisting.status, DiagnoseStatus::Evacuate);
    assert_eq!(persisting.details["standalone"], json!(["drbd1"]));
    assert_eq!(
        fingerprint(&persisting),
        fingerprint(&diagnose("drbd-standalone", &root))
    );
    // Reconnected: forgotten, and a new StandAlone starts its clock again.
    root.canned("/proc/drbd", "drbd/proc-84-connected.txt");
    assert_eq!(
        diagnose("drbd-standalone", &root).status,
        DiagnoseStatus::Ok
    );
    root.canned("/proc/drbd", "drbd/proc-84-standalone.txt");
    assert_eq!(
        diagnose("drbd-standalone", &root).status,
        DiagnoseStatus::Ok
    );

    // DRBD 9 through drbdadm.
    let root = FakeRoot::new();
    root.canned("/proc/drbd", "drbd/proc-9.txt");
    root.tool(
        "/usr/sbin/drbdadm",
        &[(
            "status",
            Reply::Canned("drbd/drbdadm-status-standalone.txt"),
        )],
    );
    assert_eq!(
        diagnose("drbd-standalone", &root).details["pending_seconds"]
            .as_object()
            .unwrap()
            .len(),
        1
    );
    age_state(&root, "drbd-standalone", 3600);
    assert_eq!(
        diagnose("drbd-standalone", &root).details["standalone"],
        json!(["res1"])
    );

    root.canned("/proc/drbd", "drbd/proc-garbage.txt");
    diagnose_unknown("drbd-standalone", &root, "unexpected line");
}

// --- memory-pressure -----------------------------------------------------------------------

#[test]
fn memory_pressure_on_canned_psi() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    root.write(
        "/proc/pressure/memory",
        "some avg10=0.31 avg60=0.12 avg300=0.05 total=8812331\nfull avg10=0.10 avg60=0.04 avg300=0.01 total=3312001\n",
    );
    let calm = diagnose("memory-pressure", &root);
    assert_eq!(calm.status, DiagnoseStatus::Ok);
    root.write(
        "/proc/pressure/memory",
        "some avg10=0.22 avg60=0.19 avg300=0.07 total=8912331\nfull avg10=0.00 avg60=0.02 avg300=0.03 total=3322001\n",
    );
    assert_eq!(
        fingerprint(&calm),
        fingerprint(&diagnose("memory-pressure", &root))
    );
    root.write(
        "/proc/pressure/memory",
        "some avg10=61.20 avg60=58.02 avg300=40.11 total=98812331\nfull avg10=31.00 avg60=28.40 avg300=17.95 total=53312001\n",
    );
    let pressed = diagnose("memory-pressure", &root);
    assert_eq!(pressed.status, DiagnoseStatus::LiveRepair);
    assert_eq!(pressed.command.as_deref(), Some("drop-caches"));
    assert_eq!(pressed.details["drop_caches"], "pagecache");
    root.write("/proc/pressure/memory", "pressure: yes\n");
    diagnose_unknown("memory-pressure", &root, "unexpected line");
}

// --- a hanging tool, under the agent's runner ----------------------------------------------

/// Runs `name` through the agent's whitelist and runner with a short time limit, through a
/// root-owned wrapper that passes the test root (the agent itself never passes arguments).
async fn run_in_agent_sandbox(
    name: &str,
    root: &FakeRoot,
    timeout: Duration,
) -> Result<nodecare_collectors::runner::ExecOutput, nodecare_collectors::runner::ExecError> {
    let fixture = support::fixture();
    support::script(
        &fixture.diagnose,
        name,
        &format!(
            "#!/bin/sh\nexec '{}' --test-root '{}'\n",
            example("diagnose", name).display(),
            root.path().display()
        ),
        0o755,
    );
    let whitelist = nodecare_collectors::whitelist::Whitelist::new(&fixture.diagnose);
    let executable = whitelist.open(name).unwrap();
    let limits = nodecare_collectors::runner::ExecLimits {
        timeout,
        ..Default::default()
    };
    nodecare_collectors::runner::run(&executable, None, &limits).await
}

/// A script, its tool, the arguments on which the tool hangs, and what else the script needs.
type HangCase = (&'static str, &'static str, &'static str, fn(&FakeRoot));

#[tokio::test]
async fn a_hanging_tool_ends_in_the_agents_timeout() {
    let Some(_serial) = support::root_test().await else {
        return;
    };
    if !have_python() {
        return;
    }
    // Each script with a tool, its tool never answering (after what else the script needs).
    let cases: [HangCase; 8] = [
        ("ipmi-health", "/usr/bin/ipmitool", "sdr elist", |_| {}),
        (
            "software-raid",
            "/usr/sbin/mdadm",
            "--detail /dev/md0",
            |root| {
                root.canned("/proc/mdstat", "mdstat/healthy.txt");
            },
        ),
        ("nvme-health", "/usr/sbin/nvme", "list -o json", |_| {}),
        (
            "machine-checks",
            "/usr/sbin/ras-mc-ctl",
            "--summary",
            |_| {},
        ),
        (
            "filesystems",
            "/usr/bin/journalctl",
            "-k --since=-1h -q -o cat --no-pager",
            |root| root.canned("/proc/mounts", "mounts/proc-mounts.txt"),
        ),
        ("gpu-health", "/usr/bin/nvidia-smi", "-q -x", |root| {
            journal(root, "kernel-log/empty.txt");
        }),
        ("drbd-standalone", "/usr/sbin/drbdadm", "status", |root| {
            root.canned("/proc/drbd", "drbd/proc-9.txt");
        }),
        ("nic-health", "/usr/sbin/ethtool", "-S eno1", |root| {
            nic(root, "eno1", true, true, 0);
        }),
    ];
    for (name, tool, arguments, prepare) in cases {
        let root = FakeRoot::new();
        prepare(&root);
        root.tool(tool, &[(arguments, Reply::Hang)]);
        let started = Instant::now();
        let result = run_in_agent_sandbox(name, &root, Duration::from_secs(1)).await;
        assert!(started.elapsed() < Duration::from_secs(5), "{name}");
        let verdict = nodecare_collectors::diagnose::verdict_of(&result);
        assert_eq!(verdict.status, DiagnoseStatus::Unknown, "{name}");
        assert!(
            verdict
                .reason
                .as_deref()
                .unwrap_or("")
                .contains("timed out"),
            "{name}: {verdict:?}"
        );
    }
    // And a healthy run through the same sandbox gives its verdict.
    let root = FakeRoot::new();
    ipmi(&root, "ipmi/sdr-healthy.txt", "ipmi/sel-empty.txt");
    let result = run_in_agent_sandbox("ipmi-health", &root, Duration::from_secs(20)).await;
    assert_eq!(
        nodecare_collectors::diagnose::verdict_of(&result).status,
        DiagnoseStatus::Ok
    );
}

// --- repair commands -----------------------------------------------------------------------

fn repair(name: &str, root: &FakeRoot, verdict: &Value) -> Outcome {
    run("repair", name, root, &serde_json::to_vec(verdict).unwrap())
}

#[test]
fn bmc_cold_reset_resets_only_a_bmc_that_reads_nothing() {
    if !have_python() {
        return;
    }
    let verdict = json!({"status": "live-repair", "command": "bmc-cold-reset",
        "details": {"ipmi-health": {"status": "live-repair", "details": {"bmc": "not-reading"}}}});
    // Healthy BMC: nothing to do.
    let root = FakeRoot::new();
    ipmi(&root, "ipmi/sdr-healthy.txt", "ipmi/sel-empty.txt");
    let outcome = repair("bmc-cold-reset", &root, &verdict);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(outcome.stdout.contains("nothing to reset"));
    assert!(!root.calls("/usr/bin/ipmitool").contains("reset"));

    // Hung BMC: reset, and it reads again.
    let root = FakeRoot::new();
    let healthy = data("ipmi/sdr-healthy.txt");
    let hung = data("ipmi/sdr-not-reading.txt");
    root.tool(
        "/usr/bin/ipmitool",
        &[
            (
                "sdr elist",
                Reply::Shell(format!(
                    "if [ -e \"$ROOT/reset\" ]; then cat '{}'; else cat '{}'; fi",
                    healthy.display(),
                    hung.display()
                )),
            ),
            (
                "mc reset cold",
                Reply::Shell("touch \"$ROOT/reset\"; echo 'Sent cold reset command to MC'".into()),
            ),
        ],
    );
    let outcome = repair("bmc-cold-reset", &root, &verdict);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.stdout.contains("reads its sensors again"),
        "{}",
        outcome.stdout
    );
    // Run again: idempotent, no second reset.
    let again = repair("bmc-cold-reset", &root, &verdict);
    assert_eq!(again.code, 0);
    assert_eq!(
        root.calls("/usr/bin/ipmitool")
            .matches("mc reset cold")
            .count(),
        1
    );

    // The BMC never comes back: an honest failure.
    let root = FakeRoot::new();
    root.tool(
        "/usr/bin/ipmitool",
        &[
            ("sdr elist", Reply::Canned("ipmi/sdr-not-reading.txt")),
            (
                "mc reset cold",
                Reply::Shell("echo 'Sent cold reset command to MC'".into()),
            ),
        ],
    );
    let outcome = repair("bmc-cold-reset", &root, &verdict);
    assert_eq!(outcome.code, 1);
    assert!(outcome.stderr.contains("reads no sensor"));

    // Another script's verdict is not a reason to reset the BMC.
    let outcome = repair(
        "bmc-cold-reset",
        &root,
        &json!({"status": "live-repair", "details": {"nics": ["eno1"]}}),
    );
    assert_eq!(outcome.code, 2);
    assert_eq!(run("repair", "bmc-cold-reset", &root, b"[1, 2").code, 2);
}

fn mdstat_after_readd() -> String {
    let healthy = data("mdstat/healthy.txt");
    format!("cp '{}' \"$ROOT/proc/mdstat\"", healthy.display())
}

#[test]
fn raid_readd_member_puts_a_failed_member_back() {
    if !have_python() {
        return;
    }
    let verdict = json!({"status": "live-repair", "command": "raid-readd-member",
        "details": {"raid_failed_members": {"md1": ["sdc1"]}}});
    let root = FakeRoot::new();
    root.canned("/proc/mdstat", "mdstat/failed-member.txt");
    root.tool(
        "/usr/sbin/mdadm",
        &[
            (
                "/dev/md1 --remove /dev/sdc1",
                Reply::Shell("echo 'mdadm: hot removed /dev/sdc1 from /dev/md1'".into()),
            ),
            (
                "/dev/md1 --re-add /dev/sdc1",
                Reply::Shell(format!(
                    "{}; echo 'mdadm: re-added /dev/sdc1'",
                    mdstat_after_readd()
                )),
            ),
        ],
    );
    let outcome = repair("raid-readd-member", &root, &verdict);
    assert_eq!(outcome.code, 0, "{} {}", outcome.stdout, outcome.stderr);
    assert!(outcome.stdout.contains("md1: sdc1 re-added"));
    // Again: the member is active, mdadm is not called.
    let calls = root.calls("/usr/sbin/mdadm");
    let again = repair("raid-readd-member", &root, &verdict);
    assert_eq!(again.code, 0);
    assert!(again.stdout.contains("is active, left alone"));
    assert_eq!(root.calls("/usr/sbin/mdadm"), calls);

    // re-add refused (no bitmap): add back; add fails: an honest failure.
    let root = FakeRoot::new();
    root.canned("/proc/mdstat", "mdstat/failed-member.txt");
    root.tool(
        "/usr/sbin/mdadm",
        &[
            ("/dev/md1 --remove /dev/sdc1", Reply::Shell("true".into())),
            (
                "/dev/md1 --re-add /dev/sdc1",
                Reply::Fail(
                    1,
                    "mdadm: --re-add for /dev/sdc1 to /dev/md1 is not possible",
                ),
            ),
            (
                "/dev/md1 --add /dev/sdc1",
                Reply::Fail(
                    1,
                    "mdadm: add new device failed for /dev/sdc1 as 4: Invalid argument",
                ),
            ),
        ],
    );
    let outcome = repair("raid-readd-member", &root, &verdict);
    assert_eq!(outcome.code, 1);
    assert!(
        outcome.stderr.contains("adding sdc1 failed"),
        "{}",
        outcome.stderr
    );

    for bad in [
        json!({"status": "live-repair", "details": {}}),
        json!({"status": "live-repair", "details": {"raid_failed_members": {"md1": ["../sda"]}}}),
        json!({"status": "live-repair", "details": {"raid_failed_members": {"/dev/md1": ["sdc1"]}}}),
        json!({"status": "live-repair", "details": {"raid_failed_members": ["md1"]}}),
    ] {
        assert_eq!(repair("raid-readd-member", &root, &bad).code, 2, "{bad}");
    }
}

#[test]
fn restart_nic_restarts_and_waits_for_carrier() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    nic(&root, "eno1", true, false, 3);
    root.tool(
        "/usr/sbin/ip",
        &[
            (
                "link set dev eno1 down",
                Reply::Shell("echo 0 > \"$ROOT/sys/class/net/eno1/carrier\"".into()),
            ),
            (
                "link set dev eno1 up",
                Reply::Shell("echo 1 > \"$ROOT/sys/class/net/eno1/carrier\"".into()),
            ),
        ],
    );
    let verdict = json!({"status": "live-repair", "command": "restart-nic",
        "details": {"nics": {"eno1": ["no-carrier"]}}});
    let outcome = repair("restart-nic", &root, &verdict);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(outcome.stdout.contains("eno1: restarted, carrier up"));
    // The carrier is back: a second run leaves it alone.
    let again = repair("restart-nic", &root, &verdict);
    assert_eq!(again.code, 0);
    assert!(again.stdout.contains("left alone"));
    assert_eq!(root.calls("/usr/sbin/ip").lines().count(), 2);

    // Errors need a renegotiation even with the carrier up; the link does not come back.
    root.tool(
        "/usr/sbin/ip",
        &[
            (
                "link set dev eno1 down",
                Reply::Shell("echo 0 > \"$ROOT/sys/class/net/eno1/carrier\"".into()),
            ),
            ("link set dev eno1 up", Reply::Shell("true".into())),
        ],
    );
    let outcome = repair(
        "restart-nic",
        &root,
        &json!({"details": {"nics": {"eno1": ["errors"]}}}),
    );
    assert_eq!(outcome.code, 1);
    assert!(outcome.stderr.contains("no carrier"));

    for bad in [
        json!({"details": {"nics": {"eth9": ["no-carrier"]}}}),
        json!({"details": {"nics": {"eno1; reboot": []}}}),
        json!({"details": {"nics": "eno1"}}),
        json!({"details": {}}),
    ] {
        assert_eq!(repair("restart-nic", &root, &bad).code, 2, "{bad}");
    }
}

#[test]
fn drop_caches_writes_the_requested_level() {
    if !have_python() {
        return;
    }
    let root = FakeRoot::new();
    root.write("/proc/sys/vm/drop_caches", "");
    root.write(
        "/proc/meminfo",
        "MemTotal: 263841212 kB\nMemAvailable: 1203311 kB\n",
    );
    let verdict = json!({"status": "live-repair", "command": "drop-caches",
        "details": {"memory-pressure": {"details": {"drop_caches": "pagecache"}}}});
    let outcome = repair("drop-caches", &root, &verdict);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(
        std::fs::read_to_string(root.at("/proc/sys/vm/drop_caches")).unwrap(),
        "1\n"
    );
    assert!(outcome.stdout.contains("MemAvailable"));
    for bad in [
        json!({"details": {"drop_caches": "everything"}}),
        json!({"details": {"drop_caches": 3}}),
        json!({"details": {}}),
    ] {
        assert_eq!(repair("drop-caches", &root, &bad).code, 2, "{bad}");
    }
    // The kernel refuses: an honest failure.
    root.remove("/proc/sys");
    assert_eq!(repair("drop-caches", &root, &verdict).code, 1);
}
