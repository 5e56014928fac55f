//! Instance auto-repair, what its executor and its one-shot run share without a database: the
//! ledger entries of a repair and of a tag change, the next step of a repair's tags (pure), what
//! the duty reads from Ganeti, the nodes running repairs hold, the reason trail of their jobs,
//! harep's output.
//!
//! A repair is one holder (`Holder::InstanceRepair`, the repair's uuid): one entry per
//! operation, each submitted once the one before has succeeded ([`Entry::unchained`]: RAPI's
//! reinstall cannot carry `depends`), each holding the instance's nodes ([`Hold::Repairing`])
//! while unfinished. Its `pending:` tag names the jobs, known only once they are submitted: the
//! tag's entries are recorded in a later pass, once every operation has its job (or can never
//! have one), by [`repair_step`]. A tag change is a holder of its own (the uuid of the repair
//! whose result it writes, else a fresh one).

use std::collections::{BTreeMap, BTreeSet};

use nodecare_core::duty::instance_repair::{
    Assessment, JobState, RepairData, RepairPlan, RepairResult, TAG_PREFIX, TagChange, render_tag,
};
use nodecare_core::gate::{DomainSource, Holder, NodeFacts, View};
use nodecare_core::ledger::{Action, Entry, Hold, Op, State};
use nodecare_ganeti::{
    Ganeti, GanetiError, Group, Instance, JobId, Node, NodeRole, Reason, TagTarget,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Intent prefix of every instance-repair job.
pub const INTENT_PREFIX: &str = "instance-repair";

/// What the executor of schema versions up to 5 kept until Ganeti showed the outcome (table
/// `instance_repairs`); schema version 6 moves each into ledger entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Record {
    /// A repair: its plan, the job of each operation once submitted, the pending tag's job.
    Repair {
        /// The plan.
        plan: RepairPlan,
        /// Job per operation (`None`: not submitted yet).
        jobs: Vec<Option<JobId>>,
        /// The job adding the pending tag.
        tag_job: Option<JobId>,
    },
    /// A tag change and its jobs.
    Tags {
        /// The change.
        change: TagChange,
        /// Its jobs.
        jobs: Vec<JobId>,
    },
}

impl Record {
    /// What its tags are on.
    pub fn target(&self) -> TagTarget {
        match self {
            Self::Repair { plan, .. } => TagTarget::Instance(plan.instance.clone()),
            Self::Tags { change, .. } => change.target.clone(),
        }
    }
}

/// What the duty reads from Ganeti besides nodes and instances.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// Cluster tags.
    pub cluster_tags: Vec<String>,
    /// Node groups.
    pub groups: Vec<Group>,
    /// Status of the jobs of pending repairs.
    pub jobs: BTreeMap<JobId, JobState>,
    /// Instances with a repair or tag change in flight.
    pub in_flight: BTreeSet<String>,
    /// Instances with a repair in flight (submitted, its pending tag not shown yet): the
    /// repair's uuid.
    pub repairs_in_flight: BTreeMap<String, Uuid>,
    /// Cluster and group tag changes in flight.
    pub targets_in_flight: BTreeSet<TagTarget>,
    /// Problems met (the round goes on without them).
    pub errors: Vec<String>,
}

/// The status of every job the pending repairs of `instances` name (their `pending:` tags),
/// and the jobs whose status could not be read (absent from the map: unknown this round).
pub async fn job_states(
    ganeti: &dyn Ganeti,
    instances: &[Instance],
) -> (BTreeMap<JobId, JobState>, Vec<String>) {
    let mut states = BTreeMap::new();
    let mut errors = Vec::new();
    for id in Assessment::jobs_to_query(instances) {
        match ganeti.job(id).await {
            Ok(job) => {
                states.insert(id, JobState::Known(job.status));
            }
            Err(GanetiError::NotFound(_)) => {
                states.insert(id, JobState::Lost);
            }
            // Unknown this round: the repair waits.
            Err(error) => errors.push(format!("job {id}: {error}")),
        }
    }
    (states, errors)
}

/// The nodes instance repairs hold while their jobs run, for the gate's
/// [`InForce`]: every node of the repaired instance as Ganeti shows it now (its primary and
/// secondaries), held by the repair (`Holder::InstanceRepair`). A drained or offline node is
/// held disrupted (no other holder may take it over); the others are touched
/// ([`InForce::touched`]: no other holder may drain or touch them, no domain or cap is used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairHolds {
    /// Drained or offline nodes, with their holder.
    pub disrupted: Vec<(String, Holder)>,
    /// Nodes in service, with their holder.
    pub touched: Vec<(String, Holder)>,
}

