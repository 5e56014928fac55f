//! `nodecare-agent script check FILE`: one test per class of mistake, each against a golden
//! report (`tests/golden/script-check/*.txt`; the temporary directory reads `<DIR>`). Set
//! `UPDATE_GOLDEN=1` to rewrite the golden files after a deliberate change of wording. Needs
//! root (the check runs scripts as root, from root-owned copies); skips otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare-agent binary"
)]

use std::os::unix::fs::{PermissionsExt, chown, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

fn am_root() -> bool {
    nix::unistd::geteuid().is_root()
}

struct Setup {
    dir: tempfile::TempDir,
    diagnose: PathBuf,
    config: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let diagnose = dir.path().join("node-diagnose-commands");
    std::fs::create_dir(&diagnose).unwrap();
    for path in [dir.path(), diagnose.as_path()] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        chown(path, Some(0), Some(0)).unwrap();
    }
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "").unwrap();
    Setup {
        dir,
        diagnose,
        config,
    }
}

fn script(path: &Path, body: &str, mode: u32, owner: u32) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    chown(path, Some(owner), Some(0)).unwrap();
}

/// Runs `script check` on `file`; returns the exit code and the report with the temporary
/// directory replaced by `<DIR>`.
fn check(setup: &Setup, file: &Path, extra: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare-agent"))
        .arg("--config")
        .arg(&setup.config)
        .arg("--diagnose-dir")
        .arg(&setup.diagnose)
        .args(extra)
        .arg("script")
        .arg("check")
        .arg(file)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let dir = setup.dir.path().display().to_string();
    (
        output.status.code().unwrap_or(-1),
        stdout.replace(&dir, "<DIR>"),
    )
}

fn assert_golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/script-check")
            .join(format!("{name}.txt")),
        actual,
    );
}

/// Checks one diagnose script placed in the diagnose directory as `name`.
fn case(name: &str, body: &str, expected_code: i32, extra: &[&str]) {
    if !am_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let setup = setup();
    let file = setup.diagnose.join(name);
    script(
        &file,
        &body.replace("@DIR@", &setup.dir.path().display().to_string()),
        0o755,
        0,
    );
    let (code, report) = check(&setup, &file, extra);
    assert_eq!(code, expected_code, "{report}");
    assert_golden(name, &report);
}

#[test]
fn a_good_script_passes() {
    case(
        "good",
        "#!/bin/sh\necho '{\"status\":\"evacuate\",\"details\":{\"disk\":\"sdc\"},\"fingerprint\":[\"/details/disk\"]}'\n",
        0,
        &[],
    );
}

#[test]
fn whitelist_problems_owner_mode_name_location() {
    if !am_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let setup = setup();
    let elsewhere = setup.dir.path().join("vendor");
    std::fs::create_dir(&elsewhere).unwrap();
    let file = elsewhere.join("check-disks.sh");
    script(
        &file,
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n",
        0o775,
        65534,
    );
    let (code, report) = check(&setup, &file, &[]);
    assert_eq!(code, 1, "{report}");
    assert_golden("whitelist-problems", &report);
}

#[test]
fn a_symbolic_link_is_refused() {
    if !am_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let setup = setup();
    let target = setup.dir.path().join("real-script");
    script(&target, "#!/bin/sh\necho '{\"status\":\"Ok\"}'\n", 0o755, 0);
    let link = setup.diagnose.join("linked");
    symlink(&target, &link).unwrap();
    let (code, report) = check(&setup, &link, &[]);
    assert_eq!(code, 1, "{report}");
    assert_golden("symlink", &report);
}

#[test]
fn output_that_is_not_json() {
    case("not-json", "#!/bin/sh\necho 'all disks healthy'\n", 1, &[]);
}

#[test]
fn output_with_two_objects() {
    case(
        "two-objects",
        "#!/bin/sh\necho '{\"status\":\"Ok\"}'\necho '{\"disk\":\"sda\"}'\n",
        1,
        &[],
    );
}

#[test]
fn an_unknown_status() {
    case(
        "unknown-status",
        "#!/bin/sh\necho '{\"status\":\"warning\",\"details\":{\"disk\":\"sdc\"}}'\n",
        1,
        &[],
    );
}

