//! The instance auto-repair duty and its executor against the simulated Ganeti: an instance
//! on an offline node is failed over and tagged as harep tags, a plain one is recreated and
//! reinstalled, a drained primary's instance is migrated, a suspended one is left alone, and
//! the gate's refusal holds a repair back.
#![allow(
    clippy::disallowed_methods,
    reason = "the test writes to Ganeti as another tool would"
)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use nodecare_coordinator::instance_repair_exec::{self, RunReport};
use nodecare_coordinator::store::Store;
use nodecare_core::duty::instance_repair::{self, Assessment, Inputs};
use nodecare_core::gate::{self, Caps, InForce, NodeFacts, Policy, View};
use nodecare_exec::Executor;
use nodecare_ganeti::{Ganeti, Node};
use nodecare_ganeti_sim::Simulation;
use nodecare_ganeti_sim::model::{JobFailureRule, SimConfig};

const PREFIX: &str = "ganeti:watcher:autorepair:";

fn sim(instances: &str) -> Simulation {
    let sim = Simulation::new(SimConfig::from_spec(4, instances, "sim.test").unwrap()).unwrap();
    sim.set_job_delay(Duration::from_millis(20));
    sim
}

fn tag(sim: &Simulation, instance: &str, tags: &[&str]) {
    sim.with_cluster(|c| {
        let i = c.instances.get_mut(instance).unwrap();
        i.tags.extend(tags.iter().map(|t| format!("{PREFIX}{t}")));
    });
}

fn view(nodes: &[Node]) -> View {
    View {
        nodes: nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    NodeFacts {
                        name: n.name.clone(),
                        group: n.group.clone(),
                        domain: format!("group:{}", n.group),
                        vm_capable: n.vm_capable,
                        drained: n.drained,
                        offline: n.offline,
                        master: false,
                        memory_free: n.memory_free,
                        primary_memory: Some(0),
                        primaries: 0,
                    },
                )
            })
            .collect(),
        storage: Vec::new(),
        now_ms: 0,
    }
}

#[derive(Debug)]
struct Round {
    assessment: Assessment,
    report: RunReport,
    /// The disruptions in force the gate judged against, as the coordinator's round builds
    /// them: what Ganeti shows drained or offline and the nodes of running repairs.
    in_force: InForce,
}

/// One round as the coordinator runs it: read, assess, gate, execute; nothing fails.
async fn round(sim: &Simulation, store: &Executor, now: i64, policy: &Policy) -> Round {
    let round = round_reporting(sim, store, now, policy).await;
    assert!(round.report.errors.is_empty(), "{:?}", round.report.errors);
    round
}

/// [`round`], its failures left in the report.
async fn round_reporting(sim: &Simulation, store: &Executor, now: i64, policy: &Policy) -> Round {
    round_via(&sim.client(), store, now, policy).await
}

/// [`round_reporting`] through `ganeti`.
async fn round_via(ganeti: &dyn Ganeti, store: &Executor, now: i64, policy: &Policy) -> Round {
    let now_ms = u64::try_from(now).unwrap() * 1000;
    let followed = instance_repair_exec::follow(ganeti, store, now_ms).await;
    assert!(followed.is_empty(), "{followed:?}");

    let nodes = ganeti.nodes().await.unwrap();
    let instances = ganeti.instances().await.unwrap();
    let collected =
        instance_repair_exec::collect(ganeti, store, &instances, ganeti.groups().await.unwrap())
            .await
            .unwrap();
    assert!(collected.errors.is_empty(), "{:?}", collected.errors);
    let degraded = BTreeMap::new();
    let inputs = Inputs {
        now,
        cluster_tags: &collected.cluster_tags,
        groups: &collected.groups,
        nodes: &nodes,
        instances: &instances,
        jobs: &collected.jobs,
        degraded: &degraded,
        in_flight: &collected.in_flight,
    };
    let assessment = instance_repair::assess(&inputs, &mut uuid::Uuid::new_v4);
    let view = view(&nodes);
    let held = instance_repair_exec::holds(
        &instances,
        &nodes,
        Some(&collected.jobs),
        &collected.repairs_in_flight,
    );
    let in_force = InForce::new(&view, held.disrupted).with_touched(&view, held.touched);
    let decision = gate::decide(&view, policy, &in_force, assessment.proposals());
    let report = instance_repair_exec::run_instance_repairs(
        ganeti,
        store,
        &assessment,
        &decision,
        &collected,
        false,
        now_ms,
    )
    .await;
    Round {
        assessment,
        report,
        in_force,
    }
}

fn tags_of(sim: &Simulation, instance: &str) -> Vec<String> {
    sim.with_cluster(|c| {
        let mut tags = c.instances.get(instance).unwrap().tags.clone();
        tags.sort();
        tags
    })
}

/// The state database's executor.
fn open_store() -> (tempfile::TempDir, Executor) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    (dir, Executor::new(std::sync::Arc::new(store)))
}

