//! The simulated cluster's state and job engine, free of IO.
//!
//! Jobs are evaluated lazily: every access first calls [`SimCluster::advance`] with the current
//! time, which starts queued jobs and finishes those whose delay has passed. A job's effect is
//! applied, and its prerequisites checked, when it finishes (as Ganeti checks prerequisites
//! when the opcode runs), so a job can fail because of what happened while it was queued.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use nodecare_ganeti::{DiskTemplate, JobId, JobStatus, Reason, Redundancy};

/// What one node holds, for RAPI's node fields ([`SimCluster::node_loads`]).
#[derive(Debug, Default, Clone)]
pub struct NodeLoad<'a> {
    /// Its primary instances.
    pub primaries: Vec<&'a str>,
    /// The instances it is a secondary of.
    pub secondaries: Vec<&'a str>,
    /// The memory its running primaries use (MiB).
    pub memory_used_mib: u64,
}

/// One instance as RAPI's `/2/instances` shows it ([`SimCluster::instance_json`]).
#[derive(Debug, Serialize)]
struct InstanceView<'a> {
    name: &'a str,
    uuid: &'a str,
    pnode: &'a str,
    snodes: &'a [String],
    disk_template: &'a str,
    status: &'static str,
    admin_state: &'static str,
    oper_state: Option<bool>,
    oper_ram: Option<u64>,
    oper_vcpus: Option<u64>,
    os: &'static str,
    tags: &'a [String],
    beparams: BeParams,
    #[serde(rename = "disk.sizes")]
    disk_sizes: &'a [u64],
    disk_usage: u64,
    #[serde(rename = "nic.macs")]
    nic_macs: [&'static str; 1],
    hvparams: HvParams<'a>,
    custom_hvparams: HvParams<'a>,
    network_port: Option<u64>,
    serial_no: u64,
    ctime: f64,
    mtime: f64,
}

/// An instance's hypervisor parameters as RAPI shows them (the one read).
#[derive(Debug, Serialize)]
struct HvParams<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    machine_version: Option<&'a str>,
}

/// An instance's backend parameters as RAPI shows them.
#[derive(Debug, Serialize)]
struct BeParams {
    maxmem: u64,
    minmem: u64,
    vcpus: u64,
    always_failover: bool,
    auto_balance: bool,
}

/// One node of the simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimNode {
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    #[serde(default)]
    pub drained: bool,
    #[serde(default)]
    pub offline: bool,
    #[serde(default)]
    pub master_candidate: bool,
    /// Whether it may be a master candidate (Ganeti's `master_capable`).
    #[serde(default = "yes")]
    pub master_capable: bool,
    #[serde(default = "yes")]
    pub vm_capable: bool,
    #[serde(default = "default_memory")]
    pub memory_total_mib: u64,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub ip: String,
    /// Memory in use that no instance of the simulation accounts for (MiB: the hypervisor's,
    /// other processes'): RAPI's free memory is the total less this and the running primaries'.
    #[serde(default)]
    pub memory_reserved_mib: u64,
    /// RAPI shows no memory figures for the node (`mfree`, `mtotal` null: its hypervisor did
    /// not answer).
    #[serde(default)]
    pub memory_unknown: bool,
    /// The free disk RAPI shows (`dfree`, MiB; none: 100 000).
    #[serde(default)]
    pub disk_free_mib: Option<u64>,
}

fn yes() -> bool {
    true
}
fn default_memory() -> u64 {
    4096
}

/// One instance of the simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimInstance {
    pub name: String,
    #[serde(default)]
    pub uuid: String,
    /// `diskless`, `sharedfile`, `drbd`, `plain`, `file`, ...
    pub disk_template: String,
    pub pnode: String,
    #[serde(default)]
    pub snodes: Vec<String>,
    #[serde(default = "default_instance_memory")]
    pub memory_mib: u64,
    #[serde(default = "yes")]
    pub running: bool,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its disks' sizes as RAPI shows them (`disk.sizes`, MiB; none: one disk of 1 GiB, none
    /// for a diskless instance).
    #[serde(default)]
    pub disk_sizes: Option<Vec<u64>>,
}

fn default_instance_memory() -> u64 {
    128
}

/// Initial layout of a simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    #[serde(default = "default_cluster_name")]
    pub cluster_name: String,
    /// The first node is the master.
    pub nodes: Vec<SimNode>,
    #[serde(default)]
    pub instances: Vec<SimInstance>,
    /// How long a job stays queued, then running (each half of the delay).
    #[serde(default = "default_job_delay_ms")]
    pub job_delay_ms: u64,
    /// Ganeti's `candidate_pool_size`; `None`: the initial master candidates (the master
    /// counted) fill the pool, as on a cluster that has more master-capable nodes than the pool
    /// holds.
    #[serde(default)]
    pub candidate_pool_size: Option<usize>,
}

fn default_cluster_name() -> String {
    "cluster.sim.test".into()
}
fn default_job_delay_ms() -> u64 {
    50
}

impl SimConfig {
    /// `nodes` nodes `node<i>.<domain>` and instances given as `name:template:node-index`
    /// (the same spec as the real-cluster scripts; `drbd` takes the next node as secondary).
    pub fn from_spec(nodes: usize, instances: &str, domain: &str) -> Result<Self, String> {
        if nodes == 0 {
            return Err("a cluster needs at least one node".into());
        }
        let node_name = |i: usize| format!("node{i}.{domain}");
        let sim_nodes = (1..=nodes)
            .map(|i| SimNode {
                name: node_name(i),
                uuid: String::new(),
                drained: false,
                offline: false,
                master_candidate: i <= 3,
                master_capable: true,
                vm_capable: true,
                memory_total_mib: default_memory(),
                tags: Vec::new(),
                ip: format!("198.18.0.{}", 10 + i),
                memory_reserved_mib: 0,
                memory_unknown: false,
                disk_free_mib: None,
            })
            .collect();
        let mut sim_instances = Vec::new();
        for spec in instances
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let parts: Vec<&str> = spec.split(':').collect();
            let [name, template, index] = parts.as_slice() else {
                return Err(format!(
                    "bad instance spec `{spec}` (want name:template:node-index)"
                ));
            };
            let index: usize = index
                .parse()
                .map_err(|_| format!("bad node index in `{spec}`"))?;
            if index == 0 || index > nodes {
                return Err(format!("node index {index} of `{spec}` is not 1..{nodes}"));
            }
            if DiskTemplate::parse(template).is_none() {
                return Err(format!("unknown disk template `{template}` in `{spec}`"));
            }
            let snodes = if *template == "drbd" {
                if nodes < 2 {
                    return Err(format!("drbd instance `{name}` needs two nodes"));
                }
                vec![node_name(index % nodes + 1)]
            } else {
                Vec::new()
            };
            let full = if name.contains('.') {
                (*name).to_owned()
            } else {
                format!("{name}.{domain}")
            };
            sim_instances.push(SimInstance {
                name: full,
                uuid: String::new(),
                disk_template: (*template).to_owned(),
                pnode: node_name(index),
                snodes,
                memory_mib: default_instance_memory(),
                running: true,
                tags: Vec::new(),
                disk_sizes: None,
            });
        }
        Ok(Self {
            cluster_name: format!("cluster.{domain}"),
            nodes: sim_nodes,
            instances: sim_instances,
            job_delay_ms: default_job_delay_ms(),
            candidate_pool_size: None,
        })
    }
}

fn is_node_local(template: &str) -> bool {
    DiskTemplate::from_name(template).is_node_local()
}

fn is_shared(template: &str) -> bool {
    DiskTemplate::from_name(template).redundancy() == Redundancy::Shared
}

/// What a simulated job does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SimOp {
    SetNodeParams {
        node: String,
        drained: Option<bool>,
        offline: Option<bool>,
        /// Promote other nodes to keep the master-candidate pool filled when this one leaves it.
        #[serde(default)]
        auto_promote: bool,
    },
    TagsSet {
        kind: TagKind,
        name: String,
        tags: Vec<String>,
    },
    TagsDel {
        kind: TagKind,
        name: String,
        tags: Vec<String>,
    },
    InstanceMigrate {
        instance: String,
        target: Option<String>,
        mode: Option<String>,
    },
    InstanceFailover {
        instance: String,
        target: Option<String>,
    },
    InstanceShutdown {
        instance: String,
    },
    ReplaceDisks {
        instance: String,
        mode: String,
        remote_node: Option<String>,
    },
    NodeEvacuate {
        node: String,
        mode: String,
    },
    InstanceRecreateDisks {
        instance: String,
        iallocator: Option<String>,
    },
    InstanceReinstall {
        instance: String,
        start: bool,
    },
}

/// What a tag belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TagKind {
    Cluster,
    Node,
    Instance,
    Group,
}

impl SimOp {
    /// Ganeti's opcode id.
    pub fn op_id(&self) -> &'static str {
        match self {
            Self::SetNodeParams { .. } => "OP_NODE_SET_PARAMS",
            Self::TagsSet { .. } => "OP_TAGS_SET",
            Self::TagsDel { .. } => "OP_TAGS_DEL",
            Self::InstanceMigrate { .. } => "OP_INSTANCE_MIGRATE",
            Self::InstanceFailover { .. } => "OP_INSTANCE_FAILOVER",
            Self::InstanceShutdown { .. } => "OP_INSTANCE_SHUTDOWN",
            Self::ReplaceDisks { .. } => "OP_INSTANCE_REPLACE_DISKS",
            Self::NodeEvacuate { .. } => "OP_NODE_EVACUATE",
            Self::InstanceRecreateDisks { .. } => "OP_INSTANCE_RECREATE_DISKS",
            Self::InstanceReinstall { .. } => "OP_INSTANCE_REINSTALL",
        }
    }

    /// Ganeti's job summary, e.g. `NODE_EVACUATE(node2)`.
    pub fn summary(&self) -> String {
        let base = self.op_id().trim_start_matches("OP_");
        match self {
            Self::SetNodeParams { node, .. } | Self::NodeEvacuate { node, .. } => {
                format!("{base}({node})")
            }
            Self::InstanceMigrate { instance, .. }
            | Self::InstanceFailover { instance, .. }
            | Self::InstanceShutdown { instance }
            | Self::ReplaceDisks { instance, .. }
            | Self::InstanceRecreateDisks { instance, .. }
            | Self::InstanceReinstall { instance, .. } => format!("{base}({instance})"),
            Self::TagsSet { .. } | Self::TagsDel { .. } => base.to_owned(),
        }
    }

    /// The object the job acts on (node or instance name; empty for cluster tags).
    pub fn target(&self) -> &str {
        match self {
            Self::SetNodeParams { node, .. } | Self::NodeEvacuate { node, .. } => node,
            Self::InstanceMigrate { instance, .. }
            | Self::InstanceFailover { instance, .. }
            | Self::InstanceShutdown { instance }
            | Self::ReplaceDisks { instance, .. }
            | Self::InstanceRecreateDisks { instance, .. }
            | Self::InstanceReinstall { instance, .. } => instance,
            Self::TagsSet { name, .. } | Self::TagsDel { name, .. } => name,
        }
    }

    /// The opcode as Ganeti serialises it (parameters only; `OP_ID` and `reason` are added).
    fn params(&self) -> serde_json::Map<String, Value> {
        let value = match self {
            Self::SetNodeParams {
                node,
                drained,
                offline,
                auto_promote,
            } => {
                json!({"node_name": node, "drained": drained, "offline": offline, "force": false, "auto_promote": auto_promote})
            }
            Self::TagsSet { kind, name, tags } | Self::TagsDel { kind, name, tags } => {
                let name = if *kind == TagKind::Cluster {
                    Value::Null
                } else {
                    json!(name)
                };
                json!({"kind": kind, "name": name, "tags": tags, "dry_run": false})
            }
            Self::InstanceMigrate {
                instance,
                target,
                mode,
            } => {
                json!({"instance_name": instance, "target_node": target, "mode": mode, "cleanup": false, "allow_failover": false})
            }
            Self::InstanceFailover { instance, target } => {
                json!({"instance_name": instance, "target_node": target, "ignore_consistency": false})
            }
            Self::InstanceShutdown { instance } => {
                json!({"instance_name": instance, "timeout": 120, "no_remember": false})
            }
            Self::ReplaceDisks {
                instance,
                mode,
                remote_node,
            } => {
                json!({"instance_name": instance, "mode": mode, "remote_node": remote_node, "early_release": false})
            }
            Self::NodeEvacuate { node, mode } => {
                json!({"node_name": node, "mode": mode, "iallocator": "hail", "early_release": false})
            }
            Self::InstanceRecreateDisks {
                instance,
                iallocator,
            } => {
                json!({"instance_name": instance, "disks": [], "nodes": [], "iallocator": iallocator})
            }
            Self::InstanceReinstall { instance, .. } => {
                json!({"instance_name": instance, "force_variant": false})
            }
        };
        match value {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        }
    }
}

