//! Table and property tests of the campaign state machine.

use super::*;
use nodecare_protocol::maintenance::StepTimeouts;
use proptest::prelude::*;

const T0: u64 = 1_000_000;

/// Two nodes `a`, `b` in the group, `c` outside; `i1` (DRBD a→c), `i2` (shared on b),
/// `i3` (DRBD c→a: a is its secondary).
fn world() -> World {
    let mut w = World {
        now_ms: T0,
        ..World::default()
    };
    for n in ["a", "b", "c"] {
        w.nodes.insert(n.into(), NodeNow::default());
        w.agents.insert(
            n.into(),
            AgentNow {
                boot_id: Some(format!("{n}-boot-1")),
                reboot_required: Some(n != "b"),
                ok: true,
                asks: None,
                collected_at_ms: T0,
            },
        );
    }
    w.instances.insert(
        "i1".into(),
        InstanceNow {
            primary: "a".into(),
            secondaries: vec!["c".into()],
            running: true,
            mirrored: true,
            memory: Some(512),
            local: false,
        },
    );
    w.instances.insert(
        "i2".into(),
        InstanceNow {
            primary: "b".into(),
            secondaries: vec![],
            running: true,
            mirrored: false,
            memory: Some(256),
            local: false,
        },
    );
    w.instances.insert(
        "i3".into(),
        InstanceNow {
            primary: "c".into(),
            secondaries: vec!["a".into()],
            running: true,
            mirrored: true,
            memory: Some(128),
            local: false,
        },
    );
    w
}

fn moves() -> BTreeMap<String, Vec<PlannedMove>> {
    BTreeMap::from([
        (
            "a".to_owned(),
            vec![PlannedMove {
                instance: "i1".into(),
                target: Some("c".into()),
                new_secondary: None,
            }],
        ),
        (
            "b".to_owned(),
            vec![PlannedMove {
                instance: "i2".into(),
                target: Some("c".into()),
                new_secondary: None,
            }],
        ),
    ])
}

fn request() -> CampaignRequest {
    CampaignRequest::new("reboot")
}

fn started(request: CampaignRequest, w: &World) -> Record {
    let mut r = Record::new(Uuid::from_u128(7), request, "alice", T0);
    r.set_plan(
        vec![vec!["a".into(), "b".into()], vec!["c".into()]],
        vec![],
        w,
    );
    assert!(r.needs_group());
    r.start_group(moves(), w);
    r
}

fn step_of(r: &Record, node: &str) -> NodeStep {
    r.node(node).map(|n| n.step).unwrap()
}

/// Plays Ganeti and the agents: every planned or submitted operation succeeds and the world
/// changes as it says.
fn execute_all(r: &mut Record, w: &mut World) {
    // Nodes rebooted by a hook have finished booting by now.
    for agent in w.agents.values_mut() {
        agent.ok = true;
    }
    let keys: Vec<String> = r.in_flight().map(|op| op.key.clone()).collect();
    for key in keys {
        let op = r.ops_mut().get_mut(&key).unwrap();
        apply(op, w);
        op.state = OpState::Succeeded;
        op.finished_ms = Some(w.now_ms);
    }
}

/// Like [`execute_all`], but only the operations of each node's current step (those planned
/// ahead for a later step wait), so that every step shows.
fn execute_current(r: &mut Record, w: &mut World) {
    for agent in w.agents.values_mut() {
        agent.ok = true;
    }
    let keys: Vec<String> = r
        .in_flight()
        .filter(|op| r.node(&op.node).map(|n| n.step) == Some(op.step))
        .map(|op| op.key.clone())
        .collect();
    for key in keys {
        let op = r.ops_mut().get_mut(&key).unwrap();
        apply(op, w);
        op.state = OpState::Succeeded;
        op.finished_ms = Some(w.now_ms);
    }
}

fn apply(op: &CampaignOp, w: &mut World) {
    match &op.kind {
        OpKind::Drain => w.nodes.get_mut(&op.node).unwrap().drained = true,
        OpKind::Undrain => w.nodes.get_mut(&op.node).unwrap().drained = false,
        OpKind::Migrate { instance, target } => {
            let i = w.instances.get_mut(instance).unwrap();
            let to = match target {
                Some(t) => t.clone(),
                None => i.secondaries[0].clone(),
            };
            if i.mirrored {
                let old = std::mem::replace(&mut i.primary, to.clone());
                i.secondaries = vec![old];
            } else {
                i.primary = to;
            }
        }
        OpKind::ReplaceSecondary {
            instance,
            secondary,
        } => {
            w.instances.get_mut(instance).unwrap().secondaries = vec![secondary.clone()];
        }
        OpKind::Hook { .. } => {
            // The node reboots.
            let agent = w.agents.get_mut(&op.node).unwrap();
            agent.boot_id = Some(format!("{}-boot-2", op.node));
            agent.collected_at_ms = w.now_ms + 1;
            agent.ok = false;
        }
        OpKind::Tag { .. } => {}
    }
}

/// Rounds until nothing changes (at most `max`), executing every operation in between.
fn run(r: &mut Record, w: &mut World, max: usize) {
    for _ in 0..max {
        w.now_ms += 1000;
        r.advance(w);
        execute_all(r, w);
        if r.current().is_none() {
            break;
        }
    }
}

#[test]
fn a_group_goes_through_every_step_in_order() {
    let mut w = world();
    let mut r = started(request(), &w);
    assert_eq!(r.node("a").unwrap().original_primaries, vec!["i1"]);
    assert_eq!(r.node("b").unwrap().original_primaries, vec!["i2"]);
    let mut seen: Vec<NodeStep> = vec![step_of(&r, "a")];
    for _ in 0..20 {
        w.now_ms += 1000;
        r.advance(&w);
        let step = step_of(&r, "a");
        if seen.last() != Some(&step) {
            seen.push(step);
        }
        execute_current(&mut r, &mut w);
        if r.current().is_none() {
            break;
        }
    }
    assert_eq!(
        seen,
        vec![
            NodeStep::Drain,
            NodeStep::MovePrimaries,
            NodeStep::Hook,
            NodeStep::WaitHealthy,
            NodeStep::Undrain,
            NodeStep::MigrateBack,
            NodeStep::Done
        ]
    );
    assert_eq!(step_of(&r, "b"), NodeStep::Done);
    // Back on their original primaries, undrained, rebooted.
    assert_eq!(w.instances["i1"].primary, "a");
    assert_eq!(w.instances["i2"].primary, "b");
    assert!(!w.nodes["a"].drained && !w.nodes["b"].drained);
    assert_eq!(
        r.node("a").unwrap().boot_id_before.as_deref(),
        Some("a-boot-1")
    );
    // The hook ran once per node.
    let hooks = r
        .ops
        .values()
        .filter(|op| matches!(op.kind, OpKind::Hook { .. }))
        .count();
    assert_eq!(hooks, 2);
    assert!(r.needs_group());
    assert_eq!(r.campaign.planned, vec![vec!["c".to_owned()]]);
}

#[test]
fn each_step_plans_exactly_its_operations() {
    let mut w = world();
    let mut r = started(request(), &w);
    let kinds = |r: &Record, keys: &[String]| -> Vec<String> {
        keys.iter()
            .map(|k| match &r.ops[k].kind {
                OpKind::Drain => format!("drain {}", r.ops[k].node),
                OpKind::Undrain => format!("undrain {}", r.ops[k].node),
                OpKind::Migrate { instance, target } => {
                    format!("migrate {instance} to {target:?}")
                }
                OpKind::ReplaceSecondary {
                    instance,
                    secondary,
                } => format!("secondary {instance} {secondary}"),
                OpKind::Hook { context, .. } => format!("hook {}", context.node),
                OpKind::Tag { tag } => format!("tag {tag}"),
            })
            .collect()
    };
    // The moves are planned with the drain (they need not wait for it), the migrations back
    // with the undrain (submitted to run after it).
    let expected: Vec<Vec<&str>> = vec![
        vec![
            "drain a",
            "migrate i1 to None",
            "drain b",
            "migrate i2 to Some(\"c\")",
        ],
        vec!["hook a", "hook b"],
        vec![],
        vec![
            "undrain a",
            "migrate i1 to None",
            "undrain b",
            "migrate i2 to Some(\"b\")",
        ],
        vec![],
    ];
    for want in expected {
        w.now_ms += 1000;
        let keys = r.advance(&w);
        assert_eq!(kinds(&r, &keys), want);
        // Nothing is planned twice while in flight.
        w.now_ms += 10;
        assert!(r.advance(&w).is_empty());
        execute_all(&mut r, &mut w);
    }
    assert!(r.current().is_none());
}

#[test]
fn a_hook_that_did_not_reboot_needs_no_new_boot_id_but_a_newer_verdict() {
    let mut w = world();
    let mut r = started(request(), &w);
    for _ in 0..3 {
        w.now_ms += 1000;
        r.advance(&w);
        let keys: Vec<String> = r.in_flight().map(|op| op.key.clone()).collect();
        for key in keys {
            let op = r.ops_mut().get_mut(&key).unwrap();
            if matches!(op.kind, OpKind::Hook { .. }) {
                op.no_reboot = true;
            } else {
                apply(op, &mut w);
            }
            op.state = OpState::Succeeded;
        }
    }
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy);
    assert_eq!(
        r.node("a").unwrap().waiting_for.as_deref(),
        Some("a verdict collected after the hook")
    );
    w.agents.get_mut("a").unwrap().collected_at_ms = w.now_ms + 5;
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::Undrain);
}

/// Drives a node to WaitHealthy with the hook run (rebooted), then checks each missing
/// condition holds it there.
#[test]
fn wait_healthy_needs_every_condition() {
    type Spoil = fn(&mut World);
    let cases: Vec<(&str, Spoil, &str)> = vec![
        (
            "same boot id",
            |w| w.agents.get_mut("a").unwrap().boot_id = Some("a-boot-1".into()),
            "a new boot id",
        ),
        (
            "no boot id",
            |w| w.agents.get_mut("a").unwrap().boot_id = None,
            "a new boot id",
        ),
        (
            "agent unreachable",
            |w| {
                w.agents.remove("a");
            },
            "a new boot id",
        ),
        (
            "verdict not ok",
            |w| w.agents.get_mut("a").unwrap().ok = false,
            "a fresh signed Ok verdict",
        ),
        (
            "offline",
            |w| w.nodes.get_mut("a").unwrap().offline = true,
            "Ganeti to see the node online",
        ),
        (
            "storage",
            |w| {
                w.storage.push((
                    BTreeSet::from(["a".to_owned(), "c".to_owned()]),
                    "i1: minor 0 SyncSource".into(),
                ));
            },
            "storage to be whole (i1: minor 0 SyncSource)",
        ),
    ];
    for (name, spoil, want) in cases {
        let mut w = world();
        let mut r = started(request(), &w);
        for _ in 0..3 {
            w.now_ms += 1000;
            r.advance(&w);
            execute_all(&mut r, &mut w);
        }
        assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy, "{name}");
        let mut spoiled = w.clone();
        spoil(&mut spoiled);
        spoiled.now_ms += 1000;
        r.advance(&spoiled);
        assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy, "{name}");
        assert_eq!(
            r.node("a").unwrap().waiting_for.as_deref(),
            Some(want),
            "{name}"
        );
        // Healed, it goes on.
        w.now_ms = spoiled.now_ms + 1000;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), NodeStep::Undrain, "{name}");
    }
}