/// The instance repairs (and tag changes) the ledger holds.
fn open_repairs(store: &Executor) -> Vec<nodecare_exec::ledger::Entry> {
    store
        .ledger()
        .entries()
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.holder, gate::Holder::InstanceRepair { .. }))
        .collect()
}

#[tokio::test]
async fn offline_primary_is_failed_over_and_tagged_as_harep_tags() {
    // inst1: DRBD, primary node2, secondary node3; inst2: plain on node2; inst3: DRBD on node2,
    // suspended; inst4: DRBD on node3/node4, healthy.
    let sim = sim("inst1:drbd:2,inst2:plain:2,inst3:drbd:2,inst4:drbd:3");
    // Slow enough that the second round surely comes before the tag jobs end.
    sim.set_job_delay(Duration::from_millis(800));
    tag(&sim, "inst1.sim.test", &["failover"]);
    tag(&sim, "inst2.sim.test", &["reinstall"]);
    tag(&sim, "inst3.sim.test", &["failover", "suspend:"]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    let policy = Policy {
        cluster: Caps {
            max_disrupted_nodes: 2,
            max_disrupted_percent: None,
            min_healthy_nodes: 1,
        },
        ..Policy::default()
    };

    // Both repairs leave node2: one proposal, admitted at once, as harep repairs both.
    let first = round(&sim, &store, 1000, &policy).await;
    assert_eq!(first.assessment.repairs.len(), 2, "{:?}", first.assessment);
    assert_eq!(first.assessment.proposals().len(), 1);
    assert_eq!(first.assessment.proposals()[0].moves_memory, Some(256));
    // The failover goes at once; the reinstall's first job (recreate-disks) too, its second
    // once that has succeeded (then the pending tag).
    assert_eq!(first.report.submitted.len(), 1, "{:?}", first.report);
    let counts = first.assessment.status_counts();
    assert_eq!(counts.get("Pending repair"), Some(&2));
    assert_eq!(counts.get("Healthy"), Some(&2));
    assert!(
        first
            .report
            .lines
            .contains(&"Executing ArFailover repair on inst1.sim.test".to_owned())
    );

    // Until their pending tags show, both are in flight: a second round does nothing.
    let second = round(&sim, &store, 1001, &policy).await;
    assert!(
        second.assessment.repairs.is_empty(),
        "{:?}",
        second.assessment
    );
    assert!(second.report.submitted.is_empty(), "{:?}", second.report);
    assert!(sim.settle(Duration::from_secs(10)).await);
    let resumed = round(&sim, &store, 1050, &policy).await;
    assert!(
        resumed.assessment.repairs.is_empty(),
        "{:?}",
        resumed.assessment
    );
    assert_eq!(resumed.report.submitted.len(), 1, "{:?}", resumed.report);
    assert_eq!(resumed.report.submitted[0].0, "inst2.sim.test");
    let first = Round {
        report: RunReport {
            submitted: [first.report.submitted, resumed.report.submitted].concat(),
            ..RunReport::default()
        },
        ..first
    };
    assert!(sim.settle(Duration::from_secs(10)).await);
    // The failover ended meanwhile: the round that resumed the reinstall recorded its success.
    let (_, uuid1, jobs1) = first
        .report
        .submitted
        .iter()
        .find(|(i, _, _)| i == "inst1.sim.test")
        .unwrap()
        .clone();
    assert_eq!(
        tags_of(&sim, "inst1.sim.test"),
        vec![
            format!("{PREFIX}failover"),
            format!(
                "{PREFIX}result:failover:{uuid1}:1050:success:{}",
                jobs1
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join("+")
            ),
        ]
    );
    // The reinstall is two chained jobs: recreate-disks, then reinstall.
    let (_, uuid2, jobs2) = first
        .report
        .submitted
        .iter()
        .find(|(i, _, _)| i == "inst2.sim.test")
        .unwrap()
        .clone();
    assert_eq!(jobs2.len(), 2);
    let submissions = sim.submissions();
    let ops: Vec<(&str, &str)> = submissions
        .iter()
        .filter(|s| jobs1.contains(&s.job) || jobs2.contains(&s.job))
        .map(|s| (s.op_id.as_str(), s.target.as_str()))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("OP_INSTANCE_FAILOVER", "inst1.sim.test"),
            ("OP_INSTANCE_RECREATE_DISKS", "inst2.sim.test"),
            ("OP_INSTANCE_REINSTALL", "inst2.sim.test"),
        ]
    );
    // Every job carries the reason trail with the repair uuid, except RAPI's reinstall, whose
    // job Ganeti 3.0.2 builds without the `reason` parameter (as the simulation does).
    for s in submissions
        .iter()
        .filter(|s| s.op_id != "OP_INSTANCE_REINSTALL")
    {
        let text = s.reason_text.clone().unwrap_or_default();
        assert!(
            text.starts_with("gnt:daemon:maintd nodecare incident="),
            "{text}"
        );
        assert!(text.contains("automated repairs by nodecare"), "{text}");
        assert!(
            text.contains(&uuid1.to_string()) || text.contains(&uuid2.to_string()),
            "{text}"
        );
    }
    assert!(sim.duplicate_intents().is_empty());
    // The failover moved inst1 to its secondary.
    sim.with_cluster(|c| {
        assert_eq!(c.instances["inst1.sim.test"].pnode, "node3.sim.test");
        assert_ne!(c.instances["inst2.sim.test"].pnode, "node2.sim.test");
    });

    // Next round: the reinstall succeeded, its pending tag becomes a success result; inst1
    // now runs on node3 with its mirror on the offline node2, so a fix-storage follows
    // (failover, then replace-disks, as the design describes).
    let third = round(&sim, &store, 1100, &policy).await;
    assert_eq!(third.report.submitted.len(), 1, "{:?}", third.report);
    assert_eq!(third.report.submitted[0].0, "inst1.sim.test");
    assert!(sim.settle(Duration::from_secs(10)).await);
    let inst2 = tags_of(&sim, "inst2.sim.test");
    assert!(
        inst2
            .iter()
            .any(|t| t.starts_with(&format!("{PREFIX}result:reinstall:{uuid2}:1100:success:"))),
        "{inst2:?}"
    );
    // The suspended instance was never touched.
    assert_eq!(
        tags_of(&sim, "inst3.sim.test"),
        vec![format!("{PREFIX}failover"), format!("{PREFIX}suspend:")]
    );
    assert!(
        !sim.submissions()
            .iter()
            .any(|s| s.target == "inst3.sim.test")
    );
    let _ = round(&sim, &store, 1300, &policy).await;
    assert!(sim.settle(Duration::from_secs(10)).await);
    sim.with_cluster(|c| {
        assert_eq!(c.instances["inst1.sim.test"].pnode, "node3.sim.test");
        assert_ne!(
            c.instances["inst1.sim.test"].snodes,
            vec!["node2.sim.test".to_owned()]
        );
    });
    // Quiet afterwards.
    let quiet = round(&sim, &store, 1400, &policy).await;
    assert!(quiet.assessment.tag_changes.is_empty() && quiet.assessment.repairs.is_empty());
    assert!(
        open_repairs(&store).is_empty(),
        "{:?}",
        open_repairs(&store)
    );
    assert!(
        sim.duplicate_intents().is_empty(),
        "{:?}",
        sim.duplicate_intents()
    );
}

