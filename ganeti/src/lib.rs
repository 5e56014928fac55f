//! nodecare's Ganeti client: the slice of Ganeti nodecare needs, as a trait, and the one
//! client of Ganeti's remote API (RAPI v2) that implements it.
//!
//! * This module: the [`Ganeti`] trait and its types ([`Node`], [`Instance`], [`DiskTemplate`],
//!   [`Job`], [`Reason`], ...). The coordinator only ever talks to `dyn Ganeti`.
//! * [`op`]: every write nodecare makes as one type, [`Op`], submitted with
//!   [`Ganeti::submit`]. Always built.
//! * [`rapi::request`]: each [`Op`] as its RAPI request, written once
//!   ([`rapi::request::rapi_request`]). Always built, free of IO.
//! * [`rapi::types`]: RAPI's JSON shapes and their decoding, used by every reader of RAPI
//!   answers (the coordinator through the client, the roll planner from saved or fetched
//!   answers). Always built, free of IO.
//! * [`rapi::client`] and [`rapi::tls`] (feature `client`): the RAPI client, which sends those
//!   requests and the reads over a [`rapi::transport::Transport`]: HTTPS with the
//!   cluster certificate pinned for a real cluster, or an in-process simulated cluster
//!   (`nodecare-ganeti-sim`).
//!
//! [`Ganeti::submit`] takes a [`Reason`] beside the [`Op`]. Its text carries the incident
//! uuid and an intent key, and it ends up in the job's reason trail, so that after a crash the
//! coordinator can find out from [`Ganeti::jobs`] which of its intents were already submitted.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

pub mod op;
pub mod rapi;

pub use op::Op;

/// Default reason-trail source of every job the coordinator submits: the repair daemon's, as
/// Ganeti's design names it (`design-repaird`: "`gnt:daemon:maintd` and the event identifier in
/// the reason trail, so that design-optables is possible"; maintd's `opcodeReasonSrcMaintd`).
/// Configurable (the coordinator's `reason_source`); RAPI records it as the start of the
/// `gnt:user` entry's text (see [`rapi::types::reason_query_value`]).
pub const REASON_SOURCE: &str = "gnt:daemon:maintd";

/// The source nodecare's jobs carried before [`REASON_SOURCE`] followed the design. Jobs are
/// recognised as ours by the `nodecare incident=` marker of [`Reason::text`], after any
/// source, so jobs submitted with this one (before an upgrade) are still adopted.
pub const LEGACY_REASON_SOURCE: &str = "gnt:daemon:nodecare";

/// Longest reason-trail source accepted.
pub const MAX_REASON_SOURCE_LEN: usize = 64;

/// Checks a reason-trail source: 1 to [`MAX_REASON_SOURCE_LEN`] ASCII letters, digits and
/// `:`, `.`, `_`, `-` (it starts the `reason` text, separated by a blank; it must not contain
/// the marker of [`Reason::text`]).
pub fn check_reason_source(source: &str) -> Result<(), String> {
    if source.is_empty() || source.len() > MAX_REASON_SOURCE_LEN {
        return Err(format!(
            "a reason source has 1 to {MAX_REASON_SOURCE_LEN} characters, got {}",
            source.len()
        ));
    }
    if let Some(c) = source
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '-')))
    {
        return Err(format!(
            "a reason source has only ASCII letters, digits, ':', '.', '_' and '-', got {c:?} in {source:?}"
        ));
    }
    Ok(())
}

/// Prefix of [`Reason::text`], used to recognise our own jobs in the job list.
pub const REASON_TEXT_PREFIX: &str = "nodecare";

/// A Ganeti job id.
pub type JobId = u64;

/// Boxed future returned by every [`Ganeti`] method (keeps the trait `dyn`-compatible).
pub type GanetiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, GanetiError>> + Send + 'a>>;

