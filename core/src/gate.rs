//! The gate: which proposed disruptions may start this round, and what holds the others. Pure,
//! no IO.
//!
//! Every duty (node repair, instance repair, rolling maintenance, balancing) turns what it wants
//! into [`Proposal`]s; other tools' admission requests (`POST /1/disruptions`) are proposals too.
//! [`decide`] judges them in maintd's order (node repairs, then instance repairs, then rolling
//! maintenance, then balancing; within a duty the most invasive first, then the oldest) against
//! the disruptions already in force ([`InForce`]), adding each admitted proposal to them before
//! the next is judged. Every refused proposal gets a [`BlockedBy`] naming exactly what holds it.
//!
//! The rules, in the order they are checked for a proposal that opens a new disruption:
//!
//! 1. **Storm breaker**: while it is open nothing new starts (work in flight goes on).
//!    Nor, by [`crate::calendar`], does a kind of work that obeys maintenance windows and
//!    freezes outside a window or in a freeze (campaigns, balancing and admissions by default;
//!    repairs by rule).
//! 2. **Failure domains**: disrupted nodes (drained, offline, evacuating, rebooting, being
//!    repaired, whoever did it) sit in one failure domain at a time. An operator override of a
//!    domain waives this rule (and the caps) for that domain until it expires.
//! 3. **Caps**: per node group and cluster-wide, the absolute and percentage caps on disrupted
//!    vm-capable nodes and `min_healthy_nodes`.
//! 4. **Storage health**: a new failure domain opens only while all storage is whole (every DRBD
//!    disk connected and up to date, no instance with a secondary on a drained or offline node);
//!    more nodes of the busy domain only while every storage problem involves a node that domain
//!    already holds disrupted. Storage health that cannot be known blocks like bad health.
//! 5. **Capacity**: the memory of the instances to move must fit on the healthy nodes left in
//!    the node group (N+1 for the moved instances), together with the memory reserved there for
//!    what already moves or may have to: the primaries still on every node in force (an
//!    incident's, a campaign's, a grant's, and a node drained or offline outside nodecare or
//!    left so by a failed evacuation: uncertainty blocks, never admits) and what the proposals
//!    admitted earlier in the round move. A refusal names each reservation and its holder. A proposal that moves nothing still must not take the
//!    free memory of its nodes from what is reserved. Unknown free memory or sizes never fit.
//!    (Disk is not checked here: the planner checks it on each new DRBD secondary.)
//!
//! A proposal that disrupts no node (a live repair, whose instances keep running; a balancing
//! move) only `touches` nodes: it is refused on a node another holder holds and while the
//! breaker is open, and, when it moves instances (`moves_memory` other than `Some(0)`; a
//! balancing move always does), while storage is not whole or unknown. A live repair holds its
//! node from its admission until it ends ([`InForce::touched`]): no other holder acts there,
//! but it opens no failure domain, uses no cap and reserves no memory; while it runs, its
//! proposal is a continuation. A balancing move holds the nodes it moves its instance off and
//! onto the same way, from its admission until its jobs end. A campaign holds its rebooted nodes the same way while
//! their instances migrate back, and an instance repair the nodes in service of its instance
//! while its jobs run.
//!
//! A proposal that only continues a disruption its holder already holds (the next moves of an
//! admitted evacuation) is a continuation: it is checked only against proposals admitted earlier
//! in the round on the same nodes, never against the breaker, the domains or the caps, so work
//! in flight finishes. A `fresh` proposal (its holder holds its nodes, but none of its jobs was
//! recorded: escalated from a live repair, or admitted in a round that ended before its first
//! job) is judged in full, its holder's hold of those nodes counting as a touch until it is
//! admitted: it opens no domain and lets no storage problem pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::calendar::{CalendarNow, WorkKind};

/// A duty of the coordinator, in the order the gate serves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Duty {
    /// Node repair: incidents from the agents' verdicts (maintd).
    NodeRepair,
    /// Instance auto-repair (harep's tags).
    InstanceRepair,
    /// Rolling maintenance campaigns.
    Maintenance,
    /// Balancing (hbal's moves).
    Balancing,
    /// Another tool's admission request (`POST /1/disruptions`).
    Admission,
}

impl Duty {
    /// The wire and log spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NodeRepair => "node-repair",
            Self::InstanceRepair => "instance-repair",
            Self::Maintenance => "maintenance",
            Self::Balancing => "balancing",
            Self::Admission => "admission",
        }
    }
}

/// Who holds a node disrupted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Holder {
    /// A node-repair incident.
    Incident {
        /// The incident.
        id: Uuid,
    },
    /// An instance repair.
    InstanceRepair {
        /// The repair's uuid (as in its `pending:` tag).
        id: Uuid,
    },
    /// A rolling-maintenance campaign.
    Campaign {
        /// The campaign.
        id: Uuid,
    },
    /// A balancing run.
    Balancing {
        /// The run.
        id: Uuid,
    },
    /// An admission granted to another tool.
    Grant {
        /// The grant.
        id: Uuid,
        /// Who asked (`requester` of the request).
        requester: String,
    },
    /// Nobody holds it, yet the node is drained or offline in Ganeti: set outside nodecare, or
    /// left so by a nodecare record that no longer holds it (a canceled incident, a completed
    /// evacuation, a campaign's node left drained). Either way another holder may take it over.
    Someone {
        /// `drained` or `offline`.
        flag: String,
        /// The nodecare record whose job set the flag, when the flag is still the one it set
        /// (`incident <uuid> (canceled)`); `None`: set outside nodecare.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        left_by: Option<String>,
    },
}

impl Holder {
    /// The record uuid, when nodecare holds the node.
    pub const fn id(&self) -> Option<Uuid> {
        match self {
            Self::Incident { id }
            | Self::InstanceRepair { id }
            | Self::Campaign { id }
            | Self::Balancing { id }
            | Self::Grant { id, .. } => Some(*id),
            Self::Someone { .. } => None,
        }
    }
}

impl Holder {
    /// The id an approval names the holder by (`None`: a holder nobody approves: a balancing
    /// run, another tool's grant, someone outside nodecare).
    pub const fn approval_id(&self) -> Option<Uuid> {
        match self {
            Self::Incident { id } | Self::Campaign { id } | Self::InstanceRepair { id } => {
                Some(*id)
            }
            Self::Balancing { .. } | Self::Grant { .. } | Self::Someone { .. } => None,
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incident { id } => write!(f, "incident {id}"),
            Self::InstanceRepair { id } => write!(f, "instance repair {id}"),
            Self::Campaign { id } => write!(f, "maintenance campaign {id}"),
            Self::Balancing { id } => write!(f, "balancing {id}"),
            Self::Grant { id, requester } => write!(f, "admission {id} of {requester}"),
            Self::Someone {
                flag,
                left_by: None,
            } => write!(f, "{flag} outside nodecare"),
            Self::Someone {
                flag,
                left_by: Some(by),
            } => write!(f, "{flag} by {by}"),
        }
    }
}

/// Whether a node's storage is whole, as far as the gate can tell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageProblem {
    /// The nodes involved (both nodes of a DRBD pair, or the node whose report is missing).
    pub nodes: BTreeSet<String>,
    /// What is wrong, for people (`inst3: minor 0 on node2 StandAlone`, `node7 (unreachable)`).
    pub what: String,
    /// Health cannot be known (report missing, stale, unverifiable), rather than known bad.
    pub unknown: bool,
    /// All that is wrong is its node's drained flag (an instance's primary or secondary on a
    /// drained node): gone once that node is undrained.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drained: bool,
}

/// What the gate knows of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    /// Node name.
    pub name: String,
    /// Node group (name, or uuid when the name is not known).
    pub group: String,
    /// Failure domain ([`DomainSource`]).
    pub domain: String,
    /// Ganeti's `vm_capable`.
    pub vm_capable: bool,
    /// Ganeti's `drained`.
    pub drained: bool,
    /// Ganeti's `offline`.
    pub offline: bool,
    /// Whether it is the master (Ganeti refuses to drain or offline it).
    pub master: bool,
    /// Free memory in MiB, when known.
    pub memory_free: Option<u64>,
    /// Memory of the running instances whose primary this node is, in MiB (`None` when an
    /// instance's size is unknown).
    pub primary_memory: Option<u64>,
    /// How many instances have this node as their primary (what draining or rebooting it
    /// moves).
    #[serde(default)]
    pub primaries: usize,
}

impl NodeFacts {
    /// Online, undrained and vm-capable.
    pub const fn is_healthy(&self) -> bool {
        self.vm_capable && !self.drained && !self.offline
    }
}

/// Where failure domains come from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DomainSource {
    /// One domain per node group (the default).
    #[default]
    NodeGroup,
    /// The value of the first node tag with this prefix (`rack:` → `rack:r1`); nodes without
    /// such a tag form the domain `<prefix>?` (one domain, so that an unlabelled node never
    /// escapes the rule).
    TagPrefix(String),
}

impl DomainSource {
    /// Parses `--failure-domains`/`failure_domains`: `group` or a tag prefix such as `rack:`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "" => Err("failure domains: empty".into()),
            "group" | "node-group" => Ok(Self::NodeGroup),
            prefix if prefix.ends_with(':') => Ok(Self::TagPrefix(prefix.to_owned())),
            other => Err(format!(
                "failure domains: {other:?} is neither `group` nor a tag prefix ending in `:`"
            )),
        }
    }

    /// The configuration spelling: `group`, or the tag prefix.
    pub fn as_str(&self) -> &str {
        match self {
            Self::NodeGroup => "group",
            Self::TagPrefix(prefix) => prefix,
        }
    }

    /// The domain of a node with `group` and `tags`.
    pub fn domain_of(&self, group: &str, tags: &[String]) -> String {
        match self {
            Self::NodeGroup => format!("group:{group}"),
            Self::TagPrefix(prefix) => tags
                .iter()
                .find(|tag| tag.starts_with(prefix.as_str()) && tag.len() > prefix.len())
                .cloned()
                .unwrap_or_else(|| format!("{prefix}?")),
        }
    }
}

/// Caps on disrupted nodes, for one node group or the whole cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Caps {
    /// Most vm-capable nodes disrupted at once.
    pub max_disrupted_nodes: usize,
    /// Most vm-capable nodes disrupted at once, in percent of the vm-capable nodes (rounded
    /// down, at least one node).
    pub max_disrupted_percent: Option<f64>,
    /// Fewest healthy (online, undrained, vm-capable, undisrupted) nodes left.
    pub min_healthy_nodes: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Self {
            max_disrupted_nodes: 1,
            max_disrupted_percent: None,
            min_healthy_nodes: 2,
        }
    }
}

/// An operator's override of one failure domain: its proposals are exempt from the one-domain
/// rule and the caps until `until_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The override.
    pub id: Uuid,
    /// The failure domain.
    pub domain: String,
    /// Unix ms when it expires.
    pub until_ms: u64,
    /// Why (audited: in the log, the job reasons and status).
    pub reason: String,
    /// Who set it (the authenticated user).
    pub who: String,
    /// Unix ms when it was set.
    pub created_ms: u64,
}

/// The gate's policy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Policy {
    /// Cluster-wide caps.
    pub cluster: Caps,
    /// Caps per node group (by the group as in [`NodeFacts::group`]); the cluster caps apply too.
    pub groups: BTreeMap<String, Caps>,
    /// Operator overrides in force (expired ones are ignored).
    pub overrides: Vec<Override>,
    /// Why the storm breaker is open, if it is.
    pub breaker: Option<String>,
    /// Maintenance windows and freezes at this round ([`crate::calendar`]).
    #[serde(default, skip_serializing_if = "is_default_calendar")]
    pub calendar: CalendarNow,
    /// What needs an approval, and the decisions ([`crate::approval`]).
    #[serde(default, skip_serializing_if = "is_default_approvals")]
    pub approvals: crate::approval::Approvals,
}

fn is_default_approvals(approvals: &crate::approval::Approvals) -> bool {
    *approvals == crate::approval::Approvals::default()
}

fn is_default_calendar(calendar: &CalendarNow) -> bool {
    *calendar == CalendarNow::default()
}

/// The invasiveness of an instance repair that reinstalls its instance (harep's most invasive
/// repair): its own kind of work ([`WorkKind::Reinstall`]).
pub const REINSTALL_INVASIVENESS: u8 = 4;

/// The kind of work a proposal is, as the calendar tells them apart: a node repair that
/// disrupts no node is a live repair, one that does is an evacuation.
pub fn work_kind(proposal: &Proposal) -> WorkKind {
    match proposal.duty {
        Duty::NodeRepair if proposal.disrupts.is_empty() => WorkKind::LiveRepair,
        Duty::NodeRepair => WorkKind::Evacuation,
        Duty::InstanceRepair if proposal.invasiveness >= REINSTALL_INVASIVENESS => {
            WorkKind::Reinstall
        }
        Duty::InstanceRepair => WorkKind::InstanceRepair,
        Duty::Maintenance => WorkKind::Campaign,
        Duty::Balancing => WorkKind::Balancing,
        Duty::Admission => WorkKind::Admission,
    }
}

/// The cluster as the gate sees it this round.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct View {
    /// Every node, by name.
    pub nodes: BTreeMap<String, NodeFacts>,
    /// Storage problems (empty: storage is whole).
    pub storage: Vec<StorageProblem>,
    /// Unix ms of this round (overrides expire against it).
    pub now_ms: u64,
}

