//! Failback (pure): the instances an evacuation moved off a node go back to it once the node is
//! back in service and has stayed healthy for the settle period.
//!
//! - [`note`]: a completed evacuation is remembered as a [`Homecoming`]: its node and the
//!   primaries its moves took off it (the migrations and failovers that succeeded).
//! - [`watch`]: each round says whether the node is back in service (online, not drained,
//!   vm-capable), its agent's verified verdict is `Ok` and no incident is open on it; from when
//!   it is, uninterrupted (anything else, an unknown verdict included, starts the wait again).
//! - [`settle`]: an instance whose primary is its home again is back; one deleted, one whose
//!   DRBD secondary is no longer its home (going back would copy its disks), one with
//!   node-local disks, or one whose moves home failed `max_attempts` times, is given up, each
//!   with why.
//! - [`plan`]: once the node has been healthy for `settle_secs`, the waiting instances are moved
//!   back, highest evacuation priority first, at most `max_moves` at a time, each only when its
//!   home has the memory free for it: a running instance by live migration, a stopped one by
//!   failover. Each move is a balancing move in every other respect: proposed to the gate
//!   (which holds it while storage is not whole, while another holder holds one of its nodes,
//!   outside the windows balancing obeys, in a freeze), recorded in the executor's ledger and
//!   submitted with the reason trail.
//!
//! Every wait is said (`node2 healthy for 3 min of 10 min`, `inst1 needs 2048 MiB, node2 has
//! 1024 MiB free`), in the status, the page and `explain`.

use std::collections::{BTreeMap, BTreeSet};

use nodecare_roll::hbal::{HbalJob, HbalOp, Placement};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::duty::node_repair::intent::{Intent, IntentSpec, IntentState};
use crate::duty::node_repair::ladder::span;
use crate::ganeti::{DiskTemplate, Instance, Node};
use crate::incident::{Incident, RepairStatus};
use crate::plan::{Move, evacuation_priority, priority_note};

/// How long a homecoming waits for its node at most (then what has not gone back is given up).
pub const KEEP_SECS: f64 = 7.0 * 86_400.0;
/// How long a finished homecoming stays listed.
pub const SHOWN_SECS: f64 = 86_400.0;
/// Most homecomings kept (the oldest finished go first).
pub const MAX_HOMECOMINGS: usize = 512;

/// `[failback]` of the configuration: off by default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailbackConfig {
    /// Move the instances an evacuation moved off a node back once it is healthy again.
    pub enabled: bool,
    /// Seconds the node must stay back in service and healthy before its instances move back.
    pub settle_secs: f64,
    /// Most failback moves at a time (the next ones wait for them to end).
    pub max_moves: usize,
    /// Moves home of one instance that may fail before it is given up.
    pub max_attempts: u32,
}

impl Default for FailbackConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            settle_secs: 600.0,
            max_moves: 2,
            max_attempts: 2,
        }
    }
}

impl FailbackConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), String> {
        if !self.settle_secs.is_finite() || !(0.0..=KEEP_SECS).contains(&self.settle_secs) {
            return Err(format!(
                "failback.settle_secs must be between 0 and {KEEP_SECS} seconds, got {}",
                self.settle_secs
            ));
        }
        if self.max_moves == 0 || self.max_moves > 64 {
            return Err(format!(
                "failback.max_moves must be between 1 and 64, got {}",
                self.max_moves
            ));
        }
        if self.max_attempts == 0 || self.max_attempts > 10 {
            return Err(format!(
                "failback.max_attempts must be between 1 and 10, got {}",
                self.max_attempts
            ));
        }
        Ok(())
    }
}

/// Where one instance of a homecoming stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum HomeState {
    /// Not back yet.
    Waiting,
    /// Its primary is its home again.
    Back,
    /// It does not go back, and why.
    GivenUp {
        /// Why.
        why: String,
    },
}

/// One instance an evacuation moved off its home.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Homebound {
    /// The instance.
    pub instance: String,
    /// Where it stands.
    #[serde(flatten)]
    pub state: HomeState,
    /// Moves home submitted so far.
    #[serde(default)]
    pub attempts: u32,
}

/// A completed evacuation whose instances go back to its node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Homecoming {
    /// The incident that evacuated the node.
    pub incident: Uuid,
    /// The node's name (as last seen).
    pub node: String,
    /// The node's uuid.
    pub node_uuid: String,
    /// Unix seconds the evacuation was seen completed.
    pub noted_s: f64,
    /// Unix seconds from which the node has been back in service and healthy, uninterrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since_s: Option<f64>,
    /// Why the node is not (yet) back in service and healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// The instances, in the order they left.
    pub instances: Vec<Homebound>,
    /// Unix seconds every instance was back or given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_s: Option<f64>,
}

