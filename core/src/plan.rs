//! Evacuation planning: which jobs an evacuating node gets this round. Pure, no IO.
//!
//! maintd moved one instance per node per round (300 s apart). Here every move that conflicts
//! with nothing already in flight or planned this round is planned at once. Two jobs conflict
//! when they touch the same instance or the same node, except the evacuating node itself, which
//! its incident owns exclusively (it is drained). Memory on target nodes is reserved as moves
//! are planned, so one round never overcommits a node.
//!
//! Whether a node may be disrupted at all is the gate's decision (`crate::gate`): the planner
//! runs only for evacuations the gate admitted, and never moves an instance onto a node the
//! gate counts as disrupted.
//!
//! Targets follow maintd's `freeNodes` rule: a node with an active incident (noted or pending)
//! never receives instances. Capacity is checked, and unknown capacity never fits: free memory
//! for every move, free disk (disks plus DRBD metadata) for a new DRBD secondary. A move that
//! lacks only knowledge, or whose only targets have incidents, waits visibly instead of failing.
//! A DRBD instance whose secondary is being evacuated too is not waited for (that evacuation
//! waits for this one while they share the instance): it gets a new secondary first, with the
//! disk and the memory to take it over, then moves there.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ganeti::{DiskTemplate, Instance, Node, Op, ReplaceDisksMode};

/// A resource two jobs must not share while in flight.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "lowercase")]
pub enum Lock {
    /// A node.
    Node(String),
    /// An instance.
    Instance(String),
}

/// One instance move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Move {
    /// Live migration; `target` only for shared storage (DRBD goes to its secondary).
    Migrate {
        /// Instance name.
        instance: String,
        /// Target node, if chosen.
        target: Option<String>,
    },
    /// Failover; `target` only for shared storage.
    Failover {
        /// Instance name.
        instance: String,
        /// Target node, if chosen.
        target: Option<String>,
    },
    /// Move a DRBD instance's secondary to `remote_node`.
    ReplaceSecondary {
        /// Instance name.
        instance: String,
        /// New secondary.
        remote_node: String,
        /// The secondary replaced when it is not the evacuated node: the evacuation of the
        /// instance's primary first moves its secondary off a node being evacuated too, then
        /// moves the instance to the new secondary. `None`: the evacuated node is the
        /// secondary replaced.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<String>,
    },
}

impl Move {
    /// The instance moved.
    pub fn instance(&self) -> &str {
        match self {
            Self::Migrate { instance, .. }
            | Self::Failover { instance, .. }
            | Self::ReplaceSecondary { instance, .. } => instance,
        }
    }

    /// The Ganeti write that makes the move (a new secondary: `replace-disks` with
    /// `replace_new_secondary` to `remote_node`).
    pub fn op(&self) -> Op {
        match self {
            Self::Migrate { instance, target } => Op::MigrateInstance {
                instance: instance.clone(),
                target: target.clone(),
            },
            Self::Failover { instance, target } => Op::FailoverInstance {
                instance: instance.clone(),
                target: target.clone(),
            },
            Self::ReplaceSecondary {
                instance,
                remote_node,
                ..
            } => Op::ReplaceDisks {
                instance: instance.clone(),
                mode: ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: Some(remote_node.clone()),
                    iallocator: None,
                },
            },
        }
    }

    /// Short verb used in intent keys and logs.
    pub const fn verb(&self) -> &'static str {
        match self {
            Self::Migrate { .. } => "migrate",
            Self::Failover { .. } => "failover",
            Self::ReplaceSecondary { .. } => "replace-secondary",
        }
    }
}

/// A planned move and the locks it holds while in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    /// The move.
    pub action: Move,
    /// Locks held.
    pub locks: Vec<Lock>,
    /// For people: from where to where.
    pub description: String,
}

/// What an evacuation does with instances that cannot leave the node (node-local disk
/// templates: `plain`, `file`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImmovablePolicy {
    /// The evacuation fails before anything is touched, naming the instance.
    #[default]
    Fail,
    /// Everything else is evacuated; they stay on the node, which is not set offline; the
    /// incident completes with a warning naming them.
    Leave,
    /// Everything else is evacuated, then they are shut down (before the node is offlined).
    Shutdown,
}

impl ImmovablePolicy {
    /// The configuration spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Leave => "leave",
            Self::Shutdown => "shutdown",
        }
    }
}

/// How an evacuation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvacuationPolicy {
    /// Instances that cannot move.
    pub immovable: ImmovablePolicy,
    /// Set the emptied node offline before the repairready tag (maintd's "evacuate and
    /// offline").
    pub offline_after_evacuation: bool,
}

impl Default for EvacuationPolicy {
    fn default() -> Self {
        Self {
            immovable: ImmovablePolicy::Fail,
            offline_after_evacuation: true,
        }
    }
}

/// The last steps of an evacuation once every instance that can move is off the node (or
/// planned off it): shut down what cannot move, offline the node, then tag it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvacuationFinish {
    /// Node-local instances still running, to shut down first (policy `shutdown`).
    pub shutdown: Vec<String>,
    /// Set the node offline (policy `offline_after_evacuation`, nothing left running on it).
    pub offline: bool,
    /// Node-local instances that stay on the node (policy `leave`), as `name (template)`.
    pub left: Vec<String>,
}

/// What one evacuating incident does this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvacuationStep {
    /// Drain the node (first step).
    Drain,
    /// Submit these moves (never empty).
    Moves(Vec<PlannedMove>),
    /// Work remains but nothing can be submitted now (targets busy).
    Wait(String),
    /// The evacuation cannot succeed.
    Fail(String),
    /// The node holds no instance any more.
    Done,
    /// Submit this chain of jobs in one round (never empty); see
    /// [`Round::plan_evacuation_chain`].
    Chain(EvacuationChain),
}

/// An evacuation planned as one Ganeti job chain: each part runs only after the part before it
/// succeeded (RAPI `depends`), so Ganeti runs them back to back and a failure stops the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvacuationChain {
    /// First drain the node.
    pub drain: bool,
    /// Waves of moves: the moves of one wave run in parallel, after the drain and the wave
    /// before.
    pub waves: Vec<Vec<PlannedMove>>,
    /// Finally tag the node repairready (every instance is planned).
    pub tag: bool,
    /// When `tag`: what comes between the last wave and the tag.
    pub finish: EvacuationFinish,
    /// Instances left for a later round, and why.
    pub waiting: Vec<String>,
}

/// The cluster as seen this round, with what is already taken.
#[derive(Debug, Clone)]
pub struct Round<'a> {
    nodes: BTreeMap<&'a str, &'a Node>,
    instances: Vec<&'a Instance>,
    locks: BTreeSet<Lock>,
    reserved_memory: BTreeMap<String, u64>,
    reserved_disk: BTreeMap<String, u64>,
    extra_secondaries: BTreeMap<String, usize>,
    disrupted: BTreeSet<String>,
    with_incidents: BTreeSet<String>,
    evacuations: BTreeSet<String>,
    /// DRBD instances whose secondary this round moves off a node being evacuated too, with
    /// the new secondary (memory for the instance already reserved there).
    new_secondaries: BTreeMap<String, String>,
    /// Nodes another tool or duty holds (a grant, a campaign, balancing, an instance repair),
    /// each with its holder for people: no move of an instance with a node among them.
    other_holders: BTreeMap<String, String>,
    policy: EvacuationPolicy,
}

/// The prefix of an instance tag that sets its evacuation priority: `nodecare:priority:0` to
/// `nodecare:priority:9` (higher first when room is short).
pub const PRIORITY_TAG_PREFIX: &str = "nodecare:priority:";

/// An instance's evacuation priority: its `nodecare:priority:N` tag (0 to 9; the highest when
/// it has several), [`DEFAULT_PRIORITY`] without one (or with one that is not 0 to 9).
pub fn evacuation_priority(instance: &Instance) -> u8 {
    instance
        .tags
        .iter()
        .filter_map(|t| t.strip_prefix(PRIORITY_TAG_PREFIX))
        .filter_map(|n| n.parse::<u8>().ok())
        .filter(|n| *n <= 9)
        .max()
        .unwrap_or(DEFAULT_PRIORITY)
}

/// ` [priority N]` for an instance whose priority is not the default, else nothing.
pub(crate) fn priority_note(instance: &Instance) -> String {
    match evacuation_priority(instance) {
        DEFAULT_PRIORITY => String::new(),
        n => format!(" [priority {n}]"),
    }
}

/// The evacuation priority of an instance without a priority tag.
pub const DEFAULT_PRIORITY: u8 = 5;

impl<'a> Round<'a> {
    /// Starts a round. `in_flight` are the locks of jobs still running; `disrupted` are the
    /// nodes the gate counts as disrupted after its decision (never move targets; drained
    /// nodes are added).
    pub fn new(
        nodes: &'a [Node],
        instances: &'a [Instance],
        in_flight: impl IntoIterator<Item = Lock>,
        disrupted: impl IntoIterator<Item = String>,
    ) -> Self {
        let mut all_disrupted: BTreeSet<String> = nodes
            .iter()
            .filter(|node| node.drained || node.offline)
            .map(|node| node.name.clone())
            .collect();
        all_disrupted.extend(disrupted);
        // The instances with the highest evacuation priority are planned first (they take the
        // room there is when it is short), then by name.
        let mut sorted: Vec<&Instance> = instances.iter().collect();
        sorted.sort_by(|a, b| {
            evacuation_priority(b)
                .cmp(&evacuation_priority(a))
                .then_with(|| a.name.cmp(&b.name))
        });
        Self {
            nodes: nodes
                .iter()
                .map(|node| (node.name.as_str(), node))
                .collect(),
            instances: sorted,
            locks: in_flight.into_iter().collect(),
            reserved_memory: BTreeMap::new(),
            reserved_disk: BTreeMap::new(),
            extra_secondaries: BTreeMap::new(),
            disrupted: all_disrupted,
            with_incidents: BTreeSet::new(),
            evacuations: BTreeSet::new(),
            new_secondaries: BTreeMap::new(),
            other_holders: BTreeMap::new(),
            policy: EvacuationPolicy::default(),
        }
    }

    /// Sets how evacuations end (immovable instances, offlining); the default is
    /// [`EvacuationPolicy::default`].
    pub fn set_evacuation_policy(&mut self, policy: EvacuationPolicy) {
        self.policy = policy;
    }

    /// Names the nodes with an active incident (noted or pending): never a move target.
    #[must_use]
    pub fn with_active_incidents(mut self, nodes: impl IntoIterator<Item = String>) -> Self {
        self.with_incidents.extend(nodes);
        self
    }

    /// Names the nodes with an active evacuation (noted or pending): never a move target
    /// either, and a DRBD instance evacuated off its primary whose secondary is one of them gets
    /// a new secondary first, then moves there (see [`Move::ReplaceSecondary`]'s `replaces`).
    /// Waiting instead would wait for good: that node's evacuation waits for this one, which
    /// holds the instance's nodes.
    #[must_use]
    pub fn with_active_evacuations(mut self, nodes: impl IntoIterator<Item = String>) -> Self {
        for node in nodes {
            self.with_incidents.insert(node.clone());
            self.evacuations.insert(node);
        }
        self
    }