#[test]
fn every_step_times_out_with_node_step_and_why() {
    let steps = [
        NodeStep::Drain,
        NodeStep::MovePrimaries,
        NodeStep::Hook,
        NodeStep::WaitHealthy,
        NodeStep::Undrain,
        NodeStep::MigrateBack,
    ];
    for (n, step) in steps.into_iter().enumerate() {
        let mut w = world();
        let mut r = started(request(), &w);
        // Reach `step` with everything succeeding.
        for _ in 0..n {
            w.now_ms += 1000;
            r.advance(&w);
            execute_current(&mut r, &mut w);
        }
        w.now_ms += 1000;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), step);
        // Now nothing happens any more: the operations hang, the node does not come back.
        if step == NodeStep::WaitHealthy {
            w.agents.get_mut("a").unwrap().ok = false;
        }
        let deadline = r.node("a").unwrap().step_deadline_ms.unwrap();
        assert_eq!(
            deadline - r.node("a").unwrap().step_started_ms.unwrap(),
            StepTimeouts::default().of_ms(step).unwrap()
        );
        w.now_ms = deadline;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), step, "{step} before its timeout");
        w.now_ms += 2000;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), NodeStep::Failed, "{step}");
        assert_eq!(r.state(), CampaignState::Failed);
        let failure = r.campaign.failure.clone().unwrap();
        assert_eq!(failure.node, "a");
        assert_eq!(failure.step, step);
        assert!(
            failure.why.contains("did not finish within"),
            "{}",
            failure.why
        );
        // Tagged like an incident.
        let tag = r
            .ops
            .values()
            .find(|op| op.node == "a" && op.step == NodeStep::Failed);
        assert_eq!(
            tag.map(|op| &op.kind),
            Some(&OpKind::Tag {
                tag: format!("maintd:repairfailed:{}", Uuid::from_u128(7))
            })
        );
        // Everything else is left as it is: no more operations.
        w.now_ms += 1000;
        assert!(r.advance(&w).is_empty());
        assert!(r.campaign.finished_ms.is_some());
    }
}

#[test]
fn the_master_is_not_drained() {
    let mut w = world();
    w.master = "a".into();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    let planned = r.advance(&w);
    assert!(!planned.iter().any(|k| k.contains("-a-drain")));
    assert!(planned.iter().any(|k| k.contains("-b-drain")));
    // a moved on to its migrations in the same round.
    assert!(planned.iter().any(|k| k.contains("-a-move-i1")));
    run(&mut r, &mut w, 20);
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
    assert!(!r.ops.keys().any(|k| k.contains("-a-undrain")));
}

#[test]
fn a_failed_operation_fails_the_node() {
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    let key = r.in_flight().find(|op| op.node == "b").unwrap().key.clone();
    let op = r.ops_mut().get_mut(&key).unwrap();
    op.state = OpState::Failed;
    op.error = Some("job 12 error: node locked".into());
    w.now_ms += 1000;
    r.advance(&w);
    let failure = r.campaign.failure.clone().unwrap();
    assert_eq!(
        (failure.node.as_str(), failure.step),
        ("b", NodeStep::Drain)
    );
    assert_eq!(failure.why, "drain: job 12 error: node locked");
}

/// Fails `key` as Ganeti would (a vanished or failed job).
fn fail_op(r: &mut Record, key: &str, why: &str) {
    let op = r.ops_mut().get_mut(key).unwrap();
    op.state = OpState::Failed;
    op.error = Some(why.into());
}

/// The keys of the failure tags planned for `node`.
fn tag_keys(r: &Record, node: &str) -> Vec<String> {
    r.ops
        .values()
        .filter(|op| op.node == node && matches!(op.kind, OpKind::Tag { .. }))
        .map(|op| op.key.clone())
        .collect()
}

#[test]
fn a_failure_tag_that_did_not_succeed_is_planned_again_after_the_campaign_failed() {
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    let drain = r.in_flight().find(|op| op.node == "b").unwrap().key.clone();
    fail_op(&mut r, &drain, "job 12 error: node locked");
    w.now_ms += 1000;
    let planned = r.advance(&w);
    assert_eq!(r.state(), CampaignState::Failed);
    assert_eq!(planned, vec!["tag-failed-b".to_owned()]);
    // The tag's job vanishes: b is left drained with no tag, which no operator looks for.
    fail_op(
        &mut r,
        "tag-failed-b",
        "job 16 vanished from Ganeti's queue",
    );
    w.now_ms += 1000;
    let owed = r.owes_failure_tags();
    let again = r.advance(&w);
    assert_eq!(again.len(), 1, "{again:?}");
    assert!(owed, "the failed campaign still owes b's tag");
    assert_ne!(again[0], "tag-failed-b", "a new ledger key");
    let op = &r.ops[&again[0]];
    assert_eq!(
        (op.node.as_str(), &op.kind, op.state),
        (
            "b",
            &OpKind::Tag {
                tag: failure_tag(r.id())
            },
            OpState::Planned
        )
    );
    // In flight: not planned twice.
    w.now_ms += 1000;
    assert!(r.advance(&w).is_empty());
    // Done: nothing owed any more.
    let key = again[0].clone();
    r.ops_mut().get_mut(&key).unwrap().state = OpState::Succeeded;
    assert!(!r.owes_failure_tags());
    w.now_ms += 1000;
    assert!(r.advance(&w).is_empty());
    assert_eq!(tag_keys(&r, "b").len(), 2);
}

#[test]
fn a_failure_tag_refused_every_time_is_given_up_and_named() {
    let mut w = world();
    let mut r = started(
        CampaignRequest {
            continue_on_failure: true,
            ..request()
        },
        &w,
    );
    w.now_ms += 1000;
    r.advance(&w);
    let drain = r.in_flight().find(|op| op.node == "b").unwrap().key.clone();
    fail_op(&mut r, &drain, "job 12 error: node locked");
    for _ in 0..20 {
        w.now_ms += 1000;
        r.advance(&w);
        let keys: Vec<String> = r
            .in_flight()
            .filter(|op| matches!(op.kind, OpKind::Tag { .. }))
            .map(|op| op.key.clone())
            .collect();
        for key in keys {
            fail_op(&mut r, &key, "job error: tag refused");
        }
    }
    assert_eq!(tag_keys(&r, "b").len(), FAILURE_TAG_ATTEMPTS);
    assert!(!r.owes_failure_tags());
    let named = r.node("b").unwrap().waiting_for.clone().unwrap_or_default();
    assert!(
        named.contains("failure tag") && named.contains("tag refused"),
        "{named}"
    );
}

#[test]
fn continue_on_failure_leaves_the_node_drained_and_goes_on() {
    let mut w = world();
    let mut r = started(
        CampaignRequest {
            continue_on_failure: true,
            ..request()
        },
        &w,
    );
    for _ in 0..3 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    // b never comes back.
    w.agents.get_mut("b").unwrap().boot_id = Some("b-boot-1".into());
    w.now_ms += StepTimeouts::default().healthy_s * 1000 + 5000;
    let planned = r.advance(&w);
    assert!(planned.iter().any(|k| k.starts_with("tag-failed-b")));
    assert_eq!(step_of(&r, "b"), NodeStep::Failed);
    assert_eq!(r.state(), CampaignState::Running);
    assert_eq!(r.campaign.failures.len(), 1);
    run(&mut r, &mut w, 10);
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
    assert!(w.nodes["b"].drained, "the failed node stays drained");
    assert!(r.needs_group());
    assert_eq!(r.holds(), vec![]);
}

#[test]
fn pause_freezes_steps_and_timeouts_resume_restarts_them() {
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    r.pause(w.now_ms).unwrap();
    assert_eq!(r.state(), CampaignState::Paused);
    // The drain in flight finishes; nothing new starts, however long the pause.
    execute_all(&mut r, &mut w);
    w.now_ms += 10 * StepTimeouts::default().move_s * 1000;
    assert!(r.advance(&w).is_empty());
    assert_eq!(step_of(&r, "a"), NodeStep::Drain);
    assert!(!r.needs_group());
    r.resume(w.now_ms).unwrap();
    assert_eq!(r.state(), CampaignState::Running);
    assert_eq!(
        r.node("a").unwrap().step_deadline_ms,
        Some(w.now_ms + StepTimeouts::default().drain_s * 1000)
    );
    run(&mut r, &mut w, 20);
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
}

#[test]
fn abort_before_the_hook_sends_nodes_back_and_skips_them() {
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w); // drains and migrations planned
    r.abort(w.now_ms).unwrap();
    assert_eq!(r.state(), CampaignState::Aborting);
    assert!(r.campaign.planned.is_empty());
    // The jobs in flight finish first.
    w.now_ms += 1000;
    assert!(r.advance(&w).is_empty());
    assert_eq!(step_of(&r, "a"), NodeStep::Drain);
    execute_all(&mut r, &mut w);
    run(&mut r, &mut w, 10);
    assert_eq!(r.state(), CampaignState::Aborted);
    assert_eq!(step_of(&r, "a"), NodeStep::Skipped);
    assert_eq!(step_of(&r, "b"), NodeStep::Skipped);
    assert!(
        !r.ops
            .values()
            .any(|op| matches!(op.kind, OpKind::Hook { .. }))
    );
    assert_eq!(w.instances["i1"].primary, "a");
    assert_eq!(w.instances["i2"].primary, "b");
    assert!(!w.nodes["a"].drained && !w.nodes["b"].drained);
}

