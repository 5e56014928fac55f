//! The recorder's index: what each recorded round judged (each judgement's holder, outcome and
//! nodes) and where each chunk of its view and verdicts begins and ends, kept beside the round's
//! parts when it is recorded. An explanation chooses the rounds it shows from the index alone
//! ([`RoundIndex`]), then reads only those rounds, and of their view and verdicts only the
//! chunks holding the nodes it shows ([`Excerpt`]): its cost is that of what it prints, not of
//! the rounds kept.
//!
//! The explanations are the same as [`super::explain_node`], [`super::explain_record`] and
//! [`super::explain_job`] over every round of the index's window: they are those functions,
//! given the rounds the index chose.

use std::collections::{BTreeMap, BTreeSet};

use nodecare_protocol::explain::Explanation;
use uuid::Uuid;

use super::{
    Frame, Operation, Part, RecordError, Recorded, RoundRecord, SeenVerdicts, changes,
    disrupted_by, explain_job, explain_node, record_explanation, record_round,
};
use crate::gate::{Decision, GateSnapshot, InForce, NodeFacts, Policy, View};

/// What the index keeps of one judgement of a recorded round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedJudgement {
    /// Its place in the decision (the order judged).
    pub seq: u32,
    /// Its holder's uuid (none for a holder without one).
    pub holder: Option<Uuid>,
    /// Admitted.
    pub admitted: bool,
    /// The outcome (how admitted, or what blocked it) as JSON: equal outcomes, equal texts.
    pub outcome: String,
    /// The nodes its proposal disrupts or touches.
    pub nodes: BTreeSet<String>,
}

/// The index of a round's decision: one entry per judgement, in the order judged.
pub fn index_decision(decision: &Decision) -> Result<Vec<IndexedJudgement>, serde_json::Error> {
    (0..)
        .zip(&decision.judgements)
        .map(|(seq, judgement)| {
            let proposal = &judgement.proposal;
            Ok(IndexedJudgement {
                seq,
                holder: proposal.holder.id(),
                admitted: judgement.outcome.is_ok(),
                outcome: serde_json::to_string(&judgement.outcome)?,
                nodes: proposal
                    .disrupts
                    .iter()
                    .chain(&proposal.touches)
                    .cloned()
                    .collect(),
            })
        })
        .collect()
}

impl RoundRecord {
    /// The first and the last node of each chunk of its view and of its verdicts (as
    /// [`RoundRecord::parts`] cuts them): the chunk holding a node is found without reading any.
    pub fn chunk_bounds(&self) -> Vec<(Part, String, String)> {
        fn bounds<'a, T: 'a>(
            keys: impl Iterator<Item = (&'a String, T)>,
            part: fn(u32) -> Part,
        ) -> Vec<(Part, String, String)> {
            let keys: Vec<&String> = keys.map(|(key, _)| key).collect();
            (0..)
                .zip(keys.chunks(super::CHUNK_NODES))
                .filter_map(|(i, chunk)| {
                    Some((part(i), (*chunk.first()?).clone(), (*chunk.last()?).clone()))
                })
                .collect()
        }
        let mut all = bounds(self.gate.view.nodes.iter(), Part::View);
        all.extend(bounds(self.verdicts.iter(), Part::Verdicts));
        all
    }
}

/// A judgement of one holder in a recorded round, as the index gives it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderJudged {
    /// The round.
    pub round: u64,
    /// Its outcome, by a key equal for equal outcomes (what [`IndexedJudgement::outcome`] is, or
    /// a digest of it).
    pub outcome: String,
}

/// The recorded rounds an explanation looks through (a window: the newest rounds at or before a
/// time), as an index finds them. A round is newer than another when its time is later, or at
/// the same time when its number is higher.
pub trait RoundIndex {
    /// What reading the index or a round can fail with.
    type Error;

    /// The newest round at or before `at_most_ms` (any time: `None`) whose gate judged a
    /// proposal disrupting or touching `node`.
    fn latest_judging_node(
        &self,
        node: &str,
        at_most_ms: Option<u64>,
    ) -> Result<Option<u64>, Self::Error>;

    /// The newest round at or before `at_most_ms` whose gate judged a proposal of holder `id`
    /// (admitted, with `admitted_only`).
    fn latest_judging(
        &self,
        id: Uuid,
        admitted_only: bool,
        at_most_ms: Option<u64>,
    ) -> Result<Option<u64>, Self::Error>;