impl Homecoming {
    /// The instances still waiting.
    pub fn waiting(&self) -> impl Iterator<Item = &Homebound> {
        self.instances
            .iter()
            .filter(|i| i.state == HomeState::Waiting)
    }
}

/// Remembers each completed evacuation of `incidents` not known yet, with the primaries its
/// moves (`intents`) took off the node, and forgets finished homecomings shown long enough.
/// Returns whether `homecomings` changed.
pub fn note(
    homecomings: &mut Vec<Homecoming>,
    incidents: &[Incident],
    intents: &[Intent],
    now_s: f64,
) -> bool {
    let mut changed = false;
    let known: BTreeSet<Uuid> = homecomings.iter().map(|h| h.incident).collect();
    for incident in incidents.iter().filter(|i| {
        i.repair_status == RepairStatus::Completed
            && i.action.is_evacuation()
            && !known.contains(&i.uuid)
    }) {
        let mut moved: Vec<String> = Vec::new();
        for intent in intents
            .iter()
            .filter(|i| i.incident == incident.uuid && i.state == IntentState::Succeeded)
        {
            if let IntentSpec::Move {
                planned: Move::Migrate { instance, .. } | Move::Failover { instance, .. },
            } = &intent.spec
                && !moved.contains(instance)
            {
                moved.push(instance.clone());
            }
        }
        if moved.is_empty() {
            continue;
        }
        homecomings.push(Homecoming {
            incident: incident.uuid,
            node: incident.node.clone(),
            node_uuid: incident.node_uuid.clone(),
            noted_s: now_s,
            healthy_since_s: None,
            not_ready: None,
            instances: moved
                .into_iter()
                .map(|instance| Homebound {
                    instance,
                    state: HomeState::Waiting,
                    attempts: 0,
                })
                .collect(),
            ended_s: None,
        });
        changed = true;
    }
    let before = homecomings.len();
    homecomings.retain(|h| h.ended_s.is_none_or(|ended| now_s - ended < SHOWN_SECS));
    if homecomings.len() > MAX_HOMECOMINGS {
        homecomings.sort_by(|a, b| {
            a.ended_s
                .unwrap_or(f64::MAX)
                .total_cmp(&b.ended_s.unwrap_or(f64::MAX))
        });
        let excess = homecomings.len() - MAX_HOMECOMINGS;
        homecomings.drain(..excess);
    }
    changed || homecomings.len() != before
}

/// What a node's agent said this round, as failback reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// A verified, fresh `Ok`.
    Ok,
    /// A verified verdict asking for a repair.
    Failing,
    /// Nothing verified (unreachable, unverifiable, stale, `unknown`).
    Unknown,
}

/// Updates from when each homecoming's node has been back in service and healthy, given the
/// nodes, each node's `health` (by name) and the nodes with an open incident (`busy`, by
/// uuid). Returns whether `homecomings` changed.
pub fn watch(
    homecomings: &mut [Homecoming],
    nodes: &[Node],
    health: &BTreeMap<String, Health>,
    busy: &BTreeSet<String>,
    now_s: f64,
) -> bool {
    let mut changed = false;
    for homecoming in homecomings.iter_mut().filter(|h| h.ended_s.is_none()) {
        let node = nodes.iter().find(|n| n.uuid == homecoming.node_uuid);
        let not_ready = match node {
            None => Some("the node left the cluster".to_owned()),
            Some(node) if node.offline => Some(format!("{} is offline", node.name)),
            Some(node) if node.drained => Some(format!("{} is drained", node.name)),
            Some(node) if !node.vm_capable => Some(format!("{} is not vm-capable", node.name)),
            Some(node) if busy.contains(&node.uuid) => {
                Some(format!("{} has an open incident", node.name))
            }
            Some(node) => match health.get(&node.name).copied().unwrap_or(Health::Unknown) {
                Health::Ok => None,
                Health::Failing => Some(format!("{} asks for a repair", node.name)),
                Health::Unknown => Some(format!("{}'s health is not known", node.name)),
            },
        };
        if let Some(node) = node
            && node.name != homecoming.node
        {
            homecoming.node.clone_from(&node.name);
            changed = true;
        }
        let since = match (&not_ready, homecoming.healthy_since_s) {
            (Some(_), _) => None,
            (None, Some(since)) => Some(since),
            (None, None) => Some(now_s),
        };
        if since != homecoming.healthy_since_s || not_ready != homecoming.not_ready {
            homecoming.healthy_since_s = since;
            homecoming.not_ready = not_ready;
            changed = true;
        }
    }
    changed
}

