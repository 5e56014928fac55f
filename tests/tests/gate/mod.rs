//! The gate end to end on the simulated cluster: failure domains and the storm breaker (R5).

pub(crate) mod all_duties;
mod seams;

use std::collections::BTreeSet;
use std::time::Instant;

use nodecare_coordinator::reconcile::BREAKER_DOCUMENT;
use nodecare_core::breaker::BreakerState;
use nodecare_core::gate::{Caps, DomainSource};
use nodecare_core::incident::RepairStatus;
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

fn evacuate(n: usize) -> nodecare_protocol::NodeVerdict {
    verdict("evacuate", json!({"disk": format!("sd{n}")}), None)
}

/// Racks of ten nodes: `rack:r0` … `rack:r9`.
fn rack_of(i: usize) -> String {
    format!("rack:r{}", (i - 1) / 10)
}

/// Nodes out of service: drained, or offline (where an evacuation ends).
fn drained(h: &Harness) -> BTreeSet<String> {
    h.sim.with_cluster(|c| {
        c.nodes
            .values()
            .filter(|n| n.drained || n.offline)
            .map(|n| n.name.clone())
            .collect()
    })
}

/// Issue 12, R5: 100 nodes, half of them report `evacuate` within one minute. The breaker
/// opens, at most the cap is disrupted (in one failure domain), nothing else acts, and every
/// waiting incident says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_opens_the_breaker_and_nothing_beyond_the_cap_acts() {
    const NODES: usize = 100;
    let spec: Vec<String> = (1..=NODES).map(|i| format!("i{i}:diskless:{i}")).collect();
    let mut h = Harness::new(NODES, &spec.join(","), |config| {
        config.failure_domains = "rack:".into();
        config.max_disrupted_nodes = 3;
        config.min_healthy_nodes = 2;
        config.agents.concurrency = 128;
    })
    .await
    .unwrap();
    assert_eq!(
        h.config.domain_source(),
        DomainSource::TagPrefix("rack:".into())
    );
    assert_eq!(
        h.config.caps(),
        Caps {
            max_disrupted_nodes: 3,
            max_disrupted_percent: None,
            min_healthy_nodes: 2
        }
    );
    h.sim.with_cluster(|c| {
        for i in 1..=NODES {
            if let Some(n) = c.nodes.get_mut(&node(i)) {
                n.tags.push(rack_of(i));
            }
        }
    });
    let started = Instant::now();
    // The storm: every second node of racks r1.. (node 12, 14, … 100) says evacuate, in five
    // waves over five rounds (within the breaker's window).
    let sick: Vec<usize> = (12..=NODES)
        .step_by(2)
        .take(45)
        .chain([2, 4, 6, 8, 10])
        .collect();
    assert_eq!(sick.len(), 50);
    let mut rounds = Vec::new();
    // The first wave is small (a normal day): it is admitted within the cap.
    for i in sick.iter().copied().filter(|i| *i <= 10) {
        h.agents.get(&node(i)).unwrap().set_verdict(evacuate(i));
    }
    let t = Instant::now();
    h.round().await.unwrap();
    rounds.push(t.elapsed());
    let breaker: Option<BreakerState> = h
        .coordinator
        .api()
        .store
        .document(BREAKER_DOCUMENT)
        .unwrap();
    assert!(
        breaker.is_none_or(|b| b.open.is_none()),
        "five incidents in 100 nodes are no storm"
    );
    for wave in sick
        .iter()
        .copied()
        .filter(|i| *i > 10)
        .collect::<Vec<_>>()
        .chunks(9)
    {
        for i in wave {
            h.agents.get(&node(*i)).unwrap().set_verdict(evacuate(*i));
        }
        let t = Instant::now();
        h.round().await.unwrap();
        rounds.push(t.elapsed());
    }
    for _ in 0..5 {
        let t = Instant::now();
        h.round().await.unwrap();
        rounds.push(t.elapsed());
    }
    let incidents = h.incidents().unwrap();
    assert_eq!(incidents.len(), 50);
    let breaker: BreakerState = h
        .coordinator
        .api()
        .store
        .document(BREAKER_DOCUMENT)
        .unwrap()
        .unwrap();
    let (opened_ms, why) = breaker.open.clone().expect("the breaker is open");
    assert!(why.contains("nodes opened incidents"), "{why}");
    // At most the cap is disrupted, all in the first wave's rack (r0), nothing else drained.
    let drained = drained(&h);
    assert!(!drained.is_empty() && drained.len() <= 3, "{drained:?}");
    for name in &drained {
        let i: usize = name
            .trim_start_matches("node")
            .split('.')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(i <= 10, "{name} outside the first domain was drained");
    }
    let acting: Vec<_> = incidents
        .iter()
        .filter(|i| i.repair_status != RepairStatus::Noted)
        .collect();
    assert!(acting.len() <= 3, "{} incidents acted", acting.len());
    for incident in incidents
        .iter()
        .filter(|i| i.repair_status == RepairStatus::Noted)
    {
        let why = incident.blocked_by.as_deref().unwrap_or("");
        assert!(
            why.starts_with("storm breaker open")
                || why.starts_with("cap: ")
                || why.starts_with("failure domain"),
            "{}: {why:?}",
            incident.node
        );
        assert!(incident.jobs.is_empty());
    }
    let jobs = h.sim.submissions().iter().filter(|s| !s.internal).count();
    let waiting_breaker = incidents
        .iter()
        .filter(|i| {
            i.blocked_by
                .as_deref()
                .is_some_and(|b| b.starts_with("storm breaker open"))
        })
        .count();
    let status = h
        .coordinator
        .api()
        .board
        .gate
        .read()
        .unwrap()
        .clone()
        .unwrap();
    assert!(status.policy.breaker.is_some());
    println!(
        "R5 storm: {NODES} nodes, 50 evacuate verdicts in {} rounds ({:?}); breaker opened at {opened_ms} ({why}); \
         {} node(s) drained ({:?}), {} incident(s) acting, {waiting_breaker} waiting on the breaker, {jobs} Ganeti jobs; \
         round time max {:?}",
        rounds.len(),
        started.elapsed(),
        drained.len(),
        drained,
        acting.len(),
        rounds.iter().max().unwrap(),
    );
    // An operator's reset closes it: the storm's incidents no longer count, the cap still holds.
    let store = std::sync::Arc::clone(&h.coordinator.api().store);
    store
        .save_document(
            BREAKER_DOCUMENT,
            &nodecare_core::breaker::reset(breaker, nodecare_protocol::now_ms()),
        )
        .unwrap();
    h.round().await.unwrap();
    let after: BreakerState = store.document(BREAKER_DOCUMENT).unwrap().unwrap();
    assert!(after.open.is_none(), "{after:?}");
    assert!(drained_count(&h) <= 3);
}

