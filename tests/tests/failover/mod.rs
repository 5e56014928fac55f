//! Two coordinators on two master candidates of one simulated cluster, each talking to its own
//! node's RAPI daemon (which answers only on the master, as Ganeti's does) and reading its own
//! node's ssconf. The master moves in the middle of an evacuation and back: exactly one
//! coordinator acts at a time, the standby never writes, neither exits, and the new master
//! takes the evacuation up.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure is the test failing"
)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nodecare_coordinator::daemon::Coordinator;
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_tests::fake_agent::{FakeAgents, verdict};
use nodecare_tests::harness::{DOMAIN, local_config, node, test_key};
use serde_json::json;

struct Running {
    board: Arc<nodecare_coordinator::reconcile::Board>,
    store: Arc<nodecare_coordinator::store::Store>,
    replicator: Option<Arc<nodecare_coordinator::replica::Replicator>>,
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), nodecare_coordinator::reconcile::RoundError>>,
    ssconf: tempfile::TempDir,
    _state: tempfile::TempDir,
}

impl Running {
    fn acting(&self) -> bool {
        self.board.acting.load(Ordering::Relaxed)
    }

    fn set_ssconf_master(&self, master: &str) {
        std::fs::write(
            self.ssconf.path().join("ssconf_master_node"),
            format!("{master}\n"),
        )
        .unwrap();
    }
}

async fn start(sim: &Simulation, agents: &FakeAgents, on: &str, master: &str) -> Running {
    start_with(sim, agents, on, master, false).await
}

async fn start_with(
    sim: &Simulation,
    agents: &FakeAgents,
    on: &str,
    master: &str,
    replication: bool,
) -> Running {
    start_in(
        tempfile::tempdir().unwrap(),
        sim,
        agents,
        on,
        master,
        replication,
    )
    .await
}

/// [`start_with`] on the state already in `state`.
async fn start_in(
    state: tempfile::TempDir,
    sim: &Simulation,
    agents: &FakeAgents,
    on: &str,
    master: &str,
    replication: bool,
) -> Running {
    let ganeti: Arc<dyn Ganeti> = Arc::new(sim.client_on(on));
    start_on(state, agents, on, master, replication, ganeti, |_| {}).await
}

