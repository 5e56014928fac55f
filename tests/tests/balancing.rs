//! The balancing duty against the simulated Ganeti, side by side with the real `hbal` run
//! directly on the same cluster text: the duty proposes exactly hbal's first job set, minus the
//! jobs the gate refuses (each with its reason), and carries the admitted ones out as chained
//! jobs with the run's reason.
//!
//! With the agents' signed load: hbal run directly with the same reports in a `--mond-data` file
//! (Ganeti's `MonD.hs` format) gives the first job set the duty proposes, and a different one
//! than without the load; when one node's load is missing, the duty balances on the static
//! resources and says why. (hbal's own `--mond=yes` asks each node by name on port 1815, so a
//! real `ganeti-mond` on loopback cannot serve a multi-node cluster here; the real-cluster test
//! `tests/e2e-ganeti/s9-balance.sh` runs it against the agents.)
//!
//! Needs Debian's `ganeti-htools-3.0` (`/usr/bin/hbal`); without it the tests skip, unless
//! `NODECARE_REQUIRE_GANETI=1` (CI), where they fail.
#![allow(clippy::unwrap_used)] // test helpers: a failed setup should abort the test
#![allow(
    clippy::disallowed_methods,
    reason = "the test runs the real hbal to compare with and writes to Ganeti as another tool would"
)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use nodecare_coordinator::balance::{ClusterSource, MoveState};
use nodecare_roll::hbal::{self, FirstJobset};
use nodecare_roll::htext;
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::Harness;
use nodecare_tests::htools::SimSource;

const HBAL: &str = "/usr/bin/hbal";

fn have_hbal() -> bool {
    if Path::new(HBAL).is_file() {
        return true;
    }
    let msg = "hbal is missing (apt-get install ganeti-htools-3.0)";
    assert!(
        std::env::var_os("NODECARE_REQUIRE_GANETI").is_none(),
        "{msg}"
    );
    eprintln!("skipped: {msg}");
    false
}

