//! hbal and the htools text writer: hbal's real outputs (captured from Ganeti 3.0.2's hbal on
//! the test suite's data, under `tests/data/hbal/`) read into plans compared with a golden
//! summary, and the writer's round trip through `htext::parse` and through the real `hbal -t`.
//!
//! The hbal parts need Debian's `ganeti-htools-3.0` and `ganeti-testsuite`; without them they
//! skip with a message, unless `NODECARE_REQUIRE_GANETI=1` (CI), where they fail.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the real hbal to compare with"
)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use nodecare_roll::cluster::{Cluster, DiskTemplate, Group, Instance, InstanceStatus, Node};
use nodecare_roll::hbal::{self, HbalPlan};
use nodecare_roll::htext;

const HTOOLS_DATA: &str = "/usr/share/ganeti/testsuite/test/data/htools";
const HBAL: &str = "/usr/bin/hbal";

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hbal")
}

/// Whether the real hbal and the test data are here; if not, skips (or fails under CI).
fn have_ganeti() -> bool {
    if Path::new(HBAL).is_file() && Path::new(HTOOLS_DATA).is_dir() {
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

fn render(plan: &HbalPlan) -> String {
    let mut out = String::new();
    let score = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.8}"));
    writeln!(
        out,
        "group {} score {} -> {}",
        plan.group.as_deref().unwrap_or("-"),
        score(plan.initial_score),
        score(plan.final_score)
    )
    .unwrap();
    for note in &plan.notes {
        writeln!(out, "note {note}").unwrap();
    }
    for (i, set) in plan.jobsets.iter().enumerate() {
        writeln!(out, "jobset {}", i + 1).unwrap();
        for job in set {
            let ops: Vec<String> = job.ops.iter().map(ToString::to_string).collect();
            writeln!(
                out,
                "  {} {} => {} [{}] touches {}",
                job.instance,
                job.from,
                job.to,
                ops.join(", "),
                job.nodes().into_iter().collect::<Vec<_>>().join(",")
            )
            .unwrap();
        }
    }
    out
}

#[test]
fn real_outputs_read_as_the_golden_plans() {
    let mut names: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "out"))
        .collect();
    names.sort();
    assert!(names.len() >= 20, "{} hbal outputs", names.len());
    let mut all = String::new();
    for path in &names {
        let text = std::fs::read_to_string(path).unwrap();
        let plan = hbal::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        writeln!(all, "== {}", path.file_name().unwrap().to_string_lossy()).unwrap();
        all.push_str(&render(&plan));
    }
    nodecare_protocol::golden::assert_golden(data_dir().join("plans.golden"), &all);
}

/// Runs `hbal -t FILE -C [args]`: exit code and stdout.
fn run_hbal(file: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(HBAL)
        .arg("-t")
        .arg(file)
        .arg("-C")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// The group arguments hbal needs for a cluster: none for one group, `-G` of the first group
/// with nodes otherwise.
fn group_args(cluster: &Cluster) -> Vec<String> {
    let used: std::collections::BTreeSet<usize> = cluster.nodes.iter().map(|n| n.group).collect();
    if used.len() > 1 {
        let first = *used.iter().next().unwrap();
        vec!["-G".into(), cluster.groups[first].name.clone()]
    } else {
        Vec::new()
    }
}

#[test]
fn writer_round_trip_on_the_test_suite() {
    if !have_ganeti() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(HTOOLS_DATA)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    files.sort();
    let (mut read_back, mut with_hbal) = (0, 0);
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let Ok(cluster) = htext::parse(&text) else {
            // Files the test suite keeps to test errors.
            continue;
        };
        let written = htext::serialize(&cluster);
        let again = htext::parse(&written)
            .unwrap_or_else(|e| panic!("{}: written text does not parse: {e}", path.display()));
        assert_eq!(again, cluster, "{}: round trip", path.display());
        read_back += 1;
        let copy = dir.path().join(path.file_name().unwrap());
        std::fs::write(&copy, &written).unwrap();
        let args = group_args(&cluster);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let original = run_hbal(path, &args);
        let ours = run_hbal(&copy, &args);
        assert_eq!(
            ours,
            original,
            "{}: hbal reads the written file differently",
            path.display()
        );
        with_hbal += 1;
    }
    eprintln!("{read_back} files read back, {with_hbal} compared through hbal");
    assert!(read_back >= 40, "only {read_back} files read back");
    assert!(
        with_hbal >= 15,
        "only {with_hbal} files compared through hbal"
    );
}

