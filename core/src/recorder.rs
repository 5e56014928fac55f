//! The flight recorder: what a round saw and what the gate decided, kept so that a decision can
//! be explained after the fact (`nodecare explain`) and replayed ([`GateSnapshot::replay`]).
//!
//! A round is recorded when the gate judged anything (admitted or refused a proposal). A round
//! that decides exactly what the last recorded one decided, from the same view, verdicts and
//! policy, is not recorded again: the recorded round counts it ([`Recorded::repeats`]). The
//! store keeps each part of a record ([`Part`]) once, by its content.
//!
//! Everything here is pure: the coordinator's store reads and writes the records, and the
//! explanations are built from the records read back. The store also indexes each round as it
//! writes it ([`index`]), so that an explanation reads back only the rounds it shows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use nodecare_protocol::explain::{
    DomainHeld, ExplainedJudgement, ExplainedRound, Explanation, Subject,
};

use crate::gate::{
    Admitted, Caps, GateSnapshot, Holder, Judgement, NodeFacts, StorageProblem, View,
};

/// A node's agent as the round saw it, for people (`Ok`, `evacuate`, `unknown (stale: …)`).
pub type SeenVerdicts = BTreeMap<String, String>;

/// One round as the recorder keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// The round's time (Unix ms): its one clock.
    pub now_ms: u64,
    /// The coordinator (node) that ran it.
    pub coordinator: String,
    /// What the gate saw and decided: it replays to the same decision.
    pub gate: GateSnapshot,
    /// Every online node's verdict as the round read it.
    pub verdicts: SeenVerdicts,
}

// The gate's view is recorded without its time: `now_ms` is the round's (the view of a round
// always carries the round's time).

impl RoundRecord {
    /// Whether the round is worth recording: the gate judged something.
    pub fn worth_recording(&self) -> bool {
        !self.gate.decision.judgements.is_empty()
    }

    /// Whether `self` decided the same as `other` from the same input, apart from the time and
    /// the nodes' memory figures (free memory moves all the time; where it changes a decision,
    /// the decision differs: a capacity refusal names its figures).
    pub fn same_as(&self, other: &Self) -> bool {
        other.decided_as(&self.coordinator, &self.gate, &self.verdicts)
    }

    /// [`RoundRecord::same_as`] of a round not made into a record (yet): its coordinator, gate
    /// snapshot and verdicts.
    pub fn decided_as(
        &self,
        coordinator: &str,
        gate: &GateSnapshot,
        verdicts: &SeenVerdicts,
    ) -> bool {
        fn shape(facts: &NodeFacts) -> (&str, &str, bool, bool, bool, bool) {
            (
                &facts.group,
                &facts.domain,
                facts.vm_capable,
                facts.drained,
                facts.offline,
                facts.master,
            )
        }
        self.coordinator == coordinator
            && &self.verdicts == verdicts
            && self.gate.view.nodes.len() == gate.view.nodes.len()
            && self
                .gate
                .view
                .nodes
                .iter()
                .zip(&gate.view.nodes)
                .all(|((a, fa), (b, fb))| a == b && shape(fa) == shape(fb))
            && self.gate.view.storage == gate.view.storage
            && self.gate.policy == gate.policy
            && self.gate.in_force == gate.in_force
            && self.gate.decision == gate.decision
    }

    /// The record's parts, each serialized on its own (the store keeps each part once): the
    /// view's nodes and the verdicts in chunks of [`CHUNK_NODES`] nodes (by name), so that a
    /// node that changed costs its chunk, not the whole cluster.
    pub fn parts(&self) -> Result<Vec<(Part, Vec<u8>)>, serde_json::Error> {
        let chunks = |len: usize| u32::try_from(len.div_ceil(CHUNK_NODES)).unwrap_or(u32::MAX);
        let nodes: Vec<(&String, &NodeFacts)> = self.gate.view.nodes.iter().collect();
        let verdicts: Vec<(&String, &String)> = self.verdicts.iter().collect();
        let frame = Frame {
            storage: self.gate.view.storage.clone(),
            view_chunks: chunks(nodes.len()),
            verdict_chunks: chunks(verdicts.len()),
        };
        let mut parts = vec![
            (Part::Frame, serde_json::to_vec(&frame)?),
            (Part::Policy, serde_json::to_vec(&self.gate.policy)?),
            (Part::InForce, serde_json::to_vec(&self.gate.in_force)?),
            (Part::Decision, serde_json::to_vec(&self.gate.decision)?),
        ];
        for (i, chunk) in (0..).zip(nodes.chunks(CHUNK_NODES)) {
            parts.push((Part::View(i), serde_json::to_vec(chunk)?));
        }
        for (i, chunk) in (0..).zip(verdicts.chunks(CHUNK_NODES)) {
            parts.push((Part::Verdicts(i), serde_json::to_vec(chunk)?));
        }
        Ok(parts)
    }