/// Why a Ganeti call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GanetiError {
    /// Could not reach the server at all (connect, TLS, timeout).
    #[error("cannot reach Ganeti: {0}")]
    Transport(String),
    /// The server refused the credentials (HTTP 401/403).
    #[error("Ganeti refused the credentials: {0}")]
    Unauthorized(String),
    /// The named object (node, instance, job) does not exist (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    /// The server rejected the request (HTTP 4xx other than 401/403/404, e.g. a prerequisite).
    #[error("Ganeti rejected the request (HTTP {status}): {message}")]
    Rejected {
        /// HTTP status code.
        status: u16,
        /// Ganeti's message, or the body.
        message: String,
    },
    /// Ganeti failed internally (HTTP 5xx).
    #[error("Ganeti server error (HTTP {status}): {message}")]
    Server {
        /// HTTP status code.
        status: u16,
        /// Ganeti's message, or the body.
        message: String,
    },
    /// The answer did not have the expected shape.
    #[error("unexpected answer from Ganeti: {0}")]
    Decode(String),
    /// Held back before reaching Ganeti (the coordinator's state is not replicated yet).
    #[error("not submitted: {0}")]
    NotSubmitted(String),
}

impl GanetiError {
    /// Whether retrying the same call later can succeed (network trouble, 5xx).
    pub const fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Transport(_) | Self::Server { .. } | Self::NotSubmitted(_)
        )
    }

    /// Whether a job submission answered with this error may still have created its job: the
    /// answer was lost or could not be read (transport trouble, a timeout, 5xx, an answer of
    /// the wrong shape). A refusal (4xx) or a submission held back before it reached Ganeti
    /// ([`GanetiError::NotSubmitted`]) created none.
    pub const fn may_have_submitted(&self) -> bool {
        matches!(
            self,
            Self::Transport(_) | Self::Server { .. } | Self::Decode(_)
        )
    }
}

/// Cluster-wide facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Cluster name (`name`).
    pub name: String,
    /// Name of the current master node (`master`).
    pub master: String,
    /// Cluster uuid, when the server reports it.
    #[serde(default)]
    pub uuid: Option<String>,
    /// Default instance allocator (`default_iallocator`, usually `hail`); empty → `None`.
    #[serde(default)]
    pub default_iallocator: Option<String>,
    /// Ganeti software version (`software_version`): the master's.
    #[serde(default)]
    pub software_version: Option<String>,
    /// The hypervisors instances may use (`enabled_hypervisors`).
    #[serde(default)]
    pub enabled_hypervisors: Vec<String>,
    /// The cluster's KVM `machine_version` (`hvparams.kvm.machine_version`); empty → `None`.
    #[serde(default)]
    pub kvm_machine_version: Option<String>,
}

/// A node's role letter as RAPI reports it (`role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NodeRole {
    /// `M`: the master.
    #[serde(rename = "M")]
    Master,
    /// `C`: a master candidate.
    #[serde(rename = "C")]
    MasterCandidate,
    /// `R`: a regular node.
    #[serde(rename = "R")]
    Regular,
    /// `D`: drained.
    #[serde(rename = "D")]
    Drained,
    /// `O`: offline.
    #[serde(rename = "O")]
    Offline,
}

impl NodeRole {
    /// Parses RAPI's one-letter role.
    pub fn from_letter(letter: &str) -> Option<Self> {
        match letter {
            "M" => Some(Self::Master),
            "C" => Some(Self::MasterCandidate),
            "R" => Some(Self::Regular),
            "D" => Some(Self::Drained),
            "O" => Some(Self::Offline),
            _ => None,
        }
    }
}

/// A cluster node (RAPI `/2/nodes?bulk=1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Node name (`name`).
    pub name: String,
    /// Node uuid (`uuid`).
    pub uuid: String,
    /// Role letter (`role`).
    pub role: NodeRole,
    /// `drained`.
    pub drained: bool,
    /// `offline`.
    pub offline: bool,
    /// `master_candidate`.
    pub master_candidate: bool,
    /// `vm_capable` (a node that cannot host instances is never an evacuation target).
    pub vm_capable: bool,
    /// Primary IP (`pip`).
    pub primary_ip: String,
    /// Secondary IP (`sip`).
    pub secondary_ip: String,
    /// Node tags (`tags`).
    pub tags: Vec<String>,
    /// Node group uuid (`group.uuid`).
    pub group: String,
    /// Names of the instances whose primary is this node (`pinst_list`).
    pub primary_instances: Vec<String>,
    /// Names of the instances whose secondary is this node (`sinst_list`).
    pub secondary_instances: Vec<String>,
    /// Free memory in MiB (`mfree`), when known.
    pub memory_free: Option<u64>,
    /// Total memory in MiB (`mtotal`), when known.
    pub memory_total: Option<u64>,
    /// Free disk in MiB (`dfree`, the default volume group), when known.
    #[serde(default)]
    pub disk_free: Option<u64>,
    /// The node's Ganeti version (`software_version`), when its answer names one: Ganeti
    /// 3.0.2's and 3.1's RAPI node answers do not (`/2/info` names the master's).
    #[serde(default)]
    pub software_version: Option<String>,
}