    /// Names the nodes another tool or duty holds, disrupted or not (a grant of the admission
    /// API, a campaign, balancing, an instance repair; not an incident nor a node drained by
    /// hand), each with its holder: never a move target, and a DRBD instance whose primary is
    /// one of them keeps its secondary on the evacuated node until it is released (replacing
    /// the secondary syncs the disks from the primary: two holders would act on that node).
    #[must_use]
    pub fn with_other_holders(mut self, nodes: impl IntoIterator<Item = (String, String)>) -> Self {
        for (node, holder) in nodes {
            self.with_incidents.insert(node.clone());
            self.other_holders.entry(node).or_insert(holder);
        }
        self
    }

    /// Why a move of `instance` waits for another tool or duty's hold on one of its nodes, if
    /// one of them is held so.
    fn held_by_another(&self, instance: &Instance) -> Option<String> {
        std::iter::once(&instance.primary_node)
            .chain(&instance.secondary_nodes)
            .find_map(|node| {
                self.other_holders
                    .get(node)
                    .map(|holder| format!("{node} is held by {holder}"))
            })
    }

    /// Nodes currently counted as disrupted.
    pub fn disrupted(&self) -> &BTreeSet<String> {
        &self.disrupted
    }

    /// Whether a lock is taken.
    pub fn is_locked(&self, lock: &Lock) -> bool {
        self.locks.contains(lock)
    }

    /// The node to evacuate with its primary and secondary instances; a [`EvacuationStep::Fail`]
    /// when it left the cluster or holds an instance that cannot move (checked before anything
    /// is touched).
    fn evacuation_subject(
        &self,
        node: &str,
    ) -> Result<(&'a Node, Vec<&'a Instance>, Vec<&'a Instance>), EvacuationStep> {
        let Some(this) = self.nodes.get(node).copied() else {
            return Err(EvacuationStep::Fail(format!(
                "node {node} is no longer in the cluster"
            )));
        };
        let primaries: Vec<&'a Instance> = self
            .instances
            .iter()
            .copied()
            .filter(|i| i.primary_node == node)
            .collect();
        let secondaries: Vec<&'a Instance> = self
            .instances
            .iter()
            .copied()
            .filter(|i| i.secondary_nodes.iter().any(|s| s == node))
            .collect();
        if self.policy.immovable == ImmovablePolicy::Fail
            && let Some(stuck) = primaries.iter().find(|i| i.disk_template.is_node_local())
        {
            return Err(EvacuationStep::Fail(format!(
                "instance {} has disk template {} and cannot be relocated off {node} \
                 (immovable_instances = fail)",
                stuck.name,
                stuck.disk_template.as_str()
            )));
        }
        // Under `leave` and `shutdown` they stay where they are: see `evacuation_finish`.
        let movable = primaries
            .into_iter()
            .filter(|i| !i.disk_template.is_node_local())
            .collect();
        Ok((this, movable, secondaries))
    }

    /// The last steps of evacuating `node` once its movable instances are off it (or planned
    /// off it): node-local instances to shut down or to leave (by the policy), and whether to
    /// set the node offline. An instance left running on the node keeps it online.
    pub fn evacuation_finish(&self, node: &str) -> EvacuationFinish {
        let local: Vec<&Instance> = self
            .instances
            .iter()
            .copied()
            .filter(|i| i.primary_node == node && i.disk_template.is_node_local())
            .collect();
        let offline_now = self.nodes.get(node).is_some_and(|n| n.offline);
        let mut finish = EvacuationFinish::default();
        match self.policy.immovable {
            ImmovablePolicy::Fail => {}
            ImmovablePolicy::Leave => {
                finish.left = local
                    .iter()
                    .map(|i| format!("{} ({})", i.name, i.disk_template.as_str()))
                    .collect();
            }
            ImmovablePolicy::Shutdown => {
                finish.shutdown = local
                    .iter()
                    .filter(|i| i.admin_state == "up")
                    .map(|i| i.name.clone())
                    .collect();
            }
        }
        finish.offline =
            self.policy.offline_after_evacuation && !offline_now && finish.left.is_empty();
        finish
    }

    /// Why evacuating `node` cannot succeed whatever the gate decides (it left the cluster, or
    /// holds an instance that cannot move), if so: such an incident fails at once instead of
    /// waiting for the gate.
    pub fn cannot_evacuate(&self, node: &str) -> Option<String> {
        match self.evacuation_subject(node) {
            Err(EvacuationStep::Fail(why)) => Some(why),
            _ => None,
        }
    }

    /// Plans the next step of evacuating `node` (`failover` for evacuate-failover).
    ///
    /// Called only for an evacuation the gate admitted. A node not yet drained gets
    /// [`EvacuationStep::Drain`]. An empty node gets [`EvacuationStep::Done`] (its tag disrupts nothing). Planned
    /// moves take their locks, memory and disk immediately.
    pub fn plan_evacuation(&mut self, node: &str, failover: bool) -> EvacuationStep {
        let (this, primaries, secondaries) = match self.evacuation_subject(node) {
            Ok(subject) => subject,
            Err(step) => return step,
        };
        self.disrupted.insert(node.to_owned());
        // An offline node (offlined at the end of its evacuation) is out of service too.
        if !this.drained && !this.offline {
            return EvacuationStep::Drain;
        }
        if primaries.is_empty() && secondaries.is_empty() {
            return EvacuationStep::Done;
        }
        match self.plan_wave(node, &primaries, &secondaries, failover, &BTreeSet::new()) {
            Err(reason) => EvacuationStep::Fail(reason),
            Ok((moves, waiting)) if moves.is_empty() => {
                EvacuationStep::Wait(format!("waiting to move {}", waiting.join(", ")))
            }
            Ok((moves, _)) => EvacuationStep::Moves(moves),
        }
    }

    /// Plans the whole evacuation of `node` that can be planned now as one job chain: the
    /// drain (when the node is not drained yet), then waves of moves, each wave depending on
    /// the one before (a target node or instance busy in one wave is free again in the next),
    /// then the repairready tag when every instance is planned and nothing is left for a later
    /// round. Reservations are those of [`Self::plan_evacuation`]; the locks
    /// of every planned move stay taken for the rest of the round.
    ///
    /// Answers [`EvacuationStep::Chain`] when at least one job is planned, otherwise what
    /// [`Self::plan_evacuation`] would answer.
    pub fn plan_evacuation_chain(&mut self, node: &str, failover: bool) -> EvacuationStep {
        let (this, primaries, secondaries) = match self.evacuation_subject(node) {
            Ok(subject) => subject,
            Err(step) => return step,
        };
        let out_of_service = this.drained || this.offline;
        if out_of_service && primaries.is_empty() && secondaries.is_empty() {
            return EvacuationStep::Done;
        }
        self.disrupted.insert(node.to_owned());
        let drain = !out_of_service;
        // Nothing of a failing evacuation is submitted: it gives back all it took.
        let taken = (
            self.locks.clone(),
            self.reserved_memory.clone(),
            self.reserved_disk.clone(),
            self.extra_secondaries.clone(),
            self.new_secondaries.clone(),
        );
        let mut planned: BTreeSet<String> = BTreeSet::new();
        let mut waves: Vec<Vec<PlannedMove>> = Vec::new();
        let waiting = loop {
            match self.plan_wave(node, &primaries, &secondaries, failover, &planned) {
                Err(reason) => {
                    (
                        self.locks,
                        self.reserved_memory,
                        self.reserved_disk,
                        self.extra_secondaries,
                        self.new_secondaries,
                    ) = taken;
                    return EvacuationStep::Fail(reason);
                }
                Ok((moves, left)) => {
                    if moves.is_empty() {
                        break left;
                    }
                    // The next wave runs after this one: its locks are free again by then. An
                    // instance whose secondary this wave moves off a failing peer moves itself in
                    // the next.
                    for planned_move in &moves {
                        if !matches!(
                            planned_move.action,
                            Move::ReplaceSecondary {
                                replaces: Some(_),
                                ..
                            }
                        ) {
                            planned.insert(planned_move.action.instance().to_owned());
                        }
                        for lock in &planned_move.locks {
                            self.locks.remove(lock);
                        }
                    }
                    waves.push(moves);
                }
            }
        };
        // Held for the rest of the round: other incidents must not plan on them.
        for wave in &waves {
            for planned_move in wave {
                self.locks.extend(planned_move.locks.iter().cloned());
            }
        }
        // A DRBD primary moved to its secondary leaves this node as its new secondary, which a
        // later round replaces: the tag waits for that round.
        let drbd_left = primaries
            .iter()
            .any(|i| i.disk_template.is_internally_mirrored());
        let tag = waiting.is_empty() && !drbd_left;
        if !drain && waves.is_empty() {
            return EvacuationStep::Wait(format!("waiting to move {}", waiting.join(", ")));
        }
        let finish = if tag {
            self.evacuation_finish(node)
        } else {
            EvacuationFinish::default()
        };
        EvacuationStep::Chain(EvacuationChain {
            drain,
            waves,
            tag,
            finish,
            waiting,
        })
    }

