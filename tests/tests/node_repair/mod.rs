//! Node repair semantics against the simulated cluster: escalation, evacuate-and-offline,
//! instances that cannot move, and returning the node to service on acknowledgement.

mod drbd_peers;
mod failback;

use std::sync::Arc;
use std::time::Duration;

use nodecare_coordinator::daemon::Coordinator;
use nodecare_core::incident::{Action, Incident, RepairStatus, TAG_FAILED_PREFIX};
use nodecare_core::plan::ImmovablePolicy;
use nodecare_ganeti::Ganeti;
use nodecare_ganeti_sim::model::JobFailureRule;
use nodecare_tests::fake_agent::{RepairBehaviour, verdict};
use nodecare_tests::harness::{Harness, node};
use serde_json::json;

fn on(incidents: &[Incident], n: usize) -> Incident {
    incidents
        .iter()
        .find(|i| i.node == node(n))
        .cloned()
        .unwrap_or_else(|| panic!("no incident on {}: {incidents:#?}", node(n)))
}

/// (offline, drained) of a simulated node.
fn flags(h: &Harness, n: usize) -> (bool, bool) {
    h.sim.with_cluster(|c| {
        let x = &c.nodes[&node(n)];
        (x.offline, x.drained)
    })
}

/// Our submissions' opcode ids for `target`, in order.
fn ops_on(h: &Harness, target: &str) -> Vec<String> {
    h.sim
        .submissions()
        .into_iter()
        .filter(|s| !s.internal && s.target == target)
        .map(|s| s.op_id)
        .collect()
}

fn completed(i: &[Incident]) -> bool {
    i.len() == 1 && i[0].repair_status == RepairStatus::Completed
}

/// A live repair in flight when the node starts asking for evacuation: the incident is
/// escalated (same uuid, no second incident), the evacuation waits for the repair to end,
/// then drains, moves, offlines and tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_repair_escalates_to_evacuation_after_the_running_repair() {
    let mut h = Harness::new(4, "a:diskless:2,b:drbd:2", |_| {})
        .await
        .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("live-repair", json!({"fan": 1}), Some("reset-fan")));
    agent.set_repair(RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_millis(2500),
    });
    h.round().await.unwrap();
    let first = on(&h.incidents().unwrap(), 2);
    assert_eq!(first.action, Action::LiveRepair);
    assert_eq!(first.repair_status, RepairStatus::Pending, "{first:#?}");

    agent.set_verdict(verdict("evacuate", json!({"fan": 1, "psu": 2}), None));
    h.round().await.unwrap();
    let incidents = h.incidents().unwrap();
    assert_eq!(
        incidents.len(),
        1,
        "escalated, not a second incident: {incidents:#?}"
    );
    let escalated = incidents[0].clone();
    assert_eq!(escalated.uuid, first.uuid);
    assert_eq!(escalated.tag, first.tag);
    assert_eq!(escalated.action, Action::Evacuate);
    assert_ne!(escalated.fingerprint, first.fingerprint);
    assert!(
        escalated
            .history
            .iter()
            .any(|e| e.event == "escalated from live-repair to evacuate"),
        "{escalated:#?}"
    );
    // The repair still runs: nothing is drained yet, and the reason is shown.
    assert!(
        escalated
            .blocked_by
            .as_deref()
            .is_some_and(|b| b.contains("live repair")),
        "{escalated:#?}"
    );
    assert!(ops_on(&h, &node(2)).is_empty());

    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    let done = h.incidents().unwrap().remove(0);
    assert_eq!(done.uuid, first.uuid);
    assert!(
        done.history
            .iter()
            .any(|e| e.event.contains("live repair finished")),
        "{done:#?}"
    );
    assert_eq!(flags(&h, 2), (true, false));
    assert_eq!(agent.repairs(), vec![first.uuid.to_string()]);
    assert!(h.sim.duplicate_intents().is_empty());
}

/// Live repairs in flight on several nodes when their verdicts all turn to `evacuate`: the
/// cap admits one evacuation at a time, and the escalated incidents it holds back still follow
/// their repairs, so each records its repair's end when it comes (not only once the gate admits
/// it, nor after `repair_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalated_incidents_the_cap_holds_back_still_follow_their_repairs() {
    let mut h = Harness::new(5, "a:diskless:2,b:diskless:3,c:diskless:4", |config| {
        config.max_disrupted_nodes = 1;
        config.breaker.max_incident_percent = 100.0;
        config.breaker.max_incident_nodes = 100;
    })
    .await
    .unwrap();
    let failing = [2, 3, 4];
    for n in failing {
        let agent = h.agents.get(&node(n)).unwrap();
        agent.set_verdict(verdict("live-repair", json!({"fan": 1}), Some("reset-fan")));
        agent.set_repair(RepairBehaviour {
            exit_code: 0,
            duration: Duration::from_millis(1500),
        });
    }
    h.round().await.unwrap();
    for n in failing {
        let incident = on(&h.incidents().unwrap(), n);
        assert_eq!(incident.action, Action::LiveRepair, "{incident:#?}");
        assert_eq!(
            h.agents.get(&node(n)).unwrap().repairs(),
            vec![incident.uuid.to_string()]
        );
    }
    for n in failing {
        h.agents.get(&node(n)).unwrap().set_verdict(verdict(
            "evacuate",
            json!({"fan": 1, "psu": 2}),
            None,
        ));
    }
    h.round().await.unwrap();
    let incidents = h.incidents().unwrap();
    let capped: Vec<&Incident> = incidents
        .iter()
        .filter(|i| i.blocked_by.as_deref().is_some_and(|b| b.contains("cap")))
        .collect();
    assert_eq!(capped.len(), 2, "two wait for the cap: {incidents:#?}");
    // The repairs end; a round later every incident has seen its repair end.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    h.round().await.unwrap();
    for n in failing {
        let incident = on(&h.incidents().unwrap(), n);
        assert_eq!(incident.action, Action::Evacuate);
        assert!(
            incident
                .history
                .iter()
                .any(|e| e.event.contains("live repair finished")),
            "the repair on {} ended: {incident:#?}",
            node(n)
        );
    }
}