fn drained_count(h: &Harness) -> usize {
    drained(h).len()
}

/// Six nodes in two racks, `rack:a` (nodes 1–3) and `rack:b` (nodes 4–6), the failure domains,
/// with `instances`, at most `max` nodes disrupted, and no storm breaker in the way (a few
/// incidents among six nodes would be a storm).
#[allow(
    clippy::unwrap_used,
    reason = "test setup: a failure is the test's failure"
)]
async fn two_racks(instances: &str, max: usize) -> Harness {
    let h = Harness::new(6, instances, |config| {
        config.failure_domains = "rack:".into();
        config.max_disrupted_nodes = max;
        config.breaker.max_incident_percent = 100.0;
    })
    .await
    .unwrap();
    h.sim.with_cluster(|c| {
        for i in 1..=6 {
            let rack = if i <= 3 { "rack:a" } else { "rack:b" };
            c.nodes.get_mut(&node(i)).unwrap().tags.push(rack.into());
        }
    });
    h
}

/// Two nodes in different domains report evacuate at once: one proceeds, the other waits with
/// `blocked_by` naming the busy domain, and proceeds once the first is returned to service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failure_domain_at_a_time() {
    let mut h = two_racks("a:diskless:2,b:diskless:5,c:diskless:3", 3).await;
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    h.agents.get(&node(5)).unwrap().set_verdict(evacuate(5));
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    let incidents = h.incidents().unwrap();
    let waiting = incidents.iter().find(|i| i.node == node(5)).unwrap();
    assert_eq!(waiting.repair_status, RepairStatus::Noted);
    let why = waiting.blocked_by.clone().unwrap_or_default();
    assert!(
        why.starts_with("failure domain rack:a is disrupted (node2.sim.test: incident "),
        "{why}"
    );
    assert!(why.ends_with("rack:b waits"), "{why}");
    // A third node in the busy domain may go (within the caps).
    h.agents.get(&node(3)).unwrap().set_verdict(evacuate(3));
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(3) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap(),
        "{:#?}",
        h.incidents()
            .unwrap()
            .iter()
            .map(|i| (
                i.node.clone(),
                i.repair_status,
                i.blocked_by.clone(),
                i.failure.clone()
            ))
            .collect::<Vec<_>>()
    );
    // The operator returns rack a to service: rack b's node is emptied.
    h.sim.with_cluster(|c| {
        for i in [2, 3] {
            let n = c.nodes.get_mut(&node(i)).unwrap();
            n.drained = false;
            n.offline = false;
            n.tags.retain(|t| !t.starts_with("maintd:"));
        }
    });
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(5) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
}

