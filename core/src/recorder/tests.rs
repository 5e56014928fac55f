#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::gate::{Caps, Duty, InForce, NodeFacts, Policy, Proposal, View, decide};

fn view(now_ms: u64) -> View {
    let nodes = [
        ("n1", "rack:a"),
        ("n2", "rack:a"),
        ("n3", "rack:b"),
        ("n4", "rack:b"),
    ]
    .into_iter()
    .map(|(name, domain)| {
        (
            name.to_owned(),
            NodeFacts {
                name: name.into(),
                group: "default".into(),
                domain: domain.into(),
                vm_capable: true,
                drained: false,
                offline: false,
                master: false,
                memory_free: Some(4096),
                primary_memory: Some(0),
                primaries: 0,
            },
        )
    })
    .collect();
    View {
        nodes,
        storage: Vec::new(),
        now_ms,
    }
}

fn repair(n: u128, node: &str) -> Proposal {
    Proposal {
        duty: Duty::NodeRepair,
        holder: Holder::Incident {
            id: Uuid::from_u128(n),
        },
        subject: format!("node {node}"),
        invasiveness: 2,
        since_ms: 10,
        disrupts: [node.to_owned()].into(),
        touches: BTreeSet::new(),
        fresh: false,
        moves_memory: Some(512),
        after_releases: BTreeMap::new(),
        reason: "evacuate: disk sda failing".into(),
    }
}

fn policy(max: usize) -> Policy {
    Policy {
        cluster: Caps {
            max_disrupted_nodes: max,
            max_disrupted_percent: None,
            min_healthy_nodes: 1,
        },
        ..Policy::default()
    }
}

/// A round at `now_ms` judging `proposals` with `held` in force.
fn round(now_ms: u64, held: &[(&str, u128)], proposals: Vec<Proposal>, max: usize) -> RoundRecord {
    let view = view(now_ms);
    let in_force = InForce::new(
        &view,
        held.iter().map(|(node, n)| {
            (
                (*node).to_owned(),
                Holder::Incident {
                    id: Uuid::from_u128(*n),
                },
            )
        }),
    );
    let policy = policy(max);
    let decision = decide(&view, &policy, &in_force, proposals);
    RoundRecord {
        now_ms,
        coordinator: "n1".into(),
        gate: GateSnapshot {
            view: view.into(),
            policy,
            in_force,
            decision,
            ..GateSnapshot::default()
        },
        verdicts: [
            ("n1".to_owned(), "Ok".to_owned()),
            ("n3".to_owned(), "evacuate".to_owned()),
        ]
        .into_iter()
        .collect(),
    }
}

fn recorded(number: u64, record: RoundRecord) -> Recorded {
    Recorded {
        round: number,
        last_ms: record.now_ms,
        repeats: 0,
        record,
    }
}

#[test]
fn a_record_goes_into_parts_and_back_whole_and_replays() {
    let record = round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1);
    let parts: BTreeMap<Part, Vec<u8>> = record.parts().unwrap().into_iter().collect();
    // Frame, policy, in force, decision, one chunk of nodes, one of verdicts.
    assert_eq!(parts.len(), 6);
    let back = RoundRecord::from_parts(1_000, "n1".into(), &parts).unwrap();
    assert_eq!(back, record);
    assert!(back.replays());
    // A missing or broken part is an error naming it, never a default.
    let mut missing = parts.clone();
    missing.remove(&Part::Decision);
    let error = RoundRecord::from_parts(1_000, "n1".into(), &missing).unwrap_err();
    assert_eq!(error.to_string(), "recorded round: part decision missing");
    let mut chunk = parts.clone();
    chunk.remove(&Part::View(0));
    let error = RoundRecord::from_parts(1_000, "n1".into(), &chunk).unwrap_err();
    assert_eq!(error.to_string(), "recorded round: part view/0 missing");
    let mut broken = parts;
    broken.insert(Part::Verdicts(0), b"{".to_vec());
    assert!(
        RoundRecord::from_parts(1_000, "n1".into(), &broken)
            .unwrap_err()
            .to_string()
            .starts_with("recorded round: part verdicts/0:")
    );
    for part in [
        Part::Frame,
        Part::View(0),
        Part::View(17),
        Part::Policy,
        Part::InForce,
        Part::Decision,
        Part::Verdicts(3),
    ] {
        assert_eq!(Part::parse(&part.name()), Some(part));
    }
    for bad in [
        "nope", "view/", "view/x", "views/1", "view/-1", "frame/1", "",
    ] {
        assert_eq!(Part::parse(bad), None, "{bad}");
    }
}

