//! The fields of the list commands (`nodecare incidents`, `nodecare nodes`, and the tables of
//! `nodecare status` and `nodecare watch`) and the cells they share: pure formatting of the
//! coordinator's typed status.

use nodecare_protocol::DiagnoseStatus;
use nodecare_protocol::clock::{utc_text, utc_text_ms};
use nodecare_protocol::status::{AgentStatus, IncidentSummary};

use crate::list::{Field, age};

/// The TAG cell: the tag only while it is on the node (applied and not removed).
pub(crate) fn tag_cell(incident: &IncidentSummary) -> String {
    if incident.tag_applied && !incident.acknowledged {
        incident.tag.clone()
    } else {
        "-".to_owned()
    }
}

/// The NOTE cell: what holds the incident or how it ended.
pub(crate) fn note_cell(incident: &IncidentSummary) -> String {
    let mut notes = Vec::new();
    if let Some(blocked) = &incident.blocked_by {
        notes.push(format!("blocked_by: {blocked}"));
    }
    if let Some(failure) = &incident.failure {
        notes.push(format!("failed: {failure}"));
    }
    if let Some(warning) = &incident.warning {
        notes.push(format!("warning: {warning}"));
    }
    if incident.repair_status == "failed" && !incident.tag_applied {
        notes.push("failure tag not yet on the node".to_owned());
    }
    if incident.acknowledged {
        notes.push(match incident.acknowledged_at {
            Some(at) => format!("acknowledged {} (tag removed)", utc_text(at)),
            None => "acknowledged (tag removed)".to_owned(),
        });
    }
    notes.join("; ")
}

/// The time ages are measured from: now, or `NODECARE_NOW_MS` (Unix ms) for reproducible output.
pub(crate) fn now_ms() -> u64 {
    std::env::var("NODECARE_NOW_MS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(nodecare_protocol::now_ms)
}

pub(crate) fn jobs_cell(jobs: &[u64]) -> Option<String> {
    (!jobs.is_empty()).then(|| {
        jobs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    })
}

pub(crate) fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// The fields of `nodecare incidents`.
pub(crate) const INCIDENT_FIELDS: &[Field<IncidentSummary>] = &[
    Field {
        name: "id",
        title: "Incident",
        numeric: false,
        cell: |i| Some(i.id.clone()),
    },
    Field {
        name: "node",
        title: "Node",
        numeric: false,
        cell: |i| Some(i.node.clone()),
    },
    Field {
        name: "node_uuid",
        title: "NodeUUID",
        numeric: false,
        cell: |i| i.node_uuid.clone(),
    },
    Field {
        name: "action",
        title: "Action",
        numeric: false,
        cell: |i| Some(i.action.clone()),
    },
    Field {
        name: "status",
        title: "Status",
        numeric: false,
        cell: |i| Some(i.repair_status.clone()),
    },
    Field {
        name: "jobs",
        title: "Jobs",
        numeric: true,
        cell: |i| jobs_cell(&i.jobs),
    },
    Field {
        name: "tag",
        title: "Tag",
        numeric: false,
        cell: |i| non_empty(tag_cell(i)).filter(|t| t != "-"),
    },
    Field {
        name: "tag_name",
        title: "TagName",
        numeric: false,
        cell: |i| Some(i.tag.clone()),
    },
    Field {
        name: "tag_applied",
        title: "TagApplied",
        numeric: false,
        cell: |i| Some(yes_no(i.tag_applied)),
    },
    Field {
        name: "acknowledged",
        title: "Acked",
        numeric: false,
        cell: |i| Some(yes_no(i.acknowledged)),
    },
    Field {
        name: "blocked_by",
        title: "BlockedBy",
        numeric: false,
        cell: |i| i.blocked_by.clone(),
    },
    Field {
        name: "failure",
        title: "Failure",
        numeric: false,
        cell: |i| i.failure.clone(),
    },
    Field {
        name: "mtime",
        title: "Modified",
        numeric: false,
        cell: |i| Some(utc_text(i.mtime)),
    },
    Field {
        name: "note",
        title: "Note",
        numeric: false,
        cell: |i| non_empty(note_cell(i)),
    },
];

pub(crate) const INCIDENT_DEFAULTS: &[&str] =
    &["id", "node", "action", "status", "jobs", "tag", "note"];

pub(crate) fn yes_no(value: bool) -> String {
    if value { "Y" } else { "N" }.to_owned()
}

/// A row of `nodecare nodes`: an agent's status and the time ages are measured from.
pub(crate) struct NodeRow {
    pub(crate) status: AgentStatus,
    pub(crate) now_ms: u64,
}

/// The fields of `nodecare nodes`.
pub(crate) const NODE_FIELDS: &[Field<NodeRow>] = &[
    Field {
        name: "node",
        title: "Node",
        numeric: false,
        cell: |r| Some(r.status.node.clone()),
    },
    Field {
        name: "agent",
        title: "Agent",
        numeric: false,
        cell: |r| Some(r.status.state.as_str().to_owned()),
    },
    Field {
        name: "verdict",
        title: "Verdict",
        numeric: false,
        cell: |r| {
            r.status
                .verdict
                .map(|v| DiagnoseStatus::as_str(v).to_owned())
        },
    },
    Field {
        name: "age",
        title: "Age",
        numeric: false,
        cell: |r| {
            r.status
                .last_ok_ms
                .map(|at| age(r.now_ms.saturating_sub(at)))
        },
    },
    Field {
        name: "checked",
        title: "Checked",
        numeric: false,
        cell: |r| Some(age(r.now_ms.saturating_sub(r.status.checked_at_ms))),
    },
    Field {
        name: "reason",
        title: "Reason",
        numeric: false,
        cell: |r| r.status.error.clone().or_else(|| r.status.reason.clone()),
    },
    Field {
        name: "error",
        title: "Error",
        numeric: false,
        cell: |r| r.status.error.clone(),
    },
    Field {
        name: "fingerprint",
        title: "Fingerprint",
        numeric: false,
        cell: |r| r.status.fingerprint.clone(),
    },
    Field {
        name: "sequence",
        title: "Sequence",
        numeric: true,
        cell: |r| r.status.sequence.map(|s| s.to_string()),
    },
    Field {
        name: "last_ok",
        title: "LastVerified",
        numeric: false,
        cell: |r| r.status.last_ok_ms.map(utc_text_ms),
    },
];

pub(crate) const NODE_DEFAULTS: &[&str] = &["node", "agent", "verdict", "age", "reason"];