/// A node that comes back from its hook asking for a repair is node repair's: its step fails
/// at once, naming the verdict, and the campaign holds it no longer (waiting for `Ok` would
/// hold it from node repair until `healthy_s`). A report of the boot before does not count.
#[test]
fn a_node_that_comes_back_asking_for_a_repair_fails_at_once_and_is_released() {
    for (asks, aborted) in [
        (nodecare_protocol::DiagnoseStatus::Evacuate, false),
        (nodecare_protocol::DiagnoseStatus::LiveRepair, false),
        (nodecare_protocol::DiagnoseStatus::EvacuateFailover, true),
    ] {
        let mut w = world();
        let mut r = started(request(), &w);
        for _ in 0..3 {
            w.now_ms += 1000;
            r.advance(&w);
            execute_all(&mut r, &mut w);
        }
        assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy);
        if aborted {
            r.abort(w.now_ms).unwrap();
        }
        let agent = w.agents.get_mut("a").unwrap();
        let new_boot = agent.boot_id.clone();
        // The boot before still asking: no new boot id yet, the node waits.
        agent.boot_id = Some("a-boot-1".into());
        agent.ok = false;
        agent.asks = Some(asks);
        w.now_ms += 1000;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy, "{asks:?}");
        // This boot asks: the node fails now, and is held no more.
        w.agents.get_mut("a").unwrap().boot_id = new_boot;
        w.now_ms += 1000;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), NodeStep::Failed, "{asks:?}");
        let failure = r.node("a").unwrap().failure.clone().unwrap();
        assert_eq!(failure.step, NodeStep::WaitHealthy);
        assert!(
            failure.why.contains(asks.as_str()) && failure.why.contains("node repair"),
            "{}",
            failure.why
        );
        execute_all(&mut r, &mut w);
        assert!(
            !r.holds().iter().any(|(node, _)| node == "a"),
            "{asks:?}: {:?}",
            r.holds()
        );
        assert!(r.state().is_final(), "{asks:?}: {:?}", r.state());
    }
}

#[test]
fn abort_after_the_hook_lets_the_node_come_back() {
    let mut w = world();
    let mut r = started(request(), &w);
    for _ in 0..3 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy);
    r.abort(w.now_ms).unwrap();
    run(&mut r, &mut w, 10);
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
    assert_eq!(r.state(), CampaignState::Aborted);
    assert_eq!(w.instances["i1"].primary, "a");
}

#[test]
fn abort_between_groups_ends_at_once_and_controls_check_the_state() {
    let w = world();
    let mut r = Record::new(Uuid::from_u128(1), request(), "bob", T0);
    r.set_plan(vec![vec!["a".into()]], vec![], &w);
    r.abort(T0 + 1).unwrap();
    assert_eq!(r.state(), CampaignState::Aborted);
    assert_eq!(r.campaign.finished_ms, Some(T0 + 1));
    for (what, result) in [
        ("pause", r.pause(T0 + 2)),
        ("resume", r.resume(T0 + 2)),
        ("abort", r.abort(T0 + 2)),
    ] {
        let error = result.unwrap_err();
        assert_eq!(error.state, CampaignState::Aborted, "{what}");
    }
    let mut r = Record::new(Uuid::from_u128(1), request(), "bob", T0);
    r.pause(T0).unwrap();
    r.abort(T0).unwrap();
    assert_eq!(r.state(), CampaignState::Aborted);
}

#[test]
fn pause_while_aborting_resumes_aborting() {
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    r.abort(w.now_ms).unwrap();
    r.pause(w.now_ms).unwrap();
    r.resume(w.now_ms).unwrap();
    assert_eq!(r.state(), CampaignState::Aborting);
}

#[test]
fn replanning_leaves_out_nodes_already_taken_and_not_required() {
    let mut w = world();
    let mut r = started(
        CampaignRequest {
            only_if_required: true,
            ..request()
        },
        &w,
    );
    run(&mut r, &mut w, 20);
    let left = r
        .set_plan(
            vec![vec!["a".into(), "c".into()], vec!["b".into()]],
            vec![],
            &w,
        )
        .to_vec();
    assert_eq!(left, vec![vec!["c".to_owned()]]);
    // b does not require a reboot: left out and said so.
    let mut r2 = Record::new(
        Uuid::from_u128(2),
        CampaignRequest {
            only_if_required: true,
            ..request()
        },
        "x",
        T0,
    );
    w.agents.remove("c");
    let left = r2.set_plan(vec![vec!["a".into(), "b".into(), "c".into()]], vec![], &w);
    assert_eq!(left, &[vec!["a".to_owned()]]);
    assert!(r2.campaign.warnings[0].contains("b, c"));
}

#[test]
fn groups_refused_for_size_are_cut_in_halves_and_stay_cut() {
    let w = world();
    let mut r = Record::new(Uuid::from_u128(4), request(), "x", T0);
    let plan = || {
        vec![
            vec!["a".to_owned(), "b".to_owned(), "c".to_owned()],
            vec!["d".to_owned()],
        ]
    };
    r.set_plan(plan(), vec![], &w);
    assert!(r.shrink_groups());
    assert_eq!(
        r.campaign.planned,
        vec![vec!["a", "b"], vec!["c"], vec!["d"]]
    );
    // Re-planning keeps the cut.
    r.set_plan(plan(), vec![], &w);
    assert_eq!(r.campaign.planned.len(), 3);
    assert!(r.shrink_groups());
    r.set_plan(plan(), vec![], &w);
    assert_eq!(
        r.campaign.planned,
        vec![vec!["a"], vec!["b"], vec!["c"], vec!["d"]]
    );
    assert!(!r.shrink_groups());
}

#[test]
fn a_capacity_refusal_while_instances_migrate_back_waits_instead_of_cutting_groups() {
    let w = world();
    let mut r = started(request(), &w);
    // The first group's node "a" is undrained; its primaries migrate back to it.
    for node in r
        .campaign
        .groups
        .iter_mut()
        .flat_map(|g| g.nodes.iter_mut())
    {
        node.step = NodeStep::MigrateBack;
        node.original_primaries = vec![format!("{}-inst", node.node)];
    }
    r.set_plan(vec![vec!["c".into(), "d".into()]], vec![], &w);
    let planned = r.campaign.planned.clone();
    assert!(!r.pending_back().is_empty());
    // Capacity: transient while they move; the group stays whole.
    assert!(!r.shrinks_after_refusal(true));
    assert_eq!(r.campaign.planned, planned);
    assert_eq!(r.max_group, None);
    // A cap refusal is not transient: halves.
    assert!(r.shrinks_after_refusal(false));
    assert_eq!(r.campaign.planned, vec![vec!["c"], vec!["d"]]);
    // Once every instance is back, a capacity refusal cuts too.
    let mut r = started(request(), &w);
    r.set_plan(vec![vec!["c".into(), "d".into()]], vec![], &w);
    assert!(r.pending_back().is_empty());
    assert!(r.shrinks_after_refusal(true));
}

#[test]
fn completes_when_nothing_is_left() {
    let mut w = world();
    let mut r = started(request(), &w);
    run(&mut r, &mut w, 20);
    r.set_plan(vec![vec!["a".into(), "b".into()]], vec![], &w);
    assert!(r.complete_if_done(w.now_ms));
    assert_eq!(r.state(), CampaignState::Completed);
    assert_eq!(r.campaign.nodes_progress(), (2, 2));
}

#[test]
fn holds_the_nodes_of_the_group_in_flight() {
    let w = world();
    let r = started(request(), &w);
    let holder = Holder::Campaign {
        id: Uuid::from_u128(7),
    };
    assert_eq!(
        r.holds(),
        vec![("a".to_owned(), holder.clone()), ("b".to_owned(), holder)]
    );
}

#[test]
fn full_evacuation_replaces_secondaries_and_brings_them_back() {
    let mut w = world();
    let mut r = Record::new(
        Uuid::from_u128(3),
        CampaignRequest {
            full_evacuation: true,
            ..request()
        },
        "x",
        T0,
    );
    w.nodes.insert("d".into(), NodeNow::default());
    r.set_plan(vec![vec!["a".into()]], vec![], &w);
    r.start_group(
        BTreeMap::from([(
            "a".to_owned(),
            vec![
                PlannedMove {
                    instance: "i1".into(),
                    target: Some("c".into()),
                    new_secondary: Some("d".into()),
                },
                PlannedMove {
                    instance: "i3".into(),
                    target: None,
                    new_secondary: Some("d".into()),
                },
            ],
        )]),
        &w,
    );
    w.now_ms += 1000;
    r.advance(&w);
    execute_all(&mut r, &mut w);
    // i1 migrates first (a is then its secondary), then its secondary goes to d; i3's too.
    for _ in 0..2 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    assert_eq!(step_of(&r, "a"), NodeStep::Hook);
    assert_eq!(w.instances["i1"].primary, "c");
    assert_eq!(w.instances["i1"].secondaries, vec!["d"]);
    assert_eq!(w.instances["i3"].secondaries, vec!["d"]);
    run(&mut r, &mut w, 20);
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
    // i1 back: its secondary replaced by a, then migrated.
    assert_eq!(w.instances["i1"].primary, "a");
}

#[test]
fn hook_waits_for_a_boot_id_and_a_reboot_during_the_hook_counts() {
    let mut w = world();
    let mut r = started(request(), &w);
    for _ in 0..1 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    w.agents.get_mut("a").unwrap().boot_id = None;
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::Hook);
    assert!(!r.ops.contains_key("g0-a-hook"));
    assert_eq!(
        r.node("a").unwrap().waiting_for.as_deref(),
        Some("a fresh report of its agent with its boot id")
    );
    w.agents.get_mut("a").unwrap().boot_id = Some("a-boot-1".into());
    w.now_ms += 1000;
    r.advance(&w);
    assert!(r.ops.contains_key("g0-a-hook"));
    // The agent went down with the node: the hook's record is lost (failed to read), but the
    // node is back with a new boot id.
    let op = r.ops_mut().get_mut("g0-a-hook").unwrap();
    op.state = OpState::Failed;
    op.error = Some("interrupted".into());
    w.agents.get_mut("a").unwrap().boot_id = Some("a-boot-2".into());
    w.agents.get_mut("a").unwrap().ok = false;
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::WaitHealthy);
}

#[test]
fn record_round_trips_through_json_and_its_operations_through_the_ledger() {
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    let text = serde_json::to_string(&r).unwrap();
    let mut back = serde_json::from_str::<Record>(&text).unwrap();
    // The record is stored without its operations: they are ledger entries.
    assert!(back.ops.is_empty());
    let keys: Vec<String> = r.ops.keys().cloned().collect();
    assert!(!keys.is_empty());
    let mut entries = r.entries(&keys);
    // Entries of another holder are not the campaign's.
    let mut other = entries[0].clone();
    other.holder = Holder::Campaign {
        id: Uuid::from_u128(99),
    };
    other.key = "someone-else".into();
    entries.push(other);
    back.set_ops(&entries);
    assert_eq!(back, r);
    // A drain holds its node rebooting; the reason trail's text says what it does.
    let drain = entries.iter().find(|e| e.key == "g0-a-drain").unwrap();
    assert_eq!(
        drain.holds,
        [crate::ledger::Hold::Rebooting { node: "a".into() }]
    );
    assert!(
        drain
            .description
            .ends_with("group 0 step drain: draining a"),
        "{}",
        drain.description
    );
}

