//! Cluster model shared by the text and RAPI loaders and the planner.

use serde::Serialize;

/// Ganeti's disk templates and what they mean for a reboot: one type with the coordinator
/// (`nodecare-ganeti`). The loaders accept only the templates htools knows
/// ([`DiskTemplate::parse`]).
pub use nodecare_ganeti::{DiskTemplate, Redundancy};

/// Instance run state as reported by Ganeti.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum InstanceStatus {
    Running,
    AdminDown,
    AdminOffline,
    ErrorDown,
    ErrorUp,
    ErrorNodeDown,
    ErrorNodeOffline,
    ErrorWrongNode,
    UserDown,
}

impl InstanceStatus {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => Self::Running,
            "ADMIN_down" => Self::AdminDown,
            "ADMIN_offline" => Self::AdminOffline,
            "ERROR_down" => Self::ErrorDown,
            "ERROR_up" => Self::ErrorUp,
            "ERROR_nodedown" => Self::ErrorNodeDown,
            "ERROR_nodeoffline" => Self::ErrorNodeOffline,
            "ERROR_wrongnode" => Self::ErrorWrongNode,
            "USER_down" => Self::UserDown,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::AdminDown => "ADMIN_down",
            Self::AdminOffline => "ADMIN_offline",
            Self::ErrorDown => "ERROR_down",
            Self::ErrorUp => "ERROR_up",
            Self::ErrorNodeDown => "ERROR_nodedown",
            Self::ErrorNodeOffline => "ERROR_nodeoffline",
            Self::ErrorWrongNode => "ERROR_wrongnode",
            Self::UserDown => "USER_down",
        }
    }

    /// Whether the instance's memory counts on its primary (htools `usesMemory`).
    pub fn uses_memory(self) -> bool {
        matches!(
            self,
            Self::Running
                | Self::ErrorUp
                | Self::ErrorNodeDown
                | Self::ErrorNodeOffline
                | Self::ErrorWrongNode
        )
    }

    /// Marked offline by the administrator.
    pub fn is_offline(self) -> bool {
        self == Self::AdminOffline
    }

    /// Known not to be running: rebooting its node causes it no downtime.
    pub fn is_down(self) -> bool {
        matches!(
            self,
            Self::AdminDown | Self::AdminOffline | Self::ErrorDown | Self::UserDown
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub name: String,
    pub uuid: String,
    pub alloc_policy: String,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    pub name: String,
    /// Total memory (MiB).
    pub t_mem: f64,
    /// Memory used by the node itself (MiB).
    pub n_mem: i64,
    /// Free memory reported by the node (MiB).
    pub f_mem: i64,
    /// Total disk (MiB).
    pub t_dsk: f64,
    /// Free disk (MiB).
    pub f_dsk: i64,
    pub t_cpu: f64,
    pub offline: bool,
    pub master: bool,
    /// Index into [`Cluster::groups`].
    pub group: usize,
    pub spindles: i64,
    pub tags: Vec<String>,
    pub excl_stor: bool,
    pub free_spindles: i64,
    pub nos_cpu: i64,
    pub cpu_speed: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Instance {
    pub name: String,
    pub mem: i64,
    pub dsk: i64,
    pub vcpus: i64,
    pub status: InstanceStatus,
    pub auto_balance: bool,
    /// Index into [`Cluster::nodes`].
    pub pnode: usize,
    pub snode: Option<usize>,
    pub template: DiskTemplate,
    pub tags: Vec<String>,
    pub spindle_use: i64,
    /// Total spindles of the instance's disks, when known.
    pub spindles: Option<i64>,
    pub forthcoming: bool,
}

/// A whole cluster as loaded from a backend. Indices are positions in the
/// vectors, in backend order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cluster {
    pub groups: Vec<Group>,
    pub nodes: Vec<Node>,
    pub instances: Vec<Instance>,
    pub cluster_tags: Vec<String>,
    /// The instance policies as htools text rows (`owner|std|minmax|disk_templates|vcpu_ratio|
    /// spindle_ratio`, owner empty for the cluster's), checked when read; none: htools' default.
    pub ipolicies: Vec<String>,
}

impl Cluster {
    /// Resolves a node name the way htools does for `-O`: an exact name, or
    /// a unique name of which `wanted` is the leading dot-separated part.
    /// With duplicate names, every node carrying the resolved name matches.
    pub fn lookup_node_name<'a>(&'a self, wanted: &str) -> Option<&'a str> {
        if let Some(n) = self.nodes.iter().find(|n| n.name == wanted) {
            return Some(&n.name);
        }
        let mut found: Option<&str> = None;
        for n in &self.nodes {
            let matches = n.name.len() > wanted.len()
                && n.name.starts_with(wanted)
                && n.name.as_bytes().get(wanted.len()) == Some(&b'.');
            if matches {
                match found {
                    Some(prev) if prev != n.name => return None,
                    _ => found = Some(&n.name),
                }
            }
        }
        found
    }

    /// Finds a node group by name or UUID (last match wins, like htools).
    pub fn find_group(&self, wanted: &str) -> Option<usize> {
        self.groups
            .iter()
            .rposition(|g| g.name == wanted || g.uuid == wanted)
    }

    /// Primary instances of every node, in htools order (descending index).
    /// Forthcoming instances do not exist yet and are in no node's list, as
    /// in htools.
    pub fn primary_lists(&self) -> Vec<Vec<usize>> {
        let mut lists = vec![Vec::new(); self.nodes.len()];
        for (i, inst) in self.instances.iter().enumerate().rev() {
            if inst.forthcoming {
                continue;
            }
            if let Some(l) = lists.get_mut(inst.pnode) {
                l.push(i);
            }
        }
        lists
    }

    /// Secondary instances of every node (any template with a secondary
    /// node set; forthcoming ones excluded), in htools order (descending index).
    pub fn secondary_lists(&self) -> Vec<Vec<usize>> {
        let mut lists = vec![Vec::new(); self.nodes.len()];
        for (i, inst) in self.instances.iter().enumerate().rev() {
            if inst.forthcoming {
                continue;
            }
            if let Some(s) = inst.snode
                && let Some(l) = lists.get_mut(s)
            {
                l.push(i);
            }
        }
        lists
    }

    /// Loader consistency warnings, in the order htools prints them.
    pub fn inconsistency_warnings(&self) -> Vec<String> {
        let plists = self.primary_lists();
        let slists = self.secondary_lists();
        let mut msgs = Vec::new();
        for (ni, node) in self.nodes.iter().enumerate() {
            let i_mem: i64 = plists[ni]
                .iter()
                .map(|&i| &self.instances[i])
                .filter(|i| !i.forthcoming && i.status.uses_memory())
                .map(|i| i.mem)
                .sum();
            let delta_mem = node.t_mem.trunc() as i64 - node.n_mem - i_mem - node.f_mem;
            let i_dsk: i64 = plists[ni]
                .iter()
                .chain(&slists[ni])
                .map(|&i| self.instances[i].dsk)
                .sum();
            let delta_dsk = node.t_dsk.trunc() as i64 - node.f_dsk - i_dsk;
            if delta_mem > 512 || delta_dsk > 1024 {
                msgs.push(format!(
                    "node {} is missing {} MB ram and {} GB disk",
                    node.name,
                    delta_mem,
                    delta_dsk.div_euclid(1024)
                ));
            }
        }
        msgs.reverse();
        msgs
    }
}
