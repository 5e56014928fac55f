//! The coordinator's status API (`/1/status`, `/1/agents`, `/1/overview`): the types the
//! coordinator serialises and `nodecare status` decodes.
//!
//! An incident entry of `/1/status` is maintd's incident record plus nodecare's fields; the
//! [`IncidentSummary`] here names the fields a reader needs (others, such as `original` and
//! `history`, are ignored when decoding).

use serde::{Deserialize, Serialize};

use crate::gate::{AuditEntry, BreakerView, DomainStatus, Grant, OverrideView, Waiting};
use crate::verdict::{DiagnoseStatus, NodeVerdict};

/// How the last read of a node's agent went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    /// A verified, fresh report.
    Ok,
    /// A verified report the agent marks stale (not diagnosed since its restart): not acted on.
    Stale,
    /// No answer (connect error, timeout, HTTP error).
    Unreachable,
    /// An answer that does not verify or does not parse.
    Unverifiable,
}

impl AgentState {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Stale => "stale",
            Self::Unreachable => "unreachable",
            Self::Unverifiable => "unverifiable",
        }
    }
}

impl std::fmt::Display for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One agent's status (`/1/agents`, and `agent` of each incident).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStatus {
    /// Node name.
    pub node: String,
    /// How the last read went.
    pub state: AgentState,
    /// Verdict status of the last verified report.
    pub verdict: Option<DiagnoseStatus>,
    /// Why the verdict is `unknown`, as the report has it: each failing script's name and what
    /// went wrong (`script: reason; ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Fingerprint of the last verified report.
    pub fingerprint: Option<String>,
    /// Sequence of the last verified report.
    pub sequence: Option<u64>,
    /// Error message, when no verified report was read.
    pub error: Option<String>,
    /// Unix ms of this check.
    pub checked_at_ms: u64,
    /// Unix ms of the last verified report.
    pub last_ok_ms: Option<u64>,
}

/// What the coordinator's last round did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundSummary {
    /// Round number since start.
    pub number: u64,
    /// Unix ms when it started.
    pub started_ms: u64,
    /// Duration in ms.
    pub duration_ms: u64,
    /// Agents read.
    pub agents: usize,
    /// Agents that did not give a verified report.
    pub agents_failed: usize,
    /// Jobs submitted in this round.
    pub jobs_submitted: usize,
    /// Error that ended the round early, if any.
    pub error: Option<String>,
    /// Ganeti's version as its master answers it (`software_version` of `GET /2/info`), read
    /// by the round; `None` before a round read it (or from a coordinator that does not send it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ganeti_version: Option<String>,
}

/// An incident as a reader of the status API sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentSummary {
    /// Incident uuid.
    pub id: String,
    /// Node name (maintd's implementation put the name under `node`; kept so).
    pub node: String,
    /// The node's Ganeti uuid (what the design's `node` holds), beside its name; `None` from
    /// a coordinator that does not send it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_uuid: Option<String>,
    /// Requested action (`live-repair`, `evacuate`, `evacuate-failover`).
    pub action: String,
    /// maintd's `repair-status` (`noted`, `pending`, `canceled`, `failed`, `completed`).
    #[serde(rename = "repair-status")]
    pub repair_status: String,
    /// Ganeti jobs submitted for the incident.
    #[serde(default)]
    pub jobs: Vec<u64>,
    /// The tag that is, or on success will be, put on the node.
    pub tag: String,
    /// Whether the tag is on the node (its job succeeded).
    #[serde(default)]
    pub tag_applied: bool,
    /// Whether an operator removed the tag (acknowledged the incident).
    #[serde(default)]
    pub acknowledged: bool,
    /// When the acknowledgement was seen, Unix seconds.
    #[serde(default)]
    pub acknowledged_at: Option<f64>,
    /// Why no action is taken right now, if so.
    #[serde(default)]
    pub blocked_by: Option<String>,
    /// Why the incident failed, if it did.
    #[serde(default)]
    pub failure: Option<String>,
    /// What an operator must know about how it ended (instances left on or shut down on
    /// the node), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Last change, Unix seconds.
    #[serde(default)]
    pub mtime: f64,
}