#[test]
fn a_large_view_goes_in_chunks_and_one_changed_node_changes_one_chunk() {
    let mut record = round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1);
    let template = record.gate.view.nodes["n4"].clone();
    for n in 0..200 {
        let name = format!("x{n:03}");
        let mut facts = template.clone();
        facts.name.clone_from(&name);
        std::sync::Arc::make_mut(&mut record.gate.view)
            .nodes
            .insert(name.clone(), facts);
        record.verdicts.insert(name, "Ok".into());
    }
    let parts: BTreeMap<Part, Vec<u8>> = record.parts().unwrap().into_iter().collect();
    // 204 nodes: four chunks of each.
    assert!(parts.contains_key(&Part::View(3)) && !parts.contains_key(&Part::View(4)));
    assert!(parts.contains_key(&Part::Verdicts(3)));
    assert_eq!(
        RoundRecord::from_parts(1_000, "n1".into(), &parts).unwrap(),
        record
    );
    let mut changed = record.clone();
    if let Some(facts) = std::sync::Arc::make_mut(&mut changed.gate.view)
        .nodes
        .get_mut("x150")
    {
        facts.drained = true;
    }
    let other: BTreeMap<Part, Vec<u8>> = changed.parts().unwrap().into_iter().collect();
    let differing: Vec<Part> = parts
        .iter()
        .filter(|(part, bytes)| other.get(part) != Some(bytes))
        .map(|(part, _)| *part)
        .collect();
    assert_eq!(differing, vec![Part::View(2)]);
}

#[test]
fn a_record_whose_decision_was_changed_does_not_replay() {
    let mut record = round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1);
    record.gate.decision.judgements[0].outcome = Ok(Admitted::New);
    assert!(!record.replays());
}

#[test]
fn only_rounds_that_judge_something_are_worth_recording() {
    assert!(round(1_000, &[], vec![repair(2, "n3")], 1).worth_recording());
    assert!(!round(1_000, &[("n1", 1)], Vec::new(), 1).worth_recording());
}

#[test]
fn the_same_decision_later_is_the_same_and_any_change_is_not() {
    let first = round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1);
    let later = round(9_000, &[("n1", 1)], vec![repair(2, "n3")], 1);
    assert!(later.same_as(&first));
    // Another cap, another holder in force, another verdict, another coordinator.
    assert!(!round(9_000, &[("n1", 1)], vec![repair(2, "n3")], 2).same_as(&first));
    assert!(!round(9_000, &[("n2", 1)], vec![repair(2, "n3")], 1).same_as(&first));
    let mut verdict = later.clone();
    verdict
        .verdicts
        .insert("n4".into(), "unknown (unreachable)".into());
    assert!(!verdict.same_as(&first));
    let mut coordinator = later.clone();
    coordinator.coordinator = "n2".into();
    assert!(!coordinator.same_as(&first));
    // Free memory moves: the same; a node drained: not.
    let mut memory = later.clone();
    for facts in std::sync::Arc::make_mut(&mut memory.gate.view)
        .nodes
        .values_mut()
    {
        facts.memory_free = Some(1234);
    }
    assert!(memory.same_as(&first));
    let mut drained = later;
    if let Some(facts) = std::sync::Arc::make_mut(&mut drained.gate.view)
        .nodes
        .get_mut("n4")
    {
        facts.drained = true;
    }
    assert!(!drained.same_as(&first));
}