    /// A record put back together from its parts (as [`RoundRecord::parts`] made them).
    pub fn from_parts(
        now_ms: u64,
        coordinator: String,
        parts: &BTreeMap<Part, Vec<u8>>,
    ) -> Result<Self, RecordError> {
        fn part<T: serde::de::DeserializeOwned>(
            parts: &BTreeMap<Part, Vec<u8>>,
            which: Part,
        ) -> Result<T, RecordError> {
            let bytes = parts.get(&which).ok_or(RecordError::Missing(which))?;
            serde_json::from_slice(bytes).map_err(|error| RecordError::Decode(which, error))
        }
        let frame: Frame = part(parts, Part::Frame)?;
        let mut nodes = BTreeMap::new();
        for i in 0..frame.view_chunks {
            let chunk: Vec<(String, NodeFacts)> = part(parts, Part::View(i))?;
            nodes.extend(chunk);
        }
        let mut verdicts = SeenVerdicts::new();
        for i in 0..frame.verdict_chunks {
            let chunk: Vec<(String, String)> = part(parts, Part::Verdicts(i))?;
            verdicts.extend(chunk);
        }
        Ok(Self {
            now_ms,
            coordinator,
            gate: GateSnapshot {
                view: std::sync::Arc::new(View {
                    nodes,
                    storage: frame.storage,
                    now_ms,
                }),
                policy: part(parts, Part::Policy)?,
                in_force: part(parts, Part::InForce)?,
                decision: part(parts, Part::Decision)?,
                recorded_after: crate::gate::InForce::default(),
            },
            verdicts,
        })
    }

    /// Whether the gate's decision replays the same from what it saw.
    pub fn replays(&self) -> bool {
        self.gate.replay() == self.gate.decision
    }
}

/// Nodes per chunk of a recorded view or of its verdicts.
pub const CHUNK_NODES: usize = 64;

/// What holds a record's chunks together: the view's storage health (the view without its time,
/// which is the round's) and how many chunks there are.
#[derive(Debug, Serialize, Deserialize)]
struct Frame {
    storage: Vec<StorageProblem>,
    view_chunks: u32,
    verdict_chunks: u32,
}

/// A part of a recorded round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// Storage health and the number of chunks.
    Frame,
    /// A chunk of the gate's view: [`CHUNK_NODES`] nodes with their failure domain, flags and
    /// memory.
    View(u32),
    /// The policy (caps, overrides, the breaker).
    Policy,
    /// What was in force before the proposals.
    InForce,
    /// The decision.
    Decision,
    /// A chunk of the verdicts seen.
    Verdicts(u32),
}

impl Part {
    /// Its name in the store (`frame`, `view/3`, `policy`, `in-force`, `decision`, `verdicts/0`).
    pub fn name(self) -> String {
        match self {
            Self::Frame => "frame".into(),
            Self::View(i) => format!("view/{i}"),
            Self::Policy => "policy".into(),
            Self::InForce => "in-force".into(),
            Self::Decision => "decision".into(),
            Self::Verdicts(i) => format!("verdicts/{i}"),
        }
    }

    /// The part named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        let chunk = |text: &str| text.parse::<u32>().ok();
        match name.split_once('/') {
            Some(("view", i)) => chunk(i).map(Self::View),
            Some(("verdicts", i)) => chunk(i).map(Self::Verdicts),
            Some(_) => None,
            None => match name {
                "frame" => Some(Self::Frame),
                "policy" => Some(Self::Policy),
                "in-force" => Some(Self::InForce),
                "decision" => Some(Self::Decision),
                _ => None,
            },
        }
    }
}

/// A record that cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A part is missing.
    #[error("recorded round: part {part} missing", part = .0.name())]
    Missing(Part),
    /// A part does not decode.
    #[error("recorded round: part {part}: {error}", part = .0.name(), error = .1)]
    Decode(Part, serde_json::Error),
}

/// A recorded round as the store gives it back.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Its number in the recorder (increasing).
    pub round: u64,
    /// The last round that decided the same (Unix ms).
    pub last_ms: u64,
    /// How many later rounds decided the same.
    pub repeats: u64,
    /// The round.
    pub record: RoundRecord,
}

