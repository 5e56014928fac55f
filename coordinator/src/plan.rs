//! Evacuation planning: which jobs an evacuating node gets this round. Pure, no IO.
//!
//! maintd moved one instance per node per round (300 s apart). Here every move that conflicts
//! with nothing already in flight or planned this round is planned at once. Two jobs conflict
//! when they touch the same instance or the same node, except the evacuating node itself, which
//! its incident owns exclusively (it is drained). Memory on target nodes is reserved as moves
//! are planned, so one round never overcommits a node.
//!
//! The safety budget is checked before a node is drained: at most `max_disrupted_nodes` nodes
//! drained or evacuating at once, and never fewer than `min_healthy_nodes` healthy nodes left.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ganeti::{DiskTemplate, Instance, Node};

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

/// Safety limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// Most nodes drained or evacuating at once, cluster-wide.
    pub max_disrupted_nodes: usize,
    /// Fewest healthy nodes (online, undrained, vm-capable) an evacuation may leave.
    pub min_healthy_nodes: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_disrupted_nodes: 1,
            min_healthy_nodes: 2,
        }
    }
}

/// What one evacuating incident does this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvacuationStep {
    /// Drain the node (first step).
    Drain,
    /// Not allowed to start now; the reason is shown as `blocked_by`.
    Blocked(String),
    /// Submit these moves (never empty).
    Moves(Vec<PlannedMove>),
    /// Work remains but nothing can be submitted now (targets busy).
    Wait(String),
    /// The evacuation cannot succeed.
    Fail(String),
    /// The node holds no instance any more.
    Done,
}

/// The cluster as seen this round, with what is already taken.
#[derive(Debug, Clone)]
pub struct Round<'a> {
    nodes: BTreeMap<&'a str, &'a Node>,
    instances: Vec<&'a Instance>,
    locks: BTreeSet<Lock>,
    reserved_memory: BTreeMap<String, u64>,
    extra_secondaries: BTreeMap<String, usize>,
    disrupted: BTreeSet<String>,
    budget: Budget,
}

impl<'a> Round<'a> {
    /// Starts a round. `in_flight` are the locks of jobs still running; `evacuating` are nodes
    /// whose evacuation has started (they count as disrupted even before Ganeti shows the
    /// drain).
    pub fn new(
        nodes: &'a [Node],
        instances: &'a [Instance],
        in_flight: impl IntoIterator<Item = Lock>,
        evacuating: impl IntoIterator<Item = String>,
        budget: Budget,
    ) -> Self {
        let mut disrupted: BTreeSet<String> = nodes
            .iter()
            .filter(|node| node.drained)
            .map(|node| node.name.clone())
            .collect();
        disrupted.extend(evacuating);
        let mut sorted: Vec<&Instance> = instances.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        Self {
            nodes: nodes
                .iter()
                .map(|node| (node.name.as_str(), node))
                .collect(),
            instances: sorted,
            locks: in_flight.into_iter().collect(),
            reserved_memory: BTreeMap::new(),
            extra_secondaries: BTreeMap::new(),
            disrupted,
            budget,
        }
    }

    /// Nodes currently counted as disrupted.
    pub fn disrupted(&self) -> &BTreeSet<String> {
        &self.disrupted
    }

    /// Whether a lock is taken.
    pub fn is_locked(&self, lock: &Lock) -> bool {
        self.locks.contains(lock)
    }