    /// The newest round at or before `at_most_ms`.
    fn latest(&self, at_most_ms: Option<u64>) -> Result<Option<u64>, Self::Error>;

    /// Every judgement of holder `id`, oldest round first, in the order judged within a round.
    fn judgements_of(&self, id: Uuid) -> Result<Vec<HolderJudged>, Self::Error>;

    /// Round `round` read for an explanation ([`Excerpt`]): `focus` names, from its decision, the
    /// node whose verdict the explanation shows.
    fn excerpt(
        &self,
        round: u64,
        focus: &dyn Fn(&Decision) -> Option<String>,
    ) -> Result<Recorded, Self::Error>;
}

/// A recorded round read in part for an explanation: its frame, policy, what was in force and
/// its decision whole; of its view only the nodes the explanation shows (its focus, and every
/// node in force, whose failure domain it names), of its verdicts only the focus's. Its view is
/// not the round's whole view: it explains, it does not replay.
#[derive(Debug)]
pub struct Excerpt {
    recorded: Recorded,
    frame: Frame,
    /// The nodes whose facts it keeps: the focus and the nodes in force.
    wanted: BTreeSet<String>,
    /// The node whose verdict it keeps.
    focus: Option<String>,
    nodes: BTreeMap<String, NodeFacts>,
    verdicts: SeenVerdicts,
}

/// A part's bytes decoded.
fn decode<T: serde::de::DeserializeOwned>(part: Part, bytes: &[u8]) -> Result<T, RecordError> {
    serde_json::from_slice(bytes).map_err(|error| RecordError::Decode(part, error))
}

/// The whole parts of a round an [`Excerpt`] reads first.
pub const EXCERPT_PARTS: [Part; 4] = [Part::Frame, Part::Policy, Part::InForce, Part::Decision];

impl Excerpt {
    /// Round `round` (recorded at `at_ms`, repeated `repeats` times until `last_ms`, by
    /// `coordinator`) from its parts [`EXCERPT_PARTS`], in that order; `focus` names the node
    /// whose verdict the explanation shows.
    pub fn new(
        round: u64,
        at_ms: u64,
        last_ms: u64,
        repeats: u64,
        coordinator: String,
        parts: [&[u8]; 4],
        focus: &dyn Fn(&Decision) -> Option<String>,
    ) -> Result<Self, RecordError> {
        let [frame, policy, in_force, decision] = parts;
        let frame: Frame = decode(Part::Frame, frame)?;
        let policy: Policy = decode(Part::Policy, policy)?;
        let in_force: InForce = decode(Part::InForce, in_force)?;
        let decision: Decision = decode(Part::Decision, decision)?;
        let focus = focus(&decision);
        let wanted = in_force
            .nodes
            .keys()
            .cloned()
            .chain(focus.clone())
            .collect();
        Ok(Self {
            recorded: Recorded {
                round,
                last_ms,
                repeats,
                record: RoundRecord {
                    now_ms: at_ms,
                    coordinator,
                    gate: GateSnapshot {
                        policy,
                        in_force,
                        decision,
                        ..GateSnapshot::default()
                    },
                    verdicts: SeenVerdicts::new(),
                },
            },
            frame,
            wanted,
            focus,
            nodes: BTreeMap::new(),
            verdicts: SeenVerdicts::new(),
        })
    }

