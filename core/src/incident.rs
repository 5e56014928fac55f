//! Incidents and their lifecycle: a pure state machine, no IO.
//!
//! An incident is one observed need for repair on one node: identity is (node uuid, verdict
//! fingerprint), so reports whose details merely reorder or whose minor scripts flap stay the
//! same incident. The record keeps every field of Ganeti maintd's incident (`uuid`, `node`,
//! `original`, `action`, `jobs`, `repair-status`, `tag`, `ctime`, `mtime`, `serial_no`) and adds
//! the node uuid, the fingerprint, a history and `blocked_by`.
//!
//! Lifecycle: `noted → pending → completed | failed`, and `noted | pending → canceled`.
//! A more invasive verdict on the node of an open (noted or pending) incident escalates it
//! (`live-repair → evacuate → evacuate-failover`): same uuid and tag, the new verdict and
//! action, a history line; a less invasive verdict never de-escalates one.
//! Completed and failed incidents carry a node tag (`maintd:repairready:<uuid>` or
//! `maintd:repairfailed:<uuid>`); removing that tag acknowledges the incident. A canceled,
//! acknowledged-completed or never-started incident is forgotten once it is no longer observed;
//! an acknowledged failure is forgotten at once (so a still-present problem starts a new flow).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use nodecare_protocol::{CanonicalJson, DiagnoseStatus, NodeVerdict};

use crate::ganeti::JobId;

/// Tag prefix set on a node whose incident's actions all succeeded (maintd's).
pub const TAG_READY_PREFIX: &str = "maintd:repairready:";
/// Tag prefix set on a node whose incident failed (maintd's).
pub const TAG_FAILED_PREFIX: &str = "maintd:repairfailed:";
/// History entries kept per incident (oldest are dropped).
pub const HISTORY_LIMIT: usize = 64;

/// maintd's `repair-status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairStatus {
    /// Observed; no action taken yet.
    Noted,
    /// At least one action started and none failed.
    Pending,
    /// Ordered to be ignored; still observed.
    Canceled,
    /// An action failed; nothing more is done for it.
    Failed,
    /// Every action succeeded, including the tag.
    Completed,
}

impl RepairStatus {
    /// maintd's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Noted => "noted",
            Self::Pending => "pending",
            Self::Canceled => "canceled",
            Self::Failed => "failed",
            Self::Completed => "completed",
        }
    }

    /// Whether actions may still be taken (maintd's "active": noted or pending).
    pub const fn is_active(self) -> bool {
        matches!(self, Self::Noted | Self::Pending)
    }
}

/// The action an incident asks for (maintd's `action`; `Ok`/`unknown` never make incidents).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Action {
    /// Run the node's repair command while instances keep running.
    #[serde(rename = "live-repair")]
    LiveRepair,
    /// Drain the node and move every instance away by live migration.
    #[serde(rename = "evacuate")]
    Evacuate,
    /// Drain the node and move every instance away by failover.
    #[serde(rename = "evacuate-failover")]
    EvacuateFailover,
}

impl Action {
    /// The action a verdict status asks for; `None` for `Ok` and `unknown`.
    pub const fn from_status(status: DiagnoseStatus) -> Option<Self> {
        match status {
            DiagnoseStatus::LiveRepair => Some(Self::LiveRepair),
            DiagnoseStatus::Evacuate => Some(Self::Evacuate),
            DiagnoseStatus::EvacuateFailover => Some(Self::EvacuateFailover),
            DiagnoseStatus::Ok | DiagnoseStatus::Unknown => None,
        }
    }

    /// maintd's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LiveRepair => "live-repair",
            Self::Evacuate => "evacuate",
            Self::EvacuateFailover => "evacuate-failover",
        }
    }

    /// Whether the node is drained and emptied.
    pub const fn is_evacuation(self) -> bool {
        matches!(self, Self::Evacuate | Self::EvacuateFailover)
    }

    /// How invasive the action is: live-repair 1, evacuate 2, evacuate-failover 3.
    pub const fn invasiveness(self) -> u8 {
        match self {
            Self::LiveRepair => 1,
            Self::Evacuate => 2,
            Self::EvacuateFailover => 3,
        }
    }

    /// Whether `self` asks for more than `other` (an incident asking for `other` escalates).
    pub const fn is_more_invasive_than(self, other: Self) -> bool {
        self.invasiveness() > other.invasiveness()
    }
}