/// What canceling an incident did to one of its Ganeti jobs not finished yet (the `jobs` of
/// the answer to `POST /1/incidents/<uuid>/cancel`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanceledJob {
    /// Ganeti job id.
    pub job: u64,
    /// The incident's intent the job carries out (`drain`, `migrate-inst1-1`, `offline-1`, ...).
    pub intent: String,
    /// Whether Ganeti canceled it (it had not started); otherwise it runs to its end.
    pub canceled: bool,
    /// Ganeti's answer, or why it could not be asked.
    pub message: String,
}

/// One line of an incident's history: a state change or progress, with when and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// Unix seconds.
    pub at: f64,
    /// maintd's `repair-status` after the event.
    pub status: String,
    /// What happened.
    pub event: String,
}

/// What a job of an incident does (the `kind` of the coordinator's intent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// `drain`, `move`, `tag` or `repair` (a repair runs on the agent, not as a Ganeti job).
    pub kind: String,
}

/// One step the coordinator took or will take for an incident, with its Ganeti job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStep {
    /// Unique within the incident; also in the job's reason trail.
    pub key: String,
    /// What it does.
    pub spec: JobSpec,
    /// What it does, for people (`migrate web from node2 to node3`); absent from older
    /// coordinators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    /// `planned`, `submitted`, `succeeded`, `failed` or `replanned`.
    pub state: String,
    /// Ganeti job id, once known.
    #[serde(default)]
    pub job_id: Option<u64>,
    /// Unix ms when recorded.
    pub created_ms: u64,
    /// Unix ms when submitted.
    #[serde(default)]
    pub submitted_ms: Option<u64>,
    /// Unix ms when finished.
    #[serde(default)]
    pub finished_ms: Option<u64>,
    /// Failure message.
    #[serde(default)]
    pub error: Option<String>,
}

/// `/1/incidents/{uuid}`: one incident with its history, verdict, agent and job steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentDetail {
    /// The fields of the incident list.
    #[serde(flatten)]
    pub summary: IncidentSummary,
    /// Creation, Unix seconds.
    #[serde(default)]
    pub ctime: Option<f64>,
    /// The node's verdict that opened the incident.
    pub verdict: NodeVerdict,
    /// What happened so far, oldest first (the coordinator keeps the most recent entries).
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// The node's agent status, if the coordinator read it.
    #[serde(default)]
    pub agent: Option<AgentStatus>,
    /// Steps taken or planned, with their Ganeti jobs.
    #[serde(default)]
    pub intents: Vec<JobStep>,
}

/// One instance the instance-repair duty (harep's tags) found broken or repairing in the last
/// round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRepairSummary {
    /// The instance.
    pub instance: String,
    /// harep's state name (`Pending repair`, `Failed repair`, `Needs repair`, ...).
    pub state: String,
    /// The repair it needs (`fix-storage`, `migrate`, `failover`, `reinstall`), if broken.
    #[serde(default)]
    pub needs: Option<String>,
    /// What happens and why.
    pub note: String,
    /// What the gate says holds its repair back, if anything.
    #[serde(default)]
    pub blocked_by: Option<String>,
}

