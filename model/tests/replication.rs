//! The model check of the replication: what the checker finds in the code's rules, the proposed
//! rules within a bound, and a broken rule the checker must catch.

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

/// Finding: a takeover reads the copies, then pushes its new epoch; a keeper promises nothing
/// when it is read, so the old master's push can reach a majority between the two and be
/// acknowledged, and the new master's push then overwrites it with the older state it read.
#[test]
fn the_code_loses_an_acknowledged_action_when_a_push_lands_between_a_takeover_read_and_push() {
    let report = check(
        Rules::code(),
        nodecare_model::BOUNDED,
        until(property::KEPT),
    );
    let found = report.discovery(property::KEPT).expect("a counterexample");
    assert!(!report.holds(property::KEPT));
    // The old master's push is kept by a majority after the new master read those keepers.
    let steps: Vec<Action> = found.path.iter().map(|(action, _)| *action).collect();
    let read = steps
        .iter()
        .position(|action| *action == Action::FinishRead(1))
        .expect("a takeover");
    assert!(steps[read..].contains(&Action::FinishPush(0)), "{steps:?}");
}

/// Finding: `push_needed` admits a write without a push when the state is unchanged since a
/// push that reached a majority, so a superseded master admits it.
#[test]
fn the_code_admits_a_write_of_a_superseded_master_from_its_last_push() {
    let report = check(
        Rules::code(),
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

/// The proposed rules: no counterexample in the first states (breadth first), progress checked
/// from each of them.
#[test]
fn the_proposed_rules_hold_in_the_first_states() {
    let bounds = Bounds {
        liveness: true,
        ..nodecare_model::BOUNDED
    };
    let report = check(
        Rules::proposed(),
        bounds,
        Limits {
            max_states: Some(60_000),
            ..Limits::default()
        },
    );
    assert_eq!(report.failing(), Vec::<&str>::new());
    assert!(report.states >= 60_000);
}

/// A deliberately broken rule: a takeover that reads a single keeper (a minority).
#[test]
fn a_takeover_from_a_minority_is_caught() {
    let rules = Rules {
        name: "proposed, read quorum 1",
        read_quorum: |_| 1,
        ..Rules::proposed()
    };
    let report = check(rules, nodecare_model::BOUNDED, until(property::KEPT));
    assert!(report.discovery(property::KEPT).is_some());
    assert!(!report.holds(property::KEPT));
}
