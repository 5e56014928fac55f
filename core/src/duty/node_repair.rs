//! Node repair (pure): one proposal per node with an active incident, and the nodes incidents
//! hold disrupted.
//!
//! A node's most invasive active incident (then the oldest) is the one that acts; the node's
//! other active incidents wait for it. An evacuation disrupts its node: a pending one already
//! holds it, so its proposal is a continuation; a noted one asks to drain it. A live repair keeps
//! the instances running: it touches the node (no other holder may act there, the breaker keeps
//! it from starting) without opening a failure domain or using a cap; once pending, it holds the
//! node ([`touches`]) rather than disrupting it ([`holds`]). A pending evacuation holds the DRBD
//! peers of the instances on its node ([`touches`]) and the targets of its moves in flight
//! ([`move_targets`]); of two evacuations not begun whose nodes share an instance, the second
//! waits for the first. The first moves the shared instances off both nodes (a DRBD instance
//! whose secondary is the other node gets a new secondary first, [`crate::plan`]), so the
//! second is free to start once they are gone; each node is counted once, by its own incident.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::ganeti::{Instance, Node};
use crate::gate::{Duty, Holder, Holds, Proposal};
use crate::incident::{Action, Incident, RepairStatus};
use intent::{Intent, IntentSpec};

pub mod intent;
pub mod ladder;
pub mod observe;
#[cfg(test)]
mod peer_evacuations;

/// How invasive an action is (the gate serves the most invasive first).
pub const fn invasiveness(action: Action) -> u8 {
    action.invasiveness()
}

/// What the node-repair duty proposes this round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Proposals {
    /// One proposal per node with an active incident, for the gate.
    pub proposals: Vec<Proposal>,
    /// Active incidents that wait for another incident of the same node, and why.
    pub waiting: Vec<(Uuid, String)>,
}

fn seconds_to_ms(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1000.0) as u64
    } else {
        0
    }
}

/// The memory of the instances whose primary is `node` (MiB); `None` when a size is unknown.
fn primary_memory(node: &str, instances: &[Instance]) -> Option<u64> {
    instances
        .iter()
        .filter(|i| i.primary_node == node)
        .try_fold(0u64, |sum, i| Some(sum.saturating_add(i.memory?)))
}

/// How long verdicts must hold before they act, and the round's time.
#[derive(Debug, Clone, Copy)]
pub struct Hold<'a> {
    /// The policy (`[repair_ladder]`).
    pub ladder: &'a ladder::LadderPolicy,
    /// The round's time, Unix seconds.
    pub now_s: f64,
}

/// The ladder that holds and escalates nothing.
static LADDER_OFF: ladder::LadderPolicy = ladder::LadderPolicy::OFF;

impl Hold<'static> {
    /// Nothing held.
    pub const fn none() -> Self {
        Self {
            ladder: &LADDER_OFF,
            now_s: 0.0,
        }
    }
}

/// Node repair's records as a round reads them: its incidents and their intents (the ledger's
/// entries of the incidents). Everything the duty holds and proposes is a function of these and
/// of the cluster ([`held`], [`evacuating`], [`propose`]).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Records {
    /// Every incident kept.
    pub incidents: Vec<Incident>,
    /// Every intent of those incidents.
    pub intents: Vec<Intent>,
}

/// What the incidents of `records` hold in force on the cluster of `nodes` and `instances`:
/// disrupted, pending evacuations ([`holds`]) and nodes a drain, move or offline job of theirs
/// may still act on ([`jobs_in_flight`]); touched, pending live repairs and DRBD peers
/// ([`touches`]), the targets of moves in flight ([`move_targets`]) and nodes whose repair
/// command may still run ([`repairs_in_flight`]); left, the drained and offline flags their jobs
/// set or cleared ([`intent::incident_flag_changes`]).
pub fn held(records: &Records, nodes: &[Node], instances: &[Instance]) -> Holds {
    let Records { incidents, intents } = records;
    let in_flight = |step: fn(&IntentSpec) -> bool| {
        intents
            .iter()
            .filter(move |i| i.state.is_in_flight() && step(&i.spec))
            .map(|i| i.incident)
    };
    Holds {
        disrupted: holds(incidents, nodes)
            .into_iter()
            .chain(jobs_in_flight(
                incidents,
                nodes,
                in_flight(IntentSpec::is_evacuation),
            ))
            .collect(),
        touched: touches(incidents, nodes, instances)
            .into_iter()
            .chain(move_targets(intents.iter().filter_map(|i| match &i.spec {
                IntentSpec::Move { planned } if i.state.is_in_flight() => {
                    Some((i.incident, planned))
                }
                _ => None,
            })))
            .chain(repairs_in_flight(
                incidents,
                nodes,
                in_flight(|spec| matches!(spec, IntentSpec::Repair { .. })),
            ))
            .collect(),
        left: intent::incident_flag_changes(incidents, intents),
    }
}

