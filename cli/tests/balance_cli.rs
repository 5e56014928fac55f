//! `nodecare balance --dry-run` with the real `hbal` on the Ganeti test suite's data: the text
//! people read, compared with golden files under `tests/balance/` (regenerate with
//! `UPDATE_GOLDEN=1`), and clear errors.
//!
//! The hbal parts need Debian's `ganeti-htools-3.0` and `ganeti-testsuite`; without them they
//! skip with a message, unless `NODECARE_REQUIRE_GANETI=1` (CI), where they fail.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

const HTOOLS_DATA: &str = "/usr/share/ganeti/testsuite/test/data/htools";

fn have_ganeti() -> bool {
    if Path::new("/usr/bin/hbal").is_file() && Path::new(HTOOLS_DATA).is_dir() {
        return true;
    }
    let msg = "hbal or the ganeti-testsuite htools data are missing \
               (apt-get install ganeti-htools-3.0 ganeti-testsuite)";
    assert!(
        std::env::var_os("NODECARE_REQUIRE_GANETI").is_none(),
        "{msg}"
    );
    eprintln!("skipped: {msg}");
    false
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/balance")
        .join(name)
}

fn nodecare(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_nodecare"))
        .args(args)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(fixture(name), actual);
}

#[test]
fn dry_run_shows_scores_first_jobset_and_left_out_moves() {
    if !have_ganeti() {
        return;
    }
    for (data, extra, name) in [
        ("hbal-migration-1.data", &[][..], "migration-1.txt"),
        (
            "hbal-migration-1.data",
            &["--disk-moves"][..],
            "migration-1-disk-moves.txt",
        ),
        (
            "shared-n1-restriction.data",
            &[][..],
            "shared-n1-restriction.txt",
        ),
        (
            "hbal-evac.data",
            &["--disk-moves"][..],
            "evac-offline-node.txt",
        ),
        ("hspace-groups-two.data", &[][..], "two-groups.txt"),
        ("hbal-cpu-speed.data", &["--json"][..], "cpu-speed.json"),
    ] {
        let file = format!("{HTOOLS_DATA}/{data}");
        let mut args = vec!["balance", "--dry-run", "-t", file.as_str()];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = nodecare(&args);
        assert_eq!(code, Some(0), "{data}: {stderr}");
        golden(name, &stdout);
    }
}

/// The RAPI answers of a real Ganeti 3.0.2 cluster (roll's samples, instance policies included)
/// go through the RAPI loader and the text writer to hbal.
#[test]
fn dry_run_on_real_rapi_answers() {
    if !have_ganeti() {
        return;
    }
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../roll/tests/rapi");
    let dir = tempfile::tempdir().unwrap();
    for (from, to) in [
        ("02-info.json", "info.json"),
        ("15-groups-bulk.json", "groups.json"),
        ("06-nodes-bulk.json", "nodes.json"),
        ("11-instances-bulk.json", "instances.json"),
    ] {
        std::fs::copy(samples.join(from), dir.path().join(to)).unwrap();
    }
    let master = format!("file://{}", dir.path().display());
    let (code, stdout, stderr) = nodecare(&["balance", "--dry-run", "-m", &master]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("rapi-samples.txt", &stdout);
}

#[test]
fn errors_are_clear() {
    let data = fixture("tiny.data");
    let data = data.to_str().unwrap();
    let (code, _, stderr) = nodecare(&["balance", "-t", data]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("only --dry-run is supported"), "{stderr}");
    let (code, _, stderr) = nodecare(&[
        "balance",
        "--dry-run",
        "-t",
        data,
        "--hbal",
        "/nonexistent/hbal",
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        "Error: hbal is missing (/nonexistent/hbal; apt-get install ganeti-htools-3.0)\n"
    );
    let (code, _, stderr) = nodecare(&["balance", "--dry-run", "-t", data, "--hbal", "/bin/echo"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("Error: node group default: hbal output, line 1: unexpected line"),
        "{stderr}"
    );
    let (code, _, stderr) = nodecare(&["balance", "--dry-run", "-t", data, "-G", "nope"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        stderr,
        "Error: node group nope not found (or has no nodes)\n"
    );
    let (code, _, stderr) = nodecare(&["balance", "--dry-run"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("-t FILE or -m ADDRESS"), "{stderr}");
}