/// A Ganeti-style opcode failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimFailure {
    pub class: String,
    pub message: String,
    pub kind: Option<String>,
}

impl SimFailure {
    fn prereq(message: impl Into<String>, kind: &str) -> Self {
        Self {
            class: "OpPrereqError".into(),
            message: message.into(),
            kind: Some(kind.into()),
        }
    }
    fn exec(message: impl Into<String>) -> Self {
        Self {
            class: "OpExecError".into(),
            message: message.into(),
            kind: None,
        }
    }
    /// `["OpExecError", [msg]]` or `["OpPrereqError", [msg, kind]]`.
    pub fn to_opresult(&self) -> Value {
        match &self.kind {
            Some(kind) => json!([self.class, [self.message, kind]]),
            None => json!([self.class, [self.message]]),
        }
    }
}

/// One simulated job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimJob {
    pub id: JobId,
    pub op: SimOp,
    /// Reason trail `[source, text, ns]` entries.
    pub reason: Vec<(String, String, u64)>,
    pub status: JobStatus,
    pub opresult: Value,
    pub log: Vec<String>,
    /// Times in ms since the simulation's start.
    pub received_ms: u64,
    pub start_ms: Option<u64>,
    pub end_ms: Option<u64>,
    /// When the job starts running and when it finishes (ms since start).
    run_at_ms: u64,
    finish_at_ms: u64,
    /// Set by fault injection: the job ends with this failure whatever it does.
    forced_failure: Option<SimFailure>,
    /// RAPI `depends`: jobs and the final statuses they must end in before this job runs.
    #[serde(default)]
    pub depends: Vec<(JobId, Vec<JobStatus>)>,
    /// Whether `depends` has been satisfied (the job may run).
    #[serde(default)]
    depends_met: bool,
    /// When its cancel was first asked for (`DELETE /2/jobs/<id>`), whatever its status then.
    #[serde(default)]
    pub cancel_asked_ms: Option<u64>,
}

/// Counts the memory of `i` (when running) on its primary node in `used`.
fn add_memory(used: &mut std::collections::HashMap<String, u64>, i: &SimInstance) {
    if !i.running {
        return;
    }
    match used.get_mut(i.pnode.as_str()) {
        Some(on) => *on += i.memory_mib,
        None => {
            used.insert(i.pnode.clone(), i.memory_mib);
        }
    }
}

/// A job as the bulk job list last showed it: encoded, with what its text depends on that
/// changes (status, start and end).
#[derive(Debug, Clone)]
struct ListedJob {
    version: (JobStatus, Option<u64>, Option<u64>),
    bytes: Vec<u8>,
}

/// Record of a submission, for "no job submitted twice" assertions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub job: JobId,
    pub op_id: String,
    pub target: String,
    /// The nodecare reason text, if the submission carried one.
    pub reason_text: Option<String>,
    /// `incident/intent` parsed from the reason, if any.
    pub intent: Option<String>,
    /// Submitted by the cluster itself (evacuation child jobs), not by a client.
    pub internal: bool,
}

impl Submission {
    /// What the job does, as its nodecare reason text describes it ([`Reason::description_of`]).
    pub fn operation(&self) -> Option<&str> {
        self.reason_text.as_deref().and_then(Reason::description_of)
    }
}

/// Rule that makes matching jobs fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFailureRule {
    /// Opcode id to match (`OP_NODE_EVACUATE`), or any.
    #[serde(default)]
    pub op_id: Option<String>,
    /// Target (node/instance name) to match, or any.
    #[serde(default)]
    pub target: Option<String>,
    /// How many matching jobs fail (None = all).
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default = "default_fail_message")]
    pub message: String,
}

fn default_fail_message() -> String {
    "injected failure".into()
}

/// The simulated cluster.
#[derive(Debug, Clone)]
pub struct SimCluster {
    pub cluster_name: String,
    pub cluster_uuid: String,
    pub cluster_tags: Vec<String>,
    /// Tags of the one node group (`default`).
    pub group_tags: Vec<String>,
    pub nodes: BTreeMap<String, SimNode>,
    /// Ganeti's `candidate_pool_size`: how many master candidates the cluster keeps.
    pub candidate_pool_size: usize,
    /// Node names in configuration order (the first is the master).
    pub node_order: Vec<String>,
    pub instances: BTreeMap<String, SimInstance>,
    pub jobs: BTreeMap<JobId, SimJob>,
    pub submissions: Vec<Submission>,
    pub job_delay: Duration,
    pub failure_rules: Vec<JobFailureRule>,
    /// The next this many client jobs vanish from the queue as soon as they are submitted.
    pub vanish_next: u32,
    /// The next this many client jobs never finish.
    pub stick_next: u32,
    /// Jobs that never finish.
    pub stuck: std::collections::BTreeSet<JobId>,
    /// Finished jobs moved to the queue's archive ([`Self::archive`]): the job list leaves
    /// them out, a query naming them (`GET /2/jobs/<id>`) still shows them.
    pub archived: std::collections::BTreeSet<JobId>,
    next_job: JobId,
    /// Wall-clock milliseconds at the simulation's millisecond 0: reason-trail timestamps are
    /// wall-clock nanoseconds, as Ganeti's are, so that a trail read back (`nodecare explain
    /// JOB`) names the moment on the coordinator's clock. 0 (the model alone) keeps them on the
    /// simulation's clock.
    pub trail_epoch_ms: u64,
    /// No job below this id is unfinished ([`Self::advance`]).
    unfinished_from: JobId,
    /// No job changes state on its own before this time ([`Self::advance`] looks at none
    /// before it): the earliest start or end of an unfinished job, as of the last look, lowered
    /// by every change to the queue since (a submission, a dependency, a cancel). Never later
    /// than the truth; `u64::MAX` when nothing is due.
    due_ms: u64,
    /// The bulk node and instance lists as last encoded, until a job ends or the cluster is
    /// changed by hand (the lists change only then).
    encoded_nodes: Option<Vec<u8>>,
    encoded_instances: Option<Vec<u8>>,
    /// Jobs as the bulk job list last showed them, encoded, with their status and times then.
    listed_jobs: std::collections::HashMap<JobId, ListedJob>,
    /// Jobs' opcodes as a job query last showed them, encoded, with their status and times then.
    queried_ops: std::collections::HashMap<JobId, ListedJob>,
    /// Memory used on each node by its running primaries, as [`Self::memory_used`] last summed.
    memory_used: std::cell::OnceCell<std::collections::HashMap<String, u64>>,
    /// Instances marked up that are not running (crashed: Ganeti's `ERROR_down`), which the
    /// watcher starts again ([`Self::run_watcher`]).
    error_down: std::collections::BTreeSet<String>,
    /// The hypervisor every instance runs on (`fake` by default; `kvm`, `xen-pvm`) and the
    /// hypervisor parameters RAPI shows; change it with [`crate::Simulation::with_cluster`].
    pub hypervisor: SimHypervisor,
}

/// The simulated cluster's hypervisor and the parameters of it that RAPI answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimHypervisor {
    /// `enabled_hypervisors` and `default_hypervisor` of `/2/info`; empty: `fake`.
    pub name: String,
    /// The cluster's `hvparams.kvm.machine_version` (`""`: not pinned).
    pub kvm_machine_version: String,
    /// Instances' own `machine_version` (`custom_hvparams`), by instance name.
    pub instance_machine_versions: BTreeMap<String, String>,
    /// Nodes' Ganeti versions, by node name, shown as the node's `software_version` (Ganeti's
    /// own RAPI node answers have none; the master's is `/2/info`'s, 3.0.2).
    pub node_versions: BTreeMap<String, String>,
}

impl SimHypervisor {
    fn name(&self) -> &str {
        if self.name.is_empty() {
            "fake"
        } else {
            &self.name
        }
    }
}

fn fake_uuid(kind: u8, n: usize) -> String {
    format!("00000000-0000-4000-8{kind:03x}-{n:012x}")
}

impl SimCluster {
    pub fn new(config: SimConfig) -> Result<Self, String> {
        if config.nodes.is_empty() {
            return Err("a cluster needs at least one node".into());
        }
        let mut nodes = BTreeMap::new();
        let mut node_order = Vec::new();
        for (i, mut node) in config.nodes.into_iter().enumerate() {
            if node.uuid.is_empty() {
                node.uuid = fake_uuid(1, i + 1);
            }
            if nodes.contains_key(&node.name) {
                return Err(format!("duplicate node `{}`", node.name));
            }
            node_order.push(node.name.clone());
            nodes.insert(node.name.clone(), node);
        }
        let mut instances = BTreeMap::new();
        for (i, mut inst) in config.instances.into_iter().enumerate() {
            if inst.uuid.is_empty() {
                inst.uuid = fake_uuid(2, i + 1);
            }
            for n in std::iter::once(&inst.pnode).chain(&inst.snodes) {
                if !nodes.contains_key(n) {
                    return Err(format!("instance `{}` is on unknown node `{n}`", inst.name));
                }
            }
            if instances.contains_key(&inst.name) {
                return Err(format!("duplicate instance `{}`", inst.name));
            }
            instances.insert(inst.name.clone(), inst);
        }
        let master = node_order.first().cloned().unwrap_or_default();
        let candidate_pool_size = config.candidate_pool_size.unwrap_or_else(|| {
            nodes
                .values()
                .filter(|n| n.master_candidate || n.name == master)
                .count()
        });
        Ok(Self {
            cluster_name: config.cluster_name,
            cluster_uuid: fake_uuid(0, 1),
            cluster_tags: Vec::new(),
            group_tags: Vec::new(),
            nodes,
            candidate_pool_size,
            node_order,
            instances,
            jobs: BTreeMap::new(),
            submissions: Vec::new(),
            job_delay: Duration::from_millis(config.job_delay_ms),
            failure_rules: Vec::new(),
            vanish_next: 0,
            stick_next: 0,
            stuck: std::collections::BTreeSet::new(),
            archived: std::collections::BTreeSet::new(),
            next_job: 1,
            trail_epoch_ms: 0,
            unfinished_from: 0,
            due_ms: u64::MAX,
            encoded_nodes: None,
            encoded_instances: None,
            listed_jobs: std::collections::HashMap::new(),
            queried_ops: std::collections::HashMap::new(),
            memory_used: std::cell::OnceCell::new(),
            error_down: std::collections::BTreeSet::new(),
            hypervisor: SimHypervisor::default(),
        })
    }

