//! Two failing nodes that share DRBD instances (each holds the secondary of instances whose
//! primary is the other): in either order, with equal or different verdicts, the first
//! evacuation moves the shared instances off both nodes and completes without an operator;
//! under cap 2 the second then completes too, under cap 1 it waits for the cap, saying so,
//! until the first node is returned to service. The budgets hold at every round.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::collections::BTreeSet;

use nodecare_core::incident::{Incident, RepairStatus};
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

/// When the second verdict arrives.
#[derive(Debug, Clone, Copy)]
enum Arrival {
    /// Both in the same round.
    Together,
    /// Node 2's, then node 3's once node 2's evacuation began.
    TwoFirst,
    /// Node 3's, then node 2's once node 3's evacuation began.
    ThreeFirst,
}

/// Rounds within which every evacuation here ends (a handful of jobs each).
const ROUNDS: usize = 40;

fn incident_of(incidents: &[Incident], n: usize) -> Option<&Incident> {
    incidents.iter().find(|i| i.node == node(n))
}

/// What the cluster shows after a round, checked against the budgets: at most `cap` nodes out
/// of service, at least `min_healthy` in service, no running instance on an offline node, no
/// node's running primaries above its memory.
fn check_budgets(h: &Harness, cap: usize, min_healthy: usize, case: &str, round: usize) {
    h.sim.with_cluster(|c| {
        let out: BTreeSet<&str> = c
            .nodes
            .values()
            .filter(|n| n.drained || n.offline)
            .map(|n| n.name.as_str())
            .collect();
        assert!(
            out.len() <= cap,
            "{case}, round {round}: {out:?} out of service, cap {cap}"
        );
        let healthy = c.nodes.len() - out.len();
        assert!(
            healthy >= min_healthy,
            "{case}, round {round}: {healthy} healthy nodes"
        );
        for node in c.nodes.values() {
            let used: u64 = c
                .instances
                .values()
                .filter(|i| i.running && i.pnode == node.name)
                .map(|i| i.memory_mib)
                .sum();
            assert!(
                used <= node.memory_total_mib,
                "{case}, round {round}: {} MiB on {}",
                used,
                node.name
            );
            if node.offline {
                assert!(
                    c.instances
                        .values()
                        .all(|i| !(i.running && i.pnode == node.name)),
                    "{case}, round {round}: an instance runs on offline {}",
                    node.name
                );
            }
        }
    });
}

/// Node `n` holds no instance (primary or secondary).
fn emptied(h: &Harness, n: usize) -> bool {
    h.sim.with_cluster(|c| {
        c.instances
            .values()
            .all(|i| i.pnode != node(n) && !i.snodes.contains(&node(n)))
    })
}

fn summary(incidents: &[Incident]) -> Vec<(String, RepairStatus, Option<String>, Option<String>)> {
    incidents
        .iter()
        .map(|i| {
            (
                i.node.clone(),
                i.repair_status,
                i.blocked_by.clone(),
                i.failure.clone(),
            )
        })
        .collect()
}

/// Runs rounds (checking the budgets after each) until `done` holds; the number of rounds run.
async fn rounds_until(
    h: &mut Harness,
    cap: usize,
    case: &str,
    done: impl Fn(&[Incident]) -> bool,
) -> Option<usize> {
    for round in 1..=ROUNDS {
        h.round().await.unwrap();
        check_budgets(h, cap, 2, case, round);
        if done(&h.incidents().unwrap()) {
            return Some(round);
        }
    }
    None
}

/// Five nodes; node 2 holds the primaries of `a` and `b` (secondary node 3) and the secondary
/// of `c` (primary node 3); node 3 also the primary of `d` (secondary node 4); `e` lives on
/// nodes 4 and 5, `f` (diskless) on node 5. Nodes 2 and 3 fail; the table goes over job
/// chains (without them, one step a round: the second verdict arrives after the first node's
/// drain, before its moves are planned), the caps, the order of the verdicts and whether they
/// are equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_failing_drbd_peers_are_both_evacuated() {
    let verdicts = [
        ("evacuate", "evacuate"),
        ("evacuate", "evacuate-failover"),
        ("evacuate-failover", "evacuate"),
    ];
    let mut failed = Vec::new();
    for chains in [true, false] {
        for cap in [1, 2] {
            for arrival in [Arrival::Together, Arrival::TwoFirst, Arrival::ThreeFirst] {
                for (two, three) in verdicts {
                    let case = format!(
                        "chains {chains}, cap {cap}, {arrival:?}, node2 {two}, node3 {three}"
                    );
                    // Each case on a task of its own: a failing case names itself and the
                    // table goes on.
                    let run = tokio::spawn({
                        let case = case.clone();
                        async move { one_case(chains, cap, arrival, two, three, &case).await }
                    });
                    if run.await.is_err() {
                        failed.push(case);
                    }
                }
            }
        }
    }
    assert!(failed.is_empty(), "failed cases: {failed:#?}");
}