/// The nodes the running instance repairs hold (see [`RepairHolds`]). A repair runs from its
/// submission (`repairs_in_flight`: its pending tag not shown yet) until every job its pending
/// tag names is final in `jobs`; a job whose status is not known this round (absent from
/// `jobs`) counts as running. `jobs` is `None` when Ganeti's job statuses could not be read:
/// every pending repair then counts as running.
pub fn holds(
    instances: &[Instance],
    nodes: &[Node],
    jobs: Option<&BTreeMap<JobId, JobState>>,
    repairs_in_flight: &BTreeMap<String, Uuid>,
) -> RepairHolds {
    let by_name: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let finished = |job: &JobId| {
        jobs.and_then(|jobs| jobs.get(job))
            .is_some_and(|state| match state {
                JobState::Lost => true,
                JobState::Known(status) => status.is_final(),
            })
    };
    let mut out = RepairHolds::default();
    let mut instances: Vec<&Instance> = instances.iter().collect();
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    for instance in instances {
        let running = repairs_in_flight.get(&instance.name).copied().or_else(|| {
            instance
                .tags
                .iter()
                .filter_map(|t| RepairData::parse_tag(t))
                .filter(|data| data.result.is_none())
                .find(|data| data.jobs.iter().any(|job| !finished(job)))
                // A pending tag written by another tool may carry an id that is no uuid: the
                // nil uuid holds for it.
                .map(|data| Uuid::parse_str(&data.uuid).unwrap_or_default())
        });
        let Some(id) = running else {
            continue;
        };
        let holder = Holder::InstanceRepair { id };
        for name in std::iter::once(&instance.primary_node).chain(&instance.secondary_nodes) {
            let Some(node) = by_name.get(name.as_str()) else {
                continue;
            };
            let entry = (node.name.clone(), holder.clone());
            if node.drained || node.offline {
                out.disrupted.push(entry);
            } else {
                out.touched.push(entry);
            }
        }
    }
    out
}

/// What one run of the executor did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// harep's progress lines (`Executing ArFailover repair on inst3`, `>>> Adding ...`).
    pub lines: Vec<String>,
    /// Repairs submitted: instance, repair uuid, jobs.
    pub submitted: Vec<(String, Uuid, Vec<JobId>)>,
    /// Repairs the gate refused: instance, why.
    pub blocked: Vec<(String, String)>,
    /// Failures (each also leaves its record, so the next round goes on from there).
    pub errors: Vec<String>,
}

/// How a run of the executor goes beyond what the duty decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Submit nothing, record nothing: say what would be done (harep's `--dry-run`).
    pub dry_run: bool,
    /// The operator's reason (harep's `--reason`), added to every job's reason trail.
    pub note: Option<String>,
}

/// The reason of an instance-repair job: `instance-repair-<intent>`, nodecare's text with
/// what it does and the operator's note.
pub fn reason(uuid: Uuid, intent: &str, what: &str, note: Option<&str>) -> Reason {
    Reason::new(
        uuid,
        format!("{INTENT_PREFIX}-{intent}"),
        description(what, note),
    )
}

