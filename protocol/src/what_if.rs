//! `GET /1/what-if`: what the coordinator would do if something changed, tried on a private
//! copy of its state with the same duties and gate as its rounds (`nodecare what-if`, the web
//! page's form). Nothing it tries is written or sent.
//!
//! The query names the changes (`verdict=NODE:STATUS`, `drain=NODE`, `offline=NODE`, `return=NODE`,
//! `grant=NODE`, `campaign=all` or `campaign=NODE,NODE`, `policy=KEY:VALUE`), in the order they
//! apply, and optionally `at=MS` (the agents answer as in the last recorded round at or before
//! that time, not as they answer now)
//! `rounds=N` (at most [`MAX_ROUNDS`]) and `from=MS` (the simulated rounds run from then, not
//! now: maintenance windows and freezes are judged at the simulated times). Times are Unix milliseconds.

use serde::{Deserialize, Serialize};

use crate::DiagnoseStatus;
use crate::explain::ExplainedRound;
use crate::gate::BlockedBy;

/// Most changes one what-if tries.
pub const MAX_CHANGES: usize = 16;
/// Most rounds one what-if runs (and the default).
pub const MAX_ROUNDS: u32 = 50;
/// Longest query string, in bytes.
pub const MAX_QUERY_BYTES: usize = 8192;
/// Most nodes a campaign of a what-if names.
pub const MAX_CAMPAIGN_NODES: usize = 256;

/// A cap of the gate (cluster-wide, or of one node group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapKey {
    /// Most vm-capable nodes disrupted at once.
    MaxDisruptedNodes,
    /// Most vm-capable nodes disrupted at once, in percent (`none`: no such cap).
    MaxDisruptedPercent,
    /// Fewest healthy nodes left.
    MinHealthyNodes,
}

impl CapKey {
    const ALL: [Self; 3] = [
        Self::MaxDisruptedNodes,
        Self::MaxDisruptedPercent,
        Self::MinHealthyNodes,
    ];

    /// The spelling in the configuration.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MaxDisruptedNodes => "max_disrupted_nodes",
            Self::MaxDisruptedPercent => "max_disrupted_percent",
            Self::MinHealthyNodes => "min_healthy_nodes",
        }
    }
}

/// A setting of the storm breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerKey {
    /// Open when more than this many nodes opened incidents within the window.
    MaxIncidentNodes,
    /// Open when more than this percentage of the nodes opened incidents within the window.
    MaxIncidentPercent,
    /// The percentage rule needs at least this many nodes with incidents.
    MinIncidentNodes,
    /// The window, in seconds.
    WindowSecs,
    /// Open when more than this percentage of the agents give no verified report.
    MaxUnreachablePercent,
    /// Close by itself after this many seconds without a storm (`none`: only an operator).
    AutoCloseSecs,
}

impl BreakerKey {
    const ALL: [Self; 6] = [
        Self::MaxIncidentNodes,
        Self::MaxIncidentPercent,
        Self::MinIncidentNodes,
        Self::WindowSecs,
        Self::MaxUnreachablePercent,
        Self::AutoCloseSecs,
    ];

    /// The spelling in the configuration's `[breaker]` section.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MaxIncidentNodes => "max_incident_nodes",
            Self::MaxIncidentPercent => "max_incident_percent",
            Self::MinIncidentNodes => "min_incident_nodes",
            Self::WindowSecs => "window_secs",
            Self::MaxUnreachablePercent => "max_unreachable_percent",
            Self::AutoCloseSecs => "auto_close_secs",
        }
    }
}

/// A setting of the gate's policy a what-if may change, spelled as in the configuration:
/// `max_disrupted_nodes`, `max_disrupted_percent`, `min_healthy_nodes`, `grace`,
/// `breaker.KEY`, `group_caps.GROUP.CAP`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PolicyKey {
    /// A cluster-wide cap.
    Cluster(CapKey),
    /// A cap of one node group (by name or uuid).
    Group {
        /// The node group.
        group: String,
        /// The cap.
        cap: CapKey,
    },
    /// Seconds a planned disruption's failure domain is not acted on.
    Grace,
    /// A setting of the storm breaker.
    Breaker(BreakerKey),
}

