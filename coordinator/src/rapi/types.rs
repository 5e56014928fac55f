//! Wire types of Ganeti's RAPI v2 (as served by Ganeti 3.0.2) and the nodecare reason trail.
//!
//! Only the fields nodecare reads are modelled; unknown fields are ignored, so newer Ganeti
//! versions that add fields still parse. Fields that Ganeti reports as `null` for offline nodes
//! (memory, disk, CPU counts) are `Option`s.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// Reason-trail source nodecare claims for every job it submits.
pub const NODECARE_REASON_SOURCE: &str = "gnt:daemon:nodecare";

/// Source Ganeti's RAPI gives to the text passed in the `reason` query parameter.
/// RAPI refuses a `reason` in the request body ("Can't overwrite static parameters"), so the
/// query parameter is the only way to put text into the trail; nodecare's own source and the
/// incident uuid therefore travel inside that text (see [`JobReason::to_query_value`]).
pub const RAPI_USER_REASON_SOURCE: &str = "gnt:user";

/// Job id as assigned by Ganeti's job queue.
pub type JobId = u64;

/// `/2/info` (subset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub name: String,
    pub master: String,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub software_version: String,
    #[serde(default)]
    pub enabled_disk_templates: Vec<String>,
    #[serde(default)]
    pub enabled_hypervisors: Vec<String>,
    #[serde(default)]
    pub default_iallocator: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Node role letter as reported in `/2/nodes?bulk=1` (`role` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeRole {
    #[serde(rename = "M")]
    Master,
    #[serde(rename = "C")]
    MasterCandidate,
    #[serde(rename = "R")]
    Regular,
    #[serde(rename = "D")]
    Drained,
    #[serde(rename = "O")]
    Offline,
}

/// One node of `/2/nodes?bulk=1` or `/2/nodes/<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    pub role: NodeRole,
    #[serde(default)]
    pub offline: bool,
    #[serde(default)]
    pub drained: bool,
    #[serde(default)]
    pub master_candidate: bool,
    #[serde(default = "default_true")]
    pub master_capable: bool,
    #[serde(default = "default_true")]
    pub vm_capable: bool,
    #[serde(default)]
    pub pinst_list: Vec<String>,
    #[serde(default)]
    pub sinst_list: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(rename = "group.uuid", default)]
    pub group_uuid: String,
    #[serde(default)]
    pub pip: String,
    #[serde(default)]
    pub sip: String,
    /// Free memory in MiB (`null` when the node is offline or unreachable).
    #[serde(default)]
    pub mfree: Option<u64>,
    #[serde(default)]
    pub mtotal: Option<u64>,
    /// Memory used by the node itself (MiB).
    #[serde(default)]
    pub mnode: Option<u64>,
    /// Free disk in MiB.
    #[serde(default)]
    pub dfree: Option<u64>,
    #[serde(default)]
    pub dtotal: Option<u64>,
    #[serde(default)]
    pub ctotal: Option<u64>,
}

fn default_true() -> bool {
    true
}

/// One instance of `/2/instances?bulk=1` or `/2/instances/<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    pub pnode: String,
    #[serde(default)]
    pub snodes: Vec<String>,
    pub disk_template: String,
    /// e.g. `running`, `ADMIN_down`, `ERROR_nodeoffline`.
    #[serde(default)]
    pub status: String,
    /// `up`, `down` or `offline`.
    #[serde(default)]
    pub admin_state: String,
    #[serde(default)]
    pub oper_state: Option<bool>,
    #[serde(default)]
    pub oper_ram: Option<u64>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub beparams: InstanceBeParams,
    #[serde(rename = "disk.sizes", default)]
    pub disk_sizes: Vec<u64>,
}

/// Filled backend parameters of an instance (subset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceBeParams {
    #[serde(default)]
    pub maxmem: u64,
    #[serde(default)]
    pub minmem: u64,
    #[serde(default)]
    pub vcpus: u64,
    #[serde(default)]
    pub always_failover: bool,
}

/// One node group of `/2/groups?bulk=1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub alloc_policy: String,
    #[serde(default)]
    pub node_list: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// Status of a job (`status` field of `/2/jobs/<id>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Queued,
    Waiting,
    Canceling,
    Running,
    Canceled,
    Success,
    Error,
}