    /// One wave of non-conflicting moves off `node`, skipping the instances in `skip`: the
    /// moves planned and, for people, the instances that must wait.
    fn plan_wave(
        &mut self,
        node: &str,
        primaries: &[&'a Instance],
        secondaries: &[&'a Instance],
        failover: bool,
        skip: &BTreeSet<String>,
    ) -> Result<(Vec<PlannedMove>, Vec<String>), String> {
        let mut moves = Vec::new();
        let mut waiting = Vec::new();
        for instance in primaries.iter().copied() {
            if skip.contains(&instance.name) {
                continue;
            }
            match self.plan_primary(node, instance, failover)? {
                Attempt::Planned(planned) => moves.push(planned),
                Attempt::Wait(why) => waiting.push(format!(
                    "{}{} ({why})",
                    instance.name,
                    priority_note(instance)
                )),
            }
        }
        for instance in secondaries.iter().copied() {
            if skip.contains(&instance.name) {
                continue;
            }
            match self.plan_secondary(node, instance)? {
                Attempt::Planned(planned) => moves.push(planned),
                Attempt::Wait(why) => waiting.push(format!("{} ({why})", instance.name)),
            }
        }
        Ok((moves, waiting))
    }

    /// Whether `instance`'s memory fits on `node`; with `reserved`, after this round's moves.
    /// Unknown free memory or an unknown instance size never fits.
    fn memory_room(&self, node: &Node, instance: &Instance, reserved: bool) -> Room {
        let Some(needed) = instance.memory else {
            return Room::Unknown(format!("memory size of instance {} unknown", instance.name));
        };
        let Some(free) = node.memory_free else {
            return Room::Unknown(format!("free memory of {} unknown", node.name));
        };
        let taken = if reserved {
            self.reserved_memory.get(&node.name).copied().unwrap_or(0)
        } else {
            0
        };
        Room::from_fit(free.saturating_sub(taken) >= needed)
    }

    /// Whether `node` has the disk space for a new DRBD secondary of `instance` (its disks plus
    /// [`DRBD_META_MIB`] per disk); with `reserved`, after this round's moves.
    fn disk_room(&self, node: &Node, instance: &Instance, reserved: bool) -> Room {
        let Some(needed) = drbd_disk_need(instance) else {
            return Room::Unknown(format!("disk sizes of instance {} unknown", instance.name));
        };
        let Some(free) = node.disk_free else {
            return Room::Unknown(format!("free disk of {} unknown", node.name));
        };
        let taken = if reserved {
            self.reserved_disk.get(&node.name).copied().unwrap_or(0)
        } else {
            0
        };
        Room::from_fit(free.saturating_sub(taken) >= needed)
    }

    fn take(
        &mut self,
        locks: &[Lock],
        memory_on: Option<(&str, u64)>,
        disk_on: Option<(&str, u64)>,
    ) {
        self.locks.extend(locks.iter().cloned());
        if let Some((node, memory)) = memory_on {
            *self.reserved_memory.entry(node.to_owned()).or_insert(0) += memory;
        }
        if let Some((node, disk)) = disk_on {
            *self.reserved_disk.entry(node.to_owned()).or_insert(0) += disk;
        }
    }

    /// A node that may receive instances: healthy, not disrupted, no active incident (maintd's
    /// `freeNodes`).
    fn usable(&self, node: &Node) -> bool {
        node.is_healthy()
            && !self.disrupted.contains(&node.name)
            && !self.with_incidents.contains(&node.name)
    }

    /// Healthy, undisrupted nodes held back only by their active incident: moves that could go
    /// there wait rather than fail.
    /// Nodes `candidate` accepts that are held now but will be free again: healthy, in service,
    /// held by an incident that leaves them in service (a live repair) or by another holder.
    /// A node being evacuated is never among them: its own evacuation takes it out of service,
    /// so an evacuation waiting for it would wait for good (and its evacuation may wait for this
    /// one's failure domain).
    fn held_by_incidents(&self, candidate: impl Fn(&Node) -> bool) -> Vec<&'a str> {
        self.nodes
            .values()
            .filter(|n| {
                n.is_healthy()
                    && !self.disrupted.contains(&n.name)
                    && self.with_incidents.contains(&n.name)
                    && !self.evacuations.contains(&n.name)
                    && candidate(n)
            })
            .map(|n| n.name.as_str())
            .collect()
    }

    /// For an evacuation that cannot succeed: the nodes `candidate` accepts that are being
    /// evacuated too (never a target), named in its reason.
    fn evacuating_too(&self, candidate: impl Fn(&Node) -> bool) -> String {
        let names: Vec<&str> = self
            .nodes
            .values()
            .filter(|n| self.evacuations.contains(&n.name) && candidate(n))
            .map(|n| n.name.as_str())
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!(
                " (being evacuated too, never a target: {})",
                names.join(", ")
            )
        }
    }

    fn plan_primary(
        &mut self,
        source: &str,
        instance: &'a Instance,
        failover: bool,
    ) -> Result<Attempt, String> {
        let instance_lock = Lock::Instance(instance.name.clone());
        if self.is_locked(&instance_lock) {
            return Ok(Attempt::Wait("a job on it is in flight".into()));
        }
        if let Some(why) = self.held_by_another(instance) {
            return Ok(Attempt::Wait(why));
        }
        // A stopped instance cannot be live-migrated; failover only moves its configuration.
        let use_failover = failover || instance.admin_state != "up";
        if instance.disk_template.is_internally_mirrored() {
            if let Some(remote) = self.new_secondaries.get(&instance.name).cloned() {
                return Ok(self.plan_to_new_secondary(source, instance, use_failover, remote));
            }
            let Some(secondary_name) = instance.secondary_nodes.first() else {
                return Err(format!(
                    "DRBD instance {} has no secondary node",
                    instance.name
                ));
            };
            let Some(secondary) = self.nodes.get(secondary_name.as_str()).copied() else {
                return Err(format!(
                    "secondary {secondary_name} of {} is not in the cluster",
                    instance.name
                ));
            };
            if secondary.offline || !secondary.vm_capable {
                return Err(format!(
                    "cannot move {} off {source}: its secondary {secondary_name} is offline or not vm-capable",
                    instance.name
                ));
            }
            if self.evacuations.contains(secondary_name) {
                return self.plan_secondary_off_peer(source, instance, secondary_name);
            }
            if self.with_incidents.contains(secondary_name) {
                return Ok(Attempt::Wait(format!(
                    "its secondary {secondary_name} has an active incident"
                )));
            }
            if !self.usable(secondary) {
                // Drained by another evacuation, which will replace it: wait.
                return Ok(Attempt::Wait(format!(
                    "its secondary {secondary_name} is drained or evacuating"
                )));
            }
            match self.memory_room(secondary, instance, false) {
                Room::Yes => {}
                Room::No => {
                    return Err(format!(
                        "secondary {secondary_name} lacks the memory to take over instance {}",
                        instance.name
                    ));
                }
                Room::Unknown(why) => return Ok(Attempt::Wait(why)),
            }
            let node_lock = Lock::Node(secondary_name.clone());
            if self.is_locked(&node_lock)
                || self.memory_room(secondary, instance, true) != Room::Yes
            {
                return Ok(Attempt::Wait(format!("{secondary_name} is busy")));
            }
            let locks = vec![instance_lock, node_lock];
            self.take(
                &locks,
                instance.memory.map(|m| (secondary_name.as_str(), m)),
                None,
            );
            let action = if use_failover {
                Move::Failover {
                    instance: instance.name.clone(),
                    target: None,
                }
            } else {
                Move::Migrate {
                    instance: instance.name.clone(),
                    target: None,
                }
            };
            let description = format!(
                "{} {} {source} -> {secondary_name}",
                action.verb(),
                instance.name
            );
            return Ok(Attempt::Planned(PlannedMove {
                action,
                locks,
                description,
            }));
        }
        // Shared storage or diskless: any usable node of the same group can take it.
        let group = self
            .nodes
            .get(source)
            .map(|n| n.group.clone())
            .unwrap_or_default();
        let candidates: Vec<&'a Node> = self
            .nodes
            .values()
            .copied()
            .filter(|n| n.name != source && n.group == group && self.usable(n))
            .collect();
        let room = Room::among(&candidates, |candidate| {
            self.memory_room(candidate, instance, false)
        });
        if !matches!(room, Room::Yes) {
            if let Room::Unknown(why) = room {
                return Ok(Attempt::Wait(why));
            }
            let held = self.held_by_incidents(|n| n.name != source && n.group == group);
            if !held.is_empty() {
                return Ok(Attempt::Wait(format!(
                    "only nodes held for now could take it: {}",
                    held.join(", ")
                )));
            }
            return Err(format!(
                "no node in the group of {source} can take instance {} ({} MiB){}",
                instance.name,
                instance
                    .memory
                    .map_or_else(|| "?".to_owned(), |m| m.to_string()),
                self.evacuating_too(|n| n.name != source && n.group == group)
            ));
        }
        let known_free = |n: &Node| {
            n.memory_free
                .unwrap_or(0)
                .saturating_sub(self.reserved_memory.get(&n.name).copied().unwrap_or(0))
        };
        let best = candidates
            .iter()
            .copied()
            .filter(|n| {
                !self.is_locked(&Lock::Node(n.name.clone()))
                    && self.memory_room(n, instance, true) == Room::Yes
            })
            .max_by(|a, b| {
                known_free(a)
                    .cmp(&known_free(b))
                    .then_with(|| b.name.cmp(&a.name))
            });
        let Some(target) = best else {
            return Ok(Attempt::Wait(
                "every node that could take it is busy".into(),
            ));
        };
        let target_name = target.name.clone();
        let locks = vec![instance_lock, Lock::Node(target_name.clone())];
        self.take(
            &locks,
            instance.memory.map(|m| (target_name.as_str(), m)),
            None,
        );
        let action = if use_failover {
            Move::Failover {
                instance: instance.name.clone(),
                target: Some(target_name.clone()),
            }
        } else {
            Move::Migrate {
                instance: instance.name.clone(),
                target: Some(target_name.clone()),
            }
        };
        let description = format!(
            "{} {} {source} -> {target_name}",
            action.verb(),
            instance.name
        );
        Ok(Attempt::Planned(PlannedMove {
            action,
            locks,
            description,
        }))
    }

    /// The first move of a DRBD `instance` off `source` whose secondary `peer` is being
    /// evacuated too: a new secondary on a usable node of its group with the disk for it and
    /// the memory to take the instance over (reserved now), so that the next wave (or round)
    /// moves it there ([`Self::plan_to_new_secondary`]). This evacuation moves the instance
    /// off both nodes; the peer's evacuation waits until it shares no instance with `source`.
    fn plan_secondary_off_peer(
        &mut self,
        source: &str,
        instance: &'a Instance,
        peer: &str,
    ) -> Result<Attempt, String> {
        let instance_lock = Lock::Instance(instance.name.clone());
        let group = self
            .nodes
            .get(source)
            .map(|n| n.group.clone())
            .unwrap_or_default();
        let eligible = |n: &Node| n.name != source && n.name != peer && n.group == group;
        let candidates: Vec<&'a Node> = self
            .nodes
            .values()
            .copied()
            .filter(|n| eligible(n) && self.usable(n))
            .collect();
        let room = |round: &Self, candidate: &Node, reserved: bool| match round
            .disk_room(candidate, instance, reserved)
        {
            Room::Yes => round.memory_room(candidate, instance, reserved),
            other => other,
        };
        let fits = Room::among(&candidates, |candidate| room(self, candidate, false));
        if !matches!(fits, Room::Yes) {
            if let Room::Unknown(why) = fits {
                return Ok(Attempt::Wait(why));
            }
            let held = self.held_by_incidents(eligible);
            if !held.is_empty() {
                return Ok(Attempt::Wait(format!(
                    "its secondary {peer} is being evacuated too and only nodes held for now could take it: {}",
                    held.join(", ")
                )));
            }
            return Err(format!(
                "cannot move {} off {source}: its secondary {peer} is being evacuated too and no \
                 node of its group has the disk ({} MiB) and memory ({} MiB) for a new secondary{}",
                instance.name,
                drbd_disk_need(instance).map_or_else(|| "?".to_owned(), |d| d.to_string()),
                instance
                    .memory
                    .map_or_else(|| "?".to_owned(), |m| m.to_string()),
                self.evacuating_too(eligible)
            ));
        }
        let known_free = |n: &Node| {
            n.memory_free
                .unwrap_or(0)
                .saturating_sub(self.reserved_memory.get(&n.name).copied().unwrap_or(0))
        };
        let best = candidates
            .iter()
            .copied()
            .filter(|n| {
                !self.is_locked(&Lock::Node(n.name.clone())) && room(self, n, true) == Room::Yes
            })
            .max_by(|a, b| {
                known_free(a)
                    .cmp(&known_free(b))
                    .then_with(|| b.name.cmp(&a.name))
            });
        let Some(target) = best else {
            return Ok(Attempt::Wait(format!(
                "its secondary {peer} is being evacuated too and every node that could take it is busy"
            )));
        };
        let remote = target.name.clone();
        let locks = vec![instance_lock, Lock::Node(remote.clone())];
        self.take(
            &locks,
            instance.memory.map(|m| (remote.as_str(), m)),
            drbd_disk_need(instance).map(|d| (remote.as_str(), d)),
        );
        *self.extra_secondaries.entry(remote.clone()).or_insert(0) += 1;
        self.new_secondaries
            .insert(instance.name.clone(), remote.clone());
        let action = Move::ReplaceSecondary {
            instance: instance.name.clone(),
            remote_node: remote.clone(),
            replaces: Some(peer.to_owned()),
        };
        let description = format!(
            "replace secondary of {name} (primary {source}) {peer} -> {remote}: {peer} is being \
             evacuated too; {name} then moves to {remote}",
            name = instance.name
        );
        Ok(Attempt::Planned(PlannedMove {
            action,
            locks,
            description,
        }))
    }

