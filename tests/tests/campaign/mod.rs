//! Rolling maintenance campaigns end to end on the simulated cluster with fake agents: a whole
//! campaign through the API, and a coordinator restarted in the middle of a group (with a
//! submission whose answer was lost) that goes on without submitting any job twice.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use nodecare_coordinator::daemon::Coordinator;
use nodecare_exec::ledger::{Entry, Ledger as _, Op, State};
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::model::{SimJob, SimOp};
use nodecare_protocol::maintenance::{Campaign, CampaignState, NodeStep};
use nodecare_tests::fake_agent::FakeAgents;
use nodecare_tests::harness::{Harness, node};

const NODES: usize = 4;
/// DRBD, diskless and sharedfile instances on every node.
const INSTANCES: &str =
    "d1:drbd:1,s1:sharedfile:1,d2:drbd:2,l2:diskless:2,d3:drbd:3,s3:sharedfile:3,l4:diskless:4";

async fn cluster(users: &std::path::Path) -> Harness {
    cluster_with(users, |_| {}).await
}

/// [`cluster`] with `tweak` applied to the coordinator's configuration as well.
async fn cluster_with(
    users: &std::path::Path,
    tweak: impl FnOnce(&mut nodecare_coordinator::config::Config) + Send + 'static,
) -> Harness {
    let users = users.to_path_buf();
    let h = Harness::new(NODES, INSTANCES, move |config| {
        config.users = users;
        config.max_disrupted_nodes = 2;
        config.min_healthy_nodes = 2;
        tweak(config);
    })
    .await
    .unwrap();
    for i in 1..=NODES {
        h.agents
            .get(&node(i))
            .unwrap()
            .set_boot_id(Some(&format!("boot-{i}-0")));
    }
    h
}

/// Plays the hooks: every node whose agent ran a hook since the last call reboots (a new boot
/// id). Returns the hook runs per node so far.
fn reboot_after_hooks(agents: &FakeAgents, runs: &mut BTreeMap<String, BTreeSet<String>>) {
    for i in 1..=NODES {
        let name = node(i);
        let agent = agents.get(&name).unwrap();
        let seen = runs.entry(name.clone()).or_default();
        for id in agent.repairs() {
            if seen.insert(id) {
                agent.set_boot_id(Some(&format!("boot-{i}-{}", seen.len())));
            }
        }
    }
}

/// Primaries by instance, and whether every instance runs.
fn layout(h: &Harness) -> (BTreeMap<String, String>, bool) {
    h.sim.with_cluster(|c| {
        (
            c.instances
                .values()
                .map(|i| (i.name.clone(), i.pnode.clone()))
                .collect(),
            c.instances.values().all(|i| i.running),
        )
    })
}

fn campaign(h: &Harness) -> Campaign {
    h.coordinator
        .api()
        .store
        .campaigns()
        .unwrap()
        .remove(0)
        .campaign
}

/// The coordinator's API served on loopback: its URL and the server's task.
async fn serve_api(h: &Harness) -> (String, tokio::task::JoinHandle<Result<(), std::io::Error>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    (
        url,
        tokio::spawn(async move { axum::serve(listener, app).await }),
    )
}