/// Storage health gates a new disruption: a DRBD minor reported `StandAlone` blocks it with
/// the minor named, an unreachable node holding DRBD disks blocks it as unknown, and whole
/// storage lets it start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_not_whole_or_unknown_blocks_a_new_disruption() {
    use nodecare_protocol::{DrbdMinor, DrbdState};
    let mut h = Harness::new(5, "d:drbd:3,i:diskless:2", |config| {
        config.max_disrupted_nodes = 2;
    })
    .await
    .unwrap();
    let secondary = h.sim.with_cluster(|c| {
        c.instances
            .values()
            .find(|i| i.name.starts_with("d."))
            .unwrap()
            .snodes[0]
            .clone()
    });
    let broken = DrbdState::Minors {
        minors: vec![DrbdMinor {
            minor: 0,
            instance: Some("d.sim.test".into()),
            connection: "StandAlone".into(),
            local_disk: "UpToDate".into(),
            peer_disk: "DUnknown".into(),
            role: "Primary".into(),
            peer_role: "Unknown".into(),
            sync_percent: None,
            out_of_sync_kib: None,
        }],
    };
    h.agents.get(&node(3)).unwrap().set_storage(broken);
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let why = h.incidents().unwrap()[0]
        .blocked_by
        .clone()
        .unwrap_or_default();
    assert!(
        why.starts_with("storage not whole: ") && why.contains("StandAlone"),
        "{why}"
    );
    assert!(drained(&h).is_empty());
    // Whole again, but the secondary's agent is unreachable: unknown, fail closed.
    h.agents
        .get(&node(3))
        .unwrap()
        .set_storage(DrbdState::Minors { minors: Vec::new() });
    h.agents.get(&secondary).unwrap().set_down(true);
    h.round().await.unwrap();
    let why = h.incidents().unwrap()[0]
        .blocked_by
        .clone()
        .unwrap_or_default();
    assert!(
        why.starts_with("storage health unknown: ")
            && why.contains(&format!("{secondary} (unreachable)")),
        "{why}"
    );
    assert!(drained(&h).is_empty());
    h.agents.get(&secondary).unwrap().set_down(false);
    assert!(
        h.until(20, |i| i[0].repair_status == RepairStatus::Completed)
            .await
            .unwrap(),
        "{:?}",
        h.incidents().unwrap()[0].blocked_by
    );
}

