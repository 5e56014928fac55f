//! The example diagnose scripts in `whitelist-examples/diagnose/`, run on canned tool output:
//! each prints a valid verdict, and the verdict's fingerprint ignores volatile fields.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the example scripts directly"
)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nodecare_protocol::{DiagnoseStatus, NodeVerdict, ScriptVerdict};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../whitelist-examples/diagnose")
        .join(name)
}

/// Runs an example with only `PATH`, as the agent would, on a fake root given with the
/// test-only `--test-root DIR` option.
fn run(name: &str, root: Option<&Path>) -> ScriptVerdict {
    let mut command = std::process::Command::new(example(name));
    command
        .env_clear()
        .env("PATH", nodecare_collectors::runner::FIXED_PATH)
        .current_dir("/");
    if let Some(root) = root {
        command.arg("--test-root").arg(root);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{name}: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    ScriptVerdict::parse(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "{name}: {error}: {:?}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn fingerprint(name: &str, verdict: &ScriptVerdict) -> String {
    NodeVerdict::merge(BTreeMap::from([(name.to_owned(), verdict.clone())]))
        .unwrap()
        .fingerprint
}

fn write_executable(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn examples_have_valid_names_and_modes() {
    for name in ["smart-disks", "ecc-memory", "always-ok"] {
        assert!(nodecare_collectors::whitelist::is_valid_name(name));
        let mode = std::fs::metadata(example(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777 & !0o755, 0, "{name}: {mode:o}");
        assert_ne!(mode & 0o100, 0, "{name} not executable");
    }
    assert_eq!(run("always-ok", None).status, DiagnoseStatus::Ok);
}

/// A fake `<root>/usr/sbin/smartctl`: `--scan` lists sda and sdb; `-H DEV` fails for the
/// devices in FAILING.
fn fake_smartctl(root: &Path, failing: &str, temperature: u32) {
    std::fs::create_dir_all(root.join("usr/sbin")).unwrap();
    let path = root.join("usr/sbin/smartctl");
    write_executable(
        &path,
        &format!(
            r#"#!/bin/sh
case "$1" in
--scan)
    echo "/dev/sda -d scsi # /dev/sda, SCSI device"
    echo "/dev/sdb -d sat # /dev/sdb [SAT], ATA device"
    ;;
-H)
    echo "smartctl 7.3 2022-02-28 r5338 [x86_64-linux] (local build)"
    echo "Current Drive Temperature: {temperature} C"
    case " {failing} " in
    *" $2 "*)
        echo "SMART overall-health self-assessment test result: FAILED!"
        exit 8
        ;;
    esac
    echo "SMART overall-health self-assessment test result: PASSED"
    ;;
esac
"#
        ),
    );
}

#[test]
fn smart_disks_on_canned_smartctl_output() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = {
        fake_smartctl(dir.path(), "", 30);
        run("smart-disks", Some(dir.path()))
    };
    assert_eq!(healthy.status, DiagnoseStatus::Ok);
    assert_eq!(
        healthy.details["checked"],
        serde_json::json!(["/dev/sda", "/dev/sdb"])
    );

    let failing = {
        fake_smartctl(dir.path(), "/dev/sdb", 30);
        run("smart-disks", Some(dir.path()))
    };
    assert_eq!(failing.status, DiagnoseStatus::Evacuate);
    assert_eq!(failing.details["failing"], serde_json::json!(["/dev/sdb"]));
    // Same failure, other volatile output: same verdict, stable output.
    let again = {
        fake_smartctl(dir.path(), "/dev/sdb", 45);
        run("smart-disks", Some(dir.path()))
    };
    assert_eq!(
        fingerprint("smart-disks", &failing),
        fingerprint("smart-disks", &again)
    );
    let other = {
        fake_smartctl(dir.path(), "/dev/sda", 30);
        run("smart-disks", Some(dir.path()))
    };
    assert_ne!(
        fingerprint("smart-disks", &failing),
        fingerprint("smart-disks", &other)
    );
}

#[test]
fn smart_disks_without_smartctl_fails_visibly() {
    let output = std::process::Command::new(example("smart-disks"))
        .env_clear()
        .env("PATH", nodecare_collectors::runner::FIXED_PATH)
        .arg("--test-root")
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("smartctl not found"));
}

fn sysfs(root: &Path, controllers: &[(&str, u64, u64)]) {
    let mc = root.join("sys/devices/system/edac/mc");
    std::fs::create_dir_all(&mc).unwrap();
    for (name, ue, ce) in controllers {
        let dir = mc.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ue_count"), format!("{ue}\n")).unwrap();
        std::fs::write(dir.join("ce_count"), format!("{ce}\n")).unwrap();
    }
}

#[test]
fn ecc_memory_on_canned_sysfs() {
    let absent = tempfile::tempdir().unwrap();
    let verdict = run("ecc-memory", Some(absent.path()));
    assert_eq!(verdict.status, DiagnoseStatus::Ok);
    assert_eq!(verdict.details["edac"], "absent");

    let clean = tempfile::tempdir().unwrap();
    sysfs(clean.path(), &[("mc0", 0, 3), ("mc1", 0, 0)]);
    let verdict = run("ecc-memory", Some(clean.path()));
    assert_eq!(verdict.status, DiagnoseStatus::Ok);
    assert_eq!(verdict.details["counts"]["mc0"]["ce"], 3);

    let broken = tempfile::tempdir().unwrap();
    sysfs(broken.path(), &[("mc0", 0, 3), ("mc1", 2, 10)]);
    let first = run("ecc-memory", Some(broken.path()));
    assert_eq!(first.status, DiagnoseStatus::Evacuate);
    assert_eq!(first.details["uncorrectable"], serde_json::json!(["mc1"]));
    // Corrected errors keep counting: the verdict's identity does not change.
    sysfs(broken.path(), &[("mc0", 0, 50), ("mc1", 3, 99)]);
    let later = run("ecc-memory", Some(broken.path()));
    assert_eq!(
        fingerprint("ecc-memory", &first),
        fingerprint("ecc-memory", &later)
    );

    let garbage = tempfile::tempdir().unwrap();
    sysfs(garbage.path(), &[("mc0", 0, 0)]);
    std::fs::write(
        garbage
            .path()
            .join("sys/devices/system/edac/mc/mc0/ue_count"),
        "x\n",
    )
    .unwrap();
    let output = std::process::Command::new(example("ecc-memory"))
        .env_clear()
        .env("PATH", nodecare_collectors::runner::FIXED_PATH)
        .arg("--test-root")
        .arg(garbage.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
}