#[test]
fn a_refused_node_is_explained_with_its_rule_and_the_holders_in_force() {
    let rounds = vec![
        recorded(1, round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1)),
        recorded(2, round(5_000, &[("n3", 2)], vec![repair(2, "n3")], 1)),
    ];
    let explanation = explain_node(&rounds, "n3", Some(2_000));
    assert_eq!(explanation.note, None);
    let [round] = explanation.rounds.as_slice() else {
        panic!("one round: {explanation:?}");
    };
    assert_eq!(round.round, 1);
    assert_eq!(round.verdict.as_deref(), Some("evacuate"));
    assert_eq!(round.held_by, None);
    assert_eq!(round.caps, vec!["cluster: max_disrupted_nodes = 1"]);
    assert_eq!(round.in_force.len(), 1);
    assert_eq!(round.in_force[0].domain, "rack:a");
    assert_eq!(
        round.in_force[0].held,
        vec![format!("n1: incident {}", Uuid::from_u128(1))]
    );
    let [judgement] = round.judgements.as_slice() else {
        panic!("one judgement");
    };
    assert!(!judgement.admitted);
    let blocked = judgement.blocked_by.as_ref().expect("refused");
    assert_eq!(judgement.rule, blocked.rule());
    assert_eq!(judgement.moves_memory_mib, Some(512));
    // The latest round: the node is held by its incident, admitted as a continuation.
    let latest = explain_node(&rounds, "n3", None);
    assert_eq!(latest.rounds[0].round, 2);
    assert_eq!(
        latest.rounds[0].held_by,
        Some(format!("incident {}", Uuid::from_u128(2)))
    );
    assert!(latest.rounds[0].judgements[0].admitted);
    assert_eq!(
        latest.rounds[0].judgements[0].rule,
        "the continuation of a disruption its holder holds"
    );
}

#[test]
fn a_node_nobody_proposed_for_shows_the_latest_round_and_says_so() {
    let rounds = vec![recorded(
        1,
        round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1),
    )];
    let explanation = explain_node(&rounds, "n4", None);
    assert_eq!(explanation.rounds.len(), 1);
    assert!(explanation.rounds[0].judgements.is_empty());
    assert!(
        explanation
            .note
            .unwrap()
            .contains("no recorded round judged")
    );
    let unknown = explain_node(&rounds, "n9", None);
    assert!(unknown.rounds.is_empty());
    assert!(unknown.note.unwrap().contains("not a node"));
    let before = explain_node(&rounds, "n3", Some(10));
    assert!(before.rounds.is_empty());
    assert!(before.note.unwrap().contains("no round is recorded"));
}

#[test]
fn a_record_is_explained_by_each_round_its_judgement_changed_and_the_last() {
    let refused = |n, at| recorded(n, round(at, &[("n1", 1)], vec![repair(2, "n3")], 1));
    let rounds = vec![
        refused(1, 1_000),
        // The same refusal again (another round whose decision differs elsewhere): not shown.
        refused(2, 2_000),
        recorded(3, round(3_000, &[], vec![repair(2, "n3")], 1)),
        recorded(4, round(4_000, &[("n3", 2)], vec![repair(2, "n3")], 1)),
        recorded(5, round(5_000, &[("n3", 2)], vec![repair(2, "n3")], 1)),
        recorded(6, round(6_000, &[("n1", 9)], vec![repair(9, "n1")], 1)),
    ];
    let explanation = explain_record(&rounds, Uuid::from_u128(2));
    let numbers: Vec<u64> = explanation.rounds.iter().map(|r| r.round).collect();
    assert_eq!(numbers, vec![1, 3, 4, 5]);
    assert!(!explanation.rounds[0].judgements[0].admitted);
    assert_eq!(
        explanation.rounds[1].judgements[0].rule,
        "a new disruption, within the caps and failure domains"
    );
    assert!(
        explain_record(&rounds, Uuid::from_u128(77))
            .note
            .unwrap()
            .contains("no recorded round judged")
    );
}

#[test]
fn an_operation_leads_to_the_round_that_admitted_its_holder() {
    let rounds = vec![
        recorded(1, round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1)),
        recorded(2, round(3_000, &[], vec![repair(2, "n3")], 1)),
        recorded(3, round(8_000, &[("n3", 2)], vec![repair(2, "n3")], 1)),
    ];
    let holder = Holder::Incident {
        id: Uuid::from_u128(2),
    };
    assert_eq!(round_of(&rounds, &holder, 3_000), Some(2));
    assert_eq!(round_of(&rounds, &holder, 7_999), Some(2));
    assert_eq!(round_of(&rounds, &holder, 9_000), Some(3));
    // Refused only before that time: the round that refused it.
    assert_eq!(round_of(&rounds, &holder, 2_000), Some(1));
    // Another holder's operation: the round in force when it was recorded.
    let other = Holder::Campaign {
        id: Uuid::from_u128(5),
    };
    assert_eq!(round_of(&rounds, &other, 8_000), Some(3));
    assert_eq!(round_of(&rounds, &other, 7_999), Some(2));
    // Before any recorded round: none.
    assert_eq!(round_of(&rounds, &other, 999), None);
}