/// An admission granted to another tool holds its node's domain: an incident in another domain
/// waits, naming the grant; the granted node saying `evacuate` within the grace opens no
/// incident, and the status names that wait (the grace, its holder and end); once the grant
/// is released, the waiting incident proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_holds_its_domain_and_its_grace_holds_back_incidents() {
    let mut h = two_racks("a:diskless:2,b:diskless:5", 3).await;
    h.round().await.unwrap();
    let store = std::sync::Arc::clone(&h.coordinator.api().store);
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
    store.save_grant(&grant, now, false).unwrap();
    // Node 2 (rack a) says evacuate: rack b is held by the grant.
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    // Node 4 (granted) says evacuate within the grace: no incident, a waiting line.
    h.agents.get(&node(4)).unwrap().set_verdict(evacuate(4));
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let incidents = h.incidents().unwrap();
    assert!(
        incidents.iter().all(|i| i.node != node(4)),
        "{incidents:#?}"
    );
    let gate = nodecare_coordinator::admission::gate_status(h.coordinator.api()).unwrap();
    let line = gate
        .waiting
        .iter()
        .find(|w| w.subject == format!("node {}", node(4)))
        .unwrap_or_else(|| panic!("{:#?}", gate.waiting));
    assert!(
        line.blocked_by.starts_with(
            "verdict evacuate not acted on: in the grace of admission 00000000-0000-0000-0000-00000000004d of kured's disruption of it, until "
        ),
        "{line:?}"
    );
    // `explain NODE` shows the grace, not an older round that did not judge the node.
    let explained = nodecare_coordinator::explain_api::explanation(
        h.coordinator.api(),
        Some(&format!("node={}", node(4))),
    )
    .await
    .unwrap();
    assert_eq!(
        explained.note.as_deref(),
        Some(format!("now waiting: {}", line.blocked_by).as_str()),
        "{explained:#?}"
    );
    assert!(explained.rounds.is_empty(), "{explained:#?}");
    let incidents: Vec<_> = incidents
        .into_iter()
        .filter(|i| i.node == node(2))
        .collect();
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    let why = incidents[0].blocked_by.clone().unwrap_or_default();
    assert!(
        why.starts_with("failure domain rack:b is disrupted (node4.sim.test: admission 00000000-0000-0000-0000-00000000004d of kured)"),
        "{why}"
    );
    // `explain INCIDENT` shows that wait first, since when, not only the rounds.
    let explained = nodecare_coordinator::explain_api::explanation(
        h.coordinator.api(),
        Some(&format!("record={}", incidents[0].uuid)),
    )
    .await
    .unwrap();
    assert_eq!(
        explained.now.first().map(String::as_str),
        Some(format!("incident of {}: evacuate, noted", node(2)).as_str()),
        "{explained:#?}"
    );
    let waiting = explained.now.get(1).cloned().unwrap_or_default();
    assert!(
        waiting.starts_with("waiting since ") && waiting.ends_with(&format!(" UTC: {why}")),
        "{explained:#?}"
    );
    assert!(drained(&h).is_empty());
    store
        .release_grant(
            &uuid::Uuid::from_u128(77).to_string(),
            "kured",
            nodecare_protocol::now_ms(),
        )
        .unwrap();
    assert!(
        h.until(60, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
}

/// A small deterministic generator (xorshift), so that a failing stream can be replayed from
/// its seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next() % n).unwrap_or(0)
    }
}

