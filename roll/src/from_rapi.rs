//! Conversion of Ganeti RAPI answers (`/2/info`, `/2/groups?bulk=1`,
//! `/2/nodes?bulk=1`, `/2/instances?bulk=1`) into the cluster model,
//! following the field choices of the htools RAPI backend.
//!
//! The answers are decoded with the RAPI types of `nodecare-ganeti` (the one
//! RAPI decoder); this module only applies htools' rules on top: which fields
//! must be present, which live values an offline node does not report.

use std::collections::HashMap;

use nodecare_ganeti::rapi::types::{
    RapiClusterInfo, RapiGroup, RapiIPolicy, RapiISpec, RapiInstance, RapiNode,
};
use serde::de::DeserializeOwned;

use crate::cluster::{Cluster, DiskTemplate, Group, Instance, InstanceStatus, Node};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RapiError {
    #[error("{resource}: invalid answer: {message}")]
    Json {
        resource: &'static str,
        message: String,
    },
    #[error("{owner}: field '{field}': {message}")]
    Field {
        owner: String,
        field: &'static str,
        message: String,
    },
}

/// The four raw RAPI answers htools reads.
#[derive(Debug, Clone, Copy)]
pub struct RapiAnswers<'a> {
    pub info: &'a str,
    pub groups: &'a str,
    pub nodes: &'a str,
    pub instances: &'a str,
}

/// The four RAPI answers, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedAnswers {
    pub info: RapiClusterInfo,
    pub groups: Vec<RapiGroup>,
    pub nodes: Vec<RapiNode>,
    pub instances: Vec<RapiInstance>,
}

fn decode<T: DeserializeOwned>(resource: &'static str, body: &str) -> Result<T, RapiError> {
    serde_json::from_str(body).map_err(|e| RapiError::Json {
        resource,
        message: e.to_string(),
    })
}

impl RapiAnswers<'_> {
    /// Decodes the four answers.
    pub fn decode(&self) -> Result<DecodedAnswers, RapiError> {
        Ok(DecodedAnswers {
            info: decode("/2/info", self.info)?,
            groups: decode("/2/groups", self.groups)?,
            nodes: decode("/2/nodes", self.nodes)?,
            instances: decode("/2/instances", self.instances)?,
        })
    }
}

/// Names the object in errors: `kind 'name'`.
fn owner(kind: &str, name: &str) -> String {
    format!("{kind} '{name}'")
}

fn field_error(owner: &str, field: &'static str, message: &str) -> RapiError {
    RapiError::Field {
        owner: owner.to_owned(),
        field,
        message: message.to_owned(),
    }
}

/// A field htools requires.
fn required<T>(owner: &str, field: &'static str, value: Option<T>) -> Result<T, RapiError> {
    value.ok_or_else(|| field_error(owner, field, "missing"))
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// An instance policy as an htools text row (as htools' `serializeIPolicy` writes it).
fn ipolicy_row(owner: &str, p: &RapiIPolicy) -> String {
    let spec = |s: &RapiISpec| {
        format!(
            "{},{},{},{},{},{}",
            s.memory_size, s.cpu_count, s.disk_size, s.disk_count, s.nic_count, s.spindle_use
        )
    };
    let minmax: Vec<String> = p
        .minmax
        .iter()
        .map(|mm| format!("{};{}", spec(&mm.min), spec(&mm.max)))
        .collect();
    format!(
        "{owner}|{}|{}|{}|{}|{}",
        spec(&p.std),
        minmax.join(";"),
        p.disk_templates.join(","),
        crate::htext::haskell_double(p.vcpu_ratio),
        crate::htext::haskell_double(p.spindle_ratio)
    )
}

fn convert_group(g: &RapiGroup) -> Group {
    Group {
        uuid: g.uuid.clone(),
        alloc_policy: g.alloc_policy.clone(),
        tags: g.tags.clone(),
        name: g.name.clone(),
    }
}

fn convert_node(n: &RapiNode, groups: &HashMap<String, usize>) -> Result<Node, RapiError> {
    let o = owner("node", &n.name);
    let ndparams = required(&o, "ndparams", n.ndparams.as_ref())?;
    let nd_owner = format!("{o} ndparams");
    let excl_stor = required(&nd_owner, "exclusive_storage", ndparams.exclusive_storage)?;
    let group = *groups.get(&n.group_uuid).ok_or_else(|| {
        field_error(
            &o,
            "group.uuid",
            &format!("unknown group uuid '{}'", n.group_uuid),
        )
    })?;
    let live = !n.offline && n.vm_capable;
    // Live values are read only from live nodes; absent (null) optional
    // ones default to zero.
    let live_int = |field: &'static str, v: Option<u64>| {
        if live {
            required(&o, field, v).map(int)
        } else {
            Ok(0)
        }
    };
    let live_num = |field: &'static str, v: Option<u64>| live_int(field, v).map(|v| v as f64);
    let live_int_opt = |v: Option<u64>| if live { v.map_or(0, int) } else { 0 };
    let spindles = if excl_stor {
        live_int("sptotal", n.sptotal)?
    } else {
        int(required(
            &nd_owner,
            "spindle_count",
            ndparams.spindle_count,
        )?)
    };
    Ok(Node {
        t_mem: live_num("mtotal", n.mtotal)?,
        n_mem: live_int("mnode", n.mnode)?,
        f_mem: live_int("mfree", n.mfree)?,
        t_dsk: live_int_opt(n.dtotal) as f64,
        f_dsk: live_int_opt(n.dfree),
        t_cpu: live_num("ctotal", n.ctotal)?,
        nos_cpu: live_int("cnos", n.cnos)?,
        offline: !live || n.drained,
        master: false,
        group,
        spindles,
        free_spindles: live_int_opt(n.spfree),
        tags: n.tags.clone(),
        excl_stor,
        cpu_speed: 1.0,
        name: n.name.clone(),
    })
}