/// Every key `--policy` takes, for an error message.
pub const POLICY_KEYS: &str = "CAP, grace, breaker.{max_incident_nodes,max_incident_percent,min_incident_nodes,window_secs,max_unreachable_percent,auto_close_secs}, group_caps.GROUP.CAP; CAP: max_disrupted_nodes, max_disrupted_percent, min_healthy_nodes";

impl PolicyKey {
    /// The spelling in the configuration and the query.
    pub fn as_text(&self) -> String {
        match self {
            Self::Cluster(cap) => cap.as_str().to_owned(),
            Self::Group { group, cap } => format!("group_caps.{group}.{}", cap.as_str()),
            Self::Grace => "grace".to_owned(),
            Self::Breaker(key) => format!("breaker.{}", key.as_str()),
        }
    }

    /// Reads a key (an unknown one is an error naming every key).
    pub fn parse(text: &str) -> Result<Self, String> {
        let cap = |name: &str| CapKey::ALL.into_iter().find(|c| c.as_str() == name);
        let found = if text == "grace" {
            Some(Self::Grace)
        } else if let Some(name) = text.strip_prefix("breaker.") {
            BreakerKey::ALL
                .into_iter()
                .find(|k| k.as_str() == name)
                .map(Self::Breaker)
        } else if let Some(rest) = text.strip_prefix("group_caps.") {
            rest.rsplit_once('.').and_then(|(group, name)| {
                let group_ok = !group.is_empty()
                    && group.len() <= crate::limits::MAX_NAME_BYTES
                    && group
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
                cap(name).filter(|_| group_ok).map(|cap| Self::Group {
                    group: group.to_owned(),
                    cap,
                })
            })
        } else {
            cap(text).map(Self::Cluster)
        };
        found.ok_or_else(|| format!("policy: unknown key {:?} (keys: {POLICY_KEYS})", clip(text)))
    }

    /// Whether the key takes `none` (no such cap, no automatic close).
    pub const fn takes_none(&self) -> bool {
        matches!(
            self,
            Self::Cluster(CapKey::MaxDisruptedPercent)
                | Self::Group {
                    cap: CapKey::MaxDisruptedPercent,
                    ..
                }
                | Self::Breaker(BreakerKey::AutoCloseSecs)
        )
    }

    /// Whether the key is a whole count of nodes (else a number: a percentage, seconds).
    pub const fn is_count(&self) -> bool {
        matches!(
            self,
            Self::Cluster(CapKey::MaxDisruptedNodes | CapKey::MinHealthyNodes)
                | Self::Group {
                    cap: CapKey::MaxDisruptedNodes | CapKey::MinHealthyNodes,
                    ..
                }
                | Self::Breaker(BreakerKey::MaxIncidentNodes | BreakerKey::MinIncidentNodes)
        )
    }

    /// Reads a value of this key: a whole number for counts, a number at or above 0 for
    /// percentages and seconds (percentages at most 100), `none` where the key takes it.
    pub fn value(&self, text: &str) -> Result<PolicyValue, String> {
        let key = self.as_text();
        if text == "none" {
            return if self.takes_none() {
                Ok(PolicyValue(None))
            } else {
                Err(format!("policy: {key} takes no `none`"))
            };
        }
        if self.is_count() {
            return text
                .parse::<u64>()
                .map(|n| PolicyValue(Some(n as f64)))
                .map_err(|_| {
                    format!(
                        "policy: {key}: a whole number expected, got {:?}",
                        clip(text)
                    )
                });
        }
        let number = text
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| {
                format!(
                    "policy: {key}: a number at or above 0 expected, got {:?}",
                    clip(text)
                )
            })?;
        let percent = matches!(
            self,
            Self::Cluster(CapKey::MaxDisruptedPercent)
                | Self::Group {
                    cap: CapKey::MaxDisruptedPercent,
                    ..
                }
                | Self::Breaker(BreakerKey::MaxIncidentPercent | BreakerKey::MaxUnreachablePercent)
        );
        if percent && number > 100.0 {
            return Err(format!(
                "policy: {key}: a percentage from 0 to 100, got {number}"
            ));
        }
        Ok(PolicyValue(Some(number)))
    }
}

impl TryFrom<String> for PolicyKey {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        Self::parse(&text)
    }
}

impl From<PolicyKey> for String {
    fn from(key: PolicyKey) -> Self {
        key.as_text()
    }
}

/// A policy value: a number, or `none` (no such cap).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PolicyValue(pub Option<f64>);

