use super::*;
use crate::incident::Action;
use crate::plan::tests_support::{incident_on, instance, node};
use proptest::prelude::*;

fn intent(incident: u128, key: &str, planned: Move, state: IntentState) -> Intent {
    Intent {
        incident: Uuid::from_u128(incident),
        key: key.into(),
        spec: IntentSpec::Move { planned },
        locks: Vec::new(),
        state,
        job_id: None,
        created_ms: 0,
        submitted_ms: None,
        finished_ms: None,
        error: None,
    }
}

fn migrate(instance: &str) -> Move {
    Move::Migrate {
        instance: instance.into(),
        target: None,
    }
}

fn nodes() -> Vec<Node> {
    ["node1", "node2", "node3"]
        .iter()
        .map(|n| node(n))
        .collect()
}

/// node2 evacuated by incident 7: inst1 and inst2 moved to node3.
fn homecoming(healthy_since_s: Option<f64>) -> Homecoming {
    Homecoming {
        incident: Uuid::from_u128(7),
        node: "node2".into(),
        node_uuid: "uuid-node2".into(),
        noted_s: 100.0,
        healthy_since_s,
        not_ready: None,
        instances: ["inst1", "inst2"]
            .iter()
            .map(|i| Homebound {
                instance: (*i).into(),
                state: HomeState::Waiting,
                attempts: 0,
            })
            .collect(),
        ended_s: None,
    }
}

fn away() -> Vec<Instance> {
    vec![
        instance("inst1", "node3", 1024),
        instance("inst2", "node3", 1024),
    ]
}

#[test]
fn a_completed_evacuation_is_noted_with_the_primaries_it_moved() {
    let nodes = nodes();
    let mut evacuated = incident_on(7, &nodes[1], Action::Evacuate, 1.0);
    let mut live = incident_on(8, &nodes[2], Action::LiveRepair, 1.0);
    let open = incident_on(9, &nodes[0], Action::Evacuate, 1.0);
    evacuated.repair_status = RepairStatus::Completed;
    live.repair_status = RepairStatus::Completed;
    let intents = vec![
        intent(7, "m1", migrate("inst1"), IntentState::Succeeded),
        intent(
            7,
            "m2",
            Move::Failover {
                instance: "inst2".into(),
                target: Some("node3".into()),
            },
            IntentState::Succeeded,
        ),
        // Refused, then planned again and done: named once.
        intent(7, "m3", migrate("inst1"), IntentState::Replanned),
        intent(7, "m4", migrate("inst1"), IntentState::Succeeded),
        // A secondary moved is not a primary moved.
        intent(
            7,
            "r1",
            Move::ReplaceSecondary {
                instance: "inst5".into(),
                remote_node: "node3".into(),
                replaces: None,
            },
            IntentState::Succeeded,
        ),
        intent(7, "m5", migrate("inst6"), IntentState::Failed),
        intent(9, "m1", migrate("inst9"), IntentState::Succeeded),
    ];
    let mut list = Vec::new();
    assert!(note(
        &mut list,
        &[evacuated.clone(), live, open],
        &intents,
        50.0
    ));
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].incident, Uuid::from_u128(7));
    assert_eq!(list[0].node, "node2");
    let names: Vec<&str> = list[0]
        .instances
        .iter()
        .map(|i| i.instance.as_str())
        .collect();
    assert_eq!(names, ["inst1", "inst2"]);
    // Noted once.
    assert!(!note(&mut list, &[evacuated], &intents, 60.0));
    assert_eq!(list.len(), 1);
    // Ended and shown long enough: forgotten.
    list[0].ended_s = Some(60.0);
    assert!(!note(&mut list, &[], &intents, 60.0 + SHOWN_SECS - 1.0));
    assert!(note(&mut list, &[], &intents, 60.0 + SHOWN_SECS));
    assert!(list.is_empty());
}

/// A case: what is said, how the nodes change, the agents' health, an open incident.
type Case = (
    &'static str,
    Box<dyn Fn(&mut Vec<Node>)>,
    BTreeMap<String, Health>,
    bool,
);

