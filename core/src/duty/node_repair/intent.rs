//! Node repair's steps (pure): an incident's intents (each one action on the cluster, kept
//! as a ledger entry of the incident), what they did, and what they say about the node.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::ganeti::{JobId, Node, Op};
use crate::gate::{FlagChange, Holder};
use crate::incident::{Action, Incident};
use crate::ledger::{self, AgentOp, Entry, Hold, State};
use crate::plan::{Lock, Move, ServiceFacts, ServiceJob};

/// What an intent does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum IntentSpec {
    /// Set the node's drained flag.
    Drain {
        /// Node.
        node: String,
    },
    /// Move an instance.
    Move {
        /// The move.
        planned: Move,
    },
    /// Add a tag to the node.
    Tag {
        /// Node.
        node: String,
        /// Tag.
        tag: String,
    },
    /// Remove the incident's tag from the node (an acknowledgement asked through nodecare).
    Untag {
        /// Node.
        node: String,
        /// Tag.
        tag: String,
    },
    /// Set the node offline (after its evacuation).
    Offline {
        /// Node.
        node: String,
    },
    /// Set the node online again (it was offlined by this incident; acknowledged).
    Online {
        /// Node.
        node: String,
    },
    /// Clear the node's drained flag (acknowledged).
    Undrain {
        /// Node.
        node: String,
    },
    /// Shut an instance down (it cannot leave the evacuated node).
    Shutdown {
        /// Instance.
        instance: String,
    },
    /// Ask the node's agent to run a repair command (not a Ganeti job).
    Repair {
        /// Node.
        node: String,
        /// Repair command.
        command: String,
    },
}

impl IntentSpec {
    /// Whether this intent's outcome comes from a Ganeti job (the others from the agent).
    pub const fn is_ganeti_job(&self) -> bool {
        !matches!(self, Self::Repair { .. })
    }

    /// Whether it is a step of evacuating its node: a drain, a move or setting it offline.
    pub const fn is_evacuation(&self) -> bool {
        matches!(
            self,
            Self::Drain { .. } | Self::Move { .. } | Self::Offline { .. }
        )
    }

    /// The Ganeti write of the step; `None` for a repair (the agent runs it).
    pub fn op(&self) -> Option<Op> {
        Some(match self {
            Self::Drain { node } => Op::drain(node.clone()),
            Self::Undrain { node } => Op::undrain(node.clone()),
            Self::Offline { node } => Op::offline(node.clone()),
            Self::Online { node } => Op::online(node.clone()),
            Self::Shutdown { instance } => Op::ShutdownInstance {
                instance: instance.clone(),
            },
            Self::Tag { node, tag } => Op::add_node_tags(node.clone(), vec![tag.clone()]),
            Self::Untag { node, tag } => Op::remove_node_tags(node.clone(), vec![tag.clone()]),
            Self::Move { planned } => planned.op(),
            Self::Repair { .. } => return None,
        })
    }

    /// What the step does, for people (`migrate web from node2 to node3`); `node` is the
    /// incident's node, which every move leaves. A move without a target is a DRBD instance's
    /// (the planner names the target of every other): Ganeti takes it to its secondary.
    pub fn describe(&self, node: &str) -> String {
        let onto = |target: &Option<String>| {
            target
                .as_ref()
                .map_or_else(|| "to its DRBD secondary".to_owned(), |t| format!("to {t}"))
        };
        match self {
            Self::Drain { node } => format!("drain {node}"),
            Self::Move {
                planned: Move::Migrate { instance, target },
            } => format!("migrate {instance} from {node} {}", onto(target)),
            Self::Move {
                planned: Move::Failover { instance, target },
            } => format!("fail {instance} over from {node} {}", onto(target)),
            Self::Move {
                planned:
                    Move::ReplaceSecondary {
                        instance,
                        remote_node,
                        replaces,
                    },
            } => format!(
                "move the DRBD secondary of {instance} from {} to {remote_node}",
                replaces.as_deref().unwrap_or(node)
            ),
            Self::Tag { node, tag } => format!("tag {node} {tag}"),
            Self::Untag { node, tag } => format!("remove the tag {tag} from {node}"),
            Self::Offline { node } => format!("set {node} offline"),
            Self::Online { node } => format!("set {node} online"),
            Self::Undrain { node } => format!("undrain {node}"),
            Self::Shutdown { instance } => format!("shut down {instance} on {node}"),
            Self::Repair { node, command } => format!("run the repair {command} on {node}"),
        }
    }
}

