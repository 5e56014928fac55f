//! Two failing nodes that share DRBD instances, round after round through the duty's
//! proposals, the gate and the planner (pure): in either order, with equal or different
//! verdicts, both evacuations end (under cap 1, or with the nodes in two failure domains, the
//! second once the first node is back in service), no instance is moved by both in a round,
//! and the budgets hold at every round.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{Hold, holds, propose, touches};
use crate::ganeti::{DiskTemplate, Instance, Node};
use crate::gate::{self, Caps, DomainSource, Holder, InForce, Policy, View};
use crate::incident::{Action, Incident, RepairStatus};
use crate::plan::tests_support::{incident_on, instance, node};
use crate::plan::{EvacuationStep, Move, Round};

/// When the second failure is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    Together,
    TwoFirst,
    ThreeFirst,
}

const ROUNDS: usize = 30;

fn drbd(name: &str, primary: &str, secondary: &str) -> Instance {
    let mut i = instance(name, primary, 512);
    i.disk_template = DiskTemplate::Drbd;
    i.secondary_nodes = vec![secondary.into()];
    i.disk_sizes = vec![1024];
    i
}

/// The cluster: n2 is the primary of `a` and `b` (secondary n3) and the secondary of `c`
/// (primary n3); `d` on n3 and n4, `e` on n4 and n5, `f` diskless on n5.
fn cluster() -> (Vec<Node>, Vec<Instance>) {
    let nodes = ["n1", "n2", "n3", "n4", "n5"].map(node).to_vec();
    let instances = vec![
        drbd("a", "n2", "n3"),
        drbd("b", "n2", "n3"),
        drbd("c", "n3", "n2"),
        drbd("d", "n3", "n4"),
        drbd("e", "n4", "n5"),
        instance("f", "n5", 512),
    ];
    (nodes, instances)
}

/// What Ganeti would do with a move, refusing what it refuses.
fn apply(step: &Move, nodes: &[Node], instances: &mut [Instance], case: &str) {
    let usable = |name: &str| {
        nodes
            .iter()
            .any(|n| n.name == name && !n.drained && !n.offline)
    };
    let Some(i) = instances.iter_mut().find(|i| i.name == step.instance()) else {
        panic!("{case}: no instance {}", step.instance());
    };
    match step {
        Move::Migrate { target, .. } | Move::Failover { target, .. } => {
            let to = match target {
                Some(target) => target.clone(),
                None => {
                    let secondary = i.secondary_nodes[0].clone();
                    i.secondary_nodes = vec![i.primary_node.clone()];
                    secondary
                }
            };
            assert!(usable(&to), "{case}: {step:?} onto {to}, out of service");
            i.primary_node = to;
        }
        Move::ReplaceSecondary { remote_node, .. } => {
            assert!(
                usable(remote_node) && *remote_node != i.primary_node,
                "{case}: {step:?}"
            );
            i.secondary_nodes = vec![remote_node.clone()];
        }
    }
}

/// The free memory Ganeti reports: what the running primaries leave.
fn refresh_memory(nodes: &mut [Node], instances: &[Instance]) {
    for n in nodes.iter_mut() {
        let used: u64 = instances
            .iter()
            .filter(|i| i.primary_node == n.name)
            .filter_map(|i| i.memory)
            .sum();
        n.memory_free = n.memory_total.map(|t| t.saturating_sub(used));
    }
}

struct Sim {
    nodes: Vec<Node>,
    instances: Vec<Instance>,
    incidents: Vec<Incident>,
    begun: BTreeSet<Uuid>,
    policy: Policy,
    domains: DomainSource,
    chains: bool,
    case: String,
}

