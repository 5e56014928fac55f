//! The rolling-maintenance duty: a campaign due for its next reboot group proposes the group's
//! nodes to the gate (pure). The gate judges it with the other duties' proposals (after node and
//! instance repairs, before balancing); a refused group waits, its campaign showing what blocks
//! it. A group in flight is not proposed again: its nodes are held by the campaign
//! ([`crate::campaign::Record::holds`]) until each is undrained (its original primaries then
//! migrate back while the next group may already be proposed). The next group is proposed as
//! soon as the last undrains are submitted, to run after them
//! ([`crate::gate::Proposal::after_releases`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::campaign::{PlannedMove, Record, World};
use crate::gate::{Duty, Holder, Proposal, View};

/// The proposal of `record`'s next group (the first planned one), when it is due (`world`:
/// the instances' memory, for what migrates back onto nodes it releases first, and their
/// secondaries; `moves`: the group's planned moves by node). The nodes its moves go to are
/// touched: a group is not admitted while another holder (a grant, an evacuation) holds one.
pub fn propose(
    record: &Record,
    view: &View,
    world: &World,
    moves: &BTreeMap<String, Vec<PlannedMove>>,
) -> Option<Proposal> {
    if !record.needs_group() {
        return None;
    }
    let group = record.campaign.planned.first()?;
    let disrupts: BTreeSet<String> = group.iter().cloned().collect();
    let touches: BTreeSet<String> = group
        .iter()
        .filter_map(|node| moves.get(node))
        .flatten()
        .flat_map(|mv| mv.target.iter().chain(mv.new_secondary.iter()).cloned())
        // A running mirrored instance migrates to its secondary as Ganeti shows it now, whether
        // the plan lists its move (hroller's does not) or not, and whatever secondary the plan
        // saw: the group touches it too.
        .chain(
            world
                .instances
                .values()
                .filter(|i| i.running && i.mirrored && disrupts.contains(&i.primary))
                .flat_map(|i| i.secondaries.iter().cloned()),
        )
        .filter(|node| !disrupts.contains(node))
        .collect();
    // The memory of the running primaries that move off the group (N+1 on the rest); unknown
    // when a node or an instance size is unknown.
    let moves_memory = group.iter().try_fold(0u64, |sum, node| {
        view.nodes
            .get(node)
            .and_then(|facts| facts.primary_memory)
            .map(|memory| sum.saturating_add(memory))
    });
    let index = record.campaign.groups.len();
    Some(Proposal {
        duty: Duty::Maintenance,
        holder: Holder::Campaign { id: record.id() },
        subject: format!(
            "reboot group {} of {} ({})",
            index + 1,
            record.campaign.groups_total(),
            group.join(", ")
        ),
        invasiveness: 2,
        since_ms: record.campaign.created_ms,
        disrupts,
        touches,
        fresh: false,
        moves_memory,
        // A group proposed while the previous group's undrains run starts after them.
        after_releases: record
            .releasing_with_arrivals(|i| world.instances.get(i).and_then(|i| i.memory)),
        reason: format!(
            "maintenance campaign {} ({})",
            record.campaign.id,
            record
                .campaign
                .request
                .reason
                .as_deref()
                .unwrap_or(&record.campaign.request.hook)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::World;
    use crate::gate::{self, Caps, InForce, NodeFacts, Policy};
    use nodecare_protocol::maintenance::CampaignRequest;
    use uuid::Uuid;

    fn view(nodes: &[(&str, &str, Option<u64>)]) -> View {
        View {
            nodes: nodes
                .iter()
                .map(|(name, domain, memory)| {
                    (
                        (*name).to_owned(),
                        NodeFacts {
                            name: (*name).to_owned(),
                            group: "default".into(),
                            domain: (*domain).to_owned(),
                            vm_capable: true,
                            drained: false,
                            offline: false,
                            master: false,
                            memory_free: Some(100_000),
                            primary_memory: *memory,
                            primaries: 0,
                        },
                    )
                })
                .collect(),
            storage: Vec::new(),
            now_ms: 1,
        }
    }

    fn record(groups: Vec<Vec<&str>>) -> Record {
        let mut r = Record::new(Uuid::from_u128(9), CampaignRequest::new("reboot"), "a", 1);
        r.set_plan(
            groups
                .into_iter()
                .map(|g| g.into_iter().map(str::to_owned).collect())
                .collect(),
            vec![],
            &World::default(),
        );
        r
    }

    #[test]
    fn proposes_the_next_group_with_its_memory() {
        let v = view(&[
            ("n1", "rack:a", Some(1024)),
            ("n2", "rack:a", Some(512)),
            ("n3", "rack:b", None),
        ]);
        let p = propose(
            &record(vec![vec!["n1", "n2"], vec!["n3"]]),
            &v,
            &World::default(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(p.duty, Duty::Maintenance);
        assert_eq!(
            p.holder,
            Holder::Campaign {
                id: Uuid::from_u128(9)
            }
        );
        assert_eq!(p.disrupts, BTreeSet::from(["n1".into(), "n2".into()]));
        assert_eq!(p.moves_memory, Some(1536));
        assert_eq!(p.subject, "reboot group 1 of 2 (n1, n2)");
        // Unknown memory is unknown, never zero.
        let p = propose(
            &record(vec![vec!["n3"]]),
            &v,
            &World::default(),
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(p.moves_memory, None);
    }

    /// The nodes a group's moves go to (a shared instance's target, a new secondary, a mirrored
    /// instance's secondary) are touched: held by another holder (a grant), the group waits,
    /// naming it.
    #[test]
    fn a_group_whose_moves_go_to_a_held_node_waits_for_it() {
        let v = view(&[
            ("n1", "rack:a", Some(512)),
            ("n2", "rack:b", Some(1)),
            ("n3", "rack:b", Some(1)),
            ("n4", "rack:b", Some(1)),
        ]);
        let mut world = World::default();
        world.instances.insert(
            "d1".into(),
            crate::campaign::InstanceNow {
                primary: "n1".into(),
                secondaries: vec!["n2".into()],
                running: true,
                mirrored: true,
                memory: Some(256),
                local: false,
            },
        );
        let moves = BTreeMap::from([(
            "n1".to_owned(),
            vec![
                PlannedMove {
                    instance: "s1".into(),
                    target: Some("n3".into()),
                    new_secondary: None,
                },
                PlannedMove {
                    instance: "d1".into(),
                    target: None,
                    new_secondary: Some("n4".into()),
                },
            ],
        )]);
        let p = propose(&record(vec![vec!["n1"]]), &v, &world, &moves).unwrap();
        assert_eq!(
            p.touches,
            BTreeSet::from(["n2".into(), "n3".into(), "n4".into()])
        );
        let policy = Policy {
            cluster: Caps {
                max_disrupted_nodes: 2,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
            ..Policy::default()
        };
        let grant = Holder::Grant {
            id: Uuid::from_u128(7),
            requester: "kured".into(),
        };
        for held in ["n2", "n3", "n4"] {
            let in_force = InForce::new(&v, [(held.to_owned(), grant.clone())]);
            let d = gate::decide(&v, &policy, &in_force, vec![p.clone()]);
            assert!(
                matches!(&d.judgements[0].outcome, Err(gate::BlockedBy::Conflict { node, .. }) if node == held),
                "{held}: {:?}",
                d.judgements[0].outcome
            );
        }
        let d = gate::decide(&v, &policy, &InForce::default(), vec![p]);
        assert!(
            d.judgements[0].outcome.is_ok(),
            "{:?}",
            d.judgements[0].outcome
        );
    }

    /// A running mirrored instance on the group's nodes migrates to its secondary as Ganeti
    /// shows it now, whether the plan lists its move (hroller's does not) or not, and with
    /// whatever secondary the plan saw: the group touches it, and an evacuation admitted on it
    /// in the same round blocks the group (seed 1449 of the safety checker: a campaign migrated
    /// a DRBD instance onto a node an incident was draining).
    #[test]
    fn a_mirrored_move_touches_the_secondary_as_it_is_now() {
        let v = view(&[
            ("n1", "rack:a", Some(512)),
            ("n2", "rack:b", Some(1)),
            ("n3", "rack:c", Some(1)),
        ]);
        let mut world = World::default();
        world.instances.insert(
            "d1".into(),
            crate::campaign::InstanceNow {
                primary: "n1".into(),
                secondaries: vec!["n3".into()],
                running: true,
                mirrored: true,
                memory: Some(256),
                local: false,
            },
        );
        // As hroller plans it: no move listed for the mirrored instance.
        let p = propose(&record(vec![vec!["n1"]]), &v, &world, &BTreeMap::new()).unwrap();
        assert_eq!(p.touches, BTreeSet::from(["n3".into()]));
        // Listed with the secondary it had when the group was planned: both.
        let moves = BTreeMap::from([(
            "n1".to_owned(),
            vec![PlannedMove {
                instance: "d1".into(),
                target: Some("n2".into()),
                new_secondary: None,
            }],
        )]);
        let p = propose(&record(vec![vec!["n1"]]), &v, &world, &moves).unwrap();
        assert_eq!(p.touches, BTreeSet::from(["n2".into(), "n3".into()]));
        let evacuation = Proposal {
            duty: Duty::NodeRepair,
            holder: Holder::Incident {
                id: Uuid::from_u128(9),
            },
            subject: "n3".into(),
            invasiveness: 3,
            since_ms: 0,
            disrupts: BTreeSet::from(["n3".into()]),
            touches: BTreeSet::new(),
            fresh: true,
            moves_memory: Some(0),
            after_releases: BTreeMap::new(),
            reason: "evacuate".into(),
        };
        let policy = Policy {
            cluster: Caps {
                max_disrupted_nodes: 3,
                max_disrupted_percent: None,
                min_healthy_nodes: 0,
            },
            ..Policy::default()
        };
        let d = gate::decide(&v, &policy, &InForce::default(), vec![evacuation, p]);
        assert!(d.judgements[0].outcome.is_ok(), "{:?}", d.judgements[0]);
        assert!(
            matches!(&d.judgements[1].outcome, Err(gate::BlockedBy::Conflict { node, .. }) if node == "n3"),
            "{:?}",
            d.judgements[1].outcome
        );
    }

    #[test]
    fn nothing_when_not_due() {
        let v = view(&[("n1", "rack:a", Some(1))]);
        assert!(propose(&record(vec![]), &v, &World::default(), &BTreeMap::new()).is_none());
        let mut paused = record(vec![vec!["n1"]]);
        paused.pause(2).unwrap();
        assert!(propose(&paused, &v, &World::default(), &BTreeMap::new()).is_none());
    }

    /// The gate judges a group with the others: two nodes of one domain under a cap of one are
    /// refused (the group waits), under a cap of two admitted; another domain disrupted
    /// blocks it.
    #[test]
    fn the_gate_judges_groups_like_any_disruption() {
        let v = view(&[
            ("n1", "rack:a", Some(1)),
            ("n2", "rack:a", Some(1)),
            ("n3", "rack:b", Some(1)),
            ("n4", "rack:b", Some(1)),
        ]);
        let p = propose(
            &record(vec![vec!["n1", "n2"]]),
            &v,
            &World::default(),
            &BTreeMap::new(),
        )
        .unwrap();
        let policy = |max: usize| Policy {
            cluster: Caps {
                max_disrupted_nodes: max,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
            ..Policy::default()
        };
        let none = InForce::default();
        let d = gate::decide(&v, &policy(1), &none, vec![p.clone()]);
        assert!(matches!(
            d.judgements[0].outcome,
            Err(gate::BlockedBy::Cap { .. })
        ));
        let d = gate::decide(&v, &policy(2), &none, vec![p.clone()]);
        assert!(d.judgements[0].outcome.is_ok());
        let busy = InForce::new(
            &v,
            [(
                "n3".to_owned(),
                Holder::Incident {
                    id: Uuid::from_u128(1),
                },
            )],
        );
        let d = gate::decide(&v, &policy(3), &busy, vec![p]);
        assert!(matches!(
            d.judgements[0].outcome,
            Err(gate::BlockedBy::Domain { .. })
        ));
    }
}