impl View {
    /// The view of a cluster as RAPI shows it: each node's group (by name when `group_names`
    /// knows it), failure domain, flags and memory.
    pub fn from_cluster(
        nodes: &[crate::ganeti::Node],
        instances: &[crate::ganeti::Instance],
        group_names: &BTreeMap<String, String>,
        domains: &DomainSource,
        storage: Vec<StorageProblem>,
        now_ms: u64,
    ) -> Self {
        // Each node's primaries' memory, in one pass over the instances (`None` once one of
        // them has no known memory).
        let mut memory_of: BTreeMap<&str, Option<u64>> = BTreeMap::new();
        let mut primaries_of: BTreeMap<&str, usize> = BTreeMap::new();
        for instance in instances {
            *primaries_of
                .entry(instance.primary_node.as_str())
                .or_default() += 1;
            let sum = memory_of
                .entry(instance.primary_node.as_str())
                .or_insert(Some(0));
            *sum = sum
                .zip(instance.memory)
                .map(|(sum, m)| sum.saturating_add(m));
        }
        let nodes = nodes
            .iter()
            .map(|node| {
                let group = group_names
                    .get(&node.group)
                    .cloned()
                    .unwrap_or_else(|| node.group.clone());
                let primary_memory = memory_of
                    .get(node.name.as_str())
                    .copied()
                    .unwrap_or(Some(0));
                let facts = NodeFacts {
                    name: node.name.clone(),
                    domain: domains.domain_of(&group, &node.tags),
                    group,
                    vm_capable: node.vm_capable,
                    drained: node.drained,
                    offline: node.offline,
                    master: node.role == crate::ganeti::NodeRole::Master,
                    memory_free: node.memory_free,
                    primary_memory,
                    primaries: primaries_of.get(node.name.as_str()).copied().unwrap_or(0),
                };
                (node.name.clone(), facts)
            })
            .collect();
        Self {
            nodes,
            storage,
            now_ms,
        }
    }
}

/// The caps per node group of `configured` (keyed by group name or uuid), keyed as
/// [`NodeFacts::group`] is.
pub fn group_caps(
    configured: &BTreeMap<String, Caps>,
    group_names: &BTreeMap<String, String>,
) -> BTreeMap<String, Caps> {
    configured
        .iter()
        .map(|(key, caps)| {
            let name = group_names.get(key).cloned().unwrap_or_else(|| key.clone());
            (name, *caps)
        })
        .collect()
}

/// What one duty holds in force, from which (with the executor's ledger) the gate's [`InForce`]
/// is built.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Holds {
    /// Nodes it disrupts (drained, rebooting, repairing), and as whom.
    pub disrupted: Vec<(String, Holder)>,
    /// Nodes it touches without disrupting them (targets of moves, peers).
    pub touched: Vec<(String, Holder)>,
    /// Drain and offline flags it changed (so that the gate knows who left a node so).
    pub left: Vec<FlagChange>,
}

/// The disruptions in force: who holds which node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct InForce {
    /// The disrupted nodes: node name → holder.
    pub nodes: BTreeMap<String, Holder>,
    /// Nodes held without being disrupted (a live repair in progress: the node's instances keep
    /// running; a rebooted node its instances migrate back onto; the nodes in service of an
    /// instance repair whose jobs run): node name → holder. No other holder may act there, but
    /// they open no failure domain, count against no cap and free or reserve no memory.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub touched: BTreeMap<String, Holder>,
}

impl InForce {
    /// The disruptions in force from nodecare's own holds plus every node Ganeti shows drained
    /// or offline that nodecare does not hold ([`Holder::Someone`]).
    pub fn new(view: &View, held: impl IntoIterator<Item = (String, Holder)>) -> Self {
        let mut nodes: BTreeMap<String, Holder> = held
            .into_iter()
            .filter(|(node, _)| view.nodes.contains_key(node))
            .collect();
        for facts in view.nodes.values() {
            if nodes.contains_key(&facts.name) {
                continue;
            }
            let flag = if facts.offline {
                "offline"
            } else if facts.drained {
                "drained"
            } else {
                continue;
            };
            nodes.insert(
                facts.name.clone(),
                Holder::Someone {
                    flag: flag.to_owned(),
                    left_by: None,
                },
            );
        }
        Self {
            nodes,
            touched: BTreeMap::new(),
        }
    }

    /// Adds the nodes `held` without being disrupted ([`InForce::touched`]: a live repair in
    /// progress, migrations back after a campaign's reboot, a running instance repair); nodes
    /// not in `view` are left out.
    #[must_use]
    pub fn with_touched(
        mut self,
        view: &View,
        held: impl IntoIterator<Item = (String, Holder)>,
    ) -> Self {
        for (node, holder) in held {
            if view.nodes.contains_key(&node) && self.nodes.get(&node) != Some(&holder) {
                self.touched.insert(node, holder);
            }
        }
        self
    }

    /// Names the nodecare records that left nodes drained or offline ([`left_by`]): a node
    /// nobody holds is then shown as `drained by incident <uuid> (canceled)` rather than
    /// `drained outside nodecare`. What the gate decides does not change.
    #[must_use]
    pub fn with_left_by(mut self, left: &BTreeMap<String, String>) -> Self {
        for (node, holder) in &mut self.nodes {
            if let Holder::Someone { left_by, .. } = holder {
                *left_by = left.get(node).cloned();
            }
        }
        self
    }

    /// The failure domains with disrupted nodes, each with its nodes and their holders.
    pub fn domains<'a>(&'a self, view: &View) -> BTreeMap<String, Vec<(&'a str, &'a Holder)>> {
        let mut domains: BTreeMap<String, Vec<(&str, &Holder)>> = BTreeMap::new();
        for (node, holder) in &self.nodes {
            let domain = view
                .nodes
                .get(node)
                .map_or_else(|| "?".to_owned(), |facts| facts.domain.clone());
            domains
                .entry(domain)
                .or_default()
                .push((node.as_str(), holder));
        }
        domains
    }
}

/// A drained or offline flag a nodecare record set or cleared on a node, by a job that
/// succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagChange {
    /// The node.
    pub node: String,
    /// `drained` or `offline` (as in [`Holder::Someone`]).
    pub flag: String,
    /// Set (drain, offline) or cleared (undrain, online).
    pub set: bool,
    /// Unix ms when its job finished.
    pub at_ms: u64,
    /// The record, for people (`incident <uuid> (canceled)`).
    pub by: String,
}

/// Which nodecare record left each node drained or offline: for every node whose current flag
/// (offline, else drained) a record's job set and no later nodecare job cleared, that record
/// (the latest to set it). A flag nodecare cleared since, or never touched, is not ours.
pub fn left_by(
    view: &View,
    changes: impl IntoIterator<Item = FlagChange>,
) -> BTreeMap<String, String> {
    let last = latest_flag_changes(changes);
    view.nodes
        .values()
        .filter_map(|facts| {
            let flag = if facts.offline {
                "offline"
            } else if facts.drained {
                "drained"
            } else {
                return None;
            };
            last.iter()
                .find(|change| change.node == facts.name && change.flag == flag)
                .filter(|change| change.set)
                .map(|change| (facts.name.clone(), change.by.clone()))
        })
        .collect()
}

/// The latest change of each node's flag (by `at_ms`; the later one on a tie).
pub fn latest_flag_changes(changes: impl IntoIterator<Item = FlagChange>) -> Vec<FlagChange> {
    let mut last: BTreeMap<(String, String), FlagChange> = BTreeMap::new();
    for change in changes {
        let key = (change.node.clone(), change.flag.clone());
        if last.get(&key).is_none_or(|seen| change.at_ms >= seen.at_ms) {
            last.insert(key, change);
        }
    }
    last.into_values().collect()
}

/// The flags set by records now forgotten that nodes still carry (`changes` as remembered):
/// a node seen back in service since is no longer left so by them, whoever flags it later.
pub fn still_left(view: &View, changes: Vec<FlagChange>) -> Vec<FlagChange> {
    latest_flag_changes(changes)
        .into_iter()
        .filter(|change| {
            change.set
                && view
                    .nodes
                    .get(&change.node)
                    .is_some_and(|facts| match change.flag.as_str() {
                        "offline" => facts.offline,
                        "drained" => facts.drained,
                        _ => false,
                    })
        })
        .collect()
}

/// Something a duty wants to do, with what it disrupts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// The duty proposing it.
    pub duty: Duty,
    /// Who will hold the disrupted nodes (the duty's record).
    pub holder: Holder,
    /// What it acts on, for people (`node node3`, `instance inst1`).
    pub subject: String,
    /// How invasive (higher first within a duty): live-repair 1, evacuate 2, evacuate-failover 3.
    pub invasiveness: u8,
    /// Unix ms when the need arose (older first within the same invasiveness).
    pub since_ms: u64,
    /// Nodes it drains, offlines, reboots or repairs.
    pub disrupts: BTreeSet<String>,
    /// Nodes it moves instances off or onto without disrupting them (a balancing move, an
    /// instance repair's failover): never a node another holder disrupts, and never while
    /// storage is not whole.
    #[serde(default)]
    pub touches: BTreeSet<String>,
    /// It starts a new disruption even where its holder already holds the nodes (an incident
    /// escalated from a live repair to an evacuation, or admitted before and none of its jobs
    /// recorded): judged in full, never a continuation, with those nodes held by it in name
    /// only (see [`decide`]).
    #[serde(default)]
    pub fresh: bool,
    /// Memory in MiB of the instances it moves off `disrupts` (N+1 check); `None` when unknown,
    /// `Some(0)` when nothing moves.
    pub moves_memory: Option<u64>,
    /// Nodes its holder releases before any of its jobs runs (a campaign's next group proposed
    /// while the previous group's undrain jobs run, its jobs chained after them), each with the
    /// memory in MiB its holder moves onto it once released (its migrations back; `None` when
    /// unknown): it is judged on the cluster as it will be when it starts, those nodes
    /// undrained, no longer disrupted, with that much less memory free. Nodes its holder does
    /// not hold disrupted are left as they are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub after_releases: BTreeMap<String, Option<u64>>,
    /// Why, for people.
    pub reason: String,
}

/// Why a proposal may not start now: the wire type, named the same at both ends.
pub use nodecare_protocol::gate::BlockedBy;

/// How a proposal was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admitted {
    /// It opens a new disruption.
    New,
    /// It continues a disruption its holder already holds.
    Continuation,
    /// It opens a new disruption under an operator override of its domain.
    Override {
        /// The override.
        id: Uuid,
    },
}

/// The gate's answer for one proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// The proposal.
    pub proposal: Proposal,
    /// Admitted, or what blocks it.
    pub outcome: Result<Admitted, BlockedBy>,
}

/// One failure domain as the gate left it, for status pages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainState {
    /// The domain.
    pub domain: String,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Its disrupted nodes, each with its holder.
    pub disrupted: Vec<(String, String)>,
    /// An override in force, if any.
    pub override_until_ms: Option<u64>,
}

/// What the gate decided this round.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Decision {
    /// Every proposal in the order judged.
    pub judgements: Vec<Judgement>,
    /// The disruptions in force after the admitted proposals.
    pub in_force: InForce,
}

impl Decision {
    /// The admitted proposals.
    pub fn admitted(&self) -> impl Iterator<Item = &Judgement> {
        self.judgements.iter().filter(|j| j.outcome.is_ok())
    }

    /// The refused proposals with what blocks them.
    pub fn refused(&self) -> impl Iterator<Item = (&Proposal, &BlockedBy)> {
        self.judgements
            .iter()
            .filter_map(|j| j.outcome.as_ref().err().map(|b| (&j.proposal, b)))
    }

    /// The judgement of `holder`'s proposal, if it made one.
    pub fn of(&self, holder: &Holder) -> Option<&Judgement> {
        self.judgements
            .iter()
            .find(|j| &j.proposal.holder == holder)
    }
}

/// What the gate saw and decided in one round, kept for the API (admission requests are judged
/// against it) and status pages; recorded as it is (JSON), it replays to the same decision
/// ([`GateSnapshot::replay`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GateSnapshot {
    /// The cluster as the gate saw it: the round's own view, shared (on a big cluster it is
    /// megabytes, and the board, the round and the flight recorder's last record hold it at
    /// once).
    pub view: std::sync::Arc<View>,
    /// The policy it applied.
    pub policy: Policy,
    /// The disruptions in force before the round's proposals.
    pub in_force: InForce,
    /// What it decided.
    pub decision: Decision,
    /// What the round's holders came to hold after the decision, once they recorded their
    /// operations (the executor's ledger: an evacuation's drain and the nodes its moves go to,
    /// a campaign's drains): held too when a request is judged between rounds. Not part of the
    /// decision: never recorded nor replayed.
    #[serde(skip)]
    pub recorded_after: InForce,
}

impl GateSnapshot {
    /// The decision the gate makes again from what it saw: the same view, policy and
    /// disruptions in force, and the proposals it judged.
    pub fn replay(&self) -> Decision {
        decide(
            &self.view,
            &self.policy,
            &self.in_force,
            self.decision
                .judgements
                .iter()
                .map(|j| j.proposal.clone())
                .collect(),
        )
    }
}

/// The caps of `group` (the cluster's when the group has none of its own).
fn caps_limit(caps: &Caps, vm_capable: usize) -> usize {
    let by_percent = caps.max_disrupted_percent.map_or(usize::MAX, |percent| {
        // Rounded down, at least one node: a percentage never forbids all maintenance.
        let share = (vm_capable as f64 * percent / 100.0).floor();
        if share.is_finite() && share >= 1.0 {
            share as usize
        } else {
            1
        }
    });
    caps.max_disrupted_nodes.min(by_percent)
}

/// How [`caps_limit`] comes about, for people: the settings and, for a percentage, what it is
/// taken of and how it rounds (`max_disrupted_percent = 50% of 3 vm-capable nodes = 1.5,
/// rounded down to 1`).
fn cap_explained(caps: &Caps, vm_capable: usize) -> String {
    let nodes = format!("max_disrupted_nodes = {}", caps.max_disrupted_nodes);
    let Some(percent) = caps.max_disrupted_percent else {
        return nodes;
    };
    let exact = vm_capable as f64 * percent / 100.0;
    let allowed = caps_limit(
        &Caps {
            max_disrupted_nodes: usize::MAX,
            ..*caps
        },
        vm_capable,
    );
    // Two decimals are enough to show why it rounds as it does.
    let shown = format!("{exact:.2}");
    let shown = shown.trim_end_matches('0').trim_end_matches('.');
    let share = if exact < 1.0 {
        format!(" = {shown}, at least 1")
    } else if exact.fract() == 0.0 {
        format!(" = {allowed}")
    } else {
        format!(" = {shown}, rounded down to {allowed}")
    };
    format!("{nodes}, max_disrupted_percent = {percent}% of {vm_capable} vm-capable node(s){share}")
}