#[test]
fn the_settle_period_starts_again_whenever_the_node_is_not_healthy() {
    let ok = BTreeMap::from([("node2".to_owned(), Health::Ok)]);
    let none = BTreeSet::new();
    let cases: Vec<Case> = vec![
        ("healthy", Box::new(|_| {}), ok.clone(), false),
        (
            "node2 is drained",
            Box::new(|n: &mut Vec<Node>| n[1].drained = true),
            ok.clone(),
            false,
        ),
        (
            "node2 is offline",
            Box::new(|n: &mut Vec<Node>| n[1].offline = true),
            ok.clone(),
            false,
        ),
        (
            "node2's health is not known",
            Box::new(|_| {}),
            BTreeMap::from([("node2".to_owned(), Health::Unknown)]),
            false,
        ),
        (
            "node2's health is not known",
            Box::new(|_| {}),
            BTreeMap::new(),
            false,
        ),
        (
            "node2 asks for a repair",
            Box::new(|_| {}),
            BTreeMap::from([("node2".to_owned(), Health::Failing)]),
            false,
        ),
        (
            "node2 has an open incident",
            Box::new(|_| {}),
            ok.clone(),
            true,
        ),
        (
            "the node left the cluster",
            Box::new(|n: &mut Vec<Node>| {
                n.remove(1);
            }),
            ok,
            false,
        ),
    ];
    for (said, change, health, busy) in cases {
        let mut nodes = nodes();
        change(&mut nodes);
        let busy: BTreeSet<String> = if busy {
            BTreeSet::from(["uuid-node2".to_owned()])
        } else {
            none.clone()
        };
        let mut list = vec![homecoming(Some(10.0))];
        watch(&mut list, &nodes, &health, &busy, 500.0);
        if said == "healthy" {
            assert_eq!(list[0].healthy_since_s, Some(10.0), "kept");
            assert_eq!(list[0].not_ready, None);
            let mut fresh = vec![homecoming(None)];
            assert!(watch(&mut fresh, &nodes, &health, &busy, 500.0));
            assert_eq!(fresh[0].healthy_since_s, Some(500.0), "starts now");
            assert!(
                !watch(&mut fresh, &nodes, &health, &busy, 600.0),
                "no change"
            );
        } else {
            assert_eq!(list[0].healthy_since_s, None, "{said}");
            assert_eq!(list[0].not_ready.as_deref(), Some(said));
            let plan = plan(
                &list,
                &FailbackConfig::default(),
                &nodes,
                &away(),
                &BTreeMap::new(),
                0,
                10_000.0,
            );
            assert!(plan.moves.is_empty());
            assert!(
                plan.waiting.iter().all(|(_, _, why)| why == said),
                "{plan:?}"
            );
        }
    }
}

