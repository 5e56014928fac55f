//! Wire types of Ganeti's RAPI v2 (as served by Ganeti 3.0.2), their conversion into the
//! [`crate`] types, and how a [`Reason`] travels through RAPI.
//!
//! This is the one decoder of RAPI answers in nodecare: the coordinator reads them through
//! the client, the roll planner decodes saved or fetched answers with these types and converts
//! them into its planning model. Only the fields nodecare reads are modelled; unknown fields are
//! ignored, so newer Ganeti versions that add fields still parse. Fields that Ganeti reports as `null` for offline nodes
//! (memory, disk, CPU counts) are `Option`s.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate as ganeti;
use crate::{JobId, JobStatus, NodeRole, Reason};

/// Source Ganeti's RAPI gives to the text passed in the `reason` query parameter.
///
/// RAPI refuses a `reason` in the request body ("Can't overwrite static parameters") and has no
/// way to choose the source, so the `reason` query parameter is the only way to put text into a
/// job's reason trail. Checked on Ganeti 3.0.2: `PUT /2/nodes/<n>/tags?tag=t&reason=X` gives
/// `ops[0].reason == [["gnt:user", "X", ns], ["gnt:library:rlib2:nodes_name_tags", "", ns],
/// ["gnt:opcode:tags_set", "job=17;index=0", ns]]`.
pub const RAPI_USER_REASON_SOURCE: &str = "gnt:user";

/// The `reason` query parameter for a job: the source (by default [`crate::REASON_SOURCE`],
/// `gnt:daemon:maintd`), then the reason text (`gnt:daemon:maintd nodecare incident=<uuid>
/// intent=<key>: <description>`). The trail entry then reads `["gnt:user", <this>, ns]`, and
/// [`Reason::parse_text`] finds the marker in it whatever the source. A Ganeti job filter
/// therefore matches nodecare's jobs on the entry's `reason` field, not its `source` (which
/// RAPI sets to `gnt:user`).
pub fn reason_query_value(source: &str, reason: &Reason) -> String {
    let text: String = reason
        .text()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("{source} {text}")
}

/// `/2/info` (subset).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RapiClusterInfo {
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
    /// The cluster's instance policy (htools reads it).
    #[serde(default)]
    pub ipolicy: Option<RapiIPolicy>,
    /// The cluster's hypervisor parameters, per hypervisor (only `kvm`'s `machine_version` is
    /// read).
    #[serde(default)]
    pub hvparams: Option<ClusterHvParams>,
}

/// `hvparams` of `/2/info` (subset).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterHvParams {
    #[serde(default)]
    pub kvm: Option<HvParams>,
}

/// Hypervisor parameters (subset): the one the campaigns' checks read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HvParams {
    /// KVM only; `""` when not pinned.
    #[serde(default)]
    pub machine_version: Option<String>,
}

/// One instance specification of an instance policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RapiISpec {
    pub memory_size: i64,
    pub cpu_count: i64,
    pub disk_size: i64,
    pub disk_count: i64,
    pub nic_count: i64,
    pub spindle_use: i64,
}

/// A minimum and maximum instance specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RapiMinMax {
    pub min: RapiISpec,
    pub max: RapiISpec,
}

/// An instance policy (`ipolicy` of `/2/info` and of `/2/groups?bulk=1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RapiIPolicy {
    pub std: RapiISpec,
    pub minmax: Vec<RapiMinMax>,
    pub disk_templates: Vec<String>,
    pub vcpu_ratio: f64,
    pub spindle_ratio: f64,
}

impl From<RapiClusterInfo> for ganeti::ClusterInfo {
    fn from(w: RapiClusterInfo) -> Self {
        Self {
            name: w.name,
            master: w.master,
            uuid: non_empty(w.uuid),
            default_iallocator: non_empty(w.default_iallocator),
            software_version: non_empty(w.software_version),
            enabled_hypervisors: w.enabled_hypervisors,
            kvm_machine_version: w
                .hvparams
                .and_then(|hv| hv.kvm)
                .and_then(|kvm| kvm.machine_version)
                .and_then(non_empty),
        }
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// One node of `/2/nodes?bulk=1` or `/2/nodes/<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RapiNode {
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
    /// CPUs reserved for the node itself.
    #[serde(default)]
    pub cnos: Option<u64>,
    /// Total spindles (exclusive storage).
    #[serde(default)]
    pub sptotal: Option<u64>,
    /// Free spindles (exclusive storage).
    #[serde(default)]
    pub spfree: Option<u64>,
    /// Filled node parameters.
    #[serde(default)]
    pub ndparams: Option<NodeNdParams>,
    /// The node's Ganeti version, when the answer names one (Ganeti 3.0.2's and 3.1's do not).
    #[serde(default)]
    pub software_version: Option<String>,
}

/// Filled node parameters of a node (subset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNdParams {
    #[serde(default)]
    pub exclusive_storage: Option<bool>,
    #[serde(default)]
    pub spindle_count: Option<u64>,
}