/// Starts a campaign rebooting every node as `ops` through the API at `url`.
async fn start_reboot_campaign(url: &str) {
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"hook": "reboot", "reason": "kernel"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_reboots_every_node_and_puts_instances_back() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\nviewer look read\n").unwrap();
    let mut h = cluster(&users).await;
    let (url, server) = serve_api(&h).await;
    let client = reqwest::Client::new();
    let (before, _) = layout(&h);

    // Writes need a writer; bad requests are a clear 400.
    let body = serde_json::json!({"hook": "reboot", "reason": "kernel 6.12"});
    let answer = client
        .post(format!("{url}/1/maintenance"))
        .basic_auth("viewer", Some("look"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 403);
    let answer = client
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"hook": "re boot"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    assert!(answer.text().await.unwrap().contains("hook"));
    let answer = client
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let started: Campaign = answer.json().await.unwrap();
    assert_eq!(started.state, CampaignState::Running);
    assert_eq!(started.who, "ops");
    // One campaign at a time.
    let answer = client
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);

    let mut runs = BTreeMap::new();
    let mut paused_once = false;
    for _ in 0..80 {
        h.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        let (_, all_running) = layout(&h);
        assert!(all_running, "an instance went down: {:#?}", campaign(&h));
        let now: Campaign = client
            .get(format!("{url}/1/maintenance/{}", started.id))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // Pause once in the middle of the first group: nothing moves until resumed.
        if !paused_once && now.groups.len() == 1 && now.groups[0].nodes[0].step == NodeStep::Hook {
            paused_once = true;
            let paused: Campaign = client
                .post(format!("{url}/1/maintenance/{}/pause", started.id))
                .basic_auth("ops", Some("secret"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(paused.state, CampaignState::Paused);
            h.round().await.unwrap();
            h.round().await.unwrap();
            let still = campaign(&h);
            assert_eq!(still.groups[0].nodes[0].step, NodeStep::Hook);
            let answer = client
                .post(format!("{url}/1/maintenance/{}/resume", started.id))
                .basic_auth("ops", Some("secret"))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
        }
        if now.state.is_final() {
            break;
        }
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert!(paused_once);
    // Every node's hook ran exactly once, in groups of at most two nodes.
    for i in 1..=NODES {
        assert_eq!(runs[&node(i)].len(), 1, "hooks of {}", node(i));
    }
    assert!(done.groups.iter().all(|g| g.nodes.len() <= 2));
    assert!(
        done.groups
            .iter()
            .flat_map(|g| &g.nodes)
            .all(|n| n.step == NodeStep::Done)
    );
    assert_eq!(done.nodes_progress(), (NODES, NODES));
    // Instances back on their original primaries, nodes back in service.
    let (after, all_running) = layout(&h);
    assert_eq!(after, before);
    assert!(all_running);
    assert!(h.sim.with_cluster(|c| c.nodes.values().all(|n| !n.drained)));
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    // The jobs carry the campaign in their reason trail.
    let ours = h
        .sim
        .submissions()
        .into_iter()
        .filter(|s| {
            s.reason_text
                .as_deref()
                .is_some_and(|t| t.contains(&format!("maintenance campaign {}", done.id)))
        })
        .count();
    assert!(ours >= 10, "{ours} jobs of the campaign");
    // A finished campaign takes no command.
    let answer = client
        .post(format!("{url}/1/maintenance/{}/abort", started.id))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    let list: nodecare_protocol::maintenance::CampaignList = client
        .get(format!("{url}/1/maintenance"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list.campaigns.len(), 1);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_group_goes_on_without_a_job_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = cluster(&dir.path().join("no-users")).await;
    let (before, _) = layout(&h);
    let record = nodecare_core::campaign::Record::new(
        uuid::Uuid::new_v4(),
        nodecare_protocol::maintenance::CampaignRequest::new("reboot"),
        "ops",
        nodecare_protocol::now_ms(),
    );
    h.coordinator.api().store.save_campaign(&record).unwrap();
    let mut runs = BTreeMap::new();
    let holder = record.holder();
    // The campaign's operations are ledger entries held by the campaign.
    let migrations_submitted = |store: &nodecare_coordinator::store::Store| -> Vec<Entry> {
        store
            .of_holder(&holder)
            .unwrap()
            .into_iter()
            .filter(|e| {
                e.state == State::Submitted
                    && e.job.is_some()
                    && matches!(e.action.op(), Some(Op::MigrateInstance { .. }))
            })
            .collect()
    };
    // Until the first group's migrations are in flight.
    for _ in 0..20 {
        h.coordinator.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        if !migrations_submitted(&h.coordinator.api().store).is_empty() {
            break;
        }
    }
    let store = &h.coordinator.api().store;
    let submitted = migrations_submitted(store);
    assert!(
        !submitted.is_empty(),
        "{:#?}",
        store.campaigns().unwrap().remove(0).campaign
    );
    // The crash came after a job's submission and before its record: the ledger knows it only
    // as recorded.
    let mut lost = submitted[0].clone();
    lost.state = State::Recorded;
    lost.job = None;
    store.mark(&lost).unwrap();
    // kill -9 and restart: a new coordinator on the same state directory.
    let ganeti: Arc<dyn Ganeti> = Arc::new(h.sim.client());
    h.coordinator = Coordinator::new(&h.config, node(1), ganeti, h.key.clone()).unwrap();
    for _ in 0..80 {
        h.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        if campaign(&h).state.is_final() {
            break;
        }
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    for i in 1..=NODES {
        assert_eq!(runs[&node(i)].len(), 1, "hooks of {}", node(i));
    }
    let (after, all_running) = layout(&h);
    assert_eq!(after, before);
    assert!(all_running);
}

/// Issue 24 (5): a campaign submitted without failure domains to a coordinator whose failure
/// domains are `rack:` tags is planned with them: every group stays within one rack, and the
/// campaign completes. One naming other failure domains is refused at submission, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_is_planned_with_the_coordinator_s_failure_domains() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let nodes = 6;
    let mut h = Harness::new(
        nodes,
        "l1:diskless:1,l2:diskless:2,l3:diskless:3,l4:diskless:4,l5:diskless:5,l6:diskless:6",
        {
            let users = users.clone();
            move |config| {
                config.users = users;
                config.failure_domains = "rack:".into();
                config.max_disrupted_nodes = 2;
                config.min_healthy_nodes = 2;
                config.breaker.max_incident_percent = 100.0;
            }
        },
    )
    .await
    .unwrap();
    let rack = |i: usize| if i <= 3 { "rack:a" } else { "rack:b" };
    h.sim.with_cluster(|c| {
        for i in 1..=nodes {
            c.nodes.get_mut(&node(i)).unwrap().tags.push(rack(i).into());
        }
    });
    for i in 1..=nodes {
        h.agents
            .get(&node(i))
            .unwrap()
            .set_boot_id(Some(&format!("boot-{i}-0")));
    }
    let (url, server) = serve_api(&h).await;
    let client = reqwest::Client::new();

    // Other failure domains than the coordinator's: refused, naming both.
    let answer = client
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"hook": "reboot", "failure_domains": "group"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let why = answer.text().await.unwrap();
    assert!(
        why.contains("failure_domains") && why.contains("rack:") && why.contains("group"),
        "{why}"
    );
    // None given: the coordinator's are adopted, and shown.
    let answer = client
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"hook": "reboot"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let started: Campaign = answer.json().await.unwrap();
    assert_eq!(started.request.failure_domains.as_deref(), Some("rack:"));

    let mut runs = BTreeMap::new();
    for _ in 0..80 {
        h.round().await.unwrap();
        // Plays the hooks on six nodes.
        for i in 1..=nodes {
            let name = node(i);
            let agent = h.agents.get(&name).unwrap();
            let seen: &mut BTreeSet<String> = runs.entry(name.clone()).or_default();
            for id in agent.repairs() {
                if seen.insert(id) {
                    agent.set_boot_id(Some(&format!("boot-{i}-{}", seen.len())));
                }
            }
        }
        let now = campaign(&h);
        assert!(
            now.groups.iter().all(|g| {
                let racks: BTreeSet<&str> = g
                    .nodes
                    .iter()
                    .map(|n| rack(n.node[4..5].parse().unwrap()))
                    .collect();
                racks.len() == 1
            }),
            "a group spans racks: {now:#?}"
        );
        if now.state.is_final() {
            break;
        }
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert_eq!(done.nodes_progress(), (nodes, nodes));
    for i in 1..=nodes {
        assert_eq!(runs[&node(i)].len(), 1, "hooks of {}", node(i));
    }
    server.abort();
}

/// In the daemon's own loop (rounds every hour, started only by events: a job that ends, a
/// watched agent that changes), a campaign starts its next group and completes without waiting
/// for the interval: the round that sees a group end, or the last migrations back, starts the
/// next round at once (`campaign_exec::plans_again`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_goes_on_between_groups_without_waiting_for_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let h = cluster_with(&users, |config| config.round_interval = 3600.0).await;
    h.sim.set_job_delay(std::time::Duration::from_millis(100));
    let store = Arc::clone(&h.coordinator.api().store);
    let board = Arc::clone(&h.coordinator.api().board);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(h.coordinator.run(listener, async {
        stopped.await.ok();
    }));
    let started = std::time::Instant::now();
    while board.last_round.read().map(|r| r.number).unwrap_or(0) < 1 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "no first round"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    start_reboot_campaign(&url).await;
    // The API's write wakes a round; from there on only events start rounds. Every hook
    // "reboots" its node (a new boot id, which the node's watch delivers).
    let mut runs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let started = std::time::Instant::now();
    let done = loop {
        reboot_after_hooks(&h.agents, &mut runs);
        let now = store.campaigns().unwrap().remove(0).campaign;
        if now.state.is_final() {
            break now;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the campaign waits for the round interval: {now:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert!(done.groups.len() >= 2, "{done:#?}");
    for i in 1..=NODES {
        assert_eq!(runs[&node(i)].len(), 1, "hooks of {}", node(i));
    }
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
}

/// The next group starts whole while the previous group's instances still migrate back: a node
/// receiving its instances back counts against no cap (the campaign's own account and the
/// executor's ledger say the same), so the gate does not refuse the next group for the cap and
/// the campaign does not cut it into smaller groups, which would cost one more reboot round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_group_starts_whole_while_instances_migrate_back() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster(&users).await;
    // Migrations back still run when the next group starts (proposed with the undrains,
    // chained after them).
    h.sim.set_job_delay(std::time::Duration::from_millis(300));
    let (before, _) = layout(&h);
    let (url, server) = serve_api(&h).await;
    start_reboot_campaign(&url).await;
    let mut runs = BTreeMap::new();
    let mut planned = None;
    let mut cut = Vec::new();
    // Rounds back to back, as the daemon's when jobs end: no waiting for Ganeti's queue to
    // settle between them.
    for _ in 0..400 {
        h.coordinator.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        let now = campaign(&h);
        if planned.is_none() && !now.groups.is_empty() {
            planned = Some(now.groups.len() + now.planned.len());
        }
        if let Some(why) = now
            .blocked_by
            .as_deref()
            .filter(|w| w.contains("smaller groups"))
        {
            cut.push(why.to_owned());
        }
        if now.state.is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert_eq!(cut, Vec::<String>::new(), "a group was cut: {done:#?}");
    assert_eq!(Some(done.groups.len()), planned, "{done:#?}");
    assert!(done.groups.iter().all(|g| g.nodes.len() == 2), "{done:#?}");
    for i in 1..=NODES {
        assert_eq!(runs[&node(i)].len(), 1, "hooks of {}", node(i));
    }
    // Each later group was submitted while the previous group's undrains ran, its drains
    // chained after every one of them (Ganeti `depends`), and none ran before they had ended.
    let jobs: Vec<SimJob> = h.sim.peek(|c| c.jobs.values().cloned().collect());
    let flag_jobs = |nodes: &BTreeSet<&str>, drained: bool| -> Vec<&SimJob> {
        jobs.iter()
            .filter(|j| matches!(&j.op, SimOp::SetNodeParams { node, drained: Some(d), .. } if *d == drained && nodes.contains(node.as_str())))
            .collect()
    };
    let mut chained = 0;
    for pair in done.groups.windows(2) {
        let (earlier, later): (BTreeSet<&str>, BTreeSet<&str>) = (
            pair[0].nodes.iter().map(|n| n.node.as_str()).collect(),
            pair[1].nodes.iter().map(|n| n.node.as_str()).collect(),
        );
        let undrains = flag_jobs(&earlier, false);
        let released = undrains.iter().filter_map(|j| j.end_ms).max().unwrap();
        for drain in flag_jobs(&later, true) {
            assert!(
                drain.start_ms.unwrap() >= released,
                "{drain:?} ran before {released}"
            );
            if drain.received_ms < released {
                assert_eq!(drain.depends.len(), undrains.len(), "{drain:?}");
                chained += 1;
            }
        }
    }
    assert!(
        chained > 0,
        "no group was chained after the undrains: {jobs:#?}"
    );
    let (after, all_running) = layout(&h);
    assert_eq!(after, before);
    assert!(all_running);
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    server.abort();
}

/// Submissions whose job Ganeti created but whose answer was lost, and rounds whose read of
/// Ganeti's job list fails: the campaign goes on to its end and no job is submitted twice (an
/// uncertain submission is not sent again before the job list shows whether its job exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_and_unreadable_job_lists_submit_no_job_twice() {
    use nodecare_ganeti_sim::HttpFaults;
    let dir = tempfile::tempdir().unwrap();
    let mut h = cluster(&dir.path().join("no-users")).await;
    let record = nodecare_core::campaign::Record::new(
        uuid::Uuid::new_v4(),
        nodecare_protocol::maintenance::CampaignRequest::new("reboot"),
        "ops",
        nodecare_protocol::now_ms(),
    );
    h.coordinator.api().store.save_campaign(&record).unwrap();
    let mut runs = BTreeMap::new();
    let lose = |method: &str| HttpFaults {
        lose_answer: 1,
        method: Some(method.into()),
        ..HttpFaults::default()
    };
    let unreadable_list = HttpFaults {
        fail_5xx: 1,
        method: Some("GET".into()),
        path_is: Some("/2/jobs".into()),
        ..HttpFaults::default()
    };
    let mut lost = 0;
    for round in 0..150 {
        let faults = match round % 4 {
            0 => lose("PUT"),
            2 => lose("POST"),
            _ => unreadable_list.clone(),
        };
        h.sim.set_http_faults(faults.clone());
        // A round may fail on a fault (the job list unread): the next goes on.
        let _failed = h.round().await.is_err();
        if faults.lose_answer > 0 && h.sim.http_faults().lose_answer == 0 {
            lost += 1;
        }
        reboot_after_hooks(&h.agents, &mut runs);
        assert_eq!(
            h.sim.duplicate_intents(),
            Vec::<String>::new(),
            "round {round}"
        );
        if campaign(&h).state.is_final() {
            break;
        }
    }
    assert!(lost > 0);
    h.sim.set_http_faults(HttpFaults::default());
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
}

/// What the cluster looked like as an agent received a hook: the node, the nodes drained then,
/// and the running instances whose primary was the node.
#[derive(Debug, Clone)]
struct HookSeen {
    node: String,
    drained: BTreeSet<String>,
    running_on_node: Vec<String>,
}

/// Has every agent note, as each hook arrives, what the simulated cluster looks like.
fn watch_hooks(h: &Harness) -> Arc<std::sync::Mutex<Vec<HookSeen>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    for (name, agent) in &h.agents.agents {
        let (sim, seen, name) = (h.sim.clone(), Arc::clone(&seen), name.clone());
        agent.set_on_repair(Some(Arc::new(move |_id: &str, _command: &str| {
            let hook = sim.peek(|c| HookSeen {
                node: name.clone(),
                drained: c
                    .nodes
                    .values()
                    .filter(|n| n.drained)
                    .map(|n| n.name.clone())
                    .collect(),
                running_on_node: c
                    .instances
                    .values()
                    .filter(|i| i.running && i.pnode == name)
                    .map(|i| i.name.clone())
                    .collect(),
            });
            seen.lock().unwrap().push(hook);
        })));
    }
    seen
}

/// A hook whose agent never answered (unreachable for repairs beyond the hook's timeout) is
/// never sent once its node failed: the campaign fails, an operator returns the nodes to
/// service, the agents answer again, and none of them ever receives the hook; the hooks'
/// ledger entries are canceled, saying why, and the campaign is no longer followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_its_agent_never_had_is_not_sent_once_its_node_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = cluster(&dir.path().join("no-users")).await;
    for agent in h.agents.agents.values() {
        agent.set_repairs_down(true);
    }
    let hooks = watch_hooks(&h);
    let mut request = nodecare_protocol::maintenance::CampaignRequest::new("reboot");
    request.timeouts.hook_s = 2;
    let record = nodecare_core::campaign::Record::new(
        uuid::Uuid::new_v4(),
        request,
        "ops",
        nodecare_protocol::now_ms(),
    );
    h.coordinator.api().store.save_campaign(&record).unwrap();
    let round = std::time::Duration::from_secs(60);
    for _ in 0..100 {
        tokio::time::timeout(round, h.round())
            .await
            .expect("a round hung")
            .unwrap();
        if campaign(&h).state.is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let failed = campaign(&h);
    assert_eq!(failed.state, CampaignState::Failed, "{failed:#?}");
    assert_eq!(
        failed.failure.as_ref().map(|f| f.step),
        Some(NodeStep::Hook),
        "{failed:#?}"
    );
    // The operator returns the nodes to service; the agents answer again, hours later.
    h.sim.with_cluster(|c| {
        for n in c.nodes.values_mut() {
            n.drained = false;
            n.tags.clear();
        }
    });
    for agent in h.agents.agents.values() {
        agent.set_repairs_down(false);
    }
    for _ in 0..5 {
        tokio::time::timeout(round, h.round())
            .await
            .expect("a round hung")
            .unwrap();
    }
    assert_eq!(
        hooks.lock().unwrap().len(),
        0,
        "a hook reached an agent after its node failed: {:#?}",
        hooks.lock().unwrap()
    );
    for i in 1..=NODES {
        assert_eq!(
            h.agents.get(&node(i)).unwrap().repairs(),
            Vec::<String>::new()
        );
    }
    let entries = h
        .coordinator
        .api()
        .store
        .of_holder(&record.holder())
        .unwrap();
    let hook_entries: Vec<&Entry> = entries.iter().filter(|e| e.action.op().is_none()).collect();
    assert!(!hook_entries.is_empty());
    for e in hook_entries {
        assert!(
            matches!(&e.state, State::Canceled { why } if why.starts_with("not sent")),
            "{e:#?}"
        );
    }
}

/// A hook whose request went out with its answer lost (the agent's repair service away) when
/// the campaign fails because of another node of its group (that node's hook failed): the
/// agent may still take the request until it expires, so its ledger entry stays recorded and
/// its node held by the campaign (the gate's disruptions in force) until then; only then is it
/// canceled and the node no longer the campaign's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_sent_before_its_campaign_failed_holds_its_node_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = cluster(&dir.path().join("no-users")).await;
    for agent in h.agents.agents.values() {
        agent.set_repairs_down(true);
        agent.set_repair(nodecare_tests::fake_agent::RepairBehaviour {
            exit_code: 1,
            duration: std::time::Duration::ZERO,
        });
    }
    let mut request = nodecare_protocol::maintenance::CampaignRequest::new("reboot");
    request.timeouts.hook_s = 8;
    let record = nodecare_core::campaign::Record::new(
        uuid::Uuid::new_v4(),
        request,
        "ops",
        nodecare_protocol::now_ms(),
    );
    let holder = record.holder();
    h.coordinator.api().store.save_campaign(&record).unwrap();
    let stored = |h: &Harness| h.coordinator.api().store.campaigns().unwrap().remove(0);
    let held_by = |h: &Harness, name: &str| {
        h.coordinator
            .api()
            .board
            .gate
            .read()
            .unwrap()
            .as_ref()
            .and_then(|g| g.in_force.nodes.get(name).cloned())
    };
    let round = std::time::Duration::from_secs(60);
    // Once two nodes of the group have had their hooks sent, the first one's agent takes its
    // hook again (it fails): the campaign fails because of it.
    let mut waiting: Option<(String, String)> = None;
    for _ in 0..100 {
        tokio::time::timeout(round, h.round())
            .await
            .expect("a round hung")
            .unwrap();
        let now = stored(&h);
        if now.state().is_final() {
            break;
        }
        if waiting.is_none() {
            let sent: Vec<(String, String)> = now
                .campaign
                .groups
                .last()
                .into_iter()
                .flat_map(|g| g.nodes.iter())
                .filter(|n| n.step == NodeStep::Hook)
                .filter_map(|n| {
                    let key = now
                        .hooks_sent_until
                        .keys()
                        .find(|k| k.ends_with(&format!("-{}-hook", n.node)))?;
                    Some((n.node.clone(), key.clone()))
                })
                .collect();
            if sent.len() >= 2 {
                h.agents.get(&sent[0].0).unwrap().set_repairs_down(false);
                waiting = Some(sent[1].clone());
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (name, key) = waiting.expect("no two hooks of a group were sent");
    let failed = stored(&h);
    assert_eq!(failed.state(), CampaignState::Failed, "{failed:#?}");
    let until = failed.hooks_sent_until[&key];
    assert!(
        nodecare_protocol::now_ms() < until,
        "the request expired already"
    );
    let entry = |h: &Harness| {
        h.coordinator
            .api()
            .store
            .entry(&holder, &key)
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        entry(&h).state,
        State::Recorded,
        "the hook of {name} was canceled while its agent could still take it"
    );
    assert_eq!(held_by(&h, &name), Some(holder.clone()), "{name} not held");
    // Its agent still away, the request expires: canceled, the node no longer the campaign's.
    let left = until.saturating_sub(nodecare_protocol::now_ms()) + 200;
    tokio::time::sleep(std::time::Duration::from_millis(left)).await;
    for _ in 0..2 {
        tokio::time::timeout(round, h.round())
            .await
            .expect("a round hung")
            .unwrap();
    }
    assert!(
        matches!(&entry(&h).state, State::Canceled { why } if why.starts_with("not sent")),
        "{:#?}",
        entry(&h)
    );
    assert_ne!(held_by(&h, &name), Some(holder));
    assert!(h.agents.get(&name).unwrap().repairs().is_empty());
}

/// A group chained after the previous group's undrains: no hook of it reaches its node (the
/// master, which needs no drain, nor a node drained already) before those undrains have
/// succeeded: at every hook, no node of an earlier group is drained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hook_of_a_chained_group_before_the_previous_group_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    // Shared storage instances on nodes 1 and 3 only: nodes 2 and 4 have nothing to move, so
    // drained by hand (or the master) they go from their drain step to their hook at once.
    let mut h = Harness::new(
        NODES,
        "s1:sharedfile:1,t1:sharedfile:1,s3:sharedfile:3",
        move |config| {
            config.users = users;
            config.max_disrupted_nodes = 2;
            config.min_healthy_nodes = 2;
        },
    )
    .await
    .unwrap();
    for i in 1..=NODES {
        h.agents
            .get(&node(i))
            .unwrap()
            .set_boot_id(Some(&format!("boot-{i}-0")));
    }
    h.sim.set_job_delay(std::time::Duration::from_millis(300));
    let hooks = watch_hooks(&h);
    let (url, server) = serve_api(&h).await;
    start_reboot_campaign(&url).await;
    let mut runs = BTreeMap::new();
    let mut drained_by_hand = false;
    for _ in 0..400 {
        h.coordinator.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        let now = campaign(&h);
        // A node of the next group is drained already (by an operator) when its group starts.
        if !drained_by_hand && now.groups.len() == 1 && !now.planned.is_empty() {
            let next: Vec<String> = now.planned[0].clone();
            h.sim.with_cluster(|c| {
                let bare = next.iter().find(|n| {
                    n.as_str() != c.master() && !c.instances.values().any(|i| i.pnode == **n)
                });
                if let Some(n) = bare {
                    c.nodes.get_mut(n).unwrap().drained = true;
                }
            });
            drained_by_hand = true;
        }
        if now.state.is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert!(done.groups.len() >= 2, "{done:#?}");
    let group_of = |node: &str| {
        done.groups
            .iter()
            .position(|g| g.nodes.iter().any(|n| n.node == node))
            .unwrap()
    };
    let hooks = hooks.lock().unwrap().clone();
    assert_eq!(hooks.len(), NODES, "{hooks:#?}");
    for hook in &hooks {
        let others: Vec<&String> = hook
            .drained
            .iter()
            .filter(|n| group_of(n) < group_of(&hook.node))
            .collect();
        assert!(
            others.is_empty(),
            "hook on {} (group {}) while {others:?} of an earlier group are drained: {done:#?}",
            hook.node,
            group_of(&hook.node)
        );
    }
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    server.abort();
}

/// A group started while the previous group's undrains run (the gate judged it with those
/// nodes back: no storage problem that is only their drained flag) moves nothing before they
/// have succeeded: in Ganeti's job list, no move of a campaign starts before an undrain of it
/// received earlier has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_move_of_a_chained_group_starts_before_the_previous_group_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster_with(&users, |config| config.max_disrupted_nodes = 1).await;
    h.sim.set_job_delay(std::time::Duration::from_millis(300));
    let (url, server) = serve_api(&h).await;
    start_reboot_campaign(&url).await;
    let mut runs = BTreeMap::new();
    for _ in 0..400 {
        h.coordinator.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        if campaign(&h).state.is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    assert!(done.groups.len() >= 2, "{done:#?}");
    let intent = |job: &SimJob| {
        job.reason
            .iter()
            .find_map(|(_, text, _)| nodecare_ganeti::Reason::parse_text(text))
            .map(|p| p.intent)
            .unwrap_or_default()
    };
    let jobs: Vec<SimJob> = h.sim.with_cluster(|c| c.jobs.values().cloned().collect());
    let undrains: Vec<&SimJob> = jobs
        .iter()
        .filter(|j| {
            matches!(
                j.op,
                SimOp::SetNodeParams {
                    drained: Some(false),
                    ..
                }
            ) && intent(j).ends_with("-undrain")
        })
        .collect();
    let moves: Vec<&SimJob> = jobs
        .iter()
        .filter(|j| intent(j).contains("-move-"))
        .collect();
    let mut chained = 0;
    for mv in &moves {
        for undrain in undrains.iter().filter(|u| u.received_ms <= mv.received_ms) {
            let (Some(start), Some(end)) = (mv.start_ms, undrain.end_ms) else {
                continue;
            };
            chained += usize::from(undrain.end_ms > Some(mv.received_ms));
            assert!(
                start >= end,
                "job {} {} ({}) started at {start} ms, before job {} {} ({}) ended at {end} ms",
                mv.id,
                mv.op.summary(),
                intent(mv),
                undrain.id,
                undrain.op.summary(),
                intent(undrain)
            );
        }
    }
    assert!(
        chained > 0,
        "no move was submitted while an undrain ran: {moves:#?}"
    );
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    server.abort();
}

/// Instances started on a drained node before its hook, behind the coordinator's back (by
/// their owner; by Ganeti's watcher restarting a crashed one), are moved like planned ones: no
/// hook reaches a node while a running instance is on it, and they end back where they ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_started_on_a_drained_node_is_moved_before_its_hook() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster(&users).await;
    h.sim.set_job_delay(std::time::Duration::from_millis(300));
    let late = format!("late.{}", nodecare_tests::harness::DOMAIN);
    let crashed = format!("s3.{}", nodecare_tests::harness::DOMAIN);
    // `late` (shared storage, on node 2) is stopped by its owner; `s3` (on node 3) crashed.
    h.sim.with_cluster(|c| {
        let mut instance = c.instances[&crashed].clone();
        instance.name = late.clone();
        instance.uuid = "00000000-0000-4000-8999-000000000001".into();
        instance.pnode = node(2);
        instance.running = false;
        c.instances.insert(late.clone(), instance);
        c.crash_instance(&crashed).unwrap();
    });
    let hooks = watch_hooks(&h);
    let (url, server) = serve_api(&h).await;
    start_reboot_campaign(&url).await;
    let mut runs = BTreeMap::new();
    let (mut started, mut restarted) = (false, false);
    for _ in 0..400 {
        h.coordinator.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        let now = campaign(&h);
        let before_hook = |name: &str| {
            now.groups.iter().flat_map(|g| &g.nodes).any(|n| {
                n.node == name && matches!(n.step, NodeStep::Drain | NodeStep::MovePrimaries)
            })
        };
        if !started && before_hook(&node(2)) {
            h.sim.with_cluster(|c| c.start_instance(&late)).unwrap();
            started = true;
        }
        if !restarted && before_hook(&node(3)) {
            assert_eq!(
                h.sim.with_cluster(|c| c.run_watcher()),
                vec![crashed.clone()]
            );
            restarted = true;
        }
        if now.state.is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let done = campaign(&h);
    assert!(started && restarted, "{done:#?}");
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    let hooks = hooks.lock().unwrap().clone();
    assert_eq!(hooks.len(), NODES, "{hooks:#?}");
    for hook in &hooks {
        assert_eq!(
            hook.running_on_node,
            Vec::<String>::new(),
            "hook on {} with instances running on it",
            hook.node
        );
    }
    let (after, all_running) = layout(&h);
    assert!(all_running, "{after:#?}");
    assert_eq!(after[&late], node(2));
    assert_eq!(after[&crashed], node(3));
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    server.abort();
}

/// A campaign whose drain jobs never end in Ganeti: the drain step times out, the node fails and
/// the campaign with it, and the node stays the campaign's in the gate's view (no other holder
/// admitted on it) while its drain job is unfinished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_drain_job_runs_stays_held_after_its_campaign_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = cluster(&dir.path().join("no-users")).await;
    let mut request = nodecare_protocol::maintenance::CampaignRequest::new("reboot");
    request.timeouts.drain_s = 1;
    request.timeouts.move_s = 1;
    let record = nodecare_core::campaign::Record::new(
        uuid::Uuid::new_v4(),
        request,
        "ops",
        nodecare_protocol::now_ms(),
    );
    let holder = record.holder();
    h.coordinator.api().store.save_campaign(&record).unwrap();
    // Every job of the first group starts and never ends.
    h.sim.stick_next_jobs(100);
    let stored = |h: &Harness| h.coordinator.api().store.campaigns().unwrap().remove(0);
    let round = std::time::Duration::from_secs(60);
    for _ in 0..40 {
        tokio::time::timeout(round, h.round())
            .await
            .expect("a round hung")
            .unwrap();
        if stored(&h).state().is_final() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let failed = stored(&h);
    assert_eq!(failed.state(), CampaignState::Failed, "{failed:#?}");
    // One more round judges with the campaign failed.
    tokio::time::timeout(round, h.round())
        .await
        .expect("a round hung")
        .unwrap();
    let draining: Vec<String> = h.sim.with_cluster(|c| {
        c.jobs
            .values()
            .filter(|j| !j.status.is_final())
            .filter_map(|j| match &j.op {
                SimOp::SetNodeParams {
                    node,
                    drained: Some(true),
                    ..
                } => Some(node.clone()),
                _ => None,
            })
            .collect()
    });
    assert!(!draining.is_empty(), "no drain job left unfinished");
    let in_force = h
        .coordinator
        .api()
        .board
        .gate
        .read()
        .unwrap()
        .as_ref()
        .map(|g| g.in_force.nodes.clone())
        .unwrap_or_default();
    for node in &draining {
        assert_eq!(
            in_force.get(node),
            Some(&holder),
            "{node} is not held while the failed campaign's drain job runs there: {in_force:?}"
        );
    }
}

/// On a KVM cluster a campaign whose running instances have no pinned `machine_version` is
/// refused, naming them (and the dry run says so without starting anything); with
/// `allow_unpinned_machine_version` it starts, and the override is in its record and in its
/// jobs' reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_on_kvm_with_an_unpinned_machine_version_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster(&users).await;
    h.sim.with_cluster(|c| {
        c.hypervisor.name = "kvm".into();
        for name in c.instances.keys() {
            if name != "d1.sim.test" {
                c.hypervisor
                    .instance_machine_versions
                    .insert(name.clone(), "pc-i440fx-7.2".into());
            }
        }
    });
    let (url, server) = serve_api(&h).await;
    let client = reqwest::Client::new();
    let post = |body: serde_json::Value| {
        client
            .post(format!("{url}/1/maintenance"))
            .basic_auth("ops", Some("secret"))
            .json(&body)
            .send()
    };

    let answer = post(serde_json::json!({"hook": "apt-upgrade-and-reboot", "dry_run": true}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let check: nodecare_protocol::maintenance::CampaignCheck = answer.json().await.unwrap();
    assert!(check.refused, "{check:?}");
    assert_eq!(
        check.unpinned_machine_version,
        vec!["d1.sim.test".to_owned()]
    );
    assert!(h.coordinator.api().store.campaigns().unwrap().is_empty());

    let answer = post(serde_json::json!({"hook": "apt-upgrade-and-reboot"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 409);
    let text = answer.text().await.unwrap();
    assert!(
        text.contains("without a pinned machine_version (d1.sim.test)")
            && text.contains("--allow-unpinned-machine-version"),
        "{text}"
    );
    assert!(h.coordinator.api().store.campaigns().unwrap().is_empty());

    let answer = post(serde_json::json!({
        "hook": "apt-upgrade-and-reboot",
        "allow_unpinned_machine_version": true,
    }))
    .await
    .unwrap();
    assert_eq!(answer.status(), 201);
    let started: Campaign = answer.json().await.unwrap();
    assert_eq!(
        started.overrides,
        vec!["allowed unpinned machine_version: d1.sim.test".to_owned()]
    );
    assert_eq!(campaign(&h).overrides, started.overrides);
    assert!(campaign(&h).request.allow_unpinned_machine_version);
    for _ in 0..5 {
        h.round().await.unwrap();
    }
    let reasons: Vec<String> = h
        .sim
        .submissions()
        .into_iter()
        .filter_map(|s| s.reason_text)
        .filter(|t| t.contains(&format!("maintenance campaign {}", started.id)))
        .collect();
    assert!(!reasons.is_empty(), "no job of the campaign");
    for reason in &reasons {
        assert!(
            reason.contains("(--allow-unpinned-machine-version)"),
            "{reason}"
        );
    }
    server.abort();
}

/// Not KVM (the simulation's `fake` hypervisor, as on Xen): the machine version is not checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_on_a_cluster_without_kvm_is_not_checked_for_machine_versions() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let h = cluster(&users).await;
    let (url, server) = serve_api(&h).await;
    let check: nodecare_protocol::maintenance::CampaignCheck = reqwest::Client::new()
        .post(format!("{url}/1/maintenance"))
        .basic_auth("ops", Some("secret"))
        .json(&serde_json::json!({"hook": "reboot", "dry_run": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(!check.refused, "{check:?}");
    assert!(check.unpinned_machine_version.is_empty());
    server.abort();
}

/// A freeze set while a group reboots (as a window that closes): the group finishes, the next
/// one waits, saying for what, and no hook reaches its nodes; once the freeze is lifted the
/// campaign goes on and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_lets_the_group_finish_and_holds_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster_with(&users, |config| config.max_disrupted_nodes = 1).await;
    let (url, server) = serve_api(&h).await;
    let client = reqwest::Client::new();
    h.round().await.unwrap();
    start_reboot_campaign(&url).await;
    let mut runs = BTreeMap::new();
    let mut freeze: Option<String> = None;
    let mut frozen_rounds = 0;
    for _ in 0..120 {
        h.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        let now = campaign(&h);
        if now.state.is_final() {
            break;
        }
        let first_hooked = now.groups.len() == 1
            && now.groups[0]
                .nodes
                .iter()
                .all(|n| matches!(n.step, NodeStep::Hook | NodeStep::WaitHealthy));
        if freeze.is_none() && first_hooked {
            let answer = client
                .post(format!("{url}/1/freezes"))
                .basic_auth("ops", Some("secret"))
                .json(&serde_json::json!({"duration_s": 3600, "reason": "change freeze"}))
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 201);
            let view: nodecare_protocol::calendar::FreezeView = answer.json().await.unwrap();
            freeze = Some(view.id);
            continue;
        }
        let Some(id) = &freeze else { continue };
        let first_done = now.groups[0].nodes.iter().all(|n| n.step == NodeStep::Done);
        if first_done && frozen_rounds < 4 {
            // Between groups, held: nothing of the next group starts, and the campaign says why.
            frozen_rounds += 1;
            assert_eq!(now.groups.len(), 1, "{now:#?}");
            let hooked: usize = runs.values().map(BTreeSet::len).sum();
            assert_eq!(hooked, 1, "{runs:?}");
            assert!(
                now.blocked_by
                    .as_deref()
                    .is_some_and(|b| b.starts_with("frozen until") && b.contains("change freeze")),
                "{now:#?}"
            );
            if frozen_rounds == 4 {
                let answer = client
                    .delete(format!("{url}/1/freezes/{id}"))
                    .basic_auth("ops", Some("secret"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status(), 200);
            }
        }
    }
    let done = campaign(&h);
    assert_eq!(frozen_rounds, 4, "{done:#?}");
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    for i in 1..=NODES {
        assert_eq!(runs[&node(i)].len(), 1, "hooks of {}", node(i));
    }
    assert_eq!(h.sim.duplicate_intents(), Vec::<String>::new());
    server.abort();
}

/// A campaign that needs an approval waits, saying so, with no job in Ganeti; refused, it says
/// why; approved with a change ticket, it runs, and every job of it carries the ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_waits_for_its_approval_and_carries_its_ticket() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster_with(&users, |config| {
        config.approvals.require = vec![nodecare_core::calendar::WorkKind::Campaign];
    })
    .await;
    let (url, server) = serve_api(&h).await;
    let client = reqwest::Client::new();
    h.round().await.unwrap();
    start_reboot_campaign(&url).await;
    let id = campaign(&h).id;
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let waiting = campaign(&h);
    assert!(waiting.groups.is_empty(), "{waiting:#?}");
    assert_eq!(
        waiting.blocked_by.as_deref(),
        Some(
            format!(
                "waiting for an approval of maintenance campaign {id} (nodecare approval grant {id} --ticket …)"
            )
            .as_str()
        )
    );
    assert!(
        h.sim.submissions().is_empty()
            || h.sim.with_cluster(|c| c.nodes.values().all(|n| !n.drained))
    );
    let listed: nodecare_protocol::gate::ApprovalsStatus = client
        .get(format!("{url}/1/approvals"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed.required, ["campaign"]);
    assert_eq!(listed.waiting.len(), 1);
    assert_eq!(listed.waiting[0].id, id);
    let decide = |body: serde_json::Value| {
        client
            .post(format!("{url}/1/approvals"))
            .basic_auth("ops", Some("secret"))
            .json(&body)
            .send()
    };
    // Bad decisions are a clear 400.
    for body in [
        serde_json::json!({"id": id, "ticket": "CHG 1"}),
        serde_json::json!({"id": id}),
        serde_json::json!({"id": "nosuch", "ticket": "CHG-1"}),
    ] {
        assert_eq!(decide(body.clone()).await.unwrap().status(), 400, "{body}");
    }
    // Refused: it says why.
    let answer = decide(serde_json::json!({"id": id, "refuse": "no change window this week"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    h.round().await.unwrap();
    assert_eq!(
        campaign(&h).blocked_by.as_deref(),
        Some(
            format!("maintenance campaign {id} refused: no change window this week (by ops)")
                .as_str()
        )
    );
    // Approved with a ticket: it runs to its end, every job carrying the ticket.
    let answer = decide(serde_json::json!({"id": id, "ticket": "CHG-4711"}))
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let mut runs = BTreeMap::new();
    for _ in 0..80 {
        h.round().await.unwrap();
        reboot_after_hooks(&h.agents, &mut runs);
        if campaign(&h).state.is_final() {
            break;
        }
    }
    let done = campaign(&h);
    assert_eq!(done.state, CampaignState::Completed, "{done:#?}");
    let ours: Vec<String> = h
        .sim
        .submissions()
        .into_iter()
        .filter_map(|s| s.reason_text)
        .filter(|t| t.contains(&format!("maintenance campaign {id}")))
        .collect();
    assert!(!ours.is_empty());
    assert!(
        ours.iter().all(|t| t.contains("(ticket CHG-4711)")),
        "{ours:#?}"
    );
    server.abort();
}

/// The change system behind `[approvals] webhook` is asked for the waiting campaign: `later`
/// keeps it waiting, then its approval (with a ticket) lets it run; a change system that is
/// down approves nothing, and the error is shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_change_system_approves_a_campaign_and_a_down_one_approves_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |body: axum::Json<serde_json::Value>| {
            let seen = Arc::clone(&seen);
            async move {
                assert!(
                    body.0["holder"]
                        .as_str()
                        .is_some_and(|h| h.starts_with("maintenance campaign"))
                );
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    axum::Json(serde_json::json!({"decision": "later"}))
                } else {
                    axum::Json(serde_json::json!({"decision": "approve", "ticket": "CHG-9"}))
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let change = format!("http://{}/", listener.local_addr().unwrap());
    let change_server = tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let webhook = change.clone();
    let mut h = cluster_with(&users, move |config| {
        config.approvals.require = vec![nodecare_core::calendar::WorkKind::Campaign];
        config.approvals.webhook = webhook;
        config.approvals.webhook_interval_secs = 0.1;
    })
    .await;
    let (url, server) = serve_api(&h).await;
    h.round().await.unwrap();
    start_reboot_campaign(&url).await;
    let id = campaign(&h).id;
    let api = h.coordinator.api().clone();
    let hook = api.approval_hook.clone().expect("the change system's hook");
    let mut started = false;
    for _ in 0..40 {
        h.round().await.unwrap();
        hook.after_round(
            nodecare_coordinator::approval_api::status(&api)
                .unwrap()
                .waiting,
            &api.store,
            &api.board,
            &api.node_name,
        );
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        if !campaign(&h).groups.is_empty() {
            started = true;
            break;
        }
    }
    assert!(started, "{:#?}", campaign(&h));
    assert!(asked.load(Ordering::SeqCst) >= 2);
    let decisions = api.store.approvals().unwrap();
    assert!(
        decisions.iter().any(|d| d.id.to_string() == id
            && d.ticket.as_deref() == Some("CHG-9")
            && d.who == "change system"),
        "{decisions:#?}"
    );
    server.abort();
    change_server.abort();

    // Down: nothing approves, the campaign waits, the error is shown.
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", listener.local_addr().unwrap())
    };
    let mut h = cluster_with(&users, move |config| {
        config.approvals.require = vec![nodecare_core::calendar::WorkKind::Campaign];
        config.approvals.webhook = closed;
        config.approvals.webhook_interval_secs = 0.1;
        config.approvals.webhook_timeout_secs = 1.0;
    })
    .await;
    let (url, server) = serve_api(&h).await;
    h.round().await.unwrap();
    start_reboot_campaign(&url).await;
    let api = h.coordinator.api().clone();
    let hook = api.approval_hook.clone().expect("the change system's hook");
    for _ in 0..5 {
        h.round().await.unwrap();
        hook.after_round(
            nodecare_coordinator::approval_api::status(&api)
                .unwrap()
                .waiting,
            &api.store,
            &api.board,
            &api.node_name,
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(campaign(&h).groups.is_empty(), "{:#?}", campaign(&h));
    let status: nodecare_protocol::gate::ApprovalsStatus = reqwest::Client::new()
        .get(format!("{url}/1/approvals"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status.waiting.len(), 1);
    assert!(status.change_system_error.is_some(), "{status:#?}");
    assert!(status.decisions.is_empty());
    server.abort();
}

/// The admin page lists the campaign waiting for its approval and approves it with a ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_approves_a_waiting_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let mut h = cluster_with(&users, |config| {
        config.approvals.require = vec![nodecare_core::calendar::WorkKind::Campaign];
    })
    .await;
    let (url, server) = serve_api(&h).await;
    h.round().await.unwrap();
    start_reboot_campaign(&url).await;
    h.round().await.unwrap();
    let id = campaign(&h).id;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = client
        .get(format!("{url}/ui/admin/"))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("section id=\"approvals\""), "{page}");
    assert!(page.contains(&format!("value=\"{id}\"")), "{page}");
    let token = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    let answer = client
        .post(format!("{url}/ui/admin/approvals"))
        .basic_auth("ops", Some("secret"))
        .header("origin", url.clone())
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={token}&id={id}&ticket=CHG-77"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 303);
    let decisions = h.coordinator.api().store.approvals().unwrap();
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].ticket.as_deref(), Some("CHG-77"));
    assert_eq!(decisions[0].who, "ops");
    h.round().await.unwrap();
    assert!(!campaign(&h).groups.is_empty(), "{:#?}", campaign(&h));
    server.abort();
}