/// A more invasive verdict on an evacuation in progress escalates it to evacuate-failover; a
/// less invasive one afterwards never de-escalates it (it opens its own incident, which waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escalation_never_goes_back() {
    let mut h = Harness::new(4, "a:diskless:3", |_| {}).await.unwrap();
    // Jobs stay in flight: the evacuation is pending throughout.
    h.sim.set_job_delay(Duration::from_secs(600));
    let agent = h.agents.get(&node(3)).unwrap().clone();
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.coordinator.round().await.unwrap();
    let first = on(&h.incidents().unwrap(), 3);
    assert_eq!(first.repair_status, RepairStatus::Pending, "{first:#?}");
    agent.set_verdict(verdict(
        "evacuate-failover",
        json!({"disk": "sdb", "nic": 0}),
        None,
    ));
    h.coordinator.round().await.unwrap();
    let escalated = on(&h.incidents().unwrap(), 3);
    assert_eq!(escalated.uuid, first.uuid);
    assert_eq!(escalated.action, Action::EvacuateFailover);
    assert_eq!(escalated.jobs, first.jobs);
    assert_eq!(h.incidents().unwrap().len(), 1);

    agent.set_verdict(verdict("live-repair", json!({"fan": 1}), Some("reset-fan")));
    h.coordinator.round().await.unwrap();
    let incidents = h.incidents().unwrap();
    let kept = incidents.iter().find(|i| i.uuid == first.uuid).unwrap();
    assert_eq!(kept.action, Action::EvacuateFailover, "{incidents:#?}");
    assert!(!kept.observed);
    let other = incidents.iter().find(|i| i.uuid != first.uuid).unwrap();
    assert_eq!(other.action, Action::LiveRepair);
    assert_eq!(other.repair_status, RepairStatus::Noted, "{other:#?}");
    assert!(
        other
            .blocked_by
            .as_deref()
            .is_some_and(|b| b.contains(&first.uuid.to_string())),
        "{other:#?}"
    );
    assert!(agent.repairs().is_empty());
}

/// `offline_after_evacuation = false` keeps maintd's drained-only end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offlining_can_be_turned_off() {
    let mut h = Harness::new(4, "a:diskless:2", |c| c.offline_after_evacuation = false)
        .await
        .unwrap();
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    assert!(h.until(20, completed).await.unwrap());
    assert_eq!(flags(&h, 2), (false, true));
    assert_eq!(
        ops_on(&h, &node(2)),
        vec!["OP_NODE_SET_PARAMS", "OP_TAGS_SET"]
    );
}

/// Ganeti refusing to offline the node (here: too few master candidates) fails the incident
/// with Ganeti's message, and the node gets the failure tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_offline_fails_the_incident_with_ganetis_message() {
    for chains in [false, true] {
        let mut h = Harness::new(4, "a:diskless:2", |c| c.job_chains = chains)
            .await
            .unwrap();
        // Drained by hand already: the first node-parameter job is the offline.
        h.sim
            .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().drained = true);
        h.sim.fail_jobs(JobFailureRule {
            op_id: Some("OP_NODE_SET_PARAMS".into()),
            target: Some(node(2)),
            count: Some(1),
            message: "Not enough master candidates, please pass auto promote option".into(),
        });
        h.agents.get(&node(2)).unwrap().set_verdict(verdict(
            "evacuate",
            json!({"disk": "sdb"}),
            None,
        ));
        let failed = h
            .until(10, |i| {
                i.len() == 1 && i[0].repair_status == RepairStatus::Failed && i[0].tag_applied
            })
            .await
            .unwrap();
        let incident = h.incidents().unwrap().remove(0);
        assert!(failed, "chains={chains}: {incident:#?}");
        let why = incident.failure.clone().unwrap_or_default();
        assert!(why.contains("Not enough master candidates"), "{why}");
        assert!(incident.tag.starts_with(TAG_FAILED_PREFIX));
        assert!(h.node_tags(&node(2)).contains(&incident.tag));
        assert_eq!(flags(&h, 2), (false, true));
        // The instance did leave before.
        assert!(
            h.sim
                .with_cluster(|c| c.instances["a.sim.test"].pnode != node(2))
        );
    }
}