fn default_true() -> bool {
    true
}

impl From<RapiNode> for ganeti::Node {
    fn from(w: RapiNode) -> Self {
        Self {
            name: w.name,
            uuid: w.uuid,
            role: w.role,
            drained: w.drained,
            offline: w.offline,
            master_candidate: w.master_candidate,
            vm_capable: w.vm_capable,
            primary_ip: w.pip,
            secondary_ip: w.sip,
            tags: w.tags,
            group: w.group_uuid,
            primary_instances: w.pinst_list,
            secondary_instances: w.sinst_list,
            memory_free: w.mfree,
            memory_total: w.mtotal,
            disk_free: w.dfree,
            software_version: w.software_version.and_then(non_empty),
        }
    }
}

/// One instance of `/2/instances?bulk=1` or `/2/instances/<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RapiInstance {
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
    /// Spindles of each disk (`null` entries where not set).
    #[serde(rename = "disk.spindles", default)]
    pub disk_spindles: Option<Vec<Option<u64>>>,
    /// Disk space the instance uses on its nodes, in MiB.
    #[serde(default)]
    pub disk_usage: Option<u64>,
    /// Whether the instance is only planned (Ganeti 3.0 forthcoming instances).
    #[serde(default)]
    pub forthcoming: Option<bool>,
    /// Filled hypervisor parameters (the cluster's, the OS's and its own).
    #[serde(default)]
    pub hvparams: Option<HvParams>,
    /// Its own hypervisor parameters.
    #[serde(default)]
    pub custom_hvparams: Option<HvParams>,
}

/// An instance's `machine_version` from its filled and own hypervisor parameters: only KVM's
/// parameters have the key.
fn machine_version(filled: Option<HvParams>, own: Option<HvParams>) -> ganeti::MachineVersion {
    let values: Vec<String> = [filled, own]
        .into_iter()
        .flatten()
        .filter_map(|hv| hv.machine_version)
        .collect();
    if values.is_empty() {
        return ganeti::MachineVersion::NotKvm;
    }
    values.into_iter().find(|v| !v.trim().is_empty()).map_or(
        ganeti::MachineVersion::Unpinned,
        ganeti::MachineVersion::Pinned,
    )
}

impl From<RapiInstance> for ganeti::Instance {
    fn from(w: RapiInstance) -> Self {
        Self {
            name: w.name,
            uuid: w.uuid,
            disk_template: ganeti::DiskTemplate::from_name(&w.disk_template),
            primary_node: w.pnode,
            secondary_nodes: w.snodes,
            admin_state: w.admin_state,
            status: w.status,
            memory: w.beparams.maxmem.filter(|m| *m > 0),
            tags: w.tags,
            disk_sizes: w.disk_sizes,
            machine_version: machine_version(w.hvparams, w.custom_hvparams),
        }
    }
}

/// Filled backend parameters of an instance (subset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceBeParams {
    #[serde(default)]
    pub maxmem: Option<u64>,
    #[serde(default)]
    pub minmem: Option<u64>,
    /// The older name of `maxmem`, still reported.
    #[serde(default)]
    pub memory: Option<u64>,
    #[serde(default)]
    pub vcpus: Option<u64>,
    #[serde(default)]
    pub always_failover: bool,
    #[serde(default)]
    pub auto_balance: Option<bool>,
    #[serde(default)]
    pub spindle_use: Option<u64>,
}

/// One node group of `/2/groups?bulk=1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RapiGroup {
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub alloc_policy: String,
    #[serde(default)]
    pub node_list: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The group's instance policy, filled with the cluster's (htools reads it).
    #[serde(default)]
    pub ipolicy: Option<RapiIPolicy>,
}

/// One entry of an opcode's reason trail: `[source, text, timestamp in ns]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireReasonEntry(pub String, pub String, pub u64);

