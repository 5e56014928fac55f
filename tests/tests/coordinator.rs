//! Coordinator end to end against the simulated Ganeti and fake agents (one test binary).

mod campaign;
mod crash;
mod failover;
mod faults;
mod gate;
mod monitoring;
mod node_repair;
mod soak;
mod state_growth;
mod watchdog;
mod what_if;

use nodecare_coordinator::reconcile::{CancelOutcome, RoundError, cancel_incident};
use nodecare_core::incident::{RepairStatus, TAG_FAILED_PREFIX, TAG_READY_PREFIX};
use nodecare_ganeti_sim::model::JobFailureRule;
use nodecare_tests::fake_agent::{RepairBehaviour, verdict};
use nodecare_tests::harness::{Harness, node};
use serde_json::json;
use std::time::Duration;

fn evacuate() -> nodecare_protocol::NodeVerdict {
    verdict(
        "evacuate",
        json!({"disk": "sdb", "smart": "reallocated sectors"}),
        None,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evacuation_runs_to_completion_and_acknowledgement_forgets() {
    let mut h = Harness::new(4, "a:drbd:2,b:diskless:2,c:sharedfile:2,d:drbd:3", |_| {})
        .await
        .unwrap();
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    let done = h
        .until(20, |i| {
            i.len() == 1 && i[0].repair_status == RepairStatus::Completed
        })
        .await
        .unwrap();
    let incident = h.incidents().unwrap().remove(0);
    assert!(done, "{incident:#?}");
    assert_eq!(incident.node, node(2));
    assert!(incident.tag.starts_with(TAG_READY_PREFIX));
    assert!(h.node_tags(&node(2)).contains(&incident.tag));
    // Node 2 is drained and empty: d (secondary on node2? no, node3->node4) unaffected, a moved.
    let (offline, left) = h.sim.with_cluster(|c| {
        let offline = c.nodes[&node(2)].offline;
        let left: Vec<String> = c
            .instances
            .values()
            .filter(|i| i.pnode == node(2) || i.snodes.contains(&node(2)))
            .map(|i| i.name.clone())
            .collect();
        (offline, left)
    });
    // Evacuate means evacuate and offline (the offline flag replaces the drained one).
    assert!(offline);
    assert!(left.is_empty(), "{left:?}");
    assert!(h.sim.duplicate_intents().is_empty());
    // maintd's /1/evacuated lists what was moved off the node.
    let moved = nodecare_coordinator::http::evacuated_instances(
        &h.coordinator.api().store.intents().unwrap(),
    );
    assert_eq!(moved, vec!["a.sim.test", "b.sim.test", "c.sim.test"]);
    // Every job carries our reason with the incident uuid.
    let ours: Vec<_> = h
        .sim
        .submissions()
        .into_iter()
        .filter(|s| !s.internal)
        .collect();
    assert!(
        ours.iter().all(|s| s
            .intent
            .as_deref()
            .is_some_and(|i| i.starts_with(&incident.uuid.to_string()))),
        "{ours:#?}"
    );
    // Removing the tag acknowledges. The offline node reports nothing, so the acknowledged
    // incident is forgotten at the next round; the node stays offline (no `undrain_on_ack`).
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
    h.round().await.unwrap();
    assert!(h.incidents().unwrap()[0].acknowledged);
    h.round().await.unwrap();
    assert!(h.incidents().unwrap().is_empty());
    assert!(h.sim.with_cluster(|c| c.nodes[&node(2)].offline));
    // Back online and repaired: nothing new.
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("Ok", json!(null), None));
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().offline = false);
    h.round().await.unwrap();
    assert!(h.incidents().unwrap().is_empty());
}