impl Eq for PolicyValue {}

impl PolicyValue {
    /// The value as a count (`none`: the largest).
    pub fn count(self) -> usize {
        self.0.map_or(usize::MAX, |n| n as usize)
    }

    /// The value as written in a query (`none`, `2`, `12.5`).
    pub fn as_text(self) -> String {
        self.0.map_or_else(|| "none".to_owned(), |n| n.to_string())
    }
}

/// One hypothetical change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Change {
    /// The node's agent reports this verdict from now on.
    Verdict {
        /// The node.
        node: String,
        /// Its verdict.
        verdict: DiagnoseStatus,
    },
    /// Someone else drains the node.
    Drain {
        /// The node.
        node: String,
    },
    /// Someone else sets the node offline.
    Offline {
        /// The node.
        node: String,
    },
    /// The operator returns the node to service: online, undrained, its `maintd:` tags removed
    /// (its finished incidents acknowledged).
    Return {
        /// The node.
        node: String,
    },
    /// Another tool is granted the node (an admission grant).
    Grant {
        /// The node.
        node: String,
    },
    /// A rolling-maintenance campaign starts, over these nodes (empty: all of them).
    Campaign {
        /// The nodes.
        nodes: Vec<String>,
    },
    /// A setting of the gate's policy is changed.
    Policy {
        /// The setting.
        key: PolicyKey,
        /// Its value (`null`: none).
        value: PolicyValue,
    },
}

impl Change {
    /// The change as `nodecare what-if` spells it (`--verdict node9=evacuate`).
    pub fn describe(&self) -> String {
        match self {
            Self::Verdict { node, verdict } => format!("verdict {node}={}", verdict.as_str()),
            Self::Drain { node } => format!("drain {node}"),
            Self::Offline { node } => format!("offline {node}"),
            Self::Return { node } => format!("return {node}"),
            Self::Grant { node } => format!("grant {node}"),
            Self::Campaign { nodes } if nodes.is_empty() => "campaign all".to_owned(),
            Self::Campaign { nodes } => format!("campaign {}", nodes.join(",")),
            Self::Policy { key, value } => {
                format!("policy {}={}", key.as_text(), value.as_text())
            }
        }
    }

    /// The node a change names, if one.
    pub fn node(&self) -> Option<&str> {
        match self {
            Self::Verdict { node, .. }
            | Self::Drain { node }
            | Self::Offline { node }
            | Self::Return { node }
            | Self::Grant { node } => Some(node),
            Self::Campaign { .. } | Self::Policy { .. } => None,
        }
    }

    fn query_pair(&self) -> String {
        match self {
            Self::Verdict { node, verdict } => format!("verdict={node}:{}", verdict.as_str()),
            Self::Drain { node } => format!("drain={node}"),
            Self::Offline { node } => format!("offline={node}"),
            Self::Return { node } => format!("return={node}"),
            Self::Grant { node } => format!("grant={node}"),
            Self::Campaign { nodes } if nodes.is_empty() => "campaign=all".to_owned(),
            Self::Campaign { nodes } => format!("campaign={}", nodes.join(",")),
            Self::Policy { key, value } => {
                format!("policy={}:{}", key.as_text(), value.as_text())
            }
        }
    }
}

/// Reads a verdict's status as people write it (`Ok` or `ok`, `live-repair`, `evacuate`,
/// `evacuate-failover`, `unknown`).
pub fn parse_verdict(text: &str) -> Result<DiagnoseStatus, String> {
    match text {
        "Ok" | "ok" | "OK" => Ok(DiagnoseStatus::Ok),
        "unknown" => Ok(DiagnoseStatus::Unknown),
        "live-repair" => Ok(DiagnoseStatus::LiveRepair),
        "evacuate" => Ok(DiagnoseStatus::Evacuate),
        "evacuate-failover" => Ok(DiagnoseStatus::EvacuateFailover),
        other => Err(format!(
            "not a verdict: {:?} (Ok, live-repair, evacuate, evacuate-failover, unknown)",
            clip(other)
        )),
    }
}

/// What `GET /1/what-if` is asked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Query {
    /// The changes, in the order they apply.
    pub changes: Vec<Change>,
    /// Start from the last recorded round at or before this time (`None`: the latest).
    pub at_ms: Option<u64>,
    /// Most rounds to run (`None`: [`MAX_ROUNDS`]).
    pub rounds: Option<u32>,
    /// The simulated rounds run from this time (`None`: now): maintenance windows and freezes
    /// are judged at the simulated times (`from=MS`, at most [`MAX_FROM_AHEAD_MS`] ahead).
    pub from_ms: Option<u64>,
}