/// The drained and offline flags incidents' jobs set or cleared (succeeded drain, undrain,
/// offline and online steps), each named by its incident and where it is now
/// (`incident <uuid> (canceled)`), for [`crate::gate::left_by`].
pub fn incident_flag_changes(incidents: &[Incident], intents: &[Intent]) -> Vec<FlagChange> {
    let by_id: BTreeMap<Uuid, &Incident> = incidents.iter().map(|i| (i.uuid, i)).collect();
    intents
        .iter()
        .filter(|intent| intent.state == IntentState::Succeeded)
        .filter_map(|intent| {
            let (node, flag, set) = match &intent.spec {
                IntentSpec::Drain { node } => (node, "drained", true),
                IntentSpec::Undrain { node } => (node, "drained", false),
                IntentSpec::Offline { node } => (node, "offline", true),
                IntentSpec::Online { node } => (node, "offline", false),
                _ => return None,
            };
            let by = match by_id.get(&intent.incident) {
                Some(incident) => format!(
                    "incident {} ({}{})",
                    incident.uuid,
                    incident.repair_status.as_str(),
                    if incident.acknowledged {
                        ", acknowledged"
                    } else {
                        ""
                    }
                ),
                None => format!("incident {}", intent.incident),
            };
            Some(FlagChange {
                node: node.clone(),
                flag: flag.to_owned(),
                set,
                at_ms: intent
                    .finished_ms
                    .or(intent.submitted_ms)
                    .unwrap_or(intent.created_ms),
                by,
            })
        })
        .collect()
}

/// Where an intent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntentState {
    /// Recorded; submission may or may not have happened (unknown after a crash).
    Planned,
    /// Submitted; outcome pending.
    Submitted,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully.
    Failed,
    /// Did not do its step and changed nothing (Ganeti refused its precondition, or it never
    /// ran because a job it depended on did not succeed): the step is planned again from the
    /// cluster as it is. Not a failure of the incident.
    Replanned,
    /// Never ran: its incident was canceled, and Ganeti canceled the job before it started
    /// (or as a job it depended on was canceled).
    Canceled,
}

impl IntentState {
    /// The state of its stored name (`planned`, `submitted`, …).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "planned" => Some(Self::Planned),
            "submitted" => Some(Self::Submitted),
            "succeeded" => Some(Self::Succeeded),
            "failed" => Some(Self::Failed),
            "replanned" => Some(Self::Replanned),
            "canceled" => Some(Self::Canceled),
            _ => None,
        }
    }

    /// Whether the intent still holds its locks (submitted and not finished, or unknown).
    pub const fn is_in_flight(self) -> bool {
        matches!(self, Self::Planned | Self::Submitted)
    }
}

/// One intended or submitted action of an incident.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The incident.
    pub incident: Uuid,
    /// Unique within the incident; also written into the job's reason trail.
    pub key: String,
    /// What it does.
    pub spec: IntentSpec,
    /// Locks held while in flight.
    pub locks: Vec<Lock>,
    /// Where it is.
    pub state: IntentState,
    /// Ganeti job id, once known.
    pub job_id: Option<JobId>,
    /// Unix ms when recorded.
    pub created_ms: u64,
    /// Unix ms when submitted.
    pub submitted_ms: Option<u64>,
    /// Unix ms when finished.
    pub finished_ms: Option<u64>,
    /// Failure message.
    pub error: Option<String>,
}

