//! Conversion of Ganeti RAPI answers (`/2/info`, `/2/groups?bulk=1`,
//! `/2/nodes?bulk=1`, `/2/instances?bulk=1`) into the cluster model,
//! following the field choices of the htools RAPI backend.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::cluster::{Cluster, DiskTemplate, Group, Instance, InstanceStatus, Node};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RapiError {
    #[error("{resource}: invalid JSON: {message}")]
    Json {
        resource: &'static str,
        message: String,
    },
    #[error("{resource}: expected {expected}")]
    Shape {
        resource: &'static str,
        expected: &'static str,
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

fn parse_json(resource: &'static str, body: &str) -> Result<Value, RapiError> {
    serde_json::from_str(body).map_err(|e| RapiError::Json {
        resource,
        message: e.to_string(),
    })
}

fn as_array(resource: &'static str, v: &Value) -> Result<Vec<Map<String, Value>>, RapiError> {
    let shape = || RapiError::Shape {
        resource,
        expected: "a JSON array of objects",
    };
    v.as_array()
        .ok_or_else(shape)?
        .iter()
        .map(|o| o.as_object().cloned().ok_or_else(shape))
        .collect()
}

struct Obj<'a> {
    owner: String,
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    fn bad(&self, field: &'static str, message: &str) -> RapiError {
        RapiError::Field {
            owner: self.owner.clone(),
            field,
            message: message.to_owned(),
        }
    }
    /// A present, non-null value.
    fn opt(&self, field: &'static str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }
    fn req(&self, field: &'static str) -> Result<&'a Value, RapiError> {
        self.opt(field).ok_or_else(|| self.bad(field, "missing"))
    }
    fn str(&self, field: &'static str) -> Result<&'a str, RapiError> {
        self.req(field)?
            .as_str()
            .ok_or_else(|| self.bad(field, "expected a string"))
    }
    fn bool(&self, field: &'static str) -> Result<bool, RapiError> {
        self.req(field)?
            .as_bool()
            .ok_or_else(|| self.bad(field, "expected a boolean"))
    }
    fn int(&self, field: &'static str) -> Result<i64, RapiError> {
        let v = self.req(field)?;
        v.as_i64()
            .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| self.bad(field, "expected an integer"))
    }
    fn num(&self, field: &'static str) -> Result<f64, RapiError> {
        self.req(field)?
            .as_f64()
            .ok_or_else(|| self.bad(field, "expected a number"))
    }
    fn strings(&self, field: &'static str) -> Result<Vec<String>, RapiError> {
        self.req(field)?
            .as_array()
            .and_then(|a| a.iter().map(|t| t.as_str().map(str::to_owned)).collect())
            .ok_or_else(|| self.bad(field, "expected a list of strings"))
    }
    /// Reads the object's `name` (errors name just the `kind`), then names the object in
    /// later errors as `kind 'name'`.
    fn named(kind: &str, map: &'a Map<String, Value>) -> Result<(String, Self), RapiError> {
        let unnamed = Obj {
            owner: kind.to_owned(),
            map,
        };
        let name = unnamed.str("name")?.to_owned();
        let owner = format!("{kind} '{name}'");
        Ok((name, Obj { owner, map }))
    }
    fn sub(&self, field: &'static str) -> Result<Obj<'a>, RapiError> {
        let map = self
            .req(field)?
            .as_object()
            .ok_or_else(|| self.bad(field, "expected an object"))?;
        Ok(Obj {
            owner: format!("{} {field}", self.owner),
            map,
        })
    }
}

fn parse_group(map: &Map<String, Value>) -> Result<Group, RapiError> {
    let (name, o) = Obj::named("group", map)?;
    Ok(Group {
        uuid: o.str("uuid")?.to_owned(),
        alloc_policy: o.str("alloc_policy")?.to_owned(),
        tags: o.strings("tags")?,
        name,
    })
}

fn parse_node(
    map: &Map<String, Value>,
    groups: &HashMap<String, usize>,
) -> Result<Node, RapiError> {
    let (name, o) = Obj::named("node", map)?;
    let offline = o.bool("offline")?;
    let drained = o.bool("drained")?;
    let vm_capable = match o.opt("vm_capable") {
        Some(v) => v
            .as_bool()
            .ok_or_else(|| o.bad("vm_capable", "expected a boolean"))?,
        None => true,
    };
    let ndparams = o.sub("ndparams")?;
    let excl_stor = ndparams.bool("exclusive_storage")?;
    let guuid = o.str("group.uuid")?;
    let group = *groups
        .get(guuid)
        .ok_or_else(|| o.bad("group.uuid", &format!("unknown group uuid '{guuid}'")))?;
    let live = !offline && vm_capable;
    // Live values are read only from live nodes; absent (null) optional
    // ones default to zero.
    let live_int = |f: &'static str| if live { o.int(f) } else { Ok(0) };
    let live_num = |f: &'static str| if live { o.num(f) } else { Ok(0.0) };
    let live_int_opt = |f: &'static str| {
        if live && o.opt(f).is_some() {
            o.int(f)
        } else {
            Ok(0)
        }
    };
    let live_num_opt = |f: &'static str| {
        if live && o.opt(f).is_some() {
            o.num(f)
        } else {
            Ok(0.0)
        }
    };
    let spindles = if excl_stor {
        live_int("sptotal")?
    } else {
        ndparams.int("spindle_count")?
    };
    Ok(Node {
        t_mem: live_num("mtotal")?,
        n_mem: live_int("mnode")?,
        f_mem: live_int("mfree")?,
        t_dsk: live_num_opt("dtotal")?,
        f_dsk: live_int_opt("dfree")?,
        t_cpu: live_num("ctotal")?,
        nos_cpu: live_int("cnos")?,
        offline: !live || drained,
        master: false,
        group,
        spindles,
        free_spindles: live_int_opt("spfree")?,
        tags: o.strings("tags")?,
        excl_stor,
        cpu_speed: 1.0,
        name,
    })
}

fn parse_instance(
    map: &Map<String, Value>,
    nodes: &HashMap<String, usize>,
) -> Result<Instance, RapiError> {
    let (name, o) = Obj::named("instance", map)?;
    let beparams = o.sub("beparams")?;
    let mem = match o.opt("oper_ram") {
        Some(v) if v.is_number() => o.int("oper_ram")?,
        _ => beparams.int("memory").or_else(|_| beparams.int("maxmem"))?,
    };
    let lookup = |field: &'static str, n: &str| {
        nodes
            .get(n)
            .copied()
            .ok_or_else(|| o.bad(field, &format!("unknown node '{n}'")))
    };
    let pnode = lookup("pnode", o.str("pnode")?)?;
    let snodes = o.strings("snodes")?;
    let snode = match snodes.first() {
        Some(s) => Some(lookup("snodes", s)?),
        None => None,
    };
    let status_s = o.str("status")?;
    let status = InstanceStatus::parse(status_s)
        .ok_or_else(|| o.bad("status", &format!("unknown status '{status_s}'")))?;
    let dt = o.str("disk_template")?;
    let template = DiskTemplate::parse(dt)
        .ok_or_else(|| o.bad("disk_template", &format!("unknown disk template '{dt}'")))?;
    let spindles = match o.opt("disk.spindles").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .map(Value::as_i64)
            .try_fold(0i64, |acc, s| s.map(|s| acc + s)),
        None => None,
    };
    let forthcoming = match o.opt("forthcoming") {
        Some(v) => v.as_bool().unwrap_or(false),
        None => false,
    };
    Ok(Instance {
        mem,
        dsk: o.int("disk_usage")?,
        vcpus: beparams.int("vcpus")?,
        status,
        auto_balance: beparams.bool("auto_balance")?,
        pnode,
        snode,
        template,
        tags: o.strings("tags")?,
        spindle_use: beparams.int("spindle_use")?,
        spindles,
        forthcoming,
        name,
    })
}