    /// Moves a DRBD `instance` off `source` to `remote`, the new secondary an earlier wave of
    /// this round gives it ([`Self::plan_secondary_off_peer`], which reserved its memory there).
    fn plan_to_new_secondary(
        &mut self,
        source: &str,
        instance: &'a Instance,
        use_failover: bool,
        remote: String,
    ) -> Attempt {
        let instance_lock = Lock::Instance(instance.name.clone());
        let node_lock = Lock::Node(remote.clone());
        if self.is_locked(&node_lock) {
            return Attempt::Wait(format!("{remote} is busy"));
        }
        let locks = vec![instance_lock, node_lock];
        self.take(&locks, None, None);
        let action = if use_failover {
            Move::Failover {
                instance: instance.name.clone(),
                target: None,
            }
        } else {
            Move::Migrate {
                instance: instance.name.clone(),
                target: None,
            }
        };
        let description = format!(
            "{} {} {source} -> {remote} (its new secondary)",
            action.verb(),
            instance.name
        );
        Attempt::Planned(PlannedMove {
            action,
            locks,
            description,
        })
    }

    fn plan_secondary(&mut self, source: &str, instance: &'a Instance) -> Result<Attempt, String> {
        if !matches!(instance.disk_template, DiskTemplate::Drbd) {
            return Err(format!(
                "instance {} lists {source} as secondary but is not DRBD ({})",
                instance.name,
                instance.disk_template.as_str()
            ));
        }
        let instance_lock = Lock::Instance(instance.name.clone());
        let primary_lock = Lock::Node(instance.primary_node.clone());
        if let Some(why) = self.held_by_another(instance) {
            return Ok(Attempt::Wait(why));
        }
        if self.is_locked(&instance_lock) || self.is_locked(&primary_lock) {
            return Ok(Attempt::Wait(format!(
                "it or its primary {} is busy",
                instance.primary_node
            )));
        }
        let group = self
            .nodes
            .get(instance.primary_node.as_str())
            .map(|n| n.group.clone())
            .unwrap_or_default();
        let eligible =
            |n: &Node| n.name != source && n.name != instance.primary_node && n.group == group;
        let candidates: Vec<&'a Node> = self
            .nodes
            .values()
            .copied()
            .filter(|n| eligible(n) && self.usable(n))
            .collect();
        let room = Room::among(&candidates, |candidate| {
            self.disk_room(candidate, instance, false)
        });
        if !matches!(room, Room::Yes) {
            if let Room::Unknown(why) = room {
                return Ok(Attempt::Wait(why));
            }
            let held = self.held_by_incidents(eligible);
            if !held.is_empty() {
                return Ok(Attempt::Wait(format!(
                    "only nodes held for now could take its secondary: {}",
                    held.join(", ")
                )));
            }
            return Err(if candidates.is_empty() {
                format!(
                    "no node can take the secondary of instance {} (primary {}){}",
                    instance.name,
                    instance.primary_node,
                    self.evacuating_too(eligible)
                )
            } else {
                format!(
                    "no node has the disk space ({} MiB) for the secondary of instance {} (primary {}){}",
                    drbd_disk_need(instance).unwrap_or(0),
                    instance.name,
                    instance.primary_node,
                    self.evacuating_too(eligible)
                )
            });
        }
        let load = |n: &Node| {
            n.secondary_instances.len() + self.extra_secondaries.get(&n.name).copied().unwrap_or(0)
        };
        let best = candidates
            .iter()
            .copied()
            .filter(|n| {
                !self.is_locked(&Lock::Node(n.name.clone()))
                    && self.disk_room(n, instance, true) == Room::Yes
            })
            .min_by(|a, b| load(a).cmp(&load(b)).then_with(|| a.name.cmp(&b.name)));
        let Some(target) = best else {
            return Ok(Attempt::Wait(
                "every node that could take its secondary is busy".into(),
            ));
        };
        let remote = target.name.clone();
        let locks = vec![instance_lock, primary_lock, Lock::Node(remote.clone())];
        self.take(
            &locks,
            None,
            drbd_disk_need(instance).map(|d| (remote.as_str(), d)),
        );
        *self.extra_secondaries.entry(remote.clone()).or_insert(0) += 1;
        let action = Move::ReplaceSecondary {
            instance: instance.name.clone(),
            remote_node: remote.clone(),
            replaces: None,
        };
        let description = format!(
            "replace secondary of {} (primary {}) {source} -> {remote}",
            instance.name, instance.primary_node
        );
        Ok(Attempt::Planned(PlannedMove {
            action,
            locks,
            description,
        }))
    }
}

/// Where one of the jobs that return a node to service is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceJob {
    /// Recorded or submitted, not finished.
    InFlight,
    /// Finished successfully.
    Succeeded,
    /// Failed, with Ganeti's message.
    Failed(String),
}

/// What is known when an acknowledged incident's node is to return to service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceFacts {
    /// The node is offline now.
    pub offline: bool,
    /// The node is drained now.
    pub drained: bool,
    /// The incident set it offline (its offline job succeeded).
    pub offlined_by_incident: bool,
    /// The incident drained it (its drain job succeeded).
    pub drained_by_incident: bool,
    /// The incident's online job, if any.
    pub online: Option<ServiceJob>,
    /// The incident's undrain job, if any.
    pub undrain: Option<ServiceJob>,
}

/// The next step of returning an acknowledged incident's node to service
/// (`undrain_on_ack`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceStep {
    /// Set the node online (Ganeti makes it a regular node: not drained either).
    Online,
    /// Clear the drained flag.
    Undrain,
    /// A job of ours is in flight.
    Wait,
    /// A job of ours failed: nothing more is tried (the message says why).
    Failed(String),
    /// Nothing (more) to do: the node is in service, or nodecare did not take it out.
    Done,
}

/// Decides the next step of returning a node to service. Only what the incident did is
/// undone: a node offlined or drained by someone else stays so. Each job is tried once.
pub fn return_to_service(facts: &ServiceFacts) -> ServiceStep {
    for job in [&facts.online, &facts.undrain].into_iter().flatten() {
        match job {
            ServiceJob::InFlight => return ServiceStep::Wait,
            ServiceJob::Failed(why) => return ServiceStep::Failed(why.clone()),
            ServiceJob::Succeeded => {}
        }
    }
    if facts.offline && facts.offlined_by_incident && facts.online.is_none() {
        return ServiceStep::Online;
    }
    let ours = facts.drained_by_incident || facts.offlined_by_incident;
    if facts.drained && !facts.offline && ours && facts.undrain.is_none() {
        return ServiceStep::Undrain;
    }
    ServiceStep::Done
}

/// How often one instance's move may be planned again because Ganeti found its precondition
/// changed (`OpPrereqError`) before the incident fails.
pub const MAX_REPLANS: usize = 3;

/// How [`FailedStep::Replan`] says that Ganeti refused a move's precondition (what
/// [`MAX_REPLANS`] counts in the intents' errors).
pub const PRECONDITION_CHANGED: &str = "the cluster changed under it";

/// Why a job ended without success, as far as the evacuation cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobFailure {
    /// Ganeti found the opcode's precondition false (`OpPrereqError`, with its error kind:
    /// `wrong_state`, `wrong_input`, `unknown_entity`, `insufficient_resources`, ...): the
    /// cluster changed between planning and the job's run. Nothing was changed by the job.
    Precondition {
        /// Ganeti's error kind (empty when it gave none).
        kind: String,
        /// Ganeti's message.
        message: String,
    },
    /// The job never ran: a job it depended on did not succeed (Ganeti's `Dependency job ...`).
    NotRun(String),
    /// Anything else: the job ran and failed, was canceled, or vanished.
    Other(String),
}

impl JobFailure {
    /// Reads a finished, unsuccessful job: its first failed opcode's result
    /// (`["OpPrereqError", [message, kind]]`, `["OpExecError", [message]]`) and its messages.
    pub fn of_job(job: &crate::ganeti::Job) -> Self {
        let summary = if job.errors.is_empty() {
            job.status.as_str().to_owned()
        } else {
            job.errors.join("; ")
        };
        let failed = job.opresult.iter().find_map(|result| {
            let [class, args] = result.as_array()?.as_slice() else {
                return None;
            };
            let class = class.as_str()?;
            let args = args.as_array()?;
            let message = args.first().and_then(|m| m.as_str()).unwrap_or_default();
            let kind = args.get(1).and_then(|k| k.as_str()).unwrap_or_default();
            Some((class.to_owned(), message.to_owned(), kind.to_owned()))
        });
        let not_run = |message: &str| {
            message.contains("Dependency job") || message.contains("Dependency error")
        };
        match failed {
            Some((class, message, kind)) if class == "OpPrereqError" => {
                Self::Precondition { kind, message }
            }
            Some((_, message, _)) if not_run(&message) => Self::NotRun(message),
            _ if job.errors.iter().any(|e| not_run(e)) => Self::NotRun(summary),
            _ => Self::Other(summary),
        }
    }

    /// Ganeti's words.
    pub fn message(&self) -> &str {
        match self {
            Self::Precondition { message, .. } | Self::NotRun(message) | Self::Other(message) => {
                message
            }
        }
    }
}

/// How an evacuation counts one of its jobs that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailedStep {
    /// What the step was for already holds (the instance left the node some other way, e.g. a
    /// job of a previous master re-run by Ganeti after a master failover): counted as done.
    Done(String),
    /// The job changed nothing and the step is planned again from the cluster as it is;
    /// `precondition`: Ganeti refused its precondition (counts towards [`MAX_REPLANS`]),
    /// otherwise it never ran (a job it depended on did not succeed).
    Replan {
        /// Why, for the history.
        why: String,
        /// Whether it counts towards the instance's re-plans.
        precondition: bool,
    },
    /// A genuine failure: the incident fails.
    Failed(String),
}

/// Whether `step`'s goal holds for an evacuation of `node` in `instances` (the cluster read
/// after the job ended): the instance is gone or no longer uses the node as the move meant.
pub fn move_goal_holds(step: &Move, node: &str, instances: &[Instance]) -> bool {
    let Some(instance) = instances.iter().find(|i| i.name == step.instance()) else {
        return true;
    };
    match step {
        Move::Migrate { .. } | Move::Failover { .. } => instance.primary_node != node,
        Move::ReplaceSecondary { replaces, .. } => {
            let old = replaces.as_deref().unwrap_or(node);
            !instance.secondary_nodes.iter().any(|s| s == old)
        }
    }
}

