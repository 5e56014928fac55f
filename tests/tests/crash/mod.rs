//! Crash safety: the coordinator binary is killed with SIGKILL at random points (30 times, or
//! `NODECARE_CRASH_KILLS`; 100 for the recorded campaign),
//! while it evacuates one node and live-repairs another against a simulated Ganeti with
//! injected HTTP faults. No incident may be lost and no job may be submitted twice. The
//! evacuation is submitted as job chains (the default), so kills also land in the middle of
//! submitting a chain: every job must depend only on jobs of its own incident submitted before
//! it, and the node must still be emptied. The same kills land in instance repairs and in
//! rolling maintenance campaigns.

#![allow(
    clippy::disallowed_methods,
    reason = "the test starts and kills the coordinator binary"
)]

use crate::gate::all_duties::{Watch, Watched};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nodecare_coordinator::store::Store;
use nodecare_core::incident::RepairStatus;
use nodecare_ganeti_sim::model::SimConfig;
use nodecare_ganeti_sim::{HttpFaults, Simulation};
use nodecare_tests::fake_agent::{FakeAgents, RepairBehaviour, verdict};
use nodecare_tests::harness::{DOMAIN, node, test_key};
use serde_json::json;

/// Kills per run: `NODECARE_CRASH_KILLS` (100 for the recorded campaign), else a small count
/// that fits CI.
fn kills() -> usize {
    std::env::var("NODECARE_CRASH_KILLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n >= 2)
        .unwrap_or(30)
}

/// A small deterministic generator (xorshift), seeded from the clock; the seed is printed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_points_loses_no_incident_and_duplicates_no_job() {
    let sim = Simulation::new(
        SimConfig::from_spec(
            5,
            "a:drbd:2,b:diskless:2,c:sharedfile:2,d:drbd:4,e:diskless:2,f:sharedfile:2",
            DOMAIN,
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(200));
    // The independent checker judges the cluster all along, from Ganeti's side.
    let watch = Watch::start(
        sim.clone(),
        Watched {
            nodes: 5,
            racks: 1,
            cluster_cap: 3,
            min_healthy: 2,
        },
    );
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=5 {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    }
    agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    let repairing = agents.get(&node(3)).unwrap().clone();
    repairing.set_verdict(verdict("live-repair", json!({"fan": 1}), Some("reset-fan")));
    repairing.set_repair(RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_millis(400),
    });

    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("hmac.key");
    std::fs::write(&key_path, b"nodecare-test-cluster-hmac-key\n").unwrap();
    // Secrets are refused when others can read them.
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let state_dir = dir.path().join("state");
    let overrides: Vec<String> = agents
        .overrides()
        .iter()
        .map(|(n, u)| format!("{n:?} = {u:?}"))
        .collect();
    let config = format!(
        "node_name = {:?}\nstate_dir = {:?}\nhmac_key = {:?}\nlisten = \"127.0.0.1:0\"\n\
         round_interval = 0.03\nrepair_poll = 0.05\njob_timeout = 60\nmax_disrupted_nodes = 3\n\
         [breaker]\nmax_incident_percent = 100.0\n\
         [agents]\ntimeout = 1.0\noverrides = {{ {} }}\n\
         [rapi]\nurl = {:?}\nallow_plain_http = true\ntimeout = 0.25\n",
        node(1),
        state_dir,
        key_path,
        overrides.join(", "),
        server.url,
    );
    let config_path = dir.path().join("coordinator.toml");
    std::fs::write(&config_path, config).unwrap();
    let spawn = || spawn_coordinator(&config_path);

    let seed = random_seed();
    println!("crash test seed {seed}");
    let mut random = Random(seed);
    let started = Instant::now();
    let mut seen: BTreeSet<uuid::Uuid> = BTreeSet::new();
    let kills = kills();
    // Under load the coordinator may need more lives to get a job out: a few more kills then.
    let mut kill = 0;
    while kill < kills || (kill < 4 * kills && sim.submissions().iter().all(|s| s.internal)) {
        kill += 1;
        if kill == kills / 2 {
            // New work arrives mid-way.
            agents.get(&node(5)).unwrap().set_verdict(verdict(
                "live-repair",
                json!({"psu": 2}),
                Some("reset-psu"),
            ));
        }
        match random.next() % 10 {
            0 => sim.set_http_faults(HttpFaults {
                fail_5xx: 1,
                method: Some("PUT".into()),
                ..HttpFaults::default()
            }),
            1 => sim.set_http_faults(HttpFaults {
                hang: 1,
                hang_ms: 400,
                method: Some("POST".into()),
                ..HttpFaults::default()
            }),
            2 => sim.set_http_faults(HttpFaults {
                hang: 1,
                hang_ms: 400,
                method: Some("PUT".into()),
                ..HttpFaults::default()
            }),
            _ => {}
        }
        let mut child = spawn();
        let delay = Duration::from_millis(random.next() % 250);
        tokio::time::sleep(delay).await;
        child.start_kill().unwrap();
        let status = child.wait().await.unwrap();
        assert!(
            status.code().is_none_or(|c| c != 11),
            "kill {kill}: exited as non-master"
        );
        // Every incident ever seen must still be there (none is finished with acknowledgement here).
        if state_dir.join("state.db").exists() {
            let store = Store::open_dir(&state_dir).unwrap();
            let now: BTreeSet<uuid::Uuid> =
                store.incidents().unwrap().iter().map(|i| i.uuid).collect();
            assert!(
                seen.is_subset(&now),
                "kill {kill}: incidents lost: {:?}",
                seen.difference(&now).collect::<Vec<_>>()
            );
            seen = now;
        }
    }
    sim.set_http_faults(HttpFaults::default());
    let during = sim.submissions().iter().filter(|s| !s.internal).count();
    println!(
        "{kill} kills in {:?}; {during} jobs submitted meanwhile",
        started.elapsed()
    );
    assert!(
        during > 0,
        "the coordinator never got to submit a job between kills"
    );

    // Let it finish undisturbed.
    let mut child = spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    let finished = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let store = Store::open_dir(&state_dir).unwrap();
        let incidents = store.incidents().unwrap();
        if incidents.len() == 3
            && incidents
                .iter()
                .all(|i| i.repair_status == RepairStatus::Completed)
        {
            break incidents;
        }
        assert!(Instant::now() < deadline, "did not finish: {incidents:#?}");
    };
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    assert_eq!(agents.get(&node(5)).unwrap().repairs().len(), 1);
    let submitted = sim.submissions().iter().filter(|s| !s.internal).count();
    println!(
        "{submitted} jobs submitted; incidents {:?}",
        finished
            .iter()
            .map(|i| (&i.node, i.repair_status, i.jobs.len()))
            .collect::<Vec<_>>()
    );
    assert!(
        submitted >= 5,
        "the evacuation needs a drain, moves and tags"
    );
    let violations = watch.stop().await;
    assert!(violations.is_empty(), "the checker: {violations:#?}");
    let duplicates = sim.duplicate_intents();
    assert!(
        duplicates.is_empty(),
        "jobs submitted twice: {duplicates:?}"
    );
    let uuids: BTreeSet<String> = finished.iter().map(|i| i.uuid.to_string()).collect();
    assert!(
        seen.iter().all(|u| uuids.contains(&u.to_string())),
        "an incident was lost and re-created"
    );
    for submission in sim.submissions().iter().filter(|s| !s.internal) {
        let intent = submission.intent.as_deref().unwrap_or("");
        assert!(
            uuids.iter().any(|u| intent.starts_with(u.as_str())),
            "job {} belongs to no surviving incident: {intent}",
            submission.job
        );
    }
    // Chains: some jobs waited for others, always earlier jobs of the same incident.
    let (chained, strays) = sim.with_cluster(|c| {
        let intent_of = |job: u64| {
            c.submissions
                .iter()
                .find(|s| s.job == job)
                .and_then(|s| s.intent.clone())
                .and_then(|i| i.split_once('/').map(|(incident, _)| incident.to_owned()))
        };
        let mut chained = 0;
        let mut strays = Vec::new();
        for job in c.jobs.values() {
            for (dep, _) in &job.depends {
                chained += 1;
                if *dep >= job.id
                    || intent_of(*dep).is_none()
                    || intent_of(*dep) != intent_of(job.id)
                {
                    strays.push((job.id, *dep));
                }
            }
        }
        (chained, strays)
    });
    assert!(chained > 0, "no job was submitted as part of a chain");
    assert!(
        strays.is_empty(),
        "jobs depending on foreign or later jobs: {strays:?}"
    );
    // The live repair ran once (the agent is idempotent per incident; the request was resent at most).
    assert_eq!(repairing.repairs().len(), 1);
    let empty = sim.with_cluster(|c| {
        c.instances
            .values()
            .all(|i| i.pnode != node(2) && !i.snodes.contains(&node(2)))
    });
    assert!(empty, "node 2 was not emptied");
    server.stop();
}