    /// Starts instance `name` on its primary node outside of any job the coordinator sees, as
    /// its owner's `gnt-instance start` does behind the coordinator's back (a drained node
    /// still runs the instances started on it).
    pub fn start_instance(&mut self, name: &str) -> Result<(), String> {
        if !self.instances.contains_key(name) {
            return Err(format!("unknown instance `{name}`"));
        }
        self.error_down.remove(name);
        self.change_instance(name, |i| i.running = true);
        self.lists_changed();
        Ok(())
    }

    /// Instance `name` stops without being marked down (it crashed): Ganeti shows it
    /// `ERROR_down` until the watcher starts it again ([`Self::run_watcher`]).
    pub fn crash_instance(&mut self, name: &str) -> Result<(), String> {
        if !self.instances.contains_key(name) {
            return Err(format!("unknown instance `{name}`"));
        }
        self.change_instance(name, |i| i.running = false);
        self.error_down.insert(name.to_owned());
        self.lists_changed();
        Ok(())
    }

    /// Ganeti's watcher (`ganeti-watcher`, every few minutes): starts every `ERROR_down`
    /// instance whose primary node is online, drained or not. Returns those it started.
    pub fn run_watcher(&mut self) -> Vec<String> {
        let due: Vec<String> = self
            .error_down
            .iter()
            .filter(|name| {
                self.instances.get(*name).is_some_and(|i| {
                    !i.running && self.nodes.get(&i.pnode).is_some_and(|n| !n.offline)
                })
            })
            .cloned()
            .collect();
        for name in &due {
            self.error_down.remove(name);
            self.change_instance(name, |i| i.running = true);
        }
        if !due.is_empty() {
            self.lists_changed();
        }
        due
    }

    /// Makes `name` the master, as `gnt-cluster master-failover` run on it does (the old master
    /// stays a master candidate).
    pub fn set_master(&mut self, name: &str) -> Result<(), String> {
        self.lists_changed();
        let Some(at) = self.node_order.iter().position(|n| n == name) else {
            return Err(format!("unknown node `{name}`"));
        };
        let old = self.master().to_owned();
        if let Some(node) = self.nodes.get_mut(&old) {
            node.master_candidate = true;
        }
        let node = self.node_order.remove(at);
        self.node_order.insert(0, node);
        Ok(())
    }

    pub fn master(&self) -> &str {
        self.node_order
            .first()
            .map(String::as_str)
            .unwrap_or_default()
    }