impl JobStatus {
    /// Whether the job can no longer change.
    pub fn is_finalized(self) -> bool {
        matches!(self, Self::Canceled | Self::Success | Self::Error)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Waiting => "waiting",
            Self::Canceling => "canceling",
            Self::Running => "running",
            Self::Canceled => "canceled",
            Self::Success => "success",
            Self::Error => "error",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of an opcode's reason trail: `[source, text, timestamp in ns]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonEntry(pub String, pub String, pub u64);

impl ReasonEntry {
    pub fn source(&self) -> &str {
        &self.0
    }
    pub fn text(&self) -> &str {
        &self.1
    }
}

/// The parts of an opcode nodecare reads back (`ops[]` of a job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpCode {
    #[serde(rename = "OP_ID")]
    pub op_id: String,
    #[serde(default)]
    pub reason: Vec<ReasonEntry>,
    #[serde(default)]
    pub comment: Option<String>,
    /// Every other opcode parameter, verbatim.
    #[serde(flatten)]
    pub params: serde_json::Map<String, Value>,
}

/// A job as returned by `/2/jobs/<id>` (and, without `oplog`/`opresult`, by `/2/jobs?bulk=1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub status: JobStatus,
    #[serde(default)]
    pub summary: Vec<String>,
    #[serde(default)]
    pub ops: Vec<OpCode>,
    #[serde(default)]
    pub opstatus: Vec<String>,
    #[serde(default)]
    pub opresult: Vec<Value>,
    #[serde(default)]
    pub received_ts: Option<(u64, u64)>,
    #[serde(default)]
    pub start_ts: Option<(u64, u64)>,
    #[serde(default)]
    pub end_ts: Option<(u64, u64)>,
}

impl Job {
    /// The nodecare reason of the job: the first opcode whose trail carries one.
    pub fn nodecare_reason(&self) -> Option<JobReason> {
        self.ops.iter().find_map(|op| JobReason::from_trail(&op.reason))
    }

    /// The failures reported by the job's opcodes, in opcode order.
    pub fn op_failures(&self) -> Vec<OpFailure> {
        self.opresult.iter().filter_map(OpFailure::from_opresult).collect()
    }

    /// A one-line description of why the job did not succeed (empty when it did).
    pub fn failure_message(&self) -> String {
        let failures = self.op_failures();
        if failures.is_empty() {
            match self.status {
                JobStatus::Success => String::new(),
                other => format!("job {} ended {other}", self.id),
            }
        } else {
            failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
        }
    }

    /// Child jobs a node evacuation or node migration submitted (`[{"jobs": [[true, id], ...]}]`).
    pub fn child_jobs(&self) -> Vec<JobId> {
        self.opresult.iter().flat_map(child_jobs_of_opresult).collect()
    }
}

/// Ids of jobs listed in one opcode result of the form `{"jobs": [[true, id], [false, msg]]}`.
pub fn child_jobs_of_opresult(result: &Value) -> Vec<JobId> {
    let Some(jobs) = result.get("jobs").and_then(Value::as_array) else {
        return Vec::new();
    };
    jobs.iter()
        .filter_map(|entry| {
            let pair = entry.as_array()?;
            match (pair.first()?.as_bool()?, pair.get(1)?.as_u64()) {
                (true, Some(id)) => Some(id),
                _ => None,
            }
        })
        .collect()
}

/// A failed opcode's result: `["OpExecError", [msg]]`, `["OpPrereqError", [msg, kind]]`, or
/// another Ganeti error class with its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpFailure {
    /// Ganeti's error class, e.g. `OpExecError`.
    pub class: String,
    pub message: String,
    /// The error kind of an `OpPrereqError` (e.g. `wrong_state`), if given.
    pub kind: Option<String>,
}

impl OpFailure {
    /// Parses one `opresult` entry; `None` if it is not an error (e.g. `null` or a result object).
    pub fn from_opresult(value: &Value) -> Option<Self> {
        let pair = value.as_array()?;
        if pair.len() != 2 {
            return None;
        }
        let class = pair.first()?.as_str()?;
        if !looks_like_error_class(class) {
            return None;
        }
        let args = pair.get(1)?;
        let (message, kind) = match args {
            Value::Array(items) => {
                let message = items.first().map(value_text).unwrap_or_default();
                let kind = items.get(1).and_then(Value::as_str).map(str::to_owned);
                (message, kind)
            }
            other => (value_text(other), None),
        };
        Some(Self { class: class.to_owned(), message, kind })
    }
}

