//! What if, against the daemon itself: a what-if asked of a running coordinator (its API, its
//! settings, its store, the agents read by its scraper) predicts the Ganeti jobs, in order,
//! that the coordinator then submits to the simulated cluster once the change is real, and
//! changes nothing before.

#![allow(
    clippy::unwrap_used,
    clippy::cast_possible_truncation,
    reason = "test code: the helpers of the tests"
)]

use std::collections::{BTreeMap, BTreeSet};

use crate::gate::all_duties::{Watch, Watched};
use nodecare_coordinator::{what_if, what_if_api};
use nodecare_exec::ledger::Ledger as _;
use nodecare_protocol::what_if::{Ending, WhatIf};
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

/// `(opcode, target, operation)` of every job nodecare submitted, in order.
fn ran(h: &Harness) -> Vec<(String, String, String)> {
    h.sim
        .submissions()
        .into_iter()
        .filter(|s| !s.internal)
        .map(|s| {
            let operation = s.operation().unwrap_or_default().to_owned();
            (s.op_id, s.target, operation)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_submits_the_jobs_a_what_if_predicted() {
    // One node; two apart; two sharing DRBD instances (the second waits, and so does the first).
    for evacuated in [vec![2], vec![2, 4], vec![2, 3]] {
        let mut h = Harness::new(
            5,
            "a:drbd:2,b:drbd:2,c:drbd:3,d:diskless:4,e:drbd:5",
            |_| {},
        )
        .await
        .unwrap();
        // The independent checker judges the cluster all along, from Ganeti's side.
        let watch = Watch::start(
            h.sim.clone(),
            Watched {
                nodes: 5,
                racks: 1,
                cluster_cap: h.config.max_disrupted_nodes,
                min_healthy: h.config.min_healthy_nodes,
            },
        );
        h.round().await.unwrap();
        let query = evacuated
            .iter()
            .map(|i| format!("verdict={}:evacuate", node(*i)))
            .collect::<Vec<_>>()
            .join("&");
        let before = h.coordinator.api().store.snapshot().unwrap();
        let predicted = what_if_api::what_if(h.coordinator.api(), Some(&query))
            .await
            .unwrap();
        assert_eq!(h.coordinator.api().store.snapshot().unwrap(), before);
        assert!(h.sim.submissions().is_empty(), "{query}");
        assert!(
            matches!(predicted.ending, Ending::Settled { .. }),
            "{query}: {:?}",
            predicted.ending
        );
        assert!(!predicted.jobs.is_empty(), "{query}");

        // The change made real: the agents report it, the daemon's rounds run.
        for i in &evacuated {
            h.agents.get(&node(*i)).unwrap().set_verdict(verdict(
                "evacuate",
                json!({"disk": "sdb"}),
                None,
            ));
        }
        let mut quiet = 0;
        for _ in 0..30 {
            let submitted = h.sim.submissions().len();
            h.round().await.unwrap();
            quiet = if h.sim.submissions().len() == submitted {
                quiet + 1
            } else {
                0
            };
            if quiet == 3 {
                break;
            }
        }
        let jobs: Vec<_> = predicted
            .jobs
            .iter()
            .map(|j| (j.opcode.clone(), j.target.clone(), j.operation.clone()))
            .collect();
        assert_eq!(jobs, ran(&h), "{query}");
        let violations = watch.stop().await;
        assert!(
            violations.is_empty(),
            "{query}: the checker: {violations:#?}"
        );
    }
}

/// A small deterministic generator (splitmix64): the property's cases are reproducible from
/// their seed.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The end as both sides state it: the nodes drained, offline or changed since the moment
/// (drained, offline, primaries), the incidents (node, status, why with uuids written
/// `<uuid>`), the campaigns (state, why).
type End = (
    Vec<(String, bool, bool, usize)>,
    Vec<(String, String, Option<String>)>,
    Vec<(String, Option<String>)>,
);

/// `text` with each uuid written `<uuid>` (a what-if's new incidents are its own).
fn without_uuids(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            let bare = word
                .trim_end_matches([',', ')', ':', ';'])
                .trim_start_matches('(');
            if uuid::Uuid::parse_str(bare).is_ok() {
                word.replace(bare, "<uuid>")
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each node's (drained, offline, primaries) in the simulated cluster.
fn node_states(h: &Harness) -> BTreeMap<String, (bool, bool, usize)> {
    h.sim.peek(|c| {
        c.nodes
            .values()
            .map(|n| {
                let primaries = c.instances.values().filter(|i| i.pnode == n.name).count();
                (n.name.clone(), (n.drained, n.offline, primaries))
            })
            .collect()
    })
}

/// The end of the daemon's rounds, as a what-if states its own.
fn daemon_end(h: &Harness, at_moment: &BTreeMap<String, (bool, bool, usize)>) -> End {
    let nodes = node_states(h)
        .into_iter()
        .filter(|(name, state)| state.0 || state.1 || at_moment.get(name) != Some(state))
        .map(|(name, (drained, offline, primaries))| (name, drained, offline, primaries))
        .collect();
    let store = &h.coordinator.api().store;
    let mut incidents: Vec<_> = store
        .incidents()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i.node.clone(),
                i.repair_status.as_str().to_owned(),
                what_if::incident_why(i).as_deref().map(without_uuids),
            )
        })
        .collect();
    incidents.sort();
    let campaigns = store
        .campaigns()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.state().to_string(),
                what_if::campaign_why(&r.campaign)
                    .as_deref()
                    .map(without_uuids),
            )
        })
        .collect();
    (nodes, incidents, campaigns)
}