/// The text of an instance-repair job's reason: nodecare's, what it does, the operator's note.
pub fn description(what: &str, note: Option<&str>) -> String {
    let mut description = format!(
        "automated repairs by nodecare {} ({what})",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(note) = note {
        description.push_str(": ");
        description.push_str(note);
    }
    description
}

/// The `about` key of a repair's first entry: the plan, as JSON (its tags are written from it).
pub const PLAN_ABOUT: &str = "repair-plan";

/// The key (and reason intent) of a repair's operation `index`.
pub fn op_key(plan: &RepairPlan, index: usize) -> String {
    format!("{INTENT_PREFIX}-{}-{index}", plan.kind)
}

/// The ledger entries of a repair: one per operation, each after the one before and only once
/// it has succeeded, each holding `nodes` (the instance's) while unfinished. No deadline: a
/// repair's job is followed until it ends.
pub fn repair_entries(
    plan: &RepairPlan,
    nodes: &BTreeSet<String>,
    note: Option<&str>,
    now_ms: u64,
) -> Vec<Entry> {
    let holder = Holder::InstanceRepair { id: plan.uuid };
    let holds: Vec<Hold> = nodes
        .iter()
        .map(|node| Hold::Repairing { node: node.clone() })
        .collect();
    let mut entries = Vec::new();
    for (index, op) in plan.ops.iter().enumerate() {
        let what = format!("{} of {}: {}", plan.kind, plan.instance, op.describe());
        let mut entry = Entry::new(
            holder.clone(),
            op_key(plan, index),
            Action::ganeti(op.op(&plan.instance)),
            description(&what, note),
            now_ms,
            u64::MAX,
        )
        .holding(holds.clone());
        if index == 0 {
            if let Ok(text) = serde_json::to_string(plan) {
                entry.about.insert(PLAN_ABOUT.into(), text);
            }
        } else {
            entry = entry.after([op_key(plan, index - 1)]).unchained();
        }
        entries.push(entry);
    }
    entries
}

/// The plan of a repair's entries (`None`: a tag change's).
pub fn plan_of(entries: &[Entry]) -> Option<RepairPlan> {
    entries
        .iter()
        .find_map(|e| e.about.get(PLAN_ABOUT))
        .and_then(|text| serde_json::from_str(text).ok())
}

/// The ledger entries of a tag change held by `holder`: adding `add` (key
/// `instance-repair-<intent>-tag`), then, chained after it, removing `remove` (`…-untag`).
#[allow(clippy::too_many_arguments)]
pub fn tag_entries(
    holder: &Holder,
    intent: &str,
    target: &TagTarget,
    add: Option<&str>,
    remove: &[String],
    note: Option<&str>,
    now_ms: u64,
) -> Vec<Entry> {
    let mut entries = Vec::new();
    let tag_key = format!("{INTENT_PREFIX}-{intent}-tag");
    if let Some(tag) = add {
        entries.push(Entry::new(
            holder.clone(),
            tag_key.clone(),
            Action::ganeti(Op::AddTags {
                target: target.clone(),
                tags: vec![tag.to_owned()],
            }),
            description(&format!("tag {target}"), note),
            now_ms,
            u64::MAX,
        ));
    }
    if !remove.is_empty() {
        let untag = Entry::new(
            holder.clone(),
            format!("{INTENT_PREFIX}-{intent}-untag"),
            Action::ganeti(Op::RemoveTags {
                target: target.clone(),
                tags: remove.to_vec(),
            }),
            description(&format!("untag {target}"), note),
            now_ms,
            u64::MAX,
        );
        entries.push(if add.is_some() {
            untag.after([tag_key])
        } else {
            untag
        });
    }
    entries
}

/// The attempt a tag change's entry belongs to: its key without `-tag` or `-untag`.
fn attempt_of(key: &str) -> &str {
    key.strip_suffix("-untag")
        .or_else(|| key.strip_suffix("-tag"))
        .unwrap_or(key)
}

/// The entries of a tag change's latest attempt (those sharing the intent of the one recorded
/// last), in recording order. A holder keeps the attempts whose jobs did not succeed
/// ([`tag_attempt_intent`]).
pub fn latest_attempt(entries: &[Entry]) -> Vec<Entry> {
    let Some(last) = entries.iter().max_by_key(|e| e.id) else {
        return Vec::new();
    };
    let attempt = attempt_of(&last.key);
    entries
        .iter()
        .filter(|e| attempt_of(&e.key) == attempt)
        .cloned()
        .collect()
}

/// The intent a tag change of `intent` is recorded under, after its holder's earlier attempts
/// (`entries`, kept because their jobs did not succeed): `intent` the first time,
/// `<intent>-<n>` for the n-th, so that no reason-trail key reaches Ganeti twice (a key names
/// one job: adoption after a crash finds it by it).
pub fn tag_attempt_intent(intent: &str, entries: &[Entry]) -> String {
    let attempts: BTreeSet<&str> = entries.iter().map(|e| attempt_of(&e.key)).collect();
    if attempts.is_empty() {
        intent.to_owned()
    } else {
        format!("{intent}-{}", attempts.len() + 1)
    }
}

/// What a tag change's entries do: the object, the tag added, the tags removed.
pub fn tag_change_of(entries: &[Entry]) -> Option<(TagTarget, Option<String>, Vec<String>)> {
    let mut out: Option<(TagTarget, Option<String>, Vec<String>)> = None;
    for entry in entries {
        match entry.action.op() {
            Some(Op::AddTags { target, tags }) => {
                let change = out.get_or_insert_with(|| (target.clone(), None, Vec::new()));
                change.1 = tags.first().cloned();
            }
            Some(Op::RemoveTags { target, tags }) => {
                let change = out.get_or_insert_with(|| (target.clone(), None, Vec::new()));
                change.2.clone_from(tags);
            }
            _ => {}
        }
    }
    out
}

/// Where a repair's tags are, from its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairStep {
    /// Operations still to be submitted, or a tag job still running: in flight.
    Wait,
    /// Every operation has its job (or never will): the tag to write now, under `intent`
    /// (`pending`, or `pending-<n>` when written again), naming `jobs`. `why`: an operation's
    /// submission was uncertain, so the tag is a `failure` result (the repair fails visibly).
    Tag {
        /// The tag to add.
        add: String,
        /// The intent of its entries.
        intent: String,
        /// The jobs it names.
        jobs: Vec<JobId>,
        /// Why the repair failed without its tag saying so by a job, if it did.
        why: Option<String>,
    },
    /// Even without jobs the tag would be longer than Ganeti allows.
    TooLong,
    /// No operation reached Ganeti: nothing to tag, the duty decides again.
    Nothing,
    /// The tag was written (or its job ended): nothing left to do.
    Tagged,
}