/// In what state a canceled incident left its node, from what its jobs and its repair command
/// did (`own`, none in flight); `None` when it never submitted anything.
pub fn after_cancel(node: &str, own: &[&Intent]) -> Option<String> {
    let repair = own.iter().find_map(|i| match (&i.spec, i.state) {
        (IntentSpec::Repair { command, .. }, IntentState::Succeeded) => Some(format!(
            "the repair command {command} ran to its end (exit 0)"
        )),
        (IntentSpec::Repair { command, .. }, IntentState::Failed) => Some(
            i.error
                .clone()
                .unwrap_or_else(|| format!("the repair command {command} failed")),
        ),
        _ => None,
    });
    let ganeti: Vec<&&Intent> = own.iter().filter(|i| i.spec.is_ganeti_job()).collect();
    if ganeti.is_empty() {
        return repair.map(|r| format!("after the cancel: {r}"));
    }
    let done = |wanted: fn(&IntentSpec) -> bool| {
        ganeti
            .iter()
            .any(|i| wanted(&i.spec) && i.state == IntentState::Succeeded)
    };
    let mut parts = Vec::new();
    if done(|s| matches!(s, IntentSpec::Offline { .. })) {
        parts.push(format!(
            "{node} is left offline by this incident (`gnt-node modify --offline=no {node}` returns it)"
        ));
    } else if done(|s| matches!(s, IntentSpec::Drain { .. })) {
        parts.push(format!(
            "{node} is left drained by this incident (`gnt-node modify --drained=no {node}` returns it)"
        ));
    } else {
        parts.push(format!("{node} was not drained by this incident"));
    }
    let moved: Vec<String> = ganeti
        .iter()
        .filter(|i| i.state == IntentState::Succeeded)
        .filter_map(|i| match &i.spec {
            IntentSpec::Move { planned } => Some(planned.instance().to_owned()),
            _ => None,
        })
        .collect();
    if !moved.is_empty() {
        parts.push(format!("moved before the cancel: {}", moved.join(", ")));
    }
    let shut: Vec<&str> = ganeti
        .iter()
        .filter(|i| i.state == IntentState::Succeeded)
        .filter_map(|i| match &i.spec {
            IntentSpec::Shutdown { instance } => Some(instance.as_str()),
            _ => None,
        })
        .collect();
    if !shut.is_empty() {
        parts.push(format!("shut down: {}", shut.join(", ")));
    }
    let tags: Vec<&str> = ganeti
        .iter()
        .filter(|i| i.state == IntentState::Succeeded)
        .filter_map(|i| match &i.spec {
            IntentSpec::Tag { tag, .. } => Some(tag.as_str()),
            _ => None,
        })
        .collect();
    if !tags.is_empty() {
        parts.push(format!("tagged {} (remove it by hand)", tags.join(", ")));
    }
    let stopped: Vec<&str> = ganeti
        .iter()
        .filter(|i| matches!(i.state, IntentState::Failed | IntentState::Canceled))
        .map(|i| i.key.as_str())
        .collect();
    if !stopped.is_empty() {
        parts.push(format!("did not run: {}", stopped.join(", ")));
    }
    parts.extend(repair);
    Some(format!("after the cancel: {}", parts.join("; ")))
}

/// The open (noted or pending) incident of node `node_uuid` that a new verdict asking for
/// `action` escalates: the most invasive one less invasive than `action`, the oldest first.
pub fn escalation_target<'a>(
    incidents: &'a [Incident],
    node_uuid: &str,
    action: Action,
) -> Option<&'a Incident> {
    incidents
        .iter()
        .filter(|i| i.node_uuid == node_uuid && i.is_active())
        .filter(|i| action.is_more_invasive_than(i.action))
        .max_by(|a, b| {
            a.action
                .invasiveness()
                .cmp(&b.action.invasiveness())
                .then(b.ctime.total_cmp(&a.ctime))
        })
}

/// What the intents of an incident and its node's flags say about returning it to service.
pub fn service_facts(node: &Node, own: &[&Intent]) -> ServiceFacts {
    let succeeded = |wanted: fn(&IntentSpec) -> bool| {
        own.iter()
            .any(|i| wanted(&i.spec) && i.state == IntentState::Succeeded)
    };
    let job = |wanted: fn(&IntentSpec) -> bool| {
        own.iter()
            .filter(|i| wanted(&i.spec))
            .map(|i| match i.state {
                IntentState::Planned | IntentState::Submitted => ServiceJob::InFlight,
                IntentState::Succeeded => ServiceJob::Succeeded,
                IntentState::Failed | IntentState::Replanned | IntentState::Canceled => {
                    ServiceJob::Failed(i.error.clone().unwrap_or_else(|| "job failed".into()))
                }
            })
            .next_back()
    };
    ServiceFacts {
        offline: node.offline,
        drained: node.drained,
        offlined_by_incident: succeeded(|s| matches!(s, IntentSpec::Offline { .. })),
        drained_by_incident: succeeded(|s| matches!(s, IntentSpec::Drain { .. })),
        online: job(|s| matches!(s, IntentSpec::Online { .. })),
        undrain: job(|s| matches!(s, IntentSpec::Undrain { .. })),
    }
}