/// `immovable_instances`: `fail` touches nothing, `leave` evacuates the rest and keeps the
/// node online with a warning, `shutdown` stops them, then offlines the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immovable_instances_fail_leave_or_shutdown() {
    let instances = "p:plain:2,f:file:2,b:diskless:2,d:drbd:2";
    for policy in [
        ImmovablePolicy::Fail,
        ImmovablePolicy::Leave,
        ImmovablePolicy::Shutdown,
    ] {
        for chains in [true, false] {
            let mut h = Harness::new(4, instances, |c| {
                c.immovable_instances = policy;
                c.job_chains = chains;
            })
            .await
            .unwrap();
            h.agents.get(&node(2)).unwrap().set_verdict(verdict(
                "evacuate",
                json!({"disk": "sdb"}),
                None,
            ));
            let finished = h
                .until(20, |i| {
                    i.len() == 1 && !i[0].is_active() && i[0].tag_applied
                })
                .await
                .unwrap();
            let incident = h.incidents().unwrap().remove(0);
            assert!(finished, "{policy:?} chains={chains}: {incident:#?}");
            let where_is = |name: &str| {
                h.sim.with_cluster(|c| {
                    let i = &c.instances[&format!("{name}.sim.test")];
                    (i.pnode.clone(), i.snodes.clone(), i.running)
                })
            };
            match policy {
                ImmovablePolicy::Fail => {
                    assert_eq!(incident.repair_status, RepairStatus::Failed);
                    let why = incident.failure.clone().unwrap_or_default();
                    assert!(why.contains("immovable_instances = fail"), "{why}");
                    // Nothing was touched.
                    assert_eq!(flags(&h, 2), (false, false));
                    assert_eq!(where_is("b").0, node(2));
                }
                ImmovablePolicy::Leave => {
                    assert_eq!(incident.repair_status, RepairStatus::Completed);
                    let warning = incident.warning.clone().unwrap_or_default();
                    assert!(
                        warning.contains("p.sim.test (plain)")
                            && warning.contains("f.sim.test (file)"),
                        "{warning}"
                    );
                    assert!(
                        incident
                            .history
                            .iter()
                            .any(|e| e.event.starts_with("warning: "))
                    );
                    // Readers of /1/status (the CLI) get it.
                    let mut value = serde_json::to_value(&incident).unwrap();
                    value["id"] = json!(incident.uuid.to_string());
                    let summary: nodecare_protocol::status::IncidentSummary =
                        serde_json::from_value(value).unwrap();
                    assert_eq!(summary.warning, incident.warning);
                    // The rest left; the node stays online (drained) with them running.
                    assert_eq!(flags(&h, 2), (false, true));
                    assert_eq!(where_is("p"), (node(2), vec![], true));
                    assert_ne!(where_is("b").0, node(2));
                    let (d_primary, d_secondaries, _) = where_is("d");
                    assert_ne!(d_primary, node(2));
                    assert!(!d_secondaries.contains(&node(2)));
                }
                ImmovablePolicy::Shutdown => {
                    assert_eq!(incident.repair_status, RepairStatus::Completed);
                    assert!(
                        incident
                            .warning
                            .as_deref()
                            .is_some_and(|w| w.contains("shut down") && w.contains("p.sim.test")),
                        "{incident:#?}"
                    );
                    assert_eq!(where_is("p"), (node(2), vec![], false));
                    assert!(!where_is("f").2);
                    assert_eq!(flags(&h, 2), (true, false));
                    // Shut down before the node went offline.
                    let ours: Vec<_> = h
                        .sim
                        .submissions()
                        .into_iter()
                        .filter(|s| !s.internal)
                        .collect();
                    let shutdowns: Vec<u64> = ours
                        .iter()
                        .filter(|s| s.op_id == "OP_INSTANCE_SHUTDOWN")
                        .map(|s| s.job)
                        .collect();
                    let offline = ours
                        .iter()
                        .filter(|s| s.op_id == "OP_NODE_SET_PARAMS")
                        .map(|s| s.job)
                        .max()
                        .unwrap();
                    assert_eq!(shutdowns.len(), 2, "{ours:#?}");
                    assert!(shutdowns.iter().all(|j| *j < offline));
                    if chains {
                        let depends = h.sim.with_cluster(|c| c.jobs[&offline].depends.clone());
                        let on: Vec<u64> = depends.iter().map(|(j, _)| *j).collect();
                        assert_eq!(on, shutdowns);
                    }
                }
            }
            assert!(h.sim.duplicate_intents().is_empty());
        }
    }
}

/// `undrain_on_ack`: removing the tag of an evacuated, offlined node sets it online again (a
/// regular node); with `leave`, the drained node is undrained. One job each, across restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgement_returns_the_node_to_service() {
    for policy in [ImmovablePolicy::Fail, ImmovablePolicy::Leave] {
        let instances = if policy == ImmovablePolicy::Leave {
            "p:plain:2,b:diskless:2"
        } else {
            "b:diskless:2"
        };
        let mut h = Harness::new(4, instances, |c| {
            c.undrain_on_ack = true;
            c.immovable_instances = policy;
        })
        .await
        .unwrap();
        let agent = h.agents.get(&node(2)).unwrap().clone();
        agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
        assert!(h.until(20, completed).await.unwrap());
        let out = if policy == ImmovablePolicy::Leave {
            (false, true)
        } else {
            (true, false)
        };
        assert_eq!(flags(&h, 2), out);
        // Nothing happens before the acknowledgement.
        h.round().await.unwrap();
        assert_eq!(flags(&h, 2), out);
        // Acknowledge, and restart the coordinator in between for good measure.
        h.sim
            .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
        h.round().await.unwrap();
        let ganeti: Arc<dyn Ganeti> = Arc::new(h.sim.client());
        h.coordinator = Coordinator::new(&h.config, node(1), ganeti, h.key.clone()).unwrap();
        for _ in 0..3 {
            h.round().await.unwrap();
        }
        assert_eq!(flags(&h, 2), (false, false));
        let key = if policy == ImmovablePolicy::Leave {
            "/undrain"
        } else {
            "/online"
        };
        let returns: Vec<_> = h
            .sim
            .submissions()
            .into_iter()
            .filter(|s| s.intent.as_deref().is_some_and(|i| i.ends_with(key)))
            .collect();
        assert_eq!(returns.len(), 1, "{returns:#?}");
        assert!(h.sim.duplicate_intents().is_empty());
        // Repaired: the agent reports Ok and the incident is forgotten.
        agent.set_verdict(verdict("Ok", json!(null), None));
        h.round().await.unwrap();
        assert!(h.incidents().unwrap().is_empty());
    }
}