proptest! {
    /// Whatever the operations' outcomes and the order of operator commands, the state machine
    /// never plans an operation twice, never moves a node backwards (except an abort sending it
    /// back to undrain), and a failed or finished campaign plans nothing but failure tags.
    #[test]
    fn random_outcomes_and_commands_keep_the_invariants(
        script in proptest::collection::vec((0u8..6, 0u8..4, 0u64..4000), 1..60)
    ) {
        let mut w = world();
        let mut r = started(CampaignRequest { continue_on_failure: true, ..request() }, &w);
        let mut ever: BTreeSet<String> = BTreeSet::new();
        for (outcome, command, dt) in script {
            w.now_ms += dt * 1000;
            match command {
                1 => { r.pause(w.now_ms).ok(); }
                2 => { r.resume(w.now_ms).ok(); }
                3 if outcome == 0 => { r.abort(w.now_ms).ok(); }
                _ => {}
            }
            let before: BTreeMap<String, NodeStep> = r
                .campaign.groups.last().unwrap().nodes.iter()
                .map(|n| (n.node.clone(), n.step)).collect();
            let final_before = r.state().is_final();
            let planned = r.advance(&w);
            for key in &planned {
                prop_assert!(ever.insert(key.clone()), "{key} planned twice");
                if final_before {
                    prop_assert!(key.starts_with("tag-failed-"));
                }
            }
            for n in &r.campaign.groups.last().unwrap().nodes {
                let was = before[&n.node];
                prop_assert!(
                    n.step >= was || (n.step == NodeStep::Undrain && r.aborted_nodes.contains(&n.node)),
                    "{} went from {was} to {}", n.node, n.step
                );
            }
            // Operations finish one way or the other.
            let keys: Vec<String> = r.in_flight().map(|op| op.key.clone()).collect();
            for key in keys {
                let op = r.ops_mut().get_mut(&key).unwrap();
                match outcome {
                    0 => {}
                    1 => { op.state = OpState::Failed; op.error = Some("boom".into()); }
                    _ => { apply(op, &mut w); op.state = OpState::Succeeded; }
                }
            }
        }
    }
}

/// Issue 25 (3): a rebooted node's failure domain stays in grace for the configured grace
/// after the node leaves `wait-healthy`.
#[test]
fn a_rebooted_node_stays_in_grace_after_it_leaves_wait_healthy() {
    use crate::gate::{self, NodeFacts, View};
    let mut w = world();
    let mut r = started(request(), &w);
    let mut left = None;
    for _ in 0..20 {
        w.now_ms += 1000;
        let before = step_of(&r, "a");
        r.advance(&w);
        let rebooting = |step| matches!(step, NodeStep::Hook | NodeStep::WaitHealthy);
        if rebooting(before) && !rebooting(step_of(&r, "a")) {
            left = Some(w.now_ms);
            break;
        }
        let keys: Vec<String> = r.in_flight().map(|op| op.key.clone()).collect();
        for key in keys {
            let op = r.ops_mut().get_mut(&key).unwrap();
            apply(op, &mut w);
            op.state = OpState::Succeeded;
        }
        for agent in w.agents.values_mut() {
            agent.ok = true;
        }
    }
    let left = left.expect("a left wait-healthy");
    // As the round reads it back from the store (a JSON document).
    let r: Record = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    let view_at = |now_ms: u64| View {
        nodes: ["a", "a2", "c"]
            .iter()
            .map(|n| {
                let facts = NodeFacts {
                    name: (*n).to_owned(),
                    group: "g".into(),
                    domain: if n.starts_with('a') {
                        "rack:a"
                    } else {
                        "rack:c"
                    }
                    .into(),
                    vm_capable: true,
                    drained: false,
                    offline: false,
                    master: false,
                    memory_free: None,
                    primary_memory: None,
                    primaries: 0,
                };
                ((*n).to_owned(), facts)
            })
            .collect(),
        now_ms,
        ..View::default()
    };
    let grace_ms = 600_000;
    let now = left + 5_000;
    let planned_at = |now: u64| -> Vec<gate::Planned> {
        r.planned_disruptions(now)
            .into_iter()
            .map(|(node, from_ms)| gate::Planned {
                node,
                from_ms,
                holder: "maintenance campaign c".to_owned(),
            })
            .collect()
    };
    // "a" shares a DRBD instance with "c" (another domain); "a2" shares nothing with it.
    let peers = BTreeMap::from([
        ("a".to_owned(), BTreeSet::from(["c".to_owned()])),
        ("c".to_owned(), BTreeSet::from(["a".to_owned()])),
    ]);
    let planned = planned_at(now);
    let graced = gate::grace(&view_at(now), &planned, &peers, grace_ms);
    let until = |node: &str| graced.get(node).map(|g| g.until_ms);
    assert_eq!(until("a"), Some(left + grace_ms), "{planned:?}");
    assert_eq!(until("c"), Some(left + grace_ms), "its DRBD peer");
    assert_eq!(until("a2"), None, "not the rest of its domain");
    // The grace ends.
    let later = left + grace_ms + 1;
    let planned = planned_at(later);
    assert!(gate::grace(&view_at(later), &planned, &peers, grace_ms).is_empty());
    // A failed campaign's grace ends with its failure.
    let mut failed = r.clone();
    failed.campaign.state = CampaignState::Failed;
    assert!(failed.planned_disruptions(now).is_empty());
}

/// Issue 25 (2): a node whose original primaries migrate back is held by its campaign until
/// they are back: an incident may not drain it meanwhile, yet it counts against no budget.
#[test]
fn a_node_migrating_back_is_held_until_its_primaries_are_back() {
    use crate::gate::{self, Caps, Duty, InForce, NodeFacts, Policy, Proposal, View};
    let mut w = world();
    let mut r = started(request(), &w);
    for _ in 0..20 {
        w.now_ms += 1000;
        r.advance(&w);
        if step_of(&r, "a") == NodeStep::MigrateBack {
            break;
        }
        let keys: Vec<String> = r
            .in_flight()
            .filter(|op| op.step != NodeStep::MigrateBack)
            .map(|op| op.key.clone())
            .collect();
        for key in keys {
            let op = r.ops_mut().get_mut(&key).unwrap();
            apply(op, &mut w);
            op.state = OpState::Succeeded;
        }
        for agent in w.agents.values_mut() {
            agent.ok = true;
        }
    }
    assert_eq!(step_of(&r, "a"), NodeStep::MigrateBack);
    let campaign = Holder::Campaign { id: r.id() };
    assert!(
        r.touched().contains(&("a".to_owned(), campaign.clone())),
        "{:?}",
        r.touched()
    );
    // What the round takes as the campaigns' holds is the records' own, in one call; its drain
    // and undrain of `a` are flags it left.
    let held = crate::campaign::held(std::slice::from_ref(&r));
    assert_eq!(held.disrupted, r.holds());
    assert_eq!(held.touched, r.touched());
    assert_eq!(held.left, r.flag_changes());
    assert!(
        held.left.iter().any(|f| f.node == "a" && f.set),
        "{:?}",
        held.left
    );
    // The gate as the round builds it: an incident's drain of `a` is refused.
    let view = View {
        nodes: ["a", "b", "c"]
            .iter()
            .map(|n| {
                let facts = NodeFacts {
                    name: (*n).to_owned(),
                    group: "g".into(),
                    domain: format!("rack:{n}"),
                    vm_capable: true,
                    drained: false,
                    offline: false,
                    master: false,
                    memory_free: Some(1 << 20),
                    primary_memory: Some(0),
                    primaries: 0,
                };
                ((*n).to_owned(), facts)
            })
            .collect(),
        ..View::default()
    };
    let in_force = InForce::new(&view, r.holds()).with_touched(&view, r.touched());
    let evacuate = Proposal {
        duty: Duty::NodeRepair,
        holder: Holder::Incident {
            id: Uuid::from_u128(1),
        },
        subject: "node a".into(),
        invasiveness: 2,
        since_ms: 0,
        disrupts: ["a".to_owned()].into(),
        touches: BTreeSet::new(),
        fresh: false,
        moves_memory: Some(0),
        after_releases: BTreeMap::new(),
        reason: "evacuate (failing)".into(),
    };
    let policy = Policy {
        cluster: Caps {
            max_disrupted_nodes: 1,
            max_disrupted_percent: None,
            min_healthy_nodes: 1,
        },
        ..Policy::default()
    };
    let decision = gate::decide(&view, &policy, &in_force, vec![evacuate.clone()]);
    assert_eq!(
        decision.judgements[0].outcome,
        Err(gate::BlockedBy::Conflict {
            node: "a".into(),
            holder: campaign.to_string(),
        })
    );
    // It counts against no budget: with a cap of one node, c (another domain) may go.
    let other = Proposal {
        subject: "node c".into(),
        disrupts: ["c".to_owned()].into(),
        ..evacuate
    };
    let decision = gate::decide(&view, &policy, &in_force, vec![other]);
    assert!(decision.judgements[0].outcome.is_ok(), "{decision:?}");
    // Back: no longer held.
    for key in r
        .in_flight()
        .map(|op| op.key.clone())
        .collect::<Vec<String>>()
    {
        let op = r.ops_mut().get_mut(&key).unwrap();
        apply(op, &mut w);
        op.state = OpState::Succeeded;
    }
    for _ in 0..5 {
        w.now_ms += 1000;
        r.advance(&w);
    }
    assert_ne!(step_of(&r, "a"), NodeStep::MigrateBack);
    assert!(
        !r.touched().iter().any(|(n, _)| n == "a"),
        "{:?}",
        r.touched()
    );
}

