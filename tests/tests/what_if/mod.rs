//! What if, against the daemon itself: a what-if asked of a running coordinator (its API, its
//! settings, its store, the agents read by its scraper) predicts the Ganeti jobs, in order,
//! that the coordinator then submits to the simulated cluster once the change is real, and
//! changes nothing before.

use crate::gate::all_duties::{Watch, Watched};
use nodecare_coordinator::what_if_api;
use nodecare_protocol::what_if::Ending;
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