    /// Plans the next step of evacuating `node` (`failover` for evacuate-failover).
    ///
    /// `drain_done` says whether the incident's drain job already succeeded (or the node was
    /// drained before); a node not yet drained gets [`EvacuationStep::Drain`] if the budget
    /// allows. Planned moves take their locks and memory immediately.
    pub fn plan_evacuation(&mut self, node: &str, failover: bool) -> EvacuationStep {
        let Some(this) = self.nodes.get(node).copied() else {
            return EvacuationStep::Fail(format!("node {node} is no longer in the cluster"));
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
        // Instances that cannot move fail the incident before anything is touched.
        if let Some(stuck) = primaries.iter().find(|i| i.disk_template.is_node_local()) {
            return EvacuationStep::Fail(format!(
                "instance {} has disk template {} and cannot be relocated off {node}",
                stuck.name,
                stuck.disk_template.as_str()
            ));
        }
        if !this.drained {
            if let Some(reason) = self.budget_refusal(this) {
                return EvacuationStep::Blocked(reason);
            }
            self.disrupted.insert(node.to_owned());
            return EvacuationStep::Drain;
        }
        if primaries.is_empty() && secondaries.is_empty() {
            return EvacuationStep::Done;
        }
        let mut moves = Vec::new();
        let mut waiting = Vec::new();
        for instance in primaries {
            match self.plan_primary(node, instance, failover) {
                Ok(Some(planned)) => moves.push(planned),
                Ok(None) => waiting.push(instance.name.clone()),
                Err(reason) => return EvacuationStep::Fail(reason),
            }
        }
        for instance in secondaries {
            match self.plan_secondary(node, instance) {
                Ok(Some(planned)) => moves.push(planned),
                Ok(None) => waiting.push(instance.name.clone()),
                Err(reason) => return EvacuationStep::Fail(reason),
            }
        }
        if moves.is_empty() {
            EvacuationStep::Wait(format!(
                "waiting for busy nodes or instances to move {}",
                waiting.join(", ")
            ))
        } else {
            EvacuationStep::Moves(moves)
        }
    }

    fn budget_refusal(&self, node: &Node) -> Option<String> {
        let others: Vec<&str> = self
            .disrupted
            .iter()
            .filter(|name| name.as_str() != node.name)
            .map(String::as_str)
            .collect();
        if others.len() >= self.budget.max_disrupted_nodes {
            return Some(format!(
                "safety budget: {} node(s) already drained or evacuating ({}), max_disrupted_nodes = {}",
                others.len(),
                others.join(", "),
                self.budget.max_disrupted_nodes
            ));
        }
        let healthy = self.nodes.values().filter(|n| n.is_healthy()).count();
        let after = healthy - usize::from(node.is_healthy());
        if after < self.budget.min_healthy_nodes {
            return Some(format!(
                "safety budget: evacuating {} would leave {after} healthy node(s), min_healthy_nodes = {}",
                node.name, self.budget.min_healthy_nodes
            ));
        }
        None
    }

    fn free_memory(&self, node: &Node) -> Option<u64> {
        let reserved = self.reserved_memory.get(&node.name).copied().unwrap_or(0);
        node.memory_free.map(|free| free.saturating_sub(reserved))
    }

    fn fits(&self, node: &Node, instance: &Instance) -> bool {
        match (self.free_memory(node), instance.memory) {
            (Some(free), Some(needed)) => free >= needed,
            _ => true,
        }
    }

    fn take(&mut self, locks: &[Lock], memory_on: Option<(&str, u64)>) {
        self.locks.extend(locks.iter().cloned());
        if let Some((node, memory)) = memory_on {
            *self.reserved_memory.entry(node.to_owned()).or_insert(0) += memory;
        }
    }

    /// A node that may receive instances: healthy and not disrupted.
    fn usable(&self, node: &Node) -> bool {
        node.is_healthy() && !self.disrupted.contains(&node.name)
    }

    fn plan_primary(
        &mut self,
        source: &str,
        instance: &'a Instance,
        failover: bool,
    ) -> Result<Option<PlannedMove>, String> {
        let instance_lock = Lock::Instance(instance.name.clone());
        if self.is_locked(&instance_lock) {
            return Ok(None);
        }
        // A stopped instance cannot be live-migrated; failover only moves its configuration.
        let use_failover = failover || instance.admin_state != "up";
        if instance.disk_template.is_internally_mirrored() {
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
            if !self.usable(secondary) {
                // Drained by another evacuation, which will replace it: wait.
                return Ok(None);
            }
            if !self.fits_ignoring_reservations(secondary, instance) {
                return Err(format!(
                    "secondary {secondary_name} lacks the memory to take over instance {}",
                    instance.name
                ));
            }
            let node_lock = Lock::Node(secondary_name.clone());
            if self.is_locked(&node_lock) || !self.fits(secondary, instance) {
                return Ok(None);
            }
            let locks = vec![instance_lock, node_lock];
            self.take(
                &locks,
                instance.memory.map(|m| (secondary_name.as_str(), m)),
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
            return Ok(Some(PlannedMove {
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
        let candidates: Vec<&Node> = self
            .nodes
            .values()
            .copied()
            .filter(|n| n.name != source && n.group == group && self.usable(n))
            .collect();
        if !candidates
            .iter()
            .any(|n| self.fits_ignoring_reservations(n, instance))
        {
            return Err(format!(
                "no node in the group of {source} can take instance {} ({} MiB)",
                instance.name,
                instance
                    .memory
                    .map_or_else(|| "?".to_owned(), |m| m.to_string())
            ));
        }
        let best = candidates
            .iter()
            .copied()
            .filter(|n| !self.is_locked(&Lock::Node(n.name.clone())) && self.fits(n, instance))
            .max_by(|a, b| {
                self.free_memory(a)
                    .unwrap_or(0)
                    .cmp(&self.free_memory(b).unwrap_or(0))
                    .then_with(|| b.name.cmp(&a.name))
            });
        let Some(target) = best else {
            return Ok(None);
        };
        let target_name = target.name.clone();
        let locks = vec![instance_lock, Lock::Node(target_name.clone())];
        self.take(&locks, instance.memory.map(|m| (target_name.as_str(), m)));
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
        Ok(Some(PlannedMove {
            action,
            locks,
            description,
        }))
    }

    fn fits_ignoring_reservations(&self, node: &Node, instance: &Instance) -> bool {
        match (node.memory_free, instance.memory) {
            (Some(free), Some(needed)) => free >= needed,
            _ => true,
        }
    }

    fn plan_secondary(
        &mut self,
        source: &str,
        instance: &'a Instance,
    ) -> Result<Option<PlannedMove>, String> {
        if !matches!(instance.disk_template, DiskTemplate::Drbd) {
            return Err(format!(
                "instance {} lists {source} as secondary but is not DRBD ({})",
                instance.name,
                instance.disk_template.as_str()
            ));
        }
        let instance_lock = Lock::Instance(instance.name.clone());
        let primary_lock = Lock::Node(instance.primary_node.clone());
        if self.is_locked(&instance_lock) || self.is_locked(&primary_lock) {
            return Ok(None);
        }
        let group = self
            .nodes
            .get(instance.primary_node.as_str())
            .map(|n| n.group.clone())
            .unwrap_or_default();
        let candidates: Vec<&Node> = self
            .nodes
            .values()
            .copied()
            .filter(|n| {
                n.name != source
                    && n.name != instance.primary_node
                    && n.group == group
                    && self.usable(n)
            })
            .collect();
        if candidates.is_empty() {
            return Err(format!(
                "no node can take the secondary of instance {} (primary {})",
                instance.name, instance.primary_node
            ));
        }
        let load = |n: &Node| {
            n.secondary_instances.len() + self.extra_secondaries.get(&n.name).copied().unwrap_or(0)
        };
        let best = candidates
            .iter()
            .copied()
            .filter(|n| !self.is_locked(&Lock::Node(n.name.clone())))
            .min_by(|a, b| load(a).cmp(&load(b)).then_with(|| a.name.cmp(&b.name)));
        let Some(target) = best else {
            return Ok(None);
        };
        let remote = target.name.clone();
        let locks = vec![instance_lock, primary_lock, Lock::Node(remote.clone())];
        self.take(&locks, None);
        *self.extra_secondaries.entry(remote.clone()).or_insert(0) += 1;
        let action = Move::ReplaceSecondary {
            instance: instance.name.clone(),
            remote_node: remote.clone(),
        };
        let description = format!(
            "replace secondary of {} (primary {}) {source} -> {remote}",
            instance.name, instance.primary_node
        );
        Ok(Some(PlannedMove {
            action,
            locks,
            description,
        }))
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use crate::ganeti::{Node, NodeRole};

    /// A healthy regular node with 4 GiB free.
    pub(crate) fn node(name: &str) -> Node {
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
        }
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
        }
    }

    fn drained(mut n: Node) -> Node {
        n.drained = true;
        n.role = NodeRole::Drained;
        n
    }

    #[test]
    fn undrained_node_is_drained_first() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let instances = vec![inst("i1", "diskless", "n1", &[])];
        let mut round = Round::new(&nodes, &instances, [], [], Budget::default());
        assert_eq!(round.plan_evacuation("n1", false), EvacuationStep::Drain);
        // n1 now counts against the budget: a second evacuation is blocked.
        assert!(matches!(
            round.plan_evacuation("n2", false),
            EvacuationStep::Blocked(_)
        ));
    }

    #[test]
    fn budget_blocks_when_too_few_healthy_nodes_remain() {
        let nodes = vec![node("n1"), node("n2")];
        let mut round = Round::new(&nodes, &[], [], [], Budget::default());
        let EvacuationStep::Blocked(reason) = round.plan_evacuation("n1", false) else {
            panic!("not blocked")
        };
        assert!(reason.contains("min_healthy_nodes"), "{reason}");
    }

    #[test]
    fn plain_instance_fails_the_evacuation_explicitly() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let instances = vec![
            inst("i1", "plain", "n1", &[]),
            inst("i2", "diskless", "n1", &[]),
        ];
        let mut round = Round::new(&nodes, &instances, [], [], Budget::default());
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
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()], Budget::default());
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
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()], Budget::default());
        let EvacuationStep::Moves(moves) = round.plan_evacuation("n1", false) else {
            panic!()
        };
        assert!(matches!(moves[0].action, Move::Migrate { .. }));
        assert!(matches!(moves[1].action, Move::Failover { .. }));
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()], Budget::default());
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
            Budget::default(),
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
        let budget = Budget {
            max_disrupted_nodes: 1,
            min_healthy_nodes: 1,
        };
        let mut round = Round::new(&nodes, &instances, [], ["n1".to_owned()], budget);
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
        let budget = Budget {
            max_disrupted_nodes: 1,
            min_healthy_nodes: 1,
        };
        let mut round = Round::new(&nodes, std::slice::from_ref(&big), [], [], budget);
        assert!(matches!(
            round.plan_evacuation("n1", false),
            EvacuationStep::Fail(_)
        ));
    }

    #[test]
    fn empty_drained_node_is_done() {
        let nodes = vec![drained(node("n1")), node("n2")];
        let mut round = Round::new(&nodes, &[], [], [], Budget::default());
        assert_eq!(round.plan_evacuation("n1", false), EvacuationStep::Done);
        assert!(matches!(
            round.plan_evacuation("gone", false),
            EvacuationStep::Fail(_)
        ));
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
        fn planned_moves_never_conflict((nodes, instances) in cluster(), busy in 0usize..8) {
            let in_flight = vec![Lock::Node(format!("n{busy}"))];
            let budget = Budget { max_disrupted_nodes: 1, min_healthy_nodes: 1 };
            let mut round = Round::new(&nodes, &instances, in_flight.clone(), ["n0".to_owned()], budget);
            if let EvacuationStep::Moves(moves) = round.plan_evacuation("n0", false) {
                let mut seen: BTreeSet<Lock> = in_flight.into_iter().collect();
                let mut memory: BTreeMap<String, u64> = BTreeMap::new();
                for planned in &moves {
                    for lock in &planned.locks {
                        prop_assert!(seen.insert(lock.clone()), "conflict on {:?}", lock);
                        prop_assert_ne!(lock, &Lock::Node("n0".into()));
                    }
                    let instance = instances.iter().find(|i| i.name == planned.action.instance()).unwrap();
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