/// The incidents whose evacuation has begun: a drain, move or offline intent recorded, in any
/// state (what [`propose`] takes as `evacuating`).
pub fn evacuating(intents: &[Intent]) -> BTreeSet<Uuid> {
    intents
        .iter()
        .filter(|i| i.spec.is_evacuation())
        .map(|i| i.incident)
        .collect()
}

/// The proposals of the active incidents in `incidents`. `evacuating` are the incidents whose
/// evacuation has begun (a drain, move or offline job recorded): a pending evacuation not among
/// them (escalated from a live repair, or admitted in a round that ended before its first job
/// was recorded) starts anew and is judged in full by the gate, on a node an operator drained
/// meanwhile too.
pub fn propose(
    incidents: &[Incident],
    nodes: &[Node],
    instances: &[Instance],
    evacuating: &BTreeSet<Uuid>,
    hold: Hold<'_>,
) -> Proposals {
    let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
    let mut active: Vec<&Incident> = incidents.iter().filter(|i| i.is_active()).collect();
    active.sort_by(|a, b| {
        invasiveness(b.action)
            .cmp(&invasiveness(a.action))
            .then(a.ctime.total_cmp(&b.ctime))
            .then(a.node.cmp(&b.node))
            .then(a.uuid.cmp(&b.uuid))
    });
    let mut out = Proposals::default();
    let mut acting: BTreeMap<&str, Uuid> = BTreeMap::new();
    // Evacuations about to start this round (not begun yet), by node: one whose node shares an
    // instance with theirs (a DRBD pair) waits for them, so that two evacuations never move one
    // instance at once; once begun, the first holds the shared nodes ([`touches`]).
    let mut starting: Vec<(&str, Uuid)> = Vec::new();
    for incident in active {
        if let Some(first) = acting.get(incident.node_uuid.as_str()) {
            out.waiting.push((
                incident.uuid,
                format!("incident {first} on the same node is handled first"),
            ));
            continue;
        }
        acting.insert(incident.node_uuid.as_str(), incident.uuid);
        let Some(node) = by_uuid.get(incident.node_uuid.as_str()) else {
            continue;
        };
        let begun = incident.repair_status == RepairStatus::Pending
            || evacuating.contains(&incident.uuid)
            || node.drained
            || node.offline;
        // A verdict that must hold a while before it acts (`[repair_ladder] hold_*_secs`).
        let (secs, key) = hold.ladder.hold(incident.action);
        let held = hold.now_s - incident.ctime;
        if incident.repair_status == RepairStatus::Noted && secs > 0.0 && held < secs {
            out.waiting.push((
                incident.uuid,
                format!(
                    "the {} verdict must hold {secs:.0} s before it acts (repair_ladder.{key}): {:.0} s so far",
                    incident.verdict.status.as_str(),
                    held.max(0.0)
                ),
            ));
            continue;
        }
        if incident.action.is_evacuation() && !begun {
            let shared = starting.iter().find_map(|(other, first)| {
                instances
                    .iter()
                    .find(|i| {
                        let on = |n: &str| {
                            i.primary_node == n || i.secondary_nodes.iter().any(|s| s == n)
                        };
                        on(&node.name) && on(other)
                    })
                    .map(|i| (*other, *first, i.name.as_str()))
            });
            if let Some((other, first, instance)) = shared {
                out.waiting.push((
                    incident.uuid,
                    format!(
                        "incident {first} evacuating {other}, which shares instance {instance} with this node, starts first"
                    ),
                ));
                continue;
            }
            if node.role != crate::ganeti::NodeRole::Master {
                starting.push((node.name.as_str(), incident.uuid));
            }
        }
        let moves_memory = if incident.action.is_evacuation() {
            primary_memory(&node.name, instances)
        } else {
            Some(0)
        };
        // A live repair keeps the node's instances running: it holds the node (no one else acts
        // there) but opens no failure domain and uses no cap. An evacuation disrupts the node.
        let (disrupts, touches) = if incident.action.is_evacuation() {
            (BTreeSet::from([node.name.clone()]), BTreeSet::new())
        } else {
            (BTreeSet::new(), BTreeSet::from([node.name.clone()]))
        };
        out.proposals.push(Proposal {
            duty: Duty::NodeRepair,
            holder: Holder::Incident { id: incident.uuid },
            subject: format!("node {}", node.name),
            invasiveness: invasiveness(incident.action),
            since_ms: seconds_to_ms(incident.ctime),
            disrupts,
            touches,
            fresh: incident.action.is_evacuation()
                && incident.repair_status == RepairStatus::Pending
                && !evacuating.contains(&incident.uuid),
            moves_memory,
            after_releases: BTreeMap::new(),
            reason: format!(
                "{} ({})",
                incident.action.as_str(),
                incident.verdict.status.as_str()
            ),
        });
    }
    out
}

