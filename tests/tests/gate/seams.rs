//! The gate at the seams, end to end on the simulated cluster: what a canceled incident's jobs
//! still running in Ganeti hold.

use std::time::{Duration, Instant};

use nodecare_core::incident::RepairStatus;
use nodecare_ganeti::JobStatus;
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

/// The coordinator's API served on a local port.
#[allow(clippy::expect_used, reason = "a test helper")]
async fn serve(h: &Harness) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            panic!("{error}");
        }
    });
    (url, server)
}

/// Asks for a grant of `node`: the HTTP status and the body.
#[allow(clippy::expect_used, reason = "a test helper")]
async fn ask_grant(url: &str, node: &str) -> (u16, String) {
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&json!({"node": node, "reason": "firmware", "requester": "reboot-tool", "ttl_s": 60}))
        .send()
        .await
        .expect("answered");
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap_or_default())
}

/// An evacuation canceled while its drain runs in Ganeti (a cancel stops only the jobs not
/// started): the drain goes on, so the incident keeps holding its node, and its failure domain
/// stays the busy one, until the job ends. A grant of a node in another failure domain is
/// refused meanwhile, naming the incident; once the drain has ended the node is drained as any
/// node left so (the domain stays busy for that reason).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_evacuation_holds_its_node_while_its_drain_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").expect("users");
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:3", move |config| {
        config.users = users;
        config.failure_domains = "rack:".into();
        config.max_disrupted_nodes = 2;
        config.min_healthy_nodes = 1;
    })
    .await
    .expect("harness");
    // node1 and node2 in rack r0, node3 and node4 in rack r1.
    h.sim.with_cluster(|c| {
        for i in 1..=4 {
            if let Some(n) = c.nodes.get_mut(&node(i)) {
                n.tags.push(format!("rack:r{}", (i - 1) / 2));
            }
        }
    });
    let (url, server) = serve(&h).await;
    // Each job starts half its delay after it is queued and ends at its delay.
    h.sim.set_job_delay(Duration::from_millis(4000));
    h.agents.get(&node(2)).expect("agent").set_verdict(verdict(
        "evacuate",
        json!({"disk": "sdb"}),
        None,
    ));
    let started = Instant::now();
    h.coordinator.round().await.expect("round");
    let incident = h
        .incidents()
        .expect("incidents")
        .into_iter()
        .find(|i| i.node == node(2))
        .expect("an incident on node2");
    assert!(!incident.jobs.is_empty(), "{incident:#?}");
    let drain_running = |h: &Harness| {
        h.sim.with_cluster(|c| {
            c.jobs
                .values()
                .any(|j| j.status == JobStatus::Running && j.op.op_id() == "OP_NODE_SET_PARAMS")
        })
    };
    while !drain_running(&h) {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the drain starts: {:?}",
            h.sim.with_cluster(|c| c
                .jobs
                .values()
                .map(|j| (j.id, j.op.op_id(), j.status))
                .collect::<Vec<_>>())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", incident.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    let mut rounds = 0;
    while started.elapsed() < Duration::from_millis(3500) && drain_running(&h) {
        h.coordinator.round().await.expect("round");
        rounds += 1;
        let now = h
            .incidents()
            .expect("incidents")
            .into_iter()
            .find(|i| i.uuid == incident.uuid)
            .expect("kept");
        assert_eq!(now.repair_status, RepairStatus::Canceled, "{now:#?}");
        for other in [node(2), node(3)] {
            let (status, body) = ask_grant(&url, &other).await;
            assert_eq!(
                status,
                429,
                "round {rounds}: a grant of {other} while the canceled incident's drain of {} runs: {body}",
                node(2)
            );
            assert!(body.contains(&incident.uuid.to_string()), "{body}");
        }
    }
    assert!(rounds >= 1, "rounds while the drain runs");
    // The drain ends: node2 is drained, left so by the canceled incident.
    h.sim.settle(Duration::from_secs(10)).await;
    h.coordinator.round().await.expect("round");
    let drained = h.sim.with_cluster(|c| c.nodes[&node(2)].drained);
    assert!(drained);
    let (status, body) = ask_grant(&url, &node(3)).await;
    assert_eq!(status, 429, "rack r0 is still disrupted: {body}");
    // Named as what left it so: someone's disruption, the canceled incident's drain.
    assert!(
        body.contains(&format!("drained by incident {} (canceled)", incident.uuid)),
        "{body}"
    );
    server.abort();
}