/// The end a what-if predicted.
fn predicted_end(predicted: &WhatIf) -> End {
    let nodes = predicted
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.drained, n.offline, n.primaries))
        .collect();
    let mut incidents: Vec<_> = predicted
        .incidents
        .iter()
        .map(|i| {
            (
                i.node.clone(),
                i.status.clone(),
                i.why.as_deref().map(without_uuids),
            )
        })
        .collect();
    incidents.sort();
    let campaigns = predicted
        .campaigns
        .iter()
        .map(|c| (c.state.clone(), c.why.as_deref().map(without_uuids)))
        .collect();
    (nodes, incidents, campaigns)
}

/// Plays the campaign's hooks as reboots: every node whose agent ran a hook since the last call
/// reports a new boot id.
fn reboot_after_hooks(h: &Harness, nodes: usize, runs: &mut BTreeMap<String, BTreeSet<String>>) {
    for i in 1..=nodes {
        let name = node(i);
        let agent = h.agents.get(&name).unwrap();
        let seen = runs.entry(name.clone()).or_default();
        for id in agent.repairs() {
            if seen.insert(id) {
                agent.set_boot_id(Some(&format!("boot-{i}-{}", seen.len())));
            }
        }
    }
}

/// Whether nodecare has jobs in flight (ledger entries submitted and not ended).
fn jobs_in_flight(h: &Harness) -> usize {
    h.coordinator
        .api()
        .store
        .entries()
        .unwrap()
        .iter()
        .filter(|e| e.state.is_unfinished() && e.job.is_some())
        .count()
}