/// Why `caps` refuse disrupting `adding` more nodes among `scope` (a node group or the whole
/// cluster), if they do.
fn cap_refusal(
    scope: &str,
    caps: &Caps,
    nodes: &[&NodeFacts],
    in_force: &InForce,
    adding: &BTreeSet<String>,
) -> Option<String> {
    let vm_capable: Vec<&&NodeFacts> = nodes.iter().filter(|n| n.vm_capable).collect();
    // Taking over a node someone else disrupted counts like disrupting it: the others are
    // judged against the cap with it.
    let new: BTreeSet<&str> = vm_capable
        .iter()
        .filter(|n| adding.contains(&n.name))
        .map(|n| n.name.as_str())
        .collect();
    let disrupted: BTreeSet<&str> = vm_capable
        .iter()
        .filter(|n| in_force.nodes.contains_key(&n.name) && !new.contains(n.name.as_str()))
        .map(|n| n.name.as_str())
        .collect();
    if new.is_empty() {
        return None;
    }
    let limit = caps_limit(caps, vm_capable.len());
    let after = disrupted.len() + new.len();
    if after > limit {
        let list = |nodes: &BTreeSet<&str>| {
            if nodes.is_empty() {
                "none".to_owned()
            } else {
                nodes.iter().copied().collect::<Vec<_>>().join(", ")
            }
        };
        return Some(format!(
            "{scope}: at most {limit} node(s) disrupted at once ({}); disrupting {} ({}) with {} already disrupted ({}) would make {after}",
            cap_explained(caps, vm_capable.len()),
            new.len(),
            list(&new),
            disrupted.len(),
            list(&disrupted),
        ));
    }
    let healthy_after = vm_capable
        .iter()
        .filter(|n| {
            n.is_healthy() && !disrupted.contains(n.name.as_str()) && !new.contains(n.name.as_str())
        })
        .count();
    if healthy_after < caps.min_healthy_nodes {
        return Some(format!(
            "{scope}: disrupting {} would leave {healthy_after} healthy node(s), min_healthy_nodes = {}",
            new.iter().copied().collect::<Vec<_>>().join(", "),
            caps.min_healthy_nodes
        ));
    }
    None
}

/// Judges one proposal against the disruptions in force and the memory `reserved` for what
/// they move.
fn judge(
    view: &View,
    policy: &Policy,
    in_force: &InForce,
    reserved: &[Reservation],
    proposal: &Proposal,
) -> Result<Admitted, BlockedBy> {
    for node in &proposal.disrupts {
        if !view.nodes.contains_key(node) {
            return Err(BlockedBy::UnknownNode { node: node.clone() });
        }
    }
    // Held by someone else this round (or before): never two holders on one node.
    for node in &proposal.disrupts {
        if let Some(holder) = in_force
            .touched
            .get(node)
            .filter(|holder| *holder != &proposal.holder)
        {
            return Err(BlockedBy::Conflict {
                node: node.clone(),
                holder: holder.to_string(),
            });
        }
        if let Some(holder) = in_force.nodes.get(node) {
            let ours = holder == &proposal.holder;
            let someone = matches!(holder, Holder::Someone { .. });
            if !ours && !someone {
                return Err(BlockedBy::Conflict {
                    node: node.clone(),
                    holder: holder.to_string(),
                });
            }
        }
    }
    for node in &proposal.touches {
        if !view.nodes.contains_key(node) {
            return Err(BlockedBy::UnknownNode { node: node.clone() });
        }
        if in_force.touched.get(node) == Some(&proposal.holder) {
            // Its own hold (a live repair in progress), drained by someone meanwhile or not.
            continue;
        }
        if let Some(holder) = in_force
            .nodes
            .get(node)
            .or_else(|| in_force.touched.get(node))
            && holder != &proposal.holder
        {
            return Err(BlockedBy::Conflict {
                node: node.clone(),
                holder: holder.to_string(),
            });
        }
    }
    // A live repair in progress: it only goes on holding what it holds.
    if proposal.disrupts.is_empty()
        && !proposal.fresh
        && !proposal.touches.is_empty()
        && proposal
            .touches
            .iter()
            .all(|node| in_force.touched.get(node) == Some(&proposal.holder))
    {
        return Ok(Admitted::Continuation);
    }
    let new: BTreeSet<String> = proposal
        .disrupts
        .iter()
        .filter(|node| proposal.fresh || in_force.nodes.get(*node) != Some(&proposal.holder))
        .cloned()
        .collect();
    if new.is_empty() && !proposal.disrupts.is_empty() {
        return Ok(Admitted::Continuation);
    }
    // An evacuation drains and offlines its node: Ganeti refuses both on the master. (A
    // campaign reboots the master without draining it; moves off it need no drain.)
    if let Some(node) = new.iter().find(|node| {
        proposal.duty == Duty::NodeRepair && view.nodes.get(*node).is_some_and(|facts| facts.master)
    }) {
        return Err(BlockedBy::Master { node: node.clone() });
    }
    if let Some(why) = &policy.breaker {
        return Err(BlockedBy::Breaker { why: why.clone() });
    }
    if let Some(block) = policy.calendar.blocks(work_kind(proposal)) {
        return Err(block);
    }
    if let Some(block) = policy.approvals.blocks(
        work_kind(proposal),
        proposal.holder.approval_id(),
        &proposal.holder.to_string(),
        new.iter()
            .filter_map(|node| view.nodes.get(node))
            .map(|facts| facts.primaries)
            .sum(),
    ) {
        return Err(block);
    }
    if new.is_empty() {
        // Disrupts no node: no domain or cap is used. Work that moves nothing (a live repair:
        // its instances keep running) needs nothing more; moves need storage whole.
        if proposal.moves_memory == Some(0) {
            return Ok(Admitted::New);
        }
        // An instance repair that fixes storage on the nodes it touches is not held back by
        // that very problem.
        let repaired_here = |problem: &&StorageProblem| {
            proposal.duty == Duty::InstanceRepair
                && problem.nodes.iter().all(|n| proposal.touches.contains(n))
        };
        let blocking: Vec<&StorageProblem> =
            view.storage.iter().filter(|p| !repaired_here(p)).collect();
        return match blocking
            .iter()
            .copied()
            .find(|p| p.unknown)
            .or(blocking.first().copied())
        {
            Some(problem) => Err(BlockedBy::Storage {
                what: vec![problem.what.clone()],
                unknown: problem.unknown,
            }),
            None => Ok(Admitted::New),
        };
    }
    let wanted: BTreeSet<&str> = new
        .iter()
        .filter_map(|node| view.nodes.get(node))
        .map(|facts| facts.domain.as_str())
        .collect();
    let override_of = |domain: &str| {
        policy
            .overrides
            .iter()
            .filter(|o| o.domain == domain && o.until_ms > view.now_ms)
            .max_by_key(|o| o.until_ms)
    };
    let overridden: Option<Uuid> = if wanted.len() == 1 {
        wanted
            .iter()
            .next()
            .and_then(|domain| override_of(domain))
            .map(|o| o.id)
    } else {
        None
    };
    let busy = in_force.domains(view);
    if overridden.is_none() {
        // One failure domain at a time.
        let wanted_list: Vec<&str> = wanted.iter().copied().collect();
        if wanted.len() > 1 {
            return Err(BlockedBy::SpansDomains {
                subject: proposal.subject.clone(),
                domains: wanted_list.iter().map(|d| (*d).to_owned()).collect(),
            });
        }
        if let Some((domain, holders)) = busy
            .iter()
            .find(|(domain, _)| !wanted.contains(domain.as_str()))
        {
            return Err(BlockedBy::Domain {
                busy: domain.clone(),
                holders: holders
                    .iter()
                    .map(|(node, holder)| format!("{node}: {holder}"))
                    .collect(),
                wanted: wanted_list
                    .first()
                    .map_or_else(String::new, |d| (*d).to_owned()),
            });
        }
        // Caps: per node group, then cluster-wide.
        let mut groups: BTreeMap<&str, Vec<&NodeFacts>> = BTreeMap::new();
        for facts in view.nodes.values() {
            groups.entry(facts.group.as_str()).or_default().push(facts);
        }
        for (group, caps) in &policy.groups {
            let Some(members) = groups.get(group.as_str()) else {
                continue;
            };
            if let Some(what) = cap_refusal(
                &format!("node group {group}"),
                caps,
                members,
                in_force,
                &new,
            ) {
                return Err(BlockedBy::Cap { what });
            }
        }
        let all: Vec<&NodeFacts> = view.nodes.values().collect();
        if let Some(what) = cap_refusal("cluster", &policy.cluster, &all, in_force, &new) {
            return Err(BlockedBy::Cap { what });
        }
    }
    // Storage health: a new domain needs it whole; the busy domain tolerates only problems
    // that involve nodes it holds disrupted.
    let held_in_wanted: BTreeSet<&str> = in_force
        .nodes
        .keys()
        .filter(|node| {
            view.nodes
                .get(*node)
                .is_some_and(|facts| wanted.contains(facts.domain.as_str()))
        })
        .map(String::as_str)
        .collect();
    let blocking: Vec<&StorageProblem> = view
        .storage
        .iter()
        .filter(|problem| {
            !problem
                .nodes
                .iter()
                .any(|n| held_in_wanted.contains(n.as_str()))
        })
        .collect();
    if !blocking.is_empty() {
        let unknown = blocking.iter().any(|p| p.unknown);
        let what = blocking
            .iter()
            .filter(|p| p.unknown == unknown)
            .map(|p| p.what.clone())
            .collect();
        return Err(BlockedBy::Storage { what, unknown });
    }
    // N+1 for the moved instances: they must fit on the healthy, undisrupted nodes of the
    // node groups they leave.
    if let Some(what) = capacity_refusal(view, in_force, reserved, proposal, &new) {
        return Err(BlockedBy::Capacity { what });
    }
    Ok(overridden.map_or(Admitted::New, |id| Admitted::Override { id }))
}

/// Memory the N+1 check sets aside on the healthy nodes of a node group for instances that
/// move off disrupted nodes: those still on a node in force whose holder empties it (an
/// incident's evacuation, a campaign's reboot, a grant's drain or reboot), and those of the
/// proposals admitted earlier in the round.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reservation {
    /// Who moves them.
    holder: Holder,
    /// The nodes they move off.
    nodes: BTreeSet<String>,
    /// MiB; `None` when an instance's size is unknown.
    memory: Option<u64>,
}

/// The memory reserved for what moves in force: per holder, the memory of the primaries still
/// on its nodes. A node drained or offline outside nodecare (or left so by a record that ended,
/// an evacuation that failed) counts too, each on its own: nobody may be emptying it, yet its
/// instances may have to move (uncertainty blocks, never admits). A node only touched moves
/// nothing.
fn reserved_in_force(view: &View, in_force: &InForce) -> Vec<Reservation> {
    let mut by_holder: BTreeMap<(&Holder, Option<&str>), Reservation> = BTreeMap::new();
    for (node, holder) in &in_force.nodes {
        let Some(facts) = view.nodes.get(node) else {
            continue;
        };
        let own = matches!(holder, Holder::Someone { .. }).then_some(node.as_str());
        let entry = by_holder
            .entry((holder, own))
            .or_insert_with(|| Reservation {
                holder: holder.clone(),
                nodes: BTreeSet::new(),
                memory: Some(0),
            });
        entry.nodes.insert(node.clone());
        entry.memory = entry
            .memory
            .zip(facts.primary_memory)
            .map(|(sum, memory)| sum.saturating_add(memory));
    }
    by_holder.into_values().collect()
}

/// What an admitted `proposal` moves off its nodes, for the N+1 check: its own
/// [`Proposal::moves_memory`], and at least the memory still on the nodes drained outside
/// nodecare that it takes over (they stay disrupted while it holds them, whether it moves their
/// instances, as an evacuation does, or not, as an instance repair taking over a drained
/// secondary does; an offline node runs none of its instances, its own moves say what has to
/// go). `None` when either is unknown.
fn moves_with_takeover(view: &View, reserved: &[Reservation], proposal: &Proposal) -> Option<u64> {
    let taken_over = reserved
        .iter()
        .filter(|r| {
            r.holder != proposal.holder
                && matches!(r.holder, Holder::Someone { .. })
                && r.nodes.is_subset(&proposal.disrupts)
                && r.nodes
                    .iter()
                    .all(|n| view.nodes.get(n).is_some_and(|f| !f.offline))
        })
        .try_fold(0u64, |sum, r| Some(sum.saturating_add(r.memory?)))?;
    proposal.moves_memory.map(|own| own.max(taken_over))
}

