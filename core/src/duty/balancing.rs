//! Balancing (pure): Ganeti's own balancer decides the moves, this duty turns the first job set
//! of its plan into proposals for the gate.
//!
//! Each round the duty is due, the coordinator's `balance` writes the cluster in the htools text format,
//! runs `hbal` on it per node group and reads the plan ([`nodecare_roll::hbal`]). Only the first
//! job set is proposed (its jobs touch disjoint nodes); a job that touches a node with an active
//! incident or held by another holder (an incident, a campaign, a grant, a node drained or
//! offline outside nodecare) is left out with the reason, and the gate refuses the same jobs on
//! its own. Every proposal disrupts nothing and touches the job's old and new nodes; it declares
//! the memory of the instance it moves (`None` when unknown), so that the gate holds it while
//! storage is not whole or unknown (a move is new work, never a continuation).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use nodecare_roll::hbal::{HbalJob, HbalOp, HbalOptions, HbalPlan};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ganeti::{JobId, Node, ReplaceDisksMode};
use crate::gate::{Duty, Holder, InForce, Proposal};
use crate::incident::Incident;
use crate::ledger::{Action, Entry, Op, State};

/// `[balancing]`: off by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BalancingConfig {
    /// Run hbal and propose its moves.
    pub enabled: bool,
    /// Node groups to balance (names or uuids); empty: every group.
    pub groups: Vec<String>,
    /// Minimum score gain of a step (hbal `-g`; `--min-gain-limit` is ten times it).
    pub min_gain: f64,
    /// Allow moves that copy disks (new DRBD secondaries); by default only migrations and
    /// failovers.
    pub disk_moves: bool,
    /// Seconds between two hbal runs (a run's jobs finish before the next run).
    pub interval: f64,
    /// The hbal executable.
    pub hbal: PathBuf,
    /// Seconds hbal may take.
    pub timeout: f64,
    /// Give hbal the dynamic load of the agents' signed reports (`cpu-avg-load`,
    /// `kvm-inst-rss`) as maintd did; left out (and said so) when a node's is missing.
    pub load: bool,
}

impl Default for BalancingConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            groups: Vec::new(),
            min_gain: 0.01,
            disk_moves: false,
            interval: 300.0,
            hbal: PathBuf::from("/usr/bin/hbal"),
            timeout: 60.0,
            load: true,
        }
    }
}

impl BalancingConfig {
    /// Checks value ranges.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_gain.is_finite() && self.min_gain >= 0.0 && self.min_gain < 1e6) {
            return Err(format!(
                "balancing.min_gain must be at least 0, got {}",
                self.min_gain
            ));
        }
        for (name, value, min) in [
            ("balancing.interval", self.interval, 1.0),
            ("balancing.timeout", self.timeout, 1.0),
        ] {
            if !(value.is_finite() && value >= min && value <= 1e9) {
                return Err(format!(
                    "{name} must be between {min} and 1e9 seconds, got {value}"
                ));
            }
        }
        if self.groups.iter().any(String::is_empty) {
            return Err("balancing.groups: empty group name".into());
        }
        Ok(())
    }

    /// hbal's options for `group`.
    pub fn hbal_options(&self, group: Option<&str>) -> HbalOptions {
        HbalOptions {
            group: group.map(str::to_owned),
            min_gain: self.min_gain,
            disk_moves: self.disk_moves,
            mond_data: None,
        }
    }

    /// The node groups to run hbal on, of the groups `present` (name → uuid) holding nodes.
    pub fn groups_to_balance(&self, present: &BTreeMap<String, String>) -> Vec<String> {
        present
            .iter()
            .filter(|(name, uuid)| {
                self.groups.is_empty() || self.groups.iter().any(|g| g == *name || g == *uuid)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// The nodes balancing must not touch, each with why: nodes with an active incident and nodes
/// another holder holds (including nodes drained or offline outside nodecare).
pub fn blocked_nodes(
    incidents: &[Incident],
    nodes: &[Node],
    in_force: &InForce,
) -> BTreeMap<String, String> {
    let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
    let mut blocked: BTreeMap<String, String> = BTreeMap::new();
    for (node, holder) in &in_force.nodes {
        if !matches!(holder, Holder::Balancing { .. }) {
            blocked.insert(node.clone(), format!("held by {holder}"));
        }
    }
    for incident in incidents.iter().filter(|i| i.is_active()) {
        let Some(node) = by_uuid.get(incident.node_uuid.as_str()) else {
            continue;
        };
        blocked.entry(node.name.clone()).or_insert_with(|| {
            format!("incident {} ({})", incident.uuid, incident.action.as_str())
        });
    }
    blocked
}

/// A job of hbal's first job set the duty left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeftOut {
    /// The node group.
    pub group: String,
    /// The job.
    pub job: HbalJob,
    /// Why.
    pub why: String,
}

/// A job the duty proposes, with its holder.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposed {
    /// The node group.
    pub group: String,
    /// The proposal's holder id.
    pub id: Uuid,
    /// The job.
    pub job: HbalJob,
}

/// What the balancing duty proposes this round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Proposals {
    /// One proposal per job of the first job sets, for the gate.
    pub proposals: Vec<Proposal>,
    /// The jobs behind the proposals, by holder id.
    pub jobs: Vec<Proposed>,
    /// The jobs left out, each with why.
    pub left_out: Vec<LeftOut>,
}