/// Without `undrain_on_ack` (the default) the node stays out of service after the
/// acknowledgement, and the incident of the offline node (which reports nothing) is forgotten
/// at the round after: the operator owns the node. Set online again, it is judged afresh: `Ok` opens
/// nothing, a problem still there is a new incident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgement_alone_leaves_the_node_offline_and_forgets_the_incident() {
    for still_failing in [false, true] {
        let mut h = Harness::new(4, "b:diskless:2", |_| {}).await.unwrap();
        let agent = h.agents.get(&node(2)).unwrap().clone();
        agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
        assert!(h.until(20, completed).await.unwrap());
        let first = h.incidents().unwrap()[0].uuid;
        assert_eq!(flags(&h, 2), (true, false));
        // Before the acknowledgement the offline node's incident stays, awaiting it.
        for _ in 0..2 {
            h.round().await.unwrap();
        }
        assert_eq!(h.incidents().unwrap().len(), 1);
        h.sim
            .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().tags.clear());
        h.round().await.unwrap();
        assert!(h.incidents().unwrap()[0].acknowledged);
        h.round().await.unwrap();
        assert!(
            h.incidents().unwrap().is_empty(),
            "forgotten after the acknowledgement"
        );
        for _ in 0..2 {
            h.round().await.unwrap();
        }
        assert_eq!(flags(&h, 2), (true, false), "nodecare never brings it back");
        let jobs = h.sim.submissions().len();
        // The operator sets the node online (Ganeti: a regular node again).
        if !still_failing {
            agent.set_verdict(verdict("Ok", json!(null), None));
        }
        h.sim.with_cluster(|c| {
            let n = c.nodes.get_mut(&node(2)).unwrap();
            n.offline = false;
            n.drained = false;
        });
        for _ in 0..2 {
            h.round().await.unwrap();
        }
        let incidents = h.incidents().unwrap();
        if still_failing {
            assert_eq!(incidents.len(), 1, "{incidents:#?}");
            assert_ne!(incidents[0].uuid, first);
        } else {
            assert!(incidents.is_empty(), "{incidents:#?}");
            assert_eq!(h.sim.submissions().len(), jobs);
        }
        assert!(h.sim.duplicate_intents().is_empty());
    }
}

/// An instance moved by someone else (or by a job of a previous master that Ganeti re-ran)
/// between planning and its job's run: Ganeti refuses the migration (`OpPrereqError ...
/// wrong_state`), the step counts as done since its goal holds, the jobs that depended on it
/// are planned again, and the incident completes; nothing is submitted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_goal_already_holds_does_not_fail_the_evacuation() {
    for chains in [true, false] {
        let mut h = Harness::new(4, "a:diskless:2,b:diskless:2", |c| c.job_chains = chains)
            .await
            .unwrap();
        h.sim.set_job_delay(Duration::from_millis(600));
        if !chains {
            // One step per round: the drain is done before the moves are planned.
            h.sim
                .with_cluster(|c| c.nodes.get_mut(&node(2)).unwrap().drained = true);
        }
        h.agents.get(&node(2)).unwrap().set_verdict(verdict(
            "evacuate",
            json!({"disk": "sdb"}),
            None,
        ));
        h.coordinator.round().await.unwrap();
        let store = Arc::clone(&h.coordinator.api().store);
        let target = store
            .intents()
            .unwrap()
            .into_iter()
            .find_map(|i| match i.spec {
                nodecare_coordinator::store::IntentSpec::Move {
                    planned:
                        nodecare_core::plan::Move::Migrate {
                            instance,
                            target: Some(target),
                        },
                } if instance == "a.sim.test" => Some(target),
                _ => None,
            })
            .unwrap_or_else(|| panic!("chains={chains}: no migration of a planned"));
        // Someone moves `a` where nodecare meant to, before its job runs.
        h.sim.with_cluster(|c| {
            c.instances.get_mut("a.sim.test").unwrap().pnode = target.clone();
        });
        h.sim.settle(Duration::from_secs(5)).await;
        let refused = h.sim.with_cluster(|c| {
            c.jobs.values().any(|j| {
                j.opresult
                    .to_string()
                    .contains("Cannot migrate instance a.sim.test")
                    && j.opresult.to_string().contains("wrong_state")
            })
        });
        assert!(refused, "chains={chains}: Ganeti refused the migration");
        let done = h.until(10, completed).await.unwrap();
        let incident = h.incidents().unwrap().remove(0);
        assert!(done, "chains={chains}: {incident:#?}");
        assert!(incident.failure.is_none(), "{incident:#?}");
        assert!(h.node_tags(&node(2)).contains(&incident.tag));
        assert!(
            incident
                .history
                .iter()
                .any(|e| e.event.contains("a.sim.test is no longer on")),
            "{incident:#?}"
        );
        h.sim.with_cluster(|c| {
            assert!(c.instances.values().all(|i| i.pnode != node(2)));
        });
        assert!(h.sim.duplicate_intents().is_empty(), "chains={chains}");
        assert_eq!(
            ops_on(&h, "a.sim.test"),
            vec!["OP_INSTANCE_MIGRATE"],
            "chains={chains}: a's migration submitted once"
        );
    }
}