fn capacity_refusal(
    view: &View,
    in_force: &InForce,
    reserved: &[Reservation],
    proposal: &Proposal,
    new: &BTreeSet<String>,
) -> Option<String> {
    let Some(needed) = moves_with_takeover(view, reserved, proposal) else {
        return Some(format!(
            "memory of the instances on {} unknown",
            proposal.subject
        ));
    };
    let groups: BTreeSet<&str> = new
        .iter()
        .filter_map(|n| view.nodes.get(n))
        .map(|f| f.group.as_str())
        .collect();
    // What others move off nodes of these groups needs room on the same healthy nodes (a node
    // drained outside nodecare the proposal takes over is counted in its own memory), and so
    // does what its own holder still has on nodes it holds outside this proposal (a campaign's
    // node that failed in an earlier group, drained with its instances still on it).
    let others: Vec<&Reservation> = reserved
        .iter()
        .filter(|r| {
            let own_here = r.holder == proposal.holder && r.nodes.is_subset(&proposal.disrupts);
            !(own_here || r.nodes.is_subset(new))
                && r.nodes.iter().any(|n| {
                    view.nodes
                        .get(n)
                        .is_some_and(|f| groups.contains(f.group.as_str()))
                })
        })
        .collect();
    let mut reserved_total: u64 = 0;
    for reservation in &others {
        match reservation.memory {
            Some(memory) => reserved_total = reserved_total.saturating_add(memory),
            None => {
                return Some(format!(
                    "memory of the instances moving off {} ({}) unknown",
                    join(&reservation.nodes),
                    reservation.holder
                ));
            }
        }
    }
    if needed == 0 && reserved_total == 0 {
        return None;
    }
    let mut free: u64 = 0;
    for facts in view.nodes.values().filter(|f| {
        groups.contains(f.group.as_str())
            && f.is_healthy()
            && !in_force.nodes.contains_key(&f.name)
            && !in_force.touched.contains_key(&f.name)
            && !new.contains(&f.name)
    }) {
        match facts.memory_free {
            Some(memory) => free = free.saturating_add(memory),
            None => return Some(format!("free memory of {} unknown", facts.name)),
        }
    }
    if free >= needed.saturating_add(reserved_total) {
        return None;
    }
    let groups = groups.iter().copied().collect::<Vec<_>>().join(", ");
    let mut what = format!(
        "the instances of {} need {needed} MiB, the healthy nodes left in node group {groups} have {free} MiB free",
        proposal.subject
    );
    if !others.is_empty() {
        let by_whom = others
            .iter()
            .map(|r| {
                format!(
                    "{} ({}): {} MiB",
                    join(&r.nodes),
                    r.holder,
                    r.memory.unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        what.push_str(&format!(
            ", {reserved_total} MiB of it reserved for instances moving off {by_whom}; {} MiB left",
            free.saturating_sub(reserved_total)
        ));
    }
    Some(what)
}

fn join(nodes: &BTreeSet<String>) -> String {
    nodes
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A planned disruption of a node (an admission grant, a maintenance reboot), for the grace:
/// the node, the Unix ms its grace runs from, and its holder for people (`maintenance campaign
/// <id>`, `admission <id> of <requester>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The node disrupted.
    pub node: String,
    /// Unix ms the grace runs from.
    pub from_ms: u64,
    /// Who plans it, for people.
    pub holder: String,
}

/// A node's grace: until when (Unix ms), and the planned disruption it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grace {
    /// Unix ms it ends.
    pub until_ms: u64,
    /// The planned disruption's holder, for people.
    pub holder: String,
    /// The node that disruption is of.
    pub disrupted: String,
}

impl std::fmt::Display for Grace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the grace of {}'s disruption of {} until {} ms",
            self.holder, self.disrupted, self.until_ms
        )
    }
}

/// The nodes each node shares a DRBD instance with (its instances' other nodes), by node: what
/// a disruption of the node touches besides itself (their disks resync while it is away).
pub fn drbd_peers(instances: &[crate::ganeti::Instance]) -> BTreeMap<String, BTreeSet<String>> {
    let mut peers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for instance in instances.iter().filter(|i| !i.secondary_nodes.is_empty()) {
        let nodes: Vec<&String> = std::iter::once(&instance.primary_node)
            .chain(&instance.secondary_nodes)
            .collect();
        for a in &nodes {
            for b in &nodes {
                if a != b {
                    peers.entry((*a).clone()).or_default().insert((*b).clone());
                }
            }
        }
    }
    peers
}

/// The grace of planned disruptions (Ceph's `noout`, scoped to what the disruption touches):
/// for each planned disruption of a node, the node itself and the nodes that share a DRBD
/// instance with it (`peers`, [`drbd_peers`]) are in grace until `from_ms + grace_ms`. Nodes
/// in grace that report a problem or go silent open no incident and count for no storm; other
/// nodes of its failure domain are not in grace (a real problem there is acted on, the gate
/// judging it against the disruption). A holder that failed plans no disruption any more, so
/// its grace ends then. Returns node → its grace, the latest ending one (only graces still
/// running at `view.now_ms`).
pub fn grace(
    view: &View,
    planned: &[Planned],
    peers: &BTreeMap<String, BTreeSet<String>>,
    grace_ms: u64,
) -> BTreeMap<String, Grace> {
    let mut graces: BTreeMap<String, Grace> = BTreeMap::new();
    for disruption in planned {
        if !view.nodes.contains_key(&disruption.node) {
            continue;
        }
        let until_ms = disruption.from_ms.saturating_add(grace_ms);
        if until_ms <= view.now_ms {
            continue;
        }
        let touched = std::iter::once(&disruption.node)
            .chain(peers.get(&disruption.node).into_iter().flatten())
            .filter(|node| view.nodes.contains_key(*node));
        for node in touched {
            let grace = Grace {
                until_ms,
                holder: disruption.holder.clone(),
                disrupted: disruption.node.clone(),
            };
            match graces.get(node) {
                Some(kept) if kept.until_ms >= until_ms => {}
                _ => {
                    graces.insert(node.clone(), grace);
                }
            }
        }
    }
    graces
}

/// Sorts proposals into the order the gate serves them.
pub fn order(proposals: &mut [Proposal]) {
    proposals.sort_by(|a, b| {
        a.duty
            .cmp(&b.duty)
            .then(b.invasiveness.cmp(&a.invasiveness))
            .then(a.since_ms.cmp(&b.since_ms))
            .then(a.subject.cmp(&b.subject))
    });
}

/// Decides which `proposals` start this round (see the module documentation).
pub fn decide(
    view: &View,
    policy: &Policy,
    in_force: &InForce,
    mut proposals: Vec<Proposal>,
) -> Decision {
    order(&mut proposals);
    let mut in_force = in_force.clone();
    // A fresh proposal's holder holds its nodes in name only (nothing of it reached Ganeti):
    // until it is admitted they are held without being disrupted by it, so that it opens no
    // domain, uses no cap, reserves no memory and lets no storage problem that involves them
    // pass; a node drained or offline meanwhile (by an operator) is disrupted as Ganeti shows it.
    for proposal in proposals.iter().filter(|p| p.fresh) {
        for node in &proposal.disrupts {
            if in_force.nodes.get(node) != Some(&proposal.holder) {
                continue;
            }
            in_force.nodes.remove(node);
            in_force
                .touched
                .insert(node.clone(), proposal.holder.clone());
            let flag = view.nodes.get(node).and_then(|facts| {
                if facts.offline {
                    Some("offline")
                } else if facts.drained {
                    Some("drained")
                } else {
                    None
                }
            });
            if let Some(flag) = flag {
                in_force.nodes.insert(
                    node.clone(),
                    Holder::Someone {
                        flag: flag.to_owned(),
                        left_by: None,
                    },
                );
            }
        }
    }
    let mut reserved = reserved_in_force(view, &in_force);
    let mut judgements = Vec::with_capacity(proposals.len());
    for proposal in proposals {
        let outcome = match released(view, &in_force, &reserved, &proposal) {
            Some((view, in_force, reserved)) => {
                judge(&view, policy, &in_force, &reserved, &proposal)
            }
            None => judge(view, policy, &in_force, &reserved, &proposal),
        };
        if let Ok(admitted) = &outcome {
            for node in &proposal.disrupts {
                in_force.touched.remove(node);
                in_force.nodes.insert(node.clone(), proposal.holder.clone());
            }
            if proposal.disrupts.is_empty()
                && matches!(proposal.duty, Duty::NodeRepair | Duty::Balancing)
            {
                // A live repair holds its node from now on, a balancing move the nodes it moves
                // its instance off and onto (until its jobs end: then the ledger's holds).
                for node in &proposal.touches {
                    in_force
                        .touched
                        .insert(node.clone(), proposal.holder.clone());
                }
            }
            if *admitted != Admitted::Continuation && !proposal.disrupts.is_empty() {
                // What it moves is set aside for the proposals judged after it; it replaces
                // what its holder (or nobody, on a node drained outside nodecare it takes
                // over) held reserved on these nodes.
                let memory = moves_with_takeover(view, &reserved, &proposal);
                reserved.retain(|r| {
                    !(r.holder == proposal.holder || matches!(r.holder, Holder::Someone { .. }))
                        || !r.nodes.is_subset(&proposal.disrupts)
                });
                reserved.push(Reservation {
                    holder: proposal.holder.clone(),
                    nodes: proposal.disrupts.clone(),
                    memory,
                });
            }
        }
        judgements.push(Judgement { proposal, outcome });
    }
    Decision {
        judgements,
        in_force,
    }
}

/// What `proposal` is judged on when it comes after releases
/// ([`Proposal::after_releases`]): the view with the released nodes undrained (without the
/// storage problems that were only their drained flag, with the memory its holder moves onto
/// them taken from their free memory), the disruptions in force without them, and its holder's
/// reservations without them. `None` when it releases no node its holder holds disrupted.
fn released(
    view: &View,
    in_force: &InForce,
    reserved: &[Reservation],
    proposal: &Proposal,
) -> Option<(View, InForce, Vec<Reservation>)> {
    let releases: BTreeMap<&String, Option<u64>> = proposal
        .after_releases
        .iter()
        .filter(|(node, _)| in_force.nodes.get(*node) == Some(&proposal.holder))
        .map(|(node, arriving)| (node, *arriving))
        .collect();
    if releases.is_empty() {
        return None;
    }
    let mut view = view.clone();
    view.storage
        .retain(|p| !(p.drained && p.nodes.iter().all(|n| releases.contains_key(n))));
    let mut in_force = in_force.clone();
    for (node, arriving) in &releases {
        if let Some(facts) = view.nodes.get_mut(*node) {
            facts.drained = false;
            facts.memory_free = facts
                .memory_free
                .zip(*arriving)
                .map(|(free, arriving)| free.saturating_sub(arriving));
        }
        in_force.nodes.remove(*node);
    }
    let reserved = reserved
        .iter()
        .filter_map(|r| {
            if r.holder != proposal.holder {
                return Some(r.clone());
            }
            let nodes: BTreeSet<String> = r
                .nodes
                .iter()
                .filter(|n| !releases.contains_key(n))
                .cloned()
                .collect();
            (!nodes.is_empty()).then(|| Reservation { nodes, ..r.clone() })
        })
        .collect();
    Some((view, in_force, reserved))
}