impl std::fmt::Display for OpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Some(kind) => write!(f, "{}: {} ({kind})", self.class, self.message),
            None => write!(f, "{}: {}", self.class, self.message),
        }
    }
}

/// Ganeti's error classes are CamelCase identifiers ending in `Error`/`Failure`
/// (`OpExecError`, `OpPrereqError`, `HooksFailure`, ...); a successful result is never a
/// two-element list starting with such a name.
fn looks_like_error_class(class: &str) -> bool {
    !class.is_empty()
        && class.chars().all(|c| c.is_ascii_alphanumeric())
        && class.starts_with(|c: char| c.is_ascii_uppercase())
        && (class.ends_with("Error") || class.ends_with("Failure"))
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Answer of `GET /2/jobs/<id>/wait`: `{"job_info": [...fields], "log_entries": [...]}`,
/// or `null` when nothing changed within RAPI's wait period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobWaitAnswer {
    pub job_info: Vec<Value>,
    #[serde(default)]
    pub log_entries: Vec<Value>,
}

/// Body of a RAPI error response: `{"code": 404, "message": "Not Found", "explain": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RapiErrorBody {
    pub code: u16,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub explain: String,
}

/// Why nodecare submitted a job: the incident it belongs to and a short text.
///
/// It travels to Ganeti as the `reason` query parameter, whose text RAPI stores in every opcode's
/// reason trail as `["gnt:user", "<text>", <ns>]`. The text is
/// `gnt:daemon:nodecare incident=<uuid> <description>`, so after a crash the coordinator finds its
/// jobs again by reading `ops[].reason` of `/2/jobs?bulk=1` or `/2/jobs/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReason {
    pub incident: Uuid,
    pub description: String,
}

/// Longest description kept in a reason (RAPI query strings and Ganeti's job files stay small).
pub const MAX_REASON_DESCRIPTION: usize = 200;

impl JobReason {
    pub fn new(incident: Uuid, description: impl Into<String>) -> Self {
        Self { incident, description: sanitize_description(&description.into()) }
    }

    /// The value of the `reason` query parameter (not yet percent-encoded).
    pub fn to_query_value(&self) -> String {
        let description = sanitize_description(&self.description);
        if description.is_empty() {
            format!("{NODECARE_REASON_SOURCE} incident={}", self.incident)
        } else {
            format!("{NODECARE_REASON_SOURCE} incident={} {description}", self.incident)
        }
    }

    /// Parses the text written by [`Self::to_query_value`].
    pub fn parse_text(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(NODECARE_REASON_SOURCE)?.strip_prefix(' ')?;
        let rest = rest.strip_prefix("incident=")?;
        let (uuid_text, description) = match rest.split_once(' ') {
            Some((u, d)) => (u, d),
            None => (rest, ""),
        };
        let incident = Uuid::parse_str(uuid_text).ok()?;
        Some(Self { incident, description: description.to_owned() })
    }

    /// Finds nodecare's entry in an opcode's reason trail. Accepts the entry under RAPI's user
    /// source (how it arrives through RAPI) and under nodecare's own source (how a LUXI client
    /// or the simulation may record it).
    pub fn from_trail(trail: &[ReasonEntry]) -> Option<Self> {
        trail.iter().find_map(|entry| {
            let source = entry.source();
            if source == RAPI_USER_REASON_SOURCE {
                Self::parse_text(entry.text())
            } else if source == NODECARE_REASON_SOURCE {
                Self::parse_text(entry.text()).or_else(|| {
                    // Own source with the bare form "incident=<uuid> <description>".
                    Self::parse_text(&format!("{NODECARE_REASON_SOURCE} {}", entry.text()))
                })
            } else {
                None
            }
        })
    }
}

/// Keeps descriptions on one line, printable and bounded.
fn sanitize_description(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if out.len() > MAX_REASON_DESCRIPTION {
        let mut cut = MAX_REASON_DESCRIPTION;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// Node evacuation mode (`mode` of `POST /2/nodes/<n>/evacuate`). Ganeti 3.0.2 refuses `all`
/// through the iallocator, so primaries and secondaries are evacuated separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvacuateMode {
    #[serde(rename = "primary-only")]
    PrimaryOnly,
    #[serde(rename = "secondary-only")]
    SecondaryOnly,
}

/// Migration mode of `PUT /2/instances/<i>/migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationMode {
    Live,
    #[serde(rename = "non-live")]
    NonLive,
}