/// The nodes the jobs in Ganeti's list move instances onto (explicit targets, new
/// secondaries).
fn move_targets(h: &Harness) -> Vec<(String, String)> {
    use nodecare_ganeti_sim::model::SimOp;
    h.sim.with_cluster(|c| {
        c.jobs
            .values()
            .filter_map(|j| match &j.op {
                SimOp::InstanceMigrate {
                    instance,
                    target: Some(target),
                    ..
                }
                | SimOp::InstanceFailover {
                    instance,
                    target: Some(target),
                } => Some((instance.clone(), target.clone())),
                SimOp::ReplaceDisks {
                    instance,
                    remote_node: Some(target),
                    ..
                } => Some((instance.clone(), target.clone())),
                _ => None,
            })
            .collect()
    })
}

/// A live repair canceled while its command runs holds its node until the command ends: an
/// evacuation planned meanwhile moves nothing onto that node (it has more free memory than any
/// other), though it is under no active incident; the instance goes elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evacuation_moves_nothing_onto_a_node_whose_canceled_repair_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").expect("users");
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:1,c:diskless:4", move |config| {
        config.users = users;
        config.max_disrupted_nodes = 2;
        config.min_healthy_nodes = 1;
    })
    .await
    .expect("harness");
    let (url, server) = serve(&h).await;
    let repairing = h.agents.get(&node(3)).expect("agent").clone();
    repairing.set_verdict(verdict(
        "live-repair",
        json!({"firmware": "old"}),
        Some("update-firmware"),
    ));
    repairing.set_repair(nodecare_tests::fake_agent::RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_millis(6000),
    });
    let started = Instant::now();
    h.round().await.expect("round");
    let incident = h
        .incidents()
        .expect("incidents")
        .into_iter()
        .find(|i| i.node == node(3))
        .expect("an incident on node3");
    assert_eq!(repairing.repairs(), vec![incident.uuid.to_string()]);
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", incident.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    h.agents.get(&node(2)).expect("agent").set_verdict(verdict(
        "evacuate",
        json!({"disk": "sdb"}),
        None,
    ));
    let mut rounds = 0;
    while started.elapsed() < Duration::from_millis(5000) {
        h.round().await.expect("round");
        rounds += 1;
        let onto: Vec<(String, String)> = move_targets(&h)
            .into_iter()
            .filter(|(_, target)| *target == node(3))
            .collect();
        assert!(
            onto.is_empty(),
            "round {rounds}: moved onto {} while its repair runs: {onto:?}",
            node(3)
        );
    }
    let a = h
        .sim
        .with_cluster(|c| c.instances["a.sim.test"].pnode.clone());
    assert!(
        a != node(2) && a != node(3),
        "a moved elsewhere: on {a}, moves {:?}",
        move_targets(&h)
    );
    server.abort();
}