/// Every failure domain with its nodes, disruptions and override, for status pages.
pub fn domain_states(view: &View, policy: &Policy, in_force: &InForce) -> Vec<DomainState> {
    let mut states: BTreeMap<&str, DomainState> = BTreeMap::new();
    for facts in view.nodes.values() {
        let state = states
            .entry(facts.domain.as_str())
            .or_insert_with(|| DomainState {
                domain: facts.domain.clone(),
                nodes: Vec::new(),
                disrupted: Vec::new(),
                override_until_ms: policy
                    .overrides
                    .iter()
                    .filter(|o| o.domain == facts.domain && o.until_ms > view.now_ms)
                    .map(|o| o.until_ms)
                    .max(),
            });
        state.nodes.push(facts.name.clone());
        if let Some(holder) = in_force.nodes.get(&facts.name) {
            state
                .disrupted
                .push((facts.name.clone(), holder.to_string()));
        }
    }
    states.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The view's memory of each node's primaries is the sum of their memory, `None` when one
    /// of them has none known, `Some(0)` for a node with no primary.
    fn naive_primary_memory(node: &str, instances: &[crate::ganeti::Instance]) -> Option<u64> {
        instances
            .iter()
            .filter(|i| i.primary_node == node)
            .try_fold(0u64, |sum, i| Some(sum.saturating_add(i.memory?)))
    }

    proptest! {
        #[test]
        fn the_views_primary_memory_sums_each_nodes_primaries(
            placed in proptest::collection::vec((0usize..6, proptest::option::weighted(0.9, 0u64..10_000)), 0..40),
        ) {
            let nodes: Vec<crate::ganeti::Node> = (0..5)
                .map(|i| crate::plan::tests_support::node(&format!("n{i}")))
                .collect();
            let instances: Vec<crate::ganeti::Instance> = placed
                .iter()
                .enumerate()
                .map(|(k, (on, memory))| crate::ganeti::Instance {
                    memory: *memory,
                    ..crate::plan::tests_support::instance(&format!("i{k}"), &format!("n{on}"), 0)
                })
                .collect();
            let view = View::from_cluster(
                &nodes,
                &instances,
                &BTreeMap::new(),
                &DomainSource::NodeGroup,
                Vec::new(),
                0,
            );
            for node in &nodes {
                prop_assert_eq!(
                    view.nodes[&node.name].primary_memory,
                    naive_primary_memory(&node.name, &instances)
                );
            }
        }
    }

    fn node(name: &str, group: &str, domain: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            group: group.into(),
            domain: domain.into(),
            vm_capable: true,
            drained: false,
            offline: false,
            master: false,
            memory_free: Some(4096),
            primary_memory: Some(0),
            primaries: 0,
        }
    }

    /// Six nodes in three domains (racks) of two, one group.
    fn view() -> View {
        let mut nodes = BTreeMap::new();
        for (name, rack) in [
            ("n1", "rack:a"),
            ("n2", "rack:a"),
            ("n3", "rack:b"),
            ("n4", "rack:b"),
            ("n5", "rack:c"),
            ("n6", "rack:c"),
        ] {
            nodes.insert(name.to_owned(), node(name, "default", rack));
        }
        View {
            nodes,
            storage: Vec::new(),
            now_ms: 1_000,
        }
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn repair(n: u128, node: &str) -> Proposal {
        Proposal {
            duty: Duty::NodeRepair,
            holder: Holder::Incident { id: id(n) },
            subject: format!("node {node}"),
            invasiveness: 2,
            since_ms: u64::try_from(n).unwrap_or(0),
            disrupts: [node.to_owned()].into(),
            touches: BTreeSet::new(),
            fresh: false,
            moves_memory: Some(1024),
            after_releases: BTreeMap::new(),
            reason: "evacuate".into(),
        }
    }

    fn roomy() -> Policy {
        capped(10)
    }

    /// At most `nodes` disrupted in the cluster.
    fn capped(nodes: usize) -> Policy {
        Policy {
            cluster: Caps {
                max_disrupted_nodes: nodes,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
            ..Policy::default()
        }
    }

    fn outcome(decision: &Decision, n: u128) -> Result<Admitted, String> {
        outcome_of(decision, &Holder::Incident { id: id(n) })
    }

    fn outcome_of(decision: &Decision, holder: &Holder) -> Result<Admitted, String> {
        let judgement = decision.of(holder).expect("judged");
        judgement.outcome.clone().map_err(|b| b.to_string())
    }

    #[test]
    fn second_domain_waits_and_names_the_busy_one() {
        let view = view();
        let decision = decide(
            &view,
            &roomy(),
            &InForce::default(),
            vec![repair(1, "n1"), repair(2, "n3"), repair(3, "n2")],
        );
        assert_eq!(outcome(&decision, 1), Ok(Admitted::New));
        assert_eq!(
            outcome(&decision, 2),
            Err(format!(
                "failure domain rack:a is disrupted (n1: incident {}); rack:b waits",
                id(1)
            ))
        );
        // Same domain as the admitted one: allowed within the caps.
        assert_eq!(outcome(&decision, 3), Ok(Admitted::New));
    }

    #[test]
    fn the_master_waits_for_a_master_failover() {
        let mut view = view();
        view.nodes.get_mut("n1").expect("n1").master = true;
        let decision = decide(
            &view,
            &roomy(),
            &InForce::default(),
            vec![repair(1, "n1"), repair(2, "n2")],
        );
        assert_eq!(
            outcome(&decision, 1),
            Err("n1 is the master: move the master first (gnt-cluster master-failover on another master candidate)".to_owned())
        );
        assert_eq!(outcome(&decision, 2), Ok(Admitted::New));
    }

    #[test]
    fn a_human_drain_opens_the_domain() {
        let mut view = view();
        view.nodes.get_mut("n5").expect("n5").drained = true;
        let in_force = InForce::new(&view, []);
        let decision = decide(
            &view,
            &roomy(),
            &in_force,
            vec![repair(1, "n1"), repair(2, "n6")],
        );
        let refused = outcome(&decision, 1).expect_err("blocked");
        assert!(
            refused.contains("rack:c is disrupted (n5: drained outside nodecare)"),
            "{refused}"
        );
        assert_eq!(outcome(&decision, 2), Ok(Admitted::New));
    }

    /// Issue 25: a node held without being disrupted (instances migrating back onto it, an
    /// instance repair's jobs on it) is refused to every other holder, disrupting or touching
    /// it, yet opens no failure domain and uses no cap.
    #[test]
    fn a_touched_node_is_refused_to_others_and_uses_no_domain_or_cap() {
        let view = view();
        let campaign = Holder::Campaign { id: id(9) };
        let in_force =
            InForce::new(&view, []).with_touched(&view, [("n3".to_owned(), campaign.clone())]);
        let policy = capped(1);
        let mut live = repair(3, "n3");
        live.disrupts = BTreeSet::new();
        live.touches = ["n3".to_owned()].into();
        live.moves_memory = Some(0);
        let mut own = repair(4, "n4");
        own.holder = campaign.clone();
        own.duty = Duty::Maintenance;
        own.moves_memory = Some(0);
        let decision = decide(
            &view,
            &policy,
            &in_force,
            vec![repair(1, "n3"), repair(2, "n1"), live],
        );
        let conflict = format!("n3 is held by maintenance campaign {}", id(9));
        assert!(
            outcome(&decision, 1).is_err_and(|e| e.contains(&conflict)),
            "{:?}",
            outcome(&decision, 1)
        );
        assert!(
            outcome(&decision, 3).is_err_and(|e| e.contains(&conflict)),
            "{:?}",
            outcome(&decision, 3)
        );
        // Another domain, the cap of one: the touched node counts for neither.
        assert_eq!(outcome(&decision, 2), Ok(Admitted::New));
        // Its own holder goes on beside it.
        let decision = decide(&view, &policy, &in_force, vec![own]);
        assert!(decision.judgements[0].outcome.is_ok(), "{decision:?}");
    }

    #[test]
    fn a_group_after_its_holder_s_releases_is_judged_with_them_released() {
        // The campaign holds n1 and n2 (rack:a), drained, their undrains in flight; its next
        // group is n3 and n4 (rack:b). One domain at a time, at most two nodes.
        let mut view = view();
        for n in ["n1", "n2"] {
            view.nodes.get_mut(n).expect(n).drained = true;
        }
        let campaign = Holder::Campaign { id: id(9) };
        let in_force = InForce::new(
            &view,
            [
                ("n1".to_owned(), campaign.clone()),
                ("n2".to_owned(), campaign.clone()),
            ],
        );
        let policy = capped(2);
        let group = |releases: &[&str], holder: &Holder| Proposal {
            duty: Duty::Maintenance,
            holder: holder.clone(),
            disrupts: ["n3".to_owned(), "n4".to_owned()].into(),
            moves_memory: Some(0),
            after_releases: releases
                .iter()
                .map(|n| ((*n).to_owned(), Some(0)))
                .collect(),
            ..repair(5, "n3")
        };
        let judged = |p: Proposal| {
            decide(&view, &policy, &in_force, vec![p]).judgements[0]
                .outcome
                .clone()
        };
        // Without the releases: another domain is disrupted.
        assert!(
            judged(group(&[], &campaign)).is_err_and(|e| e.to_string().contains("rack:a")),
            "{:?}",
            judged(group(&[], &campaign))
        );
        // Half of them: still.
        assert!(judged(group(&["n1"], &campaign)).is_err());
        // After both: admitted, and the nodes stay in force for what is judged after it.
        assert_eq!(judged(group(&["n1", "n2"], &campaign)), Ok(Admitted::New));
        let mut repair_n1 = repair(6, "n1");
        repair_n1.moves_memory = Some(0);
        let decision = decide(
            &view,
            &policy,
            &in_force,
            vec![group(&["n1", "n2"], &campaign), repair_n1],
        );
        assert!(decision.of(&campaign).is_some_and(|j| j.outcome.is_ok()));
        assert!(
            decision
                .judgements
                .iter()
                .any(|j| j.proposal.holder != campaign && j.outcome.is_err())
        );
        assert_eq!(decision.in_force.nodes.len(), 4);
        // Another holder cannot release nodes it does not hold.
        let other = Holder::Campaign { id: id(10) };
        assert!(judged(group(&["n1", "n2"], &other)).is_err());
        // Capacity: n5 and n6 have 8192 MiB free, n1 and n2 4096 each once released, less
        // what migrates back onto them; unknown, the check refuses.
        let mut big = group(&["n1", "n2"], &campaign);
        big.moves_memory = Some(13_000);
        assert_eq!(judged(big.clone()), Ok(Admitted::New));
        big.after_releases.insert("n2".to_owned(), Some(1000));
        assert_eq!(judged(big.clone()), Ok(Admitted::New));
        big.after_releases.insert("n2".to_owned(), Some(3500));
        assert!(
            matches!(judged(big.clone()), Err(BlockedBy::Capacity { .. })),
            "{:?}",
            judged(big)
        );
        big.after_releases.insert("n2".to_owned(), None);
        assert!(
            judged(big.clone()).is_err_and(|e| e.to_string().contains("n2 unknown")),
            "{:?}",
            judged(big)
        );
        // Storage: an instance on a released node is whole once it is undrained; a degraded
        // disk there is not.
        let mut view = view.clone();
        view.storage.push(StorageProblem {
            nodes: ["n1".to_owned()].into(),
            what: "i1: secondary n1 is drained".into(),
            unknown: false,
            drained: true,
        });
        let judged_here = |view: &View| {
            decide(
                view,
                &policy,
                &in_force,
                vec![group(&["n1", "n2"], &campaign)],
            )
            .judgements[0]
                .outcome
                .clone()
        };
        assert_eq!(judged_here(&view), Ok(Admitted::New));
        view.storage.push(StorageProblem {
            nodes: ["n1".to_owned(), "n3".to_owned()].into(),
            what: "i3: minor 0 on n1 SyncTarget 40%".into(),
            unknown: false,
            drained: false,
        });
        assert!(
            judged_here(&view).is_err_and(|e| e.to_string().contains("SyncTarget")),
            "{:?}",
            judged_here(&view)
        );
    }

    #[test]
    fn maintd_order_node_repairs_first_most_invasive_then_oldest() {
        let view = view();
        let mut balancing = repair(1, "n3");
        balancing.duty = Duty::Balancing;
        let mut live = repair(2, "n1");
        live.invasiveness = 1;
        let mut failover = repair(3, "n5");
        failover.invasiveness = 3;
        let decision = decide(
            &view,
            &roomy(),
            &InForce::default(),
            vec![balancing, live, failover],
        );
        let order: Vec<String> = decision
            .judgements
            .iter()
            .map(|j| j.proposal.subject.clone())
            .collect();
        assert_eq!(order, ["node n5", "node n1", "node n3"]);
        assert_eq!(outcome(&decision, 3), Ok(Admitted::New));
        assert!(outcome(&decision, 2).is_err());
        assert!(outcome(&decision, 1).is_err());
    }

    #[test]
    fn caps_absolute_percent_and_min_healthy() {
        let view = view();
        let table: Vec<(Caps, usize)> = vec![
            (
                Caps {
                    max_disrupted_nodes: 1,
                    max_disrupted_percent: None,
                    min_healthy_nodes: 1,
                },
                1,
            ),
            (
                Caps {
                    max_disrupted_nodes: 2,
                    max_disrupted_percent: None,
                    min_healthy_nodes: 1,
                },
                2,
            ),
            // 20 % of 6 = 1.2 → 1.
            (
                Caps {
                    max_disrupted_nodes: 5,
                    max_disrupted_percent: Some(20.0),
                    min_healthy_nodes: 1,
                },
                1,
            ),
            // 1 % of 6 rounds down to 0, but at least one node.
            (
                Caps {
                    max_disrupted_nodes: 5,
                    max_disrupted_percent: Some(1.0),
                    min_healthy_nodes: 1,
                },
                1,
            ),
            // Six nodes, at least five healthy: one may go.
            (
                Caps {
                    max_disrupted_nodes: 5,
                    max_disrupted_percent: None,
                    min_healthy_nodes: 5,
                },
                1,
            ),
            (
                Caps {
                    max_disrupted_nodes: 5,
                    max_disrupted_percent: None,
                    min_healthy_nodes: 6,
                },
                0,
            ),
        ];
        for (caps, admitted) in table {
            let policy = Policy {
                cluster: caps,
                ..Policy::default()
            };
            let decision = decide(
                &view,
                &policy,
                &InForce::default(),
                vec![repair(1, "n1"), repair(2, "n2")],
            );
            assert_eq!(decision.admitted().count(), admitted, "{caps:?}");
            for (_, blocked) in decision.refused() {
                assert!(
                    matches!(blocked, BlockedBy::Cap { .. }),
                    "{caps:?}: {blocked}"
                );
            }
        }
    }

    #[test]
    fn group_caps_apply_besides_the_cluster_caps() {
        let mut view = view();
        for name in ["n1", "n2"] {
            view.nodes.get_mut(name).expect("node").group = "small".into();
        }
        let mut policy = roomy();
        policy.groups.insert(
            "small".into(),
            Caps {
                max_disrupted_nodes: 1,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
        );
        let decision = decide(
            &view,
            &policy,
            &InForce::default(),
            vec![repair(1, "n1"), repair(2, "n2")],
        );
        assert_eq!(outcome(&decision, 1), Ok(Admitted::New));
        assert!(
            outcome(&decision, 2)
                .expect_err("capped")
                .starts_with("cap: node group small: at most 1 node(s)")
        );
    }

    #[test]
    fn storage_whole_for_a_new_domain_and_own_problems_tolerated_inside_the_busy_one() {
        let mut view = view();
        view.storage.push(StorageProblem {
            nodes: ["n1".to_owned(), "n3".to_owned()].into(),
            what: "inst1: minor 0 on n3 WFConnection".into(),
            unknown: false,
            drained: false,
        });
        // Nothing disrupted: the problem blocks every new domain.
        let decision = decide(&view, &roomy(), &InForce::default(), vec![repair(1, "n1")]);
        assert_eq!(
            outcome(&decision, 1),
            Err("storage not whole: inst1: minor 0 on n3 WFConnection".into())
        );
        // n1 is held by incident 1 (its drain caused the problem): more of rack:a may go.
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let decision = decide(
            &view,
            &roomy(),
            &in_force,
            vec![repair(1, "n1"), repair(2, "n2")],
        );
        assert_eq!(outcome(&decision, 1), Ok(Admitted::Continuation));
        assert_eq!(outcome(&decision, 2), Ok(Admitted::New));
    }

    #[test]
    fn unknown_storage_health_fails_closed_and_names_the_node() {
        let mut view = view();
        view.storage.push(StorageProblem {
            nodes: ["n4".to_owned()].into(),
            what: "n4 (unreachable)".into(),
            unknown: true,
            drained: false,
        });
        let decision = decide(&view, &roomy(), &InForce::default(), vec![repair(1, "n1")]);
        assert_eq!(
            outcome(&decision, 1),
            Err("storage health unknown: n4 (unreachable)".into())
        );
    }

    #[test]
    fn breaker_stops_new_work_but_not_continuations() {
        let view = view();
        let policy = Policy {
            breaker: Some("3 of 6 nodes opened incidents within 60 s".into()),
            ..roomy()
        };
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let decision = decide(
            &view,
            &policy,
            &in_force,
            vec![repair(1, "n1"), repair(2, "n2")],
        );
        assert_eq!(outcome(&decision, 1), Ok(Admitted::Continuation));
        assert_eq!(
            outcome(&decision, 2),
            Err("storm breaker open: 3 of 6 nodes opened incidents within 60 s".into())
        );
    }

    /// Maintenance windows and freezes hold new planned work only: a campaign's new group
    /// waits outside its window and in a freeze, naming it; what its holder already holds goes
    /// on; an evacuation starts outside a window and in a freeze unless the rules say so.
    #[test]
    fn calendar_holds_new_planned_work_and_names_the_window_or_freeze() {
        use crate::calendar::{CalendarNow, CalendarRules, Freeze, FreezeNow, Obeys, WindowNow};
        let view = view();
        let as_campaign = |n: u128, node: &str| Proposal {
            duty: Duty::Maintenance,
            ..repair(n, node)
        };
        let closed = CalendarNow {
            window: Some(WindowNow {
                open: false,
                closes_ms: None,
                next_ms: Some(9_000),
                text: "Tue 2026-12-08 02:00 UTC (Tue,Thu 02:00-05:00)".into(),
            }),
            freeze: None,
            rules: CalendarRules::default(),
        };
        let policy = Policy {
            calendar: closed.clone(),
            ..roomy()
        };
        // Campaign 1 holds n1 (a group it started); campaign 2 would start on n3.
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let decision = decide(
            &view,
            &policy,
            &in_force,
            vec![as_campaign(1, "n1"), as_campaign(2, "n2"), repair(3, "n1")],
        );
        assert_eq!(outcome(&decision, 1), Ok(Admitted::Continuation));
        assert_eq!(
            outcome(&decision, 2),
            Err("outside the maintenance window (next: Tue 2026-12-08 02:00 UTC (Tue,Thu 02:00-05:00))".into())
        );
        // An evacuation is not held by windows (it waits for n1's holder, as always).
        let decision = decide(&view, &policy, &InForce::default(), vec![repair(3, "n3")]);
        assert_eq!(outcome(&decision, 3), Ok(Admitted::New));
        // A freeze holds planned work, open window or not; evacuations by rule only.
        let frozen = CalendarNow {
            window: None,
            freeze: Some(FreezeNow {
                freeze: Freeze {
                    id: id(7),
                    from_ms: 0,
                    until_ms: 5_000,
                    reason: "year end".into(),
                    who: "alice".into(),
                    created_ms: 0,
                    lifted_ms: None,
                    lifted_by: None,
                },
                until: "Sun 2027-01-03 00:00 UTC".into(),
            }),
            rules: CalendarRules::default(),
        };
        let policy = Policy {
            calendar: frozen.clone(),
            ..roomy()
        };
        let decision = decide(
            &view,
            &policy,
            &InForce::default(),
            vec![as_campaign(2, "n2"), repair(3, "n3")],
        );
        assert_eq!(
            outcome(&decision, 2),
            Err(format!(
                "frozen until Sun 2027-01-03 00:00 UTC: year end (freeze {})",
                id(7)
            ))
        );
        assert_eq!(outcome(&decision, 3), Ok(Admitted::New));
        let strict = Policy {
            calendar: CalendarNow {
                rules: CalendarRules {
                    evacuations: Obeys::Freezes,
                    ..CalendarRules::default()
                },
                ..frozen
            },
            ..roomy()
        };
        let decision = decide(&view, &strict, &InForce::default(), vec![repair(3, "n3")]);
        assert!(outcome(&decision, 3).is_err_and(|e| e.starts_with("frozen until")));
        // A live repair (disrupts nothing) obeys only when its rule says so.
        let live = Proposal {
            disrupts: BTreeSet::new(),
            touches: ["n2".to_owned()].into(),
            moves_memory: Some(0),
            ..repair(4, "n2")
        };
        let decision = decide(&view, &policy, &InForce::default(), vec![live.clone()]);
        assert_eq!(outcome(&decision, 4), Ok(Admitted::New));
        let in_windows = Policy {
            calendar: CalendarNow {
                rules: CalendarRules {
                    live_repairs: Obeys::Windows,
                    ..CalendarRules::default()
                },
                ..closed
            },
            ..roomy()
        };
        let decision = decide(&view, &in_windows, &InForce::default(), vec![live]);
        assert!(
            outcome(&decision, 4).is_err_and(|e| e.starts_with("outside the maintenance window"))
        );
    }

    #[test]
    fn override_lets_a_second_domain_start_until_it_expires() {
        let mut view = view();
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let mut policy = Policy {
            cluster: Caps::default(),
            ..Policy::default()
        };
        policy.overrides.push(Override {
            id: id(9),
            domain: "rack:b".into(),
            until_ms: 2_000,
            reason: "firmware".into(),
            who: "alice".into(),
            created_ms: 0,
        });
        let decision = decide(&view, &policy, &in_force, vec![repair(2, "n3")]);
        assert_eq!(outcome(&decision, 2), Ok(Admitted::Override { id: id(9) }));
        view.now_ms = 2_000;
        let decision = decide(&view, &policy, &in_force, vec![repair(2, "n3")]);
        assert!(
            outcome(&decision, 2)
                .expect_err("expired")
                .starts_with("failure domain rack:a")
        );
    }

    #[test]
    fn capacity_for_the_moved_instances_and_unknown_memory_blocks() {
        let mut view = view();
        let mut big = repair(1, "n1");
        big.moves_memory = Some(5 * 4096);
        let decision = decide(&view, &roomy(), &InForce::default(), vec![big.clone()]);
        assert_eq!(outcome(&decision, 1), Ok(Admitted::New));
        big.moves_memory = Some(6 * 4096);
        let decision = decide(&view, &roomy(), &InForce::default(), vec![big.clone()]);
        assert!(
            outcome(&decision, 1)
                .expect_err("no room")
                .starts_with("capacity: the instances of node n1 need 24576 MiB")
        );
        big.moves_memory = Some(1);
        view.nodes.get_mut("n6").expect("n6").memory_free = None;
        let decision = decide(&view, &roomy(), &InForce::default(), vec![big]);
        assert_eq!(
            outcome(&decision, 1),
            Err("capacity: free memory of n6 unknown".into())
        );
    }

    /// Free memory per node of [`view`]: `free` on n3 to n6, none on n1 and n2.
    fn tight(free: u64) -> View {
        let mut view = view();
        for (name, facts) in &mut view.nodes {
            facts.memory_free = Some(if ["n1", "n2"].contains(&name.as_str()) {
                0
            } else {
                free
            });
        }
        view
    }

    /// Issue 25 (1): the N+1 memory check reserves what earlier admissions of the round move:
    /// two evacuations of 3500 MiB each never both start with 4000 MiB free, whether a cap
    /// above one or an override lets two through.
    #[test]
    fn evacuations_admitted_in_one_round_share_the_free_memory() {
        let view = tight(1000);
        let mut by_override = Policy::default();
        by_override.overrides.push(Override {
            id: id(9),
            domain: "rack:a".into(),
            until_ms: 2_000,
            reason: "firmware".into(),
            who: "alice".into(),
            created_ms: 0,
        });
        for policy in [roomy(), by_override] {
            let mut first = repair(1, "n1");
            first.moves_memory = Some(3500);
            let mut second = repair(2, "n2");
            second.moves_memory = Some(3500);
            let decision = decide(&view, &policy, &InForce::default(), vec![first, second]);
            assert!(outcome(&decision, 1).is_ok(), "{policy:?}");
            assert_eq!(
                outcome(&decision, 2),
                Err(format!(
                    "capacity: the instances of node n2 need 3500 MiB, the healthy nodes left in \
                     node group default have 4000 MiB free, 3500 MiB of it reserved for \
                     instances moving off n1 (incident {}): 3500 MiB; 500 MiB left",
                    id(1)
                ))
            );
        }
    }

    /// A holder that takes over a node drained outside nodecare without moving its instances
    /// (an instance repair replacing a drained secondary) leaves them there: their memory stays
    /// reserved, for its own judgement and for the proposals judged after it (found by the
    /// safety checker at seed 4485: a campaign group admitted with the memory of a node drained
    /// by hand forgotten).
    #[test]
    fn a_node_taken_over_keeps_the_memory_of_what_is_still_on_it() {
        let mut view = tight(1000);
        let n1 = view.nodes.get_mut("n1").expect("n1");
        n1.drained = true;
        n1.primary_memory = Some(3500);
        let fix = Proposal {
            duty: Duty::InstanceRepair,
            holder: Holder::InstanceRepair { id: id(1) },
            subject: "instance d1".into(),
            moves_memory: Some(0),
            ..repair(1, "n1")
        };
        // A campaign's group, judged after the instance repair (the duties' order).
        let second = Proposal {
            duty: Duty::Maintenance,
            holder: Holder::Campaign { id: id(2) },
            subject: "reboot group 1 of 1 (n2)".into(),
            moves_memory: Some(1000),
            ..repair(2, "n2")
        };
        let in_force = InForce::new(&view, []);
        let of_fix =
            |decision: &Decision| outcome_of(decision, &Holder::InstanceRepair { id: id(1) });
        let decision = decide(&view, &roomy(), &in_force, vec![fix.clone(), second]);
        assert!(of_fix(&decision).is_ok(), "{decision:?}");
        let refused = outcome_of(&decision, &Holder::Campaign { id: id(2) })
            .expect_err("n1's 3500 MiB stay reserved");
        assert!(
            refused
                .starts_with("capacity: the instances of reboot group 1 of 1 (n2) need 1000 MiB")
                && refused.contains("3500 MiB"),
            "{refused}"
        );
        // An offline node runs none of its instances: taking it over adds nothing, an unknown
        // size there included (harep's failover off an offline node).
        let mut offline = view.clone();
        let n1 = offline.nodes.get_mut("n1").expect("n1");
        n1.offline = true;
        n1.primary_memory = None;
        let decision = decide(
            &offline,
            &roomy(),
            &InForce::new(&offline, []),
            vec![fix.clone()],
        );
        assert!(of_fix(&decision).is_ok(), "{decision:?}");
        // Its own judgement counts them too: with 3000 MiB free it is refused.
        let mut small_view = tight(750);
        let n1 = small_view.nodes.get_mut("n1").expect("n1");
        n1.drained = true;
        n1.primary_memory = Some(3500);
        let decision = decide(
            &small_view,
            &roomy(),
            &InForce::new(&small_view, []),
            vec![fix],
        );
        assert!(
            of_fix(&decision)
                .expect_err("no room for n1's instances")
                .starts_with("capacity: the instances of instance d1 need 3500 MiB"),
            "{decision:?}"
        );
    }

    /// A holder's next disruption counts what it still has on the nodes it holds outside it:
    /// a campaign's node that failed in an earlier group (drained, its instances still on it)
    /// keeps their memory reserved when its next group is judged (found by the safety checker
    /// at seed 6726).
    #[test]
    fn a_holder_s_next_disruption_counts_what_is_still_on_its_other_nodes() {
        let mut view = tight(1000);
        let n1 = view.nodes.get_mut("n1").expect("n1");
        n1.drained = true;
        n1.primary_memory = Some(1500);
        let campaign = Holder::Campaign { id: id(2) };
        let in_force = InForce::new(&view, [("n1".to_owned(), campaign.clone())]);
        let next = Proposal {
            duty: Duty::Maintenance,
            holder: campaign.clone(),
            subject: "reboot group 2 of 3 (n2)".into(),
            moves_memory: Some(3000),
            ..repair(2, "n2")
        };
        let decision = decide(&view, &roomy(), &in_force, vec![next.clone()]);
        let refused = outcome_of(&decision, &campaign).expect_err("n1's 1500 MiB still to place");
        assert!(
            refused
                .starts_with("capacity: the instances of reboot group 2 of 3 (n2) need 3000 MiB")
                && refused.contains("1500 MiB"),
            "{refused}"
        );
        // With n1 empty, the same group fits.
        view.nodes.get_mut("n1").expect("n1").primary_memory = Some(0);
        let decision = decide(&view, &roomy(), &in_force, vec![next]);
        assert!(outcome_of(&decision, &campaign).is_ok(), "{decision:?}");
    }

    /// Issue 25 (1): what already moves in force (the primaries still on a node an incident
    /// evacuates, a grant's tool drains or a campaign reboots) is reserved too.
    #[test]
    fn what_moves_in_force_is_reserved() {
        let mut view = tight(1000);
        view.nodes.get_mut("n1").expect("n1").primary_memory = Some(3500);
        let mut second = repair(2, "n2");
        second.moves_memory = Some(3500);
        let kured = Holder::Grant {
            id: id(7),
            requester: "kured".into(),
        };
        let in_force = InForce::new(&view, [("n1".to_owned(), kured)]);
        let decision = decide(&view, &roomy(), &in_force, vec![second.clone()]);
        assert_eq!(
            outcome(&decision, 2),
            Err(format!(
                "capacity: the instances of node n2 need 3500 MiB, the healthy nodes left in \
                 node group default have 4000 MiB free, 3500 MiB of it reserved for instances \
                 moving off n1 (admission {} of kured): 3500 MiB; 500 MiB left",
                id(7)
            ))
        );
        // Disrupting a node that moves nothing still takes its free memory from the room
        // reserved for others.
        let mut shifted = view.clone();
        shifted.nodes.get_mut("n2").expect("n2").memory_free = Some(1000);
        shifted.nodes.get_mut("n6").expect("n6").memory_free = Some(0);
        let mut empty = repair(3, "n2");
        empty.moves_memory = Some(0);
        let decision = decide(&shifted, &roomy(), &in_force, vec![empty.clone()]);
        assert_eq!(
            outcome(&decision, 3),
            Err(format!(
                "capacity: the instances of node n2 need 0 MiB, the healthy nodes left in node \
                 group default have 3000 MiB free, 3500 MiB of it reserved for instances moving \
                 off n1 (admission {} of kured): 3500 MiB; 0 MiB left",
                id(7)
            ))
        );
        // Unknown sizes of what moves in force never fit.
        let mut unknown = shifted.clone();
        unknown.nodes.get_mut("n1").expect("n1").primary_memory = None;
        assert_eq!(
            outcome(&decide(&unknown, &roomy(), &in_force, vec![empty]), 3),
            Err(format!(
                "capacity: memory of the instances moving off n1 (admission {} of kured) unknown",
                id(7)
            ))
        );
    }

    /// The instances still on a node drained or offline outside nodecare, or left so by a
    /// failed evacuation, may have to move: their memory is reserved like a holder's, the
    /// refusal names the node and how it was left, and a proposal taking the node over counts
    /// it once (seeds 113 and 129 of the all-duties run).
    #[test]
    fn memory_left_on_nodes_drained_outside_nodecare_is_reserved() {
        let mut view = tight(1000);
        view.nodes.get_mut("n1").expect("n1").primary_memory = Some(3500);
        view.nodes.get_mut("n1").expect("n1").drained = true;
        let mut second = repair(2, "n2");
        second.moves_memory = Some(3500);
        let decision = decide(
            &view,
            &roomy(),
            &InForce::new(&view, []),
            vec![second.clone()],
        );
        assert_eq!(
            outcome(&decision, 2),
            Err(
                "capacity: the instances of node n2 need 3500 MiB, the healthy nodes left in \
                 node group default have 4000 MiB free, 3500 MiB of it reserved for instances \
                 moving off n1 (drained outside nodecare): 3500 MiB; 500 MiB left"
                    .to_owned()
            )
        );
        // Left by an evacuation that failed: named so.
        let left = BTreeMap::from([("n1".to_owned(), format!("incident {} (failed)", id(9)))]);
        let in_force = InForce::new(&view, []).with_left_by(&left);
        let decision = decide(&view, &roomy(), &in_force, vec![second.clone()]);
        assert_eq!(
            outcome(&decision, 2),
            Err(format!(
                "capacity: the instances of node n2 need 3500 MiB, the healthy nodes left in \
                 node group default have 4000 MiB free, 3500 MiB of it reserved for instances \
                 moving off n1 (drained by incident {} (failed)): 3500 MiB; 500 MiB left",
                id(9)
            ))
        );
        // Its size unknown: never fits.
        let mut unknown = view.clone();
        unknown.nodes.get_mut("n1").expect("n1").primary_memory = None;
        assert_eq!(
            outcome(
                &decide(&unknown, &roomy(), &InForce::new(&unknown, []), vec![second]),
                2
            ),
            Err("capacity: memory of the instances moving off n1 (drained outside nodecare) unknown".into())
        );
        // Taking the node over counts its instances once, and they are then reserved as the
        // new holder's, not twice.
        let mut take_over = repair(3, "n1");
        take_over.moves_memory = Some(3500);
        let mut third = repair(4, "n2");
        third.moves_memory = Some(600);
        let decision = decide(
            &view,
            &roomy(),
            &InForce::new(&view, []),
            vec![take_over, third],
        );
        assert_eq!(outcome(&decision, 3), Ok(Admitted::New));
        assert_eq!(
            outcome(&decision, 4),
            Err(format!(
                "capacity: the instances of node n2 need 600 MiB, the healthy nodes left in \
                 node group default have 4000 MiB free, 3500 MiB of it reserved for instances \
                 moving off n1 (incident {}): 3500 MiB; 500 MiB left",
                id(3)
            ))
        );
    }

    #[test]
    fn two_holders_never_share_a_node() {
        let view = view();
        let mut grant = repair(2, "n1");
        grant.duty = Duty::Admission;
        grant.holder = Holder::Grant {
            id: id(2),
            requester: "kured".into(),
        };
        let decision = decide(
            &view,
            &roomy(),
            &InForce::default(),
            vec![repair(1, "n1"), grant],
        );
        let refused: Vec<String> = decision.refused().map(|(_, b)| b.to_string()).collect();
        assert_eq!(refused, [format!("n1 is held by incident {}", id(1))]);
    }

    #[test]
    fn moves_that_disrupt_no_node_avoid_disrupted_nodes_and_bad_storage_and_stop_for_the_breaker() {
        let mut view = view();
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let balance = |n: u128, touches: &[&str]| Proposal {
            duty: Duty::Balancing,
            holder: Holder::Balancing { id: id(n) },
            subject: format!("instance i{n}"),
            invasiveness: 1,
            since_ms: 0,
            disrupts: BTreeSet::new(),
            touches: touches.iter().map(|t| (*t).to_owned()).collect(),
            fresh: false,
            moves_memory: Some(512),
            after_releases: BTreeMap::new(),
            reason: "balance".into(),
        };
        let judged = |view: &View, policy: &Policy, p: Proposal| {
            decide(view, policy, &in_force, vec![p]).judgements[0]
                .outcome
                .clone()
                .map_err(|b| b.to_string())
        };
        assert_eq!(
            judged(&view, &roomy(), balance(2, &["n3", "n4"])),
            Ok(Admitted::New)
        );
        assert_eq!(
            judged(&view, &roomy(), balance(3, &["n1", "n4"])),
            Err(format!("n1 is held by incident {}", id(1)))
        );
        let stormy = Policy {
            breaker: Some("storm".into()),
            ..roomy()
        };
        assert_eq!(
            judged(&view, &stormy, balance(2, &["n3"])),
            Err("storm breaker open: storm".into())
        );
        view.storage.push(StorageProblem {
            nodes: ["n1".to_owned()].into(),
            what: "inst1 degraded".into(),
            unknown: false,
            drained: false,
        });
        assert_eq!(
            judged(&view, &roomy(), balance(2, &["n3"])),
            Err("storage not whole: inst1 degraded".into())
        );
        // An instance repair is not held back by the problem it repairs on its own nodes, only
        // by others.
        let mut fix = balance(5, &["n1", "n3"]);
        fix.duty = Duty::InstanceRepair;
        fix.holder = Holder::InstanceRepair { id: id(5) };
        let mut here = view.clone();
        here.storage = vec![StorageProblem {
            nodes: ["n3".to_owned(), "n4".to_owned()].into(),
            what: "inst9 StandAlone".into(),
            unknown: false,
            drained: false,
        }];
        fix.touches = ["n3".to_owned(), "n4".to_owned()].into();
        assert_eq!(judged(&here, &roomy(), fix.clone()), Ok(Admitted::New));
        here.storage.push(StorageProblem {
            nodes: ["n5".to_owned()].into(),
            what: "n5 (unreachable)".into(),
            unknown: true,
            drained: false,
        });
        assert_eq!(
            judged(&here, &roomy(), fix),
            Err("storage health unknown: n5 (unreachable)".into())
        );
        // A live repair moves nothing: storage health does not hold it.
        let mut live = balance(4, &["n3"]);
        live.moves_memory = Some(0);
        assert_eq!(judged(&view, &roomy(), live), Ok(Admitted::New));
    }

    #[test]
    fn a_fresh_proposal_on_a_node_its_holder_holds_is_judged_in_full() {
        let view = view();
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let policy = Policy {
            breaker: Some("storm".into()),
            ..roomy()
        };
        let mut escalated = repair(1, "n1");
        assert_eq!(
            decide(&view, &policy, &in_force, vec![escalated.clone()]).judgements[0].outcome,
            Ok(Admitted::Continuation)
        );
        escalated.fresh = true;
        assert_eq!(
            decide(&view, &policy, &in_force, vec![escalated]).judgements[0].outcome,
            Err(BlockedBy::Breaker {
                why: "storm".into()
            })
        );
    }

    /// An evacuation recorded as begun whose drain never reached Ganeti (a crash between its
    /// admission and its first job) holds its node only in name: it disrupts nothing yet, so
    /// neither it nor another proposal may count that node as already disrupted to pass a
    /// storage problem that involves it.
    #[test]
    fn a_fresh_proposal_s_own_hold_lets_no_storage_problem_pass() {
        let mut view = view();
        view.storage.push(StorageProblem {
            nodes: ["n1".to_owned(), "n3".to_owned()].into(),
            what: "inst1: minor 0 on n3 WFConnection".into(),
            unknown: false,
            drained: false,
        });
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let mut fresh = repair(1, "n1");
        fresh.fresh = true;
        let decision = decide(
            &view,
            &roomy(),
            &in_force,
            vec![fresh.clone(), repair(2, "n2")],
        );
        let blocked = Err("storage not whole: inst1: minor 0 on n3 WFConnection".to_owned());
        assert_eq!(outcome(&decision, 1), blocked);
        assert_eq!(outcome(&decision, 2), blocked);
        // Refused, it still holds its node: nobody else acts there.
        assert_eq!(
            decision.in_force.touched.get("n1"),
            Some(&Holder::Incident { id: id(1) })
        );
        // Once storage is whole it is admitted and holds the node disrupted.
        view.storage.clear();
        let decision = decide(&view, &roomy(), &in_force, vec![fresh]);
        assert_eq!(outcome(&decision, 1), Ok(Admitted::New));
        assert_eq!(
            decision.in_force.nodes.get("n1"),
            Some(&Holder::Incident { id: id(1) })
        );
        assert!(!decision.in_force.touched.contains_key("n1"));
    }

    /// A node an operator drained while a fresh proposal's holder held it in name is disrupted
    /// as Ganeti shows it (by someone): the busy domain holds it, its own drained-flag problem
    /// passes, a problem elsewhere does not, and no other holder acts there.
    #[test]
    fn a_node_drained_under_a_fresh_proposal_is_someone_s_disruption() {
        let mut view = view();
        if let Some(facts) = view.nodes.get_mut("n1") {
            facts.drained = true;
        }
        view.storage.push(StorageProblem {
            nodes: ["n1".to_owned()].into(),
            what: "inst1: secondary n1 is drained".into(),
            unknown: false,
            drained: true,
        });
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let mut fresh = repair(1, "n1");
        fresh.fresh = true;
        let decision = decide(
            &view,
            &roomy(),
            &in_force,
            vec![fresh.clone(), repair(3, "n3")],
        );
        assert_eq!(outcome(&decision, 1), Ok(Admitted::New));
        assert!(
            outcome(&decision, 3)
                .expect_err("rack:a is busy")
                .starts_with("failure domain rack:a is disrupted"),
            "{:?}",
            outcome(&decision, 3)
        );
        // With storage unknown on n4 it waits, the node stays drained by someone and held.
        view.storage.push(StorageProblem {
            nodes: ["n4".to_owned()].into(),
            what: "n4 (unreachable)".into(),
            unknown: true,
            drained: false,
        });
        let decision = decide(&view, &roomy(), &in_force, vec![fresh, repair(2, "n1")]);
        assert_eq!(
            outcome(&decision, 1),
            Err("storage health unknown: n4 (unreachable)".into())
        );
        assert!(matches!(
            decision.in_force.nodes.get("n1"),
            Some(Holder::Someone { .. })
        ));
        assert_eq!(
            outcome(&decision, 2),
            Err(format!("n1 is held by incident {}", id(1)))
        );
    }

    #[test]
    fn grace_covers_what_the_planned_disruption_touches_until_it_ends() {
        let view = view();
        let planned = |node: &str, from_ms: u64| Planned {
            node: node.to_owned(),
            from_ms,
            holder: "maintenance campaign c1".to_owned(),
        };
        let planned = vec![planned("n3", 500), planned("gone", 900)];
        // n3 and its DRBD peer n1 (another domain); not n4, n3's domain mate.
        let peers = BTreeMap::from([
            ("n3".to_owned(), BTreeSet::from(["n1".to_owned()])),
            ("n1".to_owned(), BTreeSet::from(["n3".to_owned()])),
        ]);
        let graced = grace(&view, &planned, &peers, 1_000);
        let of = |disrupted: &str| Grace {
            until_ms: 1_500,
            holder: "maintenance campaign c1".to_owned(),
            disrupted: disrupted.to_owned(),
        };
        assert_eq!(
            graced,
            BTreeMap::from([("n3".to_owned(), of("n3")), ("n1".to_owned(), of("n3"))])
        );
        assert_eq!(
            of("n3").to_string(),
            "the grace of maintenance campaign c1's disruption of n3 until 1500 ms"
        );
        assert!(
            grace(&view, &planned, &peers, 500).is_empty(),
            "ended at 1000"
        );
    }

    #[test]
    fn taking_over_a_human_drain_counts_against_the_cap() {
        let mut view = view();
        view.nodes.get_mut("n2").expect("n2").drained = true;
        let in_force = InForce::new(&view, [("n1".to_owned(), Holder::Incident { id: id(1) })]);
        let policy = capped(1);
        let decision = decide(&view, &policy, &in_force, vec![repair(2, "n2")]);
        assert_eq!(
            outcome(&decision, 2),
            Err("cap: cluster: at most 1 node(s) disrupted at once (max_disrupted_nodes = 1); disrupting 1 (n2) with 1 already disrupted (n1) would make 2".into())
        );
    }

    /// Issue 24 (6): a cap refusal states the cap, how a percentage rounds, and what counts:
    /// the nodes asked for and those already disrupted (a group larger than the cap says so,
    /// not "0 already disrupted" alone).
    #[test]
    fn cap_refusals_state_the_cap_and_what_counts() {
        let three = |n1: &str, n2: &str, n3: &str| {
            let mut p = repair(9, n1);
            p.subject = format!("reboot group 1 of 2 ({n1}, {n2}, {n3})");
            p.disrupts = [n1.to_owned(), n2.to_owned(), n3.to_owned()].into();
            p
        };
        let mut small = view();
        small
            .nodes
            .retain(|name, _| ["n1", "n2", "n3"].contains(&name.as_str()));
        for facts in small.nodes.values_mut() {
            facts.domain = "rack:a".into();
        }
        let caps = |nodes: usize, percent: Option<f64>| Policy {
            cluster: Caps {
                max_disrupted_nodes: nodes,
                max_disrupted_percent: percent,
                min_healthy_nodes: 0,
            },
            ..Policy::default()
        };
        let one_held = InForce::new(&small, [("n3".to_owned(), Holder::Incident { id: id(1) })]);
        let table: [(&View, Policy, &InForce, Proposal, &str); 5] = [
            (
                &small,
                caps(2, None),
                &InForce::default(),
                three("n1", "n2", "n3"),
                "cap: cluster: at most 2 node(s) disrupted at once (max_disrupted_nodes = 2); \
                 disrupting 3 (n1, n2, n3) with 0 already disrupted (none) would make 3",
            ),
            (
                &small,
                caps(5, Some(50.0)),
                &InForce::default(),
                three("n1", "n2", "n3"),
                "cap: cluster: at most 1 node(s) disrupted at once (max_disrupted_nodes = 5, \
                 max_disrupted_percent = 50% of 3 vm-capable node(s) = 1.5, rounded down to 1); \
                 disrupting 3 (n1, n2, n3) with 0 already disrupted (none) would make 3",
            ),
            (
                &small,
                caps(5, Some(10.0)),
                &one_held,
                repair(2, "n1"),
                "cap: cluster: at most 1 node(s) disrupted at once (max_disrupted_nodes = 5, \
                 max_disrupted_percent = 10% of 3 vm-capable node(s) = 0.3, at least 1); \
                 disrupting 1 (n1) with 1 already disrupted (n3) would make 2",
            ),
            (
                &small,
                caps(5, Some(40.0)),
                &one_held,
                repair(2, "n1"),
                "cap: cluster: at most 1 node(s) disrupted at once (max_disrupted_nodes = 5, \
                 max_disrupted_percent = 40% of 3 vm-capable node(s) = 1.2, rounded down to 1); \
                 disrupting 1 (n1) with 1 already disrupted (n3) would make 2",
            ),
            // A group across two racks: the one-domain rule, named as such.
            (
                &view(),
                roomy(),
                &InForce::default(),
                three("n1", "n3", "n4"),
                "reboot group 1 of 2 (n1, n3, n4) spans the failure domains rack:a, rack:b: \
                 one failure domain is disrupted at a time",
            ),
        ];
        for (view, policy, in_force, proposal, want) in table {
            let decision = decide(view, &policy, in_force, vec![proposal]);
            assert_eq!(
                decision.judgements[0]
                    .outcome
                    .clone()
                    .map_err(|b| b.to_string()),
                Err(want.to_owned())
            );
        }
    }

    /// Issue 24 (6): a flag is nodecare's while the latest nodecare job on it set it and the
    /// node still carries it; otherwise it is "outside nodecare".
    #[test]
    fn flags_are_attributed_to_the_record_that_set_them() {
        let change = |node: &str, flag: &str, set: bool, at_ms: u64, by: &str| FlagChange {
            node: node.into(),
            flag: flag.into(),
            set,
            at_ms,
            by: by.into(),
        };
        let mut view = view();
        for (name, drained, offline) in [
            ("n1", true, true),
            ("n2", true, false),
            ("n3", true, false),
            ("n4", true, false),
            ("n5", false, false),
        ] {
            let facts = view.nodes.get_mut(name).expect("node");
            facts.drained = drained;
            facts.offline = offline;
        }
        let changes = vec![
            // n1: drained and offlined by incident A: shown by its offline flag.
            change("n1", "drained", true, 1, "incident A (canceled)"),
            change("n1", "offline", true, 2, "incident A (canceled)"),
            // n2: drained by A, undrained by A, drained again by B.
            change("n2", "drained", true, 1, "incident A"),
            change("n2", "drained", false, 2, "incident A"),
            change("n2", "drained", true, 3, "campaign B (aborted)"),
            // n3: drained by A, then undrained by nodecare: a later drain is someone else's.
            change("n3", "drained", true, 1, "incident A"),
            change("n3", "drained", false, 2, "incident A"),
            // n5: nodecare drained it, but it is back in service.
            change("n5", "drained", true, 1, "incident C"),
        ];
        let left = left_by(&view, changes.clone());
        assert_eq!(
            left,
            BTreeMap::from([
                ("n1".to_owned(), "incident A (canceled)".to_owned()),
                ("n2".to_owned(), "campaign B (aborted)".to_owned()),
            ])
        );
        let in_force = InForce::new(&view, []).with_left_by(&left);
        let shown: BTreeMap<&str, String> = in_force
            .nodes
            .iter()
            .map(|(node, holder)| (node.as_str(), holder.to_string()))
            .collect();
        assert_eq!(
            shown,
            BTreeMap::from([
                ("n1", "offline by incident A (canceled)".to_owned()),
                ("n2", "drained by campaign B (aborted)".to_owned()),
                ("n3", "drained outside nodecare".to_owned()),
                ("n4", "drained outside nodecare".to_owned()),
            ])
        );
        // Attribution changes no judgement: a node left drained is taken over like any other.
        assert_eq!(
            decide(&view, &roomy(), &in_force, vec![repair(9, "n2")]).judgements[0].outcome,
            decide(
                &view,
                &roomy(),
                &InForce::new(&view, []),
                vec![repair(9, "n2")]
            )
            .judgements[0]
                .outcome
        );
        // What forgotten records left is kept only while the node still carries the flag.
        let kept = still_left(&view, changes);
        let kept: Vec<(&str, &str)> = kept
            .iter()
            .map(|c| (c.node.as_str(), c.flag.as_str()))
            .collect();
        assert_eq!(
            kept,
            [("n1", "drained"), ("n1", "offline"), ("n2", "drained")]
        );
    }

    #[test]
    fn domains_from_groups_or_tag_prefixes() {
        assert_eq!(DomainSource::parse("group"), Ok(DomainSource::NodeGroup));
        assert_eq!(
            DomainSource::parse("rack:"),
            Ok(DomainSource::TagPrefix("rack:".into()))
        );
        assert!(DomainSource::parse("rack").is_err());
        let source = DomainSource::TagPrefix("rack:".into());
        assert_eq!(
            source.domain_of("g", &["psu:1".into(), "rack:r2".into()]),
            "rack:r2"
        );
        assert_eq!(source.domain_of("g", &["rack:".into()]), "rack:?");
        assert_eq!(DomainSource::NodeGroup.domain_of("g1", &[]), "group:g1");
    }

    fn arb_cluster() -> impl Strategy<Value = View> {
        (
            2usize..12,
            1usize..4,
            proptest::collection::vec((any::<bool>(), any::<bool>(), 0u64..8192), 12),
        )
            .prop_map(|(count, domains, flags)| {
                let mut nodes = BTreeMap::new();
                for (i, (drained, unknown_memory, free)) in
                    flags.into_iter().take(count).enumerate()
                {
                    let name = format!("n{i}");
                    let mut facts = node(
                        &name,
                        if i % 2 == 0 { "g0" } else { "g1" },
                        &format!("d{}", i % domains),
                    );
                    facts.drained = drained && i % 5 == 0;
                    facts.memory_free = (!unknown_memory || i % 3 != 0).then_some(free);
                    nodes.insert(name, facts);
                }
                View {
                    nodes,
                    storage: Vec::new(),
                    now_ms: 10,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Issue 25: over random clusters (two node groups, some memory unknown), random
        /// disruptions in force (incidents, grants, campaigns, drains by hand, live repairs)
        /// and random proposals (caps wide open, overrides or not): in every node group, what
        /// the admitted proposals move plus what still moves in force never exceeds the free
        /// memory of the healthy nodes left there.
        #[test]
        fn admitted_moves_never_exceed_free_memory(
            facts in proptest::collection::vec(
                (
                    0usize..2,
                    0usize..2,
                    proptest::option::weighted(0.95, 0u64..4000),
                    proptest::option::weighted(0.95, 0u64..4000),
                ),
                3..10,
            ),
            held in proptest::collection::vec((0usize..10, 0u8..5), 0..4),
            picks in proptest::collection::vec(
                (0usize..10, proptest::option::weighted(0.9, 0u64..5000), 0u8..3),
                1..8,
            ),
            overridden in any::<bool>(),
        ) {
            let mut view = View { nodes: BTreeMap::new(), storage: Vec::new(), now_ms: 10 };
            for (i, (group, domain, free, primary)) in facts.iter().enumerate() {
                let name = format!("n{i}");
                let mut f = node(&name, &format!("g{group}"), &format!("d{domain}"));
                f.memory_free = *free;
                f.primary_memory = *primary;
                view.nodes.insert(name, f);
            }
            let names: Vec<String> = view.nodes.keys().cloned().collect();
            let mut nodecare = Vec::new();
            let mut live = Vec::new();
            for (i, (pick, kind)) in held.iter().enumerate() {
                let name = names[pick % names.len()].clone();
                let n = 100 + i as u128;
                match kind {
                    0 => nodecare.push((name, Holder::Incident { id: id(n) })),
                    1 => nodecare.push((name, Holder::Grant { id: id(n), requester: "kured".into() })),
                    2 => nodecare.push((name, Holder::Campaign { id: id(n) })),
                    3 => view.nodes.get_mut(&name).expect("node").drained = true,
                    _ => live.push((name, Holder::Incident { id: id(n) })),
                }
            }
            let in_force = InForce::new(&view, nodecare).with_touched(&view, live);
            let proposals: Vec<Proposal> = picks.iter().enumerate().map(|(i, (pick, moves, duty))| {
                let mut p = repair(i as u128 + 1, &names[pick % names.len()]);
                p.moves_memory = *moves;
                match duty {
                    0 => {}
                    1 => {
                        p.duty = Duty::Maintenance;
                        p.holder = Holder::Campaign { id: id(i as u128 + 1) };
                    }
                    _ => {
                        p.duty = Duty::Admission;
                        p.holder = Holder::Grant { id: id(i as u128 + 1), requester: "tool".into() };
                    }
                }
                p
            }).collect();
            let mut policy = Policy {
                cluster: Caps { max_disrupted_nodes: 10, max_disrupted_percent: None, min_healthy_nodes: 0 },
                ..Policy::default()
            };
            if overridden {
                for (n, domain) in ["d0", "d1"].into_iter().enumerate() {
                    policy.overrides.push(Override {
                        id: id(50 + n as u128),
                        domain: domain.into(),
                        until_ms: 1_000,
                        reason: "test".into(),
                        who: "ops".into(),
                        created_ms: 0,
                    });
                }
            }
            let decision = decide(&view, &policy, &in_force, proposals);
            for group in ["g0", "g1"] {
                let in_group = |n: &String| view.nodes[n].group == group;
                let started: Vec<u64> = decision
                    .admitted()
                    .filter(|j| j.outcome != Ok(Admitted::Continuation))
                    .filter(|j| j.proposal.disrupts.iter().any(in_group))
                    .map(|j| j.proposal.moves_memory.expect("unknown memory never fits"))
                    .collect();
                if started.is_empty() {
                    continue;
                }
                let moving_in_force: Option<u64> = in_force
                    .nodes
                    .iter()
                    .filter(|(n, h)| in_group(n) && !matches!(h, Holder::Someone { .. }))
                    .try_fold(0u64, |sum, (n, _)| Some(sum + view.nodes[n].primary_memory?));
                let free: Option<u64> = view
                    .nodes
                    .values()
                    .filter(|f| {
                        f.group == group
                            && f.is_healthy()
                            && !decision.in_force.nodes.contains_key(&f.name)
                            && !decision.in_force.touched.contains_key(&f.name)
                    })
                    .try_fold(0u64, |sum, f| Some(sum + f.memory_free?));
                let reserved = moving_in_force.map(|m| m + started.iter().sum::<u64>());
                if reserved != Some(0) {
                    let (Some(reserved), Some(free)) = (reserved, free) else {
                        prop_assert!(false, "admitted with unknown memory in {group}: {reserved:?} of {free:?}");
                        continue;
                    };
                    prop_assert!(reserved <= free, "{group}: {reserved} MiB moving, {free} MiB free");
                }
            }
            // Recorded as JSON, the round replays to the same decision.
            let snapshot = GateSnapshot { view: view.into(), policy, in_force, decision, recorded_after: InForce::default() };
            let text = serde_json::to_string(&snapshot).expect("a snapshot encodes");
            let recorded: GateSnapshot = serde_json::from_str(&text).expect("a snapshot decodes");
            prop_assert_eq!(&recorded, &snapshot);
            prop_assert_eq!(recorded.replay(), snapshot.decision.clone());
            // Through the flight recorder's parts, the same round; each refusal's explanation
            // names the rule and the very reason the gate gave.
            let record = crate::recorder::RoundRecord {
                now_ms: snapshot.view.now_ms,
                coordinator: "n0".into(),
                gate: snapshot.clone(),
                verdicts: BTreeMap::new(),
            };
            let parts = record.parts().expect("parts encode").into_iter().collect();
            let back = crate::recorder::RoundRecord::from_parts(record.now_ms, "n0".into(), &parts)
                .expect("parts decode");
            prop_assert_eq!(&back, &record);
            prop_assert!(back.replays());
            let rounds = vec![crate::recorder::Recorded { round: 1, last_ms: back.now_ms, repeats: 0, record: back }];
            for (proposal, blocked) in snapshot.decision.refused() {
                let Some(id) = proposal.holder.id() else { continue };
                let explanation = crate::recorder::explain_record(&rounds, id);
                let named = explanation.rounds[0]
                    .judgements
                    .iter()
                    .any(|j| j.blocked_by.as_ref() == Some(blocked) && j.rule == blocked.rule());
                prop_assert!(named, "{:?}", explanation);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Over random clusters and proposal streams: at most one domain disrupted (none new
        /// while a human's drain holds another), caps never exceeded by new admissions, nothing
        /// new while storage is bad or unknown, every refusal explained.
        #[test]
        fn gate_invariants(
            view in arb_cluster(),
            picks in proptest::collection::vec((0usize..12, 1u8..4, 0u64..100, any::<bool>()), 1..20),
            storage_bad in any::<bool>(),
            max in 1usize..4,
            min_healthy in 0usize..4,
            breaker in any::<bool>(),
        ) {
            let mut view = view;
            let names: Vec<String> = view.nodes.keys().cloned().collect();
            if storage_bad {
                view.storage.push(StorageProblem { nodes: [names[0].clone()].into(), what: "x".into(), unknown: true, drained: false });
            }
            let policy = Policy {
                cluster: Caps { max_disrupted_nodes: max, max_disrupted_percent: None, min_healthy_nodes: min_healthy },
                breaker: breaker.then(|| "storm".to_owned()),
                ..Policy::default()
            };
            let in_force = InForce::new(&view, []);
            let proposals: Vec<Proposal> = picks.iter().enumerate().map(|(i, (n, inv, since, mem))| {
                let node = &names[n % names.len()];
                let mut p = repair(i as u128 + 1, node);
                p.invasiveness = *inv;
                p.since_ms = *since;
                p.moves_memory = if *mem { Some(512) } else { Some(0) };
                p
            }).collect();
            let decision = decide(&view, &policy, &in_force, proposals);
            let domains = decision.in_force.domains(&view);
            let before = in_force.domains(&view);
            let new_admitted = decision.admitted().filter(|j| j.outcome != Ok(Admitted::Continuation)).count();
            if before.len() <= 1 {
                prop_assert!(domains.len() <= 1, "two domains: {:?}", domains.keys().collect::<Vec<_>>());
            } else {
                prop_assert_eq!(new_admitted, 0);
            }
            let newly_disrupted = decision.in_force.nodes.keys().filter(|n| !in_force.nodes.contains_key(*n)).count();
            if new_admitted > 0 {
                prop_assert!(!breaker);
            }
            if newly_disrupted > 0 {
                let disrupted = decision.in_force.nodes.keys().filter(|n| view.nodes[*n].vm_capable).count();
                prop_assert!(disrupted <= max);
                let healthy = view.nodes.values().filter(|f| f.is_healthy() && !decision.in_force.nodes.contains_key(&f.name)).count();
                prop_assert!(healthy >= min_healthy);
            }
            if storage_bad && !in_force.nodes.contains_key(&names[0]) {
                // The only problem involves names[0]; only work in a domain already holding it
                // could tolerate it, and nothing holds it before the round.
                prop_assert_eq!(new_admitted, 0);
            }
            for judgement in &decision.judgements {
                if let Err(blocked) = &judgement.outcome {
                    prop_assert!(!blocked.to_string().is_empty());
                }
            }
        }
    }
}