/// A cancel during a job-chain evacuation takes effect at once: it is recorded while a round
/// holds the incident lock, the chain's jobs that have not started are canceled in Ganeti (the
/// drain already running ends on its own), nothing more is submitted, and the incident says
/// what ran and in what state the node is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_queued_job_chain_at_once() {
    use nodecare_coordinator::reconcile::{CancelOutcome, cancel_incident, stop_incident_jobs};
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:2", |_| {})
        .await
        .unwrap();
    h.sim.set_job_delay(Duration::from_millis(1500));
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.coordinator.round().await.unwrap();
    let incident = on(&h.incidents().unwrap(), 2);
    assert!(
        incident.jobs.len() >= 4,
        "the whole chain is queued: {incident:#?}"
    );
    // The drain runs; the rest of the chain waits for it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let api = h.coordinator.api().clone();
    let outcome = {
        // A round in progress holds the incident lock: the cancel does not wait for it.
        let _round = api.incident_lock.lock().await;
        tokio::time::timeout(
            Duration::from_secs(1),
            cancel_incident(&api.store, incident.uuid),
        )
        .await
        .expect("the cancel does not wait for the round")
        .unwrap()
    };
    assert_eq!(outcome, CancelOutcome::Canceled);
    let ganeti = api.ganeti.clone().unwrap();
    let answers = stop_incident_jobs(&*ganeti, &api.store, &api.board, incident.uuid)
        .await
        .unwrap();
    // Every job is asked once; the first jobs not started of the chain are canceled, and
    // Ganeti cancels those after them itself: every job but the running drain ends canceled.
    assert_eq!(answers.len(), incident.jobs.len(), "{answers:#?}");
    let ended: Vec<(String, nodecare_ganeti::JobStatus)> = h.sim.peek(|c| {
        answers
            .iter()
            .map(|a| (a.intent.clone(), c.jobs[&a.job].status))
            .collect()
    });
    let not_canceled: Vec<&str> = ended
        .iter()
        .filter(|(_, status)| *status != nodecare_ganeti::JobStatus::Canceled)
        .map(|(intent, _)| intent.as_str())
        .collect();
    assert_eq!(not_canceled, vec!["drain"], "{ended:#?}");
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let after = on(&h.incidents().unwrap(), 2);
    assert_eq!(after.repair_status, RepairStatus::Canceled, "{after:#?}");
    // The drain ran; nothing after it did.
    assert_eq!(flags(&h, 2), (false, true));
    assert!(!h.node_tags(&node(2)).contains(&after.tag));
    h.sim.with_cluster(|c| {
        assert!(c.instances.values().all(|i| i.pnode == node(2)));
    });
    assert_eq!(
        ops_on(&h, &node(2)).len(),
        ops_on(&h, &node(2))
            .iter()
            .filter(|op| *op == "OP_NODE_SET_PARAMS" || *op == "OP_TAGS_SET")
            .count()
    );
    let submitted = h.sim.submissions().len();
    assert_eq!(
        submitted,
        incident.jobs.len(),
        "nothing submitted after the cancel"
    );
    let warning = after.warning.clone().unwrap_or_default();
    assert!(warning.contains("left drained"), "{after:#?}");
    assert!(warning.contains("did not run"), "{after:#?}");
    assert!(
        after
            .history
            .iter()
            .any(|e| e.event.contains("canceled before it started")),
        "{after:#?}"
    );
}

/// A cancel through the API reaches Ganeti before it is answered, also when the coordinator
/// has not finished a round since it started (restarted with a chain queued): Ganeti names
/// this node its master, so the queued jobs are canceled at once rather than left to the next
/// round, while the running drain ends on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_right_after_a_restart_cancels_the_queued_jobs_at_once() {
    let (mut h, _users) = with_writer(4, "a:diskless:2,b:diskless:2", |_| {}).await;
    h.sim.set_job_delay(Duration::from_millis(1500));
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.coordinator.round().await.unwrap();
    let incident = on(&h.incidents().unwrap(), 2);
    assert!(
        incident.jobs.len() >= 4,
        "the whole chain is queued: {incident:#?}"
    );
    // The drain runs; the rest of the chain waits for it. Restarted on the same state: no
    // round yet.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let ganeti: Arc<dyn Ganeti> = Arc::new(h.sim.client());
    h.coordinator = Coordinator::new(&h.config, node(1), ganeti, h.key.clone()).unwrap();
    let (url, server) = serve_api(&h).await;
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", incident.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    let asked = body["jobs"].as_array().map_or(0, Vec::len);
    // Before any round: every job but the drain (running, or done) ended canceled.
    let statuses: Vec<(u64, String, nodecare_ganeti::JobStatus)> = h.sim.peek(|c| {
        c.jobs
            .values()
            .map(|j| {
                let intent = j
                    .reason
                    .iter()
                    .find_map(|(_, text, _)| nodecare_ganeti::Reason::parse_text(text))
                    .map(|r| r.intent)
                    .unwrap_or_default();
                (j.id, intent, j.status)
            })
            .collect()
    });
    let not_canceled: Vec<&str> = statuses
        .iter()
        .filter(|(_, _, status)| *status != nodecare_ganeti::JobStatus::Canceled)
        .map(|(_, intent, _)| intent.as_str())
        .collect();
    assert_eq!(not_canceled, vec!["drain"], "{statuses:#?} ({body})");
    assert_eq!(asked, incident.jobs.len(), "{body}");
    server.abort();
}

/// A cancel reaches a queued job whose submission answer was lost: nodecare does not know its id
/// until a round adopts it by its reason trail, so the cancel looks it up in Ganeti's job list
/// by that trail and cancels it at once, before any round (before: it stayed queued and ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_job_whose_submission_answer_was_lost() {
    let (mut h, _users) = with_writer(4, "a:diskless:2,b:diskless:2", |_| {}).await;
    h.sim.set_job_delay(Duration::from_millis(3000));
    h.sim.set_http_faults(nodecare_ganeti_sim::HttpFaults {
        lose_answer: 1,
        method: Some("PUT".into()),
        ..nodecare_ganeti_sim::HttpFaults::default()
    });
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    // The round may end with the lost answer's error: what it recorded stays.
    if let Err(error) = h.coordinator.round().await {
        eprintln!("round: {error}");
    }
    h.sim
        .set_http_faults(nodecare_ganeti_sim::HttpFaults::default());
    let incident = on(&h.incidents().unwrap(), 2);
    // The drain reached Ganeti, its answer did not: queued there, unknown to nodecare.
    let queued: Vec<u64> = h.sim.peek(|c| {
        c.jobs
            .values()
            .filter(|j| j.status == nodecare_ganeti::JobStatus::Queued)
            .map(|j| j.id)
            .collect()
    });
    assert_eq!(queued.len(), 1, "{queued:?} ({incident:#?})");
    assert!(
        incident.jobs.iter().all(|j| !queued.contains(j)),
        "the job id is not known yet: {incident:#?}"
    );
    let (url, server) = serve_api(&h).await;
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", incident.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    let status = h.sim.peek(|c| c.jobs[&queued[0]].status);
    assert_eq!(status, nodecare_ganeti::JobStatus::Canceled, "{body}");
    assert!(
        body.to_string().contains(&format!("\"job\":{}", queued[0])),
        "the answer names the job: {body}"
    );
    server.abort();
}