/// Judges a job of the evacuation of `node` that ended without success. `step` is its move
/// (`None` for the drain, the shutdowns, the offline); `instances` the cluster as RAPI shows it
/// now (`None`: could not be read); `replans` how often this instance's move was already planned
/// again because of its precondition.
///
/// Only a genuine failure fails the incident: a move whose goal holds is done, a job that never
/// ran or whose precondition changed under it is planned again (a move at most [`MAX_REPLANS`]
/// times).
pub fn judge_failed_step(
    step: Option<&Move>,
    node: &str,
    failure: &JobFailure,
    instances: Option<&[Instance]>,
    replans: usize,
) -> FailedStep {
    let goal_holds = match (step, instances) {
        (Some(step), Some(instances)) => move_goal_holds(step, node, instances),
        _ => false,
    };
    match failure {
        JobFailure::Other(why) => FailedStep::Failed(why.clone()),
        JobFailure::NotRun(why) | JobFailure::Precondition { message: why, .. } if goal_holds => {
            let instance = step.map_or("", Move::instance);
            FailedStep::Done(format!(
                "{instance} is no longer on {node} ({why}): counted as done"
            ))
        }
        JobFailure::NotRun(why) => FailedStep::Replan {
            why: format!("did not run ({why}); planned again"),
            precondition: false,
        },
        JobFailure::Precondition { kind, message } => match step {
            None => FailedStep::Failed(failure_text(kind, message)),
            Some(step) if replans >= MAX_REPLANS => FailedStep::Failed(format!(
                "{} of {} refused {} times (planned again {replans} times, at most {MAX_REPLANS}), each time because the cluster changed under it; last: {}",
                step.verb(),
                step.instance(),
                replans + 1,
                failure_text(kind, message)
            )),
            Some(_) => FailedStep::Replan {
                why: format!(
                    "{PRECONDITION_CHANGED} ({}); planned again from the cluster as it is",
                    failure_text(kind, message)
                ),
                precondition: true,
            },
        },
    }
}

fn failure_text(kind: &str, message: &str) -> String {
    if kind.is_empty() {
        format!("OpPrereqError: {message}")
    } else {
        format!("OpPrereqError: {message} ({kind})")
    }
}

/// DRBD metadata Ganeti allocates per disk, in MiB (`DRBD_META_SIZE`).
pub const DRBD_META_MIB: u64 = 128;

/// Disk space a new DRBD secondary of `instance` needs, in MiB; `None` when its disks are not
/// known.
fn drbd_disk_need(instance: &Instance) -> Option<u64> {
    if instance.disk_sizes.is_empty() {
        return None;
    }
    let count = u64::try_from(instance.disk_sizes.len()).unwrap_or(u64::MAX);
    Some(
        instance
            .disk_sizes
            .iter()
            .fold(0u64, |sum, size| sum.saturating_add(*size))
            .saturating_add(DRBD_META_MIB.saturating_mul(count)),
    )
}

/// Whether something fits; unknown is never a yes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Room {
    Yes,
    No,
    Unknown(String),
}

impl Room {
    /// Whether any of `candidates` has room: `Yes` as soon as one has, `Unknown` (every reason)
    /// when none has for sure but some cannot be known, else `No`.
    fn among(candidates: &[&Node], room: impl Fn(&Node) -> Room) -> Room {
        let mut unknown = Vec::new();
        for candidate in candidates {
            match room(candidate) {
                Room::Yes => return Room::Yes,
                Room::No => {}
                Room::Unknown(why) => unknown.push(why),
            }
        }
        if unknown.is_empty() {
            Room::No
        } else {
            Room::Unknown(unknown.join("; "))
        }
    }

    const fn from_fit(fits: bool) -> Self {
        if fits { Self::Yes } else { Self::No }
    }
}

/// One instance's move this round, or why it waits.
#[derive(Debug)]
enum Attempt {
    Planned(PlannedMove),
    Wait(String),
}

#[cfg(any(test, feature = "test-support"))]
pub mod tests_support {
    use crate::ganeti::{Node, NodeRole};

    /// A healthy regular node with 4 GiB free.
    pub fn node(name: &str) -> Node {
        Node {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            role: NodeRole::Regular,
            drained: false,
            offline: false,
            master_candidate: false,
            vm_capable: true,
            primary_ip: "127.0.0.1".into(),
            secondary_ip: "127.0.0.1".into(),
            tags: vec![],
            group: "g".into(),
            primary_instances: vec![],
            secondary_instances: vec![],
            memory_free: Some(4096),
            memory_total: Some(8192),
            disk_free: Some(100_000),
            software_version: None,
        }
    }

    /// A running diskless instance on `primary` with `memory` MiB.
    pub fn instance(name: &str, primary: &str, memory: u64) -> crate::ganeti::Instance {
        crate::ganeti::Instance {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            disk_template: crate::ganeti::DiskTemplate::Diskless,
            primary_node: primary.into(),
            secondary_nodes: vec![],
            admin_state: "up".into(),
            status: "running".into(),
            memory: Some(memory),
            tags: vec![],
            disk_sizes: vec![],
            machine_version: crate::ganeti::MachineVersion::NotKvm,
        }
    }

