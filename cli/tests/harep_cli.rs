//! `nodecare harep` against the simulated Ganeti served over HTTPS (a Ganeti-like self-signed
//! certificate, pinned with --rapi-ca): harep's output, golden files under `tests/harep/`
//! (uuids and times normalised; regenerate with `UPDATE_GOLDEN=1`), the tags it leaves, the
//! jobs it submits and their reason trail, and its usage errors.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the nodecare binary"
)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use nodecare_ganeti_sim::model::SimConfig;
use nodecare_ganeti_sim::{SimTls, Simulation};

const P: &str = "ganeti:watcher:autorepair:";

fn normalise(text: &str) -> String {
    let uuid =
        regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
    let ts = regex::Regex::new(r":[0-9]{10}:").unwrap();
    let text = uuid.replace_all(text, "<uuid>");
    ts.replace_all(&text, ":<ts>:").into_owned()
}

fn golden(name: &str, actual: &str) {
    nodecare_protocol::golden::assert_golden(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/harep")
            .join(name),
        actual,
    );
}

/// harep's real-run sample, on the simulation: an offline node2 with a DRBD instance tagged
/// `failover`, a plain one tagged `reinstall`, a suspended DRBD one, a diskless one the
/// cluster-wide `fix-storage` does not permit to fail over, and a healthy one.
fn cluster() -> Simulation {
    let sim = Simulation::new(
        SimConfig::from_spec(
            4,
            "inst1:drbd:2,inst2:plain:2,inst3:drbd:2,inst4:diskless:2,inst5:drbd:3",
            "sim.test",
        )
        .unwrap(),
    )
    .unwrap();
    // Slow enough that a job is never over by the time the run that submitted it looks again.
    sim.set_job_delay(Duration::from_millis(300));
    sim.with_cluster(|c| {
        let mut tag = |instance: &str, tags: &[&str]| {
            let i = c.instances.get_mut(instance).unwrap();
            i.tags.extend(tags.iter().map(|t| format!("{P}{t}")));
        };
        tag("inst1.sim.test", &["failover"]);
        tag("inst2.sim.test", &["reinstall"]);
        tag("inst3.sim.test", &["failover", "suspend:"]);
        c.cluster_tags.push(format!("{P}fix-storage"));
        c.nodes.get_mut("node2.sim.test").unwrap().offline = true;
    });
    sim
}

struct Setup {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    state: PathBuf,
    url: String,
}

async fn serve(sim: &Simulation) -> (Setup, nodecare_ganeti_sim::SimServer) {
    let tls = SimTls::ganeti_like().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("rapi.pem");
    std::fs::write(&ca, &tls.cert_pem).unwrap();
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), Some(tls))
        .await
        .unwrap();
    let setup = Setup {
        state: dir.path().join("state"),
        ca,
        url: server.url.clone(),
        _dir: dir,
    };
    (setup, server)
}

/// `nodecare harep` runs `nodecare-coordinator --harep` found beside it: built here when a
/// build of this package alone did not build it.
fn coordinator_beside_nodecare() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let nodecare = PathBuf::from(env!("CARGO_BIN_EXE_nodecare"));
        let coordinator = nodecare.with_file_name("nodecare-coordinator");
        if coordinator.is_file() {
            return;
        }
        // target/<profile>/nodecare: the target directory is two levels up.
        let target = nodecare.parent().and_then(|p| p.parent()).unwrap();
        let status = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "nodecare-coordinator",
                "--bin",
                "nodecare-coordinator",
            ])
            .env("CARGO_TARGET_DIR", target)
            .status()
            .unwrap();
        assert!(
            status.success() && coordinator.is_file(),
            "cannot build {}",
            coordinator.display()
        );
    });
}

