//! The maintenance hooks in `whitelist-examples/repair/` (`reboot`, `apt-upgrade-and-reboot`),
//! run on a fake root given with their test-only `--test-root DIR` option: fake `systemd-run`,
//! `shutdown` and `apt-get` that log their calls. Skips when `/usr/bin/python3` is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the example scripts directly"
)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodecare_protocol::maintenance::{HOOK_CONTEXT_KIND, HOOK_NO_REBOOT_LINE, HookContext};

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
    let mut child = Command::new(script)
        .arg("--test-root")
        .arg(root)
        .env_clear()
        .env("PATH", nodecare_collectors::runner::FIXED_PATH)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    Outcome {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A fake tool `<root>/usr/bin/<name>` that logs `name args` to `<root>/calls` and exits with
/// the number in `<root>/exit-<name>` (0 when absent).
fn fake_tool(root: &Path, name: &str) {
    let bin = root.join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\necho \"{name} $*\" >> '{root}/calls'\nexit $(cat '{root}/exit-{name}' 2>/dev/null || echo 0)\n",
        root = root.display()
    );
    let path = bin.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn calls(root: &Path) -> String {
    std::fs::read_to_string(root.join("calls")).unwrap_or_default()
}

fn context(hook: &str) -> Vec<u8> {
    serde_json::to_vec(&HookContext {
        kind: HOOK_CONTEXT_KIND.into(),
        campaign: "0190c0de-0000-7000-8000-00000000c0de".into(),
        node: "node3.example.com".into(),
        hook: hook.into(),
        group: 1,
        groups_total: 4,
        group_nodes: vec!["node4.example.com".into()],
        reboot_required: Some(true),
        reason: Some("kernel 6.1.0-27".into()),
    })
    .unwrap()
}

/// Inputs that are not a campaign context for the hook: nothing runs, exit status 2.
fn refuses_what_is_not_its_campaign_context(hook: &str) {
    let root = tempfile::tempdir().unwrap();
    for tool in ["systemd-run", "systemctl", "shutdown", "apt-get"] {
        fake_tool(root.path(), tool);
    }
    let verdict = br#"{"status":"live-repair","command":"reboot","details":{"disk":{"status":"live-repair"}}}"#;
    let mut wrong_hook: serde_json::Value = serde_json::from_slice(&context("reboot")).unwrap();
    wrong_hook["hook"] = "other".into();
    let mut bad_group: serde_json::Value = serde_json::from_slice(&context(hook)).unwrap();
    bad_group["group"] = "first".into();
    for input in [
        b"not json".to_vec(),
        verdict.to_vec(),
        b"[]".to_vec(),
        serde_json::to_vec(&wrong_hook).unwrap(),
        serde_json::to_vec(&bad_group).unwrap(),
    ] {
        let outcome = run(&example(hook), &input, root.path());
        assert_eq!(
            outcome.code,
            2,
            "{hook} {}: {}",
            String::from_utf8_lossy(&input),
            outcome.stderr
        );
        assert_eq!(calls(root.path()), "", "{hook}: nothing may run");
    }
}

#[test]
fn reboot_schedules_a_reboot_through_systemd_only_for_a_campaign() {
    if !have_python() {
        return;
    }
    refuses_what_is_not_its_campaign_context("reboot");
    let root = tempfile::tempdir().unwrap();
    fake_tool(root.path(), "systemd-run");
    fake_tool(root.path(), "systemctl");
    fake_tool(root.path(), "shutdown");
    let outcome = run(&example("reboot"), &context("reboot"), root.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.stdout.contains("group 2 of 4"),
        "{}",
        outcome.stdout
    );
    let log = calls(root.path());
    assert!(
        log.starts_with("systemd-run --no-block --on-active=5s --unit=nodecare-maintenance-reboot"),
        "{log}"
    );
    assert!(
        log.trim_end().ends_with("/usr/bin/systemctl reboot"),
        "{log}"
    );
    assert!(!outcome.stdout.contains(HOOK_NO_REBOOT_LINE));
    // systemd-run fails: shutdown -r +1 instead.
    std::fs::remove_file(root.path().join("calls")).unwrap();
    std::fs::write(root.path().join("exit-systemd-run"), "1").unwrap();
    let outcome = run(&example("reboot"), &context("reboot"), root.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        calls(root.path()).contains("shutdown -r +1"),
        "{}",
        calls(root.path())
    );
    // Nothing can reboot: failure, said so.
    std::fs::write(root.path().join("exit-shutdown"), "1").unwrap();
    let outcome = run(&example("reboot"), &context("reboot"), root.path());
    assert_eq!(outcome.code, 1);
    assert!(
        outcome.stderr.contains("shutdown -r failed"),
        "{}",
        outcome.stderr
    );
    let empty = tempfile::tempdir().unwrap();
    let outcome = run(&example("reboot"), &context("reboot"), empty.path());
    assert_eq!(outcome.code, 1);
    assert!(
        outcome.stderr.contains("neither systemd-run nor shutdown"),
        "{}",
        outcome.stderr
    );
}

#[test]
fn apt_upgrade_reboots_only_when_the_upgrade_needs_it() {
    if !have_python() {
        return;
    }
    const HOOK: &str = "apt-upgrade-and-reboot";
    refuses_what_is_not_its_campaign_context(HOOK);
    let root = tempfile::tempdir().unwrap();
    for tool in ["apt-get", "systemd-run", "systemctl"] {
        fake_tool(root.path(), tool);
    }
    // Only an older kernel installed, no sentinel: upgraded, no reboot, said on stdout.
    std::fs::create_dir_all(root.path().join("lib/modules/0.1.0-1-amd64")).unwrap();
    let outcome = run(&example(HOOK), &context(HOOK), root.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.stdout.lines().any(|l| l == HOOK_NO_REBOOT_LINE),
        "{}",
        outcome.stdout
    );
    let log = calls(root.path());
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "apt-get -q update");
    assert!(
        lines[1].starts_with("apt-get -q -y -o Dpkg::Options::=--force-confdef"),
        "{log}"
    );
    assert!(lines[1].ends_with("dist-upgrade"), "{log}");
    assert_eq!(lines.len(), 2, "no reboot: {log}");
    // The sentinel: reboot.
    std::fs::remove_file(root.path().join("calls")).unwrap();
    std::fs::create_dir_all(root.path().join("var/run")).unwrap();
    std::fs::write(root.path().join("var/run/reboot-required"), "").unwrap();
    let outcome = run(&example(HOOK), &context(HOOK), root.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.stdout.contains("reboot-required exists"),
        "{}",
        outcome.stdout
    );
    assert!(!outcome.stdout.contains(HOOK_NO_REBOOT_LINE));
    assert!(
        calls(root.path()).contains("systemd-run --no-block"),
        "{}",
        calls(root.path())
    );
    // A kernel newer than the running one: reboot.
    std::fs::remove_file(root.path().join("calls")).unwrap();
    std::fs::remove_file(root.path().join("var/run/reboot-required")).unwrap();
    std::fs::create_dir_all(root.path().join("lib/modules/999.0.0-1-amd64")).unwrap();
    let outcome = run(&example(HOOK), &context(HOOK), root.path());
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome
            .stdout
            .contains("kernel 999.0.0-1-amd64 is installed"),
        "{}",
        outcome.stdout
    );
    assert!(
        calls(root.path()).contains("systemd-run"),
        "{}",
        calls(root.path())
    );
    // A failed upgrade never reboots.
    std::fs::remove_file(root.path().join("calls")).unwrap();
    std::fs::write(root.path().join("exit-apt-get"), "100").unwrap();
    let outcome = run(&example(HOOK), &context(HOOK), root.path());
    assert_eq!(outcome.code, 1);
    assert!(
        outcome.stderr.contains("apt-get update failed (100)"),
        "{}",
        outcome.stderr
    );
    assert!(
        !calls(root.path()).contains("systemd-run"),
        "{}",
        calls(root.path())
    );
}