impl Node {
    /// Whether the node is usable for instances: online, not drained, vm-capable.
    pub const fn is_healthy(&self) -> bool {
        !self.offline && !self.drained && self.vm_capable
    }
}

/// Disk template of an instance (`disk_template`). Decides how an instance can move.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskTemplate {
    /// `diskless`: movable anywhere.
    Diskless,
    /// `plain`: local LVM, cannot be relocated.
    Plain,
    /// `file`: local files, cannot be relocated.
    File,
    /// `drbd`: mirrored; migrate/failover to the secondary, replace-disks for the secondary.
    Drbd,
    /// `sharedfile`: shared storage, movable anywhere.
    SharedFile,
    /// `rbd`: shared storage.
    Rbd,
    /// `ext`: shared storage.
    Ext,
    /// `blockdev`: shared storage.
    Blockdev,
    /// `gluster`: shared storage.
    Gluster,
    /// Anything else, by name.
    #[serde(untagged)]
    Other(String),
}

/// How an instance survives the reboot of its primary node, by its disk template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Redundancy {
    /// DRBD: a secondary node holds a replica; migrate to it.
    Mirrored,
    /// Storage reachable from every node of the group (rbd, ext, sharedfile, gluster,
    /// blockdev) or no storage at all: live-migrate to any node.
    Shared,
    /// Node-local storage (plain, file), or a template nodecare does not know: the instance
    /// must be moved with downtime.
    Local,
}

impl DiskTemplate {
    /// Parses Ganeti's template name; an unknown name is kept as [`Self::Other`].
    pub fn from_name(name: &str) -> Self {
        Self::parse(name).unwrap_or_else(|| Self::Other(name.to_owned()))
    }

    /// Parses one of the templates Ganeti 3.0 (and htools) know; `None` for any other name.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "diskless" => Self::Diskless,
            "plain" => Self::Plain,
            "file" => Self::File,
            "drbd" => Self::Drbd,
            "sharedfile" => Self::SharedFile,
            "rbd" => Self::Rbd,
            "ext" => Self::Ext,
            "blockdev" => Self::Blockdev,
            "gluster" => Self::Gluster,
            _ => return None,
        })
    }

    /// Ganeti's name for the template.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Diskless => "diskless",
            Self::Plain => "plain",
            Self::File => "file",
            Self::Drbd => "drbd",
            Self::SharedFile => "sharedfile",
            Self::Rbd => "rbd",
            Self::Ext => "ext",
            Self::Blockdev => "blockdev",
            Self::Gluster => "gluster",
            Self::Other(name) => name,
        }
    }

    /// Whether the instance's disks live on its primary node only (it cannot be relocated).
    pub const fn is_node_local(&self) -> bool {
        matches!(self, Self::Plain | Self::File)
    }

    /// Whether the instance is mirrored to a secondary node.
    pub const fn is_internally_mirrored(&self) -> bool {
        matches!(self, Self::Drbd)
    }

    /// htools' notion: only DRBD has a secondary node.
    pub const fn has_secondary(&self) -> bool {
        self.is_internally_mirrored()
    }

    /// Templates whose disk space htools accounts on the node (plain, drbd).
    pub const fn uses_local_storage(&self) -> bool {
        matches!(self, Self::Plain | Self::Drbd)
    }

    /// How an instance with this template survives the reboot of its primary node.
    pub const fn redundancy(&self) -> Redundancy {
        match self {
            Self::Drbd => Redundancy::Mirrored,
            Self::Plain | Self::File | Self::Other(_) => Redundancy::Local,
            Self::Diskless
            | Self::SharedFile
            | Self::Blockdev
            | Self::Rbd
            | Self::Ext
            | Self::Gluster => Redundancy::Shared,
        }
    }
}