/// Settles the waiting instances the cluster (`nodes`, `instances`) already decides: back
/// home, deleted, unable to go home, or out of attempts (only while no failback move is
/// `in_flight`); ends homecomings with nothing left waiting, and gives up what waited longer
/// than [`KEEP_SECS`]. Returns the instances settled (homecoming, instance, state).
pub fn settle(
    homecomings: &mut [Homecoming],
    nodes: &[Node],
    instances: &[Instance],
    config: &FailbackConfig,
    in_flight: bool,
    now_s: f64,
) -> Vec<(Uuid, String, HomeState)> {
    let by_name: BTreeMap<&str, &Instance> =
        instances.iter().map(|i| (i.name.as_str(), i)).collect();
    let mut settled = Vec::new();
    for homecoming in homecomings.iter_mut().filter(|h| h.ended_s.is_none()) {
        let home = nodes
            .iter()
            .find(|n| n.uuid == homecoming.node_uuid)
            .map(|n| n.name.clone());
        let expired = now_s - homecoming.noted_s >= KEEP_SECS;
        for bound in homecoming
            .instances
            .iter_mut()
            .filter(|b| b.state == HomeState::Waiting)
        {
            let instance = by_name.get(bound.instance.as_str()).copied();
            let state = match (&home, instance) {
                (None, _) => Some(HomeState::GivenUp {
                    why: "its home left the cluster".to_owned(),
                }),
                (_, None) => Some(HomeState::GivenUp {
                    why: "it was deleted".to_owned(),
                }),
                (Some(home), Some(i)) if i.primary_node == *home => Some(HomeState::Back),
                (Some(home), Some(i)) => cannot_go_home(i, home)
                    .map(|why| HomeState::GivenUp { why })
                    .or_else(|| {
                        (!in_flight && bound.attempts >= config.max_attempts).then(|| {
                            HomeState::GivenUp {
                                why: format!(
                                    "{} move(s) home did not bring it back (max_attempts)",
                                    bound.attempts
                                ),
                            }
                        })
                    })
                    .or_else(|| {
                        (expired && !in_flight).then(|| HomeState::GivenUp {
                            why: format!(
                                "not back within {} days of its evacuation",
                                KEEP_SECS / 86_400.0
                            ),
                        })
                    }),
            };
            if let Some(state) = state {
                bound.state = state.clone();
                settled.push((homecoming.incident, bound.instance.clone(), state));
            }
        }
        if homecoming.waiting().next().is_none() {
            homecoming.ended_s = Some(now_s);
        }
    }
    settled
}

/// Why `instance` cannot go back to `home` without copying disks, if so.
fn cannot_go_home(instance: &Instance, home: &str) -> Option<String> {
    if instance.disk_template.is_node_local() {
        return Some(format!(
            "its {} disks live on {} (moving it copies them)",
            instance.disk_template.as_str(),
            instance.primary_node
        ));
    }
    if instance.disk_template == DiskTemplate::Drbd
        && !instance.secondary_nodes.iter().any(|s| s == home)
    {
        return Some(format!(
            "its DRBD secondary is {}, not {home} (going home would copy its disks)",
            instance.secondary_nodes.join(", ")
        ));
    }
    None
}

/// A move home the duty proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct FailbackMove {
    /// The homecoming's incident.
    pub incident: Uuid,
    /// The move, as a balancing job.
    pub job: HbalJob,
    /// The instance's memory in MiB (`None`: not known), as the gate reads what a move moves
    /// (a stopped instance's too: its failover is a move).
    pub memory: Option<u64>,
    /// Why, for people.
    pub reason: String,
}

/// This round's failback plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FailbackPlan {
    /// The moves to propose.
    pub moves: Vec<FailbackMove>,
    /// Instances waiting, each with its home and why (`inst1`, `node2`, `node2 healthy for 3 min
    /// of 10 min`).
    pub waiting: Vec<(String, String, String)>,
}