/// A coordinator on `on`, on the state in `state`, talking to Ganeti through `ganeti`, its
/// configuration tweaked by `tweak`. With replication, a lease of 0.2 s and calls bounded by the
/// agents' timeout (2 s): a new master waits 2.4 s after its read.
async fn start_on(
    state: tempfile::TempDir,
    agents: &FakeAgents,
    on: &str,
    master: &str,
    replication: bool,
    ganeti: Arc<dyn Ganeti>,
    tweak: impl FnOnce(&mut nodecare_coordinator::config::Config),
) -> Running {
    let ssconf = tempfile::tempdir().unwrap();
    let mut config = local_config(state.path(), agents);
    config.replication.enabled = replication;
    config.replication.lease = 0.2;
    config.rapi.timeout = 0.5;
    config.max_disrupted_nodes = 1;
    let users = state.path().join("users");
    nodecare_tests::harness::write_secret(&users, "admin secret write\n").unwrap();
    config.users = users;
    config.node_name = Some(on.to_owned());
    config.round_interval = 0.05;
    config.ssconf_dir = ssconf.path().to_path_buf();
    tweak(&mut config);
    config.validate().unwrap();
    let coordinator = Coordinator::new(&config, on.to_owned(), ganeti, test_key()).unwrap();
    let board = Arc::clone(&coordinator.api().board);
    let store = Arc::clone(&coordinator.api().store);
    let replicator = coordinator.api().replicator.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(coordinator.run(listener, async {
        let _stopped = stopped.await;
    }));
    let running = Running {
        board,
        store,
        replicator,
        addr,
        stop,
        task,
        ssconf,
        _state: state,
    };
    running.set_ssconf_master(master);
    running
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn primaries_on(sim: &Simulation, name: &str) -> usize {
    sim.with_cluster(|c| c.instances.values().filter(|i| i.pnode == name).count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_coordinator_acts_while_the_master_moves() {
    let sim = Simulation::new(
        SimConfig::from_spec(
            4,
            "a:diskless:3,b:sharedfile:3,c:diskless:3,d:sharedfile:3,e:diskless:4",
            DOMAIN,
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(300));
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=4 {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    }
    let a = start(&sim, &agents, &node(1), &node(1)).await;
    let b = start(&sim, &agents, &node(2), &node(1)).await;
    wait_for("node1 to act", Duration::from_secs(10), || a.acting()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !b.acting(),
        "the coordinator on a master candidate stands by"
    );

    // node3 goes bad: node1's coordinator drains it and starts evacuating.
    agents
        .get(&node(3))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    wait_for("an evacuation job", Duration::from_secs(20), || {
        sim.submissions().iter().any(|s| {
            s.op_id == "OP_INSTANCE_MIGRATE"
                || s.op_id == "OP_INSTANCE_FAILOVER"
                || s.op_id == "OP_NODE_EVACUATE"
        })
    })
    .await;
    assert!(
        primaries_on(&sim, &node(3)) > 0,
        "failover must happen mid-evacuation"
    );
    let before = sim.writes();
    assert!(
        before.iter().all(|w| w.via == node(1) && w.accepted),
        "{before:#?}"
    );

    // master-failover to node2: Ganeti moves the master, node2's ssconf follows at once, node1's
    // a little later.
    sim.set_master(&node(2)).unwrap();
    b.set_ssconf_master(&node(2));
    tokio::time::sleep(Duration::from_millis(150)).await;
    a.set_ssconf_master(&node(2));
    let failed_over = before.len();
    wait_for("node2 to act", Duration::from_secs(10), || b.acting()).await;
    wait_for("node1 to stand by", Duration::from_secs(10), || !a.acting()).await;
    let settled = sim.writes().len();
    // node2 picks the evacuation up: it drains (again) and moves node3's instances. (Carrying
    // node1's incident and jobs over is the failover state's business, not tested here.)
    wait_for("node2 to move instances", Duration::from_secs(30), || {
        sim.writes()[failed_over..]
            .iter()
            .any(|w| w.via == node(2) && w.path.ends_with("/migrate"))
    })
    .await;
    let after = sim.writes();
    let refused: Vec<_> = after[failed_over..]
        .iter()
        .filter(|w| !w.accepted)
        .collect();
    assert!(
        refused.iter().all(|w| w.via == node(1)),
        "only the old master's writes in flight may be refused: {refused:#?}"
    );
    assert!(
        after[settled..]
            .iter()
            .all(|w| w.via == node(2) && w.accepted),
        "once node1 stood by, only node2 writes: {:#?}",
        &after[settled..]
    );
    assert!(
        after[failed_over..]
            .iter()
            .any(|w| w.via == node(2) && w.accepted),
        "node2 acted"
    );
    assert!(
        !a.task.is_finished() && !b.task.is_finished(),
        "neither exited"
    );

    // And back: node1 acts again, node2 stands by.
    sim.set_master(&node(1)).unwrap();
    a.set_ssconf_master(&node(1));
    b.set_ssconf_master(&node(1));
    wait_for("node1 to act again", Duration::from_secs(10), || a.acting()).await;
    wait_for("node2 to stand by", Duration::from_secs(10), || !b.acting()).await;
    let back = sim.writes().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        sim.writes()[back..].iter().all(|w| w.via == node(1)),
        "a standby never writes"
    );
    println!(
        "writes: {} before the failover, {} after ({} refused in flight)",
        failed_over,
        after.len() - failed_over,
        refused.len()
    );
    for running in [a, b] {
        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
    }
}

fn incident_on(
    store: &nodecare_coordinator::store::Store,
    name: &str,
) -> Option<nodecare_core::incident::Incident> {
    store
        .incidents()
        .unwrap()
        .into_iter()
        .find(|incident| incident.node == name)
}

/// The state follows Ganeti's master: an evacuation started by node1's coordinator is finished
/// by node2's after `master-failover` (the same incident, no intent submitted twice), and an
/// incident the operator canceled on node1 stays canceled on node2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_follows_the_master() {
    use nodecare_core::incident::RepairStatus;
    let sim = Simulation::new(
        SimConfig::from_spec(
            4,
            "a:diskless:4,b:sharedfile:4,c:diskless:4,d:sharedfile:4,e:diskless:3",
            DOMAIN,
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(1500));
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=4 {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    }
    let a = start_with(&sim, &agents, &node(1), &node(1), true).await;
    let b = start_with(&sim, &agents, &node(2), &node(1), true).await;
    wait_for("node1 to act", Duration::from_secs(10), || a.acting()).await;
    // The master candidates (node1..node3) keep node1's first state; node4 is no candidate.
    let first = agents.get(&node(2)).unwrap().replica_held().await.unwrap();
    assert_eq!(first.epoch, 1);
    assert_eq!(agents.get(&node(4)).unwrap().replica_held().await, None);
    assert!(!b.acting());

    // node4 goes bad and starts evacuating; node3 goes bad too and waits for the budget; the
    // operator cancels node3's incident on node1.
    agents
        .get(&node(4))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    wait_for("an evacuation job", Duration::from_secs(20), || {
        sim.submissions()
            .iter()
            .any(|s| s.op_id == "OP_INSTANCE_MIGRATE")
    })
    .await;
    agents
        .get(&node(3))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdd"}), None));
    wait_for("node3's incident", Duration::from_secs(10), || {
        incident_on(&a.store, &node(3)).is_some()
    })
    .await;
    let waiting = incident_on(&a.store, &node(3)).unwrap();
    assert_eq!(
        waiting.repair_status,
        RepairStatus::Noted,
        "the budget holds it"
    );
    let canceled = reqwest::Client::new()
        .post(format!(
            "http://{}/1/incidents/{}/cancel",
            a.addr, waiting.uuid
        ))
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert!(canceled.status().is_success(), "{canceled:?}");
    let replicated = canceled
        .headers()
        .get("x-nodecare-replication")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(replicated.starts_with("kept by a majority"), "{replicated}");
    assert!(
        primaries_on(&sim, &node(4)) > 0,
        "failover must happen mid-evacuation"
    );
    let evacuation = incident_on(&a.store, &node(4)).unwrap();

    // master-failover to node2; node1's own node is gone with it (its agent too).
    sim.set_master(&node(2)).unwrap();
    b.set_ssconf_master(&node(2));
    agents.get(&node(1)).unwrap().set_down(true);
    tokio::time::sleep(Duration::from_millis(150)).await;
    a.set_ssconf_master(&node(2));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.acting() {
        assert!(
            Instant::now() < deadline,
            "node2 does not act: {:?}; last round: {:?}",
            b.replicator.as_ref().unwrap().status(),
            b.board.last_round.read().unwrap().error
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = b.replicator.as_ref().unwrap().status();
    assert_eq!(status.generation.map(|g| g.epoch), Some(first.epoch + 1));
    assert!(status.restored_from.is_some(), "{status:?}");

    // node2 finishes node1's evacuation: the same incident, completed.
    wait_for(
        "the evacuation to complete on node2",
        Duration::from_secs(40),
        || {
            incident_on(&b.store, &node(4))
                .is_some_and(|i| i.repair_status == RepairStatus::Completed)
        },
    )
    .await;
    assert_eq!(
        incident_on(&b.store, &node(4)).unwrap().uuid,
        evacuation.uuid
    );
    assert_eq!(primaries_on(&sim, &node(4)), 0);
    // With the budget free again, the canceled incident stays canceled: node3 untouched.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let on_node3 = incident_on(&b.store, &node(3)).unwrap();
    assert_eq!(on_node3.uuid, waiting.uuid);
    assert_eq!(on_node3.repair_status, RepairStatus::Canceled);
    assert!(
        sim.with_cluster(|c| c
            .instances
            .get(&format!("e.{DOMAIN}"))
            .map(|i| i.pnode.clone()))
            == Some(node(3))
            && !sim.with_cluster(|c| c.nodes[&node(3)].drained),
        "node3 neither drained nor emptied"
    );
    assert!(
        sim.writes().iter().all(|w| !w.path.contains(&node(3))),
        "nothing written for node3"
    );
    assert_eq!(
        sim.duplicate_intents(),
        Vec::<String>::new(),
        "no intent twice"
    );
    assert!(!a.acting());
    for running in [a, b] {
        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
    }
}

/// What is only history never stops what must be replicated: with a flight recorder past the
/// replica limit (at 1 000 nodes, rounds that each decide anew), the audit log and the overrides
/// filled by writers with the longest reasons, the coordinator still pushes its state to a
/// majority of the master candidates and an incident acts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorder_past_the_replica_limit_does_not_stop_an_incident() {
    use nodecare_protocol::replica::MAX_REPLICA_BYTES;
    let sim = Simulation::new(
        SimConfig::from_spec(4, "a:diskless:4,b:sharedfile:4,c:diskless:1", DOMAIN).unwrap(),
    )
    .unwrap();
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=4 {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    {
        let store = nodecare_coordinator::store::Store::open_dir(state.path()).unwrap();
        let workload = nodecare_tests::state_growth::Workload {
            nodes: 1000,
            rounds: 0,
            audit_per_round: 0,
            overrides_per_round: 0,
            retention_every: u64::MAX,
        };
        let mut round = 0;
        while store.recorder_size().unwrap().2 <= MAX_REPLICA_BYTES {
            store
                .record_round(&nodecare_tests::state_growth::changing_round(
                    round,
                    workload.nodes,
                ))
                .unwrap();
            round += 1;
        }
        // Writers fill the audit log and the overrides as far as the state lets them.
        let fill = nodecare_tests::state_growth::Workload {
            rounds: 40,
            audit_per_round: 200,
            overrides_per_round: 60,
            nodes: 4,
            ..workload
        };
        let figures = nodecare_tests::state_growth::grow(
            &store,
            &fill,
            &nodecare_coordinator::store::retention::RetentionConfig::default().policy(),
            1,
        )
        .unwrap();
        assert!(figures.overrides_refused > 0, "{figures:?}");
        assert!(
            figures.max_snapshot_bytes < MAX_REPLICA_BYTES / 2,
            "the replicated state stays well under the limit: {figures:?}"
        );
    }
    let a = start_in(state, &sim, &agents, &node(1), &node(1), true).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a.acting() {
        assert!(
            Instant::now() < deadline,
            "node1 does not act (snapshot of {} bytes): {:?}; last round: {:?}",
            a.store.snapshot_bytes().unwrap(),
            a.replicator.as_ref().unwrap().status(),
            a.board.last_round.read().unwrap().error
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agents
        .get(&node(4))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sim
        .submissions()
        .iter()
        .any(|s| s.op_id == "OP_INSTANCE_MIGRATE" || s.op_id == "OP_NODE_SET_PARAMS")
    {
        assert!(
            Instant::now() < deadline,
            "the evacuation never starts: {:?}; last round: {:?}",
            a.replicator.as_ref().unwrap().status(),
            a.board.last_round.read().unwrap().error
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = a.replicator.as_ref().unwrap().status();
    assert!(status.kept_by.len() >= 2, "{status:?}");
    assert!(status.error.is_none(), "{status:?}");
    a.stop.send(()).unwrap();
    a.task.await.unwrap().unwrap();
}

/// One write a coordinator started: when it was admitted (the replication confirmed it) and when
/// it reached Ganeti.
#[derive(Debug, Clone)]
struct TimedWrite {
    by: String,
    what: String,
    started: Instant,
    reached: Option<Instant>,
}

/// A Ganeti client recording when each write starts and reaches Ganeti, each write taking
/// `delay` on its way (a RAPI request in flight, a RAPI daemon slow to take it).
#[derive(Debug)]
struct TimedWrites {
    inner: nodecare_ganeti::rapi::client::RapiClient,
    by: String,
    delay: Duration,
    log: Arc<std::sync::Mutex<Vec<TimedWrite>>>,
}

impl TimedWrites {
    async fn write<T>(
        &self,
        what: String,
        call: impl std::future::Future<Output = Result<T, nodecare_ganeti::GanetiError>>,
    ) -> Result<T, nodecare_ganeti::GanetiError> {
        let index = {
            let mut log = self.log.lock().unwrap();
            log.push(TimedWrite {
                by: self.by.clone(),
                what,
                started: Instant::now(),
                reached: None,
            });
            log.len() - 1
        };
        tokio::time::sleep(self.delay).await;
        self.log.lock().unwrap()[index].reached = Some(Instant::now());
        call.await
    }
}

impl Ganeti for TimedWrites {
    fn cluster_info(&self) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::ClusterInfo> {
        Ganeti::cluster_info(&self.inner)
    }
    fn nodes(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Node>> {
        Ganeti::nodes(&self.inner)
    }
    fn instances(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Instance>> {
        Ganeti::instances(&self.inner)
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "the wrapper passes on what the coordinator submits"
    )]
    fn submit<'a>(
        &'a self,
        op: &'a nodecare_ganeti::Op,
        reason: &'a nodecare_ganeti::Reason,
    ) -> nodecare_ganeti::GanetiFuture<'a, nodecare_ganeti::JobId> {
        Box::pin(self.write(format!("{op:?}"), Ganeti::submit(&self.inner, op, reason)))
    }
    fn groups(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Group>> {
        Ganeti::groups(&self.inner)
    }
    fn tags<'a>(
        &'a self,
        target: &'a nodecare_ganeti::TagTarget,
    ) -> nodecare_ganeti::GanetiFuture<'a, Vec<String>> {
        Ganeti::tags(&self.inner, target)
    }
    fn job(
        &self,
        id: nodecare_ganeti::JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::Job> {
        Ganeti::job(&self.inner, id)
    }
    fn jobs(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::JobSummary>> {
        Ganeti::jobs(&self.inner)
    }
    fn cancel_job(
        &self,
        id: nodecare_ganeti::JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::JobCancel> {
        Box::pin(self.write(format!("cancel {id}"), Ganeti::cancel_job(&self.inner, id)))
    }
}

/// The old master's last write, confirmed just before the new master's takeover read, reaches
/// Ganeti after the failover (its RAPI request is slow; it reaches the cluster's master wherever
/// it is, as through the cluster's address). The new master waits out the old one's lease
/// (0.5 s) and the longest a write may take (the RAPI timeout, 2.5 s), a tenth more, from the end
/// of its read: every write of the old master has reached Ganeti before the first of the new
/// master's, and the new master adopts the old one's job instead of submitting its intent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_master_writes_only_after_the_old_masters_lease() {
    let sim = Simulation::new(
        SimConfig::from_spec(
            4,
            "a:diskless:4,b:sharedfile:4,c:diskless:4,d:sharedfile:4,e:diskless:3",
            DOMAIN,
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(300));
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=4 {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    }
    let log = Arc::new(std::sync::Mutex::new(Vec::<TimedWrite>::new()));
    let delay = Duration::from_secs(2);
    let lease = |config: &mut nodecare_coordinator::config::Config| {
        config.replication.lease = 0.5;
        config.rapi.timeout = 2.5;
    };
    let old = TimedWrites {
        inner: sim.client(),
        by: node(1),
        delay,
        log: Arc::clone(&log),
    };
    let a = start_on(
        tempfile::tempdir().unwrap(),
        &agents,
        &node(1),
        &node(1),
        true,
        Arc::new(old),
        lease,
    )
    .await;
    let new = TimedWrites {
        inner: sim.client_on(&node(2)),
        by: node(2),
        delay: Duration::ZERO,
        log: Arc::clone(&log),
    };
    let b = start_on(
        tempfile::tempdir().unwrap(),
        &agents,
        &node(2),
        &node(1),
        true,
        Arc::new(new),
        lease,
    )
    .await;
    wait_for("node1 to act", Duration::from_secs(10), || a.acting()).await;

    // node4 goes bad: node1 starts its evacuation; its first write is on its way when the
    // master fails over to node2.
    agents
        .get(&node(4))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    wait_for("node1's first write", Duration::from_secs(20), || {
        !log.lock().unwrap().is_empty()
    })
    .await;
    sim.set_master(&node(2)).unwrap();
    b.set_ssconf_master(&node(2));
    agents.get(&node(1)).unwrap().set_down(true);
    a.set_ssconf_master(&node(2));
    wait_for("node2 to write", Duration::from_secs(30), || {
        log.lock().unwrap().iter().any(|w| w.by == node(2))
    })
    .await;
    // Every write of node1 (those confirmed before node2's promises) is in Ganeti before
    // node2's first.
    let writes = log.lock().unwrap().clone();
    let first_of_new = writes
        .iter()
        .filter(|w| w.by == node(2))
        .map(|w| w.started)
        .min()
        .unwrap();
    let old_writes: Vec<&TimedWrite> = writes.iter().filter(|w| w.by == node(1)).collect();
    assert!(!old_writes.is_empty());
    for write in &old_writes {
        let reached = write.reached.unwrap_or_else(|| {
            panic!("node1's write {} still on its way: {writes:#?}", write.what)
        });
        assert!(
            reached < first_of_new,
            "node1's {} reached Ganeti {:?} after node2's first write: {writes:#?}",
            write.what,
            reached - first_of_new
        );
    }
    // node2 takes node1's job up from Ganeti's queue rather than submitting it again.
    wait_for("node2 to move instances", Duration::from_secs(30), || {
        sim.submissions()
            .iter()
            .any(|s| s.op_id == "OP_INSTANCE_MIGRATE" || s.op_id == "OP_INSTANCE_FAILOVER")
    })
    .await;
    assert_eq!(
        sim.duplicate_intents(),
        Vec::<String>::new(),
        "no intent twice"
    );
    for running in [a, b] {
        running.stop.send(()).unwrap();
        running.task.await.unwrap().unwrap();
    }
}