/// An instance (RAPI `/2/instances?bulk=1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    /// Instance name (`name`).
    pub name: String,
    /// Instance uuid (`uuid`).
    pub uuid: String,
    /// Disk template (`disk_template`).
    pub disk_template: DiskTemplate,
    /// Primary node name (`pnode`).
    pub primary_node: String,
    /// Secondary node names (`snodes`).
    pub secondary_nodes: Vec<String>,
    /// Administrative state (`admin_state`: `up`, `down`, `offline`).
    pub admin_state: String,
    /// Runtime status (`status`: `running`, `ADMIN_down`, `ERROR_nodeoffline`, ...).
    pub status: String,
    /// Configured maximum memory in MiB (`beparams.maxmem`), when known.
    pub memory: Option<u64>,
    /// Instance tags (`tags`).
    pub tags: Vec<String>,
    /// Size of each disk in MiB (`disk.sizes`).
    #[serde(default)]
    pub disk_sizes: Vec<u64>,
    /// Its KVM `machine_version` as its hypervisor parameters show it (`hvparams`, filled
    /// from the cluster's, and `custom_hvparams`, its own).
    #[serde(default)]
    pub machine_version: MachineVersion,
}

/// An instance's KVM `machine_version`: the machine type qemu emulates. Unpinned, each qemu
/// picks its own newest, and a live migration between two qemu versions (a rolling upgrade)
/// may crash the instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineVersion {
    /// Not a KVM instance (its hypervisor parameters have no `machine_version`), or not known.
    #[default]
    NotKvm,
    /// A KVM instance whose `machine_version` is empty.
    Unpinned,
    /// A KVM instance pinned to this machine type (e.g. `pc-i440fx-7.2`).
    Pinned(String),
}

/// Which disks `replace-disks` replaces (RAPI `mode`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum ReplaceDisksMode {
    /// `replace_new_secondary`: move the mirror to a new secondary, chosen by `iallocator` or
    /// given as `remote_node`.
    ReplaceNewSecondary {
        /// Explicit new secondary.
        remote_node: Option<String>,
        /// Allocator to choose the new secondary (used when `remote_node` is `None`).
        iallocator: Option<String>,
    },
    /// `replace_on_primary`.
    ReplaceOnPrimary,
    /// `replace_on_secondary`.
    ReplaceOnSecondary,
    /// `replace_auto`.
    ReplaceAuto,
}

impl ReplaceDisksMode {
    /// Ganeti's name for the mode.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::ReplaceNewSecondary { .. } => "replace_new_secondary",
            Self::ReplaceOnPrimary => "replace_on_primary",
            Self::ReplaceOnSecondary => "replace_on_secondary",
            Self::ReplaceAuto => "replace_auto",
        }
    }
}

/// Which instances a node evacuation moves (RAPI `mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EvacuateMode {
    /// `primary-only`.
    #[serde(rename = "primary-only")]
    PrimaryOnly,
    /// `secondary-only`.
    #[serde(rename = "secondary-only")]
    SecondaryOnly,
    /// `all` (refused by Ganeti 3.0 for most clusters; prefer the other two).
    #[serde(rename = "all")]
    All,
}

impl EvacuateMode {
    /// Ganeti's name for the mode.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PrimaryOnly => "primary-only",
            Self::SecondaryOnly => "secondary-only",
            Self::All => "all",
        }
    }
}

/// A job's overall status (`status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// `queued`.
    Queued,
    /// `waiting` (waiting for locks or dependencies).
    Waiting,
    /// `running`.
    Running,
    /// `canceling`.
    Canceling,
    /// `canceled` (final; counts as failure).
    Canceled,
    /// `success` (final).
    Success,
    /// `error` (final).
    Error,
}