/// Builds the cluster model from the four RAPI answers.
pub fn cluster_from_rapi(a: RapiAnswers<'_>) -> Result<Cluster, RapiError> {
    let info = parse_json("/2/info", a.info)?;
    let info_map = info.as_object().ok_or(RapiError::Shape {
        resource: "/2/info",
        expected: "a JSON object",
    })?;
    let info_o = Obj {
        owner: "/2/info".into(),
        map: info_map,
    };
    let master = info_o.str("master")?.to_owned();
    let cluster_tags = info_o.strings("tags")?;

    let groups = as_array("/2/groups", &parse_json("/2/groups", a.groups)?)?
        .iter()
        .map(parse_group)
        .collect::<Result<Vec<_>, _>>()?;
    let group_idx: HashMap<String, usize> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| (g.uuid.clone(), i))
        .collect();
    let mut nodes = as_array("/2/nodes", &parse_json("/2/nodes", a.nodes)?)?
        .iter()
        .map(|n| parse_node(n, &group_idx))
        .collect::<Result<Vec<_>, _>>()?;
    let node_idx: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let instances = as_array("/2/instances", &parse_json("/2/instances", a.instances)?)?
        .iter()
        .map(|i| parse_instance(i, &node_idx))
        .collect::<Result<Vec<_>, _>>()?;
    let m = *node_idx.get(&master).ok_or_else(|| RapiError::Field {
        owner: "/2/info".into(),
        field: "master",
        message: format!("Master node {master} unknown"),
    })?;
    nodes[m].master = true;
    Ok(Cluster {
        groups,
        nodes,
        instances,
        cluster_tags,
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
            info: "{\"master\":\"x\",\"tags\":[]}",
            groups: "{}",
            nodes: "[]",
            instances: "[]",
        })
        .unwrap_err();
        assert!(matches!(
            e,
            RapiError::Shape {
                resource: "/2/groups",
                ..
            }
        ));
        let e = cluster_from_rapi(RapiAnswers {
            info: "{\"master\":\"x\",\"tags\":[]}",
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