/// Whether a judgement concerns `node`.
fn judges_node(judgement: &Judgement, node: &str) -> bool {
    judgement.proposal.disrupts.contains(node) || judgement.proposal.touches.contains(node)
}

/// The rule that admitted or refused a judgement, in words.
pub fn rule(judgement: &Judgement) -> String {
    match &judgement.outcome {
        Ok(Admitted::New) => "a new disruption, within the caps and failure domains".to_owned(),
        Ok(Admitted::Continuation) => {
            "the continuation of a disruption its holder holds".to_owned()
        }
        Ok(Admitted::Override { id }) => format!("a new disruption under operator override {id}"),
        Err(blocked) => blocked.rule().to_owned(),
    }
}

fn explained_judgement(judgement: &Judgement) -> ExplainedJudgement {
    let proposal = &judgement.proposal;
    ExplainedJudgement {
        duty: proposal.duty.as_str().to_owned(),
        holder: proposal.holder.to_string(),
        subject: proposal.subject.clone(),
        reason: proposal.reason.clone(),
        disrupts: proposal.disrupts.iter().cloned().collect(),
        touches: proposal.touches.iter().cloned().collect(),
        moves_memory_mib: proposal.moves_memory,
        admitted: judgement.outcome.is_ok(),
        rule: rule(judgement),
        blocked_by: judgement.outcome.as_ref().err().cloned(),
    }
}

fn caps_text(name: &str, caps: &Caps) -> String {
    match caps.max_disrupted_percent {
        Some(percent) => format!(
            "{name}: max_disrupted_nodes = {}, max_disrupted_percent = {percent}%",
            caps.max_disrupted_nodes
        ),
        None => format!("{name}: max_disrupted_nodes = {}", caps.max_disrupted_nodes),
    }
}

/// One recorded round, restricted to the judgements `keep` selects, with what a node (if any)
/// was held by and its verdict.
fn explained_round(
    recorded: &Recorded,
    node: Option<&str>,
    keep: impl Fn(&Judgement) -> bool,
) -> ExplainedRound {
    let gate = &recorded.record.gate;
    let caps = std::iter::once(caps_text("cluster", &gate.policy.cluster))
        .chain(
            gate.policy
                .groups
                .iter()
                .map(|(group, caps)| caps_text(&format!("group {group}"), caps)),
        )
        .collect();
    let in_force = gate
        .in_force
        .domains(&gate.view)
        .into_iter()
        .map(|(domain, held)| DomainHeld {
            domain,
            held: held
                .into_iter()
                .map(|(node, holder)| format!("{node}: {holder}"))
                .collect(),
        })
        .collect();
    ExplainedRound {
        round: recorded.round,
        at_ms: recorded.record.now_ms,
        last_ms: recorded.last_ms,
        repeats: recorded.repeats,
        coordinator: recorded.record.coordinator.clone(),
        verdict: node.and_then(|n| recorded.record.verdicts.get(n).cloned()),
        held_by: node.and_then(|n| {
            gate.in_force
                .nodes
                .get(n)
                .or_else(|| gate.in_force.touched.get(n))
                .map(ToString::to_string)
        }),
        breaker: gate.policy.breaker.clone(),
        caps,
        in_force,
        judgements: gate
            .decision
            .judgements
            .iter()
            .filter(|j| keep(j))
            .map(explained_judgement)
            .collect(),
    }
}

/// A whole round in explanation's words: every judgement, the caps and what was in force (a
/// what-if's simulated rounds are shown so).
pub fn explain_round(recorded: &Recorded) -> ExplainedRound {
    explained_round(recorded, None, |_| true)
}