impl JobStatus {
    /// Parses Ganeti's status name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "queued" => Some(Self::Queued),
            "waiting" => Some(Self::Waiting),
            "running" => Some(Self::Running),
            "canceling" => Some(Self::Canceling),
            "canceled" => Some(Self::Canceled),
            "success" => Some(Self::Success),
            "error" => Some(Self::Error),
            _ => None,
        }
    }

    /// Ganeti's name for the status.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Waiting => "waiting",
            Self::Running => "running",
            Self::Canceling => "canceling",
            Self::Canceled => "canceled",
            Self::Success => "success",
            Self::Error => "error",
        }
    }

    /// Whether the job will not change any more.
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Canceled | Self::Success | Self::Error)
    }
}

/// One job (RAPI `/2/jobs/<id>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Job id.
    pub id: JobId,
    /// Overall status.
    pub status: JobStatus,
    /// Per-opcode status (`opstatus`).
    pub opstatus: Vec<String>,
    /// Per-opcode result (`opresult`); a failed opcode's is e.g. `["OpExecError", [msg]]`.
    pub opresult: Vec<Value>,
    /// Human-readable error messages extracted from failed opcodes' results.
    pub errors: Vec<String>,
    /// The reason trails of the job's opcodes, flattened.
    pub reasons: Vec<ReasonEntry>,
}

/// Ganeti's answer to a job cancel (RAPI `DELETE /2/jobs/<id>`: `[success, message]`).
///
/// Ganeti cancels a job that has not started: a `queued` job at once, a `waiting` one (waiting
/// for locks or for the jobs it depends on) as soon as its worker notices (`canceling`, then
/// `canceled`). A running or finished job is not touched (`canceled` false, Ganeti's message
/// says why). Jobs that depend on a canceled job never run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCancel {
    /// Whether Ganeti canceled the job (or will, for a waiting job).
    pub canceled: bool,
    /// Ganeti's message (`Job 5 canceled`, `Job 5 will be canceled`, `Job 5 is no longer
    /// waiting in the queue`).
    pub message: String,
}

/// One job as listed by [`Ganeti::jobs`] (RAPI `/2/jobs?bulk=1` with fields
/// `id,status,ops` reduced to the reason trails and what each opcode is and acts on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Job id.
    pub id: JobId,
    /// Overall status.
    pub status: JobStatus,
    /// The reason trails of the job's opcodes, flattened in opcode order.
    pub reasons: Vec<ReasonEntry>,
    /// The job's opcodes, in order.
    #[serde(default)]
    pub ops: Vec<JobOp>,
}

/// One opcode of a listed job: what it is and the instance it acts on, enough to tell a job
/// that carries no reason trail (RAPI's reinstall, [`Op::carries_reason`]) by what it does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobOp {
    /// The opcode (`OP_INSTANCE_REINSTALL`).
    pub op_id: String,
    /// Its `instance_name` parameter, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl JobSummary {
    /// The coordinator's reason attached to this job, if any entry of its trail carries one.
    pub fn nodecare_reason(&self) -> Option<ParsedReason> {
        self.reasons
            .iter()
            .find_map(|entry| Reason::parse_text(&entry.text))
    }
}

/// One reason-trail entry: `[source, text, timestamp_ns]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonEntry {
    /// Who added the entry (`gnt:daemon:nodecare`, `gnt:user`, `gnt:opcode:...`).
    pub source: String,
    /// Free text.
    pub text: String,
    /// Nanoseconds since the epoch.
    pub timestamp_ns: u64,
}

/// The reason attached to a job the coordinator submits.
///
/// `text()` is `nodecare incident=<uuid> intent=<key>: <description>`; `intent` is unique per
/// submission the coordinator intends to make, so a job found in Ganeti's job list with the
/// same incident and intent is that submission (no duplicate after a crash).
///
/// `depends` chains jobs: the job is submitted with RAPI's `depends` body parameter
/// (`[[job_id, ["success"]], ...]`), so Ganeti starts it only once every listed job has
/// succeeded, and fails it (without running it) when one of them fails.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    /// The incident this job belongs to.
    pub incident: Uuid,
    /// Unique key of the intended submission within the incident (no whitespace or `:`).
    pub intent: String,
    /// What the job does, for people reading `gnt-job info`.
    pub description: String,
    /// Jobs that must succeed before this one runs (empty: runs as soon as Ganeti can).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends: Vec<JobId>,
}

