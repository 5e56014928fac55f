//! What verified verdicts do to incidents (pure): a verdict matching an incident observes it, a
//! verdict no longer seen lets it go, a new actionable verdict opens an incident or escalates
//! the node's open one (never de-escalates it), and nothing new starts on a node in the grace
//! of a planned disruption. An unknown verdict says nothing about whether a problem is gone, so
//! it changes nothing; agents that gave no verified report are not given to this function.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use nodecare_protocol::{CanonicalJson, DiagnoseStatus, NodeVerdict};

use super::intent::escalation_target;
use crate::incident::{Action, Disposition, Event, Incident};

/// One node's verified, fresh verdict of this round.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The node's uuid.
    pub node_uuid: &'a str,
    /// Its verdict.
    pub verdict: &'a NodeVerdict,
    /// The verdict exactly as signed.
    pub original: &'a CanonicalJson,
}

/// What the round knows besides the verdicts.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// Nodes in the grace of a planned disruption, until when (Unix ms).
    pub graced: &'a BTreeMap<String, u64>,
    /// Incidents whose tag job is in flight (about to complete).
    pub tagging: &'a BTreeSet<Uuid>,
    /// Incidents with Ganeti jobs in flight, or a repair command the agent may be running:
    /// kept, whatever their state, until these end.
    pub in_flight: &'a BTreeSet<Uuid>,
    /// The round's time (Unix seconds).
    pub time: f64,
    /// The nodes' repair history ([`super::ladder::record`]).
    pub history: &'a [super::ladder::Repaired],
    /// The escalation ladder.
    pub ladder: &'a super::ladder::LadderPolicy,
}

/// What becomes of the incidents, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed {
    /// The incident changed: store it.
    Save(Incident),
    /// The incident is over: forget it.
    Forget(Incident),
    /// A new incident: store it.
    Open(Incident),
    /// The incident was escalated (its `Save` follows).
    Escalated {
        /// The incident.
        incident: Uuid,
        /// Its node.
        node: String,
        /// Its action before.
        from: Action,
        /// Its action now.
        to: Action,
    },
    /// A more invasive verdict waits for the incident's tag job (its live repair succeeded:
    /// it completes, and the next round opens a new incident).
    WaitsForTag {
        /// The incident.
        incident: Uuid,
        /// Its node.
        node: String,
    },
    /// A new incident opened with a more invasive action than its verdict asks, by the node's
    /// repair history (its `Open` came before).
    Laddered {
        /// The incident.
        incident: Uuid,
        /// Its node.
        node: String,
        /// Why, as a label and for people.
        escalation: super::ladder::Escalation,
    },
    /// An actionable verdict not acted on: the node's failure domain is in the grace of a
    /// planned disruption.
    InGrace {
        /// The node.
        node: String,
        /// The verdict's status.
        status: DiagnoseStatus,
        /// Until when (Unix ms).
        until_ms: u64,
    },
}