/// The moves home of this round: for each homecoming whose node has been healthy for
/// `settle_secs`, its waiting instances, highest evacuation priority first, as long as fewer
/// than `max_moves` failback moves are `in_flight`, their home has the memory free and no other
/// move of this round touches their nodes; every other waiting instance with why. `blocked`:
/// nodes failback must not touch, with why (held by another holder, an open incident, a
/// balancing move in flight).
pub fn plan(
    homecomings: &[Homecoming],
    config: &FailbackConfig,
    nodes: &[Node],
    instances: &[Instance],
    blocked: &BTreeMap<String, String>,
    in_flight: usize,
    now_s: f64,
) -> FailbackPlan {
    let by_name: BTreeMap<&str, &Instance> =
        instances.iter().map(|i| (i.name.as_str(), i)).collect();
    let mut out = FailbackPlan::default();
    let mut room = config.max_moves.saturating_sub(in_flight);
    // Memory promised to each home this round.
    let mut promised: BTreeMap<String, u64> = BTreeMap::new();
    // Nodes a move planned this round takes an instance off or onto: one move per node at a
    // time (the gate would refuse a second one touching the same node).
    let mut used: BTreeMap<String, String> = BTreeMap::new();
    // Instances of every ready homecoming, highest priority first, then in the order they
    // left.
    let mut ready: Vec<(u8, usize, &Homecoming, &Instance)> = Vec::new();
    for homecoming in homecomings.iter().filter(|h| h.ended_s.is_none()) {
        let home = homecoming.node.as_str();
        let wait = match (homecoming.healthy_since_s, &homecoming.not_ready) {
            (_, Some(why)) => Some(why.clone()),
            (None, None) => Some(format!("{home}'s health is not known")),
            (Some(since), None) if now_s - since < config.settle_secs => Some(format!(
                "{home} healthy for {} of {} (settle_secs)",
                span((now_s - since).max(0.0)),
                span(config.settle_secs)
            )),
            (Some(_), None) => None,
        };
        for (order, bound) in homecoming.waiting().enumerate() {
            match (&wait, by_name.get(bound.instance.as_str())) {
                (Some(why), _) => {
                    out.waiting
                        .push((bound.instance.clone(), home.to_owned(), why.clone()));
                }
                (None, None) => {}
                (None, Some(instance)) => {
                    ready.push((evacuation_priority(instance), order, homecoming, instance));
                }
            }
        }
    }
    ready.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, _, homecoming, instance) in ready {
        let home = homecoming.node.as_str();
        let mut wait = |why: String| {
            out.waiting
                .push((instance.name.clone(), home.to_owned(), why));
        };
        if let Some(why) = blocked
            .get(home)
            .map(|why| format!("{home}: {why}"))
            .or_else(|| {
                blocked
                    .get(&instance.primary_node)
                    .map(|why| format!("{}: {why}", instance.primary_node))
            })
        {
            wait(why);
            continue;
        }
        if let Some(other) = [home, instance.primary_node.as_str()]
            .iter()
            .find_map(|node| used.get(*node).map(|other| (*node, other)))
        {
            wait(format!(
                "{}: waits for the move home of {}",
                other.0, other.1
            ));
            continue;
        }
        let running = instance.status == "running";
        let stopped = instance.admin_state == "down";
        if !running && !stopped {
            wait(format!(
                "{} is {} (only running or stopped instances go back)",
                instance.name, instance.status
            ));
            continue;
        }
        // What it moves, for the gate: never "nothing moves" (a failover of a stopped instance
        // is a move too, held while storage is not whole; 0 MiB reads as unknown); only a
        // running one needs room.
        let memory = instance.memory.filter(|m| *m > 0);
        if running {
            let free = nodes
                .iter()
                .find(|n| n.name == home)
                .and_then(|n| n.memory_free);
            let taken = promised.get(home).copied().unwrap_or(0);
            match (instance.memory, free) {
                (None, _) => {
                    wait(format!("{}'s memory is not known", instance.name));
                    continue;
                }
                (_, None) => {
                    wait(format!("{home}'s free memory is not known"));
                    continue;
                }
                (Some(need), Some(free)) if need.saturating_add(taken) > free => {
                    wait(format!(
                        "{} needs {need} MiB, {home} has {} MiB free",
                        instance.name,
                        free.saturating_sub(taken)
                    ));
                    continue;
                }
                (Some(need), Some(_)) => {
                    *promised.entry(home.to_owned()).or_default() += need;
                }
            }
        }
        if room == 0 {
            wait(format!(
                "waits for the failback moves in flight (max_moves = {})",
                config.max_moves
            ));
            continue;
        }
        room -= 1;
        used.insert(home.to_owned(), instance.name.clone());
        used.insert(instance.primary_node.clone(), instance.name.clone());
        let drbd = instance.disk_template == DiskTemplate::Drbd;
        let target = (!drbd).then(|| home.to_owned());
        let op = if running {
            HbalOp::Migrate { target }
        } else {
            HbalOp::Failover { target }
        };
        let from = Placement {
            primary: instance.primary_node.clone(),
            secondary: drbd.then(|| home.to_owned()),
        };
        let to = Placement {
            primary: home.to_owned(),
            secondary: drbd.then(|| instance.primary_node.clone()),
        };
        let note = priority_note(instance);
        out.moves.push(FailbackMove {
            incident: homecoming.incident,
            reason: format!(
                "failback: {} {} => {home} ({op}; moved off {home} by incident {}, healthy since \
                 {}){note}",
                instance.name,
                instance.primary_node,
                homecoming.incident,
                nodecare_protocol::clock::utc_text(homecoming.healthy_since_s.unwrap_or(now_s)),
            ),
            job: HbalJob {
                instance: instance.name.clone(),
                from,
                to,
                ops: vec![op],
                score_after: 0.0,
            },
            memory,
        });
    }
    out
}

#[cfg(test)]
#[path = "failback_tests.rs"]
mod tests;