/// Two evacuations, the first canceled while its drain runs in Ganeti: its node's instances
/// still have to fit on the healthy nodes (N+1), so the second, whose instance fits only
/// without them, does not start while that drain runs, nor once it has left the node drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_evacuation_s_running_drain_keeps_its_memory_reserved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").expect("users");
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:3,c:diskless:4", move |config| {
        config.users = users;
        config.max_disrupted_nodes = 2;
        config.min_healthy_nodes = 1;
    })
    .await
    .expect("harness");
    // a and b need 1280 MiB each; node1 and node4 have 1536 and 512 MiB free: one of them
    // fits, not both.
    h.sim.with_cluster(|c| {
        for n in c.nodes.values_mut() {
            n.memory_total_mib = 1536;
        }
        for (name, memory) in [("a", 1280), ("b", 1280), ("c", 1024)] {
            if let Some(i) = c.instances.get_mut(&format!("{name}.sim.test")) {
                i.memory_mib = memory;
                i.running = true;
            }
        }
    });
    let (url, server) = serve(&h).await;
    h.sim.set_job_delay(Duration::from_millis(4000));
    h.agents.get(&node(2)).expect("agent").set_verdict(verdict(
        "evacuate",
        json!({"disk": "sdb"}),
        None,
    ));
    let started = Instant::now();
    h.coordinator.round().await.expect("round");
    let first = h
        .incidents()
        .expect("incidents")
        .into_iter()
        .find(|i| i.node == node(2))
        .expect("an incident on node2");
    let drain_running = |h: &Harness| {
        h.sim.with_cluster(|c| {
            c.jobs
                .values()
                .any(|j| j.status == JobStatus::Running && j.op.op_id() == "OP_NODE_SET_PARAMS")
        })
    };
    while !drain_running(&h) {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the drain starts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", first.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .expect("answered");
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    h.agents.get(&node(3)).expect("agent").set_verdict(verdict(
        "evacuate",
        json!({"disk": "sdb"}),
        None,
    ));
    let node3_jobs = |h: &Harness| {
        h.sim.with_cluster(|c| {
            c.jobs
                .values()
                .filter(|j| j.op.summary().contains(&node(3)) || j.op.summary().contains("(b."))
                .map(|j| j.op.summary())
                .collect::<Vec<_>>()
        })
    };
    let mut rounds = 0;
    while rounds < 2 || (started.elapsed() < Duration::from_millis(3500) && drain_running(&h)) {
        h.coordinator.round().await.expect("round");
        rounds += 1;
        assert_eq!(
            node3_jobs(&h),
            Vec::<String>::new(),
            "round {rounds}: node3's evacuation started while the canceled drain of {} runs",
            node(2)
        );
    }
    h.sim.settle(Duration::from_secs(10)).await;
    for _ in 0..2 {
        h.round().await.expect("round");
    }
    assert!(h.sim.with_cluster(|c| c.nodes[&node(2)].drained));
    assert_eq!(node3_jobs(&h), Vec::<String>::new(), "still no room for b");
    let second = h
        .incidents()
        .expect("incidents")
        .into_iter()
        .find(|i| i.node == node(3))
        .expect("an incident on node3");
    assert!(
        second
            .blocked_by
            .as_deref()
            .is_some_and(|b| b.contains("capacity")),
        "{second:#?}"
    );
    server.abort();
}

/// The nodes an evacuation's moves go to are held from the round that plans them: a grant of
/// the node an instance is moving onto, asked between rounds while the move is queued or runs,
/// is refused naming the incident (the round's gate decision came before the moves were
/// planned); a node no move involves is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_between_rounds_is_refused_the_target_of_a_move_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").expect("users");
    let mut h = Harness::new(4, "a:diskless:2", move |config| {
        config.users = users;
        config.max_disrupted_nodes = 3;
        config.min_healthy_nodes = 1;
    })
    .await
    .expect("harness");
    let (url, server) = serve(&h).await;
    h.sim.set_job_delay(Duration::from_millis(4000));
    h.agents.get(&node(2)).expect("agent").set_verdict(verdict(
        "evacuate",
        json!({"disk": "sdb"}),
        None,
    ));
    h.coordinator.round().await.expect("round");
    let incident = h
        .incidents()
        .expect("incidents")
        .into_iter()
        .find(|i| i.node == node(2))
        .expect("an incident on node2");
    let targets = move_targets(&h);
    let Some((_, target)) = targets
        .iter()
        .find(|(instance, _)| instance == "a.sim.test")
    else {
        panic!("the round moves a: {targets:?}");
    };
    let (status, body) = ask_grant(&url, target).await;
    assert_eq!(
        status, 429,
        "a grant of {target}, which a.sim.test moves onto: {body}"
    );
    assert!(body.contains(&incident.uuid.to_string()), "{body}");
    let other = (1..=4)
        .map(node)
        .find(|n| *n != node(2) && n != target)
        .expect("a node no move involves");
    let (status, body) = ask_grant(&url, &other).await;
    assert_eq!(status, 201, "a grant of {other}: {body}");
    server.abort();
}