#[test]
fn a_job_is_explained_by_its_operation_and_the_round_that_admitted_its_holder() {
    use crate::ledger::{Action, Entry, Hold, Op};
    let rounds = vec![
        recorded(1, round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1)),
        recorded(2, round(3_000, &[], vec![repair(2, "n3")], 1)),
    ];
    let holder = Holder::Incident {
        id: Uuid::from_u128(2),
    };
    let mut entry = Entry::new(
        holder.clone(),
        "drain n3",
        Action::ganeti(Op::SetNodeDrained {
            node: "n3".into(),
            drained: true,
        }),
        "drain n3",
        3_000,
        9_000,
    )
    .holding([Hold::Drained { node: "n3".into() }]);
    entry.job = Some(42);
    let explanation = explain_job(&rounds, 42, &Operation::of_entry(&entry).unwrap());
    let job = explanation.job.as_ref().expect("the job");
    assert_eq!(job.round, Some(2));
    assert_eq!(job.intent, "drain_n3");
    assert_eq!(job.trail, Uuid::from_u128(2).to_string());
    assert_eq!(job.state, "recorded");
    assert_eq!(explanation.rounds.len(), 1);
    assert_eq!(explanation.rounds[0].verdict.as_deref(), Some("evacuate"));
    assert!(explanation.rounds[0].judgements[0].admitted);
    assert_eq!(explanation.note, None);
    // Recorded before any round: no round, said so.
    entry.recorded_ms = 999;
    let orphan = explain_job(&rounds, 42, &Operation::of_entry(&entry).unwrap());
    assert_eq!(orphan.job.unwrap().round, None);
    assert!(orphan.rounds.is_empty());
    assert!(orphan.note.unwrap().contains("no round is recorded"));
}

#[test]
fn a_job_whose_record_was_forgotten_is_explained_from_its_reason_trail() {
    let rounds = vec![
        recorded(1, round(1_000, &[("n1", 1)], vec![repair(2, "n3")], 1)),
        recorded(2, round(3_000, &[], vec![repair(2, "n3")], 1)),
    ];
    let operation = Operation {
        trail: Uuid::from_u128(2),
        holder: None,
        intent: "drain".into(),
        description: "drain n3".into(),
        state: "unknown to nodecare (its record was forgotten)".into(),
        recorded_ms: 3_500,
        node: None,
    };
    let explanation = explain_job(&rounds, 7, &operation);
    let job = explanation.job.unwrap();
    assert_eq!(job.round, Some(2));
    assert_eq!(job.holder, format!("incident {}", Uuid::from_u128(2)));
    assert_eq!(explanation.rounds[0].verdict.as_deref(), Some("evacuate"));
    // A trail no round names: the record's uuid, and the round in force then.
    let unknown = Operation {
        trail: Uuid::from_u128(77),
        ..operation
    };
    let explanation = explain_job(&rounds, 7, &unknown);
    let job = explanation.job.unwrap();
    assert_eq!(job.holder, format!("record {}", Uuid::from_u128(77)));
    assert_eq!(job.round, Some(2));
}

/// The rounds of a slice as an index finds them (the store's index in memory), reading each round
/// it is asked for through its parts, as the store does; counts the parts it decodes.
struct Memory<'a> {
    rounds: &'a [Recorded],
    decoded: std::cell::Cell<usize>,
}

impl Memory<'_> {
    fn newest(&self, at_most_ms: Option<u64>, keep: impl Fn(&Recorded) -> bool) -> Option<u64> {
        self.rounds
            .iter()
            .filter(|r| at_most_ms.is_none_or(|at| r.record.now_ms <= at))
            .filter(|r| keep(r))
            .max_by_key(|r| (r.record.now_ms, r.round))
            .map(|r| r.round)
    }
}