#[test]
fn the_next_group_starts_while_the_migrations_back_run() {
    let mut w = world();
    let mut r = started(request(), &w);
    // Group 0 (a, b) up to its migrations back, which stay in flight.
    for _ in 0..20 {
        w.now_ms += 1000;
        r.advance(&w);
        if ["a", "b"]
            .iter()
            .all(|n| step_of(&r, n) == NodeStep::MigrateBack)
        {
            break;
        }
        let keys: Vec<String> = r
            .in_flight()
            .filter(|op| op.step != NodeStep::MigrateBack)
            .map(|op| op.key.clone())
            .collect();
        for key in keys {
            let op = r.ops_mut().get_mut(&key).unwrap();
            apply(op, &mut w);
            op.state = OpState::Succeeded;
        }
        for agent in w.agents.values_mut() {
            agent.ok = true;
        }
    }
    assert_eq!(step_of(&r, "a"), NodeStep::MigrateBack);
    assert_eq!(w.instances["i1"].primary, "c", "i1 still on c");
    // Undrained and healthy: not disrupted any more, the next group is due.
    assert_eq!(r.holds(), vec![]);
    assert!(r.needs_group());
    assert!(!r.complete_if_done(w.now_ms), "migrations back still run");
    assert_eq!(r.pending_back().get("i1").map(String::as_str), Some("a"));
    // Group 1 (c) was planned with i1 on c: its move waits for i1 to be back on a.
    r.start_group(
        BTreeMap::from([(
            "c".to_owned(),
            vec![
                PlannedMove {
                    instance: "i1".into(),
                    target: None,
                    new_secondary: None,
                },
                PlannedMove {
                    instance: "i3".into(),
                    target: None,
                    new_secondary: None,
                },
            ],
        )]),
        &w,
    );
    assert_eq!(r.campaign.groups.len(), 2);
    w.now_ms += 1000;
    let planned = r.advance(&w);
    assert!(planned.iter().any(|k| k == "g1-c-drain"), "{planned:?}");
    assert!(
        planned.iter().any(|k| k == "g1-c-move-i3-migrate"),
        "{planned:?}"
    );
    assert!(
        !planned.iter().any(|k| k.starts_with("g1-c-move-i1")),
        "i1 is not moved while it migrates back: {planned:?}"
    );
    // Both groups advance: the back migration ends, then c moves on to its hook.
    run(&mut r, &mut w, 30);
    for _ in 0..10 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
    assert_eq!(step_of(&r, "c"), NodeStep::Done);
    assert!(r.campaign.groups.iter().all(|g| g.finished_ms.is_some()));
    assert_eq!(w.instances["i1"].primary, "a");
    assert_eq!(w.instances["i3"].primary, "c");
    assert!(!r.ops.keys().any(|k| k.starts_with("g1-c-move-i1")));
    assert!(r.complete_if_done(w.now_ms));
}

/// Six nodes `n0`…`n5` in two groups (even, odd); DRBD instances `d<k>` on `n<k>` with
/// `n<k+1>` as secondary, shared ones `s<k>` on `n<k>`.
fn ring() -> World {
    let mut w = World {
        now_ms: T0,
        ..World::default()
    };
    for k in 0..6 {
        let n = format!("n{k}");
        w.nodes.insert(n.clone(), NodeNow::default());
        w.agents.insert(
            n.clone(),
            AgentNow {
                boot_id: Some(format!("{n}-boot-1")),
                reboot_required: Some(true),
                ok: true,
                asks: None,
                collected_at_ms: T0,
            },
        );
        w.instances.insert(
            format!("d{k}"),
            InstanceNow {
                primary: n.clone(),
                secondaries: vec![format!("n{}", (k + 1) % 6)],
                running: true,
                mirrored: true,
                memory: Some(128),
                local: false,
            },
        );
        w.instances.insert(
            format!("s{k}"),
            InstanceNow {
                primary: n,
                secondaries: vec![],
                running: true,
                mirrored: false,
                memory: Some(128),
                local: false,
            },
        );
    }
    w
}

/// The moves a re-plan gives `group` against `w` as it is: DRBD to the secondary, shared to
/// the first node outside the group.
fn ring_moves(group: &[String], w: &World) -> BTreeMap<String, Vec<PlannedMove>> {
    group
        .iter()
        .map(|node| {
            let outside = w
                .nodes
                .keys()
                .find(|n| !group.contains(n))
                .cloned()
                .unwrap();
            let moves = w
                .primaries_of(node)
                .into_iter()
                .map(|instance| PlannedMove {
                    target: (!w.instances[&instance].mirrored).then(|| outside.clone()),
                    instance,
                    new_secondary: None,
                })
                .collect();
            (node.clone(), moves)
        })
        .collect()
}

proptest! {
    /// Groups overlapping with the previous group's migrations back: a node is never drained
    /// (nor draining) while an instance is migrating back onto it, only one group's nodes are
    /// disrupted at a time (the budget the gate admitted), an instance is never in two
    /// migrations at once, no operation is planned twice, and every instance ends home.
    #[test]
    fn overlapping_groups_keep_budgets_and_never_drain_a_node_migrated_back_to(
        script in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 24), 1..80)
    ) {
        let mut w = ring();
        let home: BTreeMap<String, String> = w
            .instances
            .iter()
            .map(|(i, s)| (i.clone(), s.primary.clone()))
            .collect();
        let mut r = Record::new(Uuid::from_u128(9), request(), "x", T0);
        let even: Vec<String> = (0..6).step_by(2).map(|k| format!("n{k}")).collect();
        let odd: Vec<String> = (1..6).step_by(2).map(|k| format!("n{k}")).collect();
        r.set_plan(vec![even, odd], vec![], &w);
        let mut ever: BTreeSet<String> = BTreeSet::new();
        let rounds = script.len();
        for (round, picks) in script.into_iter().chain(std::iter::repeat_n(vec![true; 24], 40)).enumerate() {
            w.now_ms += 1000;
            if r.needs_group() && !r.campaign.planned.is_empty() {
                let moves = ring_moves(&r.campaign.planned[0].clone(), &w);
                r.start_group(moves, &w);
            }
            for key in r.advance(&w) {
                prop_assert!(ever.insert(key.clone()), "{key} planned twice");
            }
            // Drained nodes belong to one group (the budget the gate admitted); a group starts
            // while the previous one is held only when all of that one's are releasing.
            let drained: BTreeSet<usize> = r
                .campaign.groups.iter()
                .filter(|g| g.nodes.iter().any(|n| w.nodes[&n.node].drained))
                .map(|g| g.index)
                .collect();
            prop_assert!(drained.len() <= 1, "groups {drained:?} drained at once");
            let releasing = r.releasing();
            for g in r.campaign.groups.iter().rev().skip(1) {
                for n in g.nodes.iter().filter(|n| Record::disrupts(n.step)) {
                    prop_assert!(releasing.contains(&n.node), "{} held, not releasing, in a group before the last", n.node);
                }
            }
            let in_flight: Vec<CampaignOp> = r.in_flight().cloned().collect();
            let mut migrating: BTreeSet<&str> = BTreeSet::new();
            for op in &in_flight {
                if let OpKind::Migrate { instance, .. } = &op.kind {
                    prop_assert!(migrating.insert(instance), "{instance} in two migrations");
                }
                if op.step == NodeStep::MigrateBack {
                    let step = r.node(&op.node).map(|n| n.step);
                    prop_assert!(
                        matches!(step, Some(NodeStep::Undrain | NodeStep::MigrateBack)),
                        "{} at {step:?} while {} migrates back", op.node, op.key
                    );
                    prop_assert!(
                        !in_flight.iter().any(|o| o.node == op.node && o.kind == OpKind::Drain),
                        "{} draining while {} migrates back", op.node, op.key
                    );
                }
            }
            // Ganeti: some operations end this round (a migration back only after the undrain).
            for agent in w.agents.values_mut() {
                agent.ok = true;
            }
            for (k, op) in in_flight.iter().enumerate() {
                if !picks.get(k % 24).copied().unwrap_or(true) && round < rounds {
                    continue;
                }
                // Ganeti's `depends`: an operation runs once those it comes after succeeded.
                let entry = r.entry(op);
                if !entry.after.iter().all(|k| r.ops.get(k).is_some_and(|o| o.state == OpState::Succeeded)) {
                    continue;
                }
                let to = match &op.kind {
                    OpKind::Migrate { target: Some(t), .. } => Some(t.clone()),
                    OpKind::Migrate { instance, target: None } => w.instances[instance].secondaries.first().cloned(),
                    OpKind::ReplaceSecondary { secondary, .. } => Some(secondary.clone()),
                    _ => None,
                };
                if let Some(to) = to {
                    prop_assert!(!w.nodes[&to].drained, "{} moves an instance to drained {to}", op.key);
                }
                if let Some(op) = r.ops_mut().get_mut(&op.key) {
                    apply(op, &mut w);
                    op.state = OpState::Succeeded;
                    op.finished_ms = Some(w.now_ms);
                }
            }
            if r.complete_if_done(w.now_ms) {
                break;
            }
        }
        prop_assert_eq!(r.state(), CampaignState::Completed);
        let now: BTreeMap<String, String> = w
            .instances
            .iter()
            .map(|(i, s)| (i.clone(), s.primary.clone()))
            .collect();
        prop_assert_eq!(now, home);
        prop_assert!(w.nodes.values().all(|n| !n.drained));
    }
}

#[test]
fn a_campaign_takes_the_coordinator_s_failure_domains() {
    use crate::gate::DomainSource;
    let rack = DomainSource::TagPrefix("rack:".into());
    // (coordinator's, asked) -> stored, or the refusal names both.
    let table: [(&DomainSource, Option<&str>, Result<&str, ()>); 7] = [
        (&rack, None, Ok("rack:")),
        (&rack, Some("rack:"), Ok("rack:")),
        (&rack, Some("group"), Err(())),
        (&rack, Some("row:"), Err(())),
        (&rack, Some("rack"), Err(())),
        (&DomainSource::NodeGroup, None, Ok("group")),
        (&DomainSource::NodeGroup, Some("node-group"), Ok("group")),
    ];
    for (coordinator, asked, want) in table {
        let mut request = CampaignRequest::new("reboot");
        request.failure_domains = asked.map(str::to_owned);
        match (adopt_failure_domains(&mut request, coordinator), want) {
            (Ok(()), Ok(stored)) => {
                assert_eq!(
                    request.failure_domains.as_deref(),
                    Some(stored),
                    "{asked:?}"
                );
            }
            (Err(why), Err(())) => {
                assert!(why.starts_with("failure_domains: "), "{why}");
                assert!(why.contains(coordinator.as_str()), "{why}");
                assert!(why.contains(asked.unwrap_or_default()), "{why}");
                assert_eq!(request.failure_domains.as_deref(), asked);
            }
            (got, _) => panic!("{coordinator:?} {asked:?}: {got:?}"),
        }
    }
    // Planning always uses the coordinator's, whatever a stored request says.
    let mut request = CampaignRequest::new("reboot");
    request.failure_domains = Some("group".into());
    let options = roll_options(&request, &rack).unwrap();
    assert_eq!(
        options.failure_domains,
        Some(nodecare_roll::FailureDomains::TagPrefix("rack:".into()))
    );
}