#[test]
fn moves_start_after_the_settle_period_within_max_moves_and_free_memory() {
    let nodes = nodes();
    let config = FailbackConfig {
        enabled: true,
        ..FailbackConfig::default()
    };
    let list = vec![homecoming(Some(1_000.0))];
    // Healthy for 5 min of 10.
    let early = plan(
        &list,
        &config,
        &nodes,
        &away(),
        &BTreeMap::new(),
        0,
        1_300.0,
    );
    assert!(early.moves.is_empty());
    assert_eq!(
        early.waiting[0],
        (
            "inst1".to_owned(),
            "node2".to_owned(),
            "node2 healthy for 5 min of 10 min (settle_secs)".to_owned()
        )
    );
    let due = plan(
        &list,
        &config,
        &nodes,
        &away(),
        &BTreeMap::new(),
        0,
        1_600.0,
    );
    // One move per node at a time: inst2 waits for inst1's.
    assert_eq!(due.moves.len(), 1, "{due:?}");
    assert_eq!(due.waiting[0].2, "node2: waits for the move home of inst1");
    let first = &due.moves[0];
    assert_eq!(first.job.instance, "inst1");
    assert_eq!(first.job.from.primary, "node3");
    assert_eq!(first.job.to.primary, "node2");
    assert_eq!(
        first.job.ops,
        [HbalOp::Migrate {
            target: Some("node2".into())
        }]
    );
    assert_eq!(first.memory, Some(1024));
    assert!(
        first
            .reason
            .starts_with("failback: inst1 node3 => node2 (migrate to node2; moved off node2"),
        "{}",
        first.reason
    );
    // Two in flight: none more.
    let none = plan(
        &list,
        &config,
        &nodes,
        &away(),
        &BTreeMap::new(),
        2,
        1_600.0,
    );
    assert!(none.moves.is_empty());
    assert!(none.waiting[0].2.contains("max_moves = 2"), "{none:?}");
    // 1000 MiB free on node2: neither fits.
    let mut tight = nodes.clone();
    tight[1].memory_free = Some(1000);
    let short = plan(
        &list,
        &config,
        &tight,
        &away(),
        &BTreeMap::new(),
        0,
        1_600.0,
    );
    assert!(short.moves.is_empty());
    assert_eq!(
        short.waiting[0].2,
        "inst1 needs 1024 MiB, node2 has 1000 MiB free"
    );
    // Unknown free memory waits.
    tight[1].memory_free = None;
    let unknown = plan(
        &list,
        &config,
        &tight,
        &away(),
        &BTreeMap::new(),
        0,
        1_600.0,
    );
    assert!(unknown.moves.is_empty());
    assert_eq!(unknown.waiting[0].2, "node2's free memory is not known");
    // A node held by another holder: waits, named.
    let blocked = BTreeMap::from([("node3".to_owned(), "held by incident x".to_owned())]);
    let held = plan(&list, &config, &nodes, &away(), &blocked, 0, 1_600.0);
    assert!(held.moves.is_empty());
    assert_eq!(held.waiting[0].2, "node3: held by incident x");
}

#[test]
fn priority_orders_the_moves_home_and_templates_choose_the_operation() {
    let nodes = nodes();
    let config = FailbackConfig {
        max_moves: 1,
        ..FailbackConfig::default()
    };
    let list = vec![homecoming(Some(0.0))];
    let mut instances = away();
    instances[1].tags = vec!["nodecare:priority:9".into()];
    let out = plan(
        &list,
        &config,
        &nodes,
        &instances,
        &BTreeMap::new(),
        0,
        1_000.0,
    );
    assert_eq!(out.moves.len(), 1);
    assert_eq!(out.moves[0].job.instance, "inst2");
    assert!(out.moves[0].reason.ends_with(" [priority 9]"));
    // DRBD goes to its secondary (its home); a stopped instance fails over, needing no memory.
    instances[1].disk_template = DiskTemplate::Drbd;
    instances[1].secondary_nodes = vec!["node2".into()];
    instances[1].admin_state = "down".into();
    instances[1].status = "ADMIN_down".into();
    let mut tight = nodes.clone();
    tight[1].memory_free = Some(0);
    let out = plan(
        &list,
        &config,
        &tight,
        &instances,
        &BTreeMap::new(),
        0,
        1_000.0,
    );
    assert_eq!(out.moves[0].job.ops, [HbalOp::Failover { target: None }]);
    // Still a move for the gate (held while storage is not whole), never "nothing moves".
    assert_eq!(out.moves[0].memory, Some(1024));
    assert_eq!(out.moves[0].job.to.secondary.as_deref(), Some("node3"));
    // Up but not running: waits (harep's business).
    instances[1].admin_state = "up".into();
    instances[1].status = "ERROR_down".into();
    let out = plan(
        &list,
        &config,
        &nodes,
        &instances,
        &BTreeMap::new(),
        0,
        1_000.0,
    );
    assert_eq!(out.moves[0].job.instance, "inst1");
    assert!(out.waiting.iter().any(|(i, _, why)| i == "inst2"
        && why == "inst2 is ERROR_down (only running or stopped instances go back)"));
}