fn convert_instance(
    i: &RapiInstance,
    nodes: &HashMap<String, usize>,
) -> Result<Instance, RapiError> {
    let o = owner("instance", &i.name);
    let be_owner = format!("{o} beparams");
    let be = &i.beparams;
    let mem = match i.oper_ram {
        Some(ram) => int(ram),
        None => int(required(&be_owner, "memory", be.memory.or(be.maxmem))?),
    };
    let lookup = |field: &'static str, n: &str| {
        nodes
            .get(n)
            .copied()
            .ok_or_else(|| field_error(&o, field, &format!("unknown node '{n}'")))
    };
    let pnode = lookup("pnode", &i.pnode)?;
    let snode = match i.snodes.first() {
        Some(s) => Some(lookup("snodes", s)?),
        None => None,
    };
    let status = InstanceStatus::parse(&i.status)
        .ok_or_else(|| field_error(&o, "status", &format!("unknown status '{}'", i.status)))?;
    let template = DiskTemplate::parse(&i.disk_template).ok_or_else(|| {
        field_error(
            &o,
            "disk_template",
            &format!("unknown disk template '{}'", i.disk_template),
        )
    })?;
    let spindles = i.disk_spindles.as_ref().and_then(|list| {
        list.iter()
            .try_fold(0i64, |acc, s| s.map(|s| acc.saturating_add(int(s))))
    });
    Ok(Instance {
        mem,
        dsk: int(required(&o, "disk_usage", i.disk_usage)?),
        vcpus: int(required(&be_owner, "vcpus", be.vcpus)?),
        status,
        auto_balance: required(&be_owner, "auto_balance", be.auto_balance)?,
        pnode,
        snode,
        template,
        tags: i.tags.clone(),
        spindle_use: int(required(&be_owner, "spindle_use", be.spindle_use)?),
        spindles,
        forthcoming: i.forthcoming.unwrap_or(false),
        name: i.name.clone(),
    })
}

/// Builds the cluster model from the four raw RAPI answers.
pub fn cluster_from_rapi(a: RapiAnswers<'_>) -> Result<Cluster, RapiError> {
    cluster_from_decoded(&a.decode()?)
}