/// Random clusters (racks, DRBD pairs, diskless instances) and random verdict and storage
/// streams over many rounds on the simulated cluster: after every round at most one failure
/// domain holds disrupted nodes, never more than the cap, no node is newly disrupted while
/// storage was not whole or unknown at the round's start (outside the busy domain), and every
/// incident that waits says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_verdict_streams_keep_the_gate_s_invariants() {
    use nodecare_protocol::{DrbdMinor, DrbdState};
    let seeds: Vec<u64> = (1..=10u64)
        .map(|s| s.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let (mut disruptions, mut bad_storage_rounds, mut waits) = (0usize, 0usize, 0usize);
    for seed in seeds {
        let mut random = Random(seed | 1);
        let nodes = 5 + random.below(4);
        let racks = 2 + random.below(2);
        let max = 1 + random.below(3);
        let mut spec = Vec::new();
        for i in 1..=nodes {
            spec.push(format!("d{i}:diskless:{i}"));
        }
        for k in 0..random.below(3) {
            spec.push(format!("r{k}:drbd:{}", 2 + random.below(nodes - 1)));
        }
        let mut h = Harness::new(nodes, &spec.join(","), |config| {
            config.failure_domains = "rack:".into();
            config.max_disrupted_nodes = max;
            config.min_healthy_nodes = 1;
            config.breaker.max_incident_percent = 100.0;
            config.breaker.max_incident_nodes = 100;
        })
        .await
        .unwrap();
        let rack_of = |i: usize| format!("rack:r{}", (i - 1) % racks);
        h.sim.with_cluster(|c| {
            for i in 1..=nodes {
                c.nodes.get_mut(&node(i)).unwrap().tags.push(rack_of(i));
            }
        });
        let broken = |instance: &str| DrbdState::Minors {
            minors: vec![DrbdMinor {
                minor: 0,
                instance: Some(instance.into()),
                connection: "WFConnection".into(),
                local_disk: "UpToDate".into(),
                peer_disk: "DUnknown".into(),
                role: "Primary".into(),
                peer_role: "Unknown".into(),
                sync_percent: None,
                out_of_sync_kib: None,
            }],
        };
        for round in 0..12 {
            // The stream: some nodes change their verdict, storage breaks or heals somewhere.
            for _ in 0..random.below(3) {
                let i = 2 + random.below(nodes - 1);
                let verdict = match random.below(4) {
                    0 => verdict("Ok", json!({}), None),
                    1 => verdict("live-repair", json!({"fan": i}), Some("reset-fan")),
                    _ => evacuate(i),
                };
                h.agents.get(&node(i)).unwrap().set_verdict(verdict);
            }
            // A DRBD disk of r0 breaks on one of its nodes (only nodes holding DRBD disks are read).
            let r0_nodes: Vec<String> = h.sim.with_cluster(|c| {
                c.instances
                    .values()
                    .filter(|i| i.name == "r0.sim.test")
                    .flat_map(|i| std::iter::once(i.pnode.clone()).chain(i.snodes.clone()))
                    .collect()
            });
            let storage_bad = !r0_nodes.is_empty() && random.below(4) == 0;
            let sick = if storage_bad {
                r0_nodes[random.below(r0_nodes.len())].clone()
            } else {
                String::new()
            };
            for i in 1..=nodes {
                let state = if storage_bad && node(i) == sick {
                    broken("r0.sim.test")
                } else {
                    DrbdState::Minors { minors: Vec::new() }
                };
                h.agents.get(&node(i)).unwrap().set_storage(state);
            }
            let before: BTreeSet<String> = h.sim.with_cluster(|c| {
                c.nodes
                    .values()
                    .filter(|n| n.drained || n.offline)
                    .map(|n| n.name.clone())
                    .collect()
            });
            h.round().await.unwrap();
            let after: BTreeSet<String> = h.sim.with_cluster(|c| {
                c.nodes
                    .values()
                    .filter(|n| n.drained || n.offline)
                    .map(|n| n.name.clone())
                    .collect()
            });
            let rack_of_name = |name: &str| {
                let i: usize = name
                    .trim_start_matches("node")
                    .split('.')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                rack_of(i)
            };
            let context =
                format!("seed {seed:#x} round {round}: before {before:?} after {after:?}");
            let domains: BTreeSet<String> = after.iter().map(|n| rack_of_name(n)).collect();
            assert!(domains.len() <= 1, "two domains disrupted: {context}");
            assert!(after.len() <= max, "above the cap {max}: {context}");
            let newly: Vec<&String> = after.difference(&before).collect();
            disruptions += newly.len();
            bad_storage_rounds += usize::from(storage_bad);
            if storage_bad && before.is_empty() {
                assert!(
                    newly.is_empty(),
                    "disrupted while storage was not whole: {context}"
                );
            }
            for incident in h.incidents().unwrap() {
                if incident.repair_status == RepairStatus::Noted && incident.jobs.is_empty() {
                    waits += usize::from(incident.blocked_by.is_some());
                    assert!(
                        incident.blocked_by.is_some()
                            || incident.action == nodecare_core::incident::Action::LiveRepair,
                        "{} waits without a reason: {context}",
                        incident.node
                    );
                }
            }
            // An operator returns repaired nodes to service now and then.
            if random.below(3) == 0 {
                h.sim.with_cluster(|c| {
                    for n in c.nodes.values_mut() {
                        if n.tags.iter().any(|t| t.starts_with("maintd:repairready:")) {
                            n.drained = false;
                            n.offline = false;
                            n.tags.retain(|t| !t.starts_with("maintd:"));
                        }
                    }
                });
            }
        }
    }
    println!(
        "{disruptions} nodes disrupted, {bad_storage_rounds} rounds with storage not whole, {waits} waits with a reason"
    );
    // The streams really exercised the gate.
    assert!(disruptions >= 5 && bad_storage_rounds >= 5 && waits >= 10);
}