/// The same with instance repairs (harep's duty): DRBD instances tagged for failover whose
/// primary went offline, the coordinator killed at random points while it fails them over and
/// tags them. Every instance is failed over exactly once and gets its result tag; no intent is
/// submitted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_instance_repairs_repairs_each_instance_once() {
    let sim = Simulation::new(
        SimConfig::from_spec(
            5,
            "i1:drbd:2,i2:drbd:2,i3:drbd:2,i4:drbd:2,x:diskless:4",
            DOMAIN,
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(150));
    // The independent checker judges the cluster all along, from Ganeti's side.
    let watch = Watch::start(
        sim.clone(),
        Watched {
            nodes: 5,
            racks: 1,
            cluster_cap: 3,
            min_healthy: 1,
        },
    );
    let repaired: Vec<String> = (1..=4).map(|i| format!("i{i}.{DOMAIN}")).collect();
    sim.with_cluster(|c| {
        for name in &repaired {
            let i = c.instances.get_mut(name).unwrap();
            i.tags.push("ganeti:watcher:autorepair:failover".into());
        }
        c.nodes.get_mut(&node(2)).unwrap().offline = true;
    });
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=5 {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("hmac.key");
    std::fs::write(&key_path, b"nodecare-test-cluster-hmac-key\n").unwrap();
    // Secrets are refused when others can read them.
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let state_dir = dir.path().join("state");
    let overrides: Vec<String> = agents
        .overrides()
        .iter()
        .map(|(n, u)| format!("{n:?} = {u:?}"))
        .collect();
    let config = format!(
        "node_name = {:?}\nstate_dir = {:?}\nhmac_key = {:?}\nlisten = \"127.0.0.1:0\"\n\
         ssconf_dir = {:?}\nround_interval = 0.03\njob_timeout = 60\nmax_disrupted_nodes = 3\n\
         min_healthy_nodes = 1\n\
         [breaker]\nmax_incident_percent = 100.0\n\
         [instance_repair]\nenabled = true\n\
         [agents]\ntimeout = 1.0\noverrides = {{ {} }}\n\
         [rapi]\nurl = {:?}\nallow_plain_http = true\ntimeout = 0.25\n",
        node(1),
        state_dir,
        key_path,
        dir.path().join("no-ssconf"),
        overrides.join(", "),
        server.url,
    );
    let config_path = dir.path().join("coordinator.toml");
    std::fs::write(&config_path, config).unwrap();
    let spawn = || spawn_coordinator(&config_path);
    let done = || {
        sim.with_cluster(|c| {
            repaired.iter().all(|name| {
                c.instances[name]
                    .tags
                    .iter()
                    .any(|t| t.starts_with("ganeti:watcher:autorepair:result:"))
            })
        })
    };
    let seed = random_seed();
    println!("instance repair crash test seed {seed}");
    let mut random = Random(seed);
    let kills = kills();
    let started = Instant::now();
    for kill in 0..kills {
        if kill % 10 == 5 {
            sim.set_http_faults(HttpFaults {
                reset: 1,
                method: Some("PUT".into()),
                ..HttpFaults::default()
            });
        }
        let mut child = spawn();
        tokio::time::sleep(Duration::from_millis(random.next() % 200)).await;
        child.start_kill().unwrap();
        let status = child.wait().await.unwrap();
        assert!(
            status.code().is_none_or(|c| c != 11),
            "kill {kill}: exited as non-master"
        );
    }
    sim.set_http_faults(HttpFaults::default());
    let during = sim.submissions().iter().filter(|s| !s.internal).count();
    println!(
        "{kills} kills in {:?}; {during} jobs submitted meanwhile",
        started.elapsed()
    );
    let mut child = spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "instance repairs did not finish: {:#?}",
            sim.with_cluster(|c| repaired
                .iter()
                .map(|n| (c.instances[n].pnode.clone(), c.instances[n].tags.clone()))
                .collect::<Vec<_>>())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let violations = watch.stop().await;
    assert!(violations.is_empty(), "the checker: {violations:#?}");
    let duplicates = sim.duplicate_intents();
    assert!(
        duplicates.is_empty(),
        "jobs submitted twice: {duplicates:?}"
    );
    for name in &repaired {
        let failovers = sim
            .submissions()
            .iter()
            .filter(|s| !s.internal && s.op_id == "OP_INSTANCE_FAILOVER" && s.target == *name)
            .count();
        assert_eq!(failovers, 1, "{name} failed over {failovers} times");
        let pnode = sim.with_cluster(|c| c.instances[name].pnode.clone());
        assert_ne!(pnode, node(2), "{name} still on the offline node");
    }
}

/// The same with rolling maintenance campaigns, one after the other (a new one once the last
/// one finished): four nodes rebooted by a hook in groups of at most two, their instances moved
/// away and back, the coordinator killed at random points (with 5xx, hangs and resets injected)
/// while it drains, migrates, runs hooks, waits for the reboots, undrains and moves back. Every
/// campaign completes and runs each node's hook exactly once; no intent is submitted twice; the
/// instances are back on their primaries and every node is undrained after each campaign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_campaign_reboots_each_node_once() {
    use nodecare_protocol::maintenance::{CampaignRequest, CampaignState};
    use std::collections::BTreeMap;

    const NODES: usize = 4;
    let sim = Simulation::new(
        SimConfig::from_spec(
            NODES,
            "d1:drbd:1,s1:sharedfile:1,d2:drbd:2,l2:diskless:2,d3:drbd:3,s3:sharedfile:3,d4:drbd:4",
            DOMAIN,
        )
        .unwrap(),
    )
    .unwrap();
    sim.set_job_delay(Duration::from_millis(150));
    // The independent checker judges the cluster all along, from Ganeti's side.
    let watch = Watch::start(
        sim.clone(),
        Watched {
            nodes: NODES,
            racks: 1,
            cluster_cap: 2,
            min_healthy: 2,
        },
    );
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap(), None)
        .await
        .unwrap();
    let key = test_key();
    let mut agents = FakeAgents::default();
    for i in 1..=NODES {
        agents
            .start(&node(i), &key, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        agents
            .get(&node(i))
            .unwrap()
            .set_boot_id(Some(&format!("boot-{i}-0")));
    }
    let layout = || {
        sim.with_cluster(|c| {
            c.instances
                .values()
                .map(|i| (i.name.clone(), i.pnode.clone()))
                .collect::<BTreeMap<_, _>>()
        })
    };
    let before = layout();

    // The hook reboots the node: a new boot id once the agent ran it. Runs are counted by the
    // request's id (the agent runs a request it already knows only once).
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let player = {
        let agents: Vec<_> = (1..=NODES)
            .map(|i| (i, agents.get(&node(i)).unwrap().clone()))
            .collect();
        tokio::spawn(async move {
            let mut runs: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
            loop {
                for (i, agent) in &agents {
                    let seen = runs.entry(*i).or_default();
                    for id in agent.repairs() {
                        if seen.insert(id) {
                            agent.set_boot_id(Some(&format!("boot-{i}-{}", seen.len())));
                        }
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                    _ = stopped.changed() => break runs,
                }
            }
        })
    };

    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("hmac.key");
    std::fs::write(&key_path, b"nodecare-test-cluster-hmac-key\n").unwrap();
    // Secrets are refused when others can read them.
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let state_dir = dir.path().join("state");
    let overrides: Vec<String> = agents
        .overrides()
        .iter()
        .map(|(n, u)| format!("{n:?} = {u:?}"))
        .collect();
    let config = format!(
        "node_name = {:?}\nstate_dir = {:?}\nhmac_key = {:?}\nlisten = \"127.0.0.1:0\"\n\
         round_interval = 0.03\nrepair_poll = 0.05\njob_timeout = 60\nmax_disrupted_nodes = 2\n\
         min_healthy_nodes = 2\n\
         [breaker]\nmax_incident_percent = 100.0\n\
         [agents]\ntimeout = 1.0\noverrides = {{ {} }}\n\
         [rapi]\nurl = {:?}\nallow_plain_http = true\ntimeout = 0.25\n",
        node(1),
        state_dir,
        key_path,
        overrides.join(", "),
        server.url,
    );
    let config_path = dir.path().join("coordinator.toml");
    std::fs::write(&config_path, config).unwrap();
    // A campaign as `POST /1/maintenance` records it; a new one once the last one finished, so
    // that every kill lands in some campaign.
    let start_campaign = || {
        let record = nodecare_core::campaign::Record::new(
            uuid::Uuid::new_v4(),
            CampaignRequest::new("reboot"),
            "ops",
            nodecare_protocol::now_ms(),
        );
        Store::open_dir(&state_dir)
            .unwrap()
            .save_campaign(&record)
            .unwrap();
        record.campaign.id
    };
    let campaign = |id: &str| {
        Store::open_dir(&state_dir)
            .unwrap()
            .campaigns()
            .unwrap()
            .into_iter()
            .find(|r| r.campaign.id == id)
            .unwrap()
    };
    // A finished campaign: completed, every node rebooted, the instances back, nodes in service.
    let check_finished = |record: &nodecare_core::campaign::Record| {
        assert_eq!(
            record.campaign.state,
            CampaignState::Completed,
            "{:#?}",
            record.campaign
        );
        assert_eq!(record.campaign.nodes_progress(), (NODES, NODES));
        assert_eq!(layout(), before, "instances not back on their primaries");
        assert!(
            sim.with_cluster(|c| c.instances.values().all(|i| i.running)),
            "an instance is down"
        );
        assert!(
            sim.with_cluster(|c| c.nodes.values().all(|n| !n.drained && !n.offline)),
            "a node is still drained or offline"
        );
    };
    let mut campaigns = vec![start_campaign()];
    let spawn = || spawn_coordinator(&config_path);

    let seed = random_seed();
    println!("campaign crash test seed {seed}");
    let mut random = Random(seed);
    let started = Instant::now();
    let kills = kills();
    let ours = |sim: &Simulation| {
        sim.submissions()
            .into_iter()
            .filter(|s| {
                !s.internal
                    && s.reason_text
                        .as_deref()
                        .is_some_and(|t| t.contains("maintenance campaign "))
            })
            .count()
    };
    let mut kill = 0;
    // Under load the coordinator may need more lives to get a job out: a few more kills then.
    while kill < kills || (kill < 4 * kills && ours(&sim) == 0) {
        kill += 1;
        match random.next() % 10 {
            0 => sim.set_http_faults(HttpFaults {
                fail_5xx: 1,
                method: Some("PUT".into()),
                ..HttpFaults::default()
            }),
            1 => sim.set_http_faults(HttpFaults {
                hang: 1,
                hang_ms: 400,
                method: Some("POST".into()),
                ..HttpFaults::default()
            }),
            2 => sim.set_http_faults(HttpFaults {
                reset: 1,
                method: Some("PUT".into()),
                ..HttpFaults::default()
            }),
            _ => {}
        }
        let mut child = spawn();
        tokio::time::sleep(Duration::from_millis(random.next() % 250)).await;
        child.start_kill().unwrap();
        let status = child.wait().await.unwrap();
        assert!(
            status.code().is_none_or(|c| c != 11),
            "kill {kill}: exited as non-master"
        );
        let current = campaign(campaigns.last().unwrap());
        if current.campaign.state.is_final() {
            check_finished(&current);
            campaigns.push(start_campaign());
        }
    }
    sim.set_http_faults(HttpFaults::default());
    let during = ours(&sim);
    println!(
        "{kill} kills in {:?}; {during} campaign jobs submitted meanwhile, {} campaigns",
        started.elapsed(),
        campaigns.len()
    );
    assert!(
        during > 0,
        "the coordinator never got to submit a job between kills"
    );

    // Let it finish undisturbed.
    let mut child = spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let record = campaign(campaigns.last().unwrap());
        if record.campaign.state.is_final() {
            break record;
        }
        assert!(
            Instant::now() < deadline,
            "the campaign did not finish: {:#?}",
            record.campaign
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    stop.send(true).unwrap();
    let runs = player.await.unwrap();

    check_finished(&done);
    // Each campaign ran the hook once on every node.
    for i in 1..=NODES {
        let hooks = runs.get(&i).map_or(0, BTreeSet::len);
        assert_eq!(
            hooks,
            campaigns.len(),
            "the hook ran {hooks} times on {} in {} campaigns",
            node(i),
            campaigns.len()
        );
    }
    let violations = watch.stop().await;
    assert!(violations.is_empty(), "the checker: {violations:#?}");
    let duplicates = sim.duplicate_intents();
    assert!(
        duplicates.is_empty(),
        "jobs submitted twice: {duplicates:?}"
    );
    let submitted = ours(&sim);
    println!(
        "{submitted} campaign jobs in all, {:?} in all",
        started.elapsed()
    );
    assert!(
        submitted >= 10 * campaigns.len(),
        "{submitted} jobs in {} campaigns",
        campaigns.len()
    );
    server.stop();
}

/// The coordinator under test, started on `config_path`, quiet, killed when dropped.
#[allow(
    clippy::unwrap_used,
    reason = "test helper: a failure is the test failing"
)]
fn spawn_coordinator(config_path: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_nodecare-coordinator-under-test"))
        .arg("--config")
        .arg(config_path)
        .env("NODECARE_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// A seed for [`Random`] from the clock (printed by each test, to replay a failure).
#[allow(
    clippy::unwrap_used,
    reason = "test helper: a failure is the test failing"
)]
fn random_seed() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_007,
    )
    .unwrap()
        | 1
}