    fn node_role(&self, node: &SimNode) -> &'static str {
        if node.name == self.master() {
            "M"
        } else if node.offline {
            "O"
        } else if node.drained {
            "D"
        } else if node.master_candidate {
            "C"
        } else {
            "R"
        }
    }

    /// Memory used by the running primaries of `node`: every node's sum taken from
    /// [`Self::node_loads`], then kept up to date by [`Self::change_instance`] (and summed again after
    /// the cluster was changed by hand).
    fn memory_used(&self, node: &str) -> u64 {
        let used = self.memory_used.get_or_init(|| {
            self.node_loads()
                .into_iter()
                .map(|(node, load)| (node.to_owned(), load.memory_used_mib))
                .collect()
        });
        used.get(node).copied().unwrap_or(0)
    }

    /// Changes instance `name` with `change`, and what is kept of the memory its nodes use.
    fn change_instance(&mut self, name: &str, change: impl FnOnce(&mut SimInstance)) {
        let Some(i) = self.instances.get_mut(name) else {
            return;
        };
        if let Some(used) = self.memory_used.get_mut()
            && i.running
            && let Some(on) = used.get_mut(i.pnode.as_str())
        {
            *on = on.saturating_sub(i.memory_mib);
        }
        change(i);
        if let Some(used) = self.memory_used.get_mut() {
            add_memory(used, i);
        }
    }

    fn memory_free(&self, node: &str) -> u64 {
        self.nodes.get(node).map_or(0, |n| {
            n.memory_total_mib
                .saturating_sub(n.memory_reserved_mib)
                .saturating_sub(self.memory_used(node))
        })
    }

    /// Submits a job; `reason_text` is the client's `reason` (as RAPI's `gnt:user` entry) and
    /// `resource` names the RAPI resource for the `gnt:library:rlib2:` entry.
    pub fn submit(
        &mut self,
        op: SimOp,
        reason_text: Option<&str>,
        resource: &str,
        now_ms: u64,
    ) -> JobId {
        let id = self.next_job;
        self.next_job += 1;
        let ns = now_ms
            .saturating_add(self.trail_epoch_ms)
            .saturating_mul(1_000_000);
        let mut reason = Vec::new();
        if let Some(text) = reason_text.filter(|t| !t.is_empty()) {
            reason.push(("gnt:user".to_owned(), text.to_owned(), ns));
        }
        reason.push((format!("gnt:library:rlib2:{resource}"), String::new(), ns));
        self.push_job(id, op, reason, reason_text, false, now_ms);
        id
    }

    fn push_job(
        &mut self,
        id: JobId,
        op: SimOp,
        reason: Vec<(String, String, u64)>,
        reason_text: Option<&str>,
        internal: bool,
        now_ms: u64,
    ) {
        let delay = u64::try_from(self.job_delay.as_millis()).unwrap_or(u64::MAX);
        let forced_failure = self.take_failure_rule(&op);
        let intent = reason_text
            .and_then(Reason::parse_text)
            .map(|p| format!("{}/{}", p.incident, p.intent));
        self.submissions.push(Submission {
            job: id,
            op_id: op.op_id().to_owned(),
            target: op.target().to_owned(),
            reason_text: reason_text.map(str::to_owned),
            intent,
            internal,
        });
        self.listed_jobs.remove(&id);
        self.queried_ops.remove(&id);
        self.jobs.insert(
            id,
            SimJob {
                id,
                op,
                reason,
                status: JobStatus::Queued,
                opresult: Value::Null,
                log: Vec::new(),
                received_ms: now_ms,
                start_ms: None,
                end_ms: None,
                run_at_ms: now_ms.saturating_add(delay / 2),
                finish_at_ms: now_ms.saturating_add(delay),
                forced_failure,
                depends: Vec::new(),
                depends_met: false,
                cancel_asked_ms: None,
            },
        );
        self.due_ms = self.due_ms.min(now_ms.saturating_add(delay / 2));
        if !internal && self.vanish_next > 0 {
            self.vanish_next -= 1;
            self.jobs.remove(&id);
        } else if !internal && self.stick_next > 0 {
            self.stick_next -= 1;
            self.stuck.insert(id);
        }
    }

    /// Numbers the jobs submitted from now on after `last` (a copy of a cluster whose jobs
    /// up to `last` exist elsewhere: no id is given twice).
    pub fn number_jobs_after(&mut self, last: JobId) {
        self.next_job = self.next_job.max(last.saturating_add(1));
    }

    /// Gives the next submitted job the id `id`, lower than jobs already there or not (a copy
    /// of a cluster seeded with the jobs in flight elsewhere, with their ids, oldest first).
    pub fn number_next_job(&mut self, id: JobId) {
        self.next_job = id;
        self.unfinished_from = self.unfinished_from.min(id);
        self.due_ms = 0;
    }

    /// Id the next submitted job gets.
    pub const fn next_job_id(&self) -> JobId {
        self.next_job
    }

    /// Makes job `id` (still queued) wait for `depends`, as Ganeti's job scheduler does: it
    /// stays `queued` until every dependency is final, then runs if each ended in one of the
    /// wanted statuses; otherwise it fails without running (`canceled` when a dependency was
    /// canceled and that was not wanted).
    pub fn set_depends(&mut self, id: JobId, depends: Vec<(JobId, Vec<JobStatus>)>) {
        self.listed_jobs.remove(&id);
        self.queried_ops.remove(&id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.depends = depends;
        }
        // A job waiting on unfinished jobs is due when they end, which is already counted;
        // one whose dependencies have all ended (or can never be met) is due at once.
        if let Some(job) = self.jobs.get(&id)
            && !matches!(self.dependency_state(job), Ok(None))
        {
            self.due_ms = 0;
        }
    }

    /// Archives the finished jobs that ended at or before `ended_by_ms` (the watcher's
    /// `gnt-job autoarchive`, by age): Ganeti moves their files to the queue's archive, whence
    /// a query naming a job still loads it (`loadJobFromDisk` with `archived`), while the job
    /// list shows only the live queue. Returns the jobs archived.
    pub fn archive(&mut self, ended_by_ms: u64) -> Vec<JobId> {
        let ended: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.status.is_final() && j.end_ms.is_some_and(|t| t <= ended_by_ms))
            .map(|j| j.id)
            .filter(|id| !self.archived.contains(id))
            .collect();
        self.archived.extend(ended.iter().copied());
        ended
    }

    /// Ganeti's job cancel (`DELETE /2/jobs/<id>`): a job that has not started (queued, or
    /// waiting for the jobs it depends on) is canceled, its opcodes marked canceled; a running
    /// or finished job is left alone. Jobs depending on a canceled job then end without running
    /// (see [`Self::set_depends`]). `None`: no such job.
    pub fn cancel_job(&mut self, id: JobId, now_ms: u64) -> Option<(bool, String)> {
        let job = self.jobs.get_mut(&id)?;
        job.cancel_asked_ms.get_or_insert(now_ms);
        if job.status != JobStatus::Queued {
            return Some((false, format!("Job {id} is no longer waiting in the queue")));
        }
        let waiting = !job.depends.is_empty() && !job.depends_met;
        let at = now_ms.max(job.received_ms);
        job.status = JobStatus::Canceled;
        job.start_ms = Some(at);
        job.end_ms = Some(at);
        job.log.push("Job canceled by request".into());
        job.opresult = json!("Job canceled by request");
        // The jobs depending on it end at the next look.
        self.due_ms = 0;
        let message = if waiting {
            format!("Job {id} will be canceled")
        } else {
            format!("Job {id} canceled")
        };
        Some((true, message))
    }

    /// Whether a queued job's dependencies let it run (`Ok(Some(t))`: the last one ended at
    /// `t`), make it wait (`Ok(None)`), or fail it (`Err`, with Ganeti's status and message).
    fn dependency_state(&self, job: &SimJob) -> Result<Option<u64>, (JobStatus, String)> {
        let mut ready_at = 0;
        for (dep, wanted) in &job.depends {
            if *dep == job.id {
                return Err((JobStatus::Error, "Job can't depend on itself".into()));
            }
            let Some(other) = self.jobs.get(dep) else {
                return Err((
                    JobStatus::Error,
                    format!("Dependency error: Job {dep} not found"),
                ));
            };
            if !other.status.is_final() {
                return Ok(None);
            }
            if other.status == JobStatus::Canceled && !wanted.contains(&JobStatus::Canceled) {
                return Err((
                    JobStatus::Canceled,
                    format!("Dependency job {dep} was cancelled"),
                ));
            }
            if !wanted.is_empty() && !wanted.contains(&other.status) {
                let wanted: Vec<&str> = wanted.iter().map(|s| s.as_str()).collect();
                return Err((
                    JobStatus::Error,
                    format!(
                        "Dependency job {dep} finished with status '{}', not one of '{}' as required",
                        other.status.as_str(),
                        wanted.join(", ")
                    ),
                ));
            }
            ready_at = ready_at.max(other.end_ms.unwrap_or(0));
        }
        Ok(Some(ready_at))
    }

    fn take_failure_rule(&mut self, op: &SimOp) -> Option<SimFailure> {
        let index = self.failure_rules.iter().position(|rule| {
            rule.op_id.as_deref().is_none_or(|id| id == op.op_id())
                && rule.target.as_deref().is_none_or(|t| t == op.target())
                && rule.count != Some(0)
        })?;
        let rule = self.failure_rules.get_mut(index)?;
        let failure = SimFailure::exec(rule.message.clone());
        if let Some(count) = rule.count.as_mut() {
            *count -= 1;
            if *count == 0 {
                self.failure_rules.remove(index);
            }
        }
        Some(failure)
    }

    /// Starts and finishes jobs whose time has come, in id order. Only jobs from the oldest
    /// unfinished one on are looked at, and none before the earliest time one is due: a queue
    /// of thousands of jobs costs nothing until one of them changes.
    pub fn advance(&mut self, now_ms: u64) {
        if now_ms < self.due_ms {
            return;
        }
        let ids: Vec<JobId> = self
            .jobs
            .range(self.unfinished_from..)
            .filter(|(_, job)| !job.status.is_final())
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(job) = self.jobs.get(&id)
                && job.status == JobStatus::Queued
                && !job.depends.is_empty()
                && !job.depends_met
            {
                match self.dependency_state(job) {
                    Ok(None) => continue,
                    Ok(Some(ready_at)) => {
                        let delay = u64::try_from(self.job_delay.as_millis()).unwrap_or(u64::MAX);
                        if let Some(job) = self.jobs.get_mut(&id) {
                            job.depends_met = true;
                            let start = ready_at.max(job.received_ms);
                            job.run_at_ms = start.saturating_add(delay / 2);
                            job.finish_at_ms = start.saturating_add(delay);
                        }
                    }
                    Err((status, message)) => {
                        if let Some(job) = self.jobs.get_mut(&id) {
                            // Ganeti starts the job, which fails before its opcode runs.
                            let at = now_ms.max(job.received_ms);
                            job.status = status;
                            job.start_ms = Some(at);
                            job.end_ms = Some(at);
                            job.log.push(message.clone());
                            job.opresult = SimFailure::exec(message).to_opresult();
                        }
                        continue;
                    }
                }
            }
            let Some(job) = self.jobs.get_mut(&id) else {
                continue;
            };
            if job.status == JobStatus::Queued && now_ms >= job.run_at_ms {
                job.status = JobStatus::Running;
                job.start_ms = Some(job.run_at_ms);
            }
            if job.status == JobStatus::Running
                && now_ms >= job.finish_at_ms
                && !self.stuck.contains(&id)
            {
                let finish_at = job.finish_at_ms;
                self.finish_job(id, finish_at);
            }
        }
        // Job ids only grow and a final job stays final.
        self.unfinished_from = self
            .jobs
            .range(self.unfinished_from..)
            .find(|(_, job)| !job.status.is_final())
            .map_or(self.next_job, |(id, _)| *id);
        self.due_ms = self.next_change_at().unwrap_or(u64::MAX);
    }

    /// The cluster may have been changed by hand (a caller with the whole cluster, its job
    /// queue included): the next [`Self::advance`] looks at every unfinished job, and the lists
    /// are encoded again.
    pub(crate) fn touched(&mut self) {
        self.due_ms = 0;
        self.memory_used = std::cell::OnceCell::new();
        self.lists_changed();
    }

    /// Nodes or instances changed: their bulk lists are encoded again when next asked for.
    fn lists_changed(&mut self) {
        self.encoded_nodes = None;
        self.encoded_instances = None;
    }

    /// Milliseconds until the next job changes state, if any job is unfinished and not stuck.
    pub fn next_change_in(&self, now_ms: u64) -> Option<u64> {
        (self.due_ms != u64::MAX).then(|| self.due_ms.saturating_sub(now_ms))
    }

    /// When the next job changes state (0: at once), if any job is unfinished and not stuck.
    fn next_change_at(&self) -> Option<u64> {
        self.jobs
            .range(self.unfinished_from..)
            .map(|(_, j)| j)
            .filter_map(|j| match j.status {
                // A waiting job changes when its dependencies do (they are listed too), or
                // at once when they are all final.
                JobStatus::Queued if !j.depends.is_empty() && !j.depends_met => self
                    .dependency_state(j)
                    .map_or(Some(0), |ready| ready.map(|_| 0)),
                JobStatus::Queued => Some(j.run_at_ms),
                JobStatus::Running if self.stuck.contains(&j.id) => None,
                JobStatus::Running => Some(j.finish_at_ms),
                _ => None,
            })
            .min()
    }

    fn finish_job(&mut self, id: JobId, at_ms: u64) {
        // What the job did shows in the lists.
        self.lists_changed();
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let op = job.op.clone();
        let forced = job.forced_failure.clone();
        let outcome = match forced {
            Some(failure) => Err(failure),
            None => self.execute(&op, id, at_ms),
        };
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.end_ms = Some(at_ms);
        match outcome {
            Ok(result) => {
                job.status = JobStatus::Success;
                job.opresult = result;
            }
            Err(failure) => {
                job.status = JobStatus::Error;
                job.log.push(failure.message.clone());
                job.opresult = failure.to_opresult();
            }
        }
    }

    /// Ganeti's `GetMasterCandidateStats(exceptions)`: the master candidates, and how many
    /// there should be (the pool size, at most the master-capable nodes neither drained nor
    /// offline), `except` left out of both.
    fn candidate_stats(&self, except: Option<&str>) -> (usize, usize) {
        let master = self.master();
        let (mut now, mut possible) = (0, 0);
        for n in self.nodes.values() {
            if except == Some(n.name.as_str()) {
                continue;
            }
            if n.master_capable && !n.offline && !n.drained {
                possible += 1;
            }
            if n.master_candidate || n.name == master {
                now += 1;
            }
        }
        (now, possible.min(self.candidate_pool_size))
    }

    /// Ganeti's `MaintainCandidatePool([except])`: promotes master-capable nodes, neither
    /// drained nor offline, until the pool is full (in configuration order, where Ganeti picks
    /// at random).
    fn fill_candidate_pool(&mut self, except: &str) {
        let (mut now, should) = self.candidate_stats(Some(except));
        let master = self.master().to_owned();
        for name in &self.node_order {
            if now >= should {
                break;
            }
            let Some(n) = self.nodes.get_mut(name) else {
                continue;
            };
            if n.name == except
                || n.name == master
                || n.master_candidate
                || n.offline
                || n.drained
                || !n.master_capable
            {
                continue;
            }
            n.master_candidate = true;
            now += 1;
        }
    }

    fn node(&self, name: &str) -> Result<&SimNode, SimFailure> {
        self.nodes
            .get(name)
            .ok_or_else(|| SimFailure::prereq(format!("Node '{name}' not known"), "unknown_entity"))
    }

    fn instance(&self, name: &str) -> Result<&SimInstance, SimFailure> {
        self.instances.get(name).ok_or_else(|| {
            SimFailure::prereq(format!("Instance '{name}' not known"), "unknown_entity")
        })
    }

    /// Applies an opcode; the result is the opcode result, or a Ganeti-style failure.
    fn execute(&mut self, op: &SimOp, job: JobId, now_ms: u64) -> Result<Value, SimFailure> {
        match op {
            SimOp::SetNodeParams {
                node,
                drained,
                offline,
                auto_promote,
            } => {
                let was_candidate = self.node(node)?.master_candidate;
                let demotes = *drained == Some(true) || *offline == Some(true);
                if node == self.master() && demotes {
                    return Err(SimFailure::prereq(
                        "The master role can be changed only via master-failover",
                        "wrong_input",
                    ));
                }
                if *drained == Some(true) && *offline == Some(true) {
                    return Err(SimFailure::prereq(
                        "Can't set the node into more than one state at the same time",
                        "wrong_input",
                    ));
                }
                // LUNodeSetParams.CheckPrereq: a candidate leaves the pool only if enough
                // remain, unless others may be promoted in its place (`force` does not help).
                if was_candidate && demotes && !*auto_promote {
                    let (remaining, should) = self.candidate_stats(Some(node));
                    if remaining < should {
                        return Err(SimFailure::prereq(
                            "Not enough master candidates, please pass auto promote option to \
                             allow promotion (--auto-promote or RAPI auto_promote=True)",
                            "wrong_state",
                        ));
                    }
                }
                // Back from drained or offline: the node promotes itself if the pool has room
                // (`_DecideSelfPromotion`, judged before the change).
                let self_promotes = {
                    let (now, should) = self.candidate_stats(None);
                    now < (should + 1).min(self.candidate_pool_size)
                };
                let mut changes = Vec::new();
                let n = self
                    .nodes
                    .get_mut(node)
                    .ok_or_else(|| SimFailure::exec("node vanished"))?;
                // Ganeti's roles are exclusive (LUNodeSetParams `_R2F`): drained or offline
                // clears the other flags; clearing a flag that is not set changes nothing.
                if demotes && n.master_candidate {
                    changes.push(json!(["master_candidate", "False"]));
                }
                if *drained == Some(true) {
                    n.drained = true;
                    n.offline = false;
                    n.master_candidate = false;
                    changes.push(json!(["drained", "True"]));
                } else if *offline == Some(true) {
                    n.offline = true;
                    n.drained = false;
                    n.master_candidate = false;
                    changes.push(json!(["offline", "True"]));
                } else {
                    let mut back = false;
                    if *drained == Some(false) && n.drained {
                        n.drained = false;
                        back = true;
                        changes.push(json!(["drained", "False"]));
                    }
                    if *offline == Some(false) && n.offline {
                        n.offline = false;
                        back = true;
                        changes.push(json!(["offline", "False"]));
                    }
                    if back && self_promotes && n.master_capable && !n.master_candidate {
                        n.master_candidate = true;
                        changes.push(json!(["master_candidate", "True"]));
                    }
                }
                if demotes && *auto_promote {
                    self.fill_candidate_pool(node);
                }
                Ok(Value::Array(changes))
            }
            SimOp::TagsSet { kind, name, tags } => {
                let list = self.tag_list(*kind, name)?;
                for t in tags {
                    if !list.contains(t) {
                        list.push(t.clone());
                    }
                }
                Ok(Value::Null)
            }
            SimOp::TagsDel { kind, name, tags } => {
                let list = self.tag_list(*kind, name)?;
                let missing: Vec<&String> = tags.iter().filter(|t| !list.contains(t)).collect();
                if !missing.is_empty() {
                    return Err(SimFailure::exec(format!("Tag(s) {missing:?} not found")));
                }
                list.retain(|t| !tags.contains(t));
                Ok(Value::Null)
            }
            SimOp::InstanceMigrate {
                instance, target, ..
            } => {
                self.move_instance(instance, target.as_deref(), true)?;
                Ok(Value::Null)
            }
            SimOp::InstanceFailover { instance, target } => {
                self.move_instance(instance, target.as_deref(), false)?;
                Ok(Value::Null)
            }
            SimOp::InstanceShutdown { instance } => {
                self.instance(instance)?;
                self.change_instance(instance, |i| i.running = false);
                Ok(Value::Null)
            }
            SimOp::ReplaceDisks {
                instance,
                mode,
                remote_node,
            } => {
                let inst = self.instance(instance)?.clone();
                if inst.disk_template != "drbd" {
                    return Err(SimFailure::prereq(
                        format!(
                            "Can only run replace disks for DRBD8-based instances, not '{}'",
                            inst.disk_template
                        ),
                        "wrong_input",
                    ));
                }
                if mode == "replace_new_secondary" {
                    let new = match remote_node {
                        Some(n) => n.clone(),
                        None => self
                            .pick_target(
                                &inst,
                                &[vec![inst.pnode.clone()], inst.snodes.clone()].concat(),
                            )
                            .ok_or_else(|| {
                                SimFailure::prereq(
                                    "No node can take the new secondary",
                                    "insufficient_resources",
                                )
                            })?,
                    };
                    let target = self.node(&new)?;
                    if target.offline || target.drained || new == inst.pnode {
                        return Err(SimFailure::prereq(
                            format!("Node '{new}' cannot be the new secondary"),
                            "wrong_state",
                        ));
                    }
                    self.change_instance(instance, |i| i.snodes = vec![new]);
                }
                Ok(Value::Null)
            }
            SimOp::NodeEvacuate { node, mode } => self.evacuate(node, mode, job, now_ms),
            SimOp::InstanceRecreateDisks { instance, .. } => {
                self.recreate_disks(instance)?;
                Ok(Value::Null)
            }
            SimOp::InstanceReinstall { instance, start } => {
                let inst = self.instance(instance)?.clone();
                let primary = self.node(&inst.pnode)?;
                if primary.offline {
                    return Err(SimFailure::prereq(
                        format!("Instance primary node '{}' is offline", inst.pnode),
                        "wrong_state",
                    ));
                }
                self.change_instance(instance, |i| i.running = *start);
                Ok(Value::Null)
            }
        }
    }

    /// Ganeti's disk recreation with an allocator: new nodes for every disk (a new primary,
    /// and for DRBD a new secondary), chosen among the healthy nodes; the instance is stopped.
    fn recreate_disks(&mut self, instance: &str) -> Result<(), SimFailure> {
        let inst = self.instance(instance)?.clone();
        if is_shared(&inst.disk_template) || inst.disk_template == "diskless" {
            return Err(SimFailure::prereq(
                format!(
                    "Instance's disk layout '{}' has no disks to recreate on new nodes",
                    inst.disk_template
                ),
                "wrong_input",
            ));
        }
        let mut stopped = inst.clone();
        stopped.running = false;
        let primary = self.pick_target(&stopped, &[]).ok_or_else(|| {
            SimFailure::prereq(
                "Can't compute nodes using iallocator 'hail'",
                "insufficient_resources",
            )
        })?;
        let secondary = if inst.disk_template == "drbd" {
            let s = self
                .pick_target(&stopped, std::slice::from_ref(&primary))
                .ok_or_else(|| {
                    SimFailure::prereq(
                        "Can't compute nodes using iallocator 'hail'",
                        "insufficient_resources",
                    )
                })?;
            vec![s]
        } else {
            Vec::new()
        };
        self.change_instance(instance, |i| {
            i.pnode = primary;
            i.snodes = secondary;
            i.running = false;
        });
        Ok(())
    }

    fn tag_list(&mut self, kind: TagKind, name: &str) -> Result<&mut Vec<String>, SimFailure> {
        match kind {
            TagKind::Cluster => Ok(&mut self.cluster_tags),
            TagKind::Group if name == "default" => Ok(&mut self.group_tags),
            TagKind::Group => Err(SimFailure::prereq(
                format!("Node group '{name}' not known"),
                "unknown_entity",
            )),
            TagKind::Node => self
                .nodes
                .get_mut(name)
                .map(|n| &mut n.tags)
                .ok_or_else(|| {
                    SimFailure::prereq(format!("Node '{name}' not known"), "unknown_entity")
                }),
            TagKind::Instance => self
                .instances
                .get_mut(name)
                .map(|i| &mut i.tags)
                .ok_or_else(|| {
                    SimFailure::prereq(format!("Instance '{name}' not known"), "unknown_entity")
                }),
        }
    }

    /// Healthy node with the most free memory that fits the instance, not in `exclude`.
    fn pick_target(&self, inst: &SimInstance, exclude: &[String]) -> Option<String> {
        self.node_order
            .iter()
            .filter(|n| !exclude.contains(n))
            .filter_map(|n| self.nodes.get(n))
            .filter(|n| !n.offline && !n.drained && n.vm_capable)
            .filter(|n| self.memory_free(&n.name) >= inst.memory_mib)
            .max_by_key(|n| (self.memory_free(&n.name), std::cmp::Reverse(n.name.clone())))
            .map(|n| n.name.clone())
    }

    fn move_instance(
        &mut self,
        name: &str,
        target: Option<&str>,
        migrate: bool,
    ) -> Result<(), SimFailure> {
        let inst = self.instance(name)?.clone();
        let template = inst.disk_template.as_str();
        if is_node_local(template) {
            let what = if migrate { "migrations" } else { "failovers" };
            return Err(SimFailure::prereq(
                format!("Instance's disk layout '{template}' does not allow {what}"),
                "wrong_state",
            ));
        }
        let source = self.node(&inst.pnode)?.clone();
        if migrate && source.offline {
            return Err(SimFailure::prereq(
                format!(
                    "Cannot migrate instance {name}: its primary node {} is offline",
                    source.name
                ),
                "wrong_state",
            ));
        }
        let target = if template == "drbd" {
            let secondary = inst.snodes.first().cloned().ok_or_else(|| {
                SimFailure::exec(format!("Instance {name} has no secondary node"))
            })?;
            if let Some(t) = target.filter(|t| *t != secondary) {
                return Err(SimFailure::prereq(
                    format!(
                        "Instances with disk template drbd cannot be moved to {t}, only to their secondary"
                    ),
                    "wrong_input",
                ));
            }
            secondary
        } else if is_shared(template) {
            match target {
                Some(t) => t.to_owned(),
                None => self
                    .pick_target(&inst, std::slice::from_ref(&inst.pnode))
                    .ok_or_else(|| {
                        SimFailure::prereq(
                            format!(
                                "Can't compute nodes using iallocator 'hail': no node fits {name}"
                            ),
                            "insufficient_resources",
                        )
                    })?,
            }
        } else {
            return Err(SimFailure::prereq(
                format!("Disk template '{template}' cannot be moved"),
                "wrong_state",
            ));
        };
        let target_node = self.node(&target)?;
        if target == inst.pnode {
            // Ganeti's TLMigrateInstance (and failover) check: the precondition "the instance
            // is elsewhere" no longer holds.
            return Err(SimFailure::prereq(
                format!("Cannot migrate instance {name} to its primary ({target})"),
                "wrong_state",
            ));
        }
        if target_node.offline || target_node.drained || !target_node.vm_capable {
            return Err(SimFailure::prereq(
                format!("Node {target} is offline, drained or not vm-capable"),
                "wrong_state",
            ));
        }
        if inst.running && self.memory_free(&target) < inst.memory_mib {
            return Err(SimFailure::prereq(
                format!(
                    "Not enough memory on target node {target}: needed {} MiB, available {} MiB",
                    inst.memory_mib,
                    self.memory_free(&target)
                ),
                "insufficient_resources",
            ));
        }
        self.change_instance(name, |i| {
            if i.disk_template == "drbd" {
                i.snodes = vec![i.pnode.clone()];
            }
            i.pnode = target;
        });
        Ok(())
    }

    /// Ganeti's node evacuation: plans every move first, fails as a whole when an instance
    /// cannot be relocated, and otherwise submits one child job per instance.
    fn evacuate(
        &mut self,
        node: &str,
        mode: &str,
        job: JobId,
        now_ms: u64,
    ) -> Result<Value, SimFailure> {
        self.node(node)?;
        let (primary, secondary) = match mode {
            "primary-only" => (true, false),
            "secondary-only" => (false, true),
            "all" => {
                return Err(SimFailure::prereq(
                    "Due to an issue with the iallocator interface it is not possible to evacuate all instances at once; specify explicitly whether to evacuate primary or secondary instances",
                    "wrong_input",
                ));
            }
            other => {
                return Err(SimFailure::prereq(
                    format!("Unknown evacuation mode '{other}'"),
                    "wrong_input",
                ));
            }
        };
        let mut children = Vec::new();
        let mut planned_free: BTreeMap<String, u64> = self
            .node_order
            .iter()
            .map(|n| (n.clone(), self.memory_free(n)))
            .collect();
        let mut unmovable = Vec::new();
        let instances: Vec<SimInstance> = self.instances.values().cloned().collect();
        for inst in &instances {
            if primary && inst.pnode == node {
                if is_node_local(&inst.disk_template) {
                    unmovable.push((inst.name.clone(), inst.disk_template.clone()));
                    continue;
                }
                let target = if inst.disk_template == "drbd" {
                    inst.snodes.first().cloned()
                } else {
                    self.node_order
                        .iter()
                        .filter(|n| n.as_str() != node)
                        .filter(|n| {
                            self.nodes
                                .get(*n)
                                .is_some_and(|x| !x.offline && !x.drained && x.vm_capable)
                        })
                        .filter(|n| planned_free.get(*n).copied().unwrap_or(0) >= inst.memory_mib)
                        .max_by_key(|n| {
                            (
                                planned_free.get(*n).copied().unwrap_or(0),
                                std::cmp::Reverse((*n).clone()),
                            )
                        })
                        .cloned()
                };
                let Some(target) = target else {
                    return Err(SimFailure::exec(format!(
                        "Can't find a node to evacuate instance {} to",
                        inst.name
                    )));
                };
                if let Some(free) = planned_free.get_mut(&target) {
                    *free = free.saturating_sub(inst.memory_mib);
                }
                let op = if inst.running {
                    SimOp::InstanceMigrate {
                        instance: inst.name.clone(),
                        target: (inst.disk_template != "drbd").then_some(target),
                        mode: None,
                    }
                } else {
                    SimOp::InstanceFailover {
                        instance: inst.name.clone(),
                        target: (inst.disk_template != "drbd").then_some(target),
                    }
                };
                children.push(op);
            } else if secondary && inst.snodes.iter().any(|s| s == node) {
                children.push(SimOp::ReplaceDisks {
                    instance: inst.name.clone(),
                    mode: "replace_new_secondary".into(),
                    remote_node: None,
                });
            }
        }
        if !unmovable.is_empty() {
            let names: Vec<&str> = unmovable.iter().map(|(n, _)| n.as_str()).collect();
            let template = unmovable.first().map_or("file", |(_, t)| t.as_str());
            return Err(SimFailure::exec(format!(
                "Unable to evacuate instances {} (Instances of type {template} cannot be relocated)",
                names.join(", ")
            )));
        }
        let parent_reason = self
            .jobs
            .get(&job)
            .map(|j| j.reason.clone())
            .unwrap_or_default();
        let mut ids = Vec::new();
        for op in children {
            let id = self.next_job;
            self.next_job += 1;
            // Ganeti copies the parent's trail into the jobs it submits.
            let mut reason = parent_reason.clone();
            reason.push((
                "gnt:opcode:node_evacuate".into(),
                format!("job={job};index=0"),
                now_ms.saturating_mul(1_000_000),
            ));
            self.push_job(id, op, reason, None, true, now_ms);
            ids.push(json!([true, id]));
        }
        Ok(json!({"jobs": ids}))
    }

    /// Intents (`incident/intent`) submitted more than once by clients.
    pub fn duplicate_intents(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut dups = BTreeSet::new();
        for s in self.submissions.iter().filter(|s| !s.internal) {
            if let Some(intent) = &s.intent
                && !seen.insert(intent.clone())
            {
                dups.insert(intent.clone());
            }
        }
        dups.into_iter().collect()
    }

    // ---- RAPI JSON views (same keys and types as Ganeti 3.0.2) ----

    pub fn info_json(&self) -> Value {
        json!({
            "name": self.cluster_name,
            "master": self.master(),
            "uuid": self.cluster_uuid,
            "software_version": "3.0.2",
            "protocol_version": 3_000_000,
            "config_version": 3_000_000,
            "architecture": ["64bits", "x86_64"],
            "default_hypervisor": self.hypervisor.name(),
            "enabled_hypervisors": [self.hypervisor.name()],
            "hvparams": {"kvm": {"machine_version": self.hypervisor.kvm_machine_version}},
            "enabled_disk_templates": ["diskless", "file", "sharedfile", "plain", "drbd"],
            "default_iallocator": "hail",
            "master_netdev": "eth0",
            "tags": self.cluster_tags,
            "vcs_version": "(nodecare simulation) version 3.0.2",
        })
    }

    /// What every node holds (its primaries, its secondaries, the memory its running
    /// primaries use), in one pass over the instances: [`Self::node_json_in`] for every node of
    /// a bulk list costs the instances once, not once per node.
    pub fn node_loads(&self) -> BTreeMap<&str, NodeLoad<'_>> {
        let mut loads: BTreeMap<&str, NodeLoad<'_>> = self
            .nodes
            .keys()
            .map(|name| (name.as_str(), NodeLoad::default()))
            .collect();
        for inst in self.instances.values() {
            if let Some(load) = loads.get_mut(inst.pnode.as_str()) {
                load.primaries.push(&inst.name);
                if inst.running {
                    load.memory_used_mib += inst.memory_mib;
                }
            }
            for secondary in &inst.snodes {
                if let Some(load) = loads.get_mut(secondary.as_str()) {
                    load.secondaries.push(&inst.name);
                }
            }
        }
        loads
    }

    /// One node as RAPI shows it (one pass over the instances; see [`Self::node_loads`]).
    pub fn node_json(&self, node: &SimNode) -> Value {
        let load = self
            .node_loads()
            .remove(node.name.as_str())
            .unwrap_or_default();
        self.node_json_in(node, &load)
    }

    /// One node as RAPI shows it, with what it holds (`load`).
    pub fn node_json_in(&self, node: &SimNode, load: &NodeLoad<'_>) -> Value {
        let pinst = &load.primaries;
        let sinst = &load.secondaries;
        let (mfree, mtotal, mnode) = if node.offline || node.memory_unknown {
            (Value::Null, Value::Null, Value::Null)
        } else {
            (
                json!(
                    node.memory_total_mib
                        .saturating_sub(node.memory_reserved_mib)
                        .saturating_sub(load.memory_used_mib)
                ),
                json!(node.memory_total_mib),
                json!(512),
            )
        };
        json!({
            "name": node.name,
            "uuid": node.uuid,
            "role": self.node_role(node),
            "offline": node.offline,
            "drained": node.drained,
            "master_candidate": node.master_candidate || node.name == self.master(),
            "master_capable": node.master_capable,
            "vm_capable": node.vm_capable,
            "pinst_cnt": pinst.len(),
            "pinst_list": pinst,
            "sinst_cnt": sinst.len(),
            "sinst_list": sinst,
            "tags": node.tags,
            "group.uuid": fake_uuid(3, 1),
            "pip": node.ip,
            "sip": node.ip,
            "mfree": mfree,
            "mtotal": mtotal,
            "mnode": mnode,
            "dfree": if node.offline { Value::Null } else { json!(node.disk_free_mib.unwrap_or(100_000)) },
            "dtotal": if node.offline { Value::Null } else { json!(200_000) },
            "ctotal": if node.offline { Value::Null } else { json!(2) },
            "cnodes": if node.offline { Value::Null } else { json!(1) },
            "csockets": if node.offline { Value::Null } else { json!(1) },
            "cnos": if node.offline { Value::Null } else { json!(2) },
            "spfree": Value::Null,
            "sptotal": Value::Null,
            "serial_no": 1,
            "ctime": 0.0,
            "mtime": 0.0,
            "ndparams": {"exclusive_storage": false, "spindle_count": 1, "ssh_port": 22},
            "software_version": self.hypervisor.node_versions.get(&node.name),
        })
    }

    /// One instance as RAPI shows it.
    pub fn instance_json(&self, inst: &SimInstance) -> Value {
        serde_json::to_value(self.instance_view(inst)).unwrap_or(Value::Null)
    }

    /// Every instance as RAPI's bulk list shows it, encoded at once (no JSON value per
    /// instance: the list of thousands is the simulation's largest answer).
    pub fn instances_json_bytes(&mut self) -> Vec<u8> {
        if let Some(bytes) = &self.encoded_instances {
            return bytes.clone();
        }
        let views: Vec<InstanceView<'_>> = self
            .instances
            .values()
            .map(|i| self.instance_view(i))
            .collect();
        let bytes = serde_json::to_vec(&views).unwrap_or_else(|_| b"[]".to_vec());
        self.encoded_instances = Some(bytes.clone());
        bytes
    }

    /// Every node as RAPI's bulk list shows it, in configuration order.
    pub fn nodes_json(&self) -> Vec<Value> {
        let loads = self.node_loads();
        let none = NodeLoad::default();
        self.node_order
            .iter()
            .filter_map(|n| self.nodes.get(n))
            .map(|n| self.node_json_in(n, loads.get(n.name.as_str()).unwrap_or(&none)))
            .collect()
    }

    /// [`Self::nodes_json`], encoded once until the cluster changes.
    pub fn nodes_json_bytes(&mut self) -> Vec<u8> {
        if let Some(bytes) = &self.encoded_nodes {
            return bytes.clone();
        }
        let bytes = serde_json::to_vec(&self.nodes_json()).unwrap_or_else(|_| b"[]".to_vec());
        self.encoded_nodes = Some(bytes.clone());
        bytes
    }

    fn instance_view<'a>(&'a self, inst: &'a SimInstance) -> InstanceView<'a> {
        let pnode = self.nodes.get(&inst.pnode);
        let offline = pnode.is_some_and(|n| n.offline);
        let crashed = !inst.running && self.error_down.contains(&inst.name);
        let status = if offline {
            "ERROR_nodeoffline"
        } else if inst.running {
            "running"
        } else if crashed {
            "ERROR_down"
        } else {
            "ADMIN_down"
        };
        let disks: &[u64] = match &inst.disk_sizes {
            Some(sizes) => sizes,
            None if inst.disk_template == "diskless" => &[],
            None => &[1024],
        };
        InstanceView {
            name: &inst.name,
            uuid: &inst.uuid,
            pnode: &inst.pnode,
            snodes: &inst.snodes,
            disk_template: &inst.disk_template,
            status,
            admin_state: if inst.running || crashed {
                "up"
            } else {
                "down"
            },
            oper_state: (!offline).then_some(inst.running),
            oper_ram: inst.running.then_some(inst.memory_mib),
            oper_vcpus: inst.running.then_some(1),
            os: "noop",
            tags: &inst.tags,
            beparams: BeParams {
                maxmem: inst.memory_mib,
                minmem: inst.memory_mib,
                vcpus: 1,
                always_failover: false,
                auto_balance: true,
            },
            disk_sizes: disks,
            disk_usage: disks.iter().sum(),
            nic_macs: ["aa:00:00:00:00:01"],
            hvparams: self.hvparams(inst, true),
            custom_hvparams: self.hvparams(inst, false),
            network_port: None,
            serial_no: 1,
            ctime: 0.0,
            mtime: 0.0,
        }
    }

    /// An instance's hypervisor parameters as RAPI shows them: `filled` (the cluster's and its
    /// own) or its own; only KVM's have a `machine_version`.
    fn hvparams(&self, inst: &SimInstance, filled: bool) -> HvParams<'_> {
        if self.hypervisor.name() != "kvm" {
            return HvParams {
                machine_version: None,
            };
        }
        let own = self.hypervisor.instance_machine_versions.get(&inst.name);
        let machine_version = if filled {
            Some(own.unwrap_or(&self.hypervisor.kvm_machine_version).as_str())
        } else {
            own.map(String::as_str)
        };
        HvParams { machine_version }
    }

    pub fn group_json(&self) -> Value {
        json!({
            "name": "default",
            "uuid": fake_uuid(3, 1),
            "alloc_policy": "preferred",
            "node_cnt": self.node_order.len(),
            "node_list": self.node_order,
            "tags": self.group_tags,
            "serial_no": 1,
        })
    }

    /// Every job as RAPI's bulk job list (`GET /2/jobs?bulk=1`) shows it, encoded; a job is
    /// encoded again only once its status or times changed (or its dependencies were set).
    pub fn jobs_json_bytes(&mut self) -> Vec<u8> {
        let mut out = b"[".to_vec();
        let mut encoded = Vec::new();
        let archived = &self.archived;
        let live = self.jobs.values().filter(|j| !archived.contains(&j.id));
        for (index, job) in live.enumerate() {
            if index > 0 {
                out.push(b',');
            }
            let version = (job.status, job.start_ms, job.end_ms);
            if let Some(listed) = self.listed_jobs.get(&job.id)
                && listed.version == version
            {
                out.extend_from_slice(&listed.bytes);
                continue;
            }
            let bytes =
                serde_json::to_vec(&self.job_json(job, false)).unwrap_or_else(|_| b"null".to_vec());
            out.extend_from_slice(&bytes);
            encoded.push((job.id, ListedJob { version, bytes }));
        }
        out.push(b']');
        self.listed_jobs.extend(encoded);
        out
    }

    /// Job `id`'s `field` as a job query shows it, encoded (`None`: no such job); its opcodes
    /// are encoded again only once its status or times changed (or its dependencies were set).
    pub fn job_field_bytes(
        &mut self,
        id: JobId,
        field: &str,
        with_details: bool,
    ) -> Option<Vec<u8>> {
        let job = self.jobs.get(&id)?;
        let encode = |v: &Value| serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec());
        match field {
            "id" => Some(id.to_string().into_bytes()),
            "status" => Some(encode(&json!(job.status.as_str()))),
            "ops" => {
                let version = (job.status, job.start_ms, job.end_ms);
                if let Some(kept) = self.queried_ops.get(&id)
                    && kept.version == version
                {
                    return Some(kept.bytes.clone());
                }
                let bytes = encode(self.job_json(job, false).get("ops").unwrap_or(&Value::Null));
                self.queried_ops.insert(
                    id,
                    ListedJob {
                        version,
                        bytes: bytes.clone(),
                    },
                );
                Some(bytes)
            }
            other => Some(encode(
                self.job_json(job, with_details)
                    .get(other)
                    .unwrap_or(&Value::Null),
            )),
        }
    }

    pub fn job_json(&self, job: &SimJob, with_details: bool) -> Value {
        let mut op = job.op.params();
        op.insert("OP_ID".into(), json!(job.op.op_id()));
        op.insert("comment".into(), Value::Null);
        op.insert("priority".into(), json!(0));
        let depends: Vec<Value> = job
            .depends
            .iter()
            .map(|(id, wanted)| {
                let wanted: Vec<&str> = wanted.iter().map(|s| s.as_str()).collect();
                json!([id, wanted])
            })
            .collect();
        op.insert(
            "depends".into(),
            if depends.is_empty() {
                Value::Null
            } else {
                Value::Array(depends)
            },
        );
        op.insert("debug_level".into(), json!(0));
        let mut reason: Vec<Value> = job
            .reason
            .iter()
            .map(|(s, t, ns)| json!([s, t, ns]))
            .collect();
        if let Some(start) = job.start_ms {
            let tag = job.op.op_id().trim_start_matches("OP_").to_lowercase();
            reason.push(json!([
                format!("gnt:opcode:{tag}"),
                format!("job={};index=0", job.id),
                start
                    .saturating_add(self.trail_epoch_ms)
                    .saturating_mul(1_000_000)
            ]));
        }
        op.insert("reason".into(), Value::Array(reason));
        let ts = |ms: u64| json!([ms / 1000 + SIM_EPOCH_S, (ms % 1000) * 1000]);
        let opstatus = match job.status {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Success => "success",
            JobStatus::Error => "error",
            other => other.as_str(),
        };
        let mut v = json!({
            "id": job.id,
            "status": job.status.as_str(),
            "summary": [job.op.summary()],
            "ops": [Value::Object(op)],
            "opstatus": [opstatus],
            "received_ts": ts(job.received_ms),
            "start_ts": job.start_ms.map(ts),
            "end_ts": job.end_ms.map(ts),
        });
        if with_details && let Value::Object(map) = &mut v {
            {
                let log: Vec<Value> = job
                    .log
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        json!([
                            i + 1,
                            ts(job.end_ms.unwrap_or(job.received_ms)),
                            "message",
                            m
                        ])
                    })
                    .collect();
                map.insert("oplog".into(), json!([log]));
                map.insert("opresult".into(), json!([job.opresult]));
            }
        }
        v
    }
}

