//! `GET /1/explain`: why the coordinator did (or did not do) something, from its flight
//! recorder, the rounds it recorded. What `nodecare explain` and the web page show.
//!
//! Times are Unix milliseconds; a recorded round stands for every following round that decided
//! the same (`repeats` of them, the last at `last_ms`).

use serde::{Deserialize, Serialize};

use crate::gate::BlockedBy;

/// What is explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Subject {
    /// A node, at a time (`None`: now).
    Node {
        /// The node.
        node: String,
        /// The time asked about.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<u64>,
    },
    /// A record of nodecare (an incident, a campaign, a balancing run, an instance repair, a
    /// grant): its uuid, as the reason trail's `incident=` names it.
    Record {
        /// The uuid.
        id: String,
    },
    /// A Ganeti job nodecare submitted.
    Job {
        /// The job id.
        id: u64,
    },
}

/// The answer of `GET /1/explain`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// What was asked.
    pub subject: Subject,
    /// For a job: what its reason trail says and the operation it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<ExplainedJob>,
    /// The recorded rounds that decided about the subject, oldest first (for a node at a time:
    /// the last one at or before that time; for a record: each round that judged it
    /// differently).
    pub rounds: Vec<ExplainedRound>,
    /// What the recorder cannot say (no round mentions the subject, retention forgot it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A job traced back to its round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainedJob {
    /// The job id.
    pub id: u64,
    /// The holder of the operation (`incident <uuid>`, `maintenance campaign <uuid>`).
    pub holder: String,
    /// The holder's uuid (the reason trail's `incident=`).
    pub trail: String,
    /// The operation's key (the reason trail's `intent=`).
    pub intent: String,
    /// What it does.
    pub description: String,
    /// Where the operation is (`recorded`, `submitted`, `succeeded`, `failed`, …).
    pub state: String,
    /// When the operation was recorded (the round's time).
    pub recorded_ms: u64,
    /// The recorded round it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<u64>,
}

/// One recorded round, as far as it concerns the subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainedRound {
    /// The round's number in the recorder (increasing, kept across restarts and takeovers).
    pub round: u64,
    /// The round's time.
    pub at_ms: u64,
    /// The last round that decided the same (equal to `at_ms` when none did).
    pub last_ms: u64,
    /// How many later rounds decided the same.
    pub repeats: u64,
    /// The coordinator (node) that ran it.
    pub coordinator: String,
    /// The verdict its agent gave that round, for a node (`evacuate`, `unknown (unreachable:
    /// …)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Who held the subject node that round, before the round's proposals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// The storm breaker, when open (why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<String>,
    /// The caps in force (`cluster: max_disrupted_nodes = 1`, per group).
    pub caps: Vec<String>,
    /// The failure domains that held disruptions before the proposals, with their holders.
    pub in_force: Vec<DomainHeld>,
    /// The judgements about the subject.
    pub judgements: Vec<ExplainedJudgement>,
}

/// A failure domain's disruptions in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainHeld {
    /// The domain.
    pub domain: String,
    /// `node: holder` for each disrupted node.
    pub held: Vec<String>,
}

/// The gate's judgement of one proposal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainedJudgement {
    /// The duty that proposed it (`node-repair`, `maintenance`, …).
    pub duty: String,
    /// Who would hold the nodes.
    pub holder: String,
    /// What it acts on.
    pub subject: String,
    /// Why the duty proposed it.
    pub reason: String,
    /// The nodes it disrupts.
    pub disrupts: Vec<String>,
    /// The nodes it touches without disrupting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub touches: Vec<String>,
    /// Memory (MiB) of the instances it moves off the disrupted nodes: what the capacity check
    /// counted (`None`: unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moves_memory_mib: Option<u64>,
    /// Admitted or not.
    pub admitted: bool,
    /// The rule that decided, in words (`a new disruption within the caps and failure domains`,
    /// `the continuation of a disruption its holder holds`, `operator override <id>`, or the
    /// refusal's rule: `cap`, `domain`, `storage`, `capacity`, `breaker`, `conflict`, …).
    pub rule: String,
    /// What blocks it, when refused (the same as the incident's `blocked_by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<BlockedBy>,
}

impl BlockedBy {
    /// The rule's name (`cap`, `domain`, …): what an operator looks up.
    pub const fn rule(&self) -> &'static str {
        match self {
            Self::Breaker { .. } => "storm breaker",
            Self::Domain { .. } => "one failure domain at a time",
            Self::SpansDomains { .. } => "one failure domain per disruption",
            Self::Cap { .. } => "cap on disrupted nodes",
            Self::Storage { .. } => "storage must be whole",
            Self::Capacity { .. } => "capacity (N+1)",
            Self::Conflict { .. } => "one holder per node",
            Self::UnknownNode { .. } => "node must be in the cluster",
            Self::Master { .. } => "the master is not evacuated",
            Self::Other => "unknown rule",
        }
    }
}