/// How far ahead `from` may be: a year.
pub const MAX_FROM_AHEAD_MS: u64 = 366 * 24 * 3600 * 1000;

/// Whether `text` may be a node name (letters, digits, `.`, `-`, `_`; at most
/// [`crate::limits::MAX_NAME_BYTES`]).
pub fn is_node_name(text: &str) -> bool {
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

fn node(field: &str, text: &str) -> Result<String, String> {
    if is_node_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!("{field}: not a node name: {:?}", clip(text)))
    }
}

impl Query {
    /// Reads a query string (no percent-encoding: node names, statuses and numbers need none).
    pub fn parse(query: Option<&str>) -> Result<Self, String> {
        let query = query.unwrap_or("");
        if query.len() > MAX_QUERY_BYTES {
            return Err(format!(
                "the query is {} bytes, longer than the {MAX_QUERY_BYTES} allowed",
                query.len()
            ));
        }
        let mut parsed = Self::default();
        let number = |name: &str, text: &str| {
            text.parse::<u64>()
                .map_err(|_| format!("{name}: a whole number expected, got {:?}", clip(text)))
        };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{}: a key=value pair expected", clip(pair)))?;
            let change = match key {
                "at" | "rounds" | "from" => {
                    let n = number(key, value)?;
                    let slot_given = if key == "at" {
                        parsed.at_ms.replace(n).is_some()
                    } else if key == "from" {
                        parsed.from_ms.replace(n).is_some()
                    } else {
                        let rounds = u32::try_from(n)
                            .ok()
                            .filter(|r| (1..=MAX_ROUNDS).contains(r))
                            .ok_or_else(|| format!("rounds: from 1 to {MAX_ROUNDS}, got {n}"))?;
                        parsed.rounds.replace(rounds).is_some()
                    };
                    if slot_given {
                        return Err(format!("{key}: given twice"));
                    }
                    continue;
                }
                "verdict" => {
                    let (name, status) = value.split_once(':').ok_or_else(|| {
                        format!("verdict: NODE:VERDICT expected, got {:?}", clip(value))
                    })?;
                    Change::Verdict {
                        node: node("verdict", name)?,
                        verdict: parse_verdict(status).map_err(|e| format!("verdict: {e}"))?,
                    }
                }
                "drain" => Change::Drain {
                    node: node(key, value)?,
                },
                "offline" => Change::Offline {
                    node: node(key, value)?,
                },
                "return" => Change::Return {
                    node: node(key, value)?,
                },
                "grant" => Change::Grant {
                    node: node(key, value)?,
                },
                "campaign" if value == "all" => Change::Campaign { nodes: Vec::new() },
                "campaign" => {
                    let nodes = value
                        .split(',')
                        .map(|n| node("campaign", n))
                        .collect::<Result<Vec<_>, _>>()?;
                    if nodes.len() > MAX_CAMPAIGN_NODES {
                        return Err(format!(
                            "campaign: {} nodes, more than the {MAX_CAMPAIGN_NODES} allowed",
                            nodes.len()
                        ));
                    }
                    Change::Campaign { nodes }
                }
                "policy" => {
                    let (name, value) = value.rsplit_once(':').ok_or_else(|| {
                        format!("policy: KEY:VALUE expected, got {:?}", clip(value))
                    })?;
                    let key = PolicyKey::parse(name)?;
                    let value = key.value(value)?;
                    Change::Policy { key, value }
                }
                other => return Err(format!("unknown parameter {:?}", clip(other))),
            };
            if parsed.changes.len() == MAX_CHANGES {
                return Err(format!("more than {MAX_CHANGES} changes"));
            }
            parsed.changes.push(change);
        }
        Ok(parsed)
    }

    /// The query string (without `?`).
    pub fn to_query_string(&self) -> String {
        self.changes
            .iter()
            .map(Change::query_pair)
            .chain(self.at_ms.map(|at| format!("at={at}")))
            .chain(self.rounds.map(|n| format!("rounds={n}")))
            .chain(self.from_ms.map(|from| format!("from={from}")))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// Where a what-if started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    /// The simulated clock's first round (Unix ms).
    pub at_ms: u64,
    /// The recorded round whose verdicts and storage the agents answer with, when asked with
    /// `at` (none: the agents as read at the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_round: Option<u64>,
    /// The simulated clock's step: the coordinator's round interval (ms).
    pub interval_ms: u64,
    /// nodecare's Ganeti jobs in flight at the start, which keep running in the simulation.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub jobs_in_flight: usize,
}