/// Seconds added to the simulation's millisecond clock in job timestamps (plausible epoch).
const SIM_EPOCH_S: u64 = 1_800_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> SimCluster {
        let config = SimConfig::from_spec(
            3,
            "inst1:diskless:2,inst2:sharedfile:2,inst3:file:3,inst4:drbd:2,inst5:plain:1",
            "sim.test",
        )
        .unwrap();
        SimCluster::new(config).unwrap()
    }

    fn run(c: &mut SimCluster, op: SimOp) -> JobId {
        let id = c.submit(op, None, "test", 0);
        c.advance(1_000_000);
        id
    }

    #[test]
    fn cancel_stops_queued_and_waiting_jobs_only() {
        let mut c = cluster();
        c.job_delay = Duration::from_millis(100);
        let drain = SimOp::SetNodeParams {
            node: "node2.sim.test".into(),
            drained: Some(true),
            offline: None,
            auto_promote: false,
        };
        let first = c.submit(drain.clone(), None, "test", 0);
        let second = c.submit(drain.clone(), None, "test", 0);
        c.set_depends(second, vec![(first, vec![JobStatus::Success])]);
        let third = c.submit(drain, None, "test", 0);
        c.set_depends(third, vec![(second, vec![JobStatus::Success])]);
        c.advance(60);
        assert_eq!(c.jobs[&first].status, JobStatus::Running);
        let (canceled, message) = c.cancel_job(first, 60).unwrap();
        assert!(!canceled, "a running job cannot be canceled");
        assert_eq!(
            message,
            format!("Job {first} is no longer waiting in the queue")
        );
        let (canceled, message) = c.cancel_job(second, 60).unwrap();
        assert!(canceled);
        assert_eq!(message, format!("Job {second} will be canceled"));
        assert_eq!(c.jobs[&second].status, JobStatus::Canceled);
        assert!(c.cancel_job(999, 60).is_none());
        c.advance(1_000);
        assert_eq!(c.jobs[&first].status, JobStatus::Success);
        assert_eq!(c.jobs[&second].status, JobStatus::Canceled);
        // Its dependent never ran.
        assert_ne!(c.jobs[&third].status, JobStatus::Success);
        assert!(c.jobs[&third].status.is_final());
        let (canceled, _) = c.cancel_job(first, 2_000).unwrap();
        assert!(!canceled, "a finished job cannot be canceled");
    }

    #[test]
    fn migrating_onto_the_primary_is_a_wrong_state() {
        let mut c = cluster();
        let id = run(
            &mut c,
            SimOp::InstanceMigrate {
                instance: "inst2.sim.test".into(),
                target: Some("node2.sim.test".into()),
                mode: None,
            },
        );
        assert_eq!(
            c.jobs[&id].opresult,
            json!([
                "OpPrereqError",
                [
                    "Cannot migrate instance inst2.sim.test to its primary (node2.sim.test)",
                    "wrong_state"
                ]
            ])
        );
    }

    #[test]
    fn spec_errors_are_reported() {
        assert!(SimConfig::from_spec(0, "", "x").is_err());
        assert!(SimConfig::from_spec(2, "a:nosuch:1", "x").is_err());
        assert!(SimConfig::from_spec(2, "a:diskless:3", "x").is_err());
        assert!(SimConfig::from_spec(2, "a:diskless", "x").is_err());
        assert!(SimConfig::from_spec(1, "a:drbd:1", "x").is_err());
    }

    /// One step of a job queue's life, for the property test of [`SimCluster::advance`].
    #[derive(Debug, Clone)]
    enum QueueStep {
        Submit { delay_ms: u64 },
        Depend { job: usize, on: Vec<(usize, bool)> },
        Cancel { job: usize },
        Stick,
        Wait { ms: u64 },
    }

    fn queue_step() -> impl proptest::strategy::Strategy<Value = QueueStep> {
        use proptest::prelude::*;
        prop_oneof![
            (0u64..200).prop_map(|delay_ms| QueueStep::Submit { delay_ms }),
            (
                0usize..5,
                proptest::collection::vec((0usize..5, any::<bool>()), 0..3)
            )
                .prop_map(|(job, on)| QueueStep::Depend { job, on }),
            (0usize..5).prop_map(|job| QueueStep::Cancel { job }),
            Just(QueueStep::Stick),
            (0u64..150).prop_map(|ms| QueueStep::Wait { ms }),
        ]
    }

    proptest::proptest! {
        /// Skipping the jobs until the next one is due changes nothing: a cluster that looks
        /// at every unfinished job at every advance ends every job at the same time, with the
        /// same status, and says the same of the next change.
        #[test]
        fn advancing_only_when_a_job_is_due_is_advancing_always(
            steps in proptest::collection::vec(queue_step(), 1..40)
        ) {
            let mut due = cluster();
            let mut always = cluster();
            let mut now = 0u64;
            let mut ids: Vec<JobId> = Vec::new();
            for step in steps {
                for (k, c) in [&mut due, &mut always].into_iter().enumerate() {
                    match &step {
                        QueueStep::Submit { delay_ms } => {
                            c.job_delay = Duration::from_millis(*delay_ms);
                            let op = SimOp::TagsSet {
                                kind: TagKind::Cluster,
                                name: String::new(),
                                tags: vec![format!("t{}", c.next_job_id())],
                            };
                            c.submit(op, None, "test", now);
                        }
                        QueueStep::Depend { job, on } => {
                            let Some(&id) = ids.get(*job) else { continue };
                            let on = on
                                .iter()
                                .filter_map(|(k, ok)| {
                                    let wanted = if *ok {
                                        vec![JobStatus::Success]
                                    } else {
                                        vec![JobStatus::Success, JobStatus::Error, JobStatus::Canceled]
                                    };
                                    ids.get(*k).map(|dep| (*dep, wanted))
                                })
                                .collect();
                            if c.jobs.get(&id).is_some_and(|j| j.status == JobStatus::Queued) {
                                c.set_depends(id, on);
                            }
                        }
                        QueueStep::Cancel { job } => {
                            if let Some(&id) = ids.get(*job) {
                                c.cancel_job(id, now);
                            }
                        }
                        QueueStep::Stick => c.stick_next += 1,
                        QueueStep::Wait { ms } => {
                            if k == 1 {
                                c.touched();
                            }
                            c.advance(now + ms);
                        }
                    }
                }
                match step {
                    QueueStep::Submit { .. } => ids.push(due.next_job_id() - 1),
                    QueueStep::Wait { ms } => now += ms,
                    _ => {}
                }
                let view = |c: &SimCluster| {
                    c.jobs
                        .values()
                        .map(|j| (j.id, j.status, j.start_ms, j.end_ms))
                        .collect::<Vec<_>>()
                };
                proptest::prop_assert_eq!(view(&due), view(&always));
                always.touched();
                always.advance(now);
                due.advance(now);
                proptest::prop_assert_eq!(view(&due), view(&always));
                // Never later than the truth (earlier only costs a look).
                let truth = always.next_change_at().map(|t| t.saturating_sub(now));
                let said = due.next_change_in(now);
                proptest::prop_assert!(
                    truth.is_none_or(|truth| said.is_some_and(|said| said <= truth)),
                    "next change in {said:?}, truly in {truth:?}"
                );
            }
        }
    }

    /// The bulk lists as encoded last equal the lists encoded afresh.
    fn lists_are_fresh(c: &mut SimCluster) {
        let (nodes, instances) = (c.nodes_json_bytes(), c.instances_json_bytes());
        c.lists_changed();
        assert!(nodes == c.nodes_json_bytes(), "nodes");
        assert!(instances == c.instances_json_bytes(), "instances");
    }

    #[test]
    fn the_encoded_lists_follow_every_change() {
        let mut c = cluster();
        let (nodes, instances) = (c.nodes_json_bytes(), c.instances_json_bytes());
        let drain = SimOp::SetNodeParams {
            node: "node2.sim.test".into(),
            drained: Some(true),
            offline: None,
            auto_promote: false,
        };
        c.submit(drain, None, "test", 0);
        let migrate = SimOp::InstanceMigrate {
            instance: "inst4.sim.test".into(),
            target: None,
            mode: None,
        };
        c.submit(migrate, None, "test", 0);
        assert!(
            c.nodes_json_bytes() == nodes,
            "nothing shows before the jobs end"
        );
        assert!(c.instances_json_bytes() == instances);
        c.advance(1_000_000);
        assert!(c.jobs.values().all(|j| j.status == JobStatus::Success));
        assert!(c.nodes_json_bytes() != nodes, "the drain shows");
        assert!(c.instances_json_bytes() != instances, "the migration shows");
        lists_are_fresh(&mut c);
        let nodes = c.nodes_json_bytes();
        c.set_master("node2.sim.test").unwrap();
        assert!(c.nodes_json_bytes() != nodes, "the new master shows");
        lists_are_fresh(&mut c);
    }

    /// The memory each node's running primaries use, as kept and as summed afresh.
    fn memory_kept_and_fresh(c: &SimCluster) -> (Vec<u64>, Vec<u64>) {
        let mut fresh = c.clone();
        fresh.memory_used = std::cell::OnceCell::new();
        c.node_order
            .iter()
            .map(|n| (c.memory_used(n), fresh.memory_used(n)))
            .unzip()
    }

    /// The memory kept per node follows every job that moves, stops or starts an instance.
    #[test]
    fn the_memory_kept_per_node_follows_every_change() {
        let mut c = cluster();
        let before = memory_kept_and_fresh(&c);
        assert_eq!(before.0, before.1);
        let ops = [
            SimOp::InstanceMigrate {
                instance: "inst4.sim.test".into(),
                target: None,
                mode: None,
            },
            SimOp::InstanceShutdown {
                instance: "inst1.sim.test".into(),
            },
        ];
        for op in ops {
            c.submit(op, None, "test", 0);
        }
        c.advance(1_000_000);
        assert!(c.jobs.values().all(|j| j.status == JobStatus::Success));
        let after = memory_kept_and_fresh(&c);
        assert_eq!(after.0, after.1);
        assert_ne!(after.0, before.0, "the jobs changed what the nodes use");
    }

    /// The bulk job list as encoded now, nothing kept from before.
    fn fresh_jobs(c: &SimCluster) -> Vec<u8> {
        let mut fresh = c.clone();
        fresh.listed_jobs.clear();
        fresh.jobs_json_bytes()
    }

    /// The job list kept encoded shows every change of a job: queued, running, ended, its
    /// dependencies set, a job of the same id submitted again.
    #[test]
    fn the_encoded_job_list_follows_every_change() {
        let mut c = cluster();
        let drain = |node: &str| SimOp::SetNodeParams {
            node: node.into(),
            drained: Some(true),
            offline: None,
            auto_promote: false,
        };
        let first = c.submit(drain("node2.sim.test"), None, "test", 0);
        let second = c.submit(drain("node3.sim.test"), None, "test", 0);
        let mut seen = vec![c.jobs_json_bytes()];
        assert!(seen[0] == fresh_jobs(&c));
        c.set_depends(second, vec![(first, vec![JobStatus::Success])]);
        for step in [0, 25, 50, 75, 100, 150] {
            c.advance(step);
            let listed = c.jobs_json_bytes();
            assert!(listed == fresh_jobs(&c), "at {step} ms");
            seen.push(listed);
        }
        assert!(c.jobs.values().all(|j| j.status == JobStatus::Success));
        seen.dedup();
        assert!(
            seen.len() >= 4,
            "dependencies, running, ended: {}",
            seen.len()
        );
        // A copy of the cluster numbers its jobs on: a job of an id listed before is new.
        let mut copy = c.clone();
        copy.jobs.remove(&second);
        copy.next_job = second;
        copy.submit(drain("node4.sim.test"), None, "test", 200);
        assert!(copy.jobs_json_bytes() == fresh_jobs(&copy));
    }

    #[test]
    fn jobs_go_through_queued_running_success() {
        let mut c = cluster();
        let id = c.submit(
            SimOp::SetNodeParams {
                node: "node2.sim.test".into(),
                drained: Some(true),
                offline: None,
                auto_promote: false,
            },
            None,
            "r",
            0,
        );
        assert_eq!(c.jobs[&id].status, JobStatus::Queued);
        c.advance(25);
        assert_eq!(c.jobs[&id].status, JobStatus::Running);
        assert!(!c.nodes["node2.sim.test"].drained, "effect only at the end");
        c.advance(50);
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        assert!(c.nodes["node2.sim.test"].drained);
        assert_eq!(c.next_change_in(60), None);
    }

    #[test]
    fn evacuation_moves_everything_movable_in_child_jobs() {
        let mut c = cluster();
        let id = run(
            &mut c,
            SimOp::NodeEvacuate {
                node: "node2.sim.test".into(),
                mode: "primary-only".into(),
            },
        );
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        let children: Vec<JobId> =
            nodecare_ganeti::rapi::types::child_jobs_of_opresult(&c.jobs[&id].opresult);
        assert_eq!(children.len(), 3);
        c.advance(2_000_000);
        for child in &children {
            assert_eq!(
                c.jobs[child].status,
                JobStatus::Success,
                "{:?}",
                c.jobs[child]
            );
        }
        assert!(c.instances.values().all(|i| i.pnode != "node2.sim.test"));
        // The drbd instance swapped primary and secondary.
        assert_eq!(c.instances["inst4.sim.test"].pnode, "node3.sim.test");
        assert_eq!(
            c.instances["inst4.sim.test"].snodes,
            vec!["node2.sim.test".to_owned()]
        );
        // Then secondary-only replaces the drbd secondary.
        let id = run(
            &mut c,
            SimOp::NodeEvacuate {
                node: "node2.sim.test".into(),
                mode: "secondary-only".into(),
            },
        );
        c.advance(3_000_000);
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        assert_eq!(
            c.instances["inst4.sim.test"].snodes,
            vec!["node1.sim.test".to_owned()]
        );
    }

    #[test]
    fn file_instances_block_evacuation_and_migration() {
        let mut c = cluster();
        let id = run(
            &mut c,
            SimOp::NodeEvacuate {
                node: "node3.sim.test".into(),
                mode: "primary-only".into(),
            },
        );
        let job = &c.jobs[&id];
        assert_eq!(job.status, JobStatus::Error);
        assert_eq!(job.opresult[0], "OpExecError");
        assert!(
            job.opresult[1][0]
                .as_str()
                .unwrap()
                .contains("Instances of type file cannot be relocated")
        );
        let id = run(
            &mut c,
            SimOp::InstanceMigrate {
                instance: "inst5.sim.test".into(),
                target: None,
                mode: None,
            },
        );
        assert_eq!(
            c.jobs[&id].opresult,
            json!([
                "OpPrereqError",
                [
                    "Instance's disk layout 'plain' does not allow migrations",
                    "wrong_state"
                ]
            ])
        );
        let id = run(
            &mut c,
            SimOp::NodeEvacuate {
                node: "node3.sim.test".into(),
                mode: "all".into(),
            },
        );
        assert_eq!(c.jobs[&id].opresult[0], "OpPrereqError");
    }

    #[test]
    fn capacity_is_respected() {
        let mut config = SimConfig::from_spec(2, "big:diskless:1", "sim.test").unwrap();
        config.instances[0].memory_mib = 4000;
        config.nodes[1].memory_total_mib = 1000;
        let mut c = SimCluster::new(config).unwrap();
        let id = run(
            &mut c,
            SimOp::InstanceMigrate {
                instance: "big.sim.test".into(),
                target: Some("node2.sim.test".into()),
                mode: None,
            },
        );
        assert_eq!(c.jobs[&id].status, JobStatus::Error);
        assert_eq!(c.jobs[&id].opresult[1][1], "insufficient_resources");
        assert_eq!(c.instances["big.sim.test"].pnode, "node1.sim.test");
    }

    #[test]
    fn failure_rules_fail_matching_jobs_only() {
        let mut c = cluster();
        c.failure_rules.push(JobFailureRule {
            op_id: Some("OP_TAGS_SET".into()),
            target: None,
            count: Some(1),
            message: "boom".into(),
        });
        let tag = |c: &mut SimCluster| {
            run(
                c,
                SimOp::TagsSet {
                    kind: TagKind::Node,
                    name: "node1.sim.test".into(),
                    tags: vec!["t".into()],
                },
            )
        };
        let first = tag(&mut c);
        let second = tag(&mut c);
        assert_eq!(c.jobs[&first].opresult, json!(["OpExecError", ["boom"]]));
        assert_eq!(c.jobs[&second].status, JobStatus::Success);
        assert!(c.failure_rules.is_empty());
    }

    #[test]
    fn duplicates_are_detected_by_intent() {
        let mut c = cluster();
        let reason = Reason::new(uuid::Uuid::new_v4(), "drain", "Draining");
        let text = format!("gnt:daemon:maintd {}", reason.text());
        let op = SimOp::SetNodeParams {
            node: "node2.sim.test".into(),
            drained: Some(true),
            offline: None,
            auto_promote: false,
        };
        c.submit(op.clone(), Some(&text), "nodes_name_role", 0);
        assert!(c.duplicate_intents().is_empty());
        c.submit(op, Some(&text), "nodes_name_role", 1);
        assert_eq!(c.duplicate_intents().len(), 1);
    }

    /// Ganeti's master-candidate check (LUNodeSetParams): with the pool full, a candidate is
    /// drained or offlined only with `auto_promote`, which promotes a master-capable node in its
    /// place; a node back from drained promotes itself only if the pool has room.
    #[test]
    fn a_full_candidate_pool_needs_auto_promote() {
        let config = SimConfig::from_spec(5, "", "sim.test").unwrap();
        let mut c = SimCluster::new(config).unwrap();
        assert_eq!(
            c.candidate_pool_size, 3,
            "the initial candidates fill the pool"
        );
        c.nodes.get_mut("node5.sim.test").unwrap().master_capable = false;
        let set = |node: &str, drained, offline, auto_promote| SimOp::SetNodeParams {
            node: format!("{node}.sim.test"),
            drained,
            offline,
            auto_promote,
        };
        let candidates = |c: &SimCluster| -> Vec<String> {
            c.nodes
                .values()
                .filter(|n| n.master_candidate)
                .map(|n| n.name.trim_end_matches(".sim.test").to_owned())
                .collect()
        };
        for op in [
            set("node2", Some(true), None, false),
            set("node3", None, Some(true), false),
        ] {
            let id = run(&mut c, op);
            assert_eq!(c.jobs[&id].status, JobStatus::Error);
            let message = c.jobs[&id].opresult.to_string();
            assert!(
                message.contains("Not enough master candidates"),
                "{message}"
            );
        }
        assert!(!c.nodes["node2.sim.test"].drained);
        assert!(!c.nodes["node3.sim.test"].offline);
        // A node that is no candidate leaves nothing to fill.
        let id = run(&mut c, set("node4", Some(true), None, false));
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        let id = run(&mut c, set("node4", Some(false), None, false));
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        assert_eq!(candidates(&c), vec!["node1", "node2", "node3"]);
        // With auto_promote: node4 takes node2's place (node5 is not master-capable).
        let id = run(&mut c, set("node2", Some(true), None, true));
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        assert_eq!(
            c.jobs[&id].opresult,
            json!([["master_candidate", "False"], ["drained", "True"]])
        );
        assert_eq!(candidates(&c), vec!["node1", "node3", "node4"]);
        assert_eq!(c.node_json(&c.nodes["node4.sim.test"])["role"], "C");
        // Nobody is left to promote: the pool shrinks to what can be had.
        let id = run(&mut c, set("node3", None, Some(true), true));
        assert_eq!(c.jobs[&id].status, JobStatus::Success);
        assert_eq!(candidates(&c), vec!["node1", "node4"]);
        // Back from drained with room in the pool: node2 promotes itself; node3 then finds
        // the pool full again.
        let id = run(&mut c, set("node2", Some(false), None, false));
        assert_eq!(
            c.jobs[&id].opresult,
            json!([["drained", "False"], ["master_candidate", "True"]])
        );
        let id = run(&mut c, set("node3", None, Some(false), false));
        assert_eq!(c.jobs[&id].opresult, json!([["offline", "False"]]));
        assert_eq!(candidates(&c), vec!["node1", "node2", "node4"]);
        // The opcode shows what was asked.
        let op = &c.jobs[&id].op.params();
        assert_eq!(op["auto_promote"], json!(false));
    }

    #[test]
    fn master_cannot_be_drained() {
        let mut c = cluster();
        let id = run(
            &mut c,
            SimOp::SetNodeParams {
                node: "node1.sim.test".into(),
                drained: Some(true),
                offline: None,
                auto_promote: false,
            },
        );
        assert_eq!(c.jobs[&id].status, JobStatus::Error);
    }

    /// An instance started behind the coordinator's back runs on its (drained) node; a crashed
    /// one shows `ERROR_down`, marked up, until the watcher starts it again.
    #[test]
    fn instances_start_and_crash_behind_the_coordinator_s_back() {
        let mut c = cluster();
        let status = |c: &SimCluster, name: &str| {
            let v = c.instance_json(&c.instances[name]);
            (v["status"].clone(), v["admin_state"].clone())
        };
        c.nodes.get_mut("node2.sim.test").unwrap().drained = true;
        c.instances.get_mut("inst1.sim.test").unwrap().running = false;
        assert_eq!(
            status(&c, "inst1.sim.test"),
            (json!("ADMIN_down"), json!("down"))
        );
        c.start_instance("inst1.sim.test").unwrap();
        assert_eq!(
            status(&c, "inst1.sim.test"),
            (json!("running"), json!("up"))
        );
        c.crash_instance("inst2.sim.test").unwrap();
        assert_eq!(
            status(&c, "inst2.sim.test"),
            (json!("ERROR_down"), json!("up"))
        );
        assert_eq!(c.run_watcher(), vec!["inst2.sim.test".to_owned()]);
        assert_eq!(
            status(&c, "inst2.sim.test"),
            (json!("running"), json!("up"))
        );
        assert_eq!(c.run_watcher(), Vec::<String>::new());
        assert!(c.start_instance("nosuch").is_err());
    }
}