impl index::RoundIndex for Memory<'_> {
    type Error = RecordError;

    fn latest_judging_node(&self, node: &str, at: Option<u64>) -> Result<Option<u64>, RecordError> {
        Ok(self.newest(at, |r| {
            index::index_decision(&r.record.gate.decision)
                .unwrap()
                .iter()
                .any(|j| j.nodes.contains(node))
        }))
    }

    fn latest_judging(
        &self,
        id: Uuid,
        admitted_only: bool,
        at: Option<u64>,
    ) -> Result<Option<u64>, RecordError> {
        Ok(self.newest(at, |r| {
            index::index_decision(&r.record.gate.decision)
                .unwrap()
                .iter()
                .any(|j| j.holder == Some(id) && (j.admitted || !admitted_only))
        }))
    }

    fn latest(&self, at: Option<u64>) -> Result<Option<u64>, RecordError> {
        Ok(self.newest(at, |_| true))
    }

    fn judgements_of(&self, id: Uuid) -> Result<Vec<index::HolderJudged>, RecordError> {
        let mut rounds: Vec<&Recorded> = self.rounds.iter().collect();
        rounds.sort_by_key(|r| (r.record.now_ms, r.round));
        Ok(rounds
            .into_iter()
            .flat_map(|r| {
                index::index_decision(&r.record.gate.decision)
                    .unwrap()
                    .into_iter()
                    .filter(|j| j.holder == Some(id))
                    .map(|j| index::HolderJudged {
                        round: r.round,
                        outcome: j.outcome,
                    })
            })
            .collect())
    }

    fn excerpt(
        &self,
        round: u64,
        focus: &dyn Fn(&crate::gate::Decision) -> Option<String>,
    ) -> Result<Recorded, RecordError> {
        let r = self.rounds.iter().find(|r| r.round == round).unwrap();
        let parts: BTreeMap<Part, Vec<u8>> = r.record.parts().unwrap().into_iter().collect();
        let whole = index::EXCERPT_PARTS.map(|part| parts[&part].as_slice());
        let mut excerpt = index::Excerpt::new(
            r.round,
            r.record.now_ms,
            r.last_ms,
            r.repeats,
            r.record.coordinator.clone(),
            whole,
            focus,
        )?;
        let bounds = r.record.chunk_bounds();
        let chunks = excerpt.chunks_to_read(
            bounds
                .iter()
                .map(|(part, first, last)| (*part, Some((first.as_str(), last.as_str())))),
        );
        self.decoded.set(self.decoded.get() + 4 + chunks.len());
        for part in chunks {
            excerpt.add(part, &parts[&part])?;
        }
        Ok(excerpt.finish())
    }
}

/// `record` with 200 more nodes (`x000`..`x199`, each with a verdict): four chunks of each.
fn big(mut record: RoundRecord) -> RoundRecord {
    let template = record.gate.view.nodes["n4"].clone();
    for n in 0..200 {
        let name = format!("x{n:03}");
        let mut facts = template.clone();
        facts.name.clone_from(&name);
        facts.domain = format!("rack:{}", n % 3);
        std::sync::Arc::make_mut(&mut record.gate.view)
            .nodes
            .insert(name.clone(), facts);
        record.verdicts.insert(name, format!("Ok {n}"));
    }
    record
}

/// Rounds of several holders, nodes and outcomes, two at each time, newest first (as the store
/// gives them).
fn varied_rounds() -> Vec<Recorded> {
    let mut seed: u64 = 7;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    let mut rounds: Vec<Recorded> = (0..60)
        .map(|i| {
            let held: &[(&str, u128)] = match next(4) {
                0 => &[("n1", 1)],
                1 => &[("n3", 2)],
                2 => &[],
                _ => &[("x050", 9), ("x180", 5)],
            };
            let proposals = match next(4) {
                0 => vec![repair(2, "n3")],
                1 => vec![repair(5, "n2"), repair(2, "n3")],
                2 => vec![repair(9, "x120")],
                _ => vec![repair(5, "x180"), repair(9, "x120"), repair(2, "n3")],
            };
            let max = 1 + usize::try_from(next(2)).unwrap();
            recorded(i + 1, big(round(1_000 * (i / 2 + 1), held, proposals, max)))
        })
        .collect();
    rounds.reverse();
    rounds
}