/// One line of an incident's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Unix seconds.
    pub at: f64,
    /// Status after the event.
    pub status: RepairStatus,
    /// What happened.
    pub event: String,
}

/// An incident: maintd's record plus our fields. Serialises with maintd's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// Unique id (maintd `uuid`); also exported as `id` by the status API.
    pub uuid: Uuid,
    /// Node name (maintd stored the name under `node`).
    pub node: String,
    /// Node uuid: identity survives a node rename.
    pub node_uuid: String,
    /// The verdict exactly as the node signed it (its canonical bytes): maintd's `original`.
    pub original: CanonicalJson,
    /// The same verdict, decoded.
    pub verdict: NodeVerdict,
    /// Requested action.
    pub action: Action,
    /// Fingerprint of the verdict's identity (identity is node uuid + fingerprint).
    pub fingerprint: String,
    /// Ganeti jobs submitted for this incident.
    pub jobs: Vec<JobId>,
    /// Progress.
    #[serde(rename = "repair-status")]
    pub repair_status: RepairStatus,
    /// The tag that was, or on success will be, put on the node.
    pub tag: String,
    /// Creation, Unix seconds.
    pub ctime: f64,
    /// Last change, Unix seconds.
    pub mtime: f64,
    /// Bumped on every change.
    pub serial_no: u64,
    /// Whether the last successful read of the node's report still showed this verdict.
    pub observed: bool,
    /// Whether the incident's tag is on the node (set once the tag job succeeded).
    pub tag_applied: bool,
    /// Whether an operator removed the tag (maintd's acknowledgement).
    pub acknowledged: bool,
    /// When the acknowledgement was seen, Unix seconds.
    #[serde(default)]
    pub acknowledged_at: Option<f64>,
    /// Who asked nodecare to acknowledge the incident (`alice on the web page`), if someone
    /// did: the round removes its tag from the node through Ganeti (intent `untag`), then
    /// records the acknowledgement as when an operator removes the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledgement_asked_by: Option<String>,
    /// Why no action is taken right now (what the gate says blocks it, node busy), if so.
    pub blocked_by: Option<String>,
    /// Why the incident failed, if it did.
    pub failure: Option<String>,
    /// What an operator must know about a completed incident (instances left on the node).
    #[serde(default)]
    pub warning: Option<String>,
    /// What happened so far, oldest first (at most [`HISTORY_LIMIT`] entries).
    pub history: Vec<HistoryEntry>,
}

/// Something that happens to an incident.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The node's report shows this incident's verdict (again).
    Observed,
    /// The node's report was read and shows something else.
    NotObserved,
    /// An operator canceled the incident.
    Cancel,
    /// The first action is starting (noted → pending).
    ActionStarted(String),
    /// A Ganeti job was submitted for this incident.
    JobSubmitted(JobId),
    /// Progress worth recording, without a status change.
    Progress(String),
    /// An action failed: no more actions (→ failed; the failure tag is still to be set).
    ActionFailed(String),
    /// The tag job succeeded: pending → completed, or a failed incident's tag is on the node.
    TagApplied,
    /// The node does not carry the incident's tag although it was applied: acknowledged.
    TagRemoved,
    /// An operator asks nodecare to acknowledge the finished incident (who, where): the round
    /// removes its tag.
    AcknowledgementAsked(String),
    /// The node is offline in Ganeti and nodecare will not bring it back: it reports nothing,
    /// so an acknowledged incident can no longer be observed and is forgotten (the operator
    /// owns the node; a problem still there when it returns opens a new incident).
    NodeOffline,
    /// No action can be taken right now, and why.
    Blocked(String),
    /// The reason for blocking no longer holds.
    Unblocked,
    /// The node now reports a more invasive verdict: the open incident asks for `action` from
    /// now on (same uuid and tag; the verdict, original and fingerprint are replaced).
    Escalate {
        /// The new, more invasive action.
        action: Action,
        /// The new verdict.
        verdict: NodeVerdict,
        /// The new verdict as the node signed it.
        original: CanonicalJson,
    },
    /// Something an operator must know when the incident completes (kept in `warning`).
    Warning(String),
}

/// What the owner of the incident should do after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Keep the incident.
    Keep,
    /// Forget (delete) the incident.
    Forget,
}