impl WireReasonEntry {
    pub fn source(&self) -> &str {
        &self.0
    }
    pub fn text(&self) -> &str {
        &self.1
    }
}

/// The parts of an opcode nodecare reads back (`ops[]` of a job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RapiOpCode {
    #[serde(rename = "OP_ID")]
    pub op_id: String,
    #[serde(default)]
    pub reason: Vec<WireReasonEntry>,
    #[serde(default)]
    pub comment: Option<String>,
    /// Every other opcode parameter, verbatim.
    #[serde(flatten)]
    pub params: serde_json::Map<String, Value>,
}

/// A job as returned by `/2/jobs/<id>` (and, without `oplog`/`opresult`, by `/2/jobs?bulk=1`).
/// An unknown job comes back with every field `null`: check `status` before decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RapiJob {
    pub id: JobId,
    pub status: JobStatus,
    #[serde(default)]
    pub summary: Vec<String>,
    #[serde(default)]
    pub ops: Vec<RapiOpCode>,
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

impl RapiJob {
    /// Every opcode's reason trail, flattened in opcode order.
    pub fn reasons(&self) -> Vec<ganeti::ReasonEntry> {
        self.ops
            .iter()
            .flat_map(|op| op.reason.iter())
            .map(|WireReasonEntry(source, text, ns)| ganeti::ReasonEntry {
                source: source.clone(),
                text: text.clone(),
                timestamp_ns: *ns,
            })
            .collect()
    }

    /// The failures reported by the job's opcodes, in opcode order.
    pub fn op_failures(&self) -> Vec<OpFailure> {
        self.opresult
            .iter()
            .filter_map(OpFailure::from_opresult)
            .collect()
    }

    /// A one-line description of why the job did not succeed (empty when it did).
    pub fn failure_message(&self) -> String {
        let failures = self.op_failures();
        if failures.is_empty() {
            match self.status {
                JobStatus::Success => String::new(),
                other => format!("job {} ended {}", self.id, other.as_str()),
            }
        } else {
            failures
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        }
    }

    /// Child jobs a node evacuation or node migration submitted (`[{"jobs": [[true, id], ...]}]`).
    pub fn child_jobs(&self) -> Vec<JobId> {
        self.opresult
            .iter()
            .flat_map(child_jobs_of_opresult)
            .collect()
    }
}

impl From<RapiJob> for ganeti::Job {
    fn from(w: RapiJob) -> Self {
        let errors = w.op_failures().iter().map(ToString::to_string).collect();
        let reasons = w.reasons();
        Self {
            id: w.id,
            status: w.status,
            opstatus: w.opstatus,
            opresult: w.opresult,
            errors,
            reasons,
        }
    }
}