/// An evacuation that could never succeed (an instance with local storage) fails at once, even
/// while the gate would make it wait: the operator learns it now, and nothing is disrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evacuation_that_cannot_succeed_fails_at_once_even_when_the_gate_holds_it() {
    let mut h = Harness::new(4, "a:diskless:2,f:file:3", |_| {})
        .await
        .unwrap();
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    // Node 2 is drained (the cap of 1 is used); node 3 holds a file instance.
    h.agents.get(&node(3)).unwrap().set_verdict(evacuate(3));
    h.round().await.unwrap();
    let incident = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(3))
        .unwrap();
    assert_eq!(
        incident.repair_status,
        RepairStatus::Failed,
        "{incident:#?}"
    );
    assert!(
        incident
            .failure
            .as_deref()
            .unwrap_or("")
            .contains("disk template file"),
        "{incident:#?}"
    );
    assert!(!drained(&h).contains(&node(3)));
}

/// Issue 24 (3): under `immovable_instances = "shutdown"` an evacuation the gate holds back on
/// a node with a `file` instance waits with its `blocked_by` (it can succeed later), is never
/// failed nor tagged `repairfailed`, and once the busy domain is back in service it runs: the
/// movable instances leave, the file instance is shut down, the node tagged repairready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_evacuation_waits_under_the_configured_immovable_policy() {
    use nodecare_core::plan::ImmovablePolicy;
    let mut h = Harness::new(6, "a:diskless:2,b:diskless:5,f:file:5", |config| {
        config.failure_domains = "rack:".into();
        config.max_disrupted_nodes = 3;
        config.breaker.max_incident_percent = 100.0;
        config.immovable_instances = ImmovablePolicy::Shutdown;
    })
    .await
    .unwrap();
    h.sim.with_cluster(|c| {
        for i in 1..=6 {
            let rack = if i <= 3 { "rack:a" } else { "rack:b" };
            c.nodes.get_mut(&node(i)).unwrap().tags.push(rack.into());
        }
    });
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    // Rack a is disrupted (node 2 drained): node 5 of rack b, holding a file instance, waits.
    h.agents.get(&node(5)).unwrap().set_verdict(evacuate(5));
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let waiting = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(5))
        .unwrap();
    assert_eq!(waiting.repair_status, RepairStatus::Noted, "{waiting:#?}");
    assert_eq!(waiting.failure, None, "{waiting:#?}");
    let why = waiting.blocked_by.clone().unwrap_or_default();
    assert!(
        why.starts_with("failure domain rack:a is disrupted (node2.sim.test: incident "),
        "{why}"
    );
    assert!(
        !h.node_tags(&node(5))
            .iter()
            .any(|t| t.starts_with("maintd:repairfailed:")),
        "{:?}",
        h.node_tags(&node(5))
    );
    assert!(!drained(&h).contains(&node(5)));
    // The operator returns rack a to service: node 5 is evacuated, its file instance shut down.
    h.sim.with_cluster(|c| {
        let n = c.nodes.get_mut(&node(2)).unwrap();
        n.drained = false;
        n.offline = false;
        n.tags.retain(|t| !t.starts_with("maintd:"));
    });
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(5) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap(),
        "{:#?}",
        h.incidents().unwrap()
    );
    h.sim.with_cluster(|c| {
        assert_eq!(c.instances["f.sim.test"].pnode, node(5));
        assert!(!c.instances["f.sim.test"].running);
        assert_ne!(c.instances["b.sim.test"].pnode, node(5));
    });
    assert!(
        h.node_tags(&node(5))
            .iter()
            .any(|t| t.starts_with("maintd:repairready:"))
    );
}

