//! `nodecare-agent --check-config`: a cluster key that others could have written or can read
//! fails the check (exit 2) as the daemon refuses it; a missing key is a node not set up yet
//! (a warning, exit 0).

#![allow(clippy::unwrap_used, reason = "test helpers")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test starts the agent binary itself"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

fn check(dir: &std::path::Path, key: &std::path::Path) -> (i32, String, String) {
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nnode_name = \"node1.example.com\"\nhmac_key = {key:?}\n\
             state_dir = {:?}\n",
            dir.join("state"),
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nodecare-agent"))
        .arg("--config")
        .arg(&config)
        .arg("--check-config")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_insecure_key_fails_the_check_and_a_missing_one_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("hmac.key");
    std::fs::write(&key, "k\n").unwrap();
    for mode in [0o666, 0o644] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let (code, stdout, stderr) = check(dir.path(), &key);
        assert_eq!(code, 2, "{mode:o}: {stdout}{stderr}");
        assert!(stderr.contains("refusing secret file"), "{stderr}");
        assert!(!stdout.contains("configuration is valid"), "{stdout}");
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, stdout, stderr) = check(dir.path(), &key);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("configuration is valid"), "{stdout}");
    let (code, stdout, stderr) = check(dir.path(), &dir.path().join("absent.key"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("warning"), "{stderr}");
}