/// The nodes incidents hold disrupted: a pending evacuation's node, and the node of a finished
/// incident not yet acknowledged while Ganeti still shows it drained or offline. A live repair
/// in progress holds its node without disrupting it ([`touches`]).
pub fn holds(incidents: &[Incident], nodes: &[Node]) -> Vec<(String, Holder)> {
    let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
    let mut held: BTreeMap<String, Holder> = BTreeMap::new();
    let mut sorted: Vec<&Incident> = incidents.iter().collect();
    sorted.sort_by(|a, b| a.ctime.total_cmp(&b.ctime).then(a.uuid.cmp(&b.uuid)));
    for incident in sorted {
        let Some(node) = by_uuid.get(incident.node_uuid.as_str()) else {
            continue;
        };
        let holds = match incident.repair_status {
            RepairStatus::Pending => incident.action.is_evacuation(),
            RepairStatus::Completed | RepairStatus::Failed => {
                !incident.acknowledged && (node.drained || node.offline)
            }
            RepairStatus::Noted | RepairStatus::Canceled => false,
        };
        if holds {
            // A pending incident wins over a finished one on the same node.
            let pending = incident.repair_status == RepairStatus::Pending;
            if pending || !held.contains_key(&node.name) {
                held.insert(node.name.clone(), Holder::Incident { id: incident.uuid });
            }
        }
    }
    held.into_iter().collect()
}

/// The nodes incidents hold without disrupting them (the gate's
/// [`crate::gate::InForce::touched`]): they open no failure domain and use no cap, but nothing
/// else acts there. A pending live repair holds its node (its instances keep running); a
/// pending evacuation holds the other nodes of the instances still on its node (their DRBD
/// peers: its moves migrate, fail over or re-mirror them there), so that no other holder drains
/// or moves there while it runs. A node an evacuation holds disrupted is left out, and so is a
/// peer with a live repair of its own (noted or running): the evacuation's moves onto it wait
/// for that incident ([`crate::plan`]), so holding it would leave each waiting for the other.
pub fn touches(
    incidents: &[Incident],
    nodes: &[Node],
    instances: &[Instance],
) -> Vec<(String, Holder)> {
    let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
    let disrupted: BTreeSet<String> = holds(incidents, nodes)
        .into_iter()
        .map(|(node, _)| node)
        .collect();
    let mut held: BTreeMap<String, Holder> = BTreeMap::new();
    let mut sorted: Vec<&Incident> = incidents
        .iter()
        .filter(|i| i.repair_status == RepairStatus::Pending && !i.action.is_evacuation())
        .collect();
    sorted.sort_by(|a, b| a.ctime.total_cmp(&b.ctime).then(a.uuid.cmp(&b.uuid)));
    for incident in sorted {
        if let Some(node) = by_uuid.get(incident.node_uuid.as_str())
            && !disrupted.contains(&node.name)
        {
            held.entry(node.name.clone())
                .or_insert(Holder::Incident { id: incident.uuid });
        }
    }
    let mut evacuations: Vec<&Incident> = incidents
        .iter()
        .filter(|i| i.repair_status == RepairStatus::Pending && i.action.is_evacuation())
        .collect();
    evacuations.sort_by(|a, b| a.ctime.total_cmp(&b.ctime).then(a.uuid.cmp(&b.uuid)));
    let live_repairing: BTreeSet<&str> = incidents
        .iter()
        .filter(|i| i.is_active() && i.action == Action::LiveRepair)
        .filter_map(|i| by_uuid.get(i.node_uuid.as_str()))
        .map(|n| n.name.as_str())
        .collect();
    for incident in evacuations {
        let Some(node) = by_uuid.get(incident.node_uuid.as_str()) else {
            continue;
        };
        for instance in instances
            .iter()
            .filter(|i| i.primary_node == node.name || i.secondary_nodes.contains(&node.name))
        {
            for peer in std::iter::once(&instance.primary_node).chain(&instance.secondary_nodes) {
                if *peer != node.name
                    && !disrupted.contains(peer)
                    && !live_repairing.contains(peer.as_str())
                {
                    held.entry(peer.clone())
                        .or_insert(Holder::Incident { id: incident.uuid });
                }
            }
        }
    }
    held.into_iter().collect()
}

/// The nodes an incident's moves still in flight take instances onto (`moves`: incident and
/// move), held without disruption ([`crate::gate::InForce::touched`]) until the move ends: the
/// explicit target of a migration or failover, the new secondary of a replace-disks. No other
/// holder drains or is granted them meanwhile.
pub fn move_targets<'a>(
    moves: impl IntoIterator<Item = (Uuid, &'a crate::plan::Move)>,
) -> Vec<(String, Holder)> {
    use crate::plan::Move;
    let mut held: BTreeMap<String, Holder> = BTreeMap::new();
    for (incident, planned) in moves {
        let target = match planned {
            Move::Migrate { target, .. } | Move::Failover { target, .. } => target.as_ref(),
            Move::ReplaceSecondary { remote_node, .. } => Some(remote_node),
        };
        if let Some(target) = target {
            held.entry(target.clone())
                .or_insert(Holder::Incident { id: incident });
        }
    }
    held.into_iter().collect()
}