/// The next step of a repair's tags, from its `entries` (pure). The tag is written once every
/// operation has its job or can never have one (after one that did not succeed); a tag job
/// that did not succeed is written again, under a new intent.
pub fn repair_step(plan: &RepairPlan, entries: &[Entry]) -> RepairStep {
    let mut jobs = Vec::new();
    let mut why = None;
    for index in 0..plan.ops.len() {
        let key = op_key(plan, index);
        let Some(entry) = entries.iter().find(|e| e.key == key) else {
            return RepairStep::Wait;
        };
        match (&entry.state, entry.job) {
            (State::Recorded, _) => return RepairStep::Wait,
            (_, Some(job)) => jobs.push(job),
            (State::Submitted | State::TimedOut, None) => return RepairStep::Wait,
            (State::Failed { why: failed }, None) => {
                why.get_or_insert_with(|| format!("{key}: {failed}"));
            }
            (_, None) => {}
        }
    }
    if jobs.is_empty() && why.is_none() {
        return RepairStep::Nothing;
    }
    let tag_of = |e: &&Entry| {
        e.key.starts_with(&format!("{INTENT_PREFIX}-pending"))
            || e.key.starts_with(&format!("{INTENT_PREFIX}-uncertain"))
    };
    let tagging: Vec<&Entry> = entries.iter().filter(tag_of).collect();
    if tagging.iter().any(|e| e.state.is_unfinished()) {
        return RepairStep::Wait;
    }
    let attempts = tagging.iter().filter(|e| e.key.ends_with("-tag")).count();
    if tagging
        .iter()
        .any(|e| e.key.ends_with("-tag") && e.state == State::Succeeded)
    {
        return RepairStep::Tagged;
    }
    let base = if why.is_some() {
        "uncertain"
    } else {
        "pending"
    };
    let intent = if attempts == 0 {
        base.to_owned()
    } else {
        format!("{base}-{}", attempts + 1)
    };
    let result = why.as_ref().map(|_| RepairResult::Failure);
    let uuid = plan.uuid.to_string();
    match render_tag(plan.kind, &uuid, plan.ts, result, &jobs) {
        Some(add) => RepairStep::Tag {
            add,
            intent,
            jobs,
            why,
        },
        None => RepairStep::TooLong,
    }
}

/// harep's lines for a tag change (`>>> Adding the following tag to …`).
pub fn tag_lines(
    lines: &mut Vec<String>,
    target: &TagTarget,
    add: Option<&str>,
    remove: &[String],
) {
    let name = match target {
        TagTarget::Instance(name) | TagTarget::Node(name) | TagTarget::Group(name) => name,
        TagTarget::Cluster => "the cluster",
    };
    if let Some(add) = add {
        lines.push(format!(">>> Adding the following tag to {name}:"));
        lines.push(format!("{add:?}"));
    }
    if !remove.is_empty() {
        lines.push(format!(">>> Removing the following tags from {name}:"));
        lines.extend(remove.iter().map(|t| format!("{t:?}")));
    }
}

