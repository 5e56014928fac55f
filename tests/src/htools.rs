//! The simulated cluster as the balancing duty reads it (what RAPI would answer on a real
//! cluster, in htools' model).

use nodecare_coordinator::balance::{ClusterSource, SourceFuture};
use nodecare_ganeti_sim::Simulation;
use nodecare_roll::cluster::{
    Cluster, DiskTemplate, Group, Instance, InstanceStatus, Node as HNode,
};

/// The simulated cluster as htools sees it (what RAPI would answer on a real cluster): one node
/// group, 64 GiB nodes with 8 CPUs, 10 GiB disks.
#[derive(Debug, Clone)]
pub struct SimSource(pub Simulation);

impl ClusterSource for SimSource {
    fn cluster(&self) -> SourceFuture<'_> {
        let cluster = self.0.with_cluster(|c| {
            let order: Vec<String> = c.node_order.clone();
            let index = |name: &str| order.iter().position(|n| n == name);
            let mut out = Cluster {
                groups: vec![Group {
                    name: "default".into(),
                    uuid: "default-uuid".into(),
                    alloc_policy: "preferred".into(),
                    tags: Vec::new(),
                }],
                ..Cluster::default()
            };
            for name in &order {
                let n = &c.nodes[name];
                let used: u64 = c
                    .instances
                    .values()
                    .filter(|i| i.pnode == *name && i.running)
                    .map(|i| i.memory_mib)
                    .sum();
                out.nodes.push(HNode {
                    name: n.name.clone(),
                    t_mem: n.memory_total_mib as f64,
                    n_mem: 0,
                    f_mem: n.memory_total_mib.saturating_sub(used) as i64,
                    t_dsk: 1_048_576.0,
                    f_dsk: 1_048_576,
                    t_cpu: 8.0,
                    offline: n.offline,
                    master: false,
                    group: 0,
                    spindles: 1,
                    tags: n.tags.clone(),
                    excl_stor: false,
                    free_spindles: 0,
                    nos_cpu: 1,
                    cpu_speed: 1.0,
                });
            }
            for i in c.instances.values() {
                let (Some(pnode), Some(template)) =
                    (index(&i.pnode), DiskTemplate::parse(&i.disk_template))
                else {
                    continue;
                };
                out.instances.push(Instance {
                    name: i.name.clone(),
                    mem: i.memory_mib as i64,
                    dsk: 10_240,
                    vcpus: 1,
                    status: if i.running {
                        InstanceStatus::Running
                    } else {
                        InstanceStatus::AdminDown
                    },
                    auto_balance: true,
                    pnode,
                    snode: i.snodes.first().and_then(|s| index(s)),
                    template,
                    tags: i.tags.clone(),
                    spindle_use: 1,
                    spindles: None,
                    forthcoming: false,
                });
            }
            out
        });
        Box::pin(async move { Ok(cluster) })
    }
}