proptest! {
    /// Operations taken from entries the campaign already knows are the same as taken afresh,
    /// whatever the entries' new states, jobs and finish times, entries gone, entries recorded
    /// again under a known key, and hooks that said they did not reboot.
    #[test]
    fn operations_taken_again_are_those_taken_afresh(
        script in proptest::collection::vec(
            proptest::collection::vec((0u8..8, 0u64..3), 1..12), 1..12)
    ) {
        let mut w = world();
        let mut r = started(request(), &w);
        w.now_ms += 1000;
        r.advance(&w);
        let keys: Vec<String> = r.ops.keys().cloned().collect();
        let mut entries = r.entries(&keys);
        prop_assume!(!entries.is_empty());
        let mut known = r.clone();
        for changes in script {
            for (k, (change, value)) in changes.into_iter().enumerate() {
                if entries.is_empty() {
                    entries = r.entries(&keys);
                }
                let at = k % entries.len();
                let entry = &mut entries[at];
                match change {
                    0 => entry.state = State::Recorded,
                    1 => {
                        entry.state = State::Submitted;
                        entry.job = Some(value);
                    }
                    2 => entry.state = State::TimedOut,
                    3 => {
                        entry.state = State::Succeeded;
                        entry.finished_ms = Some(T0 + value);
                    }
                    4 => entry.state = State::Failed { why: format!("why {value}") },
                    5 => {
                        entries.remove(at);
                    }
                    6 => {
                        // Recorded again: another node, another time.
                        entry.recorded_ms += 1 + value;
                        entry.about.insert(ABOUT_NODE.into(), format!("other-{value}"));
                    }
                    _ => {
                        let key = entry.key.clone();
                        if !known.hooks_no_reboot.remove(&key) {
                            known.hooks_no_reboot.insert(key);
                        }
                    }
                }
            }
            known.set_ops(&entries);
            let mut fresh = known.clone();
            fresh.ops_mut().clear();
            fresh.set_ops(&entries);
            prop_assert_eq!(&known.ops, &fresh.ops);
        }
    }
}

/// A campaign has grouped every node once each has been in one of its groups (the started
/// group holds `a` and `b`; `c` waits for the next).
#[test]
fn every_node_is_grouped_once_each_was_in_a_group() {
    let w = world();
    let r = started(request(), &w);
    assert!(r.has_grouped_all(["a", "b"].into_iter()));
    assert!(!r.has_grouped_all(["a", "b", "c"].into_iter()));
    assert!(!r.has_grouped_all(["d"].into_iter()));
    assert!(r.has_grouped_all(std::iter::empty()));
    // The plan made with every node seen leaves nothing for a next group.
    let mut again = r.clone();
    again.set_plan(vec![vec!["a".into(), "b".into()]], vec![], &w);
    assert!(again.campaign.planned.is_empty());
}

/// Rounds with every operation but the hooks succeeding, until `node` has its hook recorded
/// (not delivered: the agent does not answer).
fn until_hook_recorded(r: &mut Record, w: &mut World, node: &str) {
    for _ in 0..10 {
        w.now_ms += 1000;
        r.advance(w);
        if r.ops
            .get(&format!("g0-{node}-hook"))
            .is_some_and(|op| op.state == OpState::Planned)
        {
            return;
        }
        let keys: Vec<String> = r
            .in_flight()
            .filter(|op| !matches!(op.kind, OpKind::Hook { .. }))
            .map(|op| op.key.clone())
            .collect();
        for key in keys {
            let op = r.ops_mut().get_mut(&key).unwrap();
            apply(op, w);
            op.state = OpState::Succeeded;
        }
    }
    panic!("no hook recorded for {node}: {:#?}", r.campaign);
}

fn hook_op(r: &Record, node: &str) -> CampaignOp {
    r.ops[&format!("g0-{node}-hook")].clone()
}

/// A hook the agent never had (it did not answer) is never sent once its node failed at its
/// timeout, nor once the campaign ended: both hooks are to be stopped, and neither may be sent.
#[test]
fn an_undelivered_hook_is_stopped_when_its_node_fails_or_the_campaign_ends() {
    let mut w = world();
    let mut r = started(request(), &w);
    until_hook_recorded(&mut r, &mut w, "a");
    w.now_ms += 1000;
    r.advance(&w);
    let (a, b) = (hook_op(&r, "a"), hook_op(&r, "b"));
    assert_eq!(b.state, OpState::Planned);
    assert_eq!(r.hook_may_be_sent(&a, &w), Ok(()));
    assert_eq!(r.hooks_to_stop(), vec![]);
    // The hook step times out: a fails, and with it the campaign.
    w.now_ms = r.node("a").unwrap().step_deadline_ms.unwrap() + 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::Failed);
    assert_eq!(r.state(), CampaignState::Failed);
    assert!(r.hook_may_be_sent(&a, &w).is_err());
    assert!(r.hook_may_be_sent(&b, &w).is_err());
    let stops = r.hooks_to_stop();
    let keys: Vec<&str> = stops.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, vec!["g0-a-hook", "g0-b-hook"]);
    assert!(stops.iter().all(|s| !s.confirm), "{stops:?}");
    assert!(stops[0].why.contains("failed"), "{stops:?}");

    // With `continue_on_failure`, the failed node's hook alone is stopped; b's still goes.
    let mut w = world();
    let mut r = started(
        CampaignRequest {
            continue_on_failure: true,
            ..request()
        },
        &w,
    );
    until_hook_recorded(&mut r, &mut w, "a");
    w.now_ms += 1000;
    r.advance(&w);
    w.now_ms = r.node("a").unwrap().step_deadline_ms.unwrap() + 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::Failed);
    assert_eq!(r.state(), CampaignState::Running);
    let stops = r.hooks_to_stop();
    assert_eq!(stops.len(), 2, "{stops:?}: b timed out too");
    // Canceled (as the executor marks it), the hook is no longer in flight.
    for stop in stops {
        let op = r.ops_mut().get_mut(&stop.key).unwrap();
        op.state = OpState::Failed;
        op.canceled = true;
        op.error = Some(stop.why);
    }
    assert_eq!(
        r.in_flight()
            .filter(|op| matches!(op.kind, OpKind::Hook { .. }))
            .count(),
        0
    );
    assert_eq!(r.hooks_to_stop(), vec![]);
}

/// A hook whose request went out (its answer lost) when its campaign fails because of another
/// node: its agent may still take the request until its expiry (plus the skew the agent
/// allows), so it is not canceled before that, and its node stays held by the campaign
/// meanwhile, though the campaign ended; once canceled, the node is no longer held. A hook
/// whose request never went out may be canceled at once.
#[test]
fn a_hook_sent_when_its_campaign_fails_holds_its_node_until_it_can_no_longer_run() {
    let mut w = world();
    let mut r = started(request(), &w);
    until_hook_recorded(&mut r, &mut w, "a");
    w.now_ms += 1000;
    r.advance(&w);
    let b = hook_op(&r, "b");
    assert_eq!(b.state, OpState::Planned);
    let stops = r.hooks_to_stop();
    assert_eq!(stops, vec![]);
    // b's request goes out twice, the answers lost: the later expiry counts.
    let until = w.now_ms + 5_000;
    r.note_hook_sent(&b.key, until);
    r.note_hook_sent(&b.key, until - 1_000);
    // a's hook ran and failed: a fails, and with it the campaign.
    let a = r.ops_mut().get_mut("g0-a-hook").unwrap();
    a.state = OpState::Failed;
    a.error = Some("reboot exit code 1".into());
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::Failed);
    assert_eq!(r.state(), CampaignState::Failed);
    let stops = r.hooks_to_stop();
    let stop = stops.iter().find(|s| s.key == b.key).unwrap();
    assert_eq!(stop.sent_until_ms, Some(until));
    assert!(stop.may_still_run(w.now_ms));
    assert!(stop.may_still_run(until));
    assert!(!stop.may_still_run(until + 1));
    let never_sent = HookStop {
        sent_until_ms: None,
        ..stop.clone()
    };
    assert!(!never_sent.may_still_run(w.now_ms));
    // The campaign ended, but b's hook may still run: b stays held (a, failed, does not).
    assert_eq!(r.holds(), vec![("b".to_owned(), r.holder())]);
    // Past its expiry the executor cancels it: b is no longer held.
    let op = r.ops_mut().get_mut(&b.key).unwrap();
    op.state = OpState::Failed;
    op.canceled = true;
    op.error = Some(stop.why.clone());
    assert_eq!(r.holds(), vec![]);
    assert_eq!(r.hooks_to_stop(), vec![]);
}

/// An abort stops a hook recorded but not delivered: the node waits until the agent is known
/// not to have it, then goes back (undrained, its primaries back, skipped); a paused campaign
/// sends no hook and stops none.
#[test]
fn an_abort_stops_a_hook_not_delivered_and_sends_the_node_back() {
    let mut w = world();
    let mut r = started(request(), &w);
    until_hook_recorded(&mut r, &mut w, "a");
    let a = hook_op(&r, "a");
    r.pause(w.now_ms).unwrap();
    assert!(r.hook_may_be_sent(&a, &w).is_err(), "paused");
    assert_eq!(r.hooks_to_stop(), vec![]);
    r.resume(w.now_ms).unwrap();
    r.abort(w.now_ms).unwrap();
    assert!(r.hook_may_be_sent(&a, &w).is_err(), "aborting");
    let stops = r.hooks_to_stop();
    assert!(
        stops.iter().any(|s| s.key == "g0-a-hook" && s.confirm),
        "{stops:?}"
    );
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(step_of(&r, "a"), NodeStep::Hook);
    assert_eq!(
        r.node("a").unwrap().waiting_for.as_deref(),
        Some("the hook to be stopped: the campaign aborts")
    );
    // The agent said it never had them: canceled.
    for stop in r.hooks_to_stop() {
        let op = r.ops_mut().get_mut(&stop.key).unwrap();
        op.state = OpState::Failed;
        op.canceled = true;
        op.error = Some(stop.why);
    }
    run(&mut r, &mut w, 10);
    assert_eq!(r.state(), CampaignState::Aborted);
    assert_eq!(step_of(&r, "a"), NodeStep::Skipped);
    assert_eq!(r.campaign.failure, None);
    assert_eq!(w.instances["i1"].primary, "a");
    assert!(!w.nodes["a"].drained);
}

/// An abort while a hook's request went out (its answer lost, or its agent away when it came):
/// the agent may still take it until its expiry, so the node waits at its hook, held, and says
/// until when; once past it the hook is canceled (the agent does not have it), the node goes
/// back (undrained, its primaries back, skipped) and the abort ends.
#[test]
fn an_abort_waits_out_a_hook_request_that_went_out_saying_until_when_then_ends() {
    let mut w = world();
    let mut r = started(request(), &w);
    until_hook_recorded(&mut r, &mut w, "a");
    let a = hook_op(&r, "a");
    let until = w.now_ms + 2_500;
    r.note_hook_sent(&a.key, until);
    r.abort(w.now_ms).unwrap();
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(r.state(), CampaignState::Aborting);
    assert_eq!(step_of(&r, "a"), NodeStep::Hook);
    assert_eq!(
        r.node("a").unwrap().waiting_for.as_deref(),
        Some(
            format!(
                "the hook to be stopped: the campaign aborts, and a request sent for it may \
                 still reach its agent until {until} (Unix ms)"
            )
            .as_str()
        )
    );
    assert!(
        r.holds().iter().any(|(node, _)| node == "a"),
        "{:?}",
        r.holds()
    );
    let stop = r
        .hooks_to_stop()
        .into_iter()
        .find(|s| s.key == a.key)
        .unwrap();
    assert!(stop.confirm && stop.may_still_run(w.now_ms), "{stop:?}");
    // Past its expiry the agent can no longer take it: the executor cancels it (and any other
    // hook not delivered), and the abort goes on.
    w.now_ms = until + 1;
    assert!(!stop.may_still_run(w.now_ms));
    for stop in r.hooks_to_stop() {
        let op = r.ops_mut().get_mut(&stop.key).unwrap();
        op.state = OpState::Failed;
        op.canceled = true;
        op.error = Some(stop.why);
    }
    run(&mut r, &mut w, 10);
    assert_eq!(r.state(), CampaignState::Aborted);
    assert_eq!(step_of(&r, "a"), NodeStep::Skipped);
    assert_eq!(r.campaign.failure, None);
    assert_eq!(w.instances["i1"].primary, "a");
    assert!(!w.nodes["a"].drained);
    assert_eq!(r.holds(), vec![]);
}