    /// The chunks of its view and verdicts (each with its first and last node, when known) it
    /// reads: those of the view that may hold a node it shows, those of the verdicts that may
    /// hold its focus. A chunk whose bounds are unknown (recorded before the index kept them)
    /// is read.
    pub fn chunks_to_read<'a>(
        &self,
        chunks: impl IntoIterator<Item = (Part, Option<(&'a str, &'a str)>)>,
    ) -> Vec<Part> {
        let (view, verdicts) = (self.frame.view_chunks, self.frame.verdict_chunks);
        let focus: BTreeSet<String> = self.focus.iter().cloned().collect();
        let holds = |nodes: &BTreeSet<String>, bounds: Option<(&str, &str)>| {
            bounds.is_none_or(|(first, last)| {
                nodes
                    .range::<str, _>((
                        std::ops::Bound::Included(first),
                        std::ops::Bound::Included(last),
                    ))
                    .next()
                    .is_some()
            })
        };
        chunks
            .into_iter()
            .filter(|(part, bounds)| match part {
                Part::View(i) => *i < view && holds(&self.wanted, *bounds),
                Part::Verdicts(i) => *i < verdicts && holds(&focus, *bounds),
                _ => false,
            })
            .map(|(part, _)| part)
            .collect()
    }

    /// Adds chunk `part` (of the view or of the verdicts): of its nodes, those it shows.
    pub fn add(&mut self, part: Part, bytes: &[u8]) -> Result<(), RecordError> {
        match part {
            Part::View(_) => {
                let chunk: Vec<(String, NodeFacts)> = decode(part, bytes)?;
                self.nodes.extend(
                    chunk
                        .into_iter()
                        .filter(|(node, _)| self.wanted.contains(node)),
                );
            }
            Part::Verdicts(_) => {
                let chunk: Vec<(String, String)> = decode(part, bytes)?;
                self.verdicts.extend(
                    chunk
                        .into_iter()
                        .filter(|(node, _)| self.focus.as_ref() == Some(node)),
                );
            }
            Part::Frame | Part::Policy | Part::InForce | Part::Decision => {}
        }
        Ok(())
    }

    /// The round as read.
    pub fn finish(self) -> Recorded {
        let Self {
            mut recorded,
            frame,
            nodes,
            verdicts,
            ..
        } = self;
        recorded.record.gate.view = std::sync::Arc::new(View {
            nodes,
            storage: frame.storage,
            now_ms: recorded.record.now_ms,
        });
        recorded.record.verdicts = verdicts;
        recorded
    }
}

/// [`explain_node`] over the rounds of `index`: the newest round at or before `at_ms` that judged
/// a proposal on `node`, else the newest at or before it; only that round is read.
pub fn explain_node_indexed<I: RoundIndex + ?Sized>(
    index: &I,
    node: &str,
    at_ms: Option<u64>,
) -> Result<Explanation, I::Error> {
    let chosen = match index.latest_judging_node(node, at_ms)? {
        Some(round) => Some(round),
        None => index.latest(at_ms)?,
    };
    let focus = |_: &Decision| Some(node.to_owned());
    let rounds = chosen
        .map(|round| index.excerpt(round, &focus))
        .transpose()?;
    Ok(explain_node(rounds.as_slice(), node, at_ms))
}

/// [`super::explain_record`] over the rounds of `index`: the index tells the rounds where the
/// judgement of record `id` changed, and the last; only those are read, one at a time.
pub fn explain_record_indexed<I: RoundIndex + ?Sized>(
    index: &I,
    id: Uuid,
) -> Result<Explanation, I::Error> {
    let mut rounds: Vec<(u64, Vec<String>)> = Vec::new();
    for judged in index.judgements_of(id)? {
        match rounds.last_mut() {
            Some((round, outcomes)) if *round == judged.round => outcomes.push(judged.outcome),
            _ => rounds.push((judged.round, vec![judged.outcome])),
        }
    }
    let focus = |decision: &Decision| disrupted_by(decision, Some(id));
    let explained = changes(rounds)
        .into_iter()
        .map(|round| Ok(record_round(&index.excerpt(round, &focus)?, id)))
        .collect::<Result<_, I::Error>>()?;
    Ok(record_explanation(id, explained))
}

/// [`explain_job`] over the rounds of `index`: the round the operation came from (the newest at
/// or before its time that admitted its holder, else that judged it, else any) and, when the
/// operation does not name its holder, the newest round that judged it (which names it); only
/// those are read.
pub fn explain_job_indexed<I: RoundIndex + ?Sized>(
    index: &I,
    job: u64,
    operation: &Operation,
) -> Result<Explanation, I::Error> {
    let id = operation.trail;
    let at = Some(operation.recorded_ms);
    let round = match index.latest_judging(id, true, at)? {
        Some(round) => Some(round),
        None => match index.latest_judging(id, false, at)? {
            Some(round) => Some(round),
            None => index.latest(at)?,
        },
    };
    let naming = if operation.holder.is_none() {
        index.latest_judging(id, false, None)?
    } else {
        None
    };
    let focus = |decision: &Decision| {
        operation
            .node
            .clone()
            .or_else(|| disrupted_by(decision, Some(id)))
    };
    let mut rounds = Vec::new();
    for number in naming.into_iter().chain(round) {
        if !rounds.iter().any(|r: &Recorded| r.round == number) {
            rounds.push(index.excerpt(number, &focus)?);
        }
    }
    // Newest first, as the store gives a window's rounds.
    rounds.sort_by_key(|r| std::cmp::Reverse((r.record.now_ms, r.round)));
    Ok(explain_job(&rounds, job, operation))
}