/// Collects the coordinator's log lines of the current thread.
#[derive(Clone, Default)]
struct LogLines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogLines {
    fn text(&self) -> String {
        self.0
            .lock()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

/// Issue 11, defect 6: acknowledging (tag removed) is recorded, saved and logged once, not
/// every round while the verdict is still observed.
#[tokio::test(flavor = "current_thread")]
async fn acknowledgement_happens_once() {
    let lines = LogLines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // The node stays online (drained), so its agent is read and still reports the problem.
    let mut h = Harness::new(4, "b:diskless:2", |c| c.offline_after_evacuation = false)
        .await
        .unwrap();
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    assert!(
        h.until(20, |i| i.len() == 1
            && i[0].repair_status == RepairStatus::Completed)
            .await
            .unwrap()
    );
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
    h.round().await.unwrap();
    let acknowledged = h.incidents().unwrap().remove(0);
    assert!(acknowledged.acknowledged);
    // Still observed: the incident stays, and nothing about it changes any more.
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let later = h.incidents().unwrap().remove(0);
    assert_eq!(later, acknowledged);
    let text = lines.text();
    assert_eq!(
        text.matches("tag removed; acknowledged").count(),
        1,
        "{text}"
    );
}

/// Issue 11, defect 1: with one node drained by nodecare's incident, a node drained by hand
/// whose agent says `evacuate` waits with `blocked_by` while the budget is used, and is emptied
/// once the operator undrains the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_drained_node_waits_while_the_budget_is_used() {
    let mut h = Harness::new(4, "a:diskless:3,b:diskless:2,c:sharedfile:2", |_| {})
        .await
        .unwrap();
    h.agents.get(&node(3)).unwrap().set_verdict(evacuate());
    assert!(
        h.until(20, |i| i.len() == 1
            && i[0].repair_status == RepairStatus::Completed)
            .await
            .unwrap()
    );
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().drained = true);
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    for _ in 0..5 {
        h.round().await.unwrap();
    }
    let waiting = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(2))
        .unwrap();
    assert!(
        waiting
            .blocked_by
            .as_deref()
            .is_some_and(|b| b.starts_with("cap: cluster") && b.contains(&node(3))),
        "{waiting:#?}"
    );
    assert!(waiting.jobs.is_empty(), "{waiting:#?}");
    let on_node2 = |h: &Harness| {
        h.sim
            .with_cluster(|c| c.instances.values().filter(|i| i.pnode == node(2)).count())
    };
    assert_eq!(on_node2(&h), 2);
    // The operator returns node 3 to service: node 2's evacuation proceeds.
    h.sim.with_cluster(|c| {
        let n3 = c.nodes.get_mut(&node(3)).unwrap();
        assert!(n3.offline && !n3.drained);
        n3.offline = false;
        n3.tags.clear();
    });
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    assert_eq!(on_node2(&h), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_instance_fails_the_incident_explicitly() {
    let mut h = Harness::new(3, "p:plain:2", |_| {}).await.unwrap();
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    let done = h
        .until(6, |i| {
            i.len() == 1 && i[0].repair_status == RepairStatus::Failed && i[0].tag_applied
        })
        .await
        .unwrap();
    let incident = h.incidents().unwrap().remove(0);
    assert!(done, "{incident:#?}");
    assert!(incident.failure.as_deref().unwrap_or("").contains("plain"));
    assert!(
        h.node_tags(&node(2))
            .iter()
            .any(|t| t.starts_with(TAG_FAILED_PREFIX))
    );
    // Nothing was touched: the node was not drained.
    assert!(!h.sim.with_cluster(|c| c.nodes[&node(2)].drained));
    // Removing the failure tag forgets at once; the still-present problem starts a new flow.
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
    h.round().await.unwrap();
    let now = h.incidents().unwrap();
    assert!(now.iter().all(|i| i.uuid != incident.uuid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_failed_job_stops_the_incident() {
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:2", |_| {})
        .await
        .unwrap();
    h.sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_INSTANCE_MIGRATE".into()),
        target: None,
        count: None,
        message: "no memory".into(),
    });
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    let done = h
        .until(8, |i| {
            i.len() == 1 && i[0].repair_status == RepairStatus::Failed && i[0].tag_applied
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents());
    let before = h.sim.submissions().len();
    h.round().await.unwrap();
    h.round().await.unwrap();
    assert_eq!(
        h.sim.submissions().len(),
        before,
        "no further jobs after the failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_repair_success_and_failure_follow_the_exit_code() {
    let mut h = Harness::new(3, "", |_| {}).await.unwrap();
    let agent2 = h.agents.get(&node(2)).unwrap().clone();
    agent2.set_verdict(verdict("live-repair", json!({"fan": 2}), Some("reset-fan")));
    let agent3 = h.agents.get(&node(3)).unwrap().clone();
    agent3.set_verdict(verdict("live-repair", json!({"nic": 1}), Some("reset-nic")));
    agent3.set_repair(RepairBehaviour {
        exit_code: 3,
        duration: Duration::from_millis(50),
    });
    let done = h
        .until(8, |i| {
            i.len() == 2 && i.iter().all(|i| !i.is_active() && i.tag_applied)
        })
        .await
        .unwrap();
    let incidents = h.incidents().unwrap();
    assert!(done, "{incidents:#?}");
    let on = |n: String| incidents.iter().find(|i| i.node == n).unwrap().clone();
    assert_eq!(on(node(2)).repair_status, RepairStatus::Completed);
    assert_eq!(on(node(3)).repair_status, RepairStatus::Failed);
    assert!(on(node(3)).failure.unwrap().contains("exit code 3"));
    assert_eq!(agent2.repairs(), vec![on(node(2)).uuid.to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceled_incident_takes_no_action_and_is_forgotten_when_gone() {
    let mut h = Harness::new(4, "a:diskless:2", |c| c.max_disrupted_nodes = 1)
        .await
        .unwrap();
    // Node 3 is drained by an operator: the budget blocks node 2's evacuation.
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(3)).unwrap().drained = true);
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    h.round().await.unwrap();
    let incident = h.incidents().unwrap().remove(0);
    assert_eq!(incident.repair_status, RepairStatus::Noted);
    assert!(
        incident
            .blocked_by
            .as_deref()
            .unwrap_or("")
            .contains("max_disrupted_nodes"),
        "{incident:?}"
    );
    let api = h.coordinator.api().clone();
    assert_eq!(
        cancel_incident(&api.store, incident.uuid).await.unwrap(),
        CancelOutcome::Canceled
    );
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(3)).unwrap().drained = false);
    h.round().await.unwrap();
    h.round().await.unwrap();
    assert!(
        h.sim.submissions().is_empty(),
        "a canceled incident submits nothing"
    );
    assert_eq!(
        h.incidents().unwrap()[0].repair_status,
        RepairStatus::Canceled
    );
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("Ok", json!(null), None));
    h.round().await.unwrap();
    assert!(h.incidents().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_or_forged_reports_never_act_and_are_visible() {
    let mut h = Harness::new(3, "a:diskless:2", |_| {}).await.unwrap();
    h.agents.get(&node(2)).unwrap().set_down(true);
    // Node 3 signs with another key: unverifiable.
    let forged_key = nodecare_protocol::HmacKey::new(b"not the cluster key".to_vec());
    let mut forger = nodecare_tests::fake_agent::FakeAgents::default();
    let fake = forger
        .start(&node(3), &forged_key, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    fake.set_verdict(evacuate());
    let mut config = h.config.clone();
    std::sync::Arc::make_mut(&mut config.agents.overrides).insert(node(3), fake.url());
    let ganeti: std::sync::Arc<dyn nodecare_ganeti::Ganeti> = std::sync::Arc::new(h.sim.client());
    h.coordinator =
        nodecare_coordinator::daemon::Coordinator::new(&config, node(1), ganeti, h.key.clone())
            .unwrap();
    let summary = h.round().await.unwrap();
    assert_eq!(summary.agents_failed, 2);
    assert!(h.incidents().unwrap().is_empty());
    let agents = h.coordinator.api().board.agents.read().unwrap().clone();
    assert_eq!(agents[&node(2)].state.as_str(), "unreachable");
    assert_eq!(agents[&node(3)].state.as_str(), "unverifiable");
    assert!(h.sim.submissions().is_empty());
}

/// Defect: a coordinator that read the agents before they answered (the whole cluster booting,
/// or the demo on a loaded machine) opened the storm breaker, which only an operator closes.
/// Agents never read verified are no storm; agents that stop answering are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_not_yet_answering_open_no_breaker_and_agents_that_stop_do() {
    let mut h = Harness::new(4, "a:diskless:2", |_| {}).await.unwrap();
    for n in 2..=4 {
        h.agents.get(&node(n)).unwrap().set_down(true);
    }
    let summary = h.round().await.unwrap();
    assert_eq!(summary.agents_failed, 3);
    let breaker = h.coordinator.api().store.breaker().unwrap();
    assert!(!breaker.open, "{breaker:?}");
    for n in 2..=4 {
        h.agents.get(&node(n)).unwrap().set_down(false);
    }
    assert_eq!(h.round().await.unwrap().agents_failed, 0);
    for n in 2..=4 {
        h.agents.get(&node(n)).unwrap().set_down(true);
    }
    assert_eq!(h.round().await.unwrap().agents_failed, 3);
    let breaker = h.coordinator.api().store.breaker().unwrap();
    assert!(breaker.open, "{breaker:?}");
    assert!(
        breaker
            .why
            .as_deref()
            .is_some_and(|why| why.contains("3 of 4 agents unreachable")),
        "{breaker:?}"
    );
}

/// Agents verified before a restart (or a master failover: the state is replicated) have their
/// sequence numbers in the state: when they stop answering, a restarted coordinator still counts
/// them for the storm breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_verified_before_a_restart_still_count_for_the_breaker() {
    let mut h = Harness::new(4, "a:diskless:2", |_| {}).await.unwrap();
    assert_eq!(h.round().await.unwrap().agents_failed, 0);
    for n in 2..=4 {
        h.agents.get(&node(n)).unwrap().set_down(true);
    }
    let ganeti: std::sync::Arc<dyn nodecare_ganeti::Ganeti> = std::sync::Arc::new(h.sim.client());
    let fresh =
        nodecare_coordinator::daemon::Coordinator::new(&h.config, node(1), ganeti, h.key.clone())
            .unwrap();
    drop(std::mem::replace(&mut h.coordinator, fresh));
    assert_eq!(h.round().await.unwrap().agents_failed, 3);
    let breaker = h.coordinator.api().store.breaker().unwrap();
    assert!(breaker.open, "{breaker:?}");
}

fn agent_state(h: &Harness, name: &str) -> Option<nodecare_coordinator::scrape::AgentStatus> {
    h.coordinator
        .api()
        .board
        .agents
        .read()
        .ok()?
        .get(name)
        .cloned()
}

/// Defect: a static server replaying a stopped agent's last `Ok` kept the node `ok` long after
/// the report expired, masking whatever happened to the node since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_ok_of_a_stopped_agent_reads_stale_after_expiry() {
    let mut h = Harness::new(3, "a:diskless:2", |_| {}).await.unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    let lifetime = Duration::from_millis(1_500);
    agent.set_ttl(lifetime);
    h.round().await.unwrap();
    assert_eq!(agent_state(&h, &node(2)).unwrap().state.as_str(), "ok");
    // The agent stops; something serves its last envelope from now on.
    assert!(agent.replay_last());
    let stopped = std::time::Instant::now();
    h.round().await.unwrap();
    let first = agent_state(&h, &node(2)).unwrap();
    if stopped.elapsed() < lifetime {
        // Still within the report's life: the same report read again.
        assert_eq!(first.state.as_str(), "ok", "{first:?}");
    }
    // Within one report lifetime after the stop, the node reads stale, never ok again.
    tokio::time::sleep(lifetime.saturating_sub(stopped.elapsed()) + Duration::from_millis(100))
        .await;
    for _ in 0..3 {
        let summary = h.round().await.unwrap();
        let status = agent_state(&h, &node(2)).unwrap();
        assert_eq!(status.state.as_str(), "stale", "{status:?}");
        assert_eq!(status.verdict.map(|v| v.as_str()), Some("Ok"));
        assert!(
            status.error.as_deref().unwrap_or("").contains("expired"),
            "{status:?}"
        );
        assert_eq!(summary.jobs_submitted, 0);
    }
    // The replayed report is older than the skew: even a coordinator that never saw it
    // calls it stale.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    h.round().await.unwrap();
    assert_eq!(agent_state(&h, &node(2)).unwrap().state.as_str(), "stale");
    assert!(h.incidents().unwrap().is_empty());
}

/// Defect: a captured `evacuate` envelope served after its expiry was acted on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_evacuate_after_expiry_starts_nothing() {
    let mut h = Harness::new(3, "a:diskless:2", |_| {}).await.unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    // Seen while fresh only as Ok; an evacuate report signed now but first served late.
    h.round().await.unwrap();
    agent.set_verdict(evacuate());
    agent.freeze(Duration::from_millis(500));
    // 3 s after its expiry (beyond the default clock skew of 2 s).
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    for _ in 0..2 {
        let summary = h.round().await.unwrap();
        assert_eq!(summary.jobs_submitted, 0);
        let status = agent_state(&h, &node(2)).unwrap();
        assert_eq!(status.state.as_str(), "stale", "{status:?}");
        assert_eq!(status.verdict.map(|v| v.as_str()), Some("evacuate"));
    }
    assert!(h.incidents().unwrap().is_empty());
    assert!(h.sim.submissions().is_empty());
    assert!(!h.sim.with_cluster(|c| c.nodes[&node(2)].drained));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_master_refuses_to_act() {
    let h = Harness::new(2, "", |c| c.node_name = Some(node(2)))
        .await
        .unwrap();
    let ganeti: std::sync::Arc<dyn nodecare_ganeti::Ganeti> = std::sync::Arc::new(h.sim.client());
    let mut coordinator =
        nodecare_coordinator::daemon::Coordinator::new(&h.config, node(2), ganeti, h.key.clone())
            .unwrap();
    assert!(matches!(
        coordinator.round().await,
        Err(RoundError::NotMaster { .. })
    ));
}

#[allow(clippy::unwrap_used, reason = "test helper")]
async fn get_json(client: &reqwest::Client, url: String) -> serde_json::Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

#[allow(clippy::unwrap_used, reason = "test helper")]
async fn status_of(request: reqwest::RequestBuilder) -> reqwest::StatusCode {
    request.send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_api_serves_maintd_shapes_and_cancel() {
    let mut h = Harness::new(3, "", |_| {}).await.unwrap();
    h.agents.get(&node(2)).unwrap().set_verdict(verdict(
        "live-repair",
        json!({"x": 1}),
        Some("fix"),
    ));
    h.agents.get(&node(2)).unwrap().set_repair(RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_secs(3600),
    });
    h.round().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let users = h.state_dir.path().join("users");
    nodecare_tests::harness::write_secret(
        &users,
        "# test users\nadmin secret write\nviewer look read\n",
    )
    .unwrap();
    let mut api = h.coordinator.api().clone();
    api.users = Some(users);
    let app = nodecare_coordinator::http::router(api);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    let root = get_json(&client, format!("{base}/")).await;
    assert_eq!(root, json!([1]));
    // A browser asking for HTML is sent to the web page.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = browser
        .get(format!("{base}/"))
        .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 303);
    assert_eq!(answer.headers()["location"], "/ui/");
    // Ganeti's version, as the round read it, rides beside maintd's list.
    let answer = client.get(format!("{base}/1/status")).send().await.unwrap();
    assert_eq!(answer.headers()["ganeti-version"], "3.0.2");
    let status = get_json(&client, format!("{base}/1/status")).await;
    let entry = &status[0];
    for key in [
        "id",
        "uuid",
        "node",
        "original",
        "action",
        "jobs",
        "repair-status",
        "tag",
        "ctime",
        "mtime",
        "serial_no",
        "node_uuid",
        "fingerprint",
        "history",
        "blocked_by",
        "agent",
    ] {
        assert!(entry.get(key).is_some(), "missing {key} in {entry}");
    }
    assert_eq!(entry["repair-status"], "pending");
    // maintd's `original` is the verdict exactly as the agent signed it; `verdict` is the same,
    // decoded.
    let signed =
        serde_json::to_value(verdict("live-repair", json!({"x": 1}), Some("fix"))).unwrap();
    assert_eq!(entry["original"], signed);
    assert_eq!(entry["verdict"], signed);
    let stored = &h.incidents().unwrap()[0];
    assert_eq!(
        stored.original.get().as_bytes(),
        nodecare_protocol::canonical_bytes(&signed).unwrap()
    );
    assert_eq!(stored.verdict.command.as_deref(), Some("fix"));
    let id = entry["id"].as_str().unwrap().to_owned();
    let jobs = get_json(&client, format!("{base}/1/jobs")).await;
    assert!(jobs.is_array());
    // maintd's /1/evacuated (nothing evacuated here).
    assert_eq!(
        status_of(client.get(format!("{base}/1/evacuated"))).await,
        200
    );
    assert_eq!(
        get_json(&client, format!("{base}/1/evacuated")).await,
        json!([])
    );
    assert_eq!(
        status_of(client.get(format!("{base}/1/incidents/{id}"))).await,
        200
    );
    assert_eq!(
        status_of(client.get(format!("{base}/1/incidents/nope"))).await,
        400
    );
    // Writes need a user with `write`: each refusal is a JSON error, and nothing changes.
    let cancel_url = format!("{base}/1/incidents/{id}/cancel");
    for (request, code, says) in [
        (
            client.post(&cancel_url),
            401,
            "needs HTTP basic authentication",
        ),
        (
            client.post(&cancel_url).basic_auth("admin", Some("wrong")),
            401,
            "unknown user or wrong password",
        ),
        (
            client
                .post(&cancel_url)
                .basic_auth("nobody", Some("secret")),
            401,
            "unknown user or wrong password",
        ),
        (
            client.post(&cancel_url).basic_auth("viewer", Some("look")),
            403,
            "may not write",
        ),
        (
            client.post(&cancel_url).bearer_auth("token"),
            401,
            "unsupported authentication scheme",
        ),
    ] {
        let answer = request.send().await.unwrap();
        assert_eq!(answer.status(), code, "{says}");
        assert!(
            answer.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json")
        );
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["code"], code);
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{body} should say {says}"
        );
    }
    let overview = get_json(&client, format!("{base}/1/overview")).await;
    assert_eq!(overview["incidents"][0]["repair-status"], "pending");
    assert_eq!(
        status_of(client.post(&cancel_url).basic_auth("admin", Some("secret"))).await,
        200
    );
    assert_eq!(
        status_of(
            client
                .post(format!(
                    "{base}/1/incidents/{}/cancel",
                    uuid::Uuid::new_v4()
                ))
                .basic_auth("admin", Some("secret"))
        )
        .await,
        404
    );
    let overview = get_json(&client, format!("{base}/1/overview")).await;
    assert_eq!(overview["incidents"][0]["repair-status"], "canceled");
    assert_eq!(overview["agents"].as_array().unwrap().len(), 3);
    // What `nodecare status` decodes: the coordinator's answer fits the wire types.
    let typed: nodecare_protocol::status::Overview =
        serde_json::from_value(overview.clone()).unwrap();
    assert_eq!(typed.incidents[0].repair_status, "canceled");
    assert!(!typed.incidents[0].tag_applied);
    assert_eq!(typed.round.ganeti_version.as_deref(), Some("3.0.2"));
    server.abort();
}

