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
    /// Where the subject is and what it waits for now, as its duty keeps it, for people: an
    /// incident's status, jobs and latest wait (since when), or its end; a campaign's failure
    /// (node, step, why), what its nodes wait for, its graces. Shown first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub now: Vec<String>,
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
            Self::Freeze { .. } => "no planned work in a freeze",
            Self::OutsideWindow { .. } => "planned work inside a maintenance window",
            Self::Approval { .. } => "approved before it starts",
            Self::Other => "unknown rule",
        }
    }
}

/// What `GET /1/explain` is asked: its query (`node=NODE[&at=MS]`, `record=UUID` or `job=ID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// A node at a time.
    Node {
        /// The node.
        node: String,
        /// The time (Unix ms; `None`: now).
        at_ms: Option<u64>,
    },
    /// A record by its uuid (hyphenated, lowercase or uppercase hex).
    Record(String),
    /// A Ganeti job.
    Job(u64),
}

/// Whether `text` is a hyphenated uuid (8-4-4-4-12 hex digits).
pub fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `text` may be a node name (letters, digits, `.`, `-`, `_`; at most
/// [`crate::limits::MAX_NAME_BYTES`]).
fn is_node_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= crate::limits::MAX_NAME_BYTES
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

/// At most 64 characters of what a caller sent, for an error message.
fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

impl Query {
    /// What a person names (`nodecare explain SUBJECT`): a job when it is a number, a record
    /// when it is a uuid, else a node; `at_ms` only for a node.
    pub fn from_subject(subject: &str, at_ms: Option<u64>) -> Result<Self, String> {
        let subject = subject.trim();
        let query = if !subject.is_empty() && subject.bytes().all(|b| b.is_ascii_digit()) {
            Self::Job(
                subject
                    .parse()
                    .map_err(|_| format!("job {}: too large", clip(subject)))?,
            )
        } else if is_uuid(subject) {
            Self::Record(subject.to_ascii_lowercase())
        } else if is_node_name(subject) {
            return Ok(Self::Node {
                node: subject.to_owned(),
                at_ms,
            });
        } else {
            return Err(format!(
                "{:?} is not a node name, uuid or job id",
                clip(subject)
            ));
        };
        if at_ms.is_some() {
            return Err("a time is asked about a node only".into());
        }
        Ok(query)
    }

    /// The query string (without `?`).
    pub fn to_query_string(&self) -> String {
        match self {
            Self::Node { node, at_ms: None } => format!("node={node}"),
            Self::Node {
                node,
                at_ms: Some(at),
            } => format!("node={node}&at={at}"),
            Self::Record(id) => format!("record={id}"),
            Self::Job(id) => format!("job={id}"),
        }
    }

    /// Reads a query string: exactly one subject, `at` only with a node; no percent-encoding
    /// (node names, uuids and numbers need none).
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let query = query.unwrap_or("");
        let mut node = None;
        let mut at = None;
        let mut record = None;
        let mut job = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{}: a key=value pair expected", clip(pair)))?;
            let slot = match key {
                "node" => &mut node,
                "at" => &mut at,
                "record" => &mut record,
                "job" => &mut job,
                other => return Err(format!("unknown parameter {:?}", clip(other))),
            };
            if slot.replace(value).is_some() {
                return Err(format!("{key}: given twice"));
            }
        }
        let number = |name: &str, text: &str| {
            text.parse::<u64>()
                .map_err(|_| format!("{name}: a whole number expected, got {:?}", clip(text)))
        };
        match (node, record, job) {
            (Some(node), None, None) => {
                if !is_node_name(node) {
                    return Err(format!("node: not a node name: {:?}", clip(node)));
                }
                Ok(Self::Node {
                    node: node.to_owned(),
                    at_ms: at.map(|at| number("at", at)).transpose()?,
                })
            }
            (None, Some(_), None) | (None, None, Some(_)) if at.is_some() => {
                Err("at: only with node".to_owned())
            }
            (None, Some(record), None) if is_uuid(record) => {
                Ok(Self::Record(record.to_ascii_lowercase()))
            }
            (None, Some(record), None) => Err(format!("record: not a uuid: {:?}", clip(record))),
            (None, None, Some(job)) => number("job", job).map(Self::Job),
            _ => Err("exactly one of node, record or job".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    #[test]
    fn queries_name_exactly_one_subject() {
        assert_eq!(
            Query::parse(Some("node=node3.example&at=5")),
            Ok(Query::Node {
                node: "node3.example".into(),
                at_ms: Some(5)
            })
        );
        assert_eq!(Query::parse(Some("job=17")), Ok(Query::Job(17)));
        assert_eq!(
            Query::parse(Some("record=00000000-0000-0000-0000-00000000000A")),
            Ok(Query::Record("00000000-0000-0000-0000-00000000000a".into()))
        );
        for (bad, says) in [
            (None, "exactly one"),
            (Some(""), "exactly one"),
            (Some("node=a&job=1"), "exactly one"),
            (Some("job=1&at=3"), "at: only with node"),
            (
                Some("record=00000000-0000-0000-0000-000000000001&at=3"),
                "at: only with node",
            ),
            (Some("node=a&node=b"), "given twice"),
            (Some("node=%2e%2e"), "not a node name"),
            (Some("node=a b"), "not a node name"),
            (Some("node="), "not a node name"),
            (Some("node=a&at=yesterday"), "at: a whole number"),
            (Some("job=-1"), "job: a whole number"),
            (Some("record=nope"), "not a uuid"),
            (
                Some("record=00000000-0000-0000-0000-00000000000g"),
                "not a uuid",
            ),
            (Some("what=1"), "unknown parameter"),
            (Some("node"), "key=value"),
        ] {
            let error = Query::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
        assert!(Query::parse(Some(&format!("node={}", "a".repeat(10_000)))).is_err());
        let error = Query::parse(Some(&format!("what{}=1", "x".repeat(1000)))).unwrap_err();
        assert!(error.len() < 120, "{error}");
    }

    #[test]
    fn a_subject_makes_the_query_that_reads_back_the_same() {
        for (subject, at, query) in [
            ("node3", None, "node=node3"),
            ("node3", Some(5), "node=node3&at=5"),
            ("4711", None, "job=4711"),
            (
                "00000000-0000-0000-0000-000000000002",
                None,
                "record=00000000-0000-0000-0000-000000000002",
            ),
        ] {
            let parsed = Query::from_subject(subject, at).unwrap();
            assert_eq!(parsed.to_query_string(), query);
            assert_eq!(Query::parse(Some(query)).unwrap(), parsed);
        }
        for (subject, at) in [
            ("4711", Some(5)),
            ("00000000-0000-0000-0000-000000000002", Some(5)),
            ("a&job=1", None),
            (" ", None),
            ("99999999999999999999999", None),
        ] {
            assert!(Query::from_subject(subject, at).is_err(), "{subject}");
        }
    }
}