/// An event that is not allowed in the incident's current state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("incident {uuid}: {event} is not allowed while {status}")]
pub struct TransitionError {
    /// The incident.
    pub uuid: Uuid,
    /// The status it was in.
    pub status: &'static str,
    /// The refused event.
    pub event: String,
}

impl Incident {
    /// A newly observed incident (status noted, observed).
    pub fn new(
        uuid: Uuid,
        node: impl Into<String>,
        node_uuid: impl Into<String>,
        verdict: NodeVerdict,
        original: CanonicalJson,
        action: Action,
        now: f64,
    ) -> Self {
        let fingerprint = verdict.fingerprint.clone();
        let mut incident = Self {
            uuid,
            node: node.into(),
            node_uuid: node_uuid.into(),
            original,
            verdict,
            action,
            fingerprint,
            jobs: Vec::new(),
            repair_status: RepairStatus::Noted,
            tag: ready_tag(uuid),
            ctime: now,
            mtime: now,
            serial_no: 1,
            observed: true,
            tag_applied: false,
            acknowledged: false,
            acknowledged_at: None,
            acknowledgement_asked_by: None,
            blocked_by: None,
            failure: None,
            warning: None,
            history: Vec::new(),
        };
        incident.record(
            now,
            format!("observed {} on {}", action.as_str(), incident.node),
        );
        incident
    }

    /// Applies `event` at time `now` (Unix seconds).
    ///
    /// Events that change nothing (observing an observed incident, repeating a block reason)
    /// leave the record untouched, so `serial_no` counts real changes.
    pub fn apply(&mut self, event: Event, now: f64) -> Result<Disposition, TransitionError> {
        use RepairStatus::{Canceled, Completed, Failed, Noted, Pending};
        match event {
            Event::Observed => {
                if !self.observed {
                    self.observed = true;
                    self.touch(now, "observed again");
                }
                Ok(Disposition::Keep)
            }
            Event::NotObserved => {
                if self.observed {
                    self.observed = false;
                    self.touch(now, "no longer observed");
                }
                Ok(self.disposition())
            }
            Event::Cancel => match self.repair_status {
                Noted | Pending => {
                    self.repair_status = Canceled;
                    self.blocked_by = None;
                    self.touch(now, "canceled by operator");
                    Ok(self.disposition())
                }
                Canceled => Ok(self.disposition()),
                Failed | Completed => Err(self.refuse("cancel")),
            },
            Event::ActionStarted(what) => match self.repair_status {
                Noted => {
                    self.repair_status = Pending;
                    self.blocked_by = None;
                    self.touch(now, &what);
                    Ok(Disposition::Keep)
                }
                Pending => {
                    self.touch(now, &what);
                    Ok(Disposition::Keep)
                }
                Canceled | Failed | Completed => Err(self.refuse("starting an action")),
            },
            Event::JobSubmitted(job) => {
                let allowed = match self.repair_status {
                    Noted | Pending => true,
                    // Only the failure tag is submitted for a failed incident.
                    Failed => !self.tag_applied,
                    Canceled | Completed => false,
                };
                if !allowed {
                    return Err(self.refuse("submitting a job"));
                }
                if self.repair_status == Noted {
                    self.repair_status = Pending;
                }
                if !self.jobs.contains(&job) {
                    self.jobs.push(job);
                    self.touch(now, &format!("submitted job {job}"));
                }
                Ok(Disposition::Keep)
            }
            Event::Progress(what) => {
                self.touch(now, &what);
                Ok(Disposition::Keep)
            }
            Event::ActionFailed(why) => match self.repair_status {
                Noted | Pending => {
                    self.repair_status = Failed;
                    self.tag = failed_tag(self.uuid);
                    self.tag_applied = false;
                    self.blocked_by = None;
                    self.failure = Some(why.clone());
                    self.touch(now, &format!("failed: {why}"));
                    Ok(Disposition::Keep)
                }
                Failed => Ok(Disposition::Keep),
                Canceled | Completed => Err(self.refuse("failing")),
            },
            Event::TagApplied => match self.repair_status {
                Pending => {
                    self.repair_status = Completed;
                    self.tag_applied = true;
                    self.blocked_by = None;
                    let event = format!("tagged node with {}", self.tag);
                    self.touch(now, &event);
                    Ok(Disposition::Keep)
                }
                Failed if !self.tag_applied => {
                    self.tag_applied = true;
                    let event = format!("tagged node with {}", self.tag);
                    self.touch(now, &event);
                    Ok(Disposition::Keep)
                }
                Completed | Failed => Ok(Disposition::Keep),
                Noted | Canceled => Err(self.refuse("tagging")),
            },
            Event::TagRemoved => {
                if !self.tag_applied || !matches!(self.repair_status, Completed | Failed) {
                    return Err(self.refuse("acknowledging"));
                }
                if !self.acknowledged {
                    self.acknowledged = true;
                    self.acknowledged_at = Some(now);
                    let event = format!("acknowledged: tag {} removed", self.tag);
                    self.touch(now, &event);
                }
                Ok(self.disposition())
            }
            Event::AcknowledgementAsked(who) => {
                if !self.tag_applied
                    || self.acknowledged
                    || !matches!(self.repair_status, Completed | Failed)
                {
                    return Err(self.refuse("asking for an acknowledgement"));
                }
                if self.acknowledgement_asked_by.is_none() {
                    let event = format!(
                        "acknowledgement asked by {who}: tag {} to be removed",
                        self.tag
                    );
                    self.acknowledgement_asked_by = Some(who);
                    self.touch(now, &event);
                }
                Ok(Disposition::Keep)
            }
            Event::NodeOffline => {
                if self.acknowledged && self.observed {
                    self.observed = false;
                    self.touch(now, "node offline: no longer observed");
                }
                Ok(self.disposition())
            }
            Event::Blocked(why) => {
                if !self.repair_status.is_active() {
                    return Err(self.refuse("blocking"));
                }
                if self.blocked_by.as_deref() != Some(why.as_str()) {
                    self.blocked_by = Some(why.clone());
                    self.touch(now, &format!("blocked: {why}"));
                }
                Ok(Disposition::Keep)
            }
            Event::Unblocked => {
                if self.blocked_by.take().is_some() {
                    self.touch(now, "unblocked");
                }
                Ok(Disposition::Keep)
            }
            Event::Escalate {
                action,
                verdict,
                original,
            } => {
                if !self.repair_status.is_active() {
                    return Err(self.refuse("escalating"));
                }
                if !action.is_more_invasive_than(self.action) {
                    return Err(self.refuse(&format!(
                        "changing {} to {} (never de-escalated)",
                        self.action.as_str(),
                        action.as_str()
                    )));
                }
                let from = self.action;
                self.action = action;
                self.fingerprint.clone_from(&verdict.fingerprint);
                self.verdict = verdict;
                self.original = original;
                self.observed = true;
                self.blocked_by = None;
                let event = format!("escalated from {} to {}", from.as_str(), action.as_str());
                self.touch(now, &event);
                Ok(Disposition::Keep)
            }
            Event::Warning(what) => {
                // A canceled incident says in what state it left the node.
                if !self.repair_status.is_active() && self.repair_status != Canceled {
                    return Err(self.refuse("warning"));
                }
                if self.warning.as_deref() != Some(what.as_str()) {
                    self.warning = Some(what.clone());
                    self.touch(now, &format!("warning: {what}"));
                }
                Ok(Disposition::Keep)
            }
        }
    }