#[test]
fn live_repair_without_command() {
    case(
        "no-command",
        "#!/bin/sh\necho '{\"status\":\"live-repair\",\"details\":{\"unit\":\"multipathd.service\"}}'\n",
        1,
        &[],
    );
}

#[test]
fn a_fingerprint_naming_nothing() {
    case(
        "bad-fingerprint",
        "#!/bin/sh\necho '{\"status\":\"Ok\",\"details\":{\"disks\":[]},\"fingerprint\":[\"/details/failing\"]}'\n",
        1,
        &[],
    );
}

#[test]
fn an_unstable_fingerprint() {
    // A temperature that rises by one each run, with no fingerprint: every run a new state.
    case(
        "unstable",
        "#!/bin/sh\nn=$(cat @DIR@/counter 2>/dev/null || echo 40)\necho $((n + 1)) > @DIR@/counter\n\
         printf '{\"status\":\"Ok\",\"details\":{\"disk\":\"sda\",\"temp\":%d}}\\n' \"$n\"\n",
        1,
        &[],
    );
}

#[test]
fn an_unstable_field_left_out_of_the_fingerprint_is_fine() {
    case(
        "stable",
        "#!/bin/sh\nn=$(cat @DIR@/counter 2>/dev/null || echo 40)\necho $((n + 1)) > @DIR@/counter\n\
         printf '{\"status\":\"Ok\",\"details\":{\"disk\":\"sda\",\"temp\":%d},\"fingerprint\":[\"/details/disk\"]}\\n' \"$n\"\n",
        0,
        &[],
    );
}

#[test]
fn a_failing_script() {
    case(
        "failing",
        "#!/bin/sh\necho 'smartctl not found (install smartmontools)' >&2\nexit 1\n",
        1,
        &[],
    );
}

#[test]
fn a_script_past_its_time_limit() {
    case(
        "slow",
        "#!/bin/sh\nsleep 30\necho '{\"status\":\"Ok\"}'\n",
        1,
        &["--diagnose-timeout-secs", "1"],
    );
}

#[test]
fn cannot_check_a_missing_file() {
    if !am_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let setup = setup();
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare-agent"))
        .arg("--config")
        .arg(&setup.config)
        .args(["script", "check"])
        .arg(setup.dir.path().join("absent"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot examine"));
}

#[test]
fn a_link_to_a_secret_or_a_file_others_own_is_not_run() {
    if !am_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let setup = setup();
    // A root-only file of secrets: run by /bin/sh, its lines would come back in the report.
    let secret = setup.dir.path().join("shadow");
    script(&secret, "root-secret-line:$6$hash\n", 0o600, 0);
    let link = setup.diagnose.join("shadow-link");
    symlink(&secret, &link).unwrap();
    let (code, report) = check(&setup, &link, &[]);
    assert_eq!(code, 1, "{report}");
    assert!(!report.contains("root-secret-line"), "{report}");
    assert!(
        report.contains("not run: it is a symbolic link"),
        "{report}"
    );
    // A script another user can change is not run as root either.
    let theirs = setup.diagnose.join("theirs");
    let marker = setup.dir.path().join("ran");
    script(
        &theirs,
        &format!(
            "#!/bin/sh\ntouch {}\necho '{{\"status\":\"Ok\"}}'\n",
            marker.display()
        ),
        0o755,
        65534,
    );
    let (code, report) = check(&setup, &theirs, &[]);
    assert_eq!(code, 1, "{report}");
    assert!(!marker.exists(), "{report}");
    assert!(report.contains("not run: it runs as root"), "{report}");
    // Nor a file larger than any script.
    let large = setup.diagnose.join("large");
    let mut body = "#!/bin/sh\necho '{\"status\":\"Ok\"}'\nexit 0\n".to_owned();
    body.push_str(&"#".repeat(2 * 1024 * 1024));
    script(&large, &body, 0o755, 0);
    let (code, report) = check(&setup, &large, &[]);
    assert_eq!(code, 1, "{report}");
    assert!(report.contains("more than the 1048576 bytes"), "{report}");
}