/// Group 0 (`b`) up to its undrain, recorded and not finished; then group 1 (`later`) starts,
/// as the gate admits it with `b` released.
fn next_group_while_undraining(w: &mut World, later: &str, request: CampaignRequest) -> Record {
    let mut r = Record::new(Uuid::from_u128(7), request, "alice", T0);
    r.set_plan(vec![vec!["b".into()], vec![later.into()]], vec![], w);
    r.start_group(moves(), w);
    for _ in 0..20 {
        w.now_ms += 1000;
        r.advance(w);
        if r.ops
            .get("g0-b-undrain")
            .is_some_and(|op| op.state.is_in_flight())
        {
            break;
        }
        execute_all(&mut r, w);
    }
    assert!(r.ops["g0-b-undrain"].state.is_in_flight());
    // The executor submitted it: its job is known.
    let undrain = r.ops_mut().get_mut("g0-b-undrain").unwrap();
    undrain.state = OpState::Submitted;
    undrain.job_id = Some(41);
    assert!(r.needs_group());
    assert_eq!(r.releasing(), BTreeSet::from(["b".to_owned()]));
    r.start_group(moves(), w);
    r
}

/// A group started while the previous group's undrains run was admitted by the gate as if those
/// nodes were back (`Proposal::after_releases`: no storage problem that is only their drained
/// flag): none of its jobs may run before them. Every operation it plans, a move to a node
/// that is not released too (a DRBD instance to its secondary), is chained after every undrain
/// in flight.
#[test]
fn every_operation_of_a_group_started_while_undrains_run_comes_after_them() {
    let mut w = world();
    let mut r = next_group_while_undraining(&mut w, "c", request());
    // c's primary i3 migrates to its secondary a; b is the node released.
    r.moves = BTreeMap::from([(
        "c".to_owned(),
        vec![PlannedMove {
            instance: "i3".into(),
            target: None,
            new_secondary: None,
        }],
    )]);
    w.now_ms += 1000;
    let planned = r.advance(&w);
    assert!(
        planned.iter().any(|k| k.starts_with("g1-c-move-")),
        "a move planned: {planned:?}"
    );
    for key in planned.iter().filter(|k| k.starts_with("g1-")) {
        assert_eq!(
            r.entry(&r.ops[key]).after,
            vec!["g0-b-undrain".to_owned()],
            "{key} runs before b's undrain, which its group was admitted after"
        );
    }
}

/// A node that needs no drain (the master; a node drained already) in a group started while
/// the previous group's undrains run gets no hook before they have succeeded, saying so.
#[test]
fn a_hook_waits_for_the_releases_its_group_was_admitted_with() {
    for case in ["master", "drained"] {
        let mut w = world();
        if case == "master" {
            w.master = "a".into();
        } else {
            w.nodes.get_mut("a").unwrap().drained = true;
        }
        let mut r = next_group_while_undraining(&mut w, "a", request());
        assert_eq!(r.started_after, vec!["g0-b-undrain".to_owned()], "{case}");
        for _ in 0..5 {
            w.now_ms += 1000;
            r.advance(&w);
            // Everything runs but b's undrain (Ganeti's queue: behind the master's own jobs).
            let keys: Vec<String> = r
                .in_flight()
                .filter(|op| op.key != "g0-b-undrain" && op.step != NodeStep::MigrateBack)
                .map(|op| op.key.clone())
                .collect();
            for key in keys {
                let op = r.ops_mut().get_mut(&key).unwrap();
                apply(op, &mut w);
                op.state = OpState::Succeeded;
            }
        }
        assert_eq!(step_of(&r, "a"), NodeStep::Hook, "{case}");
        assert!(
            !r.ops.contains_key("g1-a-hook"),
            "{case}: hook before b is back"
        );
        let waiting = r.node("a").unwrap().waiting_for.clone().unwrap();
        assert!(waiting.contains("undrain of b"), "{case}: {waiting}");
        // b is back: the hook goes.
        let op = r.ops_mut().get_mut("g0-b-undrain").unwrap();
        apply(op, &mut w);
        op.state = OpState::Succeeded;
        w.now_ms += 1000;
        r.advance(&w);
        assert!(r.ops.contains_key("g1-a-hook"), "{case}: {:#?}", r.campaign);
        assert_eq!(
            r.hook_may_be_sent(&r.ops["g1-a-hook"], &w),
            Ok(()),
            "{case}"
        );
    }
}

/// [`world`] with `free` MiB free on every node.
fn world_with_free(free: u64) -> World {
    let mut w = world();
    for node in w.nodes.values_mut() {
        node.memory_free = Some(free);
    }
    w
}

/// An instance started on the node after its group was planned (by its owner, or Ganeti's
/// watcher) is moved before the hook, like a planned one, and comes back after; with no safe
/// target the node waits, saying why; a hook recorded before it started is not sent while it
/// runs there.
#[test]
fn an_instance_started_on_the_node_after_the_plan_moves_before_the_hook() {
    let unplanned = |on: &str| InstanceNow {
        primary: on.into(),
        secondaries: vec![],
        running: true,
        mirrored: false,
        local: false,
        memory: Some(64),
    };
    // Started before the hook was planned: moved to the only safe node (c), then the hook.
    let mut w = world_with_free(1024);
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    execute_all(&mut r, &mut w);
    w.instances.insert("late".into(), unplanned("a"));
    w.now_ms += 1000;
    let planned = r.advance(&w);
    assert!(
        planned.contains(&"g0-a-move-late-migrate".to_owned()),
        "{planned:?}"
    );
    assert_eq!(
        r.ops["g0-a-move-late-migrate"].kind,
        OpKind::Migrate {
            instance: "late".into(),
            target: Some("c".into())
        }
    );
    assert!(!r.ops.contains_key("g0-a-hook"));
    run(&mut r, &mut w, 20);
    assert_eq!(step_of(&r, "a"), NodeStep::Done);
    assert_eq!(
        w.instances["late"].primary, "a",
        "back home with the node's own"
    );

    // Started after the hook was recorded, not delivered: not sent while it runs there; moved.
    let mut w = world_with_free(1024);
    let mut r = started(request(), &w);
    until_hook_recorded(&mut r, &mut w, "a");
    let hook = hook_op(&r, "a");
    assert_eq!(r.hook_may_be_sent(&hook, &w), Ok(()));
    w.instances.insert("late".into(), unplanned("a"));
    let why = r.hook_may_be_sent(&hook, &w).unwrap_err();
    assert!(why.contains("late"), "{why}");
    w.now_ms += 1000;
    let planned = r.advance(&w);
    assert!(
        planned.contains(&"g0-a-move-late-migrate".to_owned()),
        "{planned:?}"
    );
    let op = r.ops_mut().get_mut("g0-a-move-late-migrate").unwrap();
    apply(op, &mut w);
    op.state = OpState::Succeeded;
    assert_eq!(r.hook_may_be_sent(&hook, &w), Ok(()));

    // Nowhere safe to go (c drained, b in the campaign): the node waits, saying why.
    let mut w = world();
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    execute_all(&mut r, &mut w);
    w.nodes.get_mut("c").unwrap().drained = true;
    w.instances.insert("late".into(), unplanned("a"));
    for _ in 0..3 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    assert!(!r.ops.contains_key("g0-a-hook"));
    assert!(matches!(
        step_of(&r, "a"),
        NodeStep::MovePrimaries | NodeStep::Hook
    ));
    let waiting = r.node("a").unwrap().waiting_for.clone().unwrap();
    assert!(waiting.contains("a safe target for late"), "{waiting}");

    // The only other node held by another holder (a canceled incident's repair command still
    // running there): never a target, since the gate did not judge this move.
    let mut w = world_with_free(1024);
    let mut r = started(request(), &w);
    w.now_ms += 1000;
    r.advance(&w);
    execute_all(&mut r, &mut w);
    w.held.insert(
        "c".into(),
        std::collections::BTreeSet::from([Holder::Incident {
            id: Uuid::from_u128(77),
        }]),
    );
    w.instances.insert("late".into(), unplanned("a"));
    w.now_ms += 1000;
    r.advance(&w);
    assert!(
        !r.ops.contains_key("g0-a-move-late-migrate"),
        "{:?}",
        r.ops.keys()
    );
    assert!(!r.ops.contains_key("g0-a-hook"));
    let waiting = r.node("a").unwrap().waiting_for.clone().unwrap();
    assert!(waiting.contains("a safe target for late"), "{waiting}");
    // Once the holder let go, it is the target.
    w.held.clear();
    w.now_ms += 1000;
    r.advance(&w);
    assert_eq!(
        r.ops["g0-a-move-late-migrate"].kind,
        OpKind::Migrate {
            instance: "late".into(),
            target: Some("c".into())
        }
    );
}