/// A cancel is answered once it is recorded, also when Ganeti answers its job cancels late (a
/// job waiting for its locks): the answer says Ganeti's answers follow, the cancels go on, and
/// what Ganeti answered goes into the incident's history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_is_answered_before_ganeti_s_late_answers() {
    let (mut h, _users) = with_writer(4, "a:diskless:2,b:diskless:2", |_| {}).await;
    h.sim.set_job_delay(Duration::from_millis(1500));
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.coordinator.round().await.unwrap();
    let incident = on(&h.incidents().unwrap(), 2);
    assert!(incident.jobs.len() >= 4, "{incident:#?}");
    let (url, server) = serve_api(&h).await;
    h.sim.set_http_faults(nodecare_ganeti_sim::HttpFaults {
        slow_answer: 20,
        hang_ms: 6_000,
        method: Some("DELETE".into()),
        ..nodecare_ganeti_sim::HttpFaults::default()
    });
    let asked = std::time::Instant::now();
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", incident.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    let took = asked.elapsed();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert!(
        took < Duration::from_millis(3_000),
        "answered after {took:?}: {body}"
    );
    assert_eq!(body["result"], "canceled", "{body}");
    assert!(
        body["following"]
            .as_str()
            .is_some_and(|f| f.contains("follow in the incident's history")),
        "{body}"
    );
    // The cancels went on: their answers are in the incident's history.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = on(&h.incidents().unwrap(), 2);
        if now.history.iter().any(|e| e.event.starts_with("cancel: ")) {
            assert_eq!(now.repair_status, RepairStatus::Canceled, "{now:#?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{now:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The rounds record how each job ended: those Ganeti canceled read canceled, not failed.
    h.sim
        .set_http_faults(nodecare_ganeti_sim::HttpFaults::default());
    h.sim.settle(Duration::from_secs(10)).await;
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let detail: serde_json::Value = reqwest::get(format!("{url}/1/incidents/{}", incident.uuid))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let states: Vec<(String, String)> = detail["intents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap_or_default().to_owned(),
                i["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        states.iter().any(|(_, state)| state == "canceled"),
        "{states:?}"
    );
    assert!(
        states.iter().all(|(_, state)| state != "failed"),
        "{states:?}"
    );
    server.abort();
}

/// A cancel the API could not pass on to Ganeti (here: nobody asked) is carried out by the next
/// round first thing, before any job of the chain starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_round_cancels_the_jobs_of_a_canceled_incident_first() {
    use nodecare_coordinator::reconcile::cancel_incident;
    let mut h = Harness::new(4, "a:diskless:2", |_| {}).await.unwrap();
    h.sim.set_job_delay(Duration::from_millis(3000));
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    h.coordinator.round().await.unwrap();
    let incident = on(&h.incidents().unwrap(), 2);
    let api = h.coordinator.api().clone();
    cancel_incident(&api.store, incident.uuid).await.unwrap();
    h.coordinator.round().await.unwrap();
    h.sim.settle(Duration::from_secs(10)).await;
    h.round().await.unwrap();
    let after = on(&h.incidents().unwrap(), 2);
    assert_eq!(flags(&h, 2), (false, false), "{after:#?}");
    assert!(h.sim.with_cluster(|c| {
        c.jobs.values().all(|j| {
            j.status == nodecare_ganeti::JobStatus::Canceled
                || j.status == nodecare_ganeti::JobStatus::Error
        })
    }));
    let warning = after.warning.clone().unwrap_or_default();
    assert!(warning.contains("was not drained"), "{after:#?}");
}

/// On a cluster whose master-candidate pool is full (the simulated Ganeti's default: the
/// initial candidates fill it), Ganeti drains or offlines a candidate only with
/// `auto_promote`: the evacuation asks for it, and a master-capable node takes the drained
/// node's place in the pool. The same drain without it (as the role resource gets it when
/// `auto-promote` is not given) is refused with Ganeti's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_of_a_master_candidate_promotes_another_when_the_pool_is_full() {
    use nodecare_ganeti_sim::model::SimOp;
    use nodecare_ganeti_sim::rapi_routes::SimRequest;
    let mut h = Harness::new(5, "a:diskless:2", |_| {}).await.unwrap();
    let candidates = |h: &Harness| -> Vec<String> {
        h.sim.with_cluster(|c| {
            c.nodes
                .values()
                .filter(|n| n.master_candidate)
                .map(|n| n.name.clone())
                .collect()
        })
    };
    assert_eq!(h.sim.with_cluster(|c| c.candidate_pool_size), 3);
    assert_eq!(candidates(&h), vec![node(1), node(2), node(3)]);
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    assert_eq!(flags(&h, 2), (true, false));
    assert_eq!(candidates(&h), vec![node(1), node(3), node(4)]);
    let demoting: Vec<bool> = h.sim.with_cluster(|c| {
        c.jobs
            .values()
            .filter_map(|j| match &j.op {
                SimOp::SetNodeParams {
                    node: n,
                    drained,
                    offline,
                    auto_promote,
                } if *n == node(2) && (*drained == Some(true) || *offline == Some(true)) => {
                    Some(*auto_promote)
                }
                _ => None,
            })
            .collect()
    });
    assert_eq!(demoting, vec![true, true], "drain and offline ask for it");

    // The drain as the role resource gets it without `auto-promote`: refused (node5 could
    // take node3's place).
    let before = h.sim.with_cluster(|c| c.jobs.len());
    let (status, _) = h
        .sim
        .handle(&SimRequest {
            method: "PUT".into(),
            path: format!("/2/nodes/{}/role", node(3)),
            query: vec![("force".into(), "1".into())],
            body: Some(json!("drained")),
        })
        .await;
    assert_eq!(status, 200);
    h.sim.settle(Duration::from_secs(5)).await;
    h.sim.with_cluster(|c| {
        let job = c.jobs.values().nth(before).unwrap();
        assert_eq!(job.status, nodecare_ganeti::JobStatus::Error, "{job:#?}");
        assert!(
            job.opresult
                .to_string()
                .contains("Not enough master candidates"),
            "{job:#?}"
        );
        assert!(!c.nodes[&node(3)].drained);
    });
}