async fn nodecare(setup: &Setup, extra: &[&str]) -> Output {
    coordinator_beside_nodecare();
    let mut args: Vec<String> = vec![
        "harep".into(),
        "-c".into(),
        "/dev/null".into(),
        "-m".into(),
        setup.url.clone(),
        "--rapi-ca".into(),
        setup.ca.display().to_string(),
        "--state-dir".into(),
        setup.state.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_nodecare"))
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn tags(sim: &Simulation, instance: &str) -> Vec<String> {
    sim.with_cluster(|c| {
        let mut tags = c.instances[instance].tags.clone();
        tags.sort();
        tags
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_harep_output_and_changes_nothing() {
    let sim = cluster();
    let (setup, _server) = serve(&sim).await;
    let out = nodecare(&setup, &["--dry-run"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    golden("dry-run.txt", &normalise(&stdout(&out)));
    assert!(sim.submissions().is_empty(), "{:?}", sim.submissions());
    // A dry run leaves no database behind.
    assert!(!setup.state.join("state.db").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_runs_repair_and_tag_as_harep_with_the_reason_given() {
    let sim = cluster();
    let (setup, _server) = serve(&sim).await;
    let mut outputs = String::new();
    for run in 1..=4 {
        let out = nodecare(&setup, &["--job-delay", "0", "--reason", "cron test"]).await;
        assert!(
            out.status.success(),
            "run {run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push_str(&format!("##### run {run}\n{}", stdout(&out)));
        assert!(sim.settle(Duration::from_secs(10)).await);
    }
    golden("runs.txt", &normalise(&outputs));
    // The tags harep would leave: success results (inst1 failed over, then its mirror off the
    // offline node rebuilt: the newer result replaces the older), the suspended instance
    // untouched.
    let inst1 = tags(&sim, "inst1.sim.test");
    assert!(
        inst1.len() == 2
            && inst1[0] == format!("{P}failover")
            && inst1[1].starts_with(&format!("{P}result:fix-storage:"))
            && inst1[1].contains(":success:"),
        "{inst1:?}"
    );
    let inst2 = tags(&sim, "inst2.sim.test");
    assert!(
        inst2
            .iter()
            .any(|t| t.starts_with(&format!("{P}result:reinstall:")) && t.contains(":success:")),
        "{inst2:?}"
    );
    assert_eq!(
        tags(&sim, "inst3.sim.test"),
        vec![format!("{P}failover"), format!("{P}suspend:")]
    );
    let inst4 = tags(&sim, "inst4.sim.test");
    assert!(
        inst4.len() == 1
            && inst4[0].starts_with(&format!("{P}result:failover:"))
            && inst4[0].ends_with(":enoperm:"),
        "{inst4:?}"
    );
    // The opcodes harep runs, each job with the reason trail naming the operator's reason
    // (RAPI's reinstall aside: Ganeti 3.0.2 builds that job without the reason parameter).
    let submissions = sim.submissions();
    let repair_ops: Vec<(&str, &str)> = submissions
        .iter()
        .filter(|s| !s.op_id.starts_with("OP_TAGS_"))
        .map(|s| (s.op_id.as_str(), s.target.as_str()))
        .collect();
    assert_eq!(
        repair_ops,
        vec![
            ("OP_INSTANCE_FAILOVER", "inst1.sim.test"),
            ("OP_INSTANCE_RECREATE_DISKS", "inst2.sim.test"),
            ("OP_INSTANCE_REINSTALL", "inst2.sim.test"),
            ("OP_INSTANCE_REPLACE_DISKS", "inst1.sim.test"),
        ],
        "{submissions:?}"
    );
    for s in submissions
        .iter()
        .filter(|s| s.op_id != "OP_INSTANCE_REINSTALL")
    {
        let text = s.reason_text.clone().unwrap_or_default();
        assert!(
            text.starts_with("gnt:daemon:maintd nodecare incident=")
                && text.ends_with(": cron test"),
            "{text}"
        );
    }
    assert!(sim.duplicate_intents().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_are_clear() {
    let sim = cluster();
    let (setup, _server) = serve(&sim).await;
    for (extra, want) in [
        (&["extra"][..], "this program doesn't take any arguments."),
        (&["--job-delay=-1"][..], "--job-delay"),
        (&["--job-delay=NaN"][..], "--job-delay"),
        (&["--reason", "two\nlines"][..], "--reason"),
    ] {
        let out = nodecare(&setup, extra).await;
        assert_eq!(out.status.code(), Some(1), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    // Without the pinned certificate the cluster is not trusted.
    coordinator_beside_nodecare();
    let out = tokio::task::spawn_blocking(|| {
        Command::new(env!("CARGO_BIN_EXE_nodecare"))
            .args(["harep", "-c", "/dev/null", "-m", "127.0.0.1:1", "--dry-run"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rapi-ca"));
    assert!(sim.submissions().is_empty());
}

/// Without the coordinator's binary (beside `nodecare` or in /usr/bin), `nodecare harep` says
/// what is missing and fails.
#[test]
fn a_missing_coordinator_is_a_clear_error() {
    if std::path::Path::new("/usr/bin/nodecare-coordinator").exists() {
        eprintln!("skipped: /usr/bin/nodecare-coordinator is installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("nodecare");
    std::fs::copy(env!("CARGO_BIN_EXE_nodecare"), &alone).unwrap();
    let out = Command::new(&alone)
        .args(["harep", "-c", "/dev/null", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nodecare-coordinator --harep")
            && err.contains("nodecare-coordinator package"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}