/// Who holds each disrupted node, as the status page, `nodecare status` and `/1/overview` show it.
#[allow(
    clippy::unwrap_used,
    reason = "test helper: a failure is the test's failure"
)]
fn holders(h: &Harness) -> std::collections::BTreeMap<String, String> {
    nodecare_coordinator::admission::gate_status(h.coordinator.api())
        .unwrap()
        .domains
        .into_iter()
        .flat_map(|d| d.disrupted)
        .map(|d| (d.node, d.holder))
        .collect()
}

/// Issue 24 (6): a node nodecare left offline or drained is attributed to the incident whose
/// job did it, after the incident completed, was acknowledged and forgotten, and after one was
/// canceled; only a flag nodecare did not set is "outside nodecare", and a node seen back in
/// service is no longer attributed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drains_and_offlines_are_attributed_to_the_incident_that_made_them() {
    let mut h = Harness::new(5, "a:diskless:2,b:diskless:3,c:diskless:4", |config| {
        // One step a round: node 3's incident can be canceled once drained.
        config.job_chains = false;
        config.max_disrupted_nodes = 3;
        config.breaker.max_incident_percent = 100.0;
    })
    .await
    .unwrap();
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    let first = h.incidents().unwrap().remove(0).uuid;
    // The operator acknowledges (removes the tag); node 2 stays offline.
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("Ok", json!({}), None));
    h.sim.with_cluster(|c| {
        c.nodes
            .get_mut(&node(2))
            .unwrap()
            .tags
            .retain(|t| !t.starts_with("maintd:"));
    });
    h.round().await.unwrap();
    h.round().await.unwrap();
    let offlined_by_first = format!("offline by incident {first} (completed, acknowledged)");
    assert_eq!(
        holders(&h).get(&node(2)),
        Some(&offlined_by_first),
        "{:#?}",
        holders(&h)
    );
    // Forgotten (as once it is no longer observed): still known to be the incident's doing.
    let api = h.coordinator.api().clone();
    api.store.forget_incident(first).unwrap();
    h.round().await.unwrap();
    assert!(h.incidents().unwrap().iter().all(|i| i.uuid != first));
    assert_eq!(holders(&h).get(&node(2)), Some(&offlined_by_first));
    // Node 3 drained by nodecare, then its incident canceled (kept while observed); node 4
    // drained by a human.
    h.agents.get(&node(3)).unwrap().set_verdict(evacuate(3));
    for _ in 0..10 {
        h.round().await.unwrap();
        if drained(&h).contains(&node(3)) {
            break;
        }
    }
    let second = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(3))
        .unwrap()
        .uuid;
    nodecare_coordinator::reconcile::cancel_incident(&api.store, second)
        .await
        .unwrap();
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(4)).unwrap().drained = true);
    h.round().await.unwrap();
    let shown = holders(&h);
    assert_eq!(shown.get(&node(2)), Some(&offlined_by_first), "{shown:#?}");
    assert_eq!(
        shown.get(&node(4)).map(String::as_str),
        Some("drained outside nodecare"),
        "{shown:#?}"
    );
    assert!(drained(&h).contains(&node(3)));
    assert_eq!(
        shown.get(&node(3)).map(String::as_str),
        Some(format!("drained by incident {second} (canceled)").as_str()),
        "{shown:#?}"
    );
    // Node 2 back in service, then offlined by a human: not nodecare's any more.
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().offline = false);
    h.round().await.unwrap();
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().offline = true);
    h.round().await.unwrap();
    let shown = holders(&h);
    assert_eq!(
        shown.get(&node(2)).map(String::as_str),
        Some("offline outside nodecare"),
        "{shown:#?}"
    );
}