/// A failed evacuation whose failure tag the operator removed while a move of it still runs in
/// Ganeti (a secondary's replacement, stuck) is kept until that job ends: the node it leaves
/// and the node the move goes to stay held, so a grant of either is refused naming the
/// incident. Once the job has ended the incident is forgotten and the node is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_failed_evacuation_holds_its_nodes_while_a_move_of_it_runs() {
    use nodecare_ganeti_sim::model::{JobFailureRule, SimOp};
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").expect("users");
    // d: primary node1, secondary node2; l runs on node2.
    let mut h = Harness::new(4, "d:drbd:1,l:diskless:2", move |config| {
        config.users = users;
        config.max_disrupted_nodes = 2;
        config.min_healthy_nodes = 1;
    })
    .await
    .expect("harness");
    let (url, server) = serve(&h).await;
    // Drained by hand already: the moves start at once, side by side.
    h.sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.drained = true;
        }
    });
    // Long enough that the replacement is still unfinished when it is made to stick.
    h.sim.set_job_delay(Duration::from_millis(1000));
    h.sim.fail_jobs(JobFailureRule {
        op_id: None,
        target: Some("l.sim.test".into()),
        count: Some(1),
        message: "injected failure".into(),
    });
    h.agents.get(&node(2)).expect("agent").set_verdict(verdict(
        "evacuate",
        json!({"disk": "sdb"}),
        None,
    ));
    h.coordinator.round().await.expect("round");
    // The secondary's replacement sticks in Ganeti.
    let replacement = h.sim.with_cluster(|c| {
        let id = c.jobs.values().find_map(|j| match &j.op {
            SimOp::ReplaceDisks {
                remote_node: Some(target),
                ..
            } => Some((j.id, target.clone())),
            _ => None,
        });
        if let Some((id, _)) = &id {
            c.stuck.insert(*id);
        }
        id
    });
    let Some((job, target)) = replacement else {
        panic!(
            "the round replaces d's secondary: {:?}",
            h.sim.with_cluster(|c| c
                .jobs
                .values()
                .map(|j| (j.id, j.op.op_id()))
                .collect::<Vec<_>>())
        );
    };
    let incident = h
        .incidents()
        .expect("incidents")
        .into_iter()
        .find(|i| i.node == node(2))
        .expect("an incident on node2");
    let failed_tag = format!("maintd:repairfailed:{}", incident.uuid);
    let tagged = |h: &Harness| h.node_tags(&node(2)).contains(&failed_tag);
    for _ in 0..5 {
        if tagged(&h) {
            break;
        }
        h.round().await.expect("round");
    }
    assert!(
        tagged(&h),
        "the evacuation fails and tags node2: {:#?}",
        h.incidents()
    );
    // The operator returns node2 while the replacement still runs.
    h.sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.drained = false;
            n.tags.retain(|t| *t != failed_tag);
        }
    });
    for round in 0..2 {
        h.round().await.expect("round");
        let status = h.sim.with_cluster(|c| c.jobs[&job].status);
        assert!(!status.is_final(), "job {job} still runs: {status:?}");
        for held in [node(2), target.clone()] {
            let (status, body) = ask_grant(&url, &held).await;
            assert_eq!(
                status,
                429,
                "round {round}: a grant of {held} while job {job} replacing d's secondary {} -> {target} runs: {body}",
                node(2)
            );
            assert!(body.contains(&incident.uuid.to_string()), "{body}");
        }
    }
    // The job ends (the node reports healthy): the incident is forgotten, the node granted.
    h.agents
        .get(&node(2))
        .expect("agent")
        .set_verdict(verdict("Ok", json!({}), None));
    h.sim.with_cluster(|c| c.stuck.remove(&job));
    h.sim.settle(Duration::from_secs(5)).await;
    h.round().await.expect("round");
    h.round().await.expect("round");
    assert!(
        h.incidents()
            .expect("incidents")
            .iter()
            .all(|i| i.uuid != incident.uuid),
        "forgotten once its jobs ended"
    );
    let (status, body) = ask_grant(&url, &node(2)).await;
    assert_eq!(status, 201, "a grant of node2 once the job ended: {body}");
    server.abort();
}