    /// A noted incident `n` on `node` asking for `action`, created at `ctime`.
    #[allow(clippy::unwrap_used, clippy::expect_used, reason = "test data")]
    pub fn incident_on(
        n: u128,
        node: &Node,
        action: crate::incident::Action,
        ctime: f64,
    ) -> crate::incident::Incident {
        let text = format!(r#"{{"status":"{}"}}"#, action.as_str());
        let verdict = nodecare_protocol::NodeVerdict::merge(
            [(
                "disk".to_owned(),
                nodecare_protocol::ScriptVerdict::parse(text.as_bytes()).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original =
            nodecare_protocol::CanonicalJson::new(&serde_json::to_value(&verdict).unwrap())
                .unwrap();
        crate::incident::Incident::new(
            uuid::Uuid::from_u128(n),
            node.name.clone(),
            node.uuid.clone(),
            verdict,
            original,
            action,
            ctime,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::node;
    use super::*;
    use crate::ganeti::NodeRole;
    use proptest::prelude::*;

    fn inst(name: &str, template: &str, primary: &str, secondaries: &[&str]) -> Instance {
        Instance {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            disk_template: DiskTemplate::from_name(template),
            primary_node: primary.into(),
            secondary_nodes: secondaries.iter().map(|s| (*s).to_owned()).collect(),
            admin_state: "up".into(),
            status: "running".into(),
            memory: Some(1024),
            tags: vec![],
            disk_sizes: vec![1024],
            machine_version: nodecare_ganeti::MachineVersion::NotKvm,
        }
    }

    fn drained(mut n: Node) -> Node {
        n.drained = true;
        n.role = NodeRole::Drained;
        n
    }

    fn chain(step: EvacuationStep) -> EvacuationChain {
        match step {
            EvacuationStep::Chain(chain) => chain,
            other => panic!("expected a chain, got {other:?}"),
        }
    }

    fn wave_instances(chain: &EvacuationChain) -> Vec<Vec<String>> {
        chain
            .waves
            .iter()
            .map(|w| w.iter().map(|m| m.action.instance().to_owned()).collect())
            .collect()
    }

    fn policy(immovable: ImmovablePolicy, offline: bool) -> EvacuationPolicy {
        EvacuationPolicy {
            immovable,
            offline_after_evacuation: offline,
        }
    }

    fn failed_job(opresult: serde_json::Value, errors: &[&str]) -> crate::ganeti::Job {
        crate::ganeti::Job {
            id: 7,
            status: crate::ganeti::JobStatus::Error,
            opstatus: vec!["error".into()],
            opresult: vec![opresult],
            errors: errors.iter().map(|e| (*e).to_owned()).collect(),
            reasons: vec![],
        }
    }

    /// When room is short, the instance with the highest evacuation priority moves first,
    /// whatever its name, and what waits says its priority.
    #[test]
    fn the_highest_priority_moves_first_when_room_is_short() {
        let mut room = node("n2");
        room.memory_free = Some(1500);
        let nodes = vec![drained(node("n1")), room];
        let mut low = inst("a-batch", "diskless", "n1", &[]);
        low.tags = vec!["nodecare:priority:1".into()];
        let mut high = inst("z-database", "diskless", "n1", &[]);
        high.tags = vec!["nodecare:priority:9".into(), "nodecare:priority:x".into()];
        let plain = inst("m-web", "diskless", "n1", &[]);
        assert_eq!(
            (
                evacuation_priority(&low),
                evacuation_priority(&high),
                evacuation_priority(&plain)
            ),
            (1, 9, DEFAULT_PRIORITY)
        );
        let instances = vec![low, high, plain];
        let mut round = Round::new(&nodes, &instances, Vec::new(), Vec::new());
        let EvacuationStep::Chain(chain) = round.plan_evacuation_chain("n1", false) else {
            panic!("no chain");
        };
        assert_eq!(wave_instances(&chain), [vec!["z-database".to_owned()]]);
        assert_eq!(chain.waiting.len(), 2, "{:?}", chain.waiting);
        assert!(
            chain.waiting[0].starts_with("m-web ("),
            "{:?}",
            chain.waiting
        );
        assert!(
            chain.waiting[1].starts_with("a-batch [priority 1] ("),
            "{:?}",
            chain.waiting
        );
    }

    #[test]
    fn failed_jobs_are_read_by_ganetis_error_class() {
        use serde_json::json;
        let prereq = failed_job(
            json!([
                "OpPrereqError",
                [
                    "Cannot migrate instance i3 to its primary (n3)",
                    "wrong_state"
                ]
            ]),
            &["Cannot migrate instance i3 to its primary (n3)"],
        );
        assert_eq!(
            JobFailure::of_job(&prereq),
            JobFailure::Precondition {
                kind: "wrong_state".into(),
                message: "Cannot migrate instance i3 to its primary (n3)".into()
            }
        );
        let dependency = failed_job(
            json!([
                "OpExecError",
                ["Dependency job 5 finished with status 'error', not one of 'success' as required"]
            ]),
            &[],
        );
        assert!(matches!(
            JobFailure::of_job(&dependency),
            JobFailure::NotRun(_)
        ));
        let exec = failed_job(
            json!(["OpExecError", ["migration aborted"]]),
            &["migration aborted"],
        );
        assert_eq!(
            JobFailure::of_job(&exec),
            JobFailure::Other("migration aborted".into())
        );
        let mut canceled = failed_job(json!("Job canceled by request"), &[]);
        canceled.status = crate::ganeti::JobStatus::Canceled;
        assert_eq!(
            JobFailure::of_job(&canceled),
            JobFailure::Other("canceled".into())
        );
    }

    /// Only a genuine failure fails the incident: a move whose goal already holds is done, one
    /// whose precondition changed is planned again (bounded), a job that never ran too.
    #[test]
    fn failed_steps_are_judged_against_the_cluster_as_it_is() {
        let migrate = Move::Migrate {
            instance: "i3".into(),
            target: Some("n3".into()),
        };
        let replace = Move::ReplaceSecondary {
            instance: "d".into(),
            remote_node: "n3".into(),
            replaces: None,
        };
        let moved = vec![
            inst("i3", "drbd", "n3", &["n4"]),
            inst("d", "drbd", "n2", &["n3"]),
        ];
        let still = vec![
            inst("i3", "drbd", "n4", &["n3"]),
            inst("d", "drbd", "n2", &["n4"]),
        ];
        let wrong_state = JobFailure::Precondition {
            kind: "wrong_state".into(),
            message: "Cannot migrate instance i3 to its primary (n3)".into(),
        };
        let not_run = JobFailure::NotRun("Dependency job 5 was cancelled".into());
        let other = JobFailure::Other("migration aborted".into());
        // (step, failure, instances, replans so far) -> "done" | "replan" | "replan-free" | "failed"
        type Row<'a> = (
            Option<&'a Move>,
            &'a JobFailure,
            Option<&'a [Instance]>,
            usize,
            &'a str,
        );
        let table: [Row<'_>; 14] = [
            (Some(&migrate), &wrong_state, Some(&moved), 0, "done"),
            (
                Some(&migrate),
                &wrong_state,
                Some(&moved),
                MAX_REPLANS,
                "done",
            ),
            (Some(&migrate), &wrong_state, Some(&still), 0, "replan"),
            (
                Some(&migrate),
                &wrong_state,
                Some(&still),
                MAX_REPLANS - 1,
                "replan",
            ),
            (
                Some(&migrate),
                &wrong_state,
                Some(&still),
                MAX_REPLANS,
                "failed",
            ),
            (Some(&migrate), &wrong_state, None, 0, "replan"),
            (Some(&migrate), &wrong_state, Some(&[]), 0, "done"),
            (
                Some(&migrate),
                &not_run,
                Some(&still),
                MAX_REPLANS,
                "replan-free",
            ),
            (Some(&migrate), &not_run, Some(&moved), 0, "done"),
            (Some(&migrate), &other, Some(&moved), 0, "failed"),
            (Some(&replace), &wrong_state, Some(&moved), 0, "done"),
            (Some(&replace), &wrong_state, Some(&still), 0, "replan"),
            (None, &wrong_state, Some(&still), 0, "failed"),
            (None, &not_run, Some(&still), 0, "replan-free"),
        ];
        for (i, (step, failure, instances, replans, want)) in table.into_iter().enumerate() {
            let got = judge_failed_step(step, "n4", failure, instances, replans);
            let name = match &got {
                FailedStep::Done(_) => "done",
                FailedStep::Replan {
                    precondition: true, ..
                } => "replan",
                FailedStep::Replan { .. } => "replan-free",
                FailedStep::Failed(_) => "failed",
            };
            assert_eq!(name, want, "row {i}: {got:?}");
        }
        let FailedStep::Failed(why) = judge_failed_step(
            Some(&migrate),
            "n4",
            &wrong_state,
            Some(&still),
            MAX_REPLANS,
        ) else {
            panic!()
        };
        assert!(
            why.contains("refused 4 times") && why.contains("wrong_state"),
            "{why}"
        );
        // The message and the documents count alike: a move is planned again at most
        // MAX_REPLANS times, so the refusal that fails it is the (MAX_REPLANS + 1)th.
        assert!(
            why.contains(&format!(
                "refused {} times (planned again {MAX_REPLANS} times, at most {MAX_REPLANS})",
                MAX_REPLANS + 1
            )),
            "{why}"
        );
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
        let said = format!(
            "planned again at most {MAX_REPLANS} times per instance: refused a {}th time",
            MAX_REPLANS + 1
        );
        assert_eq!(
            readme
                .replace("\n  ", " ")
                .replace('\n', " ")
                .matches(&said)
                .count(),
            2,
            "README.md says {said:?} where it counts"
        );
    }

    #[test]
    fn immovable_policy_decides_the_end_of_an_evacuation() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let mut stopped = inst("s", "plain", "n1", &[]);
        stopped.admin_state = "down".into();
        let instances = vec![
            inst("p", "plain", "n1", &[]),
            inst("f", "file", "n1", &[]),
            stopped,
            inst("m", "diskless", "n1", &[]),
        ];
        // policy -> chain planned?, shutdown, offline, left
        type Row<'a> = (EvacuationPolicy, bool, &'a [&'a str], bool, &'a [&'a str]);
        let table: [Row<'_>; 5] = [
            (policy(ImmovablePolicy::Fail, true), false, &[], false, &[]),
            (
                policy(ImmovablePolicy::Leave, true),
                true,
                &[],
                false,
                &["f (file)", "p (plain)", "s (plain)"],
            ),
            (
                policy(ImmovablePolicy::Shutdown, true),
                true,
                &["f", "p"],
                true,
                &[],
            ),
            (
                policy(ImmovablePolicy::Shutdown, false),
                true,
                &["f", "p"],
                false,
                &[],
            ),
            (
                policy(ImmovablePolicy::Leave, false),
                true,
                &[],
                false,
                &["f (file)", "p (plain)", "s (plain)"],
            ),
        ];
        for (policy, planned, shutdown, offline, left) in table {
            let mut round = Round::new(&nodes, &instances, [], []);
            round.set_evacuation_policy(policy);
            // A held evacuation fails at once only when it could never succeed.
            assert_eq!(
                round.cannot_evacuate("n1").is_some(),
                !planned,
                "{policy:?}"
            );
            let step = round.plan_evacuation_chain("n1", false);
            if !planned {
                let EvacuationStep::Fail(why) = step else {
                    panic!("{policy:?}: {step:?}");
                };
                assert!(why.contains("immovable_instances = fail"), "{why}");
                assert!(!round.is_locked(&Lock::Instance("m".into())));
                continue;
            }
            let c = chain(step);
            assert!(c.drain && c.tag, "{policy:?}: {c:?}");
            // Only the movable instance moves.
            assert_eq!(wave_instances(&c), vec![vec!["m"]], "{policy:?}");
            assert_eq!(c.finish.shutdown, shutdown, "{policy:?}");
            assert_eq!(c.finish.offline, offline, "{policy:?}");
            assert_eq!(c.finish.left, left, "{policy:?}");
        }
    }

    #[test]
    fn offline_node_counts_as_out_of_service_and_finishes_once() {
        let mut gone = node("n1");
        gone.offline = true;
        let nodes = vec![gone, node("n2"), node("n3")];
        let none: Vec<Instance> = vec![];
        for chains in [true, false] {
            let mut round = Round::new(&nodes, &none, [], []);
            let step = if chains {
                round.plan_evacuation_chain("n1", false)
            } else {
                round.plan_evacuation("n1", false)
            };
            // Not drained again: it is done, and offlining is not asked twice.
            assert_eq!(step, EvacuationStep::Done);
            assert_eq!(round.evacuation_finish("n1"), EvacuationFinish::default());
            // The offline node counts as disrupted: never a move target.
            assert!(round.disrupted().contains("n1"));
        }
        // An online, drained, empty node is done too, and still to be offlined.
        let nodes = vec![drained(node("n1")), node("n2")];
        let round = Round::new(&nodes, &none, [], []);
        assert!(round.evacuation_finish("n1").offline);
    }

    #[test]
    fn returning_to_service_undoes_only_what_the_incident_did_once() {
        let base = ServiceFacts::default();
        let failed = ServiceJob::Failed("Node is being de-offlined but fails".into());
        let table: Vec<(ServiceFacts, ServiceStep)> = vec![
            // Not taken out of service by the incident: nothing.
            (base.clone(), ServiceStep::Done),
            (
                ServiceFacts {
                    drained: true,
                    ..base.clone()
                },
                ServiceStep::Done,
            ),
            (
                ServiceFacts {
                    offline: true,
                    drained_by_incident: true,
                    ..base.clone()
                },
                ServiceStep::Done,
            ),
            // Offlined by it: online (Ganeti clears drained with it).
            (
                ServiceFacts {
                    offline: true,
                    offlined_by_incident: true,
                    drained_by_incident: true,
                    ..base.clone()
                },
                ServiceStep::Online,
            ),
            (
                ServiceFacts {
                    offline: true,
                    offlined_by_incident: true,
                    online: Some(ServiceJob::InFlight),
                    ..base.clone()
                },
                ServiceStep::Wait,
            ),
            (
                ServiceFacts {
                    offline: true,
                    offlined_by_incident: true,
                    online: Some(failed),
                    ..base.clone()
                },
                ServiceStep::Failed("Node is being de-offlined but fails".into()),
            ),
            // Online again; drained by it: undrain, once.
            (
                ServiceFacts {
                    drained: true,
                    drained_by_incident: true,
                    ..base.clone()
                },
                ServiceStep::Undrain,
            ),
            (
                ServiceFacts {
                    drained: true,
                    drained_by_incident: true,
                    undrain: Some(ServiceJob::Succeeded),
                    ..base.clone()
                },
                ServiceStep::Done,
            ),
            (
                ServiceFacts {
                    drained: true,
                    offlined_by_incident: true,
                    online: Some(ServiceJob::Succeeded),
                    ..base.clone()
                },
                ServiceStep::Undrain,
            ),
            // Back in service.
            (
                ServiceFacts {
                    offlined_by_incident: true,
                    drained_by_incident: true,
                    online: Some(ServiceJob::Succeeded),
                    ..base
                },
                ServiceStep::Done,
            ),
        ];
        for (facts, step) in table {
            assert_eq!(return_to_service(&facts), step, "{facts:?}");
        }
    }

    #[test]
    fn chain_drains_moves_in_waves_and_tags() {
        // 5 instances, 3 usable targets (one move per target node at a time): two waves.
        let nodes = vec![node("n1"), node("n2"), node("n3"), node("n4")];
        let instances: Vec<Instance> = (1..=5)
            .map(|i| inst(&format!("i{i}"), "diskless", "n1", &[]))
            .collect();
        let mut round = Round::new(&nodes, &instances, [], []);
        let c = chain(round.plan_evacuation_chain("n1", false));
        assert!(c.drain && c.tag, "{c:?}");
        assert!(c.waiting.is_empty());
        assert_eq!(
            wave_instances(&c),
            vec![vec!["i1", "i2", "i3"], vec!["i4", "i5"]]
        );
        // Memory is reserved across waves: 4096 MiB free per target, 1024 per instance.
        let mut per_target: BTreeMap<String, usize> = BTreeMap::new();
        for m in c.waves.iter().flatten() {
            if let Move::Migrate {
                target: Some(t), ..
            } = &m.action
            {
                *per_target.entry(t.clone()).or_default() += 1;
            }
        }
        assert_eq!(per_target.values().sum::<usize>(), 5);
        // The chain's locks stay taken for the rest of the round.
        assert!(round.is_locked(&Lock::Instance("i5".into())));
        // And n1 is disrupted now: never a target of a later evacuation this round.
        assert!(round.disrupted().contains("n1"));
    }

    #[test]
    fn chain_without_room_for_everything_leaves_the_rest_and_the_tag() {
        let mut small = node("n2");
        small.memory_free = Some(2048);
        let nodes = vec![drained(node("n1")), small];
        let mut instances: Vec<Instance> = (1..=3)
            .map(|i| inst(&format!("i{i}"), "diskless", "n1", &[]))
            .collect();
        let mut round = Round::new(&nodes, &instances, [], []);
        let c = chain(round.plan_evacuation_chain("n1", false));
        // n2 takes two of them, one after the other; the third waits, and so does the tag.
        assert_eq!(wave_instances(&c), vec![vec!["i1"], vec!["i2"]]);
        assert!(!c.tag);
        assert_eq!(c.waiting.len(), 1);
        assert!(c.waiting[0].starts_with("i3 "), "{:?}", c.waiting);
        // An instance no node can ever take fails the evacuation, and nothing stays locked.
        instances[2].memory = Some(8192);
        let mut round = Round::new(&nodes, &instances, [], []);
        let step = round.plan_evacuation_chain("n1", false);
        assert!(matches!(step, EvacuationStep::Fail(_)), "{step:?}");
        assert!(!round.is_locked(&Lock::Instance("i1".into())));
        assert!(!round.is_locked(&Lock::Node("n2".into())));
    }

    #[test]
    fn chain_waits_for_busy_targets_and_drbd_keeps_the_tag_for_later() {
        let nodes = vec![drained(node("n1")), node("n2"), node("n3")];
        let instances = vec![
            inst("d1", "drbd", "n1", &["n2"]),
            inst("i1", "diskless", "n1", &[]),
        ];
        // An instance with a job in flight waits for a later round.
        let mut round = Round::new(&nodes, &instances, [Lock::Instance("i1".into())], []);
        let c = chain(round.plan_evacuation_chain("n1", false));
        assert!(!c.drain && !c.tag);
        assert_eq!(wave_instances(&c), vec![vec!["d1"]]);
        assert_eq!(c.waiting.len(), 1, "{c:?}");
        // Everything movable, but a DRBD primary leaves n1 as its secondary: no tag yet.
        let mut round = Round::new(&nodes, &instances, [], []);
        let c = chain(round.plan_evacuation_chain("n1", false));
        assert!(c.waiting.is_empty() && !c.tag, "{c:?}");
        // An empty drained node is done; nothing planned at all waits.
        let empty: Vec<Instance> = vec![];
        let mut round = Round::new(&nodes, &empty, [], []);
        assert_eq!(
            round.plan_evacuation_chain("n1", false),
            EvacuationStep::Done
        );
        let mut round = Round::new(
            &nodes,
            &instances,
            [Lock::Instance("i1".into()), Lock::Instance("d1".into())],
            [],
        );
        assert!(matches!(
            round.plan_evacuation_chain("n1", false),
            EvacuationStep::Wait(_)
        ));
    }

    #[test]
    fn undrained_node_is_drained_first() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let instances = vec![inst("i1", "diskless", "n1", &[])];
        let mut round = Round::new(&nodes, &instances, [], []);
        assert_eq!(round.plan_evacuation("n1", false), EvacuationStep::Drain);
        assert!(round.disrupted().contains("n1"));
    }

    #[test]
    fn plain_instance_fails_the_evacuation_explicitly() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let instances = vec![
            inst("i1", "plain", "n1", &[]),
            inst("i2", "diskless", "n1", &[]),
        ];
        let mut round = Round::new(&nodes, &instances, [], []);
        let EvacuationStep::Fail(reason) = round.plan_evacuation("n1", false) else {
            panic!("did not fail")
        };
        assert!(
            reason.contains("i1") && reason.contains("plain"),
            "{reason}"
        );
    }

    #[test]
    fn all_non_conflicting_moves_are_planned_in_one_round() {
        let nodes = vec![
            drained(node("n1")),
            node("n2"),
            node("n3"),
            node("n4"),
            node("n5"),
        ];
        let instances = vec![
            inst("a", "drbd", "n1", &["n2"]),
            inst("b", "drbd", "n1", &["n2"]), // same secondary as a: next round
            inst("c", "sharedfile", "n1", &[]),
            inst("d", "drbd", "n5", &["n1"]),
        ];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!("no moves")
        };
        let names: Vec<&str> = moves.iter().map(|m| m.action.instance()).collect();
        assert_eq!(names, vec!["a", "c", "d"]);
        assert_eq!(
            moves[0].action,
            Move::Migrate {
                instance: "a".into(),
                target: None
            }
        );
        // c goes to a node not locked by a (n2) and d's new secondary avoids n5 (primary) and
        // nodes already taken.
        let Move::Migrate {
            target: Some(target),
            ..
        } = &moves[1].action
        else {
            panic!()
        };
        assert_ne!(target, "n2");
        let Move::ReplaceSecondary { remote_node, .. } = &moves[2].action else {
            panic!()
        };
        assert!(remote_node != "n5" && remote_node != "n2" && remote_node != target);
    }

    #[test]
    fn failover_mode_and_stopped_instances_use_failover() {
        let nodes = vec![drained(node("n1")), node("n2"), node("n3")];
        let mut stopped = inst("s", "diskless", "n1", &[]);
        stopped.admin_state = "down".into();
        let instances = vec![inst("a", "drbd", "n1", &["n2"]), stopped];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!()
        };
        assert!(matches!(moves[0].action, Move::Migrate { .. }));
        assert!(matches!(moves[1].action, Move::Failover { .. }));
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", true) else {
            panic!()
        };
        assert!(
            moves
                .iter()
                .all(|m| matches!(m.action, Move::Failover { .. }))
        );
    }

    #[test]
    fn in_flight_locks_make_moves_wait() {
        let nodes = vec![drained(node("n1")), node("n2"), node("n3")];
        let instances = vec![inst("a", "drbd", "n1", &["n2"])];
        let mut round = Round::new(
            &nodes,
            &instances,
            [Lock::Node("n2".into())],
            ["n1".to_owned()],
        );
        assert!(matches!(
            round.plan_evacuation("n1", false),
            EvacuationStep::Wait(_)
        ));
    }

    #[test]
    fn memory_is_reserved_across_moves() {
        let mut small = node("n2");
        small.memory_free = Some(1500);
        let nodes = vec![drained(node("n1")), small];
        let instances = vec![
            inst("a", "diskless", "n1", &[]),
            inst("b", "diskless", "n1", &[]),
        ];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!()
        };
        assert_eq!(moves.len(), 1);
    }