/// With `continue_on_failure`, an undrain that fails fails its own node only: the next group,
/// admitted with it released, has its drain fail for that dependency alone, and is sent back
/// (not failed, not tagged) to be planned again on the cluster as it is; planned again, it is
/// rebooted.
#[test]
fn a_failed_undrain_fails_its_node_alone_and_the_next_group_is_planned_again() {
    for how in ["failed", "canceled"] {
        let mut w = world();
        let request = CampaignRequest {
            continue_on_failure: true,
            ..request()
        };
        let mut r = next_group_while_undraining(&mut w, "a", request);
        w.now_ms += 1000;
        r.advance(&w);
        let drain = r.entry(&r.ops["g1-a-drain"]);
        assert_eq!(
            drain.after,
            vec!["g0-b-undrain".to_owned()],
            "{how}: chained"
        );
        // b's undrain fails; Ganeti fails (or cancels) a's drain, which depended on it.
        let op = r.ops_mut().get_mut("g0-b-undrain").unwrap();
        op.state = OpState::Failed;
        op.error = Some("job 9 error: node locked".into());
        let op = r.ops_mut().get_mut("g1-a-drain").unwrap();
        op.state = OpState::Failed;
        op.canceled = how == "canceled";
        op.error = Some("job 10 error: Dependency job 9 finished with status 'error'".into());
        // a's migration, chained after b's undrain too, never ran either.
        let keys: Vec<String> = r
            .in_flight()
            .filter(|op| op.node == "a")
            .map(|op| op.key.clone())
            .collect();
        assert!(!keys.is_empty(), "{how}: a's migration");
        for key in keys {
            assert_eq!(
                r.entry(&r.ops[&key]).after,
                vec!["g0-b-undrain".to_owned()],
                "{how}: {key} chained"
            );
            let op = r.ops_mut().get_mut(&key).unwrap();
            op.state = OpState::Failed;
            op.canceled = how == "canceled";
            op.error = Some("job 11 error: Dependency job 9 finished with status 'error'".into());
        }
        for _ in 0..6 {
            w.now_ms += 1000;
            r.advance(&w);
            execute_all(&mut r, &mut w);
        }
        assert_eq!(step_of(&r, "b"), NodeStep::Failed, "{how}");
        assert_eq!(
            r.campaign.failures.len(),
            1,
            "{how}: {:#?}",
            r.campaign.failures
        );
        assert_eq!(r.campaign.failures[0].node, "b");
        assert_eq!(step_of(&r, "a"), NodeStep::Skipped, "{how}");
        assert!(r.replanned.contains_key("a"), "{how}");
        assert!(!r.ops.contains_key("tag-failed-a"), "{how}: a tagged");
        assert!(!r.ops.keys().any(|k| k.starts_with("g1-a-hook")), "{how}");
        assert_eq!(w.instances["i1"].primary, "a", "{how}: i1 back");
        // Planned again on the cluster as it is: a is taken again, rebooted, and done.
        assert!(r.needs_group(), "{how}");
        r.set_plan(vec![vec!["a".into()], vec!["c".into()]], vec![], &w);
        assert_eq!(r.campaign.planned[0], vec!["a".to_owned()], "{how}");
        r.start_group(moves(), &w);
        run(&mut r, &mut w, 20);
        assert_eq!(step_of(&r, "a"), NodeStep::Done, "{how}");
        assert!(r.ops.contains_key("g2-a-hook"), "{how}");
        assert!(!r.replanned.contains_key("a"), "{how}");
    }
}

/// A node its campaign gave up (failed and tagged, `continue_on_failure`) is no longer held by
/// the campaign's ledger entries either: the ledger's account of what the campaign holds (the
/// coordinator's safety net under the campaign's own) agrees with [`Record::holds`], so the
/// node left drained is someone's drain, and once the operator returns it, nobody's. Held in
/// the campaign's name, a storage problem there (its agent unreachable) would let the
/// campaign's next group join its failure domain as if the campaign disrupted it.
#[test]
fn a_node_given_up_is_released_by_its_failure_tag() {
    let mut w = world();
    let mut r = started(
        CampaignRequest {
            continue_on_failure: true,
            ..request()
        },
        &w,
    );
    for _ in 0..3 {
        w.now_ms += 1000;
        r.advance(&w);
        execute_all(&mut r, &mut w);
    }
    w.agents.get_mut("b").unwrap().boot_id = Some("b-boot-1".into());
    w.now_ms += StepTimeouts::default().healthy_s * 1000 + 5000;
    r.advance(&w);
    assert_eq!(step_of(&r, "b"), NodeStep::Failed);
    execute_all(&mut r, &mut w);
    assert_eq!(r.state(), CampaignState::Running);
    assert!(w.nodes["b"].drained, "the failed node stays drained");
    // The campaign's entries as the ledger holds them, numbered in the order they were planned.
    let mut ops: Vec<&CampaignOp> = r.ops.values().collect();
    ops.sort_by_key(|op| op.created_ms);
    let entries: Vec<Entry> = ops
        .iter()
        .zip(1..)
        .map(|(op, id)| {
            let mut entry = r.entry(op);
            entry.id = id;
            entry
        })
        .collect();
    let held = crate::ledger::in_force(&entries);
    assert!(
        !held.nodes.contains_key("b"),
        "the ledger still holds the node given up: {:?}",
        held.nodes
    );
    assert!(!r.holds().iter().any(|(node, _)| node == "b"));
}

/// A node someone else had drained goes through its group without a drain of the campaign;
/// undrained by hand before its hook, it is drained again first: no hook is recorded or sent
/// for a node that is not drained (new instances could be placed on it while it reboots).
/// Undrained after its hook was recorded, the hook waits until it is drained again.
#[test]
fn a_node_undrained_behind_the_campaign_s_back_is_drained_again_before_its_hook() {
    for undrain_after_recording in [false, true] {
        let mut w = world();
        w.nodes.get_mut("a").unwrap().drained = true;
        let mut r = started(request(), &w);
        if undrain_after_recording {
            until_hook_recorded(&mut r, &mut w, "a");
        } else {
            // Until a reaches its hook step: the instances move off, no drain of its own.
            for _ in 0..10 {
                w.now_ms += 1000;
                r.advance(&w);
                if step_of(&r, "a") == NodeStep::Hook {
                    break;
                }
                execute_current(&mut r, &mut w);
            }
            assert_eq!(step_of(&r, "a"), NodeStep::Hook);
            assert!(!r.ops.contains_key("g0-a-drain"));
            r.ops_mut().remove("g0-a-hook");
        }
        // The operator undrains a by hand.
        w.nodes.get_mut("a").unwrap().drained = false;
        w.now_ms += 1000;
        let planned = r.advance(&w);
        if let Some(hook) = r.ops.get("g0-a-hook") {
            assert_eq!(
                r.hook_may_be_sent(hook, &w),
                Err("a is not drained".to_owned()),
                "undrain after recording: {undrain_after_recording}"
            );
        }
        let drain: Vec<&CampaignOp> = planned
            .iter()
            .filter_map(|key| r.ops.get(key))
            .filter(|op| op.node == "a" && op.kind == OpKind::Drain)
            .collect();
        assert_eq!(
            drain.len(),
            1,
            "a drained again (undrain after recording: {undrain_after_recording}): {planned:?}"
        );
        // Drained again, the hook goes.
        let key = drain[0].key.clone();
        let op = r.ops_mut().get_mut(&key).unwrap();
        apply(op, &mut w);
        op.state = OpState::Succeeded;
        op.finished_ms = Some(w.now_ms);
        assert!(w.nodes["a"].drained);
        w.now_ms += 1000;
        r.advance(&w);
        let hook = r
            .ops
            .get("g0-a-hook")
            .expect("the hook is recorded")
            .clone();
        assert_eq!(r.hook_may_be_sent(&hook, &w), Ok(()));
    }
}

/// The next group is not due while an undrain of the previous group is only recorded (not
/// submitted yet, or its submission's answer was lost): its jobs could not be chained after
/// that undrain (Ganeti `depends` needs its job) and would wait for it past the round that
/// admitted them, starting on a cluster the gate no longer judged (an agent gone meanwhile).
/// Once the undrain's job is known, the group is due.
#[test]
fn the_next_group_waits_until_the_undrains_it_comes_after_are_submitted() {
    let mut w = world();
    let mut r = Record::new(Uuid::from_u128(7), request(), "alice", T0);
    r.set_plan(vec![vec!["b".into()], vec!["c".into()]], vec![], &w);
    r.start_group(moves(), &w);
    for _ in 0..20 {
        w.now_ms += 1000;
        r.advance(&w);
        if r.ops.contains_key("g0-b-undrain") {
            break;
        }
        execute_all(&mut r, &mut w);
    }
    let undrain = r.ops["g0-b-undrain"].clone();
    assert_eq!((undrain.state, undrain.job_id), (OpState::Planned, None));
    assert!(!r.needs_group(), "due while b's undrain is only recorded");
    assert!(r.releasing().is_empty());
    let op = r.ops_mut().get_mut("g0-b-undrain").unwrap();
    op.state = OpState::Submitted;
    op.job_id = Some(42);
    assert!(r.needs_group());
    assert_eq!(r.releasing(), BTreeSet::from(["b".to_owned()]));
}

/// A node whose drain job hangs in Ganeti until its step times out: failed, the campaign with it
/// (or, continuing on failure, only the node), while the job may still drain it.
#[test]
fn a_node_failed_while_its_drain_job_runs_stays_held_until_the_job_ends() {
    let holder = Holder::Campaign {
        id: Uuid::from_u128(7),
    };
    for continue_on_failure in [false, true] {
        let mut w = world();
        let mut r = started(
            CampaignRequest {
                continue_on_failure,
                ..request()
            },
            &w,
        );
        w.now_ms += 1000;
        r.advance(&w);
        let drain = r
            .in_flight()
            .find(|op| op.node == "a" && op.kind == OpKind::Drain)
            .unwrap()
            .key
            .clone();
        // Submitted (the moves away beside it), and then nothing ends.
        let keys: Vec<String> = r.in_flight().map(|op| op.key.clone()).collect();
        for (job, key) in keys.iter().enumerate() {
            let op = r.ops_mut().get_mut(key).unwrap();
            op.state = OpState::Submitted;
            op.job_id = Some(job as u64 + 4);
        }
        w.now_ms = r.node("a").unwrap().step_deadline_ms.unwrap() + 2000;
        r.advance(&w);
        assert_eq!(step_of(&r, "a"), NodeStep::Failed, "{continue_on_failure}");
        assert_eq!(
            r.state() == CampaignState::Failed,
            !continue_on_failure,
            "{continue_on_failure}"
        );
        // Its failure tag set: the tag releases nothing the drain job may still do.
        let tags: Vec<String> = tag_keys(&r, "a");
        for key in &tags {
            r.ops_mut().get_mut(key).unwrap().state = OpState::Succeeded;
        }
        assert!(
            r.holds().contains(&("a".to_owned(), holder.clone())),
            "continue_on_failure {continue_on_failure}: a is not held while its drain job \
             runs: {:?}",
            r.holds()
        );
        // Its drain job ended: its move away still runs.
        let op = r.ops_mut().get_mut(&drain).unwrap();
        op.state = OpState::Succeeded;
        op.finished_ms = Some(w.now_ms);
        assert!(
            r.holds().contains(&("a".to_owned(), holder.clone())),
            "{continue_on_failure}: a is not held while its move away runs: {:?}",
            r.holds()
        );
        // Every job of it ended: the node failed (left drained, someone's drain) is held no
        // more.
        let keys: Vec<String> = r
            .in_flight()
            .filter(|op| op.node == "a")
            .map(|op| op.key.clone())
            .collect();
        for key in keys {
            let op = r.ops_mut().get_mut(&key).unwrap();
            op.state = OpState::Succeeded;
            op.finished_ms = Some(w.now_ms);
        }
        assert!(
            !r.holds().iter().any(|(n, _)| n == "a"),
            "{continue_on_failure}: {:?}",
            r.holds()
        );
    }
}