/// The nodes of incidents that are no longer pending (canceled) whose repair command may still
/// run on the agent (`running`: the incidents with a repair in flight), held without disruption
/// ([`crate::gate::InForce::touched`]) until the command ends: a cancel stops no command, and
/// nothing else may drain or reboot a node in the middle of its repair (a firmware update).
/// A pending incident's repair holds its node already ([`touches`]).
pub fn repairs_in_flight(
    incidents: &[Incident],
    nodes: &[Node],
    running: impl IntoIterator<Item = Uuid>,
) -> Vec<(String, Holder)> {
    held_after_cancel(incidents, nodes, running)
}

/// The nodes of incidents that are no longer pending (canceled) whose drain, offline or moves
/// may still run in Ganeti (`running`: the incidents with such a job in flight), held disrupted
/// until those jobs end: a cancel stops only the jobs that have not started, and a drain or a
/// migration that runs on disrupts the node as much as before the cancel (its failure domain
/// stays the busy one, it counts against the caps, its instances need room). A pending
/// incident's evacuation holds its node already ([`holds`]).
pub fn jobs_in_flight(
    incidents: &[Incident],
    nodes: &[Node],
    running: impl IntoIterator<Item = Uuid>,
) -> Vec<(String, Holder)> {
    held_after_cancel(incidents, nodes, running)
}