/// With job chains (the default), a node's whole evacuation is submitted in its first acting
/// round: drain, every move (in waves when targets are busy), repairready tag, each depending on
/// the step before; round by round, the same evacuation takes a round per step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evacuation_is_one_job_chain_in_one_round() {
    let instances = "a:diskless:2,b:diskless:2,c:sharedfile:2,d:diskless:2,e:diskless:2";
    for chains in [true, false] {
        let mut h = Harness::new(5, instances, |c| c.job_chains = chains)
            .await
            .unwrap();
        h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
        let mut per_round = Vec::new();
        for _ in 0..10 {
            per_round.push(h.round().await.unwrap().jobs_submitted);
            let incidents = h.incidents().unwrap();
            if incidents.len() == 1 && incidents[0].repair_status == RepairStatus::Completed {
                break;
            }
        }
        let incident = h.incidents().unwrap().remove(0);
        assert_eq!(
            incident.repair_status,
            RepairStatus::Completed,
            "{incident:#?}"
        );
        assert!(h.node_tags(&node(2)).contains(&incident.tag));
        let acting: Vec<usize> = per_round.iter().copied().filter(|n| *n > 0).collect();
        if chains {
            // 1 drain + 5 moves (4 targets: two waves) + offline + tag, all in one round.
            assert_eq!(acting, vec![8], "{per_round:?}");
            let submissions = h.sim.submissions();
            let ours: Vec<_> = submissions.iter().filter(|s| !s.internal).collect();
            let depends = h.sim.with_cluster(|c| {
                ours.iter()
                    .map(|s| c.jobs[&s.job].depends.len())
                    .collect::<Vec<_>>()
            });
            // Drain: none; first wave: the drain; second wave: the 4 first moves; offline: the
            // second wave; tag: the offline.
            assert_eq!(depends, vec![0, 1, 1, 1, 1, 4, 1, 1], "{ours:#?}");
            let ops: Vec<&str> = ours.iter().map(|s| s.op_id.as_str()).collect();
            assert_eq!(ops[6], "OP_NODE_SET_PARAMS", "{ops:?}");
            assert_eq!(ops[7], "OP_TAGS_SET", "{ops:?}");
        } else {
            // Drain, moves (two rounds: 4 targets), offline, tag: one round each.
            assert_eq!(acting, vec![1, 4, 1, 1, 1], "{per_round:?}");
        }
        // Evacuate means evacuate and offline.
        let (offline, drained) = h
            .sim
            .with_cluster(|c| (c.nodes[&node(2)].offline, c.nodes[&node(2)].drained));
        assert!(offline && !drained);
        assert!(h.sim.duplicate_intents().is_empty());
    }
}

