//! `nodecare-agent replica discard`: sets aside the kept copy of the coordinator's state, so that a
//! copy that cannot be restored no longer blocks takeovers.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare-agent binary"
)]

use std::process::Command;

fn discard(config: &std::path::Path, state: &std::path::Path) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare-agent"))
        .arg("--config")
        .arg(config)
        .arg("--state-dir")
        .arg(state)
        .args(["replica", "discard"])
        .output()
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn discard_removes_the_kept_copy() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(&config, "").unwrap();
    let state = dir.path().join("state");
    let kept = state.join("replica/kept");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    std::fs::write(&kept, b"a frame that does not restore").unwrap();
    let (ok, text) = discard(&config, &state);
    assert!(ok, "{text}");
    assert!(text.contains("discarded the replica"), "{text}");
    assert!(!kept.exists());
    // Nothing kept: still a success, and said so.
    let (ok, text) = discard(&config, &state);
    assert!(ok, "{text}");
    assert!(text.contains("no replica kept"), "{text}");
}