/// The machine-readable part of a [`Reason`] recovered from a job's trail.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ParsedReason {
    /// Incident uuid.
    pub incident: Uuid,
    /// Intent key.
    pub intent: String,
}

impl Reason {
    /// Builds a reason. Whitespace and `:` in `intent` are replaced by `_` so the text parses back.
    pub fn new(incident: Uuid, intent: impl Into<String>, description: impl Into<String>) -> Self {
        let intent: String = intent
            .into()
            .chars()
            .map(|c| {
                if c.is_whitespace() || c == ':' {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        Self {
            incident,
            intent,
            description: description.into(),
            depends: Vec::new(),
        }
    }

    /// The same reason for a job that runs only after every job in `jobs` has succeeded.
    #[must_use]
    pub fn after(mut self, jobs: impl IntoIterator<Item = JobId>) -> Self {
        self.depends = jobs.into_iter().collect();
        self.depends.sort_unstable();
        self.depends.dedup();
        self
    }

    /// The source to put into the trail entry.
    pub const fn source(&self) -> &'static str {
        REASON_SOURCE
    }

    /// The text to put into the trail entry.
    pub fn text(&self) -> String {
        format!(
            "{REASON_TEXT_PREFIX} incident={} intent={}: {}",
            self.incident, self.intent, self.description
        )
    }

    /// A complete trail entry with the given timestamp.
    pub fn entry(&self, timestamp_ns: u64) -> ReasonEntry {
        ReasonEntry {
            source: REASON_SOURCE.to_owned(),
            text: self.text(),
            timestamp_ns,
        }
    }

    /// The description in a trail text written by [`Reason::text`]: what follows its first
    /// `": "` (none when there is no such separator).
    pub fn description_of(text: &str) -> Option<&str> {
        text.split_once(": ").map(|(_, description)| description)
    }

    /// Recovers incident and intent from a trail text written by [`Reason::text`]; the text may
    /// have been prefixed or embedded by the server, so this searches for the marker.
    pub fn parse_text(text: &str) -> Option<ParsedReason> {
        let start = text.find(&format!("{REASON_TEXT_PREFIX} incident="))?;
        let rest = &text[start + REASON_TEXT_PREFIX.len() + " incident=".len()..];
        let (incident, rest) = rest.split_once(' ')?;
        let incident = Uuid::parse_str(incident).ok()?;
        let rest = rest.strip_prefix("intent=")?;
        let end = rest
            .find(|c: char| c == ':' || c.is_whitespace())
            .unwrap_or(rest.len());
        let intent = &rest[..end];
        if intent.is_empty() {
            return None;
        }
        Some(ParsedReason {
            incident,
            intent: intent.to_owned(),
        })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// What a tag operation applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "lowercase")]
pub enum TagTarget {
    /// The cluster (`/2/tags`).
    Cluster,
    /// A node, by name.
    Node(String),
    /// An instance, by name.
    Instance(String),
    /// A node group, by name.
    Group(String),
}

impl fmt::Display for TagTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cluster => f.write_str("the cluster"),
            Self::Node(name) => write!(f, "node {name}"),
            Self::Instance(name) => write!(f, "instance {name}"),
            Self::Group(name) => write!(f, "node group {name}"),
        }
    }
}

/// A node group (RAPI `/2/groups?bulk=1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// Group name (`name`).
    pub name: String,
    /// Group uuid (`uuid`), as in [`Node::group`].
    pub uuid: String,
    /// Group tags (`tags`).
    pub tags: Vec<String>,
}

/// What the coordinator needs from Ganeti. Implemented by the RAPI client (which the
/// simulation serves in process).
///
/// Every write is an [`Op`] given to [`Ganeti::submit`] (and [`Ganeti::cancel_job`], which
/// changes the job queue); the other methods read.
pub trait Ganeti: Send + Sync + fmt::Debug {
    /// Cluster info, including the master's name (RAPI `GET /2/info`).
    fn cluster_info(&self) -> GanetiFuture<'_, ClusterInfo>;