/// A failed job in a chain fails the jobs depending on it (Ganeti does), and the incident
/// names the job that failed first, not the dependents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_chain_names_its_first_failing_job() {
    let mut h = Harness::new(
        4,
        "a:diskless:2,b:diskless:2,c:diskless:2,d:diskless:2",
        |_| {},
    )
    .await
    .unwrap();
    h.sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_INSTANCE_MIGRATE".into()),
        target: Some("b.sim.test".into()),
        count: None,
        message: "no memory".into(),
    });
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate());
    let done = h
        .until(8, |i| {
            i.len() == 1 && i[0].repair_status == RepairStatus::Failed && i[0].tag_applied
        })
        .await
        .unwrap();
    let incident = h.incidents().unwrap().remove(0);
    assert!(done, "{incident:#?}");
    let failed_job = h
        .sim
        .submissions()
        .iter()
        .find(|s| s.target == "b.sim.test")
        .map(|s| s.job)
        .unwrap();
    let failure = incident.failure.clone().unwrap_or_default();
    assert!(
        failure.starts_with(&format!("job {failed_job} error")) && failure.contains("no memory"),
        "{failure}"
    );
    assert!(incident.tag.starts_with(TAG_FAILED_PREFIX));
    assert!(h.node_tags(&node(2)).contains(&incident.tag));
    assert!(
        !h.node_tags(&node(2))
            .iter()
            .any(|t| t.starts_with(TAG_READY_PREFIX)),
        "the chained repairready tag never ran"
    );
    let before = h.sim.submissions().len();
    h.round().await.unwrap();
    assert_eq!(
        h.sim.submissions().len(),
        before,
        "no jobs after the failure"
    );
}

