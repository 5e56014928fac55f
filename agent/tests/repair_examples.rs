//! The example repair commands in `whitelist-examples/repair/`, run on a fake root given with
//! their test-only `--test-root DIR` option: a fake `systemctl`, a fake sysfs. Skips when
//! `/usr/bin/python3` is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the example scripts directly"
)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../whitelist-examples/repair")
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

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `script` as the agent would (empty environment but the fixed `PATH`), on the fake `root`.
fn run(script: &Path, input: &[u8], root: &Path) -> Outcome {
    let mut command = Command::new(script);
    command
        .arg("--test-root")
        .arg(root)
        .env_clear()
        .env("PATH", nodecare_collectors::runner::FIXED_PATH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A fake `<dir>/usr/bin/systemctl` keeping each unit's state in `<dir>/state/<unit>` ("failed",
/// "active") and logging every call to `<dir>/calls`. A unit listed in `<dir>/broken` fails to
/// restart.
fn fake_systemctl(dir: &Path) {
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::create_dir_all(dir.join("usr/bin")).unwrap();
    let script = r#"#!/bin/sh
here='@DIR@'
echo "$*" >> "$here/calls"
verb=$1; shift
[ "$1" = --quiet ] && shift
unit=$1
state=$(cat "$here/state/$unit" 2>/dev/null || echo inactive)
case $verb in
is-failed) [ "$state" = failed ] ;;
is-active) [ "$state" = active ] ;;
reset-failed) [ "$state" = failed ] && echo inactive > "$here/state/$unit"; exit 0 ;;
restart)
    if grep -qx "$unit" "$here/broken" 2>/dev/null; then
        echo failed > "$here/state/$unit"; echo "Job for $unit failed." >&2; exit 1
    fi
    echo active > "$here/state/$unit" ;;
*) echo "unexpected verb $verb" >&2; exit 99 ;;
esac
"#
    .replace("@DIR@", &dir.display().to_string());
    let path = dir.join("usr/bin/systemctl");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn set_state(dir: &Path, unit: &str, state: &str) {
    std::fs::write(dir.join("state").join(unit), format!("{state}\n")).unwrap();
}

fn state(dir: &Path, unit: &str) -> String {
    std::fs::read_to_string(dir.join("state").join(unit))
        .unwrap()
        .trim()
        .to_owned()
}

fn input(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

#[test]
fn restart_failed_unit_restarts_only_failed_units() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fake_systemctl(dir.path());
    set_state(dir.path(), "multipathd.service", "failed");
    set_state(dir.path(), "chrony.service", "active");
    // The agent's merged verdict: details by diagnose script.
    let verdict = json!({
        "status": "live-repair",
        "command": "restart-failed-unit",
        "details": {
            "units-health": {"status": "live-repair", "command": "restart-failed-unit",
                             "details": {"units": ["multipathd.service", "chrony.service"]}},
            "smart-disks": {"status": "Ok"}
        },
        "fingerprint": "00"
    });
    let outcome = run(
        &example("restart-failed-unit"),
        &input(&verdict),
        dir.path(),
    );
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(state(dir.path(), "multipathd.service"), "active");
    assert!(
        outcome
            .stdout
            .contains("multipathd.service: restarted, active")
    );
    assert!(
        outcome
            .stdout
            .contains("chrony.service: not failed, left alone")
    );
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    assert!(!calls.contains("restart chrony.service"), "{calls}");
}

#[test]
fn restart_failed_unit_reports_a_failed_restart() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fake_systemctl(dir.path());
    set_state(dir.path(), "ceph-osd@3.service", "failed");
    std::fs::write(dir.path().join("broken"), "ceph-osd@3.service\n").unwrap();
    let verdict = json!({"status": "live-repair", "details": {"unit": "ceph-osd@3.service"}});
    let outcome = run(
        &example("restart-failed-unit"),
        &input(&verdict),
        dir.path(),
    );
    assert_eq!(outcome.code, 1);
    assert!(
        outcome.stderr.contains("restart failed"),
        "{}",
        outcome.stderr
    );
}

#[test]
fn restart_failed_unit_refuses_unusable_input() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    fake_systemctl(dir.path());
    for bad in [
        b"not json".to_vec(),
        input(&json!(["a list"])),
        input(&json!({"status": "live-repair", "details": "free text"})),
        input(&json!({"status": "live-repair", "details": {"unit": "; reboot"}})),
        input(&json!({"status": "live-repair", "details": {"unit": "--force"}})),
    ] {
        let outcome = run(&example("restart-failed-unit"), &bad, dir.path());
        assert_eq!(outcome.code, 2, "{}", String::from_utf8_lossy(&bad));
    }
    assert!(
        !dir.path().join("calls").exists(),
        "systemctl must not be called"
    );
}

fn fake_sysfs(root: &Path, hosts: &[&str]) {
    for host in hosts {
        let dir = root.join("sys/class/scsi_host").join(host);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("scan"), "").unwrap();
    }
}

fn scanned(root: &Path, host: &str) -> String {
    std::fs::read_to_string(root.join("sys/class/scsi_host").join(host).join("scan")).unwrap()
}

#[test]
fn rescan_scsi_host_writes_the_scan_files() {
    if !have_python() {
        return;
    }
    let sysfs = tempfile::tempdir().unwrap();
    fake_sysfs(sysfs.path(), &["host0", "host2", "host3"]);
    let verdict = json!({"status": "live-repair", "details": {"scsi_hosts": ["host2", 3]}});
    let outcome = run(&example("rescan-scsi-host"), &input(&verdict), sysfs.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(scanned(sysfs.path(), "host2"), "- - -\n");
    assert_eq!(scanned(sysfs.path(), "host3"), "- - -\n");
    assert_eq!(scanned(sysfs.path(), "host0"), "");

    let all = json!({"status": "live-repair", "details": {"disks": {"scsi_host": "all"}}});
    let outcome = run(&example("rescan-scsi-host"), &input(&all), sysfs.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(scanned(sysfs.path(), "host0"), "- - -\n");
}

#[test]
fn rescan_scsi_host_fails_on_missing_hosts_and_refuses_bad_names() {
    if !have_python() {
        return;
    }
    let sysfs = tempfile::tempdir().unwrap();
    fake_sysfs(sysfs.path(), &["host0"]);
    let missing = json!({"status": "live-repair", "details": {"scsi_host": "host9"}});
    let outcome = run(&example("rescan-scsi-host"), &input(&missing), sysfs.path());
    assert_eq!(outcome.code, 1);
    assert!(outcome.stderr.contains("host9"), "{}", outcome.stderr);
    for bad in [
        json!({"status": "live-repair", "details": {"scsi_host": "../../etc"}}),
        json!({"status": "live-repair", "details": {}}),
        json!("text"),
    ] {
        let outcome = run(&example("rescan-scsi-host"), &input(&bad), sysfs.path());
        assert_eq!(outcome.code, 2, "{bad}");
    }
    assert_eq!(scanned(sysfs.path(), "host0"), "");
}