/// `mode` of `POST /2/instances/<i>/replace-disks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReplaceDisksMode {
    #[serde(rename = "replace_on_primary")]
    OnPrimary,
    #[serde(rename = "replace_on_secondary")]
    OnSecondary,
    #[serde(rename = "replace_new_secondary")]
    NewSecondary,
    #[serde(rename = "replace_auto")]
    Auto,
}

/// What a tag operation applies to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TagTarget {
    Cluster,
    Node(String),
    Instance(String),
    Group(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_round_trips() {
        let id = Uuid::new_v4();
        let r = JobReason::new(id, "Draining node1.example");
        let text = r.to_query_value();
        assert!(text.starts_with("gnt:daemon:nodecare incident="));
        assert_eq!(JobReason::parse_text(&text), Some(r));
        let bare = JobReason::new(id, "");
        assert_eq!(JobReason::parse_text(&bare.to_query_value()), Some(bare));
    }

    #[test]
    fn reason_found_in_trail() {
        let id = Uuid::new_v4();
        let trail = vec![
            ReasonEntry("gnt:user".into(), format!("gnt:daemon:nodecare incident={id} tag"), 1),
            ReasonEntry("gnt:library:rlib2:nodes_name_tags".into(), String::new(), 2),
        ];
        assert_eq!(JobReason::from_trail(&trail).map(|r| r.incident), Some(id));
        let foreign = vec![ReasonEntry("gnt:user".into(), "operator did it".into(), 1)];
        assert_eq!(JobReason::from_trail(&foreign), None);
        let bad_uuid =
            vec![ReasonEntry("gnt:user".into(), "gnt:daemon:nodecare incident=xyz a".into(), 1)];
        assert_eq!(JobReason::from_trail(&bad_uuid), None);
    }

    #[test]
    fn description_is_sanitized() {
        let r = JobReason::new(Uuid::nil(), "a\nb\t c");
        assert_eq!(r.description, "a b c");
        let long = JobReason::new(Uuid::nil(), "é".repeat(300));
        assert!(long.description.len() <= MAX_REASON_DESCRIPTION);
    }

    #[test]
    fn op_failures_parse() {
        let exec = serde_json::json!(["OpExecError", ["disk gone"]]);
        let prereq = serde_json::json!(["OpPrereqError", ["no migrations", "wrong_state"]]);
        let ok_pair = serde_json::json!([["master_candidate", "False"], ["drained", "True"]]);
        assert_eq!(
            OpFailure::from_opresult(&exec),
            Some(OpFailure { class: "OpExecError".into(), message: "disk gone".into(), kind: None })
        );
        let p = OpFailure::from_opresult(&prereq).unwrap();
        assert_eq!(p.kind.as_deref(), Some("wrong_state"));
        assert_eq!(p.to_string(), "OpPrereqError: no migrations (wrong_state)");
        assert_eq!(OpFailure::from_opresult(&ok_pair), None);
        assert_eq!(OpFailure::from_opresult(&Value::Null), None);
        assert_eq!(OpFailure::from_opresult(&serde_json::json!(["name", "x"])), None);
    }

    #[test]
    fn child_jobs_parse() {
        let r = serde_json::json!({"jobs": [[true, 47], [false, "failed"], [true, 48]]});
        assert_eq!(child_jobs_of_opresult(&r), vec![47, 48]);
        assert!(child_jobs_of_opresult(&serde_json::json!(null)).is_empty());
        assert!(child_jobs_of_opresult(&serde_json::json!({"jobs": "x"})).is_empty());
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn reason_text_never_panics(text in ".*") {
                let _ = JobReason::parse_text(&text);
            }

            #[test]
            fn reason_round_trips_any_description(desc in ".*", raw in any::<u128>()) {
                let r = JobReason::new(Uuid::from_u128(raw), desc);
                prop_assert_eq!(JobReason::parse_text(&r.to_query_value()), Some(r));
            }

            #[test]
            fn opresult_parse_never_panics(v in arb_json()) {
                let _ = OpFailure::from_opresult(&v);
                let _ = child_jobs_of_opresult(&v);
            }
        }

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(|n| Value::from(n)),
                "[A-Za-z ]{0,12}".prop_map(Value::String),
            ];
            leaf.prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map("[a-z]{1,5}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }
    }
}