/// A generated cluster: `groups` node groups of `nodes` nodes, DRBD, plain and shared
/// instances spread unevenly (a lopsided cluster, as after an evacuation).
fn generated(groups: usize, nodes: usize, seed: u64) -> Cluster {
    let mut rng = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = move |m: u64| {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (rng >> 33) % m.max(1)
    };
    let mut c = Cluster::default();
    for g in 0..groups {
        c.groups.push(Group {
            name: format!("group-{g}"),
            uuid: format!("uuid-{g}"),
            alloc_policy: "preferred".into(),
            tags: Vec::new(),
        });
        for n in 0..nodes {
            c.nodes.push(Node {
                name: format!("node-{g}-{n}.example.com"),
                t_mem: 32768.0,
                n_mem: 1024,
                f_mem: 31744,
                t_dsk: 1_048_576.0,
                f_dsk: 1_048_576,
                t_cpu: 16.0,
                offline: false,
                master: g == 0 && n == 0,
                group: g,
                spindles: 4,
                tags: Vec::new(),
                excl_stor: false,
                free_spindles: 0,
                nos_cpu: 1,
                cpu_speed: 1.0,
            });
        }
    }
    let count = groups * nodes * 3;
    for i in 0..count {
        let g = i % groups;
        // Lopsided: most primaries on the first two nodes of each group.
        let p = g * nodes + (next(2) as usize);
        let mut s = g * nodes + (next(nodes as u64) as usize);
        if s == p {
            s = g * nodes + ((s - g * nodes + 1) % nodes);
        }
        let mem = 512 * (1 + next(4) as i64);
        let dsk = 10240 * (1 + next(3) as i64);
        let template = match next(4) {
            0 => DiskTemplate::Plain,
            _ => DiskTemplate::Drbd,
        };
        let drbd = template == DiskTemplate::Drbd;
        c.nodes[p].f_mem -= mem;
        c.nodes[p].f_dsk -= dsk;
        if drbd {
            c.nodes[s].f_dsk -= dsk;
        }
        c.instances.push(Instance {
            name: format!("inst-{i}.example.com"),
            mem,
            dsk,
            vcpus: 1 + next(2) as i64,
            status: if next(5) == 0 {
                InstanceStatus::AdminDown
            } else {
                InstanceStatus::Running
            },
            auto_balance: true,
            pnode: p,
            snode: drbd.then_some(s),
            template,
            tags: Vec::new(),
            spindle_use: 1,
            spindles: None,
            forthcoming: false,
        });
    }
    c
}

#[test]
fn writer_round_trip_on_generated_clusters() {
    let hbal = have_ganeti();
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..8 {
        let cluster = generated(1 + (seed as usize % 2), 4 + (seed as usize % 3), seed);
        let written = htext::serialize(&cluster);
        let again = htext::parse(&written).unwrap();
        assert_eq!(again, cluster, "seed {seed}");
        if !hbal {
            continue;
        }
        // hbal reads it: the plan it prints names only nodes and instances of the cluster,
        // and re-reading its `-S` save gives the same cluster before balancing.
        let file = dir.path().join(format!("gen-{seed}.data"));
        std::fs::write(&file, &written).unwrap();
        let save = dir.path().join(format!("gen-{seed}.save"));
        let mut args = vec!["-G".to_owned(), "group-0".to_owned(), "-S".to_owned()];
        args.push(save.display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout) = run_hbal(&file, &args);
        assert_eq!(code, Some(0), "seed {seed}: {stdout}");
        let plan = hbal::parse(&stdout).unwrap_or_else(|e| panic!("seed {seed}: {e}\n{stdout}"));
        let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
        let instances: Vec<String> = cluster.instances.iter().map(|i| i.name.clone()).collect();
        plan.resolve(&nodes, &instances).unwrap();
        let saved =
            std::fs::read_to_string(dir.path().join(format!("gen-{seed}.save.original"))).unwrap();
        let saved = htext::parse(&saved).unwrap();
        assert_eq!(saved.nodes.len(), cluster.nodes.len(), "seed {seed}");
        for (a, b) in saved.instances.iter().zip(&cluster.instances) {
            assert_eq!(
                (&a.name, a.mem, a.dsk, a.pnode, a.snode, a.status),
                (&b.name, b.mem, b.dsk, b.pnode, b.snode, b.status),
                "seed {seed}"
            );
        }
    }
}
