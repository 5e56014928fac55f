//! Property tests of the planner on random clusters.

use std::collections::{HashMap, HashSet};

use nodecare_roll::cluster::{
    Cluster, DiskTemplate, Group, Instance, InstanceStatus, Node, Redundancy,
};
use nodecare_roll::htext;
use nodecare_roll::schedule::{FailureDomains, Mode, PlanError, RollOptions, plan, prepare};
use proptest::prelude::*;

const TEMPLATES: [DiskTemplate; 6] = [
    DiskTemplate::Drbd,
    DiskTemplate::Drbd,
    DiskTemplate::Plain,
    DiskTemplate::Rbd,
    DiskTemplate::File,
    DiskTemplate::Diskless,
];
const STATUSES: [InstanceStatus; 4] = [
    InstanceStatus::Running,
    InstanceStatus::Running,
    InstanceStatus::AdminDown,
    InstanceStatus::ErrorUp,
];

#[derive(Debug, Clone)]
struct RawInst {
    pnode: usize,
    snode_off: usize,
    template: usize,
    status: usize,
    mem: i64,
    dsk: i64,
}

fn cluster_strategy(all_running: bool) -> impl Strategy<Value = Cluster> {
    (1usize..=3, 2usize..=10)
        .prop_flat_map(move |(groups, nodes)| {
            let node = (
                0..groups,
                200i64..4000,
                1000i64..6000,
                0usize..6,
                any::<bool>(),
            );
            let inst = (
                0..nodes,
                1..nodes,
                0usize..TEMPLATES.len(),
                0usize..STATUSES.len(),
                64i64..1024,
                128i64..1500,
            )
                .prop_map(|(pnode, snode_off, template, status, mem, dsk)| RawInst {
                    pnode,
                    snode_off,
                    template,
                    status,
                    mem,
                    dsk,
                });
            (
                Just(groups),
                prop::collection::vec(node, nodes),
                prop::collection::vec(inst, 0..(3 * nodes)),
                0..nodes,
            )
        })
        .prop_map(move |(groups, nodes, insts, master)| {
            let mut c = Cluster::default();
            for g in 0..groups {
                c.groups.push(Group {
                    name: format!("g{g}"),
                    uuid: format!("u{g}"),
                    alloc_policy: "preferred".into(),
                    tags: vec![],
                });
            }
            for (i, (group, f_mem, f_dsk, rack, offline)) in nodes.iter().enumerate() {
                c.nodes.push(Node {
                    name: format!("node{i}"),
                    t_mem: 8192.0,
                    n_mem: 0,
                    f_mem: *f_mem,
                    t_dsk: 10000.0,
                    f_dsk: *f_dsk,
                    t_cpu: 8.0,
                    offline: *offline && !all_running && i % 3 == 0,
                    master: i == master,
                    group: *group,
                    spindles: 1,
                    tags: vec![format!("rack:r{}", rack % 3)],
                    excl_stor: false,
                    free_spindles: 0,
                    nos_cpu: 1,
                    cpu_speed: 1.0,
                });
            }
            c.nodes[master].offline = false;
            let n = c.nodes.len();
            for (k, r) in insts.into_iter().enumerate() {
                let mut template = TEMPLATES[r.template].clone();
                if all_running && !matches!(template, DiskTemplate::Drbd | DiskTemplate::Plain) {
                    template = DiskTemplate::Plain;
                }
                // A mirror stays inside the primary's node group.
                let snode = if template == DiskTemplate::Drbd {
                    let g = c.nodes[r.pnode].group;
                    let same: Vec<usize> = (0..n)
                        .filter(|&x| x != r.pnode && c.nodes[x].group == g)
                        .collect();
                    if same.is_empty() {
                        template = DiskTemplate::Plain;
                        None
                    } else {
                        Some(same[r.snode_off % same.len()])
                    }
                } else {
                    None
                };
                c.instances.push(Instance {
                    name: format!("inst{k}"),
                    mem: r.mem,
                    dsk: r.dsk,
                    vcpus: 1,
                    status: if all_running {
                        InstanceStatus::Running
                    } else {
                        STATUSES[r.status]
                    },
                    auto_balance: true,
                    pnode: r.pnode,
                    snode,
                    template,
                    tags: vec![],
                    spindle_use: 1,
                    spindles: None,
                    forthcoming: false,
                });
            }
            c
        })
}