    #[test]
    fn instance_too_big_for_any_node_fails() {
        let nodes = vec![drained(node("n1")), node("n2")];
        let mut big = inst("big", "diskless", "n1", &[]);
        big.memory = Some(1 << 20);
        let mut round = Round::new(&nodes, std::slice::from_ref(&big), [], []);
        assert!(matches!(
            round.plan_evacuation("n1", false),
            EvacuationStep::Fail(_)
        ));
    }

    #[test]
    fn empty_drained_node_is_done() {
        let nodes = vec![drained(node("n1")), node("n2")];
        let mut round = Round::new(&nodes, &[], [], []);
        assert_eq!(round.plan_evacuation("n1", false), EvacuationStep::Done);
        assert!(matches!(
            round.plan_evacuation("gone", false),
            EvacuationStep::Fail(_)
        ));
    }

    /// Two failing DRBD peers: the evacuation of the primary's node does not wait for its
    /// secondary's node, which itself waits for it; it gives the instance a new secondary
    /// first (a node with the disk and the memory), then moves it there, in the next wave of
    /// the chain or the next round. A peer with a live repair only is still waited for.
    /// A node another tool holds (here granted through the admission API) is acted on by no
    /// move of an evacuation: the secondary of a DRBD instance whose primary is granted is not
    /// replaced (the new secondary syncs from the primary), an instance whose secondary is
    /// granted does not move there, and nothing goes onto it; they wait, naming the holder,
    /// while the rest of the node moves.
    #[test]
    fn no_move_involves_a_node_another_tool_holds() {
        let nodes = vec![
            drained(node("n1")),
            node("n2"),
            node("n3"),
            node("n4"),
            node("n5"),
        ];
        let instances = vec![
            inst("d", "drbd", "n2", &["n1"]),
            inst("e", "drbd", "n1", &["n2"]),
            inst("l", "diskless", "n1", &[]),
        ];
        let granted = || {
            Round::new(&nodes, &instances, [], ["n1".to_owned(), "n2".to_owned()])
                .with_active_evacuations(["n1".to_owned()])
                .with_other_holders([("n2".to_owned(), "grant g1 of kured@n2".to_owned())])
        };
        let c = chain(granted().plan_evacuation_chain("n1", false));
        let moved: Vec<&str> = c
            .waves
            .iter()
            .flatten()
            .map(|m| m.action.instance())
            .collect();
        assert_eq!(moved, ["l"], "{c:?}");
        for planned in c.waves.iter().flatten() {
            assert!(!planned.description.contains("n2"), "{c:?}");
        }
        assert!(!c.tag, "{c:?}");
        let waiting = c.waiting.join("; ");
        assert!(
            waiting.contains("d (") && waiting.contains("e ("),
            "{waiting}"
        );
        assert!(waiting.contains("grant g1 of kured@n2"), "{waiting}");
        let EvacuationStep::Moves(moves) = granted().plan_evacuation("n1", false) else {
            panic!("no moves")
        };
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!(moves[0].action.instance(), "l");
        // Released, the secondary is replaced as before.
        let released = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_evacuations(["n1".to_owned()])
            .plan_evacuation_chain("n1", false);
        let moved: BTreeSet<String> = chain(released)
            .waves
            .iter()
            .flatten()
            .map(|m| m.action.instance().to_owned())
            .collect();
        assert!(moved.contains("d") && moved.contains("e"), "{moved:?}");
    }

    #[test]
    fn a_secondary_being_evacuated_is_replaced_before_the_move() {
        let nodes = vec![
            node("n1"),
            drained(node("n2")),
            node("n3"),
            node("n4"),
            node("n5"),
        ];
        let instances = vec![
            inst("a", "drbd", "n2", &["n3"]),
            inst("c", "drbd", "n3", &["n2"]),
        ];
        let evacuating = || {
            Round::new(&nodes, &instances, [], ["n2".to_owned()])
                .with_active_evacuations(["n2".to_owned(), "n3".to_owned()])
        };
        // One step a round: the new secondary (never n2, n3, nor c's primary's node).
        let EvacuationStep::Moves(moves) = evacuating().plan_evacuation("n2", false) else {
            panic!("no moves")
        };
        let Move::ReplaceSecondary {
            instance,
            remote_node,
            replaces,
        } = &moves[0].action
        else {
            panic!("{moves:?}")
        };
        assert_eq!((instance.as_str(), replaces.as_deref()), ("a", Some("n3")));
        assert!(!["n2", "n3"].contains(&remote_node.as_str()), "{moves:?}");
        assert!(
            matches!(&moves[1].action, Move::ReplaceSecondary { instance, replaces: None, .. } if instance == "c"),
            "{moves:?}"
        );
        // The goal of the replacement is the instance off the failing peer.
        let mut after = instances.clone();
        assert!(!move_goal_holds(&moves[0].action, "n2", &after));
        after[0].secondary_nodes = vec![remote_node.clone()];
        assert!(move_goal_holds(&moves[0].action, "n2", &after));
        // As a chain: the replacement, then the migration to the new secondary.
        let c = chain(evacuating().plan_evacuation_chain("n2", true));
        assert_eq!(c.waves.len(), 2, "{c:?}");
        let Move::ReplaceSecondary { remote_node, .. } = &c.waves[0][0].action else {
            panic!("{c:?}")
        };
        assert_eq!(
            c.waves[1][0].action,
            Move::Failover {
                instance: "a".into(),
                target: None
            }
        );
        assert!(c.waves[1][0].description.contains(remote_node.as_str()));
        assert!(c.waiting.is_empty() && !c.tag, "{c:?}");
        // The memory for `a` is reserved once on its new secondary: with room for one
        // instance there, and nowhere else, the chain still plans it.
        let mut tight = nodes.clone();
        for n in &mut tight {
            if n.name != "n4" {
                n.memory_free = Some(0);
            }
        }
        tight[3].memory_free = Some(1024);
        let mut round = Round::new(&tight, &instances, [], ["n2".to_owned()])
            .with_active_evacuations(["n2".to_owned(), "n3".to_owned()]);
        let c = chain(round.plan_evacuation_chain("n2", false));
        let moved: Vec<&Move> = c.waves.iter().flatten().map(|m| &m.action).collect();
        assert!(
            moved.contains(&&Move::Migrate {
                instance: "a".into(),
                target: None
            }),
            "{c:?}"
        );
        // Nowhere with the memory: the evacuation cannot succeed, and says why.
        tight[3].memory_free = Some(0);
        let mut round = Round::new(&tight, &instances, [], ["n2".to_owned()])
            .with_active_evacuations(["n2".to_owned(), "n3".to_owned()]);
        let EvacuationStep::Fail(why) = round.plan_evacuation("n2", false) else {
            panic!("did not fail")
        };
        assert!(why.contains("n3 is being evacuated too"), "{why}");
        // A peer with a live repair is waited for: it stays in service.
        let mut round = Round::new(&nodes, &instances, [], ["n2".to_owned()])
            .with_active_incidents(["n2".to_owned(), "n3".to_owned()]);
        let c = chain(round.plan_evacuation_chain("n2", false));
        assert!(
            c.waiting
                .iter()
                .any(|w| w.contains("its secondary n3 has an active incident")),
            "{c:?}"
        );
    }