/// Who a tag change's jobs are submitted as: the repair's uuid (from the tag it adds) or the
/// record's, and the intent (the result it writes, or `suspend`).
pub fn tag_identity(change: &TagChange, id: Uuid) -> (Uuid, &'static str) {
    let data = change.add.as_deref().and_then(RepairData::parse_tag);
    let uuid = data
        .as_ref()
        .and_then(|d| Uuid::parse_str(&d.uuid).ok())
        .unwrap_or(id);
    let intent = match data.and_then(|d| d.result) {
        Some(result) => result.as_str(),
        None => "suspend",
    };
    (uuid, intent)
}

/// The gate's view of `nodes` for a one-shot run: failure domains by node group, no storage
/// reports (the one-shot reads none).
pub fn view_of(nodes: &[Node], now_ms: u64) -> View {
    View {
        nodes: nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    NodeFacts {
                        name: n.name.clone(),
                        group: n.group.clone(),
                        domain: DomainSource::NodeGroup.domain_of(&n.group, &n.tags),
                        vm_capable: n.vm_capable,
                        drained: n.drained,
                        offline: n.offline,
                        master: n.role == NodeRole::Master,
                        memory_free: n.memory_free,
                        primary_memory: None,
                        primaries: 0,
                    },
                )
            })
            .collect(),
        storage: Vec::new(),
        now_ms,
    }
}

/// What one harep-style run did.
#[derive(Debug, Clone, PartialEq)]
pub struct OneShot {
    /// What the duty found.
    pub assessment: Assessment,
    /// What the executor did.
    pub report: RunReport,
}

impl OneShot {
    /// harep's `Instance status count` after the run: a repair the gate held counts as
    /// `Healthy` (nothing was written), as harep counts a repair it may not do.
    pub fn status_counts(&self) -> BTreeMap<String, usize> {
        let held: BTreeSet<&str> = self
            .report
            .blocked
            .iter()
            .map(|(i, _)| i.as_str())
            .collect();
        let mut counts = BTreeMap::new();
        for report in &self.assessment.instances {
            let state = if held.contains(report.instance.as_str()) {
                "Healthy"
            } else {
                report.state.as_str()
            };
            *counts.entry(state.to_owned()).or_insert(0) += 1;
        }
        counts
    }

    /// harep's output: progress lines, then the status count table.
    pub fn harep_output(&self) -> String {
        let mut out = String::new();
        for line in &self.report.lines {
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("---------------------\nInstance status count\n---------------------\n");
        for (state, count) in self.status_counts() {
            out.push_str(&format!("{state}: {count}\n"));
        }
        out
    }
}

/// Whether a tag belongs to the auto-repair system (for status pages).
pub fn is_autorepair_tag(tag: &str) -> bool {
    tag.starts_with(TAG_PREFIX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use nodecare_core::duty::instance_repair::{RepairOp, RepairType};

    use super::*;

    fn plan() -> RepairPlan {
        RepairPlan {
            instance: "inst2".into(),
            kind: RepairType::Reinstall,
            uuid: Uuid::from_u128(9),
            ts: 1000,
            ops: vec![
                RepairOp::RecreateDisks {
                    iallocator: "hail".into(),
                },
                RepairOp::Reinstall { start: true },
            ],
            remove: vec![],
            message: String::new(),
        }
    }

    fn entries(states: &[(State, Option<JobId>)]) -> Vec<Entry> {
        let nodes: BTreeSet<String> = ["n1".to_owned(), "n2".to_owned()].into();
        let mut entries = repair_entries(&plan(), &nodes, None, 0);
        for (entry, (state, job)) in entries.iter_mut().zip(states) {
            entry.state = state.clone();
            entry.job = *job;
        }
        entries
    }

    #[test]
    fn a_repair_is_entries_each_after_the_one_before_holding_its_nodes() {
        let entries = entries(&[]);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].key, "instance-repair-reinstall-0");
        assert!(entries[0].after.is_empty());
        assert_eq!(entries[1].after, ["instance-repair-reinstall-0"]);
        assert!(entries[1].unchained);
        assert_eq!(
            entries[1].holds,
            [
                Hold::Repairing { node: "n1".into() },
                Hold::Repairing { node: "n2".into() }
            ]
        );
        assert_eq!(plan_of(&entries), Some(plan()));
        // While unfinished its nodes are held (touched) by the repair.
        let held = nodecare_core::ledger::in_force(&entries);
        assert_eq!(held.touched.len(), 2);
    }