/// The coordinator's API served on a local port, with the writer `ops`/`secret`.
#[allow(clippy::unwrap_used, reason = "a test helper")]
async fn serve_api(h: &Harness) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = nodecare_coordinator::http::router(h.coordinator.api().clone());
    let server = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            panic!("{error}");
        }
    });
    (url, server)
}

/// A harness whose API has the writer `ops`/`secret`.
#[allow(clippy::unwrap_used, reason = "a test helper")]
async fn with_writer(
    nodes: usize,
    instances: &str,
    tweak: impl FnOnce(&mut nodecare_coordinator::config::Config),
) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    nodecare_tests::harness::write_secret(&users, "ops secret write\n").unwrap();
    let h = Harness::new(nodes, instances, move |config| {
        config.users = users;
        tweak(config);
    })
    .await
    .unwrap();
    (h, dir)
}

/// Asks for a grant of `node`: the HTTP status and the body.
#[allow(clippy::unwrap_used, reason = "a test helper")]
async fn ask_grant(url: &str, node: &str) -> (u16, String) {
    let answer = reqwest::Client::new()
        .post(format!("{url}/1/disruptions"))
        .basic_auth("ops", Some("secret"))
        .json(&json!({"node": node, "reason": "firmware", "requester": "reboot-tool", "ttl_s": 60}))
        .send()
        .await
        .unwrap();
    (answer.status().as_u16(), answer.text().await.unwrap())
}

/// A live repair canceled while its command runs on the agent: the node stays held (a grant
/// asking for it is refused, naming the incident) and the repair is polled as before until the
/// command ends; then the canceled incident records the command's outcome and holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_live_repair_holds_its_node_until_the_command_ends() {
    let (mut h, _users) = with_writer(4, "a:diskless:2", |_| {}).await;
    let (url, server) = serve_api(&h).await;
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict(
        "live-repair",
        json!({"firmware": "old"}),
        Some("update-firmware"),
    ));
    agent.set_repair(RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_millis(4000),
    });
    let started = std::time::Instant::now();
    h.round().await.unwrap();
    let incident = on(&h.incidents().unwrap(), 2);
    assert_eq!(incident.action, Action::LiveRepair);
    assert_eq!(
        agent.repairs(),
        vec![incident.uuid.to_string()],
        "requested"
    );

    let answer = reqwest::Client::new()
        .post(format!("{url}/1/incidents/{}/cancel", incident.uuid))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
    // The command still runs: rounds go on, the node stays held.
    let mut rounds = 0;
    while started.elapsed() < Duration::from_millis(3000) {
        h.round().await.unwrap();
        rounds += 1;
        let (status, body) = ask_grant(&url, &node(2)).await;
        assert_eq!(
            status,
            429,
            "round {rounds}: a grant of {} while its repair runs: {body}",
            node(2)
        );
        assert!(body.contains(&incident.uuid.to_string()), "{body}");
        let now = on(&h.incidents().unwrap(), 2);
        assert_eq!(now.repair_status, RepairStatus::Canceled, "{now:#?}");
    }
    assert!(rounds >= 2, "several rounds while the command runs");
    // The command ends; the next rounds read its outcome.
    tokio::time::sleep(Duration::from_millis(4200).saturating_sub(started.elapsed())).await;
    let mut granted = None;
    for _ in 0..5 {
        h.round().await.unwrap();
        let (status, body) = ask_grant(&url, &node(2)).await;
        if status == 201 {
            granted = Some(body);
            break;
        }
    }
    let after = h
        .incidents()
        .unwrap()
        .into_iter()
        .find(|i| i.uuid == incident.uuid);
    assert!(
        granted.is_some(),
        "released once the command ended: {after:#?}"
    );
    let after = after.expect("kept while its verdict is observed");
    assert_eq!(after.repair_status, RepairStatus::Canceled);
    assert!(
        after
            .history
            .iter()
            .any(|e| e.event.contains("update-firmware") && e.event.contains("exited 0")),
        "{after:#?}"
    );
    assert!(
        after
            .warning
            .as_deref()
            .is_some_and(|w| w.contains("update-firmware ran to its end")),
        "{after:#?}"
    );
    assert_eq!(agent.repairs().len(), 1, "requested once");
    server.abort();
}

