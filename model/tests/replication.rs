//! The model check of the replication: the code's rules within a bound, what the checker finds
//! in the rules before the fixes of its findings, and a broken rule the checker must catch.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use nodecare_model::explorer::{Limits, Report, explore};
use nodecare_model::replication::{Action, Bounds, Replication, Rules, property};

fn check(rules: Rules, bounds: Bounds, limits: Limits) -> Report<Replication> {
    let started = std::time::Instant::now();
    let report = explore(&Replication::new(rules, bounds), limits);
    eprintln!(
        "{}: {} states, {} transitions, depth {}, complete {}, {:.1} s",
        rules.name,
        report.states,
        report.transitions,
        report.depth,
        report.complete,
        started.elapsed().as_secs_f64()
    );
    for discovery in &report.discoveries {
        if !report.holds(discovery.property) {
            eprintln!("{discovery}");
        }
    }
    report
}

fn until(property: &'static str) -> Limits {
    Limits {
        max_states: Some(2_000_000),
        stop_at: Some(property),
        ..Limits::default()
    }
}

/// The safety properties hold for the code's rules in the first million states breadth first:
/// every state within 11 steps of the steady start checked (the counterexamples of the rules
/// before the fixes are 11 and 7 steps long): no acknowledged action lost, no write of a
/// superseded master, no two writers, and the model is not vacuous.
#[test]
fn the_code_keeps_acknowledged_actions_and_fences_superseded_masters() {
    let report = check(
        Rules::code(),
        nodecare_model::BOUNDED,
        Limits {
            max_states: Some(1_000_000),
            ..Limits::default()
        },
    );
    assert_eq!(report.failing(), Vec::<&str>::new());
    assert!(report.states >= 1_000_000);
    // Breadth first: a state of depth 12 was checked, so every state of depth 11 or less was.
    assert!(report.depth >= 12, "depth {}", report.depth);
    for name in [property::KEPT, property::FENCED, property::ONE_WRITER] {
        assert!(report.holds(name), "{name}");
    }
    for name in [property::SOME_WRITE, property::SOME_ACK] {
        assert!(report.discovery(name).is_some(), "{name} never happened");
    }
}

/// The code's rules: no counterexample in the first states (breadth first), progress checked
/// from each of them.
#[test]
fn the_code_progresses_in_the_first_states() {
    let bounds = Bounds {
        liveness: true,
        ..nodecare_model::BOUNDED
    };
    let report = check(
        Rules::code(),
        bounds,
        Limits {
            max_states: Some(60_000),
            ..Limits::default()
        },
    );
    assert_eq!(report.failing(), Vec::<&str>::new());
    assert!(report.states >= 60_000);
}

/// The first finding, in the rules before its fix: a takeover reads the copies, then pushes its
/// new epoch; a keeper promised nothing when it was read, so the old master's push can reach a
/// majority between the two and be acknowledged, and the new master's push then overwrites it
/// with the older state it read.
#[test]
fn before_the_fix_an_acknowledged_action_is_lost_when_a_push_lands_between_a_takeover_read_and_push()
 {
    let report = check(
        Rules::before(),
        nodecare_model::BOUNDED,
        until(property::KEPT),
    );
    let found = report.discovery(property::KEPT).expect("a counterexample");
    assert!(!report.holds(property::KEPT));
    // The old master's push is kept by a majority after the new master read those keepers.
    let steps: Vec<Action> = found.path.iter().map(|(action, _)| *action).collect();
    let read = steps
        .iter()
        .position(|action| matches!(action, Action::FinishRead(1, _)))
        .expect("a takeover");
    assert!(steps[read..].contains(&Action::FinishPush(0)), "{steps:?}");
}

/// The second finding, in the rules before its fix: `ensure` admitted a write without a push
/// when the state was unchanged since a push that reached a majority, so a superseded master
/// admitted it.
#[test]
fn before_the_fix_a_superseded_master_admits_a_write_from_its_last_push() {
    let report = check(
        Rules::before(),
        nodecare_model::BOUNDED,
        until(property::FENCED),
    );
    let found = report
        .discovery(property::FENCED)
        .expect("a counterexample");
    assert_eq!(
        found.path.last().map(|(action, _)| *action),
        Some(Action::GanetiWrite(0))
    );
}

/// A deliberately broken rule: a takeover that reads a single keeper (a minority).
#[test]
fn a_takeover_from_a_minority_is_caught() {
    let rules = Rules {
        name: "code, read quorum 1",
        read_quorum: |_| 1,
        ..Rules::code()
    };
    let report = check(rules, nodecare_model::BOUNDED, until(property::KEPT));
    assert!(report.discovery(property::KEPT).is_some());
    assert!(!report.holds(property::KEPT));
}