impl Proposals {
    /// The job of the proposal held by `id`.
    pub fn job(&self, id: Uuid) -> Option<&Proposed> {
        self.jobs.iter().find(|p| p.id == id)
    }
}

/// The proposals of the first job set of each group's plan (`plans`: group → plan with full
/// names). `memory`: instance → MiB, as hbal was given it (an instance missing there moves
/// memory of unknown size). `new_id` names each proposal's holder.
pub fn propose(
    plans: &[(String, HbalPlan)],
    blocked: &BTreeMap<String, String>,
    memory: &BTreeMap<String, u64>,
    since_ms: u64,
    mut new_id: impl FnMut() -> Uuid,
) -> Proposals {
    let mut out = Proposals::default();
    for (group, plan) in plans {
        let first = plan.first_jobset(blocked);
        for (job, why) in first.left_out {
            out.left_out.push(LeftOut {
                group: group.clone(),
                job,
                why,
            });
        }
        for job in first.jobs {
            let id = new_id();
            let ops: Vec<String> = job.ops.iter().map(ToString::to_string).collect();
            out.proposals.push(Proposal {
                duty: Duty::Balancing,
                holder: Holder::Balancing { id },
                subject: format!("instance {}", job.instance),
                invasiveness: u8::from(job.ops.iter().any(|op| op.is_disk_move())),
                since_ms,
                disrupts: BTreeSet::new(),
                touches: job.nodes(),
                fresh: false,
                // The job migrates, fails over or copies the instance: never "nothing moves" (0 MiB
                // reads as unknown).
                moves_memory: memory.get(&job.instance).copied().filter(|m| *m > 0),
                after_releases: BTreeMap::new(),
                reason: format!(
                    "hbal: {} {} => {} ({}; score {:.8})",
                    job.instance,
                    job.from,
                    job.to,
                    ops.join(", "),
                    job.score_after
                ),
            });
            out.jobs.push(Proposed {
                group: group.clone(),
                id,
                job,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{self, Policy, View};
    use crate::incident::Action;
    use crate::plan::tests_support::{incident_on, node};

    const SHARED: &str = include_str!("../../../roll/tests/data/hbal/shared-n1-restriction.out");

    fn counter() -> impl FnMut() -> Uuid {
        let mut n = 0u128;
        move || {
            n += 1;
            Uuid::from_u128(n)
        }
    }

    #[test]
    fn first_jobset_only_minus_blocked_nodes() {
        let plan = nodecare_roll::hbal::parse(SHARED).unwrap();
        let nodes: Vec<Node> = ["nodeA", "nodeB", "nodeC", "nodeD"]
            .iter()
            .map(|n| node(n))
            .collect();
        let incident = incident_on(1, &nodes[2], Action::Evacuate, 1.0);
        let blocked = blocked_nodes(std::slice::from_ref(&incident), &nodes, &InForce::default());
        assert_eq!(
            blocked,
            BTreeMap::from([(
                "nodeC".to_owned(),
                format!("incident {} (evacuate)", incident.uuid)
            )])
        );
        let memory = BTreeMap::from([("instB1".to_owned(), 2048)]);
        let out = propose(
            &[("group-01".into(), plan)],
            &blocked,
            &memory,
            5,
            counter(),
        );
        assert_eq!(out.proposals.len(), 1);
        let p = &out.proposals[0];
        assert_eq!(
            p.holder,
            Holder::Balancing {
                id: Uuid::from_u128(1)
            }
        );
        assert_eq!(p.subject, "instance instB1");
        assert!(p.disrupts.is_empty());
        // It moves the instance: its memory, never "nothing moves".
        assert_eq!(p.moves_memory, Some(2048));
        assert_eq!(
            p.touches,
            BTreeSet::from(["nodeA".to_owned(), "nodeB".to_owned()])
        );
        assert_eq!(out.left_out.len(), 1);
        assert_eq!(out.left_out[0].job.instance, "instD1");
        assert!(out.left_out[0].why.starts_with("nodeC: incident "));
        assert_eq!(out.job(Uuid::from_u128(1)).unwrap().job.instance, "instB1");
    }

    #[test]
    fn held_nodes_are_blocked_and_the_gate_agrees() {
        let plan = nodecare_roll::hbal::parse(SHARED).unwrap();
        let mut nodes: Vec<Node> = ["nodeA", "nodeB", "nodeC", "nodeD"]
            .iter()
            .map(|n| node(n))
            .collect();
        nodes[3].drained = true;
        let view = View::from_cluster(
            &nodes,
            &[],
            &BTreeMap::new(),
            &gate::DomainSource::NodeGroup,
            Vec::new(),
            0,
        );
        let in_force = InForce::new(&view, Vec::new());
        let blocked = blocked_nodes(&[], &nodes, &in_force);
        assert_eq!(
            blocked.get("nodeD").map(String::as_str),
            Some("held by drained outside nodecare")
        );
        // Without the duty's own filter, the gate refuses the same job.
        let unfiltered = propose(
            &[("g".into(), plan)],
            &BTreeMap::new(),
            &BTreeMap::new(),
            0,
            counter(),
        );
        let decision = gate::decide(&view, &Policy::default(), &in_force, unfiltered.proposals);
        let refused: Vec<&str> = decision
            .refused()
            .map(|(p, _)| p.subject.as_str())
            .collect();
        assert_eq!(refused, ["instance instD1"]);
        assert_eq!(decision.admitted().count(), 1);
    }

    /// hbal's jobs migrate instances: nothing of a run starts while storage is not whole or its
    /// health unknown, whether the instance's memory is known or not.
    #[test]
    fn moves_wait_while_storage_is_not_whole_or_unknown() {
        let plan = nodecare_roll::hbal::parse(SHARED).unwrap();
        let nodes: Vec<Node> = ["nodeA", "nodeB", "nodeC", "nodeD"]
            .iter()
            .map(|n| node(n))
            .collect();
        for (memory, unknown) in [(Some(512), false), (Some(512), true), (None, false)] {
            let problem = gate::StorageProblem {
                nodes: BTreeSet::from(["nodeX".to_owned()]),
                what: "inst9: minor 0 on nodeX WFConnection".into(),
                unknown,
                drained: false,
            };
            let view = View::from_cluster(
                &nodes,
                &[],
                &BTreeMap::new(),
                &gate::DomainSource::NodeGroup,
                vec![problem],
                0,
            );
            let memory: BTreeMap<String, u64> = memory
                .into_iter()
                .flat_map(|m| [("instB1".to_owned(), m), ("instD1".to_owned(), m)])
                .collect();
            let out = propose(
                &[("g".into(), plan.clone())],
                &BTreeMap::new(),
                &memory,
                0,
                counter(),
            );
            assert_eq!(out.proposals.len(), 2);
            let decision = gate::decide(
                &view,
                &Policy::default(),
                &InForce::new(&view, Vec::new()),
                out.proposals,
            );
            assert_eq!(decision.admitted().count(), 0, "{decision:#?}");
            for (_, blocked) in decision.refused() {
                assert!(
                    matches!(blocked, gate::BlockedBy::Storage { unknown: u, .. } if *u == unknown),
                    "{blocked:?}"
                );
            }
        }
    }

    /// A move admitted holds its nodes from the gate's decision on: a grant (judged after it, or
    /// by the admission API against the round's decision) is refused there.
    #[test]
    fn an_admitted_move_holds_its_nodes() {
        let plan = nodecare_roll::hbal::parse(SHARED).unwrap();
        let nodes: Vec<Node> = ["nodeA", "nodeB", "nodeC", "nodeD"]
            .iter()
            .map(|n| node(n))
            .collect();
        let view = View::from_cluster(
            &nodes,
            &[],
            &BTreeMap::new(),
            &gate::DomainSource::NodeGroup,
            Vec::new(),
            0,
        );
        let memory = BTreeMap::from([("instB1".to_owned(), 512), ("instD1".to_owned(), 512)]);
        let out = propose(
            &[("g".into(), plan)],
            &BTreeMap::new(),
            &memory,
            0,
            counter(),
        );
        let mut proposals = out.proposals;
        let grant = Holder::Grant {
            id: Uuid::from_u128(77),
            requester: "kured".into(),
        };
        proposals.push(Proposal {
            duty: Duty::Admission,
            holder: grant.clone(),
            subject: "node nodeA".into(),
            invasiveness: 0,
            since_ms: 0,
            disrupts: BTreeSet::from(["nodeA".to_owned()]),
            touches: BTreeSet::new(),
            fresh: false,
            moves_memory: Some(0),
            after_releases: BTreeMap::new(),
            reason: "kernel update".into(),
        });
        let decision = gate::decide(
            &view,
            &Policy::default(),
            &InForce::new(&view, Vec::new()),
            proposals,
        );
        assert_eq!(decision.admitted().count(), 2, "{decision:#?}");
        for node in ["nodeA", "nodeB", "nodeC", "nodeD"] {
            assert!(
                matches!(
                    decision.in_force.touched.get(node),
                    Some(Holder::Balancing { .. })
                ),
                "{node}: {:?}",
                decision.in_force
            );
        }
        assert!(matches!(
            decision.of(&grant).map(|j| &j.outcome),
            Some(Err(gate::BlockedBy::Conflict { node, .. })) if node == "nodeA"
        ));
    }

    #[test]
    fn config_defaults_and_validation() {
        let config = BalancingConfig::default();
        assert!(!config.enabled);
        assert!(config.validate().is_ok());
        let bad = BalancingConfig {
            min_gain: -1.0,
            ..BalancingConfig::default()
        };
        assert!(bad.validate().is_err());
        let groups = BTreeMap::from([
            ("g1".to_owned(), "u1".to_owned()),
            ("g2".to_owned(), "u2".to_owned()),
        ]);
        assert_eq!(config.groups_to_balance(&groups), ["g1", "g2"]);
        let only = BalancingConfig {
            groups: vec!["u2".into()],
            ..BalancingConfig::default()
        };
        assert_eq!(only.groups_to_balance(&groups), ["g2"]);
    }
}

/// Where a balancing move is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoveState {
    /// Stored; its job may or may not have been submitted.
    Planned,
    /// Its job was submitted.
    Submitted,
    /// Its job succeeded.
    Succeeded,
    /// Its job failed, or it was never submitted.
    Failed,
}

impl MoveState {
    /// Planned or submitted.
    pub const fn is_in_flight(self) -> bool {
        matches!(self, Self::Planned | Self::Submitted)
    }
}

/// One Ganeti operation of an admitted balancing job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BalanceMove {
    /// The balancing run (one per hbal run; in the reason trail).
    pub run: Uuid,
    /// Unique within the run: `<instance>-<n>` (the reason's intent).
    pub key: String,
    /// The gate proposal's holder.
    pub holder: Uuid,
    /// The node group.
    pub group: String,
    /// The instance.
    pub instance: String,
    /// The operation.
    pub op: HbalOp,
    /// Where it is.
    pub state: MoveState,
    /// Its Ganeti job, once submitted.
    pub job_id: Option<JobId>,
    /// Unix ms when stored.
    pub created_ms: u64,
    /// Unix ms when finished.
    pub finished_ms: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// One node group's plan, for the status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupPlan {
    /// The node group.
    pub group: String,
    /// hbal's score before.
    pub initial_score: Option<f64>,
    /// hbal's score after its whole solution.
    pub final_score: Option<f64>,
    /// Job sets in hbal's solution.
    pub jobsets: usize,
}

/// What balancing did last, for the status page and the API.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct BalanceStatus {
    /// Unix ms of the last hbal run.
    pub last_run_ms: Option<u64>,
    /// The last run.
    pub run: Option<Uuid>,
    /// Why the last run gave no plan (hbal missing or failing, bad output, cluster unreadable).
    pub error: Option<String>,
    /// Why balancing waits (operations of the last run in flight).
    pub waiting: Option<String>,
    /// The plans of the last run.
    pub groups: Vec<GroupPlan>,
    /// The jobs proposed to the gate (`instance: from => to`).
    pub proposed: Vec<String>,
    /// Jobs left out, with why.
    pub left_out: Vec<LeftOut>,
    /// Jobs the gate refused, with what blocked them.
    pub refused: Vec<(String, String)>,
    /// Jobs submitted by the last run.
    pub submitted: Vec<String>,
    /// The dynamic load given to hbal, or why it was left out.
    pub load: Option<String>,
    /// The `--mond-data` file given to hbal (served at `/1/balancing/mond-data`).
    #[serde(skip)]
    pub mond_data: Option<String>,
}

/// How long a balancing move's job may run before its entry times out (it is still followed).
pub const MOVE_DEADLINE_MS: u64 = 24 * 3600 * 1000;

impl BalanceMove {
    /// The move as a ledger entry: held by its run (the reason trail's uuid), after the move
    /// before it of the same hbal job (`<instance>-<n-1>`).
    pub fn to_entry(&self) -> Entry {
        let op = match &self.op {
            HbalOp::Migrate { target } => Op::MigrateInstance {
                instance: self.instance.clone(),
                target: target.clone(),
            },
            HbalOp::Failover { target } => Op::FailoverInstance {
                instance: self.instance.clone(),
                target: target.clone(),
            },
            HbalOp::ReplaceSecondary { node } => Op::ReplaceDisks {
                instance: self.instance.clone(),
                mode: ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: Some(node.clone()),
                    iallocator: None,
                },
            },
        };
        let mut entry = Entry::new(
            Holder::Balancing { id: self.run },
            self.key.clone(),
            Action::ganeti(op),
            format!("balancing ({}): {} {}", self.group, self.op, self.instance),
            self.created_ms,
            self.created_ms.saturating_add(MOVE_DEADLINE_MS),
        );
        if let Some((instance, n)) = self.key.rsplit_once('-')
            && let Ok(n) = n.parse::<usize>()
            && n > 1
        {
            entry = entry.after([format!("{instance}-{}", n - 1)]);
        }
        entry.about = BTreeMap::from([
            ("group".to_owned(), self.group.clone()),
            ("proposal".to_owned(), self.holder.to_string()),
        ]);
        entry.state = match self.state {
            MoveState::Planned => State::Recorded,
            MoveState::Submitted => State::Submitted,
            MoveState::Succeeded => State::Succeeded,
            MoveState::Failed => State::Failed {
                why: self.error.clone().unwrap_or_default(),
            },
        };
        entry.job = self.job_id;
        entry.finished_ms = self.finished_ms;
        entry
    }

    /// The balancing move of a ledger entry (`None` for other holders' entries).
    pub fn from_entry(entry: &Entry) -> Option<Self> {
        let Holder::Balancing { id: run } = entry.holder else {
            return None;
        };
        let (instance, op) = match entry.action.op()? {
            Op::MigrateInstance { instance, target } => (
                instance,
                HbalOp::Migrate {
                    target: target.clone(),
                },
            ),
            Op::FailoverInstance { instance, target } => (
                instance,
                HbalOp::Failover {
                    target: target.clone(),
                },
            ),
            Op::ReplaceDisks {
                instance,
                mode:
                    ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: Some(node),
                        ..
                    },
            } => (instance, HbalOp::ReplaceSecondary { node: node.clone() }),
            _ => return None,
        };
        let state = match &entry.state {
            State::Recorded => MoveState::Planned,
            State::Submitted | State::TimedOut => MoveState::Submitted,
            State::Succeeded => MoveState::Succeeded,
            State::Failed { .. } | State::Canceled { .. } => MoveState::Failed,
        };
        Some(Self {
            run,
            key: entry.key.clone(),
            holder: entry
                .about
                .get("proposal")
                .and_then(|p| Uuid::parse_str(p).ok())
                .unwrap_or(run),
            group: entry.about.get("group").cloned().unwrap_or_default(),
            instance: instance.clone(),
            op,
            state,
            job_id: entry.job,
            created_ms: entry.recorded_ms,
            finished_ms: entry.finished_ms,
            error: entry
                .state
                .why()
                .filter(|why| !why.is_empty())
                .map(str::to_owned),
        })
    }
}
