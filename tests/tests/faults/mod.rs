//! Standing fault injection on the simulated cluster: jobs stuck in `running`, jobs that vanish
//! from the queue, RAPI connection resets, 5xx and hangs mixed into an evacuation, agents that
//! flap, and node clocks that jump. Nothing lost, nothing submitted twice, every stuck thing
//! visible with a reason.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure is the test failing"
)]

use std::time::Duration;

use nodecare_core::incident::RepairStatus;
use nodecare_ganeti_sim::HttpFaults;
use nodecare_tests::fake_agent::verdict;
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

const INSTANCES: &str = "a:diskless:2,b:sharedfile:2,c:diskless:2,d:diskless:3";

fn primaries_on(h: &Harness, name: &str) -> usize {
    h.sim
        .with_cluster(|c| c.instances.values().filter(|i| i.pnode == name).count())
}

async fn evacuating(tweak: impl FnOnce(&mut nodecare_coordinator::config::Config)) -> Harness {
    let h = Harness::new(4, INSTANCES, tweak).await.unwrap();
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stuck_in_running_fails_its_incident_with_a_reason() {
    let mut h = evacuating(|c| c.job_timeout = 1.0).await;
    h.sim.stick_next_jobs(1);
    let mut failed = None;
    for _ in 0..60 {
        let _ = h.coordinator.round().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Some(incident) = h
            .incidents()
            .unwrap()
            .into_iter()
            .find(|i| i.repair_status == RepairStatus::Failed)
        {
            failed = Some(incident);
            break;
        }
    }
    let incident = failed.expect("the stuck job must fail its incident");
    let reason = incident.failure.clone().unwrap_or_default();
    assert!(reason.contains("running"), "reason: {reason:?}");
    assert_eq!(h.sim.with_cluster(|c| c.stuck.len()), 1);
    assert!(h.sim.duplicate_intents().is_empty());
    // A failed incident is not retried behind the operator's back.
    let before = h.sim.submissions().len();
    for _ in 0..5 {
        h.round().await.unwrap();
    }
    assert_eq!(
        h.sim.submissions().len(),
        before,
        "nothing submitted after the failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_vanishes_fails_its_incident_with_a_reason() {
    let mut h = evacuating(|_| {}).await;
    h.sim.vanish_next_jobs(1);
    let done = h
        .until(30, |incidents| {
            incidents
                .iter()
                .any(|i| i.repair_status == RepairStatus::Failed)
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents().unwrap());
    let incident = h.incidents().unwrap().remove(0);
    let reason = incident.failure.clone().unwrap_or_default();
    assert!(reason.contains("vanished"), "reason: {reason:?}");
    assert!(h.sim.duplicate_intents().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_5xx_and_hangs_delay_an_evacuation_but_lose_nothing() {
    let mut h = evacuating(|_| {}).await;
    let faults = [
        HttpFaults {
            reset: 1,
            ..HttpFaults::default()
        },
        HttpFaults {
            reset: 2,
            method: Some("PUT".into()),
            ..HttpFaults::default()
        },
        HttpFaults {
            fail_5xx: 1,
            method: Some("POST".into()),
            ..HttpFaults::default()
        },
        HttpFaults {
            hang: 1,
            hang_ms: 200,
            path_contains: Some("/2/jobs".into()),
            ..HttpFaults::default()
        },
        HttpFaults {
            reset: 1,
            path_contains: Some("/2/jobs".into()),
            ..HttpFaults::default()
        },
    ];
    let mut aborted = 0;
    let mut completed = false;
    for round in 0..120 {
        h.sim.set_http_faults(faults[round % faults.len()].clone());
        if h.coordinator.round().await.is_err() {
            aborted += 1;
        }
        h.sim.settle(Duration::from_secs(5)).await;
        let incidents = h.incidents().unwrap();
        assert!(
            incidents.len() <= 1,
            "one incident for one node: {incidents:#?}"
        );
        if incidents
            .iter()
            .any(|i| i.repair_status == RepairStatus::Completed)
        {
            completed = true;
            break;
        }
    }
    h.sim.set_http_faults(HttpFaults::default());
    println!("{aborted} rounds aborted by injected faults");
    assert!(aborted > 0, "the faults must have bitten");
    assert!(completed, "{:#?}", h.incidents().unwrap());
    assert_eq!(primaries_on(&h, &node(2)), 0);
    assert!(
        h.sim.duplicate_intents().is_empty(),
        "{:?}",
        h.sim.duplicate_intents()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_agent_opens_one_incident_and_submits_nothing_twice() {
    let mut h = Harness::new(4, INSTANCES, |_| {}).await.unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    for round in 0..30 {
        if round % 2 == 0 {
            agent.set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
        } else {
            agent.set_verdict(verdict("Ok", serde_json::Value::Null, None));
        }
        agent.set_down(round % 7 == 3);
        h.round().await.unwrap();
    }
    agent.set_down(false);
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    let done = h
        .until(30, |incidents| {
            incidents
                .iter()
                .any(|i| i.repair_status == RepairStatus::Completed)
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents().unwrap());
    let incidents = h.incidents().unwrap();
    assert_eq!(incidents.len(), 1, "{incidents:#?}");
    assert_eq!(primaries_on(&h, &node(2)), 0);
    assert!(h.sim.duplicate_intents().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_clock_jump_is_refused_visibly_and_never_acted_on() {
    let mut h = Harness::new(4, INSTANCES, |_| {}).await.unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdc"}), None));
    for jump_ms in [3_600_000_i64, -3_600_000] {
        agent.set_clock_offset(jump_ms);
        for _ in 0..3 {
            h.round().await.unwrap();
        }
        assert!(
            h.incidents().unwrap().is_empty(),
            "a report from a jumped clock is not trusted"
        );
        assert!(h.sim.submissions().is_empty());
        let status = h
            .coordinator
            .api()
            .board
            .agents
            .read()
            .unwrap()
            .get(&node(2))
            .cloned()
            .unwrap();
        let shown = format!("{status:?}");
        assert!(
            shown.to_lowercase().contains("clock")
                || shown.contains("future")
                || shown.contains("expired"),
            "the agent's status says why: {shown}"
        );
    }
    // The clock is fixed: the report is trusted again and acted on.
    agent.set_clock_offset(0);
    let done = h
        .until(30, |incidents| {
            incidents
                .iter()
                .any(|i| i.repair_status == RepairStatus::Completed)
        })
        .await
        .unwrap();
    assert!(done, "{:#?}", h.incidents().unwrap());
    assert!(h.sim.duplicate_intents().is_empty());
}