#[tokio::test]
async fn drained_primary_is_migrated_and_a_failed_job_ends_in_failure() {
    let sim = sim("inst1:drbd:2,inst2:drbd:3");
    sim.with_cluster(|c| {
        c.cluster_tags.push(format!("{PREFIX}migrate"));
        c.nodes.get_mut("node2.sim.test").unwrap().drained = true;
    });
    let (_dir, store) = open_store();
    let policy = Policy::default();
    let first = round(&sim, &store, 1000, &policy).await;
    assert_eq!(first.report.submitted.len(), 1, "{:?}", first);
    assert!(sim.settle(Duration::from_secs(10)).await);
    let migrations: Vec<_> = sim
        .submissions()
        .into_iter()
        .filter(|s| s.op_id == "OP_INSTANCE_MIGRATE")
        .collect();
    assert_eq!(migrations.len(), 1);
    assert_eq!(migrations[0].target, "inst1.sim.test");

    let closed = round(&sim, &store, 1100, &policy).await;
    assert!(closed.assessment.repairs.is_empty());
    assert!(sim.settle(Duration::from_secs(10)).await);
    // node3 goes offline: inst1 (migrated there) and inst2 need a failover, which the
    // cluster's `migrate` policy does not permit → enoperm, recorded once.
    sim.with_cluster(|c| {
        c.nodes.get_mut("node3.sim.test").unwrap().offline = true;
        c.nodes.get_mut("node2.sim.test").unwrap().drained = false;
    });
    let enoperm = round(&sim, &store, 1200, &policy).await;
    assert!(enoperm.assessment.repairs.is_empty());
    assert_eq!(
        enoperm.assessment.status_counts().get("Needs repair"),
        Some(&2),
        "{:#?}",
        enoperm.assessment.instances
    );
    assert!(sim.settle(Duration::from_secs(10)).await);
    for instance in ["inst1.sim.test", "inst2.sim.test"] {
        let tags = tags_of(&sim, instance);
        assert!(
            tags.iter()
                .any(|t| t.starts_with(&format!("{PREFIX}result:failover:"))
                    && t.ends_with(":1200:enoperm:")),
            "{tags:?}"
        );
    }
    let again = round(&sim, &store, 1250, &policy).await;
    assert!(again.assessment.tag_changes.is_empty(), "{again:?}");

    // Failover permitted; the first failover job fails.
    sim.with_cluster(|c| c.cluster_tags = vec![format!("{PREFIX}failover")]);
    sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_INSTANCE_FAILOVER".into()),
        target: None,
        count: Some(1),
        message: "simulated failover failure".into(),
    });
    let mut submitted = 0;
    for now in (1300..1900).step_by(100) {
        let r = round(&sim, &store, now, &policy).await;
        submitted += r.report.submitted.len();
        assert!(sim.settle(Duration::from_secs(10)).await);
        if r.assessment.repairs.is_empty() && r.assessment.tag_changes.is_empty() {
            break;
        }
    }
    // Two failovers, and the fix-storage that replaces the mirror left on the offline node
    // by the one that succeeded.
    assert_eq!(submitted, 3);
    let results: Vec<String> = ["inst1.sim.test", "inst2.sim.test"]
        .iter()
        .flat_map(|i| tags_of(&sim, i))
        .filter(|t| t.contains(":result:"))
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        results.iter().filter(|t| t.contains(":failure:")).count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|t| t.contains(":success:")).count(),
        1,
        "{results:?}"
    );
    let after = round(&sim, &store, 2000, &policy).await;
    assert!(after.assessment.repairs.is_empty() && after.assessment.tag_changes.is_empty());
    assert!(sim.duplicate_intents().is_empty());
}