/// What `seen` does to `incidents` (those of nodes still in the cluster); `new_id` names new
/// incidents.
pub fn observe(
    mut incidents: Vec<Incident>,
    seen: &[Seen<'_>],
    facts: Facts<'_>,
    new_id: &mut impl FnMut() -> Uuid,
) -> Vec<Observed> {
    let mut out = Vec::new();
    for result in seen {
        let verdict = result.verdict;
        // An unknown verdict says nothing about whether the problem is gone.
        if verdict.status == DiagnoseStatus::Unknown {
            continue;
        }
        let action = Action::from_status(verdict.status);
        let matched = incidents
            .iter()
            .any(|i| i.node_uuid == result.node_uuid && i.fingerprint == verdict.fingerprint);
        let grace = facts.graced.get(result.node).copied();
        // A new, more invasive verdict escalates the node's open incident instead of opening a
        // second one; a less invasive one never de-escalates it. Not during a grace.
        let target = match action {
            Some(action) if !matched && grace.is_none() => {
                escalation_target(&incidents, result.node_uuid, action).map(|i| (i.uuid, i.action))
            }
            _ => None,
        };
        if let Some((uuid, current)) = target
            && !current.is_evacuation()
            && facts.tagging.contains(&uuid)
        {
            // An evacuation's tag ends it evacuated and offline, as the escalation wants.
            out.push(Observed::WaitsForTag {
                incident: uuid,
                node: result.node.to_owned(),
            });
            continue;
        }
        let escalated = target.map(|(uuid, _)| uuid);
        for incident in incidents
            .iter_mut()
            .filter(|i| i.node_uuid == result.node_uuid)
        {
            let event = if incident.fingerprint == verdict.fingerprint {
                Event::Observed
            } else if Some(incident.uuid) == escalated
                && let Some(action) = action
            {
                out.push(Observed::Escalated {
                    incident: incident.uuid,
                    node: incident.node.clone(),
                    from: incident.action,
                    to: action,
                });
                Event::Escalate {
                    action,
                    verdict: verdict.clone(),
                    original: result.original.clone(),
                }
            } else {
                Event::NotObserved
            };
            let before = incident.serial_no;
            match incident.apply(event, facts.time) {
                // An incident is kept until its jobs have ended: what ran is recorded, and its
                // nodes stay held while a job of it may still act there (a canceled
                // evacuation's drain, a failed one's move).
                Ok(Disposition::Forget) if facts.in_flight.contains(&incident.uuid) => {
                    out.push(Observed::Save(incident.clone()));
                }
                Ok(Disposition::Forget) => out.push(Observed::Forget(incident.clone())),
                Ok(Disposition::Keep) if incident.serial_no != before => {
                    out.push(Observed::Save(incident.clone()));
                }
                _ => {}
            }
        }
        if matched {
            continue;
        }
        if action.is_some()
            && let Some(until_ms) = grace
        {
            out.push(Observed::InGrace {
                node: result.node.to_owned(),
                status: verdict.status,
                until_ms,
            });
            continue;
        }
        if escalated.is_none()
            && let Some(action) = action
        {
            let laddered = super::ladder::escalation(
                facts.history,
                result.node_uuid,
                result.node,
                action,
                verdict.command.as_deref(),
                facts.time,
                facts.ladder,
            );
            let mut incident = Incident::new(
                new_id(),
                result.node,
                result.node_uuid,
                verdict.clone(),
                result.original.clone(),
                laddered.as_ref().map_or(action, |e| e.to),
                facts.time,
            );
            if let Some(escalation) = &laddered {
                // Recorded in its history: `incidents show`, `explain` and the page say why.
                let _kept = incident.apply(Event::Progress(escalation.said.clone()), facts.time);
            }
            incidents.push(incident.clone());
            let uuid = incident.uuid;
            out.push(Observed::Open(incident));
            if let Some(escalation) = laddered {
                out.push(Observed::Laddered {
                    incident: uuid,
                    node: result.node.to_owned(),
                    escalation,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    fn verdict(status: &str, details: &str) -> (NodeVerdict, CanonicalJson) {
        let script = format!(r#"{{"status":"{status}","command":"fix","details":"{details}"}}"#);
        let verdict = NodeVerdict::merge(
            [(
                "disk".to_owned(),
                nodecare_protocol::ScriptVerdict::parse(script.as_bytes()).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original = CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap();
        (verdict, original)
    }

    fn seen<'a>(verdict: &'a (NodeVerdict, CanonicalJson)) -> Seen<'a> {
        Seen {
            node: "node1",
            node_uuid: "uuid-node1",
            verdict: &verdict.0,
            original: &verdict.1,
        }
    }

    fn incident(status: &str, details: &str) -> Incident {
        let (v, original) = verdict(status, details);
        let action = Action::from_status(v.status).unwrap();
        Incident::new(
            Uuid::from_u128(7),
            "node1",
            "uuid-node1",
            v,
            original,
            action,
            100.0,
        )
    }

    static LADDER_OFF: super::super::ladder::LadderPolicy = super::super::ladder::LadderPolicy::OFF;

    struct World {
        graced: BTreeMap<String, u64>,
        tagging: BTreeSet<Uuid>,
        in_flight: BTreeSet<Uuid>,
    }

    impl World {
        fn new() -> Self {
            Self {
                graced: BTreeMap::new(),
                tagging: BTreeSet::new(),
                in_flight: BTreeSet::new(),
            }
        }

        fn facts(&self) -> Facts<'_> {
            Facts {
                graced: &self.graced,
                tagging: &self.tagging,
                in_flight: &self.in_flight,
                time: 200.0,
                history: &[],
                ladder: &LADDER_OFF,
            }
        }
    }

    fn run(incidents: Vec<Incident>, seen: &[Seen<'_>], world: &World) -> Vec<Observed> {
        observe(incidents, seen, world.facts(), &mut || Uuid::from_u128(99))
    }

    #[test]
    fn a_new_actionable_verdict_opens_an_incident_and_ok_opens_none() {
        let world = World::new();
        let bad = verdict("evacuate", "disk");
        let out = run(Vec::new(), &[seen(&bad)], &world);
        let [Observed::Open(opened)] = out.as_slice() else {
            panic!("one incident opened: {out:?}");
        };
        assert_eq!(opened.uuid, Uuid::from_u128(99));
        assert_eq!(opened.action, Action::Evacuate);
        assert_eq!(opened.node, "node1");
        let ok = verdict("Ok", "");
        assert_eq!(run(Vec::new(), &[seen(&ok)], &world), Vec::new());
    }

    #[test]
    fn an_unknown_verdict_changes_nothing() {
        let world = World::new();
        let unknown = {
            let v = NodeVerdict::merge(
                [(
                    "disk".to_owned(),
                    nodecare_protocol::ScriptVerdict::unknown("the script timed out"),
                )]
                .into_iter()
                .collect(),
            )
            .unwrap();
            let original = CanonicalJson::new(&serde_json::to_value(&v).unwrap()).unwrap();
            (v, original)
        };
        assert_eq!(unknown.0.status, DiagnoseStatus::Unknown);
        assert_eq!(
            run(
                vec![incident("evacuate", "disk")],
                &[seen(&unknown)],
                &world
            ),
            Vec::new()
        );
    }

    #[test]
    fn the_same_verdict_observes_its_incident_and_opens_no_second() {
        let world = World::new();
        let bad = verdict("evacuate", "disk");
        let out = run(vec![incident("evacuate", "disk")], &[seen(&bad)], &world);
        assert!(
            !out.iter().any(|o| matches!(o, Observed::Open(_))),
            "{out:?}"
        );
    }

    #[test]
    fn a_more_invasive_verdict_escalates_and_a_less_invasive_one_never_de_escalates() {
        let world = World::new();
        let worse = verdict("evacuate", "dimm");
        let out = run(
            vec![incident("live-repair", "ecc")],
            &[seen(&worse)],
            &world,
        );
        assert!(
            out.iter().any(|o| matches!(
                o,
                Observed::Escalated {
                    from: Action::LiveRepair,
                    to: Action::Evacuate,
                    ..
                }
            )),
            "{out:?}"
        );
        assert!(
            out.iter()
                .any(|o| matches!(o, Observed::Save(i) if i.action == Action::Evacuate)),
            "{out:?}"
        );
        assert!(!out.iter().any(|o| matches!(o, Observed::Open(_))));
        let milder = verdict("live-repair", "ecc");
        let out = run(vec![incident("evacuate", "dimm")], &[seen(&milder)], &world);
        assert!(
            out.iter().all(|o| !matches!(o, Observed::Escalated { .. })),
            "{out:?}"
        );
        assert!(
            out.iter()
                .all(|o| !matches!(o, Observed::Save(i) if i.action != Action::Evacuate)),
            "{out:?}"
        );
    }

    #[test]
    fn a_node_in_grace_opens_and_escalates_nothing() {
        let mut world = World::new();
        world.graced.insert("node1".into(), 5_000);
        let bad = verdict("evacuate", "disk");
        assert_eq!(
            run(Vec::new(), &[seen(&bad)], &world),
            vec![Observed::InGrace {
                node: "node1".into(),
                status: DiagnoseStatus::Evacuate,
                until_ms: 5_000
            }]
        );
        let out = run(vec![incident("live-repair", "ecc")], &[seen(&bad)], &world);
        assert!(
            out.iter()
                .all(|o| !matches!(o, Observed::Escalated { .. } | Observed::Open(_))),
            "{out:?}"
        );
    }

    #[test]
    fn a_live_repair_whose_tag_is_on_its_way_is_not_escalated() {
        let mut world = World::new();
        world.tagging.insert(Uuid::from_u128(7));
        let worse = verdict("evacuate", "dimm");
        assert_eq!(
            run(
                vec![incident("live-repair", "ecc")],
                &[seen(&worse)],
                &world
            ),
            vec![Observed::WaitsForTag {
                incident: Uuid::from_u128(7),
                node: "node1".into()
            }]
        );
    }

    #[test]
    fn a_canceled_incident_no_longer_seen_is_kept_while_its_jobs_run() {
        let mut world = World::new();
        let mut canceled = incident("evacuate", "disk");
        canceled.apply(Event::Cancel, 150.0).unwrap();
        let ok = verdict("Ok", "");
        world.in_flight.insert(canceled.uuid);
        let out = run(vec![canceled.clone()], &[seen(&ok)], &world);
        assert!(
            out.iter().any(|o| matches!(o, Observed::Save(_))),
            "kept while its jobs run: {out:?}"
        );
        world.in_flight.clear();
        let out = run(vec![canceled], &[seen(&ok)], &world);
        assert!(
            out.iter().any(|o| matches!(o, Observed::Forget(_))),
            "forgotten once they ended: {out:?}"
        );
    }

    /// A failed incident whose failure tag was removed (acknowledged: forgotten when no longer
    /// seen) is kept while a job of it still runs, as a canceled one is.
    #[test]
    fn an_acknowledged_failed_incident_is_kept_while_its_jobs_run() {
        let mut world = World::new();
        let mut failed = incident("evacuate", "disk");
        failed
            .apply(Event::ActionStarted("drain".into()), 110.0)
            .unwrap();
        failed
            .apply(Event::ActionFailed("job 7 vanished".into()), 120.0)
            .unwrap();
        failed.apply(Event::TagApplied, 130.0).unwrap();
        failed.apply(Event::TagRemoved, 140.0).unwrap();
        let ok = verdict("Ok", "");
        world.in_flight.insert(failed.uuid);
        let out = run(vec![failed.clone()], &[seen(&ok)], &world);
        assert!(
            !out.iter().any(|o| matches!(o, Observed::Forget(_))),
            "kept while its jobs run: {out:?}"
        );
        world.in_flight.clear();
        let out = run(vec![failed], &[seen(&ok)], &world);
        assert!(
            out.iter().any(|o| matches!(o, Observed::Forget(_))),
            "forgotten once they ended: {out:?}"
        );
    }

    /// A node live-repaired twice today that asks for a third is evacuated instead, and its
    /// incident says why.
    #[test]
    fn a_live_repair_past_the_ladder_s_limit_opens_an_evacuation() {
        use super::super::ladder::{LadderPolicy, Repaired, Why};
        let history: Vec<Repaired> = (1..=2)
            .map(|n| Repaired {
                incident: Uuid::from_u128(100 + n),
                node_uuid: "uuid-node1".into(),
                action: Action::LiveRepair,
                opened_s: 100.0 + n as f64,
                ended_s: Some(150.0),
                status: crate::incident::RepairStatus::Completed,
                command: Some("reset-fan".into()),
            })
            .collect();
        let ladder = LadderPolicy {
            max_live_repairs: 2,
            ..LadderPolicy::default()
        };
        let world = World::new();
        let facts = Facts {
            history: &history,
            ladder: &ladder,
            ..world.facts()
        };
        let fan = verdict("live-repair", "fan");
        let out = observe(Vec::new(), &[seen(&fan)], facts, &mut || Uuid::from_u128(9));
        let [
            Observed::Open(opened),
            Observed::Laddered { escalation, .. },
        ] = out.as_slice()
        else {
            panic!("{out:#?}");
        };
        assert_eq!(opened.action, Action::Evacuate);
        assert_eq!(opened.verdict.status, DiagnoseStatus::LiveRepair);
        assert_eq!(escalation.why, Why::LiveRepairLimit);
        assert!(
            opened
                .history
                .iter()
                .any(|h| h.event.contains("3rd live repair of node1 in 24 h")),
            "{:?}",
            opened.history
        );
        // Without the ladder: the live repair it asks for.
        let out = observe(Vec::new(), &[seen(&fan)], world.facts(), &mut || {
            Uuid::from_u128(9)
        });
        assert!(matches!(out.as_slice(), [Observed::Open(i)] if i.action == Action::LiveRepair));
    }
}