/// One case of the property: a cluster of `nodes` nodes with `instances`; `evacuate` nodes'
/// agents report `evacuate` from the start (and `campaign`: a rebooting campaign starts);
/// after `rounds_before` of the daemon's rounds, at a moment its jobs are in flight where it
/// has some, a what-if with no change is asked (or one with `change`, which is then made
/// real); the daemon's rounds then run until nothing changes. The what-if's jobs, in order,
/// and its end equal the daemon's.
async fn one_case(
    nodes: usize,
    instances: &str,
    evacuate: &[usize],
    campaign: bool,
    rounds_before: usize,
    change: Option<usize>,
) {
    let what = format!(
        "{nodes} nodes, {instances}, evacuate {evacuate:?}, campaign {campaign}, {rounds_before} rounds before, then verdict {change:?}"
    );
    let mut h = Harness::new(nodes, instances, |config| {
        config.max_disrupted_nodes = 2;
        config.min_healthy_nodes = 2;
    })
    .await
    .unwrap();
    for i in 1..=nodes {
        h.agents
            .get(&node(i))
            .unwrap()
            .set_boot_id(Some(&format!("boot-{i}-0")));
    }
    for i in evacuate {
        h.agents.get(&node(*i)).unwrap().set_verdict(verdict(
            "evacuate",
            json!({"disk": "sdb"}),
            None,
        ));
    }
    if campaign {
        let record = nodecare_core::campaign::Record::new(
            uuid::Uuid::new_v4(),
            nodecare_protocol::maintenance::CampaignRequest::new("reboot"),
            "ops",
            nodecare_protocol::now_ms(),
        );
        h.coordinator.api().store.save_campaign(&record).unwrap();
    }
    let mut runs = BTreeMap::new();
    // The daemon's rounds up to the moment; the last one's jobs are left in flight (they take
    // a while).
    h.sim.set_job_delay(std::time::Duration::from_millis(20));
    for _ in 0..rounds_before {
        h.round().await.unwrap();
        reboot_after_hooks(&h, nodes, &mut runs);
    }
    h.sim.set_job_delay(std::time::Duration::from_millis(400));
    h.coordinator.round().await.unwrap();
    reboot_after_hooks(&h, nodes, &mut runs);
    h.sim.set_job_delay(std::time::Duration::from_millis(20));
    let in_flight = jobs_in_flight(&h);
    let at_moment = node_states(&h);
    let submitted = h.sim.submissions().len();
    let query = change
        .map(|i| format!("verdict={}:evacuate", node(i)))
        .unwrap_or_default();
    let predicted = what_if_api::what_if(h.coordinator.api(), Some(&query))
        .await
        .unwrap();
    assert_eq!(
        h.sim.submissions().len(),
        submitted,
        "{what}: the what-if sent a job"
    );
    assert!(
        matches!(predicted.ending, Ending::Settled { .. }),
        "{what}: {:?}\n{:#?}",
        predicted.ending,
        predicted.rounds.iter().rev().take(3).collect::<Vec<_>>()
    );
    if in_flight > 0 {
        assert!(predicted.start.jobs_in_flight > 0, "{what}");
    }

    // What the daemon's rounds then do.
    if let Some(i) = change {
        h.agents.get(&node(i)).unwrap().set_verdict(verdict(
            "evacuate",
            json!({"disk": "sdb"}),
            None,
        ));
    }
    assert!(h.sim.settle(std::time::Duration::from_secs(5)).await);
    let mut quiet = 0;
    // Everything that tells one round's end from the next (a campaign's steps included).
    let state = |h: &Harness| {
        let campaigns: Vec<String> = h
            .coordinator
            .api()
            .store
            .campaigns()
            .unwrap()
            .iter()
            .map(|r| serde_json::to_string(&r.campaign.groups).unwrap())
            .collect();
        (
            h.sim.submissions().len(),
            daemon_end(h, &at_moment),
            campaigns,
        )
    };
    for _ in 0..100 {
        let before = state(&h);
        h.round().await.unwrap();
        reboot_after_hooks(&h, nodes, &mut runs);
        if campaign {
            // A hook runs on its agent for a while, as the daemon's rounds go on.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        quiet = if state(&h) == before { quiet + 1 } else { 0 };
        if quiet == 3 {
            break;
        }
    }
    assert_eq!(quiet, 3, "{what}: the daemon's rounds never settled");
    let ran: Vec<_> = ran(&h).into_iter().skip(submitted).collect();
    let jobs: Vec<_> = predicted
        .jobs
        .iter()
        .map(|j| (j.opcode.clone(), j.target.clone(), j.operation.clone()))
        .collect();
    if jobs != ran {
        let at = jobs.iter().zip(&ran).take_while(|(a, b)| a == b).count();
        panic!(
            "{what}: the jobs differ from #{at} on (predicted {}, ran {}):\npredicted {:#?}\nran {:#?}",
            jobs.len(),
            ran.len(),
            &jobs[at.min(jobs.len())..],
            &ran[at.min(ran.len())..]
        );
    }
    assert_eq!(
        predicted_end(&predicted),
        daemon_end(&h, &at_moment),
        "{what}: the end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_what_if_during_an_evacuation_follows_its_jobs_in_flight() {
    // Node 2's evacuation has its first jobs in flight when the what-if is asked.
    one_case(
        5,
        "a:drbd:2,b:drbd:2,c:diskless:2,d:drbd:4",
        &[2],
        false,
        0,
        None,
    )
    .await;
    // Later in the evacuation, with a second one asked for.
    one_case(
        5,
        "a:drbd:2,b:drbd:2,c:diskless:2,d:drbd:4",
        &[2],
        false,
        1,
        Some(4),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_what_if_reads_the_agents_as_they_are_at_the_request() {
    let mut h = Harness::new(5, "a:drbd:2,b:drbd:3,c:diskless:3", |_| {})
        .await
        .unwrap();
    h.round().await.unwrap();
    // A verdict no round has seen yet.
    h.agents
        .get(&node(3))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    let predicted = what_if_api::what_if(h.coordinator.api(), None)
        .await
        .unwrap();
    assert!(
        predicted
            .incidents
            .iter()
            .any(|i| i.node == node(3) && i.new && i.status == "completed"),
        "{:#?}",
        predicted.incidents
    );
    assert!(!predicted.jobs.is_empty());
    assert_eq!(predicted.start.recorded_round, None);
    let mut quiet = 0;
    while quiet < 3 {
        let submitted = h.sim.submissions().len();
        h.round().await.unwrap();
        quiet = if h.sim.submissions().len() == submitted {
            quiet + 1
        } else {
            0
        };
    }
    let jobs: Vec<_> = predicted
        .jobs
        .iter()
        .map(|j| (j.opcode.clone(), j.target.clone(), j.operation.clone()))
        .collect();
    assert_eq!(jobs, ran(&h));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_what_if_during_a_campaign_follows_its_jobs_in_flight() {
    // The first group's drains and migrations are in flight (no hook sent yet).
    one_case(
        5,
        "a:drbd:2,b:drbd:3,c:diskless:4,d:drbd:5",
        &[],
        true,
        0,
        None,
    )
    .await;
}

/// The property over random clusters, changes and moments (`NODECARE_WHAT_IF_CASES` cases,
/// default 4; `NODECARE_WHAT_IF_SEED` the first seed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_what_if_equals_the_daemons_rounds_job_for_job() {
    let cases: u64 = std::env::var("NODECARE_WHAT_IF_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let first: u64 = std::env::var("NODECARE_WHAT_IF_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    for seed in first..first + cases {
        let mut r = Seeded(seed);
        let nodes = 4 + r.below(3);
        let templates = ["drbd", "drbd", "diskless", "sharedfile"];
        let instances: Vec<String> = (0..2 + r.below(5))
            .map(|i| {
                format!(
                    "i{i}:{}:{}",
                    templates[r.below(templates.len())],
                    2 + r.below(nodes - 1)
                )
            })
            .collect();
        let campaign = r.below(3) == 0;
        let evacuate: Vec<usize> = if campaign {
            Vec::new()
        } else {
            (0..1 + r.below(2))
                .map(|_| 2 + r.below(nodes - 1))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect()
        };
        // A campaign's hooks in flight are not carried into the simulation: its moments are
        // those of its first group's jobs.
        let rounds_before = if campaign { 0 } else { r.below(3) };
        let change = (r.below(2) == 0 && !campaign).then(|| 2 + r.below(nodes - 1));
        eprintln!("seed {seed}");
        one_case(
            nodes,
            &instances.join(","),
            &evacuate,
            campaign,
            rounds_before,
            change,
        )
        .await;
    }
}

/// A verdict the grace of a granted admission would hold back is a wait of the what-if, under
/// the grant's holder, with the same waiting line (holder, end) as the status once the verdict
/// is real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_what_if_shows_a_verdict_held_in_a_grace_as_the_status_does() {
    let mut h = Harness::new(5, "a:drbd:2,b:diskless:3", |_| {})
        .await
        .unwrap();
    h.round().await.unwrap();
    let now = nodecare_protocol::now_ms();
    let grant = nodecare_protocol::gate::Grant {
        id: uuid::Uuid::from_u128(77).to_string(),
        node: node(4),
        reason: "kernel update".into(),
        requester: "kured".into(),
        granted_ms: now,
        expires_ms: now + 600_000,
        who: "ops".into(),
    };
    h.coordinator
        .api()
        .store
        .save_grant(&grant, now, false)
        .unwrap();
    let predicted = what_if_api::what_if(
        h.coordinator.api(),
        Some(&format!("verdict={}:evacuate", node(4))),
    )
    .await
    .unwrap();
    let holder = "admission 00000000-0000-0000-0000-00000000004d of kured";
    let wait = predicted
        .rounds
        .first()
        .and_then(|r| {
            r.waits
                .iter()
                .find(|w| w.rule == nodecare_protocol::what_if::GRACE_WAITS)
        })
        .cloned()
        .unwrap_or_else(|| panic!("{:#?}", predicted.rounds));
    assert_eq!(wait.holder, holder);
    assert_eq!(wait.subject, format!("node {}", node(4)));
    // The same line as the status once the verdict is real.
    h.agents
        .get(&node(4))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.round().await.unwrap();
    let gate = nodecare_coordinator::admission::gate_status(h.coordinator.api()).unwrap();
    let line = gate
        .waiting
        .iter()
        .find(|w| w.subject == format!("node {}", node(4)))
        .unwrap_or_else(|| panic!("{:#?}", gate.waiting));
    assert_eq!(wait.why, line.blocked_by);
    assert!(
        wait.why.starts_with(&format!(
            "verdict evacuate not acted on: in the grace of {holder}'s disruption of it, until "
        )),
        "{wait:?}"
    );
}

/// Failback in a what-if: once an evacuation completed (the node left drained, its memory
/// known), `return=NODE` with the node's verdict `Ok` predicts the moves home, and the daemon
/// submits the same jobs once the operator returns the node to service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_what_if_predicts_the_moves_home_of_a_returned_node() {
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:2,c:diskless:3", |c| {
        c.failback.enabled = true;
        c.failback.settle_secs = 0.0;
        c.offline_after_evacuation = false;
    })
    .await
    .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    let completed = |i: &[nodecare_core::incident::Incident]| {
        i.len() == 1 && i[0].repair_status == nodecare_core::incident::RepairStatus::Completed
    };
    assert!(h.until(20, completed).await.unwrap());
    h.round().await.unwrap();
    let noted = nodecare_coordinator::failback::homecomings(&h.coordinator.api().store).unwrap();
    assert_eq!(noted.len(), 1, "{noted:#?}");
    let before = ran(&h).len();
    let query = format!("return={}&verdict={}:Ok", node(2), node(2));
    let predicted = what_if_api::what_if(h.coordinator.api(), Some(&query))
        .await
        .unwrap();
    assert_eq!(ran(&h).len(), before, "the what-if submitted nothing");
    let home: Vec<_> = predicted
        .jobs
        .iter()
        .filter(|j| j.operation.starts_with("balancing (failback "))
        .map(|j| (j.opcode.clone(), j.target.clone(), j.operation.clone()))
        .collect();
    assert_eq!(home.len(), 2, "{predicted:#?}");
    // Made real: the node repaired, returned and acknowledged.
    agent.set_verdict(verdict("Ok", json!(null), None));
    h.sim.with_cluster(|c| {
        let n = c.nodes.get_mut(&node(2)).unwrap();
        n.offline = false;
        n.drained = false;
        n.tags.retain(|t| !t.starts_with("maintd:"));
    });
    for _ in 0..10 {
        h.round().await.unwrap();
    }
    let done: Vec<_> = ran(&h)
        .into_iter()
        .skip(before)
        .filter(|(_, _, operation)| operation.starts_with("balancing (failback "))
        .collect();
    assert_eq!(done, home);
}

/// A what-if naming a node the last round did not see is refused before any read of Ganeti:
/// with every RAPI request failing, the answer is still `400` naming the node, not `502`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_about_an_unknown_node_reads_nothing_of_ganeti() {
    let mut h = Harness::new(3, "a:diskless:2", |_| {}).await.unwrap();
    h.round().await.unwrap();
    h.sim.set_http_faults(nodecare_ganeti_sim::HttpFaults {
        fail_5xx: 1_000,
        ..Default::default()
    });
    let answer = what_if_api::what_if(h.coordinator.api(), Some("drain=nosuch")).await;
    h.sim
        .set_http_faults(nodecare_ganeti_sim::HttpFaults::default());
    match answer {
        Err((status, message)) => {
            assert_eq!(status, 400, "{message}");
            assert!(message.contains("unknown node nosuch"), "{message}");
        }
        Ok(answer) => panic!("answered: {answer:?}"),
    }
    // A known node goes on to read Ganeti as before.
    let known = format!("drain={}", node(2));
    assert!(
        what_if_api::what_if(h.coordinator.api(), Some(&known))
            .await
            .is_ok()
    );
}