#[test]
fn settle_reads_the_cluster_and_gives_up_with_why() {
    let nodes = nodes();
    let config = FailbackConfig::default();
    let mut list = vec![homecoming(Some(0.0))];
    let mut instances = away();
    instances[0].primary_node = "node2".into();
    instances[1].disk_template = DiskTemplate::Drbd;
    instances[1].secondary_nodes = vec!["node1".into()];
    let settled = settle(&mut list, &nodes, &instances, &config, false, 10.0);
    assert_eq!(settled.len(), 2);
    assert_eq!(settled[0].2, HomeState::Back);
    assert_eq!(
        settled[1].2,
        HomeState::GivenUp {
            why: "its DRBD secondary is node1, not node2 (going home would copy its disks)".into()
        }
    );
    assert_eq!(list[0].ended_s, Some(10.0));
    // Attempts run out only once nothing is in flight; deleted instances are given up.
    let mut list = vec![homecoming(Some(0.0))];
    list[0].instances[0].attempts = 2;
    let instances = vec![instance("inst1", "node3", 1024)];
    let settled = settle(&mut list, &nodes, &instances, &config, true, 10.0);
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].1, "inst2");
    assert!(list[0].ended_s.is_none());
    let settled = settle(&mut list, &nodes, &instances, &config, false, 11.0);
    assert_eq!(
        settled[0].2,
        HomeState::GivenUp {
            why: "2 move(s) home did not bring it back (max_attempts)".into()
        }
    );
    assert_eq!(list[0].ended_s, Some(11.0));
    // Waited too long.
    let mut list = vec![homecoming(None)];
    let settled = settle(
        &mut list,
        &nodes,
        &away(),
        &config,
        false,
        100.0 + KEEP_SECS,
    );
    assert_eq!(settled.len(), 2);
    assert!(matches!(&settled[0].2, HomeState::GivenUp { why } if why.contains("7 days")));
}

#[test]
fn config_validation() {
    assert!(FailbackConfig::default().validate().is_ok());
    assert!(!FailbackConfig::default().enabled);
    for bad in [
        FailbackConfig {
            settle_secs: -1.0,
            ..FailbackConfig::default()
        },
        FailbackConfig {
            max_moves: 0,
            ..FailbackConfig::default()
        },
        FailbackConfig {
            max_attempts: 0,
            ..FailbackConfig::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

proptest! {
    /// Whatever the cluster, a plan never moves more than `max_moves` minus those in flight,
    /// never before the settle period, never an instance not waiting, never onto a node that is
    /// not its home, never more memory onto a home than it has free, and never two moves
    /// touching one node.
    #[test]
    fn a_plan_keeps_its_promises(
        since in proptest::option::of(0.0f64..2_000.0),
        now in 0.0f64..3_000.0,
        in_flight in 0usize..4,
        max_moves in 1usize..4,
        free in proptest::option::of(0u64..4096),
        memories in proptest::collection::vec(proptest::option::of(0u64..2048), 2),
        done in any::<bool>(),
    ) {
        let mut nodes = nodes();
        nodes[1].memory_free = free;
        let config = FailbackConfig { max_moves, ..FailbackConfig::default() };
        let mut list = vec![homecoming(since)];
        if done {
            list[0].instances[0].state = HomeState::Back;
        }
        let mut instances = away();
        for (i, m) in instances.iter_mut().zip(&memories) {
            i.memory = *m;
        }
        let out = plan(&list, &config, &nodes, &instances, &BTreeMap::new(), in_flight, now);
        prop_assert!(out.moves.len() <= max_moves.saturating_sub(in_flight));
        if !out.moves.is_empty() {
            prop_assert!(since.is_some_and(|s| now - s >= config.settle_secs));
        }
        let total: u64 = out.moves.iter().filter_map(|m| m.memory).sum();
        if !out.moves.is_empty() {
            prop_assert!(free.is_some_and(|f| total <= f));
        }
        // A move is never "nothing moves" for the gate.
        prop_assert!(out.moves.iter().all(|m| m.memory != Some(0)));
        let mut touched = BTreeSet::new();
        for m in &out.moves {
            for node in m.job.nodes() {
                prop_assert!(touched.insert(node), "two moves touch one node: {:?}", out.moves);
            }
        }
        for m in &out.moves {
            prop_assert_eq!(&m.job.to.primary, "node2");
            prop_assert!(!(done && m.job.instance == "inst1"));
        }
        // Every waiting instance is either moved or said to wait.
        let waiting = list[0].waiting().count();
        prop_assert_eq!(out.moves.len() + out.waiting.len(), waiting);
    }
}