async fn one_case(chains: bool, cap: usize, arrival: Arrival, two: &str, three: &str, case: &str) {
    let mut h = Harness::new(
        5,
        "a:drbd:2,b:drbd:2,c:drbd:3,d:drbd:3,e:drbd:4,f:diskless:5",
        |config| {
            config.max_disrupted_nodes = cap;
            config.breaker.max_incident_percent = 100.0;
            config.job_chains = chains;
        },
    )
    .await
    .unwrap();
    h.sim.with_cluster(|c| {
        c.instances.get_mut("c.sim.test").unwrap().snodes = vec![node(2)];
    });
    let say = |h: &Harness, n: usize, status: &str| {
        h.agents.get(&node(n)).unwrap().set_verdict(verdict(
            status,
            json!({"disk": format!("sd{n}")}),
            None,
        ));
    };
    match arrival {
        Arrival::Together => {
            say(&h, 2, two);
            say(&h, 3, three);
        }
        Arrival::TwoFirst | Arrival::ThreeFirst => {
            let (first, first_verdict, second, second_verdict) =
                if matches!(arrival, Arrival::TwoFirst) {
                    (2, two, 3, three)
                } else {
                    (3, three, 2, two)
                };
            say(&h, first, first_verdict);
            let began = rounds_until(&mut h, cap, case, |i| {
                incident_of(i, first).is_some_and(|i| i.repair_status == RepairStatus::Pending)
            })
            .await;
            assert!(
                began.is_some(),
                "{case}: {:#?}",
                summary(&h.incidents().unwrap())
            );
            say(&h, second, second_verdict);
        }
    }
    let both_ended = |i: &[Incident]| {
        [2, 3].iter().all(|n| {
            incident_of(i, *n).is_some_and(|i| {
                matches!(
                    i.repair_status,
                    RepairStatus::Completed | RepairStatus::Failed
                )
            })
        })
    };
    let one_ended = |i: &[Incident]| {
        [2, 3].iter().any(|n| {
            incident_of(i, *n).is_some_and(|i| {
                matches!(
                    i.repair_status,
                    RepairStatus::Completed | RepairStatus::Failed
                )
            })
        })
    };
    if cap == 1 {
        // One node out of service at a time: the first evacuation completes, the second waits
        // for the cap, saying so, until the operator returns the first node to service.
        let ended = rounds_until(&mut h, cap, case, one_ended).await;
        let incidents = h.incidents().unwrap();
        assert!(ended.is_some(), "{case}: {:#?}", summary(&incidents));
        let (done, waiting) = if incident_of(&incidents, 2)
            .is_some_and(|i| i.repair_status == RepairStatus::Completed)
        {
            (2, 3)
        } else {
            (3, 2)
        };
        let first = incident_of(&incidents, done).unwrap();
        assert_eq!(
            first.repair_status,
            RepairStatus::Completed,
            "{case}: {:#?}",
            summary(&incidents)
        );
        assert!(
            emptied(&h, done),
            "{case}: node{done} still holds instances"
        );
        // A few more rounds: the second stays waiting for the cap (not for a move).
        for round in 0..3 {
            h.round().await.unwrap();
            check_budgets(&h, cap, 2, case, ROUNDS + round);
        }
        let incidents = h.incidents().unwrap();
        let second = incident_of(&incidents, waiting).unwrap();
        assert!(
            second.is_active()
                && second
                    .blocked_by
                    .as_deref()
                    .is_some_and(|b| b.contains("at most 1 node(s) disrupted at once")),
            "{case}: {:#?}",
            summary(&incidents)
        );
        // The operator repairs the first node and returns it to service.
        say(&h, done, "ok");
        h.sim.with_cluster(|c| {
            let n = c.nodes.get_mut(&node(done)).unwrap();
            n.drained = false;
            n.offline = false;
            n.tags.retain(|t| !t.starts_with("maintd:"));
        });
        let ended = rounds_until(&mut h, cap, case, |i| {
            incident_of(i, waiting).is_some_and(|i| !i.is_active())
        })
        .await;
        let incidents = h.incidents().unwrap();
        assert!(ended.is_some(), "{case}: {:#?}", summary(&incidents));
        let second = incident_of(&incidents, waiting).unwrap();
        assert_eq!(
            second.repair_status,
            RepairStatus::Completed,
            "{case}: {:#?}",
            summary(&incidents)
        );
        assert!(
            emptied(&h, waiting),
            "{case}: node{waiting} still holds instances"
        );
    } else {
        let ended = rounds_until(&mut h, cap, case, both_ended).await;
        let incidents = h.incidents().unwrap();
        assert!(ended.is_some(), "{case}: {:#?}", summary(&incidents));
        for n in [2, 3] {
            let incident = incident_of(&incidents, n).unwrap();
            assert_eq!(
                incident.repair_status,
                RepairStatus::Completed,
                "{case}: {:#?}",
                summary(&incidents)
            );
            assert!(emptied(&h, n), "{case}: node{n} still holds instances");
        }
    }
    assert!(
        h.sim.duplicate_intents().is_empty(),
        "{case}: {:?}",
        h.sim.duplicate_intents()
    );
    // Every instance kept its two nodes, both in service.
    h.sim.with_cluster(|c| {
        for i in c.instances.values().filter(|i| i.disk_template == "drbd") {
            assert_eq!(i.snodes.len(), 1, "{case}: {}", i.name);
            assert_ne!(i.snodes[0], i.pnode, "{case}: {}", i.name);
        }
    });
}
