//! The model check of the replication: the code's rules within a bound, what the checker finds
//! in the rules before the fixes of its findings, and a broken rule the checker must catch.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::{HashSet, VecDeque};

use nodecare_coordinator::replica::{PushOutcome, PushReply, judge_push};
use nodecare_model::explorer::{Limits, Model, Report, explore, fingerprint};
use nodecare_model::replication::{
    Action, Bounds, Reductions, Replication, Rules, State, property,
};
use nodecare_protocol::replica::Generation;

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

/// The safety properties hold for the code's rules in every state within the test bounds (the
/// whole space, reduced): no acknowledged action lost, no write of a superseded master, no two
/// writers, and the model is not vacuous.
#[test]
fn the_code_keeps_acknowledged_actions_and_fences_superseded_masters() {
    let report = check(Rules::code(), nodecare_model::BOUNDED, Limits::default());
    assert_eq!(report.failing(), Vec::<&str>::new());
    assert!(report.complete);
    assert!(report.states > 1_000_000, "{}", report.states);
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

/// Without the lease, a write confirmed just before a takeover reaches Ganeti after it: the old
/// master's push reaches a majority (keepers 1 and 2) before the new master's epoch does, the new
/// master restores it and pushes its epoch to a majority, and only then does the old master read
/// its answers and make the call. With the lease (the code's rules, the whole space of the test
/// bounds in `the_code_keeps_acknowledged_actions_and_fences_superseded_masters`) the new master
/// waits out the old master's confirmation before it pushes.
#[test]
fn without_the_lease_a_write_confirmed_before_a_takeover_reaches_ganeti_after_it() {
    let report = check(
        Rules::unleased(),
        nodecare_model::BOUNDED,
        until(property::FENCED),
    );
    let found = report
        .discovery(property::FENCED)
        .expect("a counterexample");
    assert_eq!(found.path.len(), 13, "{found}");
    let steps: Vec<Action> = found.path.iter().map(|(action, _)| *action).collect();
    assert_eq!(steps.first(), Some(&Action::GanetiWrite(0)), "{steps:?}");
    assert_eq!(steps.last(), Some(&Action::FinishPush(0)), "{steps:?}");
    // The new master's takeover read ended (and its push left) before the old master's call.
    assert!(
        steps[..steps.len() - 1]
            .iter()
            .any(|action| matches!(action, Action::FinishRead(1, _))),
        "{steps:?}"
    );
    // The old master's state is in what the new master restored: nothing acknowledged is lost.
    assert!(report.holds(property::KEPT));
}

/// A deliberately broken rule: a takeover that reads a single keeper (a minority). The reduced
/// exploration of the test bounds finds an acknowledged action lost, and that of a new cluster
/// without operator actions two coordinators writing at the same generation.
#[test]
fn a_takeover_from_a_minority_is_caught() {
    let report = check(
        Rules::minority(),
        nodecare_model::BOUNDED,
        until(property::KEPT),
    );
    assert!(report.discovery(property::KEPT).is_some());
    assert!(!report.holds(property::KEPT));
    let new_cluster = Bounds {
        actions: 0,
        steady: false,
        ..nodecare_model::BOUNDED
    };
    let report = check(Rules::minority(), new_cluster, until(property::ONE_WRITER));
    assert!(!report.holds(property::ONE_WRITER));
    // The code's rules hold in that space, explored completely.
    let report = check(Rules::code(), new_cluster, Limits::default());
    assert!(report.complete);
    assert!(report.holds(property::ONE_WRITER));
    assert_eq!(report.failing(), vec![property::SOME_ACK]);
}

/// The reductions change what is explored, not what is found: small bounds explored completely
/// with and without them give the same verdict on every property, for the code's rules, the
/// rules before the fixes and the broken rule, and fewer states with them.
#[test]
fn the_reduced_exploration_finds_what_the_whole_one_finds() {
    let small = [
        // A takeover, without writes after it.
        Bounds {
            actions: 0,
            max_number: 0,
            ..nodecare_model::BOUNDED
        },
        // An action and a write, without takeover.
        Bounds {
            takeovers: 0,
            ..nodecare_model::BOUNDED
        },
        // A takeover and a crash of each, without writes after it.
        Bounds {
            actions: 0,
            max_number: 0,
            crashes: 1,
            ..nodecare_model::BOUNDED
        },
    ];
    let mut found = 0;
    for bounds in small {
        for rules in [Rules::code(), Rules::before(), Rules::minority()] {
            if bounds.crashes > 0 && rules.name != Rules::before().name {
                continue; // the whole space is too large for a test
            }
            let reduced = explore(&Replication::new(rules, bounds), Limits::default());
            let whole = explore(
                &Replication::new(rules, bounds).with_reductions(Reductions::NONE),
                Limits::default(),
            );
            assert!(reduced.complete && whole.complete);
            assert_eq!(
                reduced.failing(),
                whole.failing(),
                "{} {bounds:?}",
                rules.name
            );
            assert!(reduced.states < whole.states);
            if !reduced.holds(property::FENCED) {
                found += 1;
            }
        }
    }
    // Not vacuous: the rules before the fixes admit a superseded master's write (in the two
    // spaces with a takeover).
    assert_eq!(found, 2);
}

/// The first `count` states of `model`, breadth first (not reduced).
fn first_states(model: &Replication, count: usize) -> Vec<State> {
    let mut seen = HashSet::new();
    let mut queue: VecDeque<State> = model.init_states().into();
    let mut states = Vec::new();
    let mut actions = Vec::new();
    while let Some(state) = queue.pop_front() {
        if states.len() >= count {
            break;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for action in &actions {
            if let Some(next) = model.next_state(&state, action)
                && seen.insert(fingerprint(&next))
            {
                queue.push_back(next);
            }
        }
        states.push(state);
    }
    states
}

fn successors(model: &Replication, state: &State) -> Vec<u64> {
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    let mut prints: Vec<u64> = actions
        .iter()
        .filter_map(|action| model.next_state(state, action))
        .map(|next| model.fingerprint(&next))
        .collect();
    prints.sort_unstable();
    prints.dedup();
    prints
}

/// The symmetry reduction's premise, on the first states of the full bounds and of a steady
/// start, for the code's rules and the rules before the fixes: every renaming of the keepers and coordinators of a state has its fingerprint, the
/// same properties, and successors of the same fingerprints (the renamed state's steps are the
/// renamed steps). And renaming does change states (the reduction is not empty).
#[test]
fn renamed_states_share_a_fingerprint_properties_and_successors() {
    let mut renamed_differently = 0;
    for (rules, bounds) in [
        (Rules::code(), nodecare_model::FULL),
        (Rules::code(), nodecare_model::BOUNDED),
        // Two takeovers of one epoch: equally new copies that differ.
        (Rules::before(), nodecare_model::FULL),
    ] {
        let model = Replication::new(rules, bounds);
        let plain = model.with_reductions(Reductions {
            symmetry: false,
            ..Reductions::ALL
        });
        let properties = model.properties();
        for state in first_states(&model, 3_000) {
            let print = model.fingerprint(&state);
            let next = successors(&model, &state);
            for renamed in Replication::renamings(&state) {
                assert_eq!(model.fingerprint(&renamed), print, "{state:?}\n{renamed:?}");
                assert_eq!(successors(&model, &renamed), next, "{state:?}\n{renamed:?}");
                for property in &properties {
                    assert_eq!(
                        (property.condition)(&model, &renamed),
                        (property.condition)(&model, &state),
                        "{}: {state:?}\n{renamed:?}",
                        property.name
                    );
                }
                if plain.fingerprint(&renamed) != plain.fingerprint(&state) {
                    renamed_differently += 1;
                }
            }
        }
    }
    assert!(renamed_differently > 10_000, "{renamed_differently}");
}

/// `judge_push` judges each answer on its own, which the reduction relies on to keep only what
/// each answer counts for (kept, superseded, or nothing): for every list of answers from three
/// keepers, the judgement of the answers equals that of what each counts for.
#[test]
fn a_push_is_judged_from_what_each_answer_counts_for() {
    let pushed = Generation {
        epoch: 2,
        number: 1,
    };
    let generations = [(1, 5), (2, 0), (2, 1), (2, 2), (3, 0)]
        .map(|(epoch, number)| Generation { epoch, number });
    let mut answers: Vec<Option<PushReply>> = vec![None];
    for held in generations {
        answers.push(Some(PushReply::Accepted(held)));
        answers.push(Some(PushReply::Refused(held)));
    }
    for epoch in 0..4 {
        answers.push(Some(PushReply::Promised(epoch)));
    }
    let class = |outcome: &PushOutcome| match outcome {
        PushOutcome::Kept(by) => (0, by.len()),
        PushOutcome::Superseded { .. } => (1, 0),
        PushOutcome::NoQuorum(by) => (2, by.len()),
    };
    let names = ["k0", "k1", "k2"];
    let mut checked = 0;
    for a in &answers {
        for b in &answers {
            for c in &answers {
                let replies: Vec<(String, PushReply)> = [a, b, c]
                    .iter()
                    .zip(names)
                    .filter_map(|(reply, name)| Some((name.to_owned(), (**reply)?)))
                    .collect();
                let counted: Vec<(String, PushReply)> = replies
                    .iter()
                    .filter_map(|(name, reply)| {
                        match judge_push(pushed, 1, &[(name.clone(), *reply)]) {
                            PushOutcome::Kept(_) => {
                                Some((name.clone(), PushReply::Accepted(pushed)))
                            }
                            PushOutcome::Superseded { .. } => {
                                Some((name.clone(), PushReply::Promised(u64::MAX)))
                            }
                            PushOutcome::NoQuorum(_) => None,
                        }
                    })
                    .collect();
                assert_eq!(
                    class(&judge_push(pushed, 3, &replies)),
                    class(&judge_push(pushed, 3, &counted)),
                    "{replies:?}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, answers.len().pow(3));
}