#[allow(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if"
)]
const fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A Ganeti job the coordinator would submit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredictedJob {
    /// The simulated round that submits it (from 1).
    pub round: u32,
    /// Ganeti's opcode (`OP_NODE_SET_PARAMS`, `OP_INSTANCE_MIGRATE`, …).
    pub opcode: String,
    /// The node or instance it acts on.
    pub target: String,
    /// What it does, as its reason trail says (`drain node2.example`).
    pub operation: String,
    /// The reason trail text the coordinator would give it (with the private copy's uuids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Something that waits, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wait {
    /// Who proposed it (`incident <uuid>`, `maintenance campaign <uuid>`).
    pub holder: String,
    /// What it acts on.
    pub subject: String,
    /// The gate's rule that refused it, or `its duty waits` when the duty held it back
    /// before the gate (a move that must wait, another incident first).
    pub rule: String,
    /// Why, in words (the incident's `blocked_by`).
    pub why: String,
    /// What blocks it, when the gate refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<BlockedBy>,
}

/// [`Wait::rule`] of what a duty held back itself.
pub const DUTY_WAITS: &str = "its duty waits";

/// [`Wait::rule`] of a verdict the grace of a planned disruption holds back (its holder is the
/// grace's holder).
pub const GRACE_WAITS: &str = "the grace of a planned disruption";

/// One simulated round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIfRound {
    /// Its number (from 1).
    pub number: u32,
    /// Its simulated time (Unix ms).
    pub at_ms: u64,
    /// What the gate saw and judged, in `nodecare explain`'s words (none when it judged
    /// nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<ExplainedRound>,
    /// The Ganeti jobs it submits, in order.
    pub jobs: Vec<PredictedJob>,
    /// What the gate refused this round.
    pub waits: Vec<Wait>,
    /// What stopped the round, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A node at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndNode {
    /// The node.
    pub name: String,
    /// Drained.
    pub drained: bool,
    /// Offline.
    pub offline: bool,
    /// Instances with the node as primary.
    pub primaries: usize,
    /// Whether any of these changed from the start.
    pub changed: bool,
}

/// An incident at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndIncident {
    /// Its uuid (of the private copy for a new one).
    pub uuid: String,
    /// Its node.
    pub node: String,
    /// Its action (`evacuate`, `live-repair`, …).
    pub action: String,
    /// Its repair status (`noted`, `pending`, `completed`, `failed`, `canceled`).
    pub status: String,
    /// What blocks it, when the gate refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_by: Option<String>,
    /// Why it ends as it does: why it failed, what it waits for, what a completed one left
    /// behind (none when there is nothing to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Whether the what-if opened it.
    pub new: bool,
}

/// A rolling-maintenance campaign at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndCampaign {
    /// Its id (of the private copy for a new one).
    pub id: String,
    /// Where it is (`running`, `done`, …).
    pub state: String,
    /// Why it ends as it does: the failure that stopped it, what keeps its next group from
    /// starting (none when there is nothing to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Whether the what-if started it.
    pub new: bool,
}

/// How the what-if ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Ending {
    /// A round changed nothing more (no job, no change of any incident or node).
    Settled {
        /// The rounds run, the quiet one included.
        rounds: u32,
    },
    /// The round limit was reached while things still changed.
    RoundLimit {
        /// The limit.
        rounds: u32,
    },
    /// A round failed.
    Failed {
        /// The round.
        round: u32,
        /// Why.
        error: String,
    },
    /// Its work budget ran out: the answer covers the rounds run so far.
    Cut {
        /// The rounds run.
        rounds: u32,
        /// The budget, in seconds.
        budget_s: u64,
        /// Which budget: the processor time its rounds used, or the time they took on a busy
        /// machine.
        #[serde(default)]
        by: CutBy,
    },
}