/// Why `node` was (or was not) acted on at `at_ms` (`None`: the latest): the last recorded
/// round at or before that time whose gate judged a proposal on the node, or, when none did,
/// the last round at or before it (what held the node then). `rounds` in any order.
pub fn explain_node(rounds: &[Recorded], node: &str, at_ms: Option<u64>) -> Explanation {
    let subject = Subject::Node {
        node: node.to_owned(),
        at_ms,
    };
    let mut before: Vec<&Recorded> = rounds
        .iter()
        .filter(|r| at_ms.is_none_or(|at| r.record.now_ms <= at))
        .collect();
    before.sort_by_key(|r| std::cmp::Reverse((r.record.now_ms, r.round)));
    let judged = before.iter().find(|r| {
        r.record
            .gate
            .decision
            .judgements
            .iter()
            .any(|j| judges_node(j, node))
    });
    let (chosen, note) = match (judged, before.first()) {
        (Some(round), _) => (Some(*round), None),
        (None, Some(latest)) => (
            Some(*latest),
            Some(format!(
                "no recorded round judged a proposal on {node}; the latest recorded round shows what held it"
            )),
        ),
        (None, None) => (
            None,
            Some("no round is recorded at or before that time (nothing judged, or retention forgot it)".to_owned()),
        ),
    };
    if let Some(round) = chosen
        && !round.record.gate.view.nodes.contains_key(node)
        && !round.record.verdicts.contains_key(node)
    {
        return Explanation {
            subject,
            job: None,
            now: Vec::new(),
            rounds: Vec::new(),
            note: Some(format!("{node} is not a node of the cluster as recorded")),
        };
    }
    Explanation {
        subject,
        job: None,
        now: Vec::new(),
        rounds: chosen
            .map(|r| explained_round(r, Some(node), |j| judges_node(j, node)))
            .into_iter()
            .collect(),
        note,
    }
}

/// Why the record `id` (an incident, a campaign, a grant, …) went as it did: every recorded
/// round that judged its proposals, oldest first, with the node it disrupts.
pub fn explain_record(rounds: &[Recorded], id: uuid::Uuid) -> Explanation {
    let of = |j: &Judgement| j.proposal.holder.id() == Some(id);
    let mut judged: Vec<&Recorded> = rounds
        .iter()
        .filter(|r| r.record.gate.decision.judgements.iter().any(of))
        .collect();
    judged.sort_by_key(|r| (r.record.now_ms, r.round));
    // The rounds where its judgement changed (admitted, or refused by another rule or holder),
    // and the last one.
    let outcome = |r: &Recorded| {
        r.record
            .gate
            .decision
            .judgements
            .iter()
            .filter(|j| of(j))
            .map(|j| j.outcome.clone())
            .collect::<Vec<_>>()
    };
    let judged = changes(judged.into_iter().map(|r| (r, outcome(r))));
    record_explanation(
        id,
        judged.into_iter().map(|r| record_round(r, id)).collect(),
    )
}

/// Of rounds in order, each with its outcome, those whose outcome differs from the one before,
/// and the last.
fn changes<R, T: PartialEq>(rounds: impl IntoIterator<Item = (R, T)>) -> Vec<R> {
    let mut kept: Vec<(R, bool)> = Vec::new();
    let mut previous: Option<T> = None;
    for (round, outcome) in rounds {
        let changed = previous.as_ref() != Some(&outcome);
        previous = Some(outcome);
        kept.push((round, changed));
    }
    let last = kept.len().saturating_sub(1);
    kept.into_iter()
        .enumerate()
        .filter(|(i, (_, changed))| *changed || *i == last)
        .map(|(_, (round, _))| round)
        .collect()
}

/// The node a judgement of holder `id`'s in `decision` disrupts (its first judgement's first),
/// whose verdict and holder an explanation of that judgement shows.
pub fn disrupted_by(decision: &crate::gate::Decision, id: Option<uuid::Uuid>) -> Option<String> {
    decision
        .judgements
        .iter()
        .find(|j| j.proposal.holder.id() == id)
        .and_then(|j| j.proposal.disrupts.iter().next().cloned())
}

/// One round of [`explain_record`]: the judgements of record `id`, with the node it disrupts.
fn record_round(recorded: &Recorded, id: uuid::Uuid) -> ExplainedRound {
    let node = disrupted_by(&recorded.record.gate.decision, Some(id));
    explained_round(recorded, node.as_deref(), |j| {
        j.proposal.holder.id() == Some(id)
    })
}

/// The explanation of record `id` from its rounds ([`record_round`]).
fn record_explanation(id: uuid::Uuid, explained: Vec<ExplainedRound>) -> Explanation {
    let note = explained.is_empty().then(|| {
        format!("no recorded round judged a proposal of {id} (it proposed nothing to the gate, or retention forgot it)")
    });
    Explanation {
        subject: Subject::Record { id: id.to_string() },
        job: None,
        now: Vec::new(),
        rounds: explained,
        note,
    }
}

/// The recorded round an operation of `holder` recorded at `recorded_ms` came from: the last
/// round at or before that time that admitted the holder's proposal; else the last that judged
/// it; else the last recorded round at or before that time (a round that plans an operation is
/// always recorded, or counted as the repeat of the recorded round that decided the same).
pub fn round_of(rounds: &[Recorded], holder: &Holder, recorded_ms: u64) -> Option<u64> {
    round_of_id(rounds, holder.id(), recorded_ms)
}