    /// Whether the incident should be forgotten now.
    pub fn disposition(&self) -> Disposition {
        let forget = match self.repair_status {
            // Forgotten as soon as it is no longer observed (design: cancel).
            RepairStatus::Canceled => !self.observed,
            // Never acted on and gone: nothing to finish or acknowledge.
            RepairStatus::Noted => !self.observed,
            RepairStatus::Pending => false,
            // Acknowledged and gone.
            RepairStatus::Completed => self.acknowledged && !self.observed,
            // Removing the failure tag forgets unconditionally (restarts the flow if still there).
            RepairStatus::Failed => self.acknowledged,
        };
        if forget {
            Disposition::Forget
        } else {
            Disposition::Keep
        }
    }

    /// Whether the operator removed this incident's tag from the node (whose tags are
    /// `node_tags`) and the acknowledgement is still to be recorded: at most once per incident.
    pub fn awaits_acknowledgement(&self, node_tags: &[String]) -> bool {
        self.tag_applied
            && !self.acknowledged
            && matches!(
                self.repair_status,
                RepairStatus::Completed | RepairStatus::Failed
            )
            && !node_tags.contains(&self.tag)
    }

    /// Whether actions may still be taken.
    pub const fn is_active(&self) -> bool {
        self.repair_status.is_active()
    }