#[test]
fn explanations_through_the_index_are_those_of_every_round_and_read_only_what_they_show() {
    let rounds = varied_rounds();
    let memory = Memory {
        rounds: &rounds,
        decoded: std::cell::Cell::new(0),
    };
    let times = [
        None,
        Some(0),
        Some(999),
        Some(1_000),
        Some(7_500),
        Some(18_000),
        Some(40_000),
    ];
    for node in [
        "n1", "n2", "n3", "n4", "x000", "x050", "x120", "x180", "x199", "nope",
    ] {
        for at in times {
            memory.decoded.set(0);
            assert_eq!(
                index::explain_node_indexed(&memory, node, at).unwrap(),
                explain_node(&rounds, node, at),
                "{node} at {at:?}"
            );
            // One round: its 4 whole parts, at most 3 chunks of the view (the node's and those
            // of the nodes in force) and 1 of the verdicts (the node's) of the 4 of each.
            assert!(
                memory.decoded.get() <= 8,
                "{node} at {at:?}: {}",
                memory.decoded.get()
            );
        }
    }
    for id in [1, 2, 5, 9, 77] {
        let id = Uuid::from_u128(id);
        assert_eq!(
            index::explain_record_indexed(&memory, id).unwrap(),
            explain_record(&rounds, id),
            "{id}"
        );
    }
    for trail in [2, 5, 9, 77] {
        for holder in [Some(format!("incident {}", Uuid::from_u128(trail))), None] {
            for node in [Some("x180".to_owned()), None] {
                for recorded_ms in [0, 999, 1_000, 4_000, 12_345, 30_000, 99_000] {
                    let operation = Operation {
                        trail: Uuid::from_u128(trail),
                        holder: holder.clone(),
                        intent: "drain".into(),
                        description: "drain".into(),
                        state: "succeeded".into(),
                        recorded_ms,
                        node: node.clone(),
                    };
                    assert_eq!(
                        index::explain_job_indexed(&memory, 7, &operation).unwrap(),
                        explain_job(&rounds, 7, &operation),
                        "{operation:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_chunk_is_read_when_it_may_hold_a_node_shown_or_its_bounds_are_unknown() {
    let record = big(round(1_000, &[("n1", 1)], vec![repair(2, "x120")], 1));
    let parts: BTreeMap<Part, Vec<u8>> = record.parts().unwrap().into_iter().collect();
    let whole = index::EXCERPT_PARTS.map(|part| parts[&part].as_slice());
    let excerpt = index::Excerpt::new(3, 1_000, 1_000, 0, "n1".into(), whole, &|d| {
        disrupted_by(d, Some(Uuid::from_u128(2)))
    })
    .unwrap();
    let bounds = record.chunk_bounds();
    // n1..n4 and x000..x059 in the first chunk, then x060..x123, x124..x187, x188..x199.
    assert_eq!(bounds[1], (Part::View(1), "x060".into(), "x123".into()));
    let known = bounds
        .iter()
        .map(|(part, first, last)| (*part, Some((first.as_str(), last.as_str()))));
    assert_eq!(
        excerpt.chunks_to_read(known),
        vec![Part::View(0), Part::View(1), Part::Verdicts(1)]
    );
    let unknown = bounds.iter().map(|(part, _, _)| (*part, None));
    assert_eq!(excerpt.chunks_to_read(unknown).len(), 8);
    let mut excerpt = excerpt;
    for part in [
        Part::View(0),
        Part::View(1),
        Part::Verdicts(0),
        Part::Verdicts(1),
    ] {
        excerpt.add(part, &parts[&part]).unwrap();
    }
    let read = excerpt.finish();
    assert_eq!(
        read.record.gate.view.nodes.keys().collect::<Vec<_>>(),
        vec!["n1", "x120"]
    );
    assert_eq!(
        read.record.verdicts,
        [("x120".to_owned(), "Ok 120".to_owned())]
            .into_iter()
            .collect()
    );
    assert_eq!(read.record.gate.decision, record.gate.decision);
}

#[test]
fn the_index_of_a_decision_names_each_judgement_s_holder_outcome_and_nodes() {
    let mut proposal = repair(5, "n2");
    proposal.touches.insert("n4".into());
    let record = round(1_000, &[("n1", 1)], vec![proposal, repair(2, "n3")], 2);
    let index = index::index_decision(&record.gate.decision).unwrap();
    assert_eq!(index.len(), 2);
    assert_eq!(index[0].seq, 0);
    assert_eq!(index[0].holder, Some(Uuid::from_u128(5)));
    assert_eq!(
        index[0].nodes,
        ["n2".to_owned(), "n4".to_owned()].into_iter().collect()
    );
    assert_eq!(index[1].holder, Some(Uuid::from_u128(2)));
    assert!(index[0].admitted && !index[1].admitted);
    assert_ne!(index[0].outcome, index[1].outcome);
}