/// The next key of `prefix` among an incident's intents (`prefix1`, `prefix2`, …).
pub fn next_key(intents: &[&Intent], prefix: &str) -> String {
    let used = intents.iter().filter(|i| i.key.starts_with(prefix)).count();
    format!("{prefix}{}", used + 1)
}

/// An intent that does not make a ledger entry, or an entry that is no intent.
#[derive(Debug, thiserror::Error)]
pub enum IntentError {
    /// An entry (or intent) is missing or has a fact that does not decode.
    #[error("intent {key}: {what}")]
    Corrupt {
        /// Its key.
        key: String,
        /// What is wrong.
        what: String,
    },
    /// A fact does not encode.
    #[error("encoding an intent's {0}")]
    Encoding(String),
}

/// The entry's facts that have no field of their own: the step as node repair plans it, the
/// locks the planner reads, when it was submitted, and a note on a step that did not fail.
const SPEC: &str = "spec";
const LOCKS: &str = "locks";
const SUBMITTED_MS: &str = "submitted-ms";
const NOTE: &str = "note";
/// Set (to `canceled`) on the entry of an intent in [`IntentState::Canceled`]: the ledger's
/// `canceled` state is otherwise read as [`IntentState::Replanned`].
const ENDED: &str = "ended";

/// The holds of a step on incident node `node`.
fn holds(spec: &IntentSpec, node: &str) -> Vec<Hold> {
    match spec {
        IntentSpec::Drain { node } => vec![Hold::Drained { node: node.clone() }],
        IntentSpec::Offline { node } => vec![Hold::Offline { node: node.clone() }],
        IntentSpec::Undrain { node } | IntentSpec::Online { node } => {
            vec![Hold::Release { node: node.clone() }]
        }
        IntentSpec::Repair { node, .. } => vec![Hold::Repairing { node: node.clone() }],
        IntentSpec::Move { planned } => {
            let to = match planned {
                Move::Migrate { target, .. } | Move::Failover { target, .. } => {
                    target.iter().cloned().collect()
                }
                Move::ReplaceSecondary { remote_node, .. } => vec![remote_node.clone()],
            };
            vec![Hold::Moving {
                instance: planned.instance().to_owned(),
                from: vec![node.to_owned()],
                to,
            }]
        }
        IntentSpec::Tag { .. } | IntentSpec::Untag { .. } | IntentSpec::Shutdown { .. } => {
            Vec::new()
        }
    }
}

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<String, IntentError> {
    serde_json::to_string(value).map_err(|error| IntentError::Encoding(format!("{what}: {error}")))
}

/// The ledger entry of `intent`, an action of an incident on node `node`.
pub fn to_entry(intent: &Intent, node: &str) -> Result<Entry, IntentError> {
    let action = match (&intent.spec, intent.spec.op()) {
        (_, Some(op)) => ledger::Action::ganeti(op),
        (IntentSpec::Repair { node, command }, None) => ledger::Action::Agent {
            op: AgentOp::Repair {
                node: node.clone(),
                command: command.clone(),
            },
        },
        (other, None) => {
            return Err(IntentError::Corrupt {
                key: intent.key.clone(),
                what: format!("no action: {other:?}"),
            });
        }
    };
    // Node repair follows its jobs' time itself (`job_timeout`): no deadline of the ledger's.
    let mut entry = Entry::new(
        Holder::Incident {
            id: intent.incident,
        },
        intent.key.clone(),
        action,
        intent.spec.describe(node),
        intent.created_ms,
        u64::MAX,
    )
    .holding(holds(&intent.spec, node));
    // The key as it was (reason trails carry it so).
    entry.key.clone_from(&intent.key);
    entry
        .about
        .insert(SPEC.to_owned(), encode("step", &intent.spec)?);
    entry
        .about
        .insert(LOCKS.to_owned(), encode("locks", &intent.locks)?);
    if let Some(at) = intent.submitted_ms {
        entry.about.insert(SUBMITTED_MS.to_owned(), at.to_string());
    }
    let why = intent.error.clone().unwrap_or_default();
    entry.state = match intent.state {
        IntentState::Planned => State::Recorded,
        IntentState::Submitted => State::Submitted,
        IntentState::Succeeded => State::Succeeded,
        IntentState::Failed => State::Failed { why },
        IntentState::Replanned => State::Canceled { why },
        IntentState::Canceled => {
            entry.about.insert(ENDED.to_owned(), "canceled".to_owned());
            State::Canceled { why }
        }
    };
    if let (Some(note), IntentState::Planned | IntentState::Submitted | IntentState::Succeeded) =
        (&intent.error, intent.state)
    {
        entry.about.insert(NOTE.to_owned(), note.clone());
    }
    entry.job = intent.job_id;
    entry.finished_ms = intent.finished_ms;
    Ok(entry)
}