/// [`round_of`] by the holder's uuid.
fn round_of_id(rounds: &[Recorded], id: Option<uuid::Uuid>, recorded_ms: u64) -> Option<u64> {
    let latest = |keep: &dyn Fn(&Judgement) -> bool, any: bool| {
        rounds
            .iter()
            .filter(|r| r.record.now_ms <= recorded_ms)
            .filter(|r| any || r.record.gate.decision.judgements.iter().any(keep))
            .max_by_key(|r| (r.record.now_ms, r.round))
            .map(|r| r.round)
    };
    let of = |j: &Judgement| j.proposal.holder.id() == id;
    latest(&|j| of(j) && j.outcome.is_ok(), false)
        .or_else(|| latest(&of, false))
        .or_else(|| latest(&|_| true, true))
}

/// The node a hold is on (`None` for an instance's move).
fn hold_node(hold: &crate::ledger::Hold) -> Option<String> {
    use crate::ledger::Hold;
    match hold {
        Hold::Drained { node }
        | Hold::Offline { node }
        | Hold::Rebooting { node }
        | Hold::Repairing { node }
        | Hold::Receiving { node }
        | Hold::Release { node } => Some(node.clone()),
        Hold::Moving { .. } => None,
    }
}

/// An operation nodecare submitted as a Ganeti job, as far as it is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// Its holder's uuid (the reason trail's `incident=`).
    pub trail: uuid::Uuid,
    /// Its holder, for people (`incident <uuid>`), when known.
    pub holder: Option<String>,
    /// Its key (the reason trail's `intent=`).
    pub intent: String,
    /// What it does.
    pub description: String,
    /// Where it is (`succeeded`, …).
    pub state: String,
    /// When it was recorded (Unix ms: the round's time), or submitted when only Ganeti knows it.
    pub recorded_ms: u64,
    /// The node it holds, when known.
    pub node: Option<String>,
}

impl Operation {
    /// The operation of a ledger entry.
    pub fn of_entry(entry: &crate::ledger::Entry) -> Option<Self> {
        Some(Self {
            trail: entry.trail()?,
            holder: Some(entry.holder.to_string()),
            intent: crate::ledger::trail_key(&entry.key),
            description: entry.description.clone(),
            state: entry.state.as_str().to_owned(),
            recorded_ms: entry.recorded_ms,
            node: entry.holds.iter().find_map(hold_node),
        })
    }
}

/// Why job `job` ran: the operation it belongs to (found in the ledger by the job id, or only
/// by the reason trail Ganeti keeps once the ledger forgot it) and the recorded round it came
/// from, with the judgements of its holder there.
pub fn explain_job(rounds: &[Recorded], job: u64, operation: &Operation) -> Explanation {
    let id = Some(operation.trail);
    let round = round_of_id(rounds, id, operation.recorded_ms);
    let judged = |r: &Recorded| {
        r.record
            .gate
            .decision
            .judgements
            .iter()
            .find(|j| j.proposal.holder.id() == id)
            .map(|j| j.proposal.clone())
    };
    let holder = operation.holder.clone().unwrap_or_else(|| {
        rounds
            .iter()
            .find_map(|r| judged(r).map(|p| p.holder.to_string()))
            .unwrap_or_else(|| format!("record {}", operation.trail))
    });
    let explained: Vec<ExplainedRound> = rounds
        .iter()
        .filter(|r| Some(r.round) == round)
        .map(|r| {
            let node = operation
                .node
                .clone()
                .or_else(|| disrupted_by(&r.record.gate.decision, id));
            explained_round(r, node.as_deref(), |j| j.proposal.holder.id() == id)
        })
        .collect();
    let note = explained.is_empty().then(|| {
        format!(
            "no round is recorded at or before {} ms, when the operation of {holder} was planned (retention forgot it)",
            operation.recorded_ms
        )
    });
    Explanation {
        subject: Subject::Job { id: job },
        job: Some(nodecare_protocol::explain::ExplainedJob {
            id: job,
            holder,
            trail: operation.trail.to_string(),
            intent: operation.intent.clone(),
            description: operation.description.clone(),
            state: operation.state.clone(),
            recorded_ms: operation.recorded_ms,
            round,
        }),
        now: Vec::new(),
        rounds: explained,
        note,
    }
}

pub mod index;