/// A changed verdict reaches the coordinator through the agent's long-poll and starts a round
/// at once: with rounds every hour, only the watch can start the second round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_verdict_change_starts_a_round_at_once() {
    let h = Harness::new(3, "a:drbd:2", |config| config.round_interval = 3600.0)
        .await
        .unwrap();
    let board = std::sync::Arc::clone(&h.coordinator.api().board);
    let rounds = || board.last_round.read().map(|r| r.number).unwrap_or(0);
    let verdict_of = |name: &str| {
        board
            .agents
            .read()
            .ok()
            .and_then(|agents| agents.get(name).and_then(|a| a.verdict))
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(h.coordinator.run(listener, async {
        stopped.await.ok();
    }));
    let wait_until = |what: &'static str, condition: &dyn Fn() -> bool| {
        let started = std::time::Instant::now();
        let ok = loop {
            if condition() {
                break true;
            }
            if started.elapsed() > Duration::from_secs(20) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(ok, "{what}");
    };
    wait_until("the first round", &|| rounds() == 1);
    let agent = h.agents.get(&node(2)).unwrap();
    // The watch is open once the agent has answered it (after the round's read).
    wait_until("the watch's first answer", &|| agent.requests() >= 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rounds(), 1, "no round without a change");
    assert_eq!(
        verdict_of(&node(2)),
        Some(nodecare_protocol::DiagnoseStatus::Ok)
    );

    agent.set_verdict(evacuate());
    wait_until("a round started by the watch", &|| rounds() >= 2);
    assert_eq!(
        verdict_of(&node(2)),
        Some(nodecare_protocol::DiagnoseStatus::Evacuate)
    );

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

/// A Ganeti job that ends starts a round at once (RAPI's job wait): with rounds every hour,
/// once the watch has started the round that submits the evacuation's jobs, only the jobs'
/// ends can start the rounds that follow them to the incident's completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ends_starts_a_round_at_once() {
    let h = Harness::new(4, "a:diskless:2,b:sharedfile:2", |config| {
        config.round_interval = 3600.0;
    })
    .await
    .unwrap();
    h.sim.set_job_delay(Duration::from_millis(300));
    let board = std::sync::Arc::clone(&h.coordinator.api().board);
    let store = std::sync::Arc::clone(&h.coordinator.api().store);
    let rounds = || board.last_round.read().map(|r| r.number).unwrap_or(0);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(h.coordinator.run(listener, async {
        stopped.await.ok();
    }));
    let wait_until = |what: &'static str, limit: Duration, condition: &dyn Fn() -> bool| {
        let started = std::time::Instant::now();
        while !condition() {
            assert!(started.elapsed() < limit, "{what} within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        started.elapsed()
    };
    wait_until("the first round", Duration::from_secs(20), &|| {
        rounds() == 1
    });
    let agent = h.agents.get(&node(2)).unwrap();
    wait_until("the watch's first answer", Duration::from_secs(20), &|| {
        agent.requests() >= 2
    });
    agent.set_verdict(evacuate());
    let completed = || {
        store
            .incidents()
            .unwrap_or_default()
            .iter()
            .any(|i| i.repair_status == RepairStatus::Completed)
    };
    // Drain, two moves, offline and tag: chained jobs of 300 ms each, each one's end a round.
    let took = wait_until(
        "the evacuation's completion",
        Duration::from_secs(10),
        &completed,
    );
    assert!(rounds() >= 3, "rounds: {}", rounds());
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(h.sim.duplicate_intents().is_empty());

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_users_file_writes_are_refused() {
    let mut h = Harness::new(2, "", |config| {
        config.users = std::path::PathBuf::from("/nonexistent/nodecare/users");
    })
    .await
    .unwrap();
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.round().await.unwrap();
    let id = h.incidents().unwrap()[0].uuid;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/1/incidents/{id}/cancel"))
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    let body: serde_json::Value = answer.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("writes are disabled: cannot read users file /nonexistent/nodecare/users"),
        "{message}"
    );
    assert_ne!(
        h.incidents().unwrap()[0].repair_status,
        RepairStatus::Canceled
    );
    server.abort();
}

/// `POST /1/nodes/<node>/check`: with a writer's credentials the coordinator signs a check
/// request to the node's agent (which verifies it) and answers 202 with the agent's answer;
/// without credentials 401, for a node it does not know 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_request_reaches_the_agent_signed() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "admin secret write\n").unwrap();
    let mut h = Harness::new(2, "", |config| config.users = users.clone())
        .await
        .unwrap();
    h.round().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/1/nodes/{}/check", node(2));
    let answer = client.post(&url).send().await.unwrap();
    assert_eq!(answer.status(), 401);
    let answer = client
        .post(&url)
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
    let body: nodecare_protocol::repair::CheckAnswer = answer.json().await.unwrap();
    assert_eq!(body.node, node(2));
    assert_eq!(h.agents.get(&node(2)).unwrap().checks(), 1);
    let answer = client
        .post(format!("http://{addr}/1/nodes/nowhere/check"))
        .basic_auth("admin", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    server.abort();
}