/// The nodes of the incidents among `running` that are no longer pending, each held by its
/// incident ([`repairs_in_flight`], [`jobs_in_flight`]).
fn held_after_cancel(
    incidents: &[Incident],
    nodes: &[Node],
    running: impl IntoIterator<Item = Uuid>,
) -> Vec<(String, Holder)> {
    let by_uuid: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.uuid.as_str(), n)).collect();
    let running: BTreeSet<Uuid> = running.into_iter().collect();
    let mut held: BTreeMap<String, Holder> = BTreeMap::new();
    for incident in incidents
        .iter()
        .filter(|i| running.contains(&i.uuid) && i.repair_status != RepairStatus::Pending)
    {
        if let Some(node) = by_uuid.get(incident.node_uuid.as_str()) {
            held.entry(node.name.clone())
                .or_insert(Holder::Incident { id: incident.uuid });
        }
    }
    held.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests_support::{incident_on, instance, node};

    /// A canceled evacuation holds its node disrupted while a drain, offline or move of it may
    /// run in Ganeti; a pending one is held by [`holds`], one whose jobs ended by nothing.
    #[test]
    fn a_canceled_evacuation_holds_its_node_while_its_jobs_run() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let mut canceled = incident_on(1, &nodes[0], Action::Evacuate, 10.0);
        canceled.repair_status = RepairStatus::Canceled;
        let mut pending = incident_on(2, &nodes[1], Action::Evacuate, 10.0);
        pending.repair_status = RepairStatus::Pending;
        let mut ended = incident_on(3, &nodes[2], Action::Evacuate, 10.0);
        ended.repair_status = RepairStatus::Canceled;
        let incidents = [canceled.clone(), pending.clone(), ended];
        assert_eq!(
            jobs_in_flight(&incidents, &nodes, [canceled.uuid, pending.uuid]),
            [("n1".to_owned(), Holder::Incident { id: canceled.uuid })]
        );
        assert_eq!(
            holds(&incidents, &nodes),
            [("n2".to_owned(), Holder::Incident { id: pending.uuid })]
        );
    }

    fn intent_of(incident: Uuid, spec: IntentSpec, state: intent::IntentState) -> Intent {
        Intent {
            incident,
            key: "k".into(),
            spec,
            locks: Vec::new(),
            state,
            job_id: None,
            created_ms: 5,
            submitted_ms: Some(6),
            finished_ms: None,
            error: None,
        }
    }

    /// What node repair holds is read from its records alone: a canceled evacuation whose drain
    /// job may still run disrupts its node, a pending one disrupts its node, a canceled live
    /// repair whose command may still run touches its node, and a drain that succeeded is a
    /// flag its incident left. An intent that ended holds nothing.
    #[test]
    fn what_node_repair_holds_is_a_function_of_its_records() {
        use intent::IntentState::{Submitted, Succeeded};
        let nodes = vec![node("n1"), node("n2"), node("n3"), node("n4")];
        let mut canceled = incident_on(1, &nodes[0], Action::Evacuate, 10.0);
        canceled.repair_status = RepairStatus::Canceled;
        let mut pending = incident_on(2, &nodes[1], Action::Evacuate, 10.0);
        pending.repair_status = RepairStatus::Pending;
        let mut repair = incident_on(3, &nodes[2], Action::LiveRepair, 10.0);
        repair.repair_status = RepairStatus::Canceled;
        let mut done = incident_on(4, &nodes[3], Action::LiveRepair, 10.0);
        done.repair_status = RepairStatus::Canceled;
        let drain = |n: &str| IntentSpec::Drain { node: n.into() };
        let command = |n: &str| IntentSpec::Repair {
            node: n.into(),
            command: "fw".into(),
        };
        let records = Records {
            incidents: vec![
                canceled.clone(),
                pending.clone(),
                repair.clone(),
                done.clone(),
            ],
            intents: vec![
                intent_of(canceled.uuid, drain("n1"), Submitted),
                intent_of(pending.uuid, drain("n2"), Succeeded),
                intent_of(repair.uuid, command("n3"), Submitted),
                intent_of(done.uuid, command("n4"), Succeeded),
            ],
        };
        let held = held(&records, &nodes, &[]);
        let by = |id: Uuid| Holder::Incident { id };
        assert_eq!(
            held.disrupted,
            [
                ("n2".to_owned(), by(pending.uuid)),
                ("n1".to_owned(), by(canceled.uuid))
            ]
        );
        assert_eq!(held.touched, [("n3".to_owned(), by(repair.uuid))]);
        assert_eq!(
            held.left
                .iter()
                .map(|f| (f.node.as_str(), f.flag.as_str(), f.set))
                .collect::<Vec<_>>(),
            [("n2", "drained", true)]
        );
        assert_eq!(
            evacuating(&records.intents),
            BTreeSet::from([canceled.uuid, pending.uuid])
        );
        assert_eq!(
            super::held(&Records::default(), &nodes, &[]),
            Holds::default()
        );
    }

    /// A canceled incident holds its node while its repair command may run; a pending one is
    /// held by [`touches`], one whose command ended by nothing.
    #[test]
    fn a_canceled_incident_holds_its_node_while_its_repair_runs() {
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let mut canceled = incident_on(1, &nodes[0], Action::LiveRepair, 10.0);
        canceled.repair_status = RepairStatus::Canceled;
        let mut pending = incident_on(2, &nodes[1], Action::LiveRepair, 10.0);
        pending.repair_status = RepairStatus::Pending;
        let mut ended = incident_on(3, &nodes[2], Action::LiveRepair, 10.0);
        ended.repair_status = RepairStatus::Canceled;
        let incidents = [canceled.clone(), pending.clone(), ended];
        assert_eq!(
            repairs_in_flight(&incidents, &nodes, [canceled.uuid, pending.uuid]),
            [("n1".to_owned(), Holder::Incident { id: canceled.uuid })]
        );
        assert_eq!(
            touches(&incidents, &nodes, &[]),
            [("n2".to_owned(), Holder::Incident { id: pending.uuid })]
        );
    }

    #[test]
    fn one_proposal_per_node_most_invasive_first() {
        let nodes = vec![node("n1"), node("n2")];
        let instances = vec![instance("i1", "n1", 512), instance("i2", "n1", 256)];
        let live = incident_on(1, &nodes[0], Action::LiveRepair, 10.0);
        let evacuate = incident_on(2, &nodes[0], Action::Evacuate, 20.0);
        let other = incident_on(3, &nodes[1], Action::LiveRepair, 5.0);
        let out = propose(
            &[live.clone(), evacuate.clone(), other.clone()],
            &nodes,
            &instances,
            &BTreeSet::new(),
            Hold::none(),
        );
        let holders: Vec<Holder> = out.proposals.iter().map(|p| p.holder.clone()).collect();
        assert_eq!(
            holders,
            [
                Holder::Incident { id: evacuate.uuid },
                Holder::Incident { id: other.uuid }
            ]
        );
        assert_eq!(out.proposals[0].moves_memory, Some(768));
        assert_eq!(out.proposals[0].invasiveness, 2);
        assert_eq!(out.proposals[1].moves_memory, Some(0));
        assert_eq!(
            out.waiting,
            [(
                live.uuid,
                format!(
                    "incident {} on the same node is handled first",
                    evacuate.uuid
                )
            )]
        );
    }

    /// Two evacuations opened in the same round sharing a DRBD pair: the one on the node first
    /// by name starts, whatever their (random) uuids, so a what-if predicts the same.
    #[test]
    fn evacuations_of_one_round_start_in_node_order() {
        let nodes = vec![node("n1"), node("n2")];
        let mut drbd = instance("d1", "n1", 512);
        drbd.disk_template = crate::ganeti::DiskTemplate::Drbd;
        drbd.secondary_nodes = vec!["n2".into()];
        let second = incident_on(1, &nodes[1], Action::Evacuate, 5.0);
        let first = incident_on(2, &nodes[0], Action::Evacuate, 5.0);
        let out = propose(
            &[second.clone(), first.clone()],
            &nodes,
            &[drbd],
            &BTreeSet::new(),
            Hold::none(),
        );
        let holders: Vec<Holder> = out.proposals.iter().map(|p| p.holder.clone()).collect();
        assert_eq!(holders, [Holder::Incident { id: first.uuid }]);
        assert_eq!(out.waiting.len(), 1);
        assert_eq!(out.waiting[0].0, second.uuid);
    }

    /// An evacuation escalated from a live repair, or admitted in a round that ended before its
    /// first job was recorded (a crash), holds its node already (pending) but has not begun: it
    /// is judged in full (fresh) until its drain, a move or its offline is recorded, even when
    /// someone else drained the node meanwhile (an operator: that drain is not its own).
    /// A verdict that must hold a while waits, saying how long so far, then acts; a begun
    /// incident is never held again.
    #[test]
    fn a_verdict_that_must_hold_waits_then_acts() {
        let nodes = vec![node("n1"), node("n2")];
        let incident = incident_on(1, &nodes[0], Action::Evacuate, 100.0);
        let ladder = ladder::LadderPolicy {
            hold_evacuate_secs: 60.0,
            ..ladder::LadderPolicy::OFF
        };
        let at = |now_s: f64, incident: &Incident| {
            propose(
                std::slice::from_ref(incident),
                &nodes,
                &[],
                &BTreeSet::new(),
                Hold {
                    ladder: &ladder,
                    now_s,
                },
            )
        };
        let early = at(130.0, &incident);
        assert!(early.proposals.is_empty());
        assert_eq!(
            early.waiting,
            [(
                incident.uuid,
                "the evacuate verdict must hold 60 s before it acts (repair_ladder.hold_evacuate_secs): 30 s so far"
                    .to_owned()
            )]
        );
        assert_eq!(at(160.0, &incident).proposals.len(), 1);
        // A live repair has its own hold (none here).
        let live = incident_on(2, &nodes[1], Action::LiveRepair, 100.0);
        assert_eq!(at(101.0, &live).proposals.len(), 1);
        let mut begun = incident.clone();
        begun.repair_status = RepairStatus::Pending;
        assert_eq!(at(101.0, &begun).proposals.len(), 1);
    }

    #[test]
    fn an_escalated_evacuation_is_fresh_until_it_begins() {
        let mut nodes = vec![node("n1")];
        let mut incident = incident_on(1, &nodes[0], Action::Evacuate, 1.0);
        incident.repair_status = RepairStatus::Pending;
        let fresh = |incident: &Incident, nodes: &[Node], started: &BTreeSet<Uuid>| {
            propose(
                std::slice::from_ref(incident),
                nodes,
                &[],
                started,
                Hold::none(),
            )
            .proposals[0]
                .fresh
        };
        assert!(fresh(&incident, &nodes, &BTreeSet::new()));
        assert!(!fresh(&incident, &nodes, &BTreeSet::from([incident.uuid])));
        nodes[0].drained = true;
        assert!(fresh(&incident, &nodes, &BTreeSet::new()));
        assert!(!fresh(&incident, &nodes, &BTreeSet::from([incident.uuid])));
        incident.repair_status = RepairStatus::Noted;
        nodes[0].drained = false;
        assert!(
            !fresh(&incident, &nodes, &BTreeSet::new()),
            "a noted one is new anyway"
        );
    }

    #[test]
    fn unknown_instance_memory_is_unknown() {
        let nodes = vec![node("n1")];
        let mut unknown = instance("i1", "n1", 512);
        unknown.memory = None;
        let incident = incident_on(1, &nodes[0], Action::Evacuate, 1.0);
        let out = propose(
            &[incident],
            &nodes,
            &[unknown],
            &BTreeSet::new(),
            Hold::none(),
        );
        assert_eq!(out.proposals[0].moves_memory, None);
    }

    /// A running evacuation does not hold a peer whose own live repair waits: the evacuation's
    /// move onto the peer waits for that incident, so the live repair goes first (the SIGKILL
    /// test saw each wait for the other: "waiting to move a (its secondary n3 has an active
    /// incident)" and "n3 is held by incident" of the evacuation).
    #[test]
    fn a_running_evacuation_leaves_a_peer_s_live_repair_free_to_run() {
        use crate::gate::{self, Admitted, DomainSource, InForce, Policy, View};
        let nodes = vec![node("n1"), node("n2"), node("n3")];
        let mut drbd = instance("d1", "n1", 512);
        drbd.disk_template = crate::ganeti::DiskTemplate::Drbd;
        drbd.secondary_nodes = vec!["n2".into()];
        let instances = vec![drbd];
        let mut evacuation = incident_on(1, &nodes[0], Action::Evacuate, 1.0);
        evacuation.repair_status = RepairStatus::Pending;
        let live = incident_on(2, &nodes[1], Action::LiveRepair, 2.0);
        let incidents = [evacuation.clone(), live.clone()];
        // The peer is not held by the evacuation; its live repair holds it itself once running.
        assert_eq!(touches(&incidents, &nodes, &instances), []);
        let mut running = live.clone();
        running.repair_status = RepairStatus::Pending;
        assert_eq!(
            touches(&[evacuation.clone(), running], &nodes, &instances),
            [("n2".to_owned(), Holder::Incident { id: live.uuid })]
        );
        let view = View::from_cluster(
            &nodes,
            &instances,
            &BTreeMap::new(),
            &DomainSource::NodeGroup,
            Vec::new(),
            1_000,
        );
        let in_force = InForce::new(&view, holds(&incidents, &nodes))
            .with_touched(&view, touches(&incidents, &nodes, &instances));
        let proposals = propose(
            &incidents,
            &nodes,
            &instances,
            &BTreeSet::from([evacuation.uuid]),
            Hold::none(),
        )
        .proposals;
        let decision = gate::decide(&view, &Policy::default(), &in_force, proposals);
        assert!(
            matches!(
                decision
                    .of(&Holder::Incident { id: live.uuid })
                    .map(|j| j.outcome.clone()),
                Some(Ok(Admitted::New))
            ),
            "{decision:#?}"
        );
        // Without the live repair, the evacuation holds its instance's peer.
        assert_eq!(
            touches(&[evacuation.clone()], &nodes, &instances),
            [(
                "n2".to_owned(),
                Holder::Incident {
                    id: evacuation.uuid
                }
            )]
        );
    }

    /// Two evacuations never act on one instance: while an evacuation runs, the other nodes of
    /// the instances still on its node (DRBD peers) are held, so an evacuation of a peer in the
    /// same failure domain waits for it (seeds 133 and 143 of the all-duties run: one
    /// evacuation re-mirrored an instance whose primary the other drained).
    #[test]
    fn a_running_evacuation_holds_the_peers_of_its_instances() {
        use crate::gate::{self, Admitted, BlockedBy, Caps, DomainSource, InForce, Policy, View};
        let nodes = vec![node("n1"), node("n2"), node("n3"), node("n4")];
        let mut drbd = instance("d1", "n2", 512);
        drbd.disk_template = crate::ganeti::DiskTemplate::Drbd;
        drbd.secondary_nodes = vec!["n1".into()];
        let instances = vec![drbd, instance("l3", "n3", 256)];
        let mut first = incident_on(1, &nodes[0], Action::Evacuate, 1.0);
        first.repair_status = RepairStatus::Pending;
        let second = incident_on(2, &nodes[1], Action::Evacuate, 2.0);
        let third = incident_on(3, &nodes[2], Action::Evacuate, 3.0);
        let incidents = [first.clone(), second.clone(), third.clone()];
        assert_eq!(
            touches(&incidents, &nodes, &instances),
            [("n2".to_owned(), Holder::Incident { id: first.uuid })]
        );
        let view = View::from_cluster(
            &nodes,
            &instances,
            &BTreeMap::new(),
            &DomainSource::NodeGroup,
            Vec::new(),
            1_000,
        );
        let in_force = InForce::new(&view, holds(&incidents, &nodes))
            .with_touched(&view, touches(&incidents, &nodes, &instances));
        let policy = Policy {
            cluster: Caps {
                max_disrupted_nodes: 3,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
            ..Policy::default()
        };
        let proposals = propose(
            &incidents,
            &nodes,
            &instances,
            &BTreeSet::from([first.uuid]),
            Hold::none(),
        )
        .proposals;
        let decision = gate::decide(&view, &policy, &in_force, proposals);
        let outcome = |id| {
            decision
                .of(&Holder::Incident { id })
                .map(|j| j.outcome.clone())
        };
        assert_eq!(outcome(first.uuid), Some(Ok(Admitted::Continuation)));
        assert_eq!(
            outcome(second.uuid),
            Some(Err(BlockedBy::Conflict {
                node: "n2".into(),
                holder: format!("incident {}", first.uuid),
            }))
        );
        // A node sharing no instance with it is not held.
        assert_eq!(outcome(third.uuid), Some(Ok(Admitted::New)));
        // Neither begun (one round admits both): the second waits for the first (seed 151).
        let mut noted = first.clone();
        noted.repair_status = RepairStatus::Noted;
        let out = propose(
            &[noted.clone(), second.clone(), third.clone()],
            &nodes,
            &instances,
            &BTreeSet::new(),
            Hold::none(),
        );
        let proposed: Vec<Holder> = out.proposals.iter().map(|p| p.holder.clone()).collect();
        assert_eq!(
            proposed,
            [
                Holder::Incident { id: noted.uuid },
                Holder::Incident { id: third.uuid }
            ]
        );
        assert_eq!(
            out.waiting,
            [(
                second.uuid,
                format!(
                    "incident {} evacuating n1, which shares instance d1 with this node, starts first",
                    noted.uuid
                )
            )]
        );
        // Once the instance left its node, the peer is free again.
        let mut moved = instances.clone();
        moved[0].secondary_nodes = vec!["n4".into()];
        assert!(touches(&incidents, &nodes, &moved).is_empty());
        // The target of a move in flight (the new secondary n4, seed 151; a shared-storage
        // migration's target, seed 138) is held too: an evacuation of it waits.
        let replace = crate::plan::Move::ReplaceSecondary {
            instance: "d1".into(),
            remote_node: "n4".into(),
            replaces: None,
        };
        let held = move_targets([(first.uuid, &replace)]);
        assert_eq!(
            held,
            [("n4".to_owned(), Holder::Incident { id: first.uuid })]
        );
        let fourth = incident_on(4, &nodes[3], Action::Evacuate, 4.0);
        let in_force = InForce::new(&view, holds(&incidents, &nodes)).with_touched(&view, held);
        let proposals = propose(
            std::slice::from_ref(&fourth),
            &nodes,
            &instances,
            &BTreeSet::new(),
            Hold::none(),
        )
        .proposals;
        let decision = gate::decide(&view, &policy, &in_force, proposals);
        assert_eq!(
            decision
                .of(&Holder::Incident { id: fourth.uuid })
                .map(|j| j.outcome.clone()),
            Some(Err(BlockedBy::Conflict {
                node: "n4".into(),
                holder: format!("incident {}", first.uuid),
            }))
        );
        let migrate = crate::plan::Move::Migrate {
            instance: "d1".into(),
            target: None,
        };
        assert!(move_targets([(first.uuid, &migrate)]).is_empty());
    }

    /// Issue 25 (3): a live repair in progress holds its node only: it opens no failure
    /// domain and uses no cap, so an evacuation elsewhere may start (with the disruptions in
    /// force built as the round builds them).
    #[test]
    fn a_live_repair_in_progress_holds_its_node_only() {
        use crate::gate::{self, Admitted, Caps, DomainSource, InForce, Policy, View};
        let mut nodes = vec![node("n1"), node("n2"), node("n3"), node("n4")];
        for (n, rack) in nodes
            .iter_mut()
            .zip(["rack:a", "rack:a", "rack:b", "rack:b"])
        {
            n.tags = vec![rack.to_owned()];
        }
        let mut live = incident_on(1, &nodes[0], Action::LiveRepair, 1.0);
        live.repair_status = RepairStatus::Pending;
        let evacuate = incident_on(2, &nodes[2], Action::Evacuate, 2.0);
        let incidents = [live.clone(), evacuate.clone()];
        let view = View::from_cluster(
            &nodes,
            &[],
            &BTreeMap::new(),
            &DomainSource::TagPrefix("rack:".into()),
            Vec::new(),
            1_000,
        );
        let in_force = InForce::new(&view, holds(&incidents, &nodes))
            .with_touched(&view, touches(&incidents, &nodes, &[]));
        let policy = Policy {
            cluster: Caps {
                max_disrupted_nodes: 1,
                max_disrupted_percent: None,
                min_healthy_nodes: 2,
            },
            ..Policy::default()
        };
        let proposals = propose(&incidents, &nodes, &[], &BTreeSet::new(), Hold::none()).proposals;
        let decision = gate::decide(&view, &policy, &in_force, proposals);
        let outcome = |id| {
            decision
                .of(&Holder::Incident { id })
                .map(|j| j.outcome.clone())
        };
        assert_eq!(outcome(evacuate.uuid), Some(Ok(Admitted::New)));
        // It goes on, even while the storm breaker is open: work in flight finishes.
        assert_eq!(outcome(live.uuid), Some(Ok(Admitted::Continuation)));
        let stormy = Policy {
            breaker: Some("storm".into()),
            ..policy.clone()
        };
        let proposals = propose(&incidents, &nodes, &[], &BTreeSet::new(), Hold::none()).proposals;
        let decision = gate::decide(&view, &stormy, &in_force, proposals);
        assert_eq!(
            decision
                .of(&Holder::Incident { id: live.uuid })
                .map(|j| j.outcome.clone()),
            Some(Ok(Admitted::Continuation))
        );
        // It still holds its node: nothing else acts there.
        let grant = gate::Proposal {
            duty: gate::Duty::Admission,
            holder: Holder::Grant {
                id: Uuid::from_u128(9),
                requester: "kured".into(),
            },
            subject: "node n1".into(),
            invasiveness: 0,
            since_ms: 0,
            disrupts: BTreeSet::from(["n1".to_owned()]),
            touches: BTreeSet::new(),
            fresh: false,
            moves_memory: Some(0),
            after_releases: BTreeMap::new(),
            reason: "reboot".into(),
        };
        let decision = gate::decide(&view, &policy, &in_force, vec![grant]);
        assert_eq!(
            decision.judgements[0]
                .outcome
                .clone()
                .map_err(|b| b.to_string()),
            Err(format!("n1 is held by incident {}", live.uuid))
        );
        assert!(in_force.domains(&view).is_empty(), "no domain is open");
    }

    #[test]
    fn pending_and_unacknowledged_drained_nodes_are_held() {
        let mut nodes = vec![node("n1"), node("n2"), node("n3")];
        nodes[1].drained = true;
        let mut pending = incident_on(1, &nodes[0], Action::Evacuate, 1.0);
        pending.repair_status = RepairStatus::Pending;
        let mut done = incident_on(2, &nodes[1], Action::Evacuate, 2.0);
        done.repair_status = RepairStatus::Completed;
        let noted = incident_on(3, &nodes[2], Action::Evacuate, 3.0);
        let mut acked = done.clone();
        acked.acknowledged = true;
        assert_eq!(
            holds(&[pending.clone(), done.clone(), noted.clone()], &nodes),
            [
                ("n1".to_owned(), Holder::Incident { id: pending.uuid }),
                ("n2".to_owned(), Holder::Incident { id: done.uuid })
            ]
        );
        assert_eq!(holds(&[acked], &nodes), []);
    }
}