/// `/1/overview`: what `nodecare status` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    /// The node the coordinator runs on.
    pub node: String,
    /// The last round.
    pub round: RoundSummary,
    /// Incidents not yet forgotten.
    pub incidents: Vec<IncidentSummary>,
    /// Every agent's status.
    pub agents: Vec<AgentStatus>,
    /// Ids of jobs still in flight.
    #[serde(default)]
    pub jobs: Vec<u64>,
    /// Every failure domain with its disrupted nodes, as the gate last saw them (empty before
    /// the first round).
    #[serde(default)]
    pub domains: Vec<DomainStatus>,
    /// What the gate refused in its last round and why.
    #[serde(default)]
    pub waiting: Vec<Waiting>,
    /// Disruptions granted to other tools, in force.
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// Operator overrides in force or recently ended.
    #[serde(default)]
    pub overrides: Vec<OverrideView>,
    /// The storm breaker.
    #[serde(default)]
    pub breaker: BreakerView,
    /// The last lines of the audit log of gate writes, oldest first.
    #[serde(default)]
    pub audit: Vec<AuditEntry>,
    /// Instances the instance-repair duty is repairing or would repair (empty when it is off).
    #[serde(default)]
    pub instance_repairs: Vec<InstanceRepairSummary>,
    /// Maintenance windows and freezes now (`None`: a coordinator that does not send them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calendar: Option<crate::calendar::CalendarStatus>,
    /// What needs an approval, what waits for one, the decisions (`None`: a coordinator that
    /// does not send them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<crate::gate::ApprovalsStatus>,
    /// Completed evacuations whose instances go back to their node once it is healthy
    /// (`[failback]`), each instance with where it stands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failback: Vec<HomecomingView>,
}

/// A completed evacuation whose instances go back to its node (failback).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomecomingView {
    /// The incident that evacuated the node.
    pub incident: String,
    /// The node.
    pub node: String,
    /// Unix ms from which the node has been back in service and healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since_ms: Option<u64>,
    /// Why the node is not back in service and healthy (`node2 is drained`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
    /// Unix ms every instance was back or given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// The instances.
    pub instances: Vec<HomeboundView>,
}

/// One instance of a homecoming.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeboundView {
    /// The instance.
    pub instance: String,
    /// `waiting`, `back` or `given up`.
    pub state: String,
    /// Why it waits or was given up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Moves home submitted.
    pub attempts: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_status_round_trips_and_reason_is_optional() {
        let text = r#"{"node":"n1","state":"ok","verdict":"unknown","reason":"disk: exit code 2",
            "fingerprint":"f","sequence":3,"error":null,"checked_at_ms":5,"last_ok_ms":5}"#;
        let status: AgentStatus = serde_json::from_str(text).unwrap();
        assert_eq!(status.state, AgentState::Ok);
        assert_eq!(status.verdict, Some(DiagnoseStatus::Unknown));
        assert_eq!(status.reason.as_deref(), Some("disk: exit code 2"));
        let back: AgentStatus =
            serde_json::from_str(&serde_json::to_string(&status).unwrap()).unwrap();
        assert_eq!(back, status);
        let without = r#"{"node":"n1","state":"unreachable","verdict":null,"fingerprint":null,
            "sequence":null,"error":"refused","checked_at_ms":5,"last_ok_ms":null}"#;
        let status: AgentStatus = serde_json::from_str(without).unwrap();
        assert_eq!(status.reason, None);
        assert!(!serde_json::to_string(&status).unwrap().contains("reason"));
    }

    #[test]
    fn incidents_carry_the_node_uuid_beside_the_name() {
        let text = r#"{"id":"i1","uuid":"i1","node":"node3.example.com","node_uuid":"u3",
            "action":"evacuate","repair-status":"pending","jobs":[4],"tag":"t"}"#;
        let incident: IncidentSummary = serde_json::from_str(text).unwrap();
        assert_eq!(incident.node, "node3.example.com");
        assert_eq!(incident.node_uuid.as_deref(), Some("u3"));
        // From a coordinator that does not send it.
        let text =
            r#"{"id":"i1","node":"n","action":"evacuate","repair-status":"noted","tag":"t"}"#;
        let incident: IncidentSummary = serde_json::from_str(text).unwrap();
        assert_eq!(incident.node_uuid, None);
    }

    #[test]
    fn unknown_agent_state_is_an_error() {
        let text = r#"{"node":"n1","state":"fine","verdict":null,"fingerprint":null,
            "sequence":null,"error":null,"checked_at_ms":5,"last_ok_ms":null}"#;
        assert!(serde_json::from_str::<AgentStatus>(text).is_err());
    }
}