/// A grant asked between rounds does not overtake an evacuation waiting for the budget: while
/// the incident waits for the cap a grant would take, the grant is refused (`429`, naming the
/// incident), and the next round admits the evacuation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_between_rounds_waits_behind_a_node_repair_waiting_for_the_budget() {
    let (mut h, _users) = with_writer(5, "a:diskless:2", |config| {
        config.max_disrupted_nodes = 1;
        // The grant's domain (the whole cluster here) is not in grace: node2's verdict is
        // acted on at once.
        config.grace = 0.0;
    })
    .await;
    let (url, server) = serve_api(&h).await;
    h.round().await.unwrap();
    let (status, body) = ask_grant(&url, &node(3)).await;
    assert_eq!(status, 201, "{body}");
    let first: serde_json::Value = serde_json::from_str(&body).unwrap();
    h.agents
        .get(&node(2))
        .unwrap()
        .set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    assert!(
        h.until(5, |i| i.iter().any(|i| i.blocked_by.is_some()))
            .await
            .unwrap(),
        "{:#?}",
        h.incidents()
    );
    let incident = on(&h.incidents().unwrap(), 2);
    assert!(
        incident.blocked_by.is_some() && ops_on(&h, &node(2)).is_empty(),
        "waits for the cap the grant holds: {incident:#?}"
    );
    // The grant is released; before the next round another tool asks for node4.
    let answer = reqwest::Client::new()
        .delete(format!(
            "{url}/1/disruptions/{}",
            first["id"].as_str().unwrap()
        ))
        .basic_auth("ops", Some("secret"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let (status, body) = ask_grant(&url, &node(4)).await;
    assert_eq!(status, 429, "the waiting evacuation comes first: {body}");
    assert!(body.contains(&incident.uuid.to_string()), "{body}");
    assert!(body.contains("waiting for the budget"), "{body}");
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    server.abort();
}

/// The escalation ladder: with at most one live repair a day, a node live-repaired once
/// (completed, acknowledged, forgotten) that asks for a second is evacuated instead, and the
/// incident's history says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_live_repair_within_the_window_is_an_evacuation() {
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:3", |config| {
        config.repair_ladder.max_live_repairs = 1;
    })
    .await
    .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("live-repair", json!({"fan": 1}), Some("reset-fan")));
    agent.set_repair(RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_millis(10),
    });
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    let first = on(&h.incidents().unwrap(), 2);
    assert_eq!(first.action, Action::LiveRepair);
    // Fixed: the node says Ok, the operator acknowledges (removes the tag), it is forgotten.
    agent.set_verdict(verdict("Ok", json!({}), None));
    h.sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.tags.retain(|t| *t != first.tag);
        }
    });
    assert!(
        h.until(10, |i| i.is_empty()).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    // The fan again, an hour later in the day: the ladder says evacuate.
    agent.set_verdict(verdict("live-repair", json!({"fan": 2}), Some("reset-fan")));
    h.round().await.unwrap();
    let second = on(&h.incidents().unwrap(), 2);
    assert_ne!(second.uuid, first.uuid);
    assert_eq!(second.action, Action::Evacuate, "{second:#?}");
    assert!(
        second.history.iter().any(|e| e
            .event
            .contains(&format!("2nd live repair of {} in 24 h", node(2)))),
        "{second:#?}"
    );
    assert!(
        h.until(30, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    assert!(
        h.sim
            .with_cluster(|c| c.instances.values().all(|i| i.pnode != node(2))),
        "the node was not evacuated"
    );
}

/// `[approvals] moves_above`: an evacuation that moves more instances than that waits for an
/// approval (its incident says so, no job is submitted); approved, its jobs carry the ticket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evacuation_moving_many_instances_waits_for_an_approval() {
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:2,c:diskless:3", |c| {
        c.approvals.moves_above = Some(1);
    })
    .await
    .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("evacuate", json!({"disk": "sdb"}), None));
    for _ in 0..3 {
        h.round().await.unwrap();
    }
    let waiting = on(&h.incidents().unwrap(), 2);
    assert_eq!(waiting.repair_status, RepairStatus::Noted);
    assert!(
        waiting.blocked_by.as_deref().is_some_and(|b| b.contains(
            "(moves 2 instances, more than approvals.moves_above = 1) (nodecare approval grant"
        )),
        "{waiting:#?}"
    );
    assert!(h.sim.submissions().is_empty());
    // `GET /1/approvals` says what needs one, the threshold too.
    let listed = nodecare_coordinator::approval_api::status(h.coordinator.api()).unwrap();
    assert_eq!(listed.moves_above, Some(1));
    assert_eq!(
        listed.needed_for().as_deref(),
        Some("work moving more than 1 instance")
    );
    assert!(
        listed
            .waiting
            .iter()
            .any(|w| w.id == waiting.uuid.to_string()),
        "{listed:#?}"
    );
    h.coordinator
        .api()
        .store
        .add_approval(nodecare_core::approval::ApprovalRecord {
            id: waiting.uuid,
            ticket: Some("CHG-99".into()),
            refused: None,
            who: "alice".into(),
            at_ms: nodecare_protocol::now_ms(),
        })
        .unwrap();
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    let submissions = h.sim.submissions();
    assert!(!submissions.is_empty());
    assert!(
        submissions.iter().filter(|s| !s.internal).all(|s| s
            .reason_text
            .as_deref()
            .is_some_and(|r| r.contains("CHG-99"))),
        "{submissions:#?}"
    );
}

/// `[repair_ladder.commands.reset-fan]`: the command's own limit, read from the verdict's
/// command, escalates its second live repair; the history says which limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_command_s_own_limit_escalates() {
    let mut h = Harness::new(4, "a:diskless:2,b:diskless:3", |config| {
        config.repair_ladder.commands = std::collections::BTreeMap::from([(
            "reset-fan".to_owned(),
            nodecare_core::duty::node_repair::ladder::CommandLimit {
                max_live_repairs: 1,
                window_secs: None,
                escalate_to: Some(Action::EvacuateFailover),
            },
        )]);
    })
    .await
    .unwrap();
    let agent = h.agents.get(&node(2)).unwrap().clone();
    agent.set_verdict(verdict("live-repair", json!({"fan": 1}), Some("reset-fan")));
    agent.set_repair(RepairBehaviour {
        exit_code: 0,
        duration: Duration::from_millis(10),
    });
    assert!(
        h.until(20, completed).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    let first = on(&h.incidents().unwrap(), 2);
    agent.set_verdict(verdict("Ok", json!({}), None));
    h.sim.with_cluster(|c| {
        if let Some(n) = c.nodes.get_mut(&node(2)) {
            n.tags.retain(|t| *t != first.tag);
        }
    });
    assert!(
        h.until(10, |i| i.is_empty()).await.unwrap(),
        "{:#?}",
        h.incidents()
    );
    agent.set_verdict(verdict("live-repair", json!({"fan": 2}), Some("reset-fan")));
    h.round().await.unwrap();
    let second = on(&h.incidents().unwrap(), 2);
    assert_eq!(second.action, Action::EvacuateFailover, "{second:#?}");
    assert!(
        second.history.iter().any(|e| e.event.contains(&format!(
            "2nd live repair of {} with reset-fan in 24 h (at most 1, repair_ladder.commands.reset-fan.max_live_repairs)",
            node(2)
        ))),
        "{second:#?}"
    );
}
