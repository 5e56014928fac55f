//! Failback against the simulated cluster: the instances an evacuation moved off a node go back
//! to it once it is back in service and healthy, through the gate as balancing moves, each once,
//! with the reason trail; an instance moved elsewhere meanwhile is left where it is, said why.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use super::*;
use nodecare_core::duty::failback::HomeState;

fn homecomings(h: &Harness) -> Vec<nodecare_core::duty::failback::Homecoming> {
    nodecare_coordinator::failback::homecomings(&h.coordinator.api().store).unwrap()
}

fn primary(h: &Harness, instance: &str) -> String {
    h.sim
        .with_cluster(|c| c.instances.get(instance).map(|i| i.pnode.clone()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evacuated_instances_go_back_once_the_node_is_healthy() {
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:2,c:diskless:3", |c| {
        c.undrain_on_ack = true;
        c.failback.enabled = true;
        c.failback.settle_secs = 0.0;
    })
    .await
    .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    assert_ne!(primary(&h, "a.sim.test"), node(2));
    assert_ne!(primary(&h, "b.sim.test"), node(2));
    let incident = on(&h.incidents().unwrap(), 2);
    // Noted, and nothing goes back while the node is offline and failing.
    for _ in 0..2 {
        h.round().await.unwrap();
    }
    let noted = homecomings(&h);
    assert_eq!(noted.len(), 1, "{noted:#?}");
    assert_eq!(noted[0].incident, incident.uuid);
    let names: Vec<&str> = noted[0]
        .instances
        .iter()
        .map(|b| b.instance.as_str())
        .collect();
    assert_eq!(names, ["a.sim.test", "b.sim.test"]);
    assert_eq!(
        noted[0].not_ready.as_deref(),
        Some(format!("{} is offline", node(2)).as_str())
    );
    // Repaired: the agent says Ok, the operator acknowledges, the node returns to service.
    agent.set_verdict(verdict("Ok", json!(null), None));
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
    let mut back = false;
    for _ in 0..20 {
        h.round().await.unwrap();
        if primary(&h, "a.sim.test") == node(2) && primary(&h, "b.sim.test") == node(2) {
            back = true;
            break;
        }
    }
    assert!(back, "{:#?}", homecomings(&h));
    assert_eq!(primary(&h, "c.sim.test"), node(3), "c never lived on node2");
    // One round more settles them.
    h.round().await.unwrap();
    let done = homecomings(&h);
    assert!(done[0].ended_s.is_some(), "{done:#?}");
    assert!(done[0].instances.iter().all(|b| b.state == HomeState::Back));
    assert!(done[0].instances.iter().all(|b| b.attempts == 1));
    // Each move home once, described as a failback in its reason trail.
    let home: Vec<_> = h
        .sim
        .submissions()
        .into_iter()
        .filter(|s| {
            s.operation()
                .is_some_and(|o| o.starts_with("balancing (failback "))
        })
        .collect();
    assert_eq!(home.len(), 2, "{home:#?}");
    assert!(h.sim.duplicate_intents().is_empty());
    // Nothing more happens.
    let before = h.sim.submissions().len();
    for _ in 0..2 {
        h.round().await.unwrap();
    }
    assert_eq!(h.sim.submissions().len(), before);
}

/// The gate judges each move home: while storage is not whole (a DRBD pair degraded elsewhere)
/// or in a freeze, nothing goes back, and the status says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_home_waits_for_the_gate() {
    let mut h = Harness::new(4, "a:diskless:2", |c| {
        c.undrain_on_ack = true;
        c.failback.enabled = true;
        c.failback.settle_secs = 0.0;
        c.calendar.time_zone = "UTC".into();
        c.calendar.freezes = vec![nodecare_core::calendar::FreezeConfig {
            from: "2000-01-01".into(),
            until: "2999-01-01".into(),
            reason: "year-end freeze".into(),
        }];
    })
    .await
    .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    agent.set_verdict(verdict("Ok", json!(null), None));
    h.sim
        .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
    for _ in 0..6 {
        h.round().await.unwrap();
    }
    assert_ne!(primary(&h, "a.sim.test"), node(2), "moved home in a freeze");
    let gate = nodecare_coordinator::admission::gate_status(h.coordinator.api()).unwrap();
    assert!(
        gate.waiting
            .iter()
            .any(|w| w.subject == "instance a.sim.test" && w.blocked_by.contains("year-end freeze")),
        "{:#?}",
        gate.waiting
    );
    assert_eq!(gate.failback.len(), 1);
    assert_eq!(gate.failback[0].instances[0].state, "waiting");
}