/// hbal run directly on the simulated cluster, as an operator would (with `extra` arguments).
async fn hbal_directly(h: &Harness, blocked: &[(&str, &str)], extra: &[&str]) -> FirstJobset {
    let cluster = SimSource(h.sim.clone()).cluster().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cluster.data");
    std::fs::write(&file, htext::serialize(&cluster)).unwrap();
    let group = cluster.groups[cluster.nodes[0].group].name.clone();
    let output = Command::new(HBAL)
        .arg("-t")
        .arg(&file)
        .args([
            "-C",
            "-G",
            &group,
            "-g",
            "0.01",
            "--min-gain-limit",
            "0.1",
            "--no-disk-moves",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    eprintln!("{stdout}");
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let instances: Vec<String> = cluster.instances.iter().map(|i| i.name.clone()).collect();
    let plan = hbal::parse(&stdout)
        .unwrap()
        .resolve(&nodes, &instances)
        .unwrap();
    let blocked = blocked
        .iter()
        .map(|(n, why)| ((*n).to_owned(), (*why).to_owned()))
        .collect();
    plan.first_jobset(&blocked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duty_proposes_hbals_first_jobset_and_carries_it_out() {
    if !have_hbal() {
        return;
    }
    let mut h = Harness::new(
        4,
        "a:drbd:1,b:drbd:1,c:drbd:1,d:drbd:1,e:sharedfile:1,f:sharedfile:1",
        |config| {
            config.balancing.enabled = true;
            config.balancing.interval = 3600.0;
        },
    )
    .await
    .unwrap();
    h.coordinator
        .set_cluster_source(Arc::new(SimSource(h.sim.clone())));
    let expected = hbal_directly(&h, &[], &[]).await;
    assert!(!expected.jobs.is_empty(), "hbal finds nothing to do");
    h.round().await.unwrap();
    let status = h
        .coordinator
        .api()
        .board
        .balancing
        .read()
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(status.error, None, "{status:#?}");
    let want: Vec<String> = expected
        .jobs
        .iter()
        .map(|j| format!("{}: {} => {}", j.instance, j.from, j.to))
        .collect();
    assert_eq!(status.proposed, want);
    assert_eq!(status.submitted, want);
    // The moves ran: stored, submitted with the run's reason, succeeded after the next poll.
    h.round().await.unwrap();
    let moves = h.coordinator.api().store.balancing_moves().unwrap();
    assert!(!moves.is_empty());
    assert!(
        moves.iter().all(|m| m.state == MoveState::Succeeded),
        "{moves:#?}"
    );
    let placed = h.sim.with_cluster(|c| {
        expected
            .jobs
            .iter()
            .map(|j| {
                let i = &c.instances[&j.instance];
                (i.pnode.clone(), i.snodes.first().cloned())
            })
            .collect::<Vec<_>>()
    });
    let wanted: Vec<(String, Option<String>)> = expected
        .jobs
        .iter()
        .map(|j| (j.to.primary.clone(), j.to.secondary.clone()))
        .collect();
    assert_eq!(placed, wanted);
    assert!(h.sim.duplicate_intents().is_empty());
    // The API shows the run and its moves.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let body: serde_json::Value = reqwest::get(format!("http://{addr}/1/balancing"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    server.abort();
    assert_eq!(body["status"]["proposed"], serde_json::json!(want));
    assert_eq!(body["moves"].as_array().unwrap().len(), moves.len());
    assert_eq!(body["moves"][0]["state"], "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_onto_a_node_with_an_incident_are_left_out_with_the_reason() {
    if !have_hbal() {
        return;
    }
    let mut h = Harness::new(
        4,
        "a:drbd:1,b:drbd:1,c:drbd:1,d:drbd:1,e:sharedfile:1,f:sharedfile:1",
        |config| {
            config.balancing.enabled = true;
            config.balancing.interval = 3600.0;
        },
    )
    .await
    .unwrap();
    h.coordinator
        .set_cluster_source(Arc::new(SimSource(h.sim.clone())));
    // hbal's first move takes e to node3; node3's agent asks for an evacuation.
    let node3 = nodecare_tests::harness::node(3);
    h.agents.get(&node3).unwrap().set_verdict(verdict(
        "evacuate",
        serde_json::json!({"disk": "sdb"}),
        None,
    ));
    let expected = hbal_directly(&h, &[(&node3, "incident")], &[]).await;
    assert!(
        expected.jobs.is_empty() && expected.left_out.len() == 1,
        "{expected:#?}"
    );
    h.round().await.unwrap();
    let incidents = h.incidents().unwrap();
    assert_eq!(incidents.len(), 1);
    let status = h
        .coordinator
        .api()
        .board
        .balancing
        .read()
        .unwrap()
        .clone()
        .unwrap();
    assert!(status.proposed.is_empty(), "{status:#?}");
    assert_eq!(status.left_out.len(), 1);
    assert_eq!(
        status.left_out[0].job.instance,
        expected.left_out[0].0.instance
    );
    assert_eq!(
        status.left_out[0].why,
        format!("{node3}: incident {} (evacuate)", incidents[0].uuid)
    );
    // Nothing was moved by balancing.
    assert!(
        h.coordinator
            .api()
            .store
            .balancing_moves()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_unreadable_hbal_is_reported_and_nothing_moves() {
    for (hbal, error) in [
        ("/nonexistent/hbal", "hbal is missing (/nonexistent/hbal)"),
        (
            "/bin/echo",
            "node group default: hbal output, line 1: unexpected line: \"-t /dev/stdin -C -G default -g 0.01 --min-gain-limit 0.1 --no-disk-moves\"",
        ),
        (
            "/bin/false",
            "hbal failed: node group default: /bin/false failed (exit code 1): ",
        ),
        (
            "nogroup",
            "cannot read the cluster: node group nope (balancing.groups) not found or without nodes",
        ),
    ] {
        let mut h = Harness::new(3, "a:drbd:1,b:drbd:1,e:sharedfile:1", |config| {
            config.balancing.enabled = true;
            if hbal == "nogroup" {
                config.balancing.groups = vec!["nope".into()];
            } else {
                config.balancing.hbal = hbal.into();
            }
        })
        .await
        .unwrap();
        h.coordinator
            .set_cluster_source(Arc::new(SimSource(h.sim.clone())));
        h.round().await.unwrap();
        let status = h
            .coordinator
            .api()
            .board
            .balancing
            .read()
            .unwrap()
            .clone()
            .unwrap();
        assert_eq!(status.error.as_deref(), Some(error), "{hbal}");
        assert!(status.proposed.is_empty());
        assert!(
            h.coordinator
                .api()
                .store
                .balancing_moves()
                .unwrap()
                .is_empty()
        );
        assert!(h.sim.submissions().is_empty(), "{hbal}");
        let metrics = h
            .coordinator
            .api()
            .board
            .metrics
            .render(&[], std::iter::empty());
        assert!(
            metrics.contains("nodecare_coordinator_balancing_hbal_ok 0"),
            "{metrics}"
        );
        assert!(metrics.contains("nodecare_coordinator_balancing_runs_total{result=\"failed\"} 1"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_stored_before_a_crash_are_adopted_or_given_up() {
    use nodecare_coordinator::balance::BalanceMove;
    use nodecare_ganeti::{Ganeti, Op, Reason};
    use nodecare_roll::hbal::HbalOp;
    let mut h = Harness::new(3, "a:drbd:1,b:drbd:1", |config| {
        config.balancing.enabled = true;
        config.balancing.hbal = "/nonexistent/hbal".into();
    })
    .await
    .unwrap();
    let run = uuid::Uuid::new_v4();
    let stored = |key: &str, instance: &str| BalanceMove {
        run,
        key: key.into(),
        holder: run,
        group: "default".into(),
        instance: instance.into(),
        op: HbalOp::Migrate { target: None },
        state: MoveState::Planned,
        job_id: None,
        created_ms: nodecare_protocol::now_ms(),
        finished_ms: None,
        error: None,
    };
    let a = format!("a.{}", nodecare_tests::harness::DOMAIN);
    let b = format!("b.{}", nodecare_tests::harness::DOMAIN);
    let store = Arc::clone(&h.coordinator.api().store);
    store
        .save_balancing_moves(&[stored("a-1", &a), stored("b-1", &b)])
        .unwrap();
    // The crash came after a-1 was submitted and before its job id was stored.
    let client = h.sim.client();
    let job = Ganeti::submit(
        &client,
        &Op::MigrateInstance {
            instance: a.to_owned(),
            target: None,
        },
        &Reason::new(run, "a-1", "balancing"),
    )
    .await
    .unwrap();
    h.round().await.unwrap();
    h.round().await.unwrap();
    let moves = store.balancing_moves().unwrap();
    assert_eq!(moves[0].job_id, Some(job));
    assert_eq!(moves[0].state, MoveState::Succeeded, "{moves:#?}");
    assert_eq!(moves[1].state, MoveState::Failed);
    assert_eq!(moves[1].error.as_deref(), Some("never submitted"));
    assert_eq!(h.sim.submissions().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_of_several_operations_is_one_chain_of_jobs() {
    if !have_hbal() {
        return;
    }
    // Every DRBD instance on node1 with its secondary on node2; node3 and node4 empty. With disk
    // moves allowed, hbal moves secondaries (and primaries) to the empty nodes.
    let mut h = Harness::new(
        4,
        "a:drbd:1,b:drbd:1,c:drbd:1,d:drbd:1,e:drbd:1,f:drbd:1",
        |config| {
            config.balancing.enabled = true;
            config.balancing.interval = 3600.0;
            config.balancing.disk_moves = true;
        },
    )
    .await
    .unwrap();
    h.coordinator
        .set_cluster_source(Arc::new(SimSource(h.sim.clone())));
    h.round().await.unwrap();
    let moves = h.coordinator.api().store.balancing_moves().unwrap();
    let chained: Vec<_> = moves.iter().filter(|m| m.key.ends_with("-2")).collect();
    assert!(
        !chained.is_empty(),
        "no move of several operations: {moves:#?}"
    );
    for second in chained {
        let first = moves
            .iter()
            .find(|m| m.run == second.run && m.key == second.key.replace("-2", "-1"))
            .unwrap();
        let depends = h
            .sim
            .with_cluster(|c| c.jobs[&second.job_id.unwrap()].depends.clone());
        assert_eq!(
            depends.iter().map(|(job, _)| *job).collect::<Vec<_>>(),
            [first.job_id.unwrap()],
            "{second:#?}"
        );
    }
    h.round().await.unwrap();
    let moves = h.coordinator.api().store.balancing_moves().unwrap();
    assert!(
        moves.iter().all(|m| m.state == MoveState::Succeeded),
        "{moves:#?}"
    );
}

/// A `cpu-avg-load` report of `cpu_total` CPUs, as the agent's collector makes it now.
fn cpu_report(cpu_total: f64) -> nodecare_protocol::Report {
    nodecare_protocol::Report {
        name: "cpu-avg-load".into(),
        version: "B".into(),
        format_version: 1,
        timestamp: nodecare_protocol::now_ms() * 1_000_000,
        category: None,
        kind: nodecare_protocol::ReportKind::Performance,
        data: serde_json::json!({"cpu_number": 1, "cpus": [cpu_total / 2.0, cpu_total / 2.0], "cpu_total": cpu_total}),
    }
}

/// Three instances on node1, one on each other node: hbal moves one off node1, onto node2 by
/// the static resources alone, onto node4 when node2 and node3 are busy.
const LOPSIDED: &str =
    "a:sharedfile:1,b:sharedfile:1,c:sharedfile:1,d:sharedfile:2,e:sharedfile:3,f:sharedfile:4";
const LOADS: [(usize, f64); 4] = [(1, 0.3), (2, 4.0), (3, 4.0), (4, 0.1)];

fn jobs(first: &FirstJobset) -> Vec<String> {
    first
        .jobs
        .iter()
        .map(|j| format!("{}: {} => {}", j.instance, j.from, j.to))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_signed_load_reaches_hbal_as_mond_data() {
    if !have_hbal() {
        return;
    }
    let mut h = Harness::new(4, LOPSIDED, |config| {
        config.balancing.enabled = true;
        config.balancing.interval = 3600.0;
    })
    .await
    .unwrap();
    h.coordinator
        .set_cluster_source(Arc::new(SimSource(h.sim.clone())));
    // The file an operator would give hbal (Ganeti's MonD.hs format), written here from the
    // same reports the agents sign.
    let mut file = Vec::new();
    for (i, load) in LOADS {
        let node = nodecare_tests::harness::node(i);
        let report = cpu_report(load);
        h.agents
            .get(&node)
            .unwrap()
            .set_load(Some(vec![report.clone()]));
        file.push(serde_json::json!({"node": node, "reports": [report]}));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mond.json");
    std::fs::write(&path, serde_json::to_vec(&file).unwrap()).unwrap();
    let path = path.display().to_string();
    let static_only = hbal_directly(&h, &[], &[]).await;
    let with_load = hbal_directly(
        &h,
        &[],
        &[
            "--mond=yes",
            "--mond-data",
            &path,
            "--exit-on-missing-mond-data",
        ],
    )
    .await;
    assert!(!with_load.jobs.is_empty());
    assert_ne!(
        jobs(&static_only),
        jobs(&with_load),
        "the load changes nothing"
    );
    h.round().await.unwrap();
    let status = h
        .coordinator
        .api()
        .board
        .balancing
        .read()
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(status.error, None, "{status:#?}");
    assert_eq!(
        status.load.as_deref(),
        Some("cpu-avg-load of 4 node(s) from signed agent reports")
    );
    assert_eq!(status.proposed, jobs(&with_load));
    // The file the coordinator gave hbal holds the same load.
    let served: serde_json::Value =
        serde_json::from_str(status.mond_data.as_deref().unwrap()).unwrap();
    for (i, load) in LOADS {
        let node = nodecare_tests::harness::node(i);
        let entry = served
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["node"] == node.as_str())
            .unwrap();
        assert_eq!(entry["reports"][0]["data"]["cpu_total"], load);
    }
    let metrics = h
        .coordinator
        .api()
        .board
        .metrics
        .render(&[], std::iter::empty());
    assert!(
        metrics.contains("nodecare_coordinator_balancing_load 1"),
        "{metrics}"
    );
    assert!(metrics.contains("nodecare_coordinator_balancing_load_missing_nodes 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_without_load_leaves_the_load_out_and_says_so() {
    if !have_hbal() {
        return;
    }
    let mut h = Harness::new(4, LOPSIDED, |config| {
        config.balancing.enabled = true;
        config.balancing.interval = 3600.0;
    })
    .await
    .unwrap();
    h.coordinator
        .set_cluster_source(Arc::new(SimSource(h.sim.clone())));
    // node4's agent has no load report (a forged or stale one would be the same: unverified).
    for (i, load) in &LOADS[..3] {
        h.agents
            .get(&nodecare_tests::harness::node(*i))
            .unwrap()
            .set_load(Some(vec![cpu_report(*load)]));
    }
    let static_only = hbal_directly(&h, &[], &[]).await;
    h.round().await.unwrap();
    let status = h
        .coordinator
        .api()
        .board
        .balancing
        .read()
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(status.error, None, "{status:#?}");
    let load = status.load.clone().unwrap();
    let node4 = nodecare_tests::harness::node(4);
    assert!(
        load.starts_with("left out, static resources only (no verified load for ")
            && load.contains(&format!("{node4}: unreachable")),
        "{load}"
    );
    assert_eq!(status.mond_data, None);
    assert_eq!(status.proposed, jobs(&static_only));
    let metrics = h
        .coordinator
        .api()
        .board
        .metrics
        .render(&[], std::iter::empty());
    assert!(
        metrics.contains("nodecare_coordinator_balancing_load 0"),
        "{metrics}"
    );
    assert!(metrics.contains("nodecare_coordinator_balancing_load_missing_nodes 1"));
}