    fn refuse(&self, event: &str) -> TransitionError {
        TransitionError {
            uuid: self.uuid,
            status: self.repair_status.as_str(),
            event: event.to_owned(),
        }
    }

    fn touch(&mut self, now: f64, event: &str) {
        self.mtime = now.max(self.mtime);
        self.serial_no += 1;
        self.record(now, event.to_owned());
    }

    fn record(&mut self, now: f64, event: String) {
        self.history.push(HistoryEntry {
            at: now,
            status: self.repair_status,
            event,
        });
        if self.history.len() > HISTORY_LIMIT {
            let excess = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..excess);
        }
    }
}

/// `maintd:repairready:<uuid>`.
pub fn ready_tag(uuid: Uuid) -> String {
    format!("{TAG_READY_PREFIX}{uuid}")
}

/// `maintd:repairfailed:<uuid>`.
pub fn failed_tag(uuid: Uuid) -> String {
    format!("{TAG_FAILED_PREFIX}{uuid}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A verdict with `status` from one script whose details are `details`.
    fn verdict(status: &str, details: &str) -> (NodeVerdict, CanonicalJson) {
        let script = format!(r#"{{"status":"{status}","command":"fix","details":"{details}"}}"#);
        let verdict = nodecare_protocol::NodeVerdict::merge(
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

    fn incident_for(action: Action) -> Incident {
        let (verdict, original) = verdict(action.as_str(), "x");
        Incident::new(
            Uuid::from_u128(7),
            "node1",
            "uuid-node1",
            verdict,
            original,
            action,
            100.0,
        )
    }

    fn incident() -> Incident {
        incident_for(Action::Evacuate)
    }

    fn escalate(to: Action, details: &str) -> Event {
        let (verdict, original) = verdict(to.as_str(), details);
        Event::Escalate {
            action: to,
            verdict,
            original,
        }
    }

    #[test]
    fn escalation_keeps_the_incident_and_never_goes_back() {
        // (from, to, status before, allowed)
        let table = [
            (
                Action::LiveRepair,
                Action::Evacuate,
                RepairStatus::Noted,
                true,
            ),
            (
                Action::LiveRepair,
                Action::EvacuateFailover,
                RepairStatus::Pending,
                true,
            ),
            (
                Action::Evacuate,
                Action::EvacuateFailover,
                RepairStatus::Pending,
                true,
            ),
            (
                Action::Evacuate,
                Action::LiveRepair,
                RepairStatus::Pending,
                false,
            ),
            (
                Action::EvacuateFailover,
                Action::Evacuate,
                RepairStatus::Noted,
                false,
            ),
            (
                Action::Evacuate,
                Action::Evacuate,
                RepairStatus::Noted,
                false,
            ),
            (
                Action::LiveRepair,
                Action::Evacuate,
                RepairStatus::Completed,
                false,
            ),
            (
                Action::LiveRepair,
                Action::Evacuate,
                RepairStatus::Failed,
                false,
            ),
            (
                Action::LiveRepair,
                Action::Evacuate,
                RepairStatus::Canceled,
                false,
            ),
        ];
        for (from, to, status, allowed) in table {
            let mut i = incident_for(from);
            match status {
                RepairStatus::Noted => {}
                RepairStatus::Pending => {
                    i.apply(Event::JobSubmitted(1), 101.0).unwrap();
                }
                RepairStatus::Completed => {
                    i.apply(Event::JobSubmitted(1), 101.0).unwrap();
                    i.apply(Event::TagApplied, 101.0).unwrap();
                }
                RepairStatus::Failed => {
                    i.apply(Event::ActionFailed("x".into()), 101.0).unwrap();
                }
                RepairStatus::Canceled => {
                    i.apply(Event::Cancel, 101.0).unwrap();
                }
            }
            i.apply(Event::Blocked("budget".into()), 101.5).ok();
            let before = i.clone();
            let result = i.apply(escalate(to, "worse"), 102.0);
            assert_eq!(
                result.is_ok(),
                allowed,
                "{from:?} -> {to:?} while {status:?}"
            );
            if allowed {
                assert_eq!(i.uuid, before.uuid);
                assert_eq!(i.tag, before.tag);
                assert_eq!(i.jobs, before.jobs);
                assert_eq!(i.repair_status, before.repair_status);
                assert_eq!(i.action, to);
                assert_ne!(i.fingerprint, before.fingerprint);
                assert_eq!(i.fingerprint, i.verdict.fingerprint);
                assert_eq!(i.original.to_value()["status"], to.as_str());
                assert!(i.observed && i.blocked_by.is_none());
                let last = &i.history.last().unwrap().event;
                assert_eq!(
                    last,
                    &format!("escalated from {} to {}", from.as_str(), to.as_str())
                );
            } else {
                assert_eq!(i, before, "a refused escalation changes nothing");
            }
        }
    }

    #[test]
    fn warning_is_recorded_once_and_kept_on_completion() {
        let mut i = incident();
        i.apply(Event::JobSubmitted(1), 101.0).unwrap();
        i.apply(Event::Warning("left on node1: a (plain)".into()), 102.0)
            .unwrap();
        let serial = i.serial_no;
        i.apply(Event::Warning("left on node1: a (plain)".into()), 103.0)
            .unwrap();
        assert_eq!(i.serial_no, serial);
        i.apply(Event::TagApplied, 104.0).unwrap();
        assert_eq!(i.repair_status, RepairStatus::Completed);
        assert_eq!(i.warning.as_deref(), Some("left on node1: a (plain)"));
        assert!(i.history.iter().any(|h| h.event.starts_with("warning: ")));
        assert!(i.apply(Event::Warning("late".into()), 105.0).is_err());
        // Older records without the field still decode.
        let mut value = serde_json::to_value(&i).unwrap();
        value.as_object_mut().unwrap().remove("warning");
        let back: Incident = serde_json::from_value(value).unwrap();
        assert_eq!(back.warning, None);
    }

    #[test]
    fn acknowledgement_is_due_once_and_only_when_the_applied_tag_is_gone() {
        let mut i = incident();
        let tagged = vec![i.tag.clone()];
        // Not tagged yet: nothing to acknowledge.
        assert!(!i.awaits_acknowledgement(&[]));
        i.apply(Event::ActionStarted("draining".into()), 101.0)
            .unwrap();
        i.apply(Event::TagApplied, 102.0).unwrap();
        assert!(!i.awaits_acknowledgement(&tagged));
        assert!(i.awaits_acknowledgement(&[]));
        i.apply(Event::TagRemoved, 103.0).unwrap();
        // Recorded: never due again.
        assert!(!i.awaits_acknowledgement(&[]));
        // A failed incident's tag is acknowledged the same way.
        let mut f = incident();
        f.apply(Event::ActionFailed("x".into()), 101.0).unwrap();
        assert!(!f.awaits_acknowledgement(&[]));
        f.apply(Event::TagApplied, 102.0).unwrap();
        assert!(f.awaits_acknowledgement(&["other".into()]));
    }

    /// Issue 25 (4): an operator's acknowledgement through nodecare is recorded on the
    /// finished, tagged incident (once, with who); it is refused before the tag is on the node
    /// and after the acknowledgement.
    #[test]
    fn an_acknowledgement_asked_through_nodecare_is_recorded_once() {
        let who = "admin on the nodecare web page".to_owned();
        let mut i = incident();
        assert!(
            i.apply(Event::AcknowledgementAsked(who.clone()), 101.0)
                .is_err()
        );
        i.apply(Event::ActionStarted("draining".into()), 101.0)
            .unwrap();
        assert!(
            i.apply(Event::AcknowledgementAsked(who.clone()), 102.0)
                .is_err()
        );
        i.apply(Event::TagApplied, 103.0).unwrap();
        i.apply(Event::AcknowledgementAsked(who.clone()), 104.0)
            .unwrap();
        assert_eq!(i.acknowledgement_asked_by.as_deref(), Some(who.as_str()));
        assert!(!i.acknowledged, "acknowledged once the tag is gone");
        let serial = i.serial_no;
        i.apply(Event::AcknowledgementAsked("other".into()), 105.0)
            .unwrap();
        assert_eq!(i.serial_no, serial);
        assert_eq!(i.acknowledgement_asked_by.as_deref(), Some(who.as_str()));
        i.apply(Event::TagRemoved, 106.0).unwrap();
        assert!(i.apply(Event::AcknowledgementAsked(who), 107.0).is_err());
        // Older records without the field still decode.
        let mut value = serde_json::to_value(&i).unwrap();
        value
            .as_object_mut()
            .unwrap()
            .remove("acknowledgement_asked_by");
        let back: Incident = serde_json::from_value(value).unwrap();
        assert_eq!(back.acknowledgement_asked_by, None);
    }

    #[test]
    fn happy_path_noted_pending_completed_acknowledged_forgotten() {
        let mut i = incident();
        assert_eq!(i.repair_status, RepairStatus::Noted);
        assert_eq!(
            i.tag,
            "maintd:repairready:00000000-0000-0000-0000-000000000007"
        );
        i.apply(Event::ActionStarted("draining".into()), 101.0)
            .unwrap();
        i.apply(Event::JobSubmitted(5), 101.0).unwrap();
        assert_eq!(i.repair_status, RepairStatus::Pending);
        i.apply(Event::TagApplied, 102.0).unwrap();
        assert_eq!(i.repair_status, RepairStatus::Completed);
        // Still observed: acknowledging keeps it until it is gone.
        assert_eq!(
            i.apply(Event::TagRemoved, 103.0).unwrap(),
            Disposition::Keep
        );
        assert_eq!(
            i.apply(Event::NotObserved, 104.0).unwrap(),
            Disposition::Forget
        );
        assert_eq!(i.jobs, vec![5]);
        assert!(i.serial_no > 1);
        assert!(i.mtime >= 104.0);
    }

    #[test]
    fn an_offline_node_forgets_only_an_acknowledged_incident() {
        let mut i = incident();
        // Not acknowledged yet: an offline node keeps its incident (the tag awaits the operator).
        assert_eq!(i.apply(Event::NodeOffline, 1.0).unwrap(), Disposition::Keep);
        i.apply(Event::ActionStarted("draining".into()), 2.0)
            .unwrap();
        i.apply(Event::JobSubmitted(5), 2.0).unwrap();
        assert_eq!(i.apply(Event::NodeOffline, 3.0).unwrap(), Disposition::Keep);
        i.apply(Event::TagApplied, 4.0).unwrap();
        assert_eq!(i.apply(Event::NodeOffline, 5.0).unwrap(), Disposition::Keep);
        assert!(i.observed);
        // Acknowledged: the node reports nothing while offline, so the incident is forgotten.
        assert_eq!(i.apply(Event::TagRemoved, 6.0).unwrap(), Disposition::Keep);
        assert_eq!(
            i.apply(Event::NodeOffline, 7.0).unwrap(),
            Disposition::Forget
        );
        assert!(!i.observed);
        assert_eq!(
            i.history.last().map(|h| h.event.as_str()),
            Some("node offline: no longer observed")
        );
    }

    #[test]
    fn failure_switches_tag_and_acknowledgement_forgets_at_once() {
        let mut i = incident();
        i.apply(Event::JobSubmitted(1), 1.0).unwrap();
        i.apply(Event::ActionFailed("job 1 failed".into()), 2.0)
            .unwrap();
        assert_eq!(i.repair_status, RepairStatus::Failed);
        assert!(i.tag.starts_with(TAG_FAILED_PREFIX));
        // The failure tag job may still be submitted; nothing else.
        i.apply(Event::JobSubmitted(2), 3.0).unwrap();
        i.apply(Event::TagApplied, 4.0).unwrap();
        assert!(i.apply(Event::JobSubmitted(3), 5.0).is_err());
        assert!(i.observed);
        assert_eq!(
            i.apply(Event::TagRemoved, 6.0).unwrap(),
            Disposition::Forget
        );
    }

    #[test]
    fn cancel_stops_actions_and_forgets_when_gone() {
        let mut i = incident();
        assert_eq!(i.apply(Event::Cancel, 1.0).unwrap(), Disposition::Keep);
        assert!(i.apply(Event::ActionStarted("x".into()), 2.0).is_err());
        assert!(i.apply(Event::JobSubmitted(1), 2.0).is_err());
        assert_eq!(
            i.apply(Event::NotObserved, 3.0).unwrap(),
            Disposition::Forget
        );
    }

    #[test]
    fn finalized_incidents_cannot_be_canceled() {
        let mut i = incident();
        i.apply(Event::ActionFailed("x".into()), 1.0).unwrap();
        assert!(i.apply(Event::Cancel, 2.0).is_err());
    }

    #[test]
    fn tag_removal_before_tagging_is_refused() {
        let mut i = incident();
        assert!(i.apply(Event::TagRemoved, 1.0).is_err());
        i.apply(Event::ActionFailed("x".into()), 1.0).unwrap();
        assert!(i.apply(Event::TagRemoved, 2.0).is_err());
    }

    #[test]
    fn repeated_observation_does_not_bump_serial() {
        let mut i = incident();
        let serial = i.serial_no;
        i.apply(Event::Observed, 5.0).unwrap();
        i.apply(Event::Blocked("budget".into()), 5.0).unwrap();
        i.apply(Event::Blocked("budget".into()), 6.0).unwrap();
        assert_eq!(i.serial_no, serial + 1);
    }

    #[test]
    fn serialises_with_maintd_field_names() {
        let value = serde_json::to_value(incident()).unwrap();
        for key in [
            "uuid",
            "node",
            "original",
            "action",
            "jobs",
            "repair-status",
            "tag",
        ] {
            assert!(value.get(key).is_some(), "{key}");
        }
        assert_eq!(value["repair-status"], "noted");
        assert_eq!(value["action"], "evacuate");
        let back: Incident = serde_json::from_value(value).unwrap();
        assert_eq!(back, incident());
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Observed),
            Just(Event::NotObserved),
            Just(Event::Cancel),
            Just(Event::ActionStarted("start".into())),
            (0u64..5).prop_map(Event::JobSubmitted),
            Just(Event::Progress("p".into())),
            Just(Event::ActionFailed("f".into())),
            Just(Event::TagApplied),
            Just(Event::TagRemoved),
            Just(Event::AcknowledgementAsked("admin".into())),
            Just(Event::NodeOffline),
            Just(Event::Blocked("b".into())),
            Just(Event::Unblocked),
            Just(escalate(Action::EvacuateFailover, "e")),
            Just(escalate(Action::LiveRepair, "l")),
            Just(Event::Warning("w".into())),
        ]
    }

    fn rank(status: RepairStatus) -> u8 {
        match status {
            RepairStatus::Noted => 0,
            RepairStatus::Pending => 1,
            RepairStatus::Canceled | RepairStatus::Failed | RepairStatus::Completed => 2,
        }
    }

    proptest! {
        /// Over any event sequence: status only moves forward along the lifecycle, finalized
        /// states never change into each other, refused events change nothing, jobs are never
        /// added to canceled/completed incidents, the tag matches the status, and forgetting
        /// only happens in the documented cases.
        #[test]
        fn lifecycle_invariants(events in proptest::collection::vec(event(), 0..40)) {
            let mut i = incident();
            let mut now = 100.0;
            for event in events {
                now += 1.0;
                let before = i.clone();
                match i.apply(event.clone(), now) {
                    Err(_) => prop_assert_eq!(&i, &before, "refused event changed state"),
                    Ok(disposition) => {
                        prop_assert!(rank(i.repair_status) >= rank(before.repair_status));
                        // Never de-escalated.
                        prop_assert!(i.action.invasiveness() >= before.action.invasiveness());
                        if rank(before.repair_status) == 2 {
                            prop_assert_eq!(i.repair_status, before.repair_status);
                        }
                        if i.jobs.len() > before.jobs.len() {
                            prop_assert!(matches!(before.repair_status,
                                RepairStatus::Noted | RepairStatus::Pending | RepairStatus::Failed));
                        }
                        match i.repair_status {
                            RepairStatus::Failed => prop_assert!(i.tag.starts_with(TAG_FAILED_PREFIX)),
                            _ => prop_assert!(i.tag.starts_with(TAG_READY_PREFIX)),
                        }
                        if i.repair_status == RepairStatus::Completed {
                            prop_assert!(i.tag_applied);
                        }
                        if disposition == Disposition::Forget {
                            let documented = match i.repair_status {
                                RepairStatus::Canceled | RepairStatus::Noted => !i.observed,
                                RepairStatus::Completed => i.acknowledged && !i.observed,
                                RepairStatus::Failed => i.acknowledged,
                                RepairStatus::Pending => false,
                            };
                            prop_assert!(documented, "forgotten in an undocumented case");
                            // A forgotten incident is gone: stop feeding events.
                            break;
                        }
                        if i.serial_no != before.serial_no {
                            prop_assert!(i.mtime >= before.mtime);
                        }
                        prop_assert!(i.history.len() <= HISTORY_LIMIT);
                        if i.blocked_by.is_some() {
                            prop_assert!(i.is_active());
                        }
                    }
                }
            }
        }
    }
}