    #[test]
    fn the_pending_tag_waits_for_every_operation_to_have_its_job() {
        let p = plan();
        assert_eq!(
            repair_step(&p, &entries(&[(State::Succeeded, Some(3))])),
            RepairStep::Wait
        );
        let RepairStep::Tag {
            add, intent, why, ..
        } = repair_step(
            &p,
            &entries(&[(State::Succeeded, Some(3)), (State::Submitted, Some(5))]),
        )
        else {
            panic!("a tag is due");
        };
        assert_eq!(intent, "pending");
        assert!(why.is_none());
        assert!(add.ends_with(":1000:3+5"), "{add}");
        // The first failed: the second never runs, the tag names the first.
        let RepairStep::Tag { add, .. } = repair_step(
            &p,
            &entries(&[
                (State::Failed { why: "x".into() }, Some(3)),
                (State::Canceled { why: "y".into() }, None),
            ]),
        ) else {
            panic!("a tag is due");
        };
        assert!(add.ends_with(":1000:3"), "{add}");
        // Nothing reached Ganeti: nothing to tag.
        assert_eq!(
            repair_step(
                &p,
                &entries(&[
                    (State::Canceled { why: "c".into() }, None),
                    (State::Canceled { why: "c".into() }, None)
                ])
            ),
            RepairStep::Nothing
        );
        // The reinstall attempted, its answer not known: wait, then (failed) a failure result.
        assert_eq!(
            repair_step(
                &p,
                &entries(&[(State::Succeeded, Some(3)), (State::Submitted, None)])
            ),
            RepairStep::Wait
        );
        let RepairStep::Tag {
            add, intent, why, ..
        } = repair_step(
            &p,
            &entries(&[
                (State::Succeeded, Some(3)),
                (
                    State::Failed {
                        why: "uncertain".into(),
                    },
                    None,
                ),
            ]),
        )
        else {
            panic!("a tag is due");
        };
        assert_eq!(intent, "uncertain");
        assert!(add.contains(":1000:failure:3"), "{add}");
        assert!(why.unwrap().contains("uncertain"));
    }

    #[test]
    fn a_failed_tag_job_is_written_again_and_a_written_one_ends_the_repair() {
        let p = plan();
        let mut all = entries(&[(State::Succeeded, Some(3)), (State::Succeeded, Some(5))]);
        let holder = Holder::InstanceRepair { id: p.uuid };
        let target = TagTarget::Instance(p.instance.clone());
        let mut tag = tag_entries(&holder, "pending", &target, Some("t"), &[], None, 0);
        tag[0].state = State::Submitted;
        tag[0].job = Some(6);
        all.extend(tag.clone());
        assert_eq!(repair_step(&p, &all), RepairStep::Wait);
        let last = all.len() - 1;
        all[last].state = State::Failed { why: "no".into() };
        let RepairStep::Tag { intent, .. } = repair_step(&p, &all) else {
            panic!("written again");
        };
        assert_eq!(intent, "pending-2");
        all[last].state = State::Succeeded;
        assert_eq!(repair_step(&p, &all), RepairStep::Tagged);
    }

    /// Each attempt of a tag change gets an intent of its own; the latest attempt is the one
    /// recorded last.
    #[test]
    fn tag_change_attempts_get_intents_of_their_own() {
        let holder = Holder::InstanceRepair {
            id: Uuid::from_u128(7),
        };
        let target = TagTarget::Instance("inst1".into());
        let record = |intent: &str, first_id: u64| -> Vec<Entry> {
            let mut entries = tag_entries(
                &holder,
                intent,
                &target,
                Some("result"),
                &["pending".to_owned()],
                None,
                0,
            );
            for (at, e) in entries.iter_mut().enumerate() {
                e.id = first_id + u64::try_from(at).unwrap();
            }
            entries
        };
        assert_eq!(tag_attempt_intent("success", &[]), "success");
        let mut kept = record("success", 1);
        let second = tag_attempt_intent("success", &kept);
        assert_eq!(second, "success-2");
        kept.extend(record(&second, 3));
        assert_eq!(tag_attempt_intent("success", &kept), "success-3");
        assert_eq!(tag_attempt_intent("failure", &kept), "failure-3");
        let keys: Vec<String> = latest_attempt(&kept).into_iter().map(|e| e.key).collect();
        assert_eq!(
            keys,
            vec![
                "instance-repair-success-2-tag".to_owned(),
                "instance-repair-success-2-untag".to_owned()
            ]
        );
    }
}