fn options_strategy() -> impl Strategy<Value = RollOptions> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u8..3,
    )
        .prop_map(|(offline_maintenance, skip, ignore, full, domains)| {
            RollOptions {
                offline_maintenance,
                skip_non_redundant: skip,
                ignore_non_redundant: ignore,
                full_evacuation: full,
                failure_domains: match domains {
                    1 => Some(FailureDomains::NodeGroup),
                    2 => Some(FailureDomains::TagPrefix("rack:".into())),
                    _ => None,
                },
                ..RollOptions::default()
            }
            .with_default_budgets()
        })
}

fn moves_instance(c: &Cluster, inst: &Instance, ignore: bool) -> bool {
    let degraded = inst.snode.is_some_and(|s| c.nodes[s].offline);
    !inst.status.is_down()
        && match inst.template.redundancy() {
            Redundancy::Shared | Redundancy::Local => !ignore,
            Redundancy::Mirrored => degraded && !ignore,
        }
}

/// Checks every invariant of a successful plan.
fn check_plan(c: &Cluster, o: &RollOptions) -> Result<(), TestCaseError> {
    let Ok(prepared) = prepare(c, o) else {
        return Ok(());
    };
    let selected: Vec<usize> = prepared.selected().to_vec();
    let Ok(p) = prepared.solve() else {
        return Ok(());
    };
    // Every selected node exactly once, except the nodes the plan says it
    // skips (only with --skip-non-redundant, each with a warning).
    let mut seen = HashSet::new();
    for g in &p.groups {
        prop_assert!(!g.nodes.is_empty());
        for &n in &g.nodes {
            prop_assert!(seen.insert(n), "node {} twice", n);
        }
    }
    prop_assert!(p.skipped.is_empty() || o.skip_non_redundant);
    prop_assert_eq!(p.skipped.len(), p.warnings.len());
    for &n in &p.skipped {
        prop_assert!(selected.contains(&n), "skipped node {} was not selected", n);
    }
    let sel: HashSet<usize> = selected
        .iter()
        .copied()
        .filter(|n| !p.skipped.contains(n))
        .collect();
    prop_assert_eq!(&seen, &sel);
    // --ignore-non-redundant: instances without a usable DRBD secondary stay
    // where they are; only full evacuation moves (DRBD) instances at all.
    if o.ignore_non_redundant {
        for g in &p.groups {
            for m in &g.moves {
                let inst = &c.instances[m.instance];
                prop_assert!(
                    o.full_evacuation,
                    "{} moved without --full-evacuation",
                    inst.name
                );
                prop_assert_eq!(&inst.template, &DiskTemplate::Drbd, "{} moved", &inst.name);
            }
        }
    }
    // Independent sets of the reboot graph.
    let mut edges: HashSet<(usize, usize)> = HashSet::new();
    let mut per_secondary: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in &c.instances {
        if let (DiskTemplate::Drbd, Some(s)) = (&i.template, i.snode) {
            edges.insert((i.pnode, s));
            edges.insert((s, i.pnode));
            if !i.status.is_down() {
                per_secondary.entry(s).or_default().push(i.pnode);
            }
        }
    }
    if !o.offline_maintenance {
        for prims in per_secondary.values() {
            for &a in prims {
                for &b in prims {
                    edges.insert((a, b));
                }
            }
        }
    }
    let domain = |n: usize| -> String {
        match &o.failure_domains {
            None => String::new(),
            Some(FailureDomains::NodeGroup) => c.nodes[n].group.to_string(),
            Some(FailureDomains::TagPrefix(p)) => c.nodes[n]
                .tags
                .iter()
                .find(|t| t.starts_with(p.as_str()))
                .cloned()
                .unwrap_or_default(),
        }
    };
    for g in &p.groups {
        for &a in &g.nodes {
            prop_assert_eq!(domain(a), domain(g.nodes[0]));
            for &b in &g.nodes {
                prop_assert!(
                    a == b || !edges.contains(&(a, b)),
                    "{} and {} adjacent",
                    a,
                    b
                );
            }
        }
        // No mirrored instance loses both nodes at once.
        let members: HashSet<usize> = g.nodes.iter().copied().collect();
        for i in &c.instances {
            if let (DiskTemplate::Drbd, Some(s)) = (&i.template, i.snode) {
                prop_assert!(!(members.contains(&i.pnode) && members.contains(&s)));
            }
        }
        // Capacity after the moves, and nothing left behind.
        let mut layout: Vec<(usize, Option<usize>)> =
            c.instances.iter().map(|i| (i.pnode, i.snode)).collect();
        if o.full_evacuation {
            for (k, i) in c.instances.iter().enumerate() {
                if let (DiskTemplate::Drbd, Some(s)) = (&i.template, i.snode)
                    && members.contains(&i.pnode)
                    && !i.status.is_down()
                    && !c.nodes[s].offline
                {
                    layout[k] = (s, Some(i.pnode));
                }
            }
        }
        for m in &g.moves {
            let inst = &c.instances[m.instance];
            prop_assert!(!members.contains(&m.primary) || inst.template == DiskTemplate::Drbd);
            prop_assert!(m.primary == inst.pnode || !c.nodes[m.primary].offline);
            if let Some(s) = m.secondary {
                prop_assert!(s == inst.snode.unwrap_or(usize::MAX) || !c.nodes[s].offline);
            }
            prop_assert_eq!(c.nodes[m.primary].group, c.nodes[inst.pnode].group);
            layout[m.instance] = (m.primary, m.secondary.or(layout[m.instance].1));
        }
        let mut d_mem = vec![0i64; c.nodes.len()];
        let mut d_dsk = vec![0i64; c.nodes.len()];
        for (k, i) in c.instances.iter().enumerate() {
            let (p0, s0) = (i.pnode, i.snode);
            let (p1, s1) = layout[k];
            if i.status.uses_memory() {
                d_mem[p0] -= i.mem;
                d_mem[p1] += i.mem;
            }
            if i.template.uses_local_storage() {
                d_dsk[p0] -= i.dsk;
                d_dsk[p1] += i.dsk;
            }
            if i.template == DiskTemplate::Drbd {
                if let Some(s) = s0 {
                    d_dsk[s] -= i.dsk;
                }
                if let Some(s) = s1 {
                    d_dsk[s] += i.dsk;
                }
            }
            let degraded = i.snode.is_some_and(|s| c.nodes[s].offline);
            if members.contains(&p1) {
                let must_leave = moves_instance(c, i, o.ignore_non_redundant)
                    || (o.full_evacuation
                        && i.template == DiskTemplate::Drbd
                        && !i.status.is_down()
                        && !degraded);
                prop_assert!(!must_leave, "instance {} left on rebooting node {}", k, p1);
            }
            if o.full_evacuation
                && i.template == DiskTemplate::Drbd
                && !i.status.is_down()
                && !degraded
                && let Some(s) = s1
            {
                prop_assert!(!members.contains(&s), "secondary of {} left on {}", k, s);
            }
        }
        for (n, node) in c.nodes.iter().enumerate() {
            let base = node.t_mem.trunc() as i64 - node.n_mem;
            let used: i64 = c
                .instances
                .iter()
                .filter(|i| i.pnode == n && i.status.uses_memory())
                .map(|i| i.mem)
                .sum();
            let free = (base - used).min(node.f_mem);
            if d_mem[n] > 0 {
                prop_assert!(free - d_mem[n] > 0, "memory overcommitted on {}", n);
            }
            if d_dsk[n] > 0 {
                prop_assert!(node.f_dsk - d_dsk[n] > 0, "disk overcommitted on {}", n);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn plans_respect_graph_capacity_and_selection(c in cluster_strategy(false), o in options_strategy()) {
        check_plan(&c, &o)?;
    }

    /// With only running drbd/plain instances and nothing filtered, both
    /// modes see the same problem: nodecare never needs more groups.
    #[test]
    fn never_more_groups_than_htools(c in cluster_strategy(true), om in any::<bool>(), ignore in any::<bool>()) {
        let base = RollOptions {
            offline_maintenance: om,
            ignore_non_redundant: ignore,
            ..RollOptions::default()
        }
        .with_default_budgets();
        let compat = plan(&c, &RollOptions { mode: Mode::HrollerCompat, ..base.clone() });
        let ours = plan(&c, &base);
        if let Ok(h) = compat {
            let ours = ours.map_err(|e| TestCaseError::fail(format!("nodecare failed where htools did not: {e}")))?;
            prop_assert!(ours.groups.len() <= h.groups.len());
            if ours.groups.len() == h.groups.len() {
                prop_assert_eq!(ours.groups, h.groups);
            }
        }
    }

    /// `--ignore-non-redundant` without full evacuation: nothing moves, so
    /// nodecare's groups are colour classes of a subgraph of hroller's
    /// graph: never more of them than hroller's non-empty groups, on any
    /// cluster (stopped, shared-storage and degraded instances included).
    #[test]
    fn ignore_never_more_groups_than_htools(c in cluster_strategy(false), om in any::<bool>()) {
        let base = RollOptions {
            offline_maintenance: om,
            ignore_non_redundant: true,
            ..RollOptions::default()
        }
        .with_default_budgets();
        let compat = plan(&c, &RollOptions { mode: Mode::HrollerCompat, ..base.clone() });
        let ours = plan(&c, &base);
        if let Ok(h) = compat {
            let ours = ours.map_err(|e| TestCaseError::fail(format!("nodecare failed where htools did not: {e}")))?;
            let theirs = h.groups.iter().filter(|g| !g.nodes.is_empty()).count();
            prop_assert!(ours.groups.len() <= theirs, "{} groups against {}", ours.groups.len(), theirs);
            prop_assert!(ours.groups.iter().all(|g| g.moves.is_empty()));
        }
    }

    /// `--skip-non-redundant`: nodecare plans every node hroller plans
    /// (except a node whose running DRBD instance cannot migrate, which it
    /// names), in no more groups than hroller in total: the nodes hroller
    /// skips for stopped or shared-storage instances join those groups or
    /// are skipped, and named.
    #[test]
    fn skip_covers_htools_nodes_in_no_more_groups(c in cluster_strategy(false), om in any::<bool>()) {
        let base = RollOptions {
            offline_maintenance: om,
            skip_non_redundant: true,
            ..RollOptions::default()
        }
        .with_default_budgets();
        let compat = plan(&c, &RollOptions { mode: Mode::HrollerCompat, ..base.clone() });
        let Ok(h) = compat else { return Ok(()) };
        let theirs: HashSet<usize> = h.groups.iter().flat_map(|g| g.nodes.iter().copied()).collect();
        let named = |msgs: &[String], n: usize| {
            msgs.iter().any(|w| w.starts_with(&format!("node {} is skipped: ", c.nodes[n].name)))
        };
        let prepared = match prepare(&c, &base) {
            Ok(p) => p,
            // Every node hroller plans is skipped, and named.
            Err(PlanError::AllSkipped(msgs)) => {
                for &n in &theirs {
                    prop_assert!(named(&msgs, n), "node {} left out silently", n);
                }
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("nodecare failed where htools did not: {e}"))),
        };
        let ours = match prepared.solve() {
            Ok(p) => p,
            Err(PlanError::AllSkipped(msgs)) => {
                for &n in &theirs {
                    prop_assert!(named(&msgs, n), "node {} left out silently", n);
                }
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("nodecare failed where htools did not: {e}"))),
        };
        let mine: HashSet<usize> = ours.groups.iter().flat_map(|g| g.nodes.iter().copied()).collect();
        for &n in &theirs {
            prop_assert!(mine.contains(&n) || named(&prepared.warnings, n), "node {} left out silently", n);
        }
        for &n in prepared.selected() {
            prop_assert!(mine.contains(&n) || named(&ours.warnings, n), "node {} left out silently", n);
        }
        let their_count = h.groups.iter().filter(|g| !g.nodes.is_empty()).count();
        prop_assert!(ours.groups.len() <= their_count, "{} groups against {}", ours.groups.len(), their_count);
    }

    #[test]
    fn text_roundtrip(c in cluster_strategy(false)) {
        let text = htext::serialize(&c);
        let back = htext::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(back.nodes.len(), c.nodes.len());
        prop_assert_eq!(back.instances.len(), c.instances.len());
        for (a, b) in back.instances.iter().zip(&c.instances) {
            prop_assert_eq!((a.pnode, a.snode, &a.template, a.status), (b.pnode, b.snode, &b.template, b.status));
        }
        for (a, b) in back.nodes.iter().zip(&c.nodes) {
            prop_assert_eq!((a.f_mem, a.f_dsk, a.offline, a.group), (b.f_mem, b.f_dsk, b.offline, b.group));
        }
    }

    #[test]
    fn parser_never_panics(s in "[a-z0-9|,?\\n.-]{0,200}") {
        // Whatever parses must survive a serialise/parse round trip.
        if let Ok(c) = htext::parse(&s) {
            let again = htext::parse(&htext::serialize(&c));
            prop_assert!(again.is_ok(), "{:?}", again);
            if let Ok(a) = again {
                prop_assert_eq!(a.nodes.len(), c.nodes.len());
            }
        }
    }
}