impl Sim {
    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// One round: proposals, the gate, then each admitted evacuation's step, its jobs run to
    /// the end (as the simulated Ganeti does between rounds).
    fn round(&mut self, round: usize) {
        refresh_memory(&mut self.nodes, &self.instances);
        let view = View::from_cluster(
            &self.nodes,
            &self.instances,
            &BTreeMap::new(),
            &self.domains,
            Vec::new(),
            1_000,
        );
        let in_force = InForce::new(&view, holds(&self.incidents, &self.nodes)).with_touched(
            &view,
            touches(&self.incidents, &self.nodes, &self.instances),
        );
        let proposals = propose(
            &self.incidents,
            &self.nodes,
            &self.instances,
            &self.begun,
            Hold::none(),
        );
        let decision = gate::decide(&view, &self.policy, &in_force, proposals.proposals);
        let active = |evacuation: bool| -> Vec<String> {
            self.incidents
                .iter()
                .filter(|i| i.is_active() && (!evacuation || i.action.is_evacuation()))
                .map(|i| i.node.clone())
                .collect()
        };
        let mut planner = Round::new(
            &self.nodes,
            &self.instances,
            [],
            decision.in_force.nodes.keys().cloned(),
        )
        .with_active_incidents(active(false))
        .with_active_evacuations(active(true));
        let mut steps: Vec<(Uuid, String, EvacuationStep)> = Vec::new();
        for judgement in &decision.judgements {
            let (Holder::Incident { id }, Ok(_)) = (&judgement.proposal.holder, &judgement.outcome)
            else {
                continue;
            };
            let Some(incident) = self.incidents.iter().find(|i| i.uuid == *id) else {
                continue;
            };
            let failover = incident.action == Action::EvacuateFailover;
            let step = if self.chains {
                planner.plan_evacuation_chain(&incident.node, failover)
            } else {
                planner.plan_evacuation(&incident.node, failover)
            };
            steps.push((*id, incident.node.clone(), step));
        }
        drop(planner);
        let mut moved: BTreeMap<String, Uuid> = BTreeMap::new();
        for (id, name, step) in steps {
            let mut moves: Vec<Move> = Vec::new();
            let mut finish = false;
            let mut failed = None;
            match step {
                EvacuationStep::Drain => self.node_mut(&name).drained = true,
                EvacuationStep::Moves(planned) => {
                    moves.extend(planned.into_iter().map(|p| p.action));
                }
                EvacuationStep::Chain(chain) => {
                    if chain.drain {
                        self.node_mut(&name).drained = true;
                    }
                    moves.extend(chain.waves.into_iter().flatten().map(|p| p.action));
                    finish = chain.tag;
                }
                EvacuationStep::Done => finish = true,
                EvacuationStep::Wait(_) => {}
                EvacuationStep::Fail(why) => failed = Some(why),
            }
            for step in &moves {
                // One incident moves an instance in a round, never two.
                let owner = moved.entry(step.instance().to_owned()).or_insert(id);
                assert_eq!(*owner, id, "{}: {} moved twice", self.case, step.instance());
                apply(step, &self.nodes, &mut self.instances, &self.case);
            }
            let incident = self
                .incidents
                .iter_mut()
                .find(|i| i.uuid == id)
                .unwrap_or_else(|| panic!("no incident {id}"));
            self.begun.insert(id);
            incident.repair_status = if let Some(why) = failed {
                incident.failure = Some(why);
                RepairStatus::Failed
            } else if finish {
                RepairStatus::Completed
            } else {
                RepairStatus::Pending
            };
            if finish {
                let n = self.node_mut(&name);
                n.offline = true;
                n.drained = false;
            }
        }
        self.check_budgets(round);
    }

    fn check_budgets(&self, round: usize) {
        let out: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.drained || n.offline)
            .map(|n| n.name.as_str())
            .collect();
        let cap = self.policy.cluster.max_disrupted_nodes;
        assert!(
            out.len() <= cap,
            "{}, round {round}: {out:?} out of service",
            self.case
        );
        assert!(
            self.nodes.len() - out.len() >= self.policy.cluster.min_healthy_nodes,
            "{}, round {round}: {out:?} out of service",
            self.case
        );
        for n in &self.nodes {
            let used: u64 = self
                .instances
                .iter()
                .filter(|i| i.primary_node == n.name)
                .filter_map(|i| i.memory)
                .sum();
            assert!(
                n.memory_total.is_some_and(|t| used <= t),
                "{}, round {round}: {used} MiB on {}",
                self.case,
                n.name
            );
            if n.offline {
                assert!(
                    self.instances.iter().all(|i| i.primary_node != n.name),
                    "{}, round {round}: an instance on offline {}",
                    self.case,
                    n.name
                );
            }
        }
    }

    fn status(&self, name: &str) -> Option<RepairStatus> {
        self.incidents
            .iter()
            .find(|i| i.node == name)
            .map(|i| i.repair_status)
    }

    /// Rounds until `done`; whether it came within [`ROUNDS`].
    fn until(&mut self, done: impl Fn(&Self) -> bool) -> bool {
        for round in 0..ROUNDS {
            if done(self) {
                return true;
            }
            self.round(round);
        }
        done(self)
    }

    fn emptied(&self, name: &str) -> bool {
        self.instances
            .iter()
            .all(|i| i.primary_node != name && !i.secondary_nodes.iter().any(|s| s == name))
    }

    fn summary(&self) -> String {
        format!(
            "{:#?}\n{:#?}",
            self.incidents
                .iter()
                .map(|i| (&i.node, i.repair_status, &i.failure))
                .collect::<Vec<_>>(),
            self.instances
                .iter()
                .map(|i| (&i.name, &i.primary_node, &i.secondary_nodes))
                .collect::<Vec<_>>()
        )
    }
}

fn action(verdict: &str) -> Action {
    if verdict == "evacuate-failover" {
        Action::EvacuateFailover
    } else {
        Action::Evacuate
    }
}