    /// All nodes (RAPI `GET /2/nodes?bulk=1`).
    fn nodes(&self) -> GanetiFuture<'_, Vec<Node>>;

    /// All instances (RAPI `GET /2/instances?bulk=1`).
    fn instances(&self) -> GanetiFuture<'_, Vec<Instance>>;

    /// A node's tags ([`Ganeti::tags`] of the node).
    fn node_tags<'a>(&'a self, node: &'a str) -> GanetiFuture<'a, Vec<String>> {
        Box::pin(async move { self.tags(&TagTarget::Node(node.to_owned())).await })
    }

    /// Submits one write as a job and returns its id without waiting for it (RAPI: the
    /// request of [`rapi::request::rapi_request`]). The reason goes into the job's trail and,
    /// with [`Reason::depends`], chains it after other jobs.
    fn submit<'a>(&'a self, op: &'a Op, reason: &'a Reason) -> GanetiFuture<'a, JobId>;

    /// All node groups with their tags (RAPI `GET /2/groups?bulk=1`).
    fn groups(&self) -> GanetiFuture<'_, Vec<Group>>;

    /// The tags of the cluster, a node, an instance or a node group (RAPI `GET .../tags`).
    fn tags<'a>(&'a self, target: &'a TagTarget) -> GanetiFuture<'a, Vec<String>>;

    /// One job's status and results (RAPI `GET /2/jobs/<id>`), of a job in the queue or in its
    /// archive (Ganeti loads a job it is asked for by id from either). Unknown (never
    /// submitted, or lost with the queue) → [`GanetiError::NotFound`].
    fn job(&self, id: JobId) -> GanetiFuture<'_, Job>;

    /// Every job of Ganeti's queue, with its reason trails (RAPI `GET /2/jobs?bulk=1`), used
    /// to reconcile the coordinator's intents after a restart. Archived jobs are not listed.
    fn jobs(&self) -> GanetiFuture<'_, Vec<JobSummary>>;

    /// The jobs among `ids` that Ganeti still knows, read from the same list as
    /// [`Ganeti::jobs`]; an implementation may decode only these jobs of the list whole (a
    /// campaign's queue holds thousands of other jobs).
    fn jobs_among<'a>(&'a self, ids: &'a BTreeSet<JobId>) -> GanetiFuture<'a, Vec<JobSummary>> {
        Box::pin(async move {
            Ok(self
                .jobs()
                .await?
                .into_iter()
                .filter(|job| ids.contains(&job.id))
                .collect())
        })
    }

    /// Cancels a job that has not started (RAPI `DELETE /2/jobs/<id>`; see [`JobCancel`]).
    /// Unknown or archived → [`GanetiError::NotFound`]. A write: it changes the cluster's queue.
    fn cancel_job(&self, id: JobId) -> GanetiFuture<'_, JobCancel>;

    /// Waits until job `id`'s status differs from `previous` (`None`: answers at once) and
    /// returns it; `Ok(None)`: no change within Ganeti's wait period (RAPI `GET
    /// /2/jobs/<id>/wait`, which blocks up to 10 s). Unknown or archived →
    /// [`GanetiError::NotFound`]. A read. Without a wait of its own, an implementation reads
    /// the job once and answers at once (the caller paces its waits).
    fn wait_job_change(
        &self,
        id: JobId,
        previous: Option<JobStatus>,
    ) -> GanetiFuture<'_, Option<JobStatus>> {
        Box::pin(async move {
            let status = self.job(id).await?.status;
            Ok((Some(status) != previous).then_some(status))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_text_round_trips() {
        let incident = Uuid::new_v4();
        let reason = Reason::new(
            incident,
            "migrate inst1:2",
            "Migrating inst1 away from node1",
        );
        assert_eq!(reason.intent, "migrate_inst1_2");
        let parsed = Reason::parse_text(&reason.text()).unwrap();
        assert_eq!(
            parsed,
            ParsedReason {
                incident,
                intent: "migrate_inst1_2".into()
            }
        );
        // Servers may wrap the text; the marker is still found.
        let wrapped = format!("rapi: {}", reason.text());
        assert_eq!(Reason::parse_text(&wrapped).unwrap().incident, incident);
    }

    #[test]
    fn foreign_reason_texts_do_not_parse() {
        assert!(Reason::parse_text("init").is_none());
        assert!(Reason::parse_text("nodecare incident=notauuid intent=x: y").is_none());
        let id = Uuid::new_v4();
        assert!(Reason::parse_text(&format!("nodecare incident={id} intent=: y")).is_none());
    }

    #[test]
    fn job_summary_finds_our_reason_anywhere_in_the_trail() {
        let reason = Reason::new(Uuid::new_v4(), "drain", "Draining node1");
        let summary = JobSummary {
            id: 7,
            status: JobStatus::Running,
            reasons: vec![
                ReasonEntry {
                    source: "gnt:user".into(),
                    text: "x".into(),
                    timestamp_ns: 1,
                },
                reason.entry(2),
            ],
            ops: Vec::new(),
        };
        assert_eq!(summary.nodecare_reason().unwrap().intent, "drain");
    }

    #[test]
    fn jobs_are_ours_whatever_the_source_before_the_marker() {
        let id = Uuid::new_v4();
        let reason = Reason::new(id, "drain", "Draining node1");
        // The design's source (default), the legacy one (jobs submitted before an upgrade)
        // and a configured one: all ours, as RAPI stores them (a `gnt:user` entry).
        for source in [REASON_SOURCE, LEGACY_REASON_SOURCE, "site:repair"] {
            let summary = JobSummary {
                id: 7,
                status: JobStatus::Queued,
                reasons: vec![ReasonEntry {
                    source: "gnt:user".into(),
                    text: format!("{source} {}", reason.text()),
                    timestamp_ns: 1,
                }],
                ops: Vec::new(),
            };
            assert_eq!(
                summary.nodecare_reason(),
                Some(ParsedReason {
                    incident: id,
                    intent: "drain".into()
                }),
                "{source}"
            );
        }
        assert_eq!(REASON_SOURCE, "gnt:daemon:maintd");
    }

    #[test]
    fn reason_sources_are_checked() {
        for good in [REASON_SOURCE, LEGACY_REASON_SOURCE, "a", "site.repair_2-x"] {
            assert_eq!(check_reason_source(good), Ok(()), "{good}");
        }
        let long = "a".repeat(MAX_REASON_SOURCE_LEN + 1);
        for bad in ["", "gnt:daemon:maintd nodecare", "a\nb", "é", long.as_str()] {
            assert!(check_reason_source(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn enums_parse_ganeti_names() {
        assert_eq!(NodeRole::from_letter("D"), Some(NodeRole::Drained));
        assert_eq!(JobStatus::from_name("canceled"), Some(JobStatus::Canceled));
        assert!(JobStatus::Canceled.is_final());
        assert!(!JobStatus::Waiting.is_final());
        assert!(DiskTemplate::from_name("plain").is_node_local());
        assert_eq!(DiskTemplate::from_name("weird").as_str(), "weird");
        assert_eq!(DiskTemplate::parse("weird"), None);
        for name in [
            "diskless",
            "plain",
            "file",
            "drbd",
            "sharedfile",
            "rbd",
            "ext",
            "blockdev",
            "gluster",
        ] {
            let template = DiskTemplate::parse(name).unwrap();
            assert_eq!(template.as_str(), name);
            assert_eq!(serde_json::to_value(&template).unwrap(), name);
            assert_eq!(
                serde_json::from_value::<DiskTemplate>(name.into()).unwrap(),
                template
            );
        }
        assert_eq!(
            DiskTemplate::from_name("sharedfile"),
            DiskTemplate::SharedFile
        );
        assert_eq!(
            DiskTemplate::Other("x".into()).redundancy(),
            Redundancy::Local
        );
    }

    // The coordinator holds `Arc<dyn Ganeti>`: the trait must stay dyn-compatible.
    #[allow(dead_code)]
    fn assert_dyn_compatible(_: &dyn Ganeti) {}
}