#[tokio::test]
async fn the_gate_holds_a_repair_back_and_nothing_is_submitted() {
    let sim = sim("inst1:drbd:2");
    tag(&sim, "inst1.sim.test", &["failover"]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    let policy = Policy {
        breaker: Some("too many incidents".into()),
        ..Policy::default()
    };
    let held = round(&sim, &store, 1000, &policy).await;
    assert_eq!(held.assessment.repairs.len(), 1);
    assert!(held.report.submitted.is_empty());
    assert_eq!(held.report.blocked.len(), 1);
    assert!(
        held.report.blocked[0].1.contains("storm breaker"),
        "{:?}",
        held.report
    );
    assert!(sim.submissions().is_empty());
    assert!(
        open_repairs(&store).is_empty(),
        "{:?}",
        open_repairs(&store)
    );
    // The breaker closes: the repair goes.
    let go = round(&sim, &store, 1100, &Policy::default()).await;
    assert_eq!(go.report.submitted.len(), 1);
}

/// Issue 25 (1): a repair whose job is still running holds its instance's nodes in the rounds
/// after the one that admitted it: the node it fails over onto may not be drained by an
/// incident or touched by a balancing move until the job ends, and the offline node it leaves
/// is the repair's, not free for another holder to take over.
#[tokio::test]
async fn a_running_repair_holds_its_nodes_in_later_rounds() {
    let sim = sim("inst1:drbd:2");
    tag(&sim, "inst1.sim.test", &["failover"]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    let policy = Policy::default();
    // The failover job stays running.
    sim.stick_next_jobs(1);
    let first = round(&sim, &store, 1000, &policy).await;
    assert_eq!(first.report.submitted.len(), 1, "{:?}", first.report);
    let (_, repair, _) = first.report.submitted[0].clone();
    let target = sim.with_cluster(|c| c.instances.get("inst1.sim.test").unwrap().snodes[0].clone());
    let holder = gate::Holder::InstanceRepair { id: repair };

    // Before and after its pending tag shows, the repair holds both nodes.
    for now in [1001, 1002] {
        let later = round(&sim, &store, now, &policy).await;
        assert!(later.report.submitted.is_empty(), "{:?}", later.report);
        assert_eq!(
            later.in_force.touched.get(&target),
            Some(&holder),
            "{:?}",
            later.in_force
        );
        assert_eq!(
            later.in_force.nodes.get("node2.sim.test"),
            Some(&holder),
            "{:?}",
            later.in_force
        );
        let client = sim.client();
        let ganeti: &dyn Ganeti = &client;
        let view = view(&ganeti.nodes().await.unwrap());
        let evacuate = gate::Proposal {
            duty: gate::Duty::NodeRepair,
            holder: gate::Holder::Incident {
                id: uuid::Uuid::from_u128(7),
            },
            subject: format!("node {target}"),
            invasiveness: 2,
            since_ms: 0,
            disrupts: [target.clone()].into(),
            touches: Default::default(),
            fresh: false,
            moves_memory: Some(0),
            after_releases: std::collections::BTreeMap::new(),
            reason: "evacuate (failing)".into(),
        };
        let take_over = gate::Proposal {
            disrupts: ["node2.sim.test".to_owned()].into(),
            holder: gate::Holder::Incident {
                id: uuid::Uuid::from_u128(8),
            },
            ..evacuate.clone()
        };
        let balance = gate::Proposal {
            duty: gate::Duty::Balancing,
            holder: gate::Holder::Balancing {
                id: uuid::Uuid::from_u128(9),
            },
            disrupts: Default::default(),
            touches: [target.clone(), "node4.sim.test".to_owned()].into(),
            ..evacuate.clone()
        };
        for proposal in [evacuate, take_over, balance] {
            let decision = gate::decide(&view, &policy, &later.in_force, vec![proposal.clone()]);
            let outcome = &decision.judgements[0].outcome;
            assert!(
                matches!(outcome, Err(gate::BlockedBy::Conflict { holder, .. })
                    if holder.contains(&repair.to_string())),
                "{proposal:?}: {outcome:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The job ends: the nodes are free again.
    sim.with_cluster(|c| c.stuck.clear());
    assert!(sim.settle(Duration::from_secs(10)).await);
    let done = round(&sim, &store, 1100, &policy).await;
    assert_eq!(
        done.in_force.touched.get(&target),
        None,
        "{:?}",
        done.in_force
    );
}

#[tokio::test]
async fn the_bare_suspend_tag_keeps_a_reinstall_from_running() {
    let sim = sim("inst1:plain:2");
    tag(&sim, "inst1.sim.test", &["reinstall", "suspend"]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    let r = round(&sim, &store, 1000, &Policy::default()).await;
    assert!(
        r.assessment.repairs.is_empty(),
        "{:?}",
        r.assessment.repairs
    );
    assert_eq!(
        r.report.lines,
        vec!["Not repairing inst1.sim.test because it's in state ArSuspended Forever"]
    );
    assert!(sim.submissions().is_empty());
    assert_eq!(
        tags_of(&sim, "inst1.sim.test"),
        vec![format!("{PREFIX}reinstall"), format!("{PREFIX}suspend")]
    );
}

#[tokio::test]
async fn a_pending_repair_whose_result_tag_cannot_be_written_is_reported_every_round() {
    let sim = sim("inst1:drbd:2");
    // Another tool's 70-character id: the pending tag fits in 128 characters, its result
    // does not, even without the job list. Job 56 is unknown to Ganeti: the repair is over.
    let id = format!("othertool-{}", "0123456789".repeat(6));
    let pending = format!("pending:failover:{id}:1795331497:56");
    tag(&sim, "inst1.sim.test", &["failover", &pending]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    for now in [1_795_332_000, 1_795_332_300] {
        let r = round_reporting(&sim, &store, now, &Policy::default()).await;
        assert!(r.assessment.repairs.is_empty());
        assert_eq!(r.report.errors.len(), 1, "{:?}", r.report.errors);
        let error = &r.report.errors[0];
        assert!(
            error.starts_with("inst1.sim.test: blocked: ") && error.contains("128 characters"),
            "{error}"
        );
        assert!(error.contains(&format!("{PREFIX}{pending}")), "{error}");
        assert!(sim.submissions().is_empty(), "{:?}", sim.submissions());
    }
    assert_eq!(
        tags_of(&sim, "inst1.sim.test"),
        vec![format!("{PREFIX}failover"), format!("{PREFIX}{pending}")]
    );
}

#[tokio::test]
async fn expired_suspends_are_removed_from_instance_group_and_cluster() {
    let sim = sim("inst1:drbd:2");
    tag(&sim, "inst1.sim.test", &["suspend:999", "suspend:"]);
    sim.with_cluster(|c| {
        c.cluster_tags.push(format!("{PREFIX}suspend:5"));
        c.group_tags.push(format!("{PREFIX}suspend:5000"));
    });
    let (_dir, store) = open_store();
    let _ = round(&sim, &store, 1000, &Policy::default()).await;
    assert!(sim.settle(Duration::from_secs(10)).await);
    assert_eq!(
        tags_of(&sim, "inst1.sim.test"),
        vec![format!("{PREFIX}suspend:")]
    );
    sim.with_cluster(|c| {
        assert!(c.cluster_tags.is_empty());
        assert_eq!(c.group_tags, vec![format!("{PREFIX}suspend:5000")]);
    });
}

#[tokio::test]
async fn one_shot_dry_run_prints_harep_output_and_submits_nothing() {
    let sim = sim("inst1:drbd:2,inst2:plain:2,inst3:drbd:3");
    tag(&sim, "inst1.sim.test", &["failover"]);
    sim.with_cluster(|c| {
        c.cluster_tags.push(format!("{PREFIX}fix-storage"));
        c.nodes.get_mut("node2.sim.test").unwrap().offline = true;
    });
    let (_dir, store) = open_store();
    let client = sim.client();
    let one = instance_repair_exec::run_once(&client, &store, &Policy::default(), true, 1_000_000)
        .await
        .unwrap();
    let out = one.harep_output();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0], "Executing ArFailover repair on inst1.sim.test",
        "{out}"
    );
    assert!(
        lines[1].starts_with(
            r#"jobs: [[{"OP_ID":"OP_INSTANCE_FAILOVER","instance_name":"inst1.sim.test""#
        ),
        "{out}"
    );
    assert_eq!(lines[2], ">>> Adding the following tag to inst1.sim.test:");
    assert!(lines[3].starts_with("\"ganeti:watcher:autorepair:pending:failover:"));
    assert!(lines[3].ends_with(":1000:\""), "{out}");
    assert_eq!(
        lines[4],
        "Not performing a repair of type ArReinstall on inst2.sim.test because only repairs up to ArFixStorage are allowed"
    );
    assert_eq!(
        lines[lines.len() - 6..],
        [
            "---------------------",
            "Instance status count",
            "---------------------",
            "Healthy: 1",
            "Needs repair: 1",
            "Pending repair: 1",
        ]
    );
    assert!(sim.submissions().is_empty());
    assert!(
        open_repairs(&store).is_empty(),
        "{:?}",
        open_repairs(&store)
    );
}

/// A crash after the repair job was submitted but before its ledger entry said so: the next run
/// finds the job by its reason, submits nothing twice and writes the pending tag naming it.
#[tokio::test]
async fn a_repair_interrupted_by_a_crash_is_completed_without_duplicates() {
    repair_interrupted_by_a_crash(nodecare_ganeti::REASON_SOURCE).await;
}

/// After an upgrade: the job was submitted by a version whose reason source was
/// `gnt:daemon:nodecare`; it is still adopted, not submitted again.
#[tokio::test]
async fn a_job_submitted_under_the_legacy_reason_source_is_adopted() {
    repair_interrupted_by_a_crash(nodecare_ganeti::LEGACY_REASON_SOURCE).await;
}

/// A repair recorded, its job submitted with the reason `source`, then a crash: the next round
/// adopts the job.
async fn repair_interrupted_by_a_crash(source: &str) {
    use nodecare_core::duty::instance_repair::{RepairOp, RepairPlan, RepairType};
    use nodecare_ganeti::{Op, Reason};

    let sim = sim("inst1:drbd:2,inst2:drbd:3");
    tag(&sim, "inst1.sim.test", &["failover"]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    let uuid = uuid::Uuid::new_v4();
    let plan = RepairPlan {
        instance: "inst1.sim.test".into(),
        kind: RepairType::Failover,
        uuid,
        ts: 1000,
        ops: vec![RepairOp::Failover],
        remove: Vec::new(),
        message: "Executing ArFailover repair on inst1.sim.test".into(),
    };
    // Recorded as the executor records it, then the job submitted, then a crash.
    store
        .record(&instance_repair_exec::repair_entries(
            &plan,
            &std::collections::BTreeSet::new(),
            None,
            0,
        ))
        .unwrap();
    let client = sim.client().with_reason_source(source).unwrap();
    let reason = Reason::new(uuid, "instance-repair-failover-0", "before the crash");
    let job = Ganeti::submit(
        &client,
        &Op::FailoverInstance {
            instance: "inst1.sim.test".into(),
            target: None,
        },
        &reason,
    )
    .await
    .unwrap();
    let before = Ganeti::job(&client, job).await.unwrap();
    assert!(
        before.reasons.iter().any(|r| r
            .text
            .starts_with(&format!("{source} nodecare incident={uuid}"))),
        "{:?}",
        before.reasons
    );

    let next = round(&sim, &store, 1100, &Policy::default()).await;
    assert!(next.assessment.repairs.is_empty(), "{:?}", next.assessment);
    assert_eq!(
        next.report.submitted,
        vec![("inst1.sim.test".to_owned(), uuid, vec![job])]
    );
    assert!(sim.settle(Duration::from_secs(10)).await);
    assert_eq!(
        tags_of(&sim, "inst1.sim.test"),
        vec![
            format!("{PREFIX}failover"),
            format!("{PREFIX}pending:failover:{uuid}:1000:{job}"),
        ]
    );
    let failovers = sim
        .submissions()
        .iter()
        .filter(|s| s.op_id == "OP_INSTANCE_FAILOVER")
        .count();
    assert_eq!(failovers, 1);
    assert!(sim.duplicate_intents().is_empty());
}

/// A Ganeti client whose answers to submissions are lost (the job is submitted, the answer
/// never arrives: a timeout, a crash).
#[derive(Debug)]
struct LostAnswers {
    inner: nodecare_ganeti::rapi::RapiClient,
}

impl Ganeti for LostAnswers {
    fn cluster_info(&self) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::ClusterInfo> {
        Ganeti::cluster_info(&self.inner)
    }
    fn nodes(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<Node>> {
        Ganeti::nodes(&self.inner)
    }
    fn instances(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Instance>> {
        Ganeti::instances(&self.inner)
    }
    fn submit<'a>(
        &'a self,
        op: &'a nodecare_ganeti::Op,
        reason: &'a nodecare_ganeti::Reason,
    ) -> nodecare_ganeti::GanetiFuture<'a, nodecare_ganeti::JobId> {
        Box::pin(async move {
            Ganeti::submit(&self.inner, op, reason).await?;
            Err(nodecare_ganeti::GanetiError::Transport(
                "answer lost".into(),
            ))
        })
    }
    fn groups(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::Group>> {
        Ganeti::groups(&self.inner)
    }
    fn tags<'a>(
        &'a self,
        target: &'a nodecare_ganeti::TagTarget,
    ) -> nodecare_ganeti::GanetiFuture<'a, Vec<String>> {
        Ganeti::tags(&self.inner, target)
    }
    fn job(
        &self,
        id: nodecare_ganeti::JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::Job> {
        Ganeti::job(&self.inner, id)
    }
    fn jobs(&self) -> nodecare_ganeti::GanetiFuture<'_, Vec<nodecare_ganeti::JobSummary>> {
        Ganeti::jobs(&self.inner)
    }
    fn cancel_job(
        &self,
        id: nodecare_ganeti::JobId,
    ) -> nodecare_ganeti::GanetiFuture<'_, nodecare_ganeti::JobCancel> {
        Ganeti::cancel_job(&self.inner, id)
    }
}

/// A reinstall whose submission's answer is lost cannot be found again (its job carries no
/// reason trail): it is never submitted again; the repair fails visibly, a `failure` result tag
/// naming the jobs so far and why in the run's errors.
#[tokio::test]
async fn an_uncertain_reinstall_fails_the_repair_and_is_never_submitted_twice() {
    let sim = sim("inst2:plain:2");
    tag(&sim, "inst2.sim.test", &["reinstall"]);
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().offline = true);
    let (_dir, store) = open_store();
    let policy = Policy::default();
    let first = round(&sim, &store, 1000, &policy).await;
    assert_eq!(first.assessment.repairs.len(), 1, "{:?}", first.assessment);
    let uuid = first.assessment.repairs[0].plan.uuid;
    assert!(sim.settle(Duration::from_secs(10)).await);
    // The recreate-disks job succeeded: the reinstall is submitted, its answer lost.
    let lossy = LostAnswers {
        inner: sim.client(),
    };
    let second = round_via(&lossy, &store, 1100, &policy).await;
    assert!(
        second
            .report
            .errors
            .iter()
            .any(|e| e.contains("answer lost")),
        "{:?}",
        second.report
    );
    assert!(sim.settle(Duration::from_secs(10)).await);
    let third = round_reporting(&sim, &store, 1200, &policy).await;
    assert!(
        third
            .report
            .errors
            .iter()
            .any(|e| e.contains("not run again") && e.contains("no reason trail")),
        "{:?}",
        third.report
    );
    assert!(sim.settle(Duration::from_secs(10)).await);
    for now in [1300, 1400] {
        let _ = round_reporting(&sim, &store, now, &policy).await;
        assert!(sim.settle(Duration::from_secs(10)).await);
    }
    let reinstalls = sim
        .submissions()
        .iter()
        .filter(|s| s.op_id == "OP_INSTANCE_REINSTALL")
        .count();
    assert_eq!(reinstalls, 1);
    let recreate = sim
        .submissions()
        .iter()
        .find(|s| s.op_id == "OP_INSTANCE_RECREATE_DISKS")
        .map(|s| s.job)
        .unwrap();
    let tags = tags_of(&sim, "inst2.sim.test");
    assert!(
        tags.contains(&format!(
            "{PREFIX}result:reinstall:{uuid}:1000:failure:{recreate}"
        )),
        "{tags:?}"
    );
}

/// A repair's result tag change whose jobs do not succeed (the tag job fails, the untag after it
/// with it) is written again under a new intent: no reason-trail key reaches Ganeti twice (a
/// key names one job, which adoption after a crash finds by it), and the instance ends with
/// its result tag and without its pending one.
#[tokio::test]
async fn a_result_tag_change_that_failed_is_written_again_under_a_new_intent() {
    let sim = sim("inst1:drbd:2,inst2:drbd:3");
    sim.with_cluster(|c| {
        c.cluster_tags.push(format!("{PREFIX}migrate"));
        c.nodes.get_mut("node2.sim.test").unwrap().drained = true;
    });
    let (_dir, store) = open_store();
    let policy = Policy::default();
    let first = round(&sim, &store, 1000, &policy).await;
    assert_eq!(first.report.submitted.len(), 1, "{first:?}");
    let uuid = first.report.submitted[0].1;
    assert!(sim.settle(Duration::from_secs(10)).await);
    // The migration and the pending tag succeeded: the result tag's job fails (its untag,
    // chained after it, fails with it).
    sim.fail_jobs(JobFailureRule {
        op_id: Some("OP_TAGS_SET".into()),
        target: None,
        count: Some(1),
        message: "simulated tag failure".into(),
    });
    for now in (1100..1700).step_by(100) {
        let _ = round_reporting(&sim, &store, now, &policy).await;
        assert!(sim.settle(Duration::from_secs(10)).await);
        if !tags_of(&sim, "inst1.sim.test")
            .iter()
            .any(|t| t.contains(":pending:"))
        {
            break;
        }
    }
    let tags = tags_of(&sim, "inst1.sim.test");
    assert!(
        tags.iter().any(
            |t| t.starts_with(&format!("{PREFIX}result:migrate:{uuid}:"))
                && t.contains(":success:")
        ),
        "{tags:?}"
    );
    assert!(!tags.iter().any(|t| t.contains(":pending:")), "{tags:?}");
    let tag_jobs = sim
        .submissions()
        .iter()
        .filter(|s| s.op_id == "OP_TAGS_SET" || s.op_id == "OP_TAGS_DEL")
        .count();
    // The pending tag, the result tag and untag twice.
    assert_eq!(tag_jobs, 5, "{:?}", sim.submissions());
    assert!(
        sim.duplicate_intents().is_empty(),
        "{:?}",
        sim.duplicate_intents()
    );
    // Nothing of the repair is left in the ledger once its result shows.
    let _ = round_reporting(&sim, &store, 1800, &policy).await;
    let left: Vec<_> = open_repairs(&store)
        .into_iter()
        .filter(|e| e.holder == gate::Holder::InstanceRepair { id: uuid })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A repair whose first job may have been submitted (the answer lost) and that Ganeti's job
/// list then shows was never queued (its job vanished at once) has had none of its jobs run:
/// it is judged again by the gate, re-planned from the cluster as it is, never submitted again
/// under its old reason-trail key. Held back by the gate's breaker the round after, nothing
/// is submitted; the breaker closed, the repair goes under a new uuid; and once the drain that
/// made it needed is undone, no repair is left to run.
#[tokio::test]
async fn a_repair_none_of_whose_jobs_ran_is_judged_again() {
    let sim = sim("inst1:drbd:2,inst2:drbd:3");
    sim.with_cluster(|c| {
        c.cluster_tags.push(format!("{PREFIX}migrate"));
        c.nodes.get_mut("node2.sim.test").unwrap().drained = true;
    });
    let (_dir, store) = open_store();
    let policy = Policy::default();
    let migrations = |sim: &Simulation| -> Vec<String> {
        sim.submissions()
            .into_iter()
            .filter(|s| s.op_id == "OP_INSTANCE_MIGRATE")
            .map(|s| s.reason_text.unwrap_or_default())
            .collect()
    };
    // Admitted; its migration's answer is lost and the job vanishes from the queue at once.
    sim.vanish_next_jobs(1);
    let lossy = LostAnswers {
        inner: sim.client(),
    };
    let first = round_via(&lossy, &store, 1000, &policy).await;
    assert_eq!(first.assessment.repairs.len(), 1, "{first:?}");
    let uuid = first.assessment.repairs[0].plan.uuid;
    assert!(
        first
            .report
            .errors
            .iter()
            .any(|e| e.contains("answer lost")),
        "{:?}",
        first.report
    );
    assert!(sim.settle(Duration::from_secs(10)).await);
    assert_eq!(migrations(&sim).len(), 1);

    // The gate refuses everything now: the repair, none of whose jobs ran, is not submitted.
    let breaker = Policy {
        breaker: Some("too many incidents".into()),
        ..Policy::default()
    };
    let held = round_reporting(&sim, &store, 1100, &breaker).await;
    assert!(sim.settle(Duration::from_secs(10)).await);
    assert_eq!(
        migrations(&sim).len(),
        1,
        "submitted again without the gate: {:?}",
        migrations(&sim)
    );
    assert_eq!(held.assessment.repairs.len(), 1, "{:?}", held.assessment);
    assert_ne!(held.assessment.repairs[0].plan.uuid, uuid);
    assert_eq!(held.report.blocked.len(), 1, "{:?}", held.report);
    assert!(
        !open_repairs(&store)
            .iter()
            .any(|e| e.holder == gate::Holder::InstanceRepair { id: uuid }),
        "{:?}",
        open_repairs(&store)
    );

    // The drain undone: nothing left to repair, nothing submitted.
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().drained = false);
    let undone = round(&sim, &store, 1200, &policy).await;
    assert!(undone.assessment.repairs.is_empty(), "{undone:?}");
    assert!(sim.settle(Duration::from_secs(10)).await);
    assert_eq!(migrations(&sim).len(), 1, "{:?}", migrations(&sim));

    // Drained again, the gate open: a new repair, under a reason-trail key of its own.
    sim.with_cluster(|c| c.nodes.get_mut("node2.sim.test").unwrap().drained = true);
    let again = round(&sim, &store, 1300, &policy).await;
    assert_eq!(again.report.submitted.len(), 1, "{again:?}");
    assert_ne!(again.report.submitted[0].1, uuid);
    assert!(sim.settle(Duration::from_secs(10)).await);
    let all = migrations(&sim);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(!all[1].contains(&uuid.to_string()), "{all:?}");
    assert!(
        sim.duplicate_intents().is_empty(),
        "{:?}",
        sim.duplicate_intents()
    );
}