/// `racks`: n2 in failure domain `rack:a` (with n1), n3 in `rack:b` (with n4 and n5).
fn one_case(chains: bool, cap: usize, racks: bool, arrival: Arrival, two: &str, three: &str) {
    let case =
        format!("chains {chains}, cap {cap}, racks {racks}, {arrival:?}, n2 {two}, n3 {three}");
    let (mut nodes, instances) = cluster();
    let domains = if racks {
        for (n, rack) in nodes.iter_mut().zip(["a", "a", "b", "b", "b"]) {
            n.tags.push(format!("rack:{rack}"));
        }
        DomainSource::TagPrefix("rack:".into())
    } else {
        DomainSource::NodeGroup
    };
    let mut sim = Sim {
        incidents: Vec::new(),
        begun: BTreeSet::new(),
        policy: Policy {
            cluster: Caps {
                max_disrupted_nodes: cap,
                max_disrupted_percent: None,
                min_healthy_nodes: 2,
            },
            ..Policy::default()
        },
        domains,
        chains,
        case: case.clone(),
        nodes,
        instances,
    };
    let open = |sim: &mut Sim, n: usize, verdict: &str, at: f64| {
        let incident = incident_on(
            u128::try_from(n).unwrap_or_default(),
            &sim.nodes[n - 1],
            action(verdict),
            at,
        );
        sim.incidents.push(incident);
    };
    match arrival {
        Arrival::Together => {
            open(&mut sim, 2, two, 1.0);
            open(&mut sim, 3, three, 1.0);
        }
        Arrival::TwoFirst | Arrival::ThreeFirst => {
            let ((first, v1), (second, v2)) = if arrival == Arrival::TwoFirst {
                ((2, two), (3, three))
            } else {
                ((3, three), (2, two))
            };
            open(&mut sim, first, v1, 1.0);
            // The second is seen once the first's node is drained, before its moves.
            sim.round(0);
            assert_eq!(
                sim.status(&format!("n{first}")),
                Some(RepairStatus::Pending),
                "{case}"
            );
            open(&mut sim, second, v2, 2.0);
        }
    }
    let ended = |s: &Sim, n: &str| {
        matches!(
            s.status(n),
            Some(RepairStatus::Completed | RepairStatus::Failed)
        )
    };
    // One node out of service at a time (one by the cap, one failure domain at a time): the
    // second waits until the operator returns the first to service.
    if cap == 1 || racks {
        assert!(
            sim.until(|s| ended(s, "n2") || ended(s, "n3")),
            "{case}: {}",
            sim.summary()
        );
        let (done, waiting) = if ended(&sim, "n2") {
            ("n2", "n3")
        } else {
            ("n3", "n2")
        };
        assert_eq!(
            sim.status(done),
            Some(RepairStatus::Completed),
            "{case}: {}",
            sim.summary()
        );
        assert!(sim.emptied(done), "{case}: {}", sim.summary());
        // The operator returns the repaired node to service; the second goes.
        {
            let n = sim.node_mut(done);
            n.offline = false;
            n.drained = false;
        }
        for i in &mut sim.incidents {
            if i.node == done {
                i.acknowledged = true;
            }
        }
        assert!(
            sim.until(|s| ended(s, waiting)),
            "{case}: {}",
            sim.summary()
        );
        assert_eq!(
            sim.status(waiting),
            Some(RepairStatus::Completed),
            "{case}: {}",
            sim.summary()
        );
        assert!(sim.emptied(waiting), "{case}: {}", sim.summary());
    } else {
        assert!(
            sim.until(|s| ended(s, "n2") && ended(s, "n3")),
            "{case}: {}",
            sim.summary()
        );
        for n in ["n2", "n3"] {
            assert_eq!(
                sim.status(n),
                Some(RepairStatus::Completed),
                "{case}: {}",
                sim.summary()
            );
            assert!(sim.emptied(n), "{case}: {}", sim.summary());
        }
    }
}

#[test]
fn two_failing_drbd_peers_are_both_evacuated() {
    let verdicts = [
        ("evacuate", "evacuate"),
        ("evacuate", "evacuate-failover"),
        ("evacuate-failover", "evacuate"),
    ];
    let mut failed = Vec::new();
    for chains in [true, false] {
        for (cap, racks) in [(1, false), (2, false), (2, true)] {
            for arrival in [Arrival::Together, Arrival::TwoFirst, Arrival::ThreeFirst] {
                for (two, three) in verdicts {
                    let outcome = std::panic::catch_unwind(|| {
                        one_case(chains, cap, racks, arrival, two, three);
                    });
                    if let Err(panic) = outcome {
                        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
                        failed.push(message.lines().next().unwrap_or_default().to_owned());
                    }
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} cases failed: {failed:#?}",
        failed.len()
    );
}