    /// Issue 11, defect 2: a node with an active incident never receives instances.
    #[test]
    fn nodes_with_active_incidents_are_never_targets() {
        let mut big = node("n2");
        big.memory_free = Some(60_000);
        let nodes = vec![drained(node("n1")), big, node("n3"), node("n4")];
        // Shared storage: n2 has the most memory but an active incident.
        let instances = vec![inst("s", "sharedfile", "n1", &[])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_incidents(["n1".to_owned(), "n2".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!("no moves")
        };
        assert!(
            matches!(&moves[0].action, Move::Migrate { target: Some(t), .. } if t != "n2"),
            "{moves:?}"
        );
        // DRBD: migrating onto a secondary with an active incident waits, visibly.
        let instances = vec![inst("d", "drbd", "n1", &["n2"])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_incidents(["n2".to_owned()]);
        let EvacuationStep::Wait(reason) = round.plan_evacuation("n1", false) else {
            panic!("moved onto a node with an active incident")
        };
        assert!(
            reason.contains("n2") && reason.contains("incident"),
            "{reason}"
        );
        // A new secondary is never placed on a node with an active incident.
        let instances = vec![inst("d", "drbd", "n4", &["n1"])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_incidents(["n2".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!("no moves")
        };
        assert_eq!(
            moves[0].action,
            Move::ReplaceSecondary {
                instance: "d".into(),
                remote_node: "n3".into(),
                replaces: None
            }
        );
        // Only nodes with incidents left: wait, never fail.
        let nodes = vec![drained(node("n1")), node("n2"), node("n3")];
        let instances = vec![inst("s", "sharedfile", "n1", &[])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_incidents(["n2".to_owned(), "n3".to_owned()]);
        assert!(matches!(
            round.plan_evacuation("n1", false),
            EvacuationStep::Wait(_)
        ));
        // ... unless they are being evacuated too: their evacuations take them out of service,
        // so waiting for them would wait for good (two failing peers waiting on each other, the
        // other one for this one's failure domain). The evacuation fails, naming them.
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_incidents(["n2".to_owned()])
            .with_active_evacuations(["n1".to_owned(), "n3".to_owned()]);
        let EvacuationStep::Wait(why) = round.plan_evacuation("n1", false) else {
            panic!("did not wait for a live repair's node")
        };
        assert!(why.contains("held for now could take it: n2"), "{why}");
        let hand_drained = vec![drained(node("n1")), drained(node("n2")), node("n3")];
        let mut round = Round::new(&hand_drained, &instances, [], ["n1".to_owned()])
            .with_active_evacuations(["n1".to_owned(), "n3".to_owned()]);
        let EvacuationStep::Fail(why) = round.plan_evacuation("n1", false) else {
            panic!("waited for a node being evacuated")
        };
        assert!(
            why.contains("being evacuated too, never a target: n3"),
            "{why}"
        );
        // The same for a new secondary: only a node being evacuated has the disk for it.
        let instances = vec![inst("d", "drbd", "n2", &["n1"])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()])
            .with_active_evacuations(["n1".to_owned(), "n3".to_owned()]);
        let EvacuationStep::Fail(why) = round.plan_evacuation("n1", false) else {
            panic!("waited for a node being evacuated")
        };
        assert!(why.contains("never a target: n3"), "{why}");
    }

    /// Issue 11, defect 3: unknown free memory means "does not fit" (the move waits, visibly).
    #[test]
    fn unknown_free_memory_does_not_fit() {
        let mut unknown = node("n2");
        unknown.memory_free = None;
        let mut small = node("n3");
        small.memory_free = Some(100);
        let nodes = vec![drained(node("n1")), unknown, small];
        let instances = vec![inst("s", "diskless", "n1", &[])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Wait(reason) = round.plan_evacuation("n1", false) else {
            panic!("moved onto a node of unknown free memory")
        };
        assert!(
            reason.contains("n2") && reason.contains("unknown"),
            "{reason}"
        );
        // DRBD: the secondary's free memory is unknown.
        let mut unknown = node("n2");
        unknown.memory_free = None;
        let nodes = vec![drained(node("n1")), unknown, node("n3")];
        let instances = vec![inst("d", "drbd", "n1", &["n2"])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        assert!(matches!(
            round.plan_evacuation("n1", false),
            EvacuationStep::Wait(_)
        ));
        // An instance of unknown size fits nowhere either.
        let nodes = vec![drained(node("n1")), node("n2")];
        let mut sized = inst("s", "diskless", "n1", &[]);
        sized.memory = None;
        let mut round = Round::new(&nodes, std::slice::from_ref(&sized), [], []);
        assert!(matches!(
            round.plan_evacuation("n1", false),
            EvacuationStep::Wait(_)
        ));
    }

    /// Issue 11, defect 3: a new secondary needs the disk space (disks plus DRBD metadata).
    #[test]
    fn new_secondary_needs_disk_space() {
        let mut full = node("n2");
        full.disk_free = Some(1024); // 1024 MiB of disk + 128 MiB of metadata do not fit
        let mut unknown = node("n3");
        unknown.disk_free = None;
        let mut busy = node("n4"); // most secondaries already: chosen last by load
        busy.secondary_instances = vec!["x".into(), "y".into()];
        let nodes = vec![drained(node("n1")), full, unknown, busy, node("n5")];
        let instances = vec![inst("d", "drbd", "n5", &["n1"])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!("no moves")
        };
        assert_eq!(
            moves[0].action,
            Move::ReplaceSecondary {
                instance: "d".into(),
                remote_node: "n4".into(),
                replaces: None
            }
        );
        // Two secondaries, room for one: the second waits for the next round.
        let mut tight = node("n4");
        tight.disk_free = Some(2000);
        let nodes = vec![drained(node("n1")), tight, node("n5")];
        let instances = vec![
            inst("d", "drbd", "n5", &["n1"]),
            inst("e", "drbd", "n5", &["n1"]),
        ];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!("no moves")
        };
        assert_eq!(moves.len(), 1, "{moves:?}");
        // No node has the space: the evacuation fails, naming the instance.
        let mut full = node("n2");
        full.disk_free = Some(10);
        let nodes = vec![drained(node("n1")), full, node("n5")];
        let instances = vec![inst("d", "drbd", "n5", &["n1"])];
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()]);
        let EvacuationStep::Fail(reason) = round.plan_evacuation("n1", false) else {
            panic!("placed a secondary on a full node")
        };
        assert!(reason.contains("disk"), "{reason}");
    }

    fn cluster() -> impl Strategy<Value = (Vec<Node>, Vec<Instance>)> {
        let templates = prop_oneof![Just("drbd"), Just("diskless"), Just("sharedfile")];
        (3usize..8).prop_flat_map(move |n_nodes| {
            let instance = (templates.clone(), 0..n_nodes, 0..n_nodes, 256u64..3000);
            proptest::collection::vec(instance, 0..30).prop_map(move |specs| {
                let mut nodes: Vec<Node> = (0..n_nodes).map(|i| node(&format!("n{i}"))).collect();
                nodes[0] = drained(nodes[0].clone());
                let instances = specs
                    .into_iter()
                    .enumerate()
                    .map(|(k, (template, p, s, mem))| {
                        let s = if s == p { (s + 1) % n_nodes } else { s };
                        let secondary = format!("n{s}");
                        let snodes: Vec<&str> = if template == "drbd" {
                            vec![secondary.as_str()]
                        } else {
                            vec![]
                        };
                        let mut i = inst(&format!("i{k}"), template, &format!("n{p}"), &snodes);
                        i.memory = Some(mem);
                        i
                    })
                    .collect();
                (nodes, instances)
            })
        })
    }

    proptest! {
        /// Planned moves never share a lock with each other or with jobs in flight, never
        /// target the evacuating node, and never overcommit a node's memory.
        #[test]
        fn planned_moves_never_conflict((nodes, instances) in cluster(), busy in 0usize..8, sick in 1usize..8) {
            let in_flight = vec![Lock::Node(format!("n{busy}"))];
            let sick = format!("n{sick}");
            let mut round = Round::new(&nodes, &instances, in_flight.clone(), ["n0".to_owned()])
                .with_active_incidents([sick.clone()]);
            if let EvacuationStep::Moves(moves) = round.plan_evacuation("n0", false) {
                let mut seen: BTreeSet<Lock> = in_flight.into_iter().collect();
                let mut memory: BTreeMap<String, u64> = BTreeMap::new();
                for planned in &moves {
                    for lock in &planned.locks {
                        prop_assert!(seen.insert(lock.clone()), "conflict on {:?}", lock);
                        prop_assert_ne!(lock, &Lock::Node("n0".into()));
                    }
                    let instance = instances.iter().find(|i| i.name == planned.action.instance()).unwrap();
                    let target = match &planned.action {
                        Move::Migrate { target, .. } | Move::Failover { target, .. } => target.clone().unwrap_or_else(|| instance.secondary_nodes[0].clone()),
                        Move::ReplaceSecondary { remote_node, .. } => remote_node.clone(),
                    };
                    prop_assert_ne!(&target, &sick, "moved onto a node with an incident");
                    match &planned.action {
                        Move::Migrate { target, .. } | Move::Failover { target, .. } => {
                            prop_assert_eq!(&instance.primary_node, "n0");
                            let to = target.clone().unwrap_or_else(|| instance.secondary_nodes[0].clone());
                            prop_assert_ne!(&to, "n0");
                            *memory.entry(to).or_insert(0) += instance.memory.unwrap_or(0);
                        }
                        Move::ReplaceSecondary { remote_node, .. } => {
                            prop_assert_ne!(remote_node, "n0");
                            prop_assert_ne!(remote_node, &instance.primary_node);
                        }
                    }
                }
                for (name, used) in memory {
                    let free = nodes.iter().find(|n| n.name == name).unwrap().memory_free.unwrap();
                    prop_assert!(used <= free, "{} overcommitted: {} > {}", name, used, free);
                }
            }
        }
    }
}