/// The intent of a ledger entry; `None` for entries of other holders.
pub fn from_entry(entry: &Entry) -> Result<Option<Intent>, IntentError> {
    let Holder::Incident { id } = entry.holder else {
        return Ok(None);
    };
    let corrupt = |what: &str, error: String| IntentError::Corrupt {
        key: entry.key.clone(),
        what: format!("{what}: {error}"),
    };
    let spec: IntentSpec = match entry.about.get(SPEC) {
        Some(text) => serde_json::from_str(text).map_err(|e| corrupt("step", e.to_string()))?,
        None => return Err(corrupt("step", "missing".into())),
    };
    let locks: Vec<Lock> = match entry.about.get(LOCKS) {
        Some(text) => serde_json::from_str(text).map_err(|e| corrupt("locks", e.to_string()))?,
        None => Vec::new(),
    };
    let submitted_ms = match entry.about.get(SUBMITTED_MS) {
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|e| corrupt("submitted", e.to_string()))?,
        ),
        None => None,
    };
    let some = |why: &str| (!why.is_empty()).then(|| why.to_owned());
    let (state, error) = match &entry.state {
        State::Recorded => (IntentState::Planned, entry.about.get(NOTE).cloned()),
        // Node repair never times an entry out in the ledger; should one, it is still followed.
        State::Submitted | State::TimedOut => {
            (IntentState::Submitted, entry.about.get(NOTE).cloned())
        }
        State::Succeeded => (IntentState::Succeeded, entry.about.get(NOTE).cloned()),
        State::Failed { why } => (IntentState::Failed, some(why)),
        State::Canceled { why } if entry.about.get(ENDED).is_some_and(|e| e == "canceled") => {
            (IntentState::Canceled, some(why))
        }
        State::Canceled { why } => (IntentState::Replanned, some(why)),
    };
    Ok(Some(Intent {
        incident: id,
        key: entry.key.clone(),
        spec,
        locks,
        state,
        job_id: entry.job,
        created_ms: entry.recorded_ms,
        submitted_ms,
        finished_ms: entry.finished_ms,
        error,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    fn intent(key: &str, spec: IntentSpec, state: IntentState) -> Intent {
        Intent {
            incident: Uuid::from_u128(1),
            key: key.into(),
            spec,
            locks: vec![],
            state,
            job_id: Some(1),
            created_ms: 1,
            submitted_ms: Some(1),
            finished_ms: None,
            error: None,
        }
    }

    /// Each stored step is submitted as its Ganeti write; the stored shape stays what it was.
    #[test]
    fn intent_steps_are_ganeti_writes() {
        use crate::ganeti::ReplaceDisksMode;
        let node = "node1".to_owned();
        let cases = [
            (
                IntentSpec::Drain { node: node.clone() },
                Some(Op::drain("node1")),
            ),
            (
                IntentSpec::Undrain { node: node.clone() },
                Some(Op::undrain("node1")),
            ),
            (
                IntentSpec::Offline { node: node.clone() },
                Some(Op::offline("node1")),
            ),
            (
                IntentSpec::Online { node: node.clone() },
                Some(Op::online("node1")),
            ),
            (
                IntentSpec::Shutdown {
                    instance: "web".into(),
                },
                Some(Op::ShutdownInstance {
                    instance: "web".into(),
                }),
            ),
            (
                IntentSpec::Tag {
                    node: node.clone(),
                    tag: "t".into(),
                },
                Some(Op::add_node_tags("node1", vec!["t".into()])),
            ),
            (
                IntentSpec::Move {
                    planned: Move::Migrate {
                        instance: "web".into(),
                        target: Some("node2".into()),
                    },
                },
                Some(Op::MigrateInstance {
                    instance: "web".into(),
                    target: Some("node2".into()),
                }),
            ),
            (
                IntentSpec::Move {
                    planned: Move::Failover {
                        instance: "web".into(),
                        target: None,
                    },
                },
                Some(Op::FailoverInstance {
                    instance: "web".into(),
                    target: None,
                }),
            ),
            (
                IntentSpec::Move {
                    planned: Move::ReplaceSecondary {
                        instance: "db".into(),
                        remote_node: "node3".into(),
                        replaces: None,
                    },
                },
                Some(Op::ReplaceDisks {
                    instance: "db".into(),
                    mode: ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: Some("node3".into()),
                        iallocator: None,
                    },
                }),
            ),
            (
                IntentSpec::Repair {
                    node,
                    command: "fix".into(),
                },
                None,
            ),
        ];
        for (spec, op) in cases {
            assert_eq!(spec.op(), op, "{spec:?}");
        }
        // What the store holds is unchanged.
        let stored = serde_json::to_value(IntentSpec::Move {
            planned: Move::ReplaceSecondary {
                instance: "db".into(),
                remote_node: "node3".into(),
                replaces: None,
            },
        })
        .unwrap_or_default();
        assert_eq!(
            stored,
            serde_json::json!({
                "kind": "move",
                "planned": {"op": "replace-secondary", "instance": "db", "remote_node": "node3"}
            })
        );
    }

    /// Issue 24 (6): job steps read for people, not as `instance=web op=migrate target=null`.
    #[test]
    fn steps_describe_themselves_for_people() {
        let moved = |planned: Move| IntentSpec::Move { planned };
        let table = [
            (IntentSpec::Drain { node: "n2".into() }, "drain n2"),
            (
                moved(Move::Migrate {
                    instance: "web".into(),
                    target: Some("n3".into()),
                }),
                "migrate web from n2 to n3",
            ),
            (
                moved(Move::Migrate {
                    instance: "db".into(),
                    target: None,
                }),
                "migrate db from n2 to its DRBD secondary",
            ),
            (
                moved(Move::Failover {
                    instance: "db".into(),
                    target: None,
                }),
                "fail db over from n2 to its DRBD secondary",
            ),
            (
                moved(Move::ReplaceSecondary {
                    instance: "db".into(),
                    remote_node: "n4".into(),
                    replaces: None,
                }),
                "move the DRBD secondary of db from n2 to n4",
            ),
            (
                moved(Move::ReplaceSecondary {
                    instance: "db".into(),
                    remote_node: "n4".into(),
                    replaces: Some("n3".into()),
                }),
                "move the DRBD secondary of db from n3 to n4",
            ),
            (
                IntentSpec::Shutdown {
                    instance: "scratch".into(),
                },
                "shut down scratch on n2",
            ),
            (IntentSpec::Offline { node: "n2".into() }, "set n2 offline"),
            (
                IntentSpec::Repair {
                    node: "n2".into(),
                    command: "reset-bmc".into(),
                },
                "run the repair reset-bmc on n2",
            ),
        ];
        for (spec, want) in table {
            assert_eq!(spec.describe("n2"), want);
        }
    }

    #[test]
    fn a_canceled_incident_says_in_what_state_it_left_the_node() {
        let moved = |instance: &str, state| {
            intent(
                &format!("migrate-{instance}-1"),
                IntentSpec::Move {
                    planned: Move::Migrate {
                        instance: instance.into(),
                        target: None,
                    },
                },
                state,
            )
        };
        let drain = intent(
            "drain",
            IntentSpec::Drain { node: "n2".into() },
            IntentState::Succeeded,
        );
        let a = moved("a", IntentState::Succeeded);
        let b = moved("b", IntentState::Failed);
        let offline = intent(
            "offline-1",
            IntentSpec::Offline { node: "n2".into() },
            IntentState::Failed,
        );
        let text = after_cancel("n2", &[&drain, &a, &b, &offline]).unwrap();
        assert!(text.contains("n2 is left drained"), "{text}");
        assert!(text.contains("moved before the cancel: a"), "{text}");
        assert!(
            text.contains("did not run: migrate-b-1, offline-1"),
            "{text}"
        );
        let drain_canceled = intent(
            "drain",
            IntentSpec::Drain { node: "n2".into() },
            IntentState::Failed,
        );
        let text = after_cancel("n2", &[&drain_canceled]).unwrap();
        assert!(text.contains("n2 was not drained"), "{text}");
        assert_eq!(after_cancel("n2", &[]), None);
        // A live repair's command runs to its end after the cancel: its outcome is said.
        let mut repair = intent(
            "repair",
            IntentSpec::Repair {
                node: "n2".into(),
                command: "update-firmware".into(),
            },
            IntentState::Succeeded,
        );
        assert_eq!(
            after_cancel("n2", &[&repair]).as_deref(),
            Some("after the cancel: the repair command update-firmware ran to its end (exit 0)")
        );
        repair.state = IntentState::Failed;
        repair.error = Some("repair command update-firmware ended Failed: exit code 3".into());
        let text = after_cancel("n2", &[&repair]).unwrap();
        assert!(text.contains("ended Failed: exit code 3"), "{text}");
    }
    fn intent_of(incident: Uuid, key: &str, spec: IntentSpec, state: IntentState) -> Intent {
        Intent {
            incident,
            locks: vec![Lock::Node("node1".into())],
            job_id: None,
            submitted_ms: None,
            created_ms: 5,
            ..intent(key, spec, state)
        }
    }

    /// Every step and state of an intent is kept by its ledger entry as it was, and the entry
    /// says what it does and holds in the ledger's terms.
    #[test]
    fn intents_are_ledger_entries_of_their_incident() {
        let id = Uuid::from_u128(1);
        let node = || "node1".to_owned();
        let specs = [
            IntentSpec::Drain { node: node() },
            IntentSpec::Undrain { node: node() },
            IntentSpec::Offline { node: node() },
            IntentSpec::Online { node: node() },
            IntentSpec::Shutdown {
                instance: "web".into(),
            },
            IntentSpec::Tag {
                node: node(),
                tag: "t".into(),
            },
            IntentSpec::Untag {
                node: node(),
                tag: "t".into(),
            },
            IntentSpec::Move {
                planned: Move::Migrate {
                    instance: "web".into(),
                    target: Some("node3".into()),
                },
            },
            IntentSpec::Repair {
                node: node(),
                command: "reset-bmc".into(),
            },
        ];
        let states = [
            (IntentState::Planned, None),
            (IntentState::Submitted, None),
            (IntentState::Succeeded, Some("done already".to_owned())),
            (IntentState::Failed, Some("job 3 error: no".to_owned())),
            (IntentState::Replanned, Some("precondition".to_owned())),
            (
                IntentState::Canceled,
                Some("job 3 canceled: canceled".to_owned()),
            ),
        ];
        for spec in &specs {
            for (state, error) in &states {
                let mut it = intent_of(id, "step-1", spec.clone(), *state);
                it.error.clone_from(error);
                it.job_id = Some(3);
                it.submitted_ms = Some(6);
                it.finished_ms = Some(7);
                let entry = to_entry(&it, "node1").unwrap();
                assert_eq!(entry.holder, Holder::Incident { id });
                assert_eq!(entry.key, "step-1");
                assert_eq!(entry.action.op().cloned(), spec.op());
                assert_eq!(entry.description, spec.describe("node1"));
                assert_eq!(from_entry(&entry).unwrap(), Some(it));
            }
        }
        let held = |spec: IntentSpec| {
            to_entry(&intent_of(id, "k", spec, IntentState::Planned), "node1")
                .unwrap()
                .holds
        };
        assert_eq!(held(specs[0].clone()), [Hold::Drained { node: node() }]);
        assert_eq!(held(specs[1].clone()), [Hold::Release { node: node() }]);
        assert_eq!(held(specs[2].clone()), [Hold::Offline { node: node() }]);
        assert_eq!(held(specs[3].clone()), [Hold::Release { node: node() }]);
        assert_eq!(held(specs[8].clone()), [Hold::Repairing { node: node() }]);
        assert!(matches!(
            to_entry(
                &intent_of(id, "k", specs[8].clone(), IntentState::Planned),
                "node1"
            )
            .unwrap()
            .action,
            ledger::Action::Agent {
                op: AgentOp::Repair { .. }
            }
        ));
        assert_eq!(
            held(specs[7].clone()),
            [Hold::Moving {
                instance: "web".into(),
                from: vec![node()],
                to: vec!["node3".into()],
            }]
        );
        // Another holder's entry is no intent.
        let mut other = to_entry(
            &intent_of(id, "k", specs[0].clone(), IntentState::Planned),
            "n",
        )
        .unwrap();
        other.holder = Holder::Balancing { id };
        assert_eq!(from_entry(&other).unwrap(), None);
    }
}