#[cfg(any(test, feature = "test-support"))]
pub mod tests_support {
    use std::collections::BTreeSet;

    use crate::gate::{
        Caps, Duty, GateSnapshot, Holder, InForce, NodeFacts, Policy, Proposal, View, decide,
    };

    use super::RoundRecord;

    /// A round at `now_ms` on `nodes` nodes (`node0` the master, racks `rack:0`..`rack:3`):
    /// `node1` is held by incident 1, incident 2 proposes to evacuate `node2` under a cap of
    /// `max` disrupted nodes (refused at 1, admitted at 2).
    pub fn round(now_ms: u64, max: usize, nodes: usize) -> RoundRecord {
        judging(now_ms, max, nodes, &[("node1", 1)], &[(2, "node2")])
    }

    /// Round `i` of a varied series on `nodes` nodes (at least 8), two rounds at each time
    /// (`1 000 * (i / 2 + 1)` ms): which nodes incidents hold, which incidents propose to
    /// evacuate which nodes and the cap change from round to round (incidents 2, 5, 9 propose,
    /// on `node2`, `node3` and the last node); every node has a verdict.
    pub fn varied(i: u64, nodes: usize) -> RoundRecord {
        let last = format!("node{}", nodes.saturating_sub(1));
        let mixed = i.wrapping_mul(2_654_435_761) >> 7;
        let held: &[(&str, u128)] = match mixed % 4 {
            0 => &[("node1", 1)],
            1 => &[("node2", 2)],
            2 => &[],
            _ => &[("node5", 9), ("node7", 5)],
        };
        let proposals: Vec<(u128, &str)> = match (mixed / 4) % 4 {
            0 => vec![(2, "node2")],
            1 => vec![(5, "node3"), (2, "node2")],
            2 => vec![(9, &last)],
            _ => vec![(5, "node7"), (9, &last), (2, "node2")],
        };
        let max = 1 + usize::from((mixed / 16) % 2 == 1);
        let mut record = judging(1_000 * (i / 2 + 1), max, nodes, held, &proposals);
        for n in 0..nodes {
            record
                .verdicts
                .entry(format!("node{n}"))
                .or_insert_with(|| "Ok".into());
        }
        record
    }

    /// A round at `now_ms` on `nodes` nodes (`node0` the master, racks `rack:0`..`rack:3`),
    /// `held` (node, incident) in force, incidents proposing to evacuate nodes (`proposals`:
    /// incident, node) under a cap of `max` disrupted nodes; `node2` says `evacuate`.
    pub fn judging(
        now_ms: u64,
        max: usize,
        nodes: usize,
        held: &[(&str, u128)],
        proposals: &[(u128, &str)],
    ) -> RoundRecord {
        let view = View {
            nodes: (0..nodes)
                .map(|n| {
                    let name = format!("node{n}");
                    let facts = NodeFacts {
                        name: name.clone(),
                        group: "default".into(),
                        domain: format!("rack:{}", n % 4),
                        vm_capable: true,
                        drained: false,
                        offline: false,
                        master: n == 0,
                        memory_free: Some(4096),
                        primary_memory: Some(1024),
                        primaries: 0,
                    };
                    (name, facts)
                })
                .collect(),
            storage: Vec::new(),
            now_ms,
        };
        let policy = Policy {
            cluster: Caps {
                max_disrupted_nodes: max,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
            ..Policy::default()
        };
        let incident = |n| Holder::Incident {
            id: uuid::Uuid::from_u128(n),
        };
        let in_force = InForce::new(
            &view,
            held.iter()
                .map(|(node, n)| ((*node).to_owned(), incident(*n))),
        );
        let proposals = proposals
            .iter()
            .map(|(n, node)| Proposal {
                duty: Duty::NodeRepair,
                holder: incident(*n),
                subject: format!("node {node}"),
                invasiveness: 2,
                since_ms: 5,
                disrupts: [(*node).to_owned()].into(),
                touches: BTreeSet::new(),
                fresh: false,
                moves_memory: Some(1024),
                after_releases: std::collections::BTreeMap::new(),
                reason: "evacuate".into(),
            })
            .collect();
        let decision = decide(&view, &policy, &in_force, proposals);
        RoundRecord {
            now_ms,
            coordinator: "node0".into(),
            gate: GateSnapshot {
                view: std::sync::Arc::new(view),
                policy,
                in_force,
                decision,
                ..GateSnapshot::default()
            },
            verdicts: [("node2".to_owned(), "evacuate".to_owned())]
                .into_iter()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