/// Which budget cut a what-if ([`Ending::Cut`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CutBy {
    /// The processor time of its rounds.
    #[default]
    Cpu,
    /// The wall-clock time of its rounds (the machine was busy: the what-if runs at a lowered
    /// priority).
    Wall,
}

impl CutBy {
    /// How the budget reads in a sentence (`processor time`, `time`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "processor time",
            Self::Wall => "time on a busy machine",
        }
    }
}

/// The answer of `GET /1/what-if`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// The changes tried.
    pub changes: Vec<Change>,
    /// Where it started.
    pub start: Start,
    /// The rounds, in order.
    pub rounds: Vec<WhatIfRound>,
    /// Every job it would submit, in order (the rounds' jobs together).
    pub jobs: Vec<PredictedJob>,
    /// The nodes at the end (those drained or offline, and those that changed).
    pub nodes: Vec<EndNode>,
    /// The incidents at the end.
    pub incidents: Vec<EndIncident>,
    /// The campaigns at the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub campaigns: Vec<EndCampaign>,
    /// How it ended.
    pub ending: Ending,
    /// What the simulation leaves out or assumed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    #[test]
    fn a_query_reads_back_the_same() {
        let text = "verdict=node9:evacuate&drain=node5&offline=node2&grant=node4&campaign=all&campaign=n1,n2&policy=max_disrupted_nodes:2&at=5&rounds=7";
        let query = Query::parse(Some(text)).unwrap();
        assert_eq!(query.changes.len(), 7);
        for key in [
            "max_disrupted_percent:12.5",
            "max_disrupted_percent:none",
            "min_healthy_nodes:3",
            "grace:0",
            "breaker.max_incident_nodes:9",
            "breaker.max_incident_percent:40",
            "breaker.min_incident_nodes:2",
            "breaker.window_secs:60",
            "breaker.max_unreachable_percent:75",
            "breaker.auto_close_secs:none",
            "group_caps.rack-a.max_disrupted_nodes:2",
            "group_caps.default.min_healthy_nodes:1",
        ] {
            let one = format!("policy={key}");
            let query = Query::parse(Some(&one)).unwrap();
            assert_eq!(query.to_query_string(), one);
            let json = serde_json::to_string(&query.changes).unwrap();
            let back: Vec<Change> = serde_json::from_str(&json).unwrap();
            assert_eq!(back, query.changes, "{json}");
        }
        assert_eq!(
            query.changes[0],
            Change::Verdict {
                node: "node9".into(),
                verdict: DiagnoseStatus::Evacuate
            }
        );
        assert_eq!(
            query.changes[6],
            Change::Policy {
                key: PolicyKey::Cluster(CapKey::MaxDisruptedNodes),
                value: PolicyValue(Some(2.0))
            }
        );
        assert_eq!((query.at_ms, query.rounds), (Some(5), Some(7)));
        assert_eq!(query.to_query_string(), text);
        assert_eq!(Query::parse(None).unwrap(), Query::default());
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        let many = vec!["drain=n"; MAX_CHANGES + 1].join("&");
        let long = format!("drain={}", "a".repeat(MAX_QUERY_BYTES));
        for (bad, says) in [
            ("verdict=node9:broken", "not a verdict"),
            ("verdict=node9", "NODE:VERDICT"),
            ("drain=a b", "not a node name"),
            ("drain=", "not a node name"),
            ("policy=max_disrupted_nodes:two", "whole number"),
            ("policy=speed:2", "unknown key"),
            ("policy=speed:2", "window_secs"),
            ("policy=breaker.speed:2", "unknown key"),
            ("policy=group_caps..max_disrupted_nodes:2", "unknown key"),
            ("policy=min_healthy_nodes:none", "takes no `none`"),
            ("policy=max_disrupted_percent:150", "from 0 to 100"),
            ("policy=grace:-1", "at or above 0"),
            ("rounds=0", "from 1 to"),
            ("rounds=51", "from 1 to"),
            ("at=1&at=2", "given twice"),
            ("reboot=n1", "unknown parameter"),
            ("drain", "key=value"),
            ("campaign=a,,b", "not a node name"),
            (many.as_str(), "more than 16 changes"),
            (long.as_str(), "longer than"),
        ] {
            let error = Query::parse(Some(bad)).unwrap_err();
            assert!(error.contains(says), "{bad:.80}: {error}");
            assert!(error.len() < 300, "{error}");
        }
    }
}