/// Builds the cluster model from the four decoded RAPI answers.
pub fn cluster_from_decoded(a: &DecodedAnswers) -> Result<Cluster, RapiError> {
    let groups: Vec<Group> = a.groups.iter().map(convert_group).collect();
    let group_idx: HashMap<String, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.uuid.clone(), i))
        .collect();
    let mut nodes = a
        .nodes
        .iter()
        .map(|n| convert_node(n, &group_idx))
        .collect::<Result<Vec<_>, _>>()?;
    let node_idx: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let instances = a
        .instances
        .iter()
        .map(|i| convert_instance(i, &node_idx))
        .collect::<Result<Vec<_>, _>>()?;
    let master = &a.info.master;
    let m = *node_idx.get(master).ok_or_else(|| RapiError::Field {
        owner: "/2/info".into(),
        field: "master",
        message: format!("Master node {master} unknown"),
    })?;
    if let Some(node) = nodes.get_mut(m) {
        node.master = true;
    }
    Ok(Cluster {
        groups,
        nodes,
        instances,
        cluster_tags: a.info.tags.clone(),
        // The cluster's policy, then each group's, as htools writes them; none without the
        // cluster's (htools' default then applies).
        ipolicies: match &a.info.ipolicy {
            Some(cluster) => std::iter::once(ipolicy_row("", cluster))
                .chain(
                    a.groups
                        .iter()
                        .filter_map(|g| g.ipolicy.as_ref().map(|p| ipolicy_row(&g.name, p))),
                )
                .collect(),
            None => Vec::new(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/rapi");

    fn read(name: &str) -> String {
        std::fs::read_to_string(format!("{DIR}/{name}")).unwrap()
    }

    #[test]
    fn converts_real_samples() {
        let (info, groups, nodes, insts) = (
            read("02-info.json"),
            read("15-groups-bulk.json"),
            read("06-nodes-bulk.json"),
            read("11-instances-bulk.json"),
        );
        let c = cluster_from_rapi(RapiAnswers {
            info: &info,
            groups: &groups,
            nodes: &nodes,
            instances: &insts,
        })
        .unwrap();
        assert_eq!(c.groups.len(), 1);
        assert_eq!(c.groups[0].name, "default");
        assert_eq!(c.nodes.len(), 3);
        assert!(c.nodes[0].master && !c.nodes[1].master);
        assert_eq!(c.nodes[0].t_mem, 24105.0);
        assert_eq!(c.nodes[0].f_mem, 22725);
        assert_eq!(c.nodes[0].f_dsk, 77863);
        assert_eq!(c.instances.len(), 7);
        assert_eq!(c.instances[0].template, DiskTemplate::Diskless);
        assert_eq!(c.instances[0].mem, 128);
        assert_eq!(c.instances[4].template, DiskTemplate::SharedFile);
        assert_eq!(c.cluster_tags.len(), 2);
        // The cluster's and the group's instance policies, as htools writes them.
        let policy = "128,1,1024,1,1,1|128,1,1024,1,1,1;32768,8,1048576,16,8,12|\
                      diskless,sharedfile,file|4.0|32.0";
        assert_eq!(
            c.ipolicies,
            [format!("|{policy}"), format!("default|{policy}")]
        );
        // They survive the text writer.
        let again = crate::htext::parse(&crate::htext::serialize(&c)).unwrap();
        assert_eq!(again.ipolicies, c.ipolicies);
    }

    #[test]
    fn converts_offline_drained_and_drbd() {
        let (info, groups, nodes, insts) = (
            read("02-info.json"),
            read("15-groups-bulk.json"),
            read("72-nodes-bulk-after.json"),
            read("80-instances-bulk-with-injected-drbd-plain.json"),
        );
        let c = cluster_from_rapi(RapiAnswers {
            info: &info,
            groups: &groups,
            nodes: &nodes,
            instances: &insts,
        })
        .unwrap();
        // drained and offline nodes are both htools-offline
        assert!(!c.nodes[0].offline && c.nodes[1].offline && c.nodes[2].offline);
        assert_eq!(c.nodes[2].t_mem, 0.0);
        let drbd = c
            .instances
            .iter()
            .find(|i| i.template == DiskTemplate::Drbd)
            .unwrap();
        assert_eq!(drbd.pnode, 2);
        assert_eq!(drbd.snode, Some(0));
        assert_eq!(drbd.status, InstanceStatus::ErrorNodeOffline);
        // oper_ram null falls back to beparams memory
        assert_eq!(drbd.mem, 128);
    }

    #[test]
    fn rejects_bad_shapes() {
        let e = cluster_from_rapi(RapiAnswers {
            info: "{\"name\":\"c\",\"master\":\"x\",\"tags\":[]}",
            groups: "{}",
            nodes: "[]",
            instances: "[]",
        })
        .unwrap_err();
        assert!(matches!(
            e,
            RapiError::Json {
                resource: "/2/groups",
                ..
            }
        ));
        let e = cluster_from_rapi(RapiAnswers {
            info: "{\"name\":\"c\",\"master\":\"x\",\"tags\":[]}",
            groups: "[]",
            nodes: "[]",
            instances: "[]",
        })
        .unwrap_err();
        assert!(e.to_string().contains("Master node x unknown"));
        let e = cluster_from_rapi(RapiAnswers {
            info: "nope",
            groups: "[]",
            nodes: "[]",
            instances: "[]",
        })
        .unwrap_err();
        assert!(matches!(e, RapiError::Json { .. }));
    }
}