/// An operator override lets a second failure domain start; the override (who, why) is in the
/// incident's history and in every job's reason trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_is_in_the_history_and_the_job_reasons() {
    let mut h = two_racks("a:diskless:2,b:diskless:5", 1).await;
    h.agents.get(&node(2)).unwrap().set_verdict(evacuate(2));
    h.agents.get(&node(5)).unwrap().set_verdict(evacuate(5));
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(2) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    let now = nodecare_protocol::now_ms();
    h.coordinator
        .api()
        .store
        .add_override(&nodecare_core::gate::Override {
            id: uuid::Uuid::from_u128(5),
            domain: "rack:b".into(),
            until_ms: now + 600_000,
            reason: "firmware deadline".into(),
            who: "alice".into(),
            created_ms: now,
        })
        .unwrap();
    assert!(
        h.until(20, |i| i.iter().any(
            |i| i.node == node(5) && i.repair_status == RepairStatus::Completed
        ))
        .await
        .unwrap()
    );
    let incident = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.node == node(5))
        .unwrap();
    assert!(
        incident.history.iter().any(|e| e.event.contains("under override 00000000-0000-0000-0000-000000000005 of rack:b by alice: firmware deadline")),
        "{:#?}",
        incident.history
    );
    let reasons: Vec<String> = h
        .sim
        .submissions()
        .into_iter()
        .filter(|s| {
            s.intent
                .as_deref()
                .is_some_and(|i| i.starts_with(&incident.uuid.to_string()))
        })
        .filter_map(|s| s.reason_text)
        .collect();
    assert!(!reasons.is_empty());
    for reason in reasons {
        assert!(reason.contains("by alice: firmware deadline"), "{reason}");
    }
}

/// Instance repair runs in the coordinator's round behind the gate: with `[instance_repair]
/// enabled`, a DRBD instance tagged `ganeti:watcher:autorepair:failover` whose primary went
/// offline is failed over and gets harep's pending tag; with the duty off nothing happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_repair_runs_in_the_round_behind_the_gate() {
    for enabled in [false, true] {
        let mut h = Harness::new(4, "inst1:drbd:2,other:diskless:3", |config| {
            config.instance_repair.enabled = enabled;
            config.max_disrupted_nodes = 2;
            config.min_healthy_nodes = 1;
        })
        .await
        .unwrap();
        h.sim.with_cluster(|c| {
            let i = c.instances.get_mut("inst1.sim.test").unwrap();
            i.tags.push("ganeti:watcher:autorepair:failover".into());
            c.nodes.get_mut(&node(2)).unwrap().offline = true;
        });
        for _ in 0..4 {
            h.round().await.unwrap();
        }
        let (primary, tags) = h.sim.with_cluster(|c| {
            let i = &c.instances["inst1.sim.test"];
            (i.pnode.clone(), i.tags.clone())
        });
        let failovers = h
            .sim
            .submissions()
            .iter()
            .filter(|s| !s.internal && s.op_id.contains("FAILOVER"))
            .count();
        if enabled {
            let flags = h.sim.with_cluster(|c| {
                let i = &c.instances["inst1.sim.test"];
                (
                    i.snodes.clone(),
                    c.nodes
                        .values()
                        .map(|n| (n.name.clone(), n.offline, n.drained))
                        .collect::<Vec<_>>(),
                )
            });
            assert_ne!(primary, node(2), "{tags:?} {flags:?}");
            assert_eq!(failovers, 1);
            // Failed over, then (its secondary now the offline node) its mirror replaced: harep's
            // tags record the last repair.
            assert!(
                tags.iter()
                    .any(|t| t.starts_with("ganeti:watcher:autorepair:result:")),
                "{tags:?}"
            );
        } else {
            assert_eq!(primary, node(2));
            assert_eq!(failovers, 0);
        }
    }
}