impl From<RapiJob> for ganeti::JobSummary {
    fn from(w: RapiJob) -> Self {
        let reasons = w.reasons();
        let ops = w
            .ops
            .into_iter()
            .map(|op| ganeti::JobOp {
                instance: op
                    .params
                    .get("instance_name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                op_id: op.op_id,
            })
            .collect();
        Self {
            id: w.id,
            status: w.status,
            reasons,
            ops,
        }
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
        Some(Self {
            class: class.to_owned(),
            message,
            kind,
        })
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

/// Migration mode of `PUT /2/instances/<i>/migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrationMode {
    Live,
    #[serde(rename = "non-live")]
    NonLive,
}

/// What a tag operation applies to (defined beside the [`crate::Ganeti`] trait).
pub use crate::TagTarget;

impl From<RapiGroup> for ganeti::Group {
    fn from(w: RapiGroup) -> Self {
        Self {
            name: w.name,
            uuid: w.uuid,
            tags: w.tags,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_survives_the_rapi_user_trail_entry() {
        let id = uuid::Uuid::new_v4();
        let reason = Reason::new(id, "drain", "Draining node1\nnow");
        let query = reason_query_value(crate::REASON_SOURCE, &reason);
        assert!(
            query.starts_with("gnt:daemon:maintd nodecare incident="),
            "{query}"
        );
        assert!(!query.contains('\n'));
        // What RAPI stores (checked on a real Ganeti 3.0.2 cluster).
        let job = RapiJob {
            id: 17,
            status: JobStatus::Success,
            summary: vec![],
            ops: vec![RapiOpCode {
                op_id: "OP_TAGS_SET".into(),
                reason: vec![
                    WireReasonEntry(RAPI_USER_REASON_SOURCE.into(), query, 1),
                    WireReasonEntry("gnt:library:rlib2:nodes_name_tags".into(), String::new(), 2),
                ],
                comment: None,
                params: serde_json::Map::new(),
            }],
            opstatus: vec!["success".into()],
            opresult: vec![Value::Null],
            received_ts: None,
            start_ts: None,
            end_ts: None,
        };
        let summary = ganeti::JobSummary::from(job);
        let parsed = summary.nodecare_reason().unwrap();
        assert_eq!((parsed.incident, parsed.intent.as_str()), (id, "drain"));
    }

    #[test]
    fn real_samples_decode() {
        let job: RapiJob = serde_json::from_str(SAMPLE_FAILED_JOB).unwrap();
        let job = ganeti::Job::from(job);
        assert_eq!(job.status, JobStatus::Error);
        assert_eq!(
            job.errors,
            vec!["OpPrereqError: Instance's disk layout 'file' does not allow migrations (wrong_state)".to_owned()]
        );
        assert_eq!(job.reasons.len(), 2);
        let node: RapiNode = serde_json::from_str(SAMPLE_OFFLINE_NODE).unwrap();
        let node = ganeti::Node::from(node);
        assert_eq!(
            (node.role, node.offline, node.memory_free),
            (NodeRole::Offline, true, None)
        );
    }

    const SAMPLE_FAILED_JOB: &str = r#"{"end_ts": [1795331310, 237910], "id": 35, "oplog": [[]], "opresult": [["OpPrereqError", ["Instance's disk layout 'file' does not allow migrations", "wrong_state"]]], "ops": [{"OP_ID": "OP_INSTANCE_MIGRATE", "allow_failover": false, "comment": null, "instance_name": "inst7.gnt.test", "mode": "live", "priority": 0, "reason": [["gnt:library:rlib2:instances_name_migrate", "", 1795331308711108096], ["gnt:opcode:instance_migrate", "job=35;index=0", 1795331308930031000]]}], "opstatus": ["error"], "received_ts": [1795331308, 930031], "start_ts": [1795331309, 602590], "status": "error", "summary": ["INSTANCE_MIGRATE(inst7.gnt.test)"]}"#;
    const SAMPLE_OFFLINE_NODE: &str = r#"{"cnodes": null, "cnos": null, "csockets": null, "ctime": 1795331146.2829187, "ctotal": null, "dfree": null, "drained": false, "dtotal": null, "group.uuid": "4bc942ee", "master_candidate": false, "master_capable": true, "mfree": null, "mnode": null, "mtime": 1795331360.912262, "mtotal": null, "name": "node3.gnt.test", "offline": true, "pinst_cnt": 3, "pinst_list": ["inst2.gnt.test"], "pip": "198.18.0.13", "role": "O", "secondary_ip": "198.18.0.13", "serial_no": 5, "sinst_cnt": 0, "sinst_list": [], "sip": "198.18.0.13", "spfree": null, "sptotal": null, "tags": ["needsreboot"], "uuid": "d7768c68", "vm_capable": true}"#;

    #[test]
    fn op_failures_parse() {
        let exec = serde_json::json!(["OpExecError", ["disk gone"]]);
        let prereq = serde_json::json!(["OpPrereqError", ["no migrations", "wrong_state"]]);
        let ok_pair = serde_json::json!([["master_candidate", "False"], ["drained", "True"]]);
        assert_eq!(
            OpFailure::from_opresult(&exec),
            Some(OpFailure {
                class: "OpExecError".into(),
                message: "disk gone".into(),
                kind: None
            })
        );
        let p = OpFailure::from_opresult(&prereq).unwrap();
        assert_eq!(p.kind.as_deref(), Some("wrong_state"));
        assert_eq!(p.to_string(), "OpPrereqError: no migrations (wrong_state)");
        assert_eq!(OpFailure::from_opresult(&ok_pair), None);
        assert_eq!(OpFailure::from_opresult(&Value::Null), None);
        assert_eq!(
            OpFailure::from_opresult(&serde_json::json!(["name", "x"])),
            None
        );
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
            fn opresult_parse_never_panics(v in arb_json()) {
                let _failure = OpFailure::from_opresult(&v).is_some();
                let _children = child_jobs_of_opresult(&v).len();
            }
        }

        fn arb_json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
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
