//! Storage health for the gate: from the agents' signed DRBD reports and RAPI's view of the
//! instances, every reason the cluster's storage is not whole, as [`StorageProblem`]s. Pure, no
//! IO (the coordinator's `scrape` reads the reports).
//!
//! A problem is
//!
//! - a DRBD minor that is not `Connected` with both disks `UpToDate` (`StandAlone`,
//!   `WFConnection`, `Diskless`, `Outdated`, `Inconsistent`, resyncing with its percentage):
//!   it involves both nodes of its instance (from RAPI), or only the reporting node when the
//!   instance is not known;
//! - a DRBD node whose module is not loaded while running DRBD instances use it there;
//! - an instance with its primary or a secondary on a drained or offline node: it involves that
//!   node;
//! - a node holding DRBD instances whose report is missing, unverifiable, stale or unreadable:
//!   storage health is unknown there (`unknown: true`), and the gate fails closed.
//!
//! Nodes that hold no DRBD instance never produce a problem and need not be read.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use nodecare_protocol::{DrbdState, StoragePayload};

use crate::ganeti::{DiskTemplate, Instance, Node};
use crate::gate::StorageProblem;

/// A verified storage report.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageObservation {
    /// The signed payload.
    pub payload: StoragePayload,
    /// Envelope sequence number.
    pub sequence: u64,
    /// When the signed report expires, Unix ms.
    pub expires_at_ms: u64,
}

/// Why a node's storage report is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// No answer (connect error, timeout, HTTP error such as the agent's 503).
    Unreachable(String),
    /// An answer that does not verify, or whose payload is not a storage payload.
    Unverifiable(String),
    /// Authentic but not current (expired, or the same report read again past its expiry).
    Stale(String),
}

impl Missing {
    /// The short form used in a problem's `what`: `unreachable`, `unverifiable report`, `stale
    /// report`.
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Unreachable(_) => "unreachable",
            Self::Unverifiable(_) => "unverifiable report",
            Self::Stale(_) => "stale report",
        }
    }

    /// The details.
    pub fn detail(&self) -> &str {
        match self {
            Self::Unreachable(detail) | Self::Unverifiable(detail) | Self::Stale(detail) => detail,
        }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.label(), self.detail())
    }
}

/// What reading one node's storage report gave.
#[derive(Debug, Clone, PartialEq)]
pub enum StorageReading {
    /// A verified, fresh report.
    Verified(StorageObservation),
    /// No usable report, and why.
    Missing(Missing),
}

/// Whether an instance uses DRBD.
fn is_drbd(instance: &Instance) -> bool {
    instance.disk_template == DiskTemplate::Drbd
}

/// The nodes of a DRBD instance: its primary, then its secondaries.
fn instance_nodes(instance: &Instance) -> impl Iterator<Item = &String> {
    std::iter::once(&instance.primary_node).chain(&instance.secondary_nodes)
}

/// The nodes whose storage report must be read: every node in `nodes`, not offline, that is the
/// primary or a secondary of a DRBD instance (sorted by name). Offline nodes cannot answer; an
/// instance on one is a problem by itself.
pub fn drbd_nodes(nodes: &[Node], instances: &[Instance]) -> BTreeSet<String> {
    let online: BTreeSet<&str> = nodes
        .iter()
        .filter(|node| !node.offline)
        .map(|node| node.name.as_str())
        .collect();
    // Named by reference first: a node holds many instances, its name is copied once.
    let found: BTreeSet<&str> = instances
        .iter()
        .filter(|instance| is_drbd(instance))
        .flat_map(instance_nodes)
        .map(String::as_str)
        .filter(|name| online.contains(name))
        .collect();
    found.into_iter().map(str::to_owned).collect()
}

fn problem(nodes: impl IntoIterator<Item = String>, what: String, unknown: bool) -> StorageProblem {
    StorageProblem {
        nodes: nodes.into_iter().collect(),
        what,
        unknown,
        drained: false,
    }
}

/// Every storage problem of the cluster (see the module documentation), in a stable order:
/// instances on drained or offline nodes by instance, then per node (by name) its unknown
/// health or its degraded minors.
///
/// `readings` holds the storage reading of each node of [`drbd_nodes`] (a node without one is
/// `unknown`, never assumed whole); a verified report collected more than `max_age_ms` before
/// `now_ms` counts as stale.
pub fn storage_problems(
    nodes: &[Node],
    instances: &[Instance],
    readings: &BTreeMap<String, StorageReading>,
    now_ms: u64,
    max_age_ms: u64,
) -> Vec<StorageProblem> {
    let by_name: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let drbd: Vec<&Instance> = instances.iter().filter(|i| is_drbd(i)).collect();
    let instance_by_name: BTreeMap<&str, &Instance> =
        drbd.iter().map(|i| (i.name.as_str(), *i)).collect();
    let mut problems = Vec::new();

    // Instances with a node out of service (or unknown to the cluster).
    let mut sorted = drbd.clone();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for instance in &sorted {
        for (index, name) in instance_nodes(instance).enumerate() {
            let role = if index == 0 { "primary" } else { "secondary" };
            match by_name.get(name.as_str()) {
                None => problems.push(problem(
                    [name.clone()],
                    format!("{}: {role} {name} is not in the cluster", instance.name),
                    true,
                )),
                Some(node) if node.offline || node.drained => {
                    let flag = if node.offline { "offline" } else { "drained" };
                    problems.push(StorageProblem {
                        drained: !node.offline,
                        ..problem(
                            [name.clone()],
                            format!("{}: {role} {name} is {flag}", instance.name),
                            false,
                        )
                    });
                }
                Some(_) => {}
            }
        }
    }

    // Each node holding DRBD instances: its report.
    for name in drbd_nodes(nodes, instances) {
        let observation = match readings.get(&name) {
            None => {
                problems.push(problem([name.clone()], format!("{name} (not read)"), true));
                continue;
            }
            Some(StorageReading::Missing(missing)) => {
                problems.push(problem(
                    [name.clone()],
                    format!("{name} ({})", missing.label()),
                    true,
                ));
                continue;
            }
            Some(StorageReading::Verified(observation)) => observation,
        };
        let payload = &observation.payload;
        if payload.collected_at_ms.saturating_add(max_age_ms) < now_ms {
            problems.push(problem(
                [name.clone()],
                format!(
                    "{name} (stale report: read {} s ago)",
                    now_ms.saturating_sub(payload.collected_at_ms) / 1000
                ),
                true,
            ));
            continue;
        }
        match &payload.drbd {
            DrbdState::Unreadable { reason } => problems.push(problem(
                [name.clone()],
                format!("{name} (DRBD state unreadable: {reason})"),
                true,
            )),
            DrbdState::NotInstalled {} => {
                let running: Vec<&Instance> = drbd
                    .iter()
                    .copied()
                    .filter(|i| i.admin_state == "up" && instance_nodes(i).any(|n| *n == name))
                    .collect();
                if !running.is_empty() {
                    let mut involved: BTreeSet<String> = BTreeSet::from([name.clone()]);
                    involved.extend(running.iter().flat_map(|i| instance_nodes(i).cloned()));
                    let names: Vec<&str> = running.iter().map(|i| i.name.as_str()).collect();
                    problems.push(problem(
                        involved,
                        format!(
                            "{name}: DRBD is not loaded, but {} use(s) it there",
                            names.join(", ")
                        ),
                        false,
                    ));
                }
            }
            DrbdState::Minors { minors } => {
                for minor in minors {
                    if minor.is_unconfigured() || minor.is_whole() {
                        continue;
                    }
                    let known = minor
                        .instance
                        .as_deref()
                        .and_then(|instance| instance_by_name.get(instance));
                    let mut involved: BTreeSet<String> = BTreeSet::from([name.clone()]);
                    if let Some(instance) = known {
                        involved.extend(instance_nodes(instance).cloned());
                    }
                    let owner = minor
                        .instance
                        .as_deref()
                        .map_or_else(|| "unknown instance".to_owned(), str::to_owned);
                    problems.push(problem(
                        involved,
                        format!(
                            "{owner}: minor {} on {name} {}",
                            minor.minor,
                            minor.describe()
                        ),
                        false,
                    ));
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::DrbdMinor;
    use proptest::prelude::*;

    const NOW: u64 = 1_800_000_000_000;
    const MAX_AGE: u64 = 60_000;

    fn node(name: &str) -> Node {
        crate::plan::tests_support::node(name)
    }

    fn instance(name: &str, template: DiskTemplate, primary: &str, secondary: &[&str]) -> Instance {
        Instance {
            name: name.into(),
            uuid: format!("uuid-{name}"),
            disk_template: template,
            primary_node: primary.into(),
            secondary_nodes: secondary.iter().map(|s| (*s).to_owned()).collect(),
            admin_state: "up".into(),
            status: "running".into(),
            memory: Some(1024),
            tags: Vec::new(),
            disk_sizes: vec![10_240],
            machine_version: nodecare_ganeti::MachineVersion::NotKvm,
        }
    }

    fn minor(number: u64, instance: Option<&str>, state: (&str, &str, &str)) -> DrbdMinor {
        DrbdMinor {
            minor: number,
            instance: instance.map(str::to_owned),
            connection: state.0.into(),
            local_disk: state.1.into(),
            peer_disk: state.2.into(),
            role: "Primary".into(),
            peer_role: "Secondary".into(),
            sync_percent: state.0.starts_with("Sync").then_some(45.2),
            out_of_sync_kib: Some(0),
        }
    }

    const WHOLE: (&str, &str, &str) = ("Connected", "UpToDate", "UpToDate");

    fn verified(drbd: DrbdState) -> StorageReading {
        StorageReading::Verified(StorageObservation {
            payload: StoragePayload {
                drbd,
                collected_at_ms: NOW - 1_000,
                interval_ms: 10_000,
            },
            sequence: 1,
            expires_at_ms: NOW + 30_000,
        })
    }

    fn minors(list: Vec<DrbdMinor>) -> StorageReading {
        verified(DrbdState::Minors { minors: list })
    }

    /// node1..node4; inst1 drbd node1→node2, inst2 drbd node2→node3, inst3 plain on node4.
    fn cluster() -> (Vec<Node>, Vec<Instance>) {
        let nodes = ["node1", "node2", "node3", "node4"].map(node).to_vec();
        let instances = vec![
            instance("inst1", DiskTemplate::Drbd, "node1", &["node2"]),
            instance("inst2", DiskTemplate::Drbd, "node2", &["node3"]),
            instance("inst3", DiskTemplate::Plain, "node4", &[]),
        ];
        (nodes, instances)
    }

    fn whole_readings() -> BTreeMap<String, StorageReading> {
        BTreeMap::from([
            ("node1".into(), minors(vec![minor(0, Some("inst1"), WHOLE)])),
            (
                "node2".into(),
                minors(vec![
                    minor(0, Some("inst1"), WHOLE),
                    minor(1, Some("inst2"), WHOLE),
                    DrbdMinor::unconfigured(2),
                ]),
            ),
            ("node3".into(), minors(vec![minor(1, Some("inst2"), WHOLE)])),
        ])
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn summary(problems: &[StorageProblem]) -> Vec<(BTreeSet<String>, String, bool)> {
        problems
            .iter()
            .map(|p| (p.nodes.clone(), p.what.clone(), p.unknown))
            .collect()
    }

    #[test]
    fn only_nodes_with_drbd_instances_are_read() {
        let (mut nodes, instances) = cluster();
        assert_eq!(
            drbd_nodes(&nodes, &instances),
            set(&["node1", "node2", "node3"])
        );
        nodes[2].offline = true;
        assert_eq!(drbd_nodes(&nodes, &instances), set(&["node1", "node2"]));
        assert!(drbd_nodes(&nodes, &[]).is_empty());
    }

    #[test]
    fn a_whole_cluster_has_no_problems() {
        let (nodes, instances) = cluster();
        assert_eq!(
            storage_problems(&nodes, &instances, &whole_readings(), NOW, MAX_AGE),
            Vec::new()
        );
        // A cluster without DRBD needs no reading at all.
        let plain = vec![instance("inst3", DiskTemplate::Plain, "node4", &[])];
        assert_eq!(
            storage_problems(&nodes, &plain, &BTreeMap::new(), NOW, MAX_AGE),
            Vec::new()
        );
    }

    #[test]
    fn degraded_minors_involve_both_nodes_of_their_instance() {
        let (nodes, instances) = cluster();
        let cases: Vec<((&str, &str, &str), &str)> = vec![
            (
                ("StandAlone", "UpToDate", "DUnknown"),
                "inst1: minor 0 on node1 StandAlone, disks UpToDate/DUnknown",
            ),
            (
                ("WFConnection", "UpToDate", "DUnknown"),
                "inst1: minor 0 on node1 WFConnection, disks UpToDate/DUnknown",
            ),
            (
                ("Connected", "Diskless", "UpToDate"),
                "inst1: minor 0 on node1 Connected, disks Diskless/UpToDate",
            ),
            (
                ("Connected", "UpToDate", "Outdated"),
                "inst1: minor 0 on node1 Connected, disks UpToDate/Outdated",
            ),
            (
                ("Connected", "Inconsistent", "UpToDate"),
                "inst1: minor 0 on node1 Connected, disks Inconsistent/UpToDate",
            ),
            (
                ("SyncSource", "UpToDate", "Inconsistent"),
                "inst1: minor 0 on node1 SyncSource 45.2%, disks UpToDate/Inconsistent",
            ),
            (
                ("SyncTarget", "Inconsistent", "UpToDate"),
                "inst1: minor 0 on node1 SyncTarget 45.2%, disks Inconsistent/UpToDate",
            ),
        ];
        for (state, what) in cases {
            let mut readings = whole_readings();
            readings.insert("node1".into(), minors(vec![minor(0, Some("inst1"), state)]));
            assert_eq!(
                summary(&storage_problems(
                    &nodes, &instances, &readings, NOW, MAX_AGE
                )),
                vec![(set(&["node1", "node2"]), what.to_owned(), false)],
                "{state:?}"
            );
        }
        // A minor whose instance the agent does not know involves only its node.
        let mut readings = whole_readings();
        readings.insert(
            "node3".into(),
            minors(vec![minor(7, None, ("StandAlone", "UpToDate", "DUnknown"))]),
        );
        assert_eq!(
            summary(&storage_problems(
                &nodes, &instances, &readings, NOW, MAX_AGE
            )),
            vec![(
                set(&["node3"]),
                "unknown instance: minor 7 on node3 StandAlone, disks UpToDate/DUnknown".into(),
                false
            )]
        );
    }

    #[test]
    fn instances_on_drained_or_offline_nodes_are_problems() {
        let (mut nodes, instances) = cluster();
        nodes[2].offline = true;
        nodes[0].drained = true;
        let mut readings = whole_readings();
        readings.remove("node3");
        assert_eq!(
            summary(&storage_problems(
                &nodes, &instances, &readings, NOW, MAX_AGE
            )),
            vec![
                (
                    set(&["node1"]),
                    "inst1: primary node1 is drained".into(),
                    false
                ),
                (
                    set(&["node3"]),
                    "inst2: secondary node3 is offline".into(),
                    false
                ),
            ]
        );
        // An instance on a node the cluster does not list: unknown.
        let ghost = vec![instance("inst9", DiskTemplate::Drbd, "node1", &["node9"])];
        let (nodes, _) = cluster();
        assert_eq!(
            summary(&storage_problems(
                &nodes,
                &ghost,
                &whole_readings(),
                NOW,
                MAX_AGE
            )),
            vec![(
                set(&["node9"]),
                "inst9: secondary node9 is not in the cluster".into(),
                true
            )]
        );
    }

    #[test]
    fn missing_or_old_reports_make_health_unknown() {
        let (nodes, instances) = cluster();
        let cases: Vec<(Option<StorageReading>, &str)> = vec![
            (None, "node2 (not read)"),
            (
                Some(StorageReading::Missing(Missing::Unreachable(
                    "connection refused".into(),
                ))),
                "node2 (unreachable)",
            ),
            (
                Some(StorageReading::Missing(Missing::Unverifiable(
                    "signature mismatch".into(),
                ))),
                "node2 (unverifiable report)",
            ),
            (
                Some(StorageReading::Missing(Missing::Stale("expired".into()))),
                "node2 (stale report)",
            ),
            (
                Some(verified(DrbdState::Unreadable {
                    reason: "drbdsetup timed out".into(),
                })),
                "node2 (DRBD state unreadable: drbdsetup timed out)",
            ),
            (
                Some(StorageReading::Verified(StorageObservation {
                    payload: StoragePayload {
                        drbd: DrbdState::Minors { minors: Vec::new() },
                        collected_at_ms: NOW - MAX_AGE - 5_000,
                        interval_ms: 10_000,
                    },
                    sequence: 1,
                    expires_at_ms: NOW + 1,
                })),
                "node2 (stale report: read 65 s ago)",
            ),
        ];
        for (reading, what) in cases {
            let mut readings = whole_readings();
            match reading {
                Some(reading) => readings.insert("node2".into(), reading),
                None => readings.remove("node2"),
            };
            assert_eq!(
                summary(&storage_problems(
                    &nodes, &instances, &readings, NOW, MAX_AGE
                )),
                vec![(set(&["node2"]), what.to_owned(), true)],
            );
        }
        // A node without DRBD instances is never judged, whatever it reports.
        let mut readings = whole_readings();
        readings.insert(
            "node4".into(),
            StorageReading::Missing(Missing::Unreachable("down".into())),
        );
        assert!(storage_problems(&nodes, &instances, &readings, NOW, MAX_AGE).is_empty());
    }

    #[test]
    fn drbd_not_loaded_matters_only_for_running_instances() {
        let (nodes, mut instances) = cluster();
        let mut readings = whole_readings();
        readings.insert("node1".into(), verified(DrbdState::NotInstalled {}));
        assert_eq!(
            summary(&storage_problems(
                &nodes, &instances, &readings, NOW, MAX_AGE
            )),
            vec![(
                set(&["node1", "node2"]),
                "node1: DRBD is not loaded, but inst1 use(s) it there".into(),
                false
            )]
        );
        instances[0].admin_state = "down".into();
        assert!(storage_problems(&nodes, &instances, &readings, NOW, MAX_AGE).is_empty());
    }

    /// What the gate makes of it: a node's unreachable storage report holds a new failure
    /// domain with the words; once whole, the same proposal is admitted.
    #[test]
    fn the_gate_fails_closed_on_unknown_storage() {
        use crate::gate::{self, Duty, Holder, InForce, NodeFacts, Policy, Proposal, View};
        let (nodes, instances) = cluster();
        let mut readings = whole_readings();
        readings.insert(
            "node2".into(),
            StorageReading::Missing(Missing::Unreachable("connection refused".into())),
        );
        let view = |storage| View {
            nodes: nodes
                .iter()
                .map(|n| {
                    (
                        n.name.clone(),
                        NodeFacts {
                            name: n.name.clone(),
                            group: "g".into(),
                            domain: format!("rack:{}", n.name),
                            vm_capable: true,
                            drained: false,
                            offline: false,
                            master: false,
                            memory_free: Some(100_000),
                            primary_memory: Some(0),
                            primaries: 0,
                        },
                    )
                })
                .collect(),
            storage,
            now_ms: NOW,
        };
        let proposal = Proposal {
            duty: Duty::NodeRepair,
            holder: Holder::Incident {
                id: uuid::Uuid::from_u128(1),
            },
            subject: "node node4".into(),
            invasiveness: 2,
            since_ms: NOW,
            disrupts: set(&["node4"]),
            touches: BTreeSet::new(),
            fresh: false,
            moves_memory: Some(0),
            after_releases: BTreeMap::new(),
            reason: "evacuate".into(),
        };
        let policy = Policy {
            cluster: gate::Caps {
                max_disrupted_nodes: 1,
                max_disrupted_percent: None,
                min_healthy_nodes: 1,
            },
            ..Policy::default()
        };
        let unknown = view(storage_problems(
            &nodes, &instances, &readings, NOW, MAX_AGE,
        ));
        let decision = gate::decide(
            &unknown,
            &policy,
            &InForce::new(&unknown, []),
            vec![proposal.clone()],
        );
        let refused: Vec<String> = decision.refused().map(|(_, b)| b.to_string()).collect();
        assert_eq!(refused, ["storage health unknown: node2 (unreachable)"]);
        let whole = view(storage_problems(
            &nodes,
            &instances,
            &whole_readings(),
            NOW,
            MAX_AGE,
        ));
        let decision = gate::decide(&whole, &policy, &InForce::new(&whole, []), vec![proposal]);
        assert_eq!(decision.admitted().count(), 1);
    }

    const STATES: &[(&str, &str, &str)] = &[
        WHOLE,
        WHOLE,
        WHOLE,
        ("StandAlone", "UpToDate", "DUnknown"),
        ("WFConnection", "UpToDate", "DUnknown"),
        ("SyncTarget", "Inconsistent", "UpToDate"),
        ("Connected", "UpToDate", "Outdated"),
        ("Unconfigured", "Unconfigured", "Unconfigured"),
    ];

    prop_compose! {
        fn arb_cluster()(
            flags in prop::collection::vec((any::<bool>(), any::<bool>(), 0..6u8), 2..7),
            pairs in prop::collection::vec((0..7usize, 0..7usize, any::<bool>(), any::<bool>()), 0..8),
            minor_states in prop::collection::vec((0..STATES.len(), 0..9usize), 0..12),
        ) -> (Vec<Node>, Vec<Instance>, BTreeMap<String, StorageReading>) {
            let count = flags.len();
            let nodes: Vec<Node> = flags.iter().enumerate().map(|(i, (drained, offline, _))| {
                let mut n = node(&format!("node{i}"));
                // Mostly healthy.
                n.drained = *drained && i % 3 == 0;
                n.offline = *offline && i % 4 == 1;
                n
            }).collect();
            let instances: Vec<Instance> = pairs.iter().enumerate().map(|(i, (p, s, drbd, up))| {
                let primary = format!("node{}", p % count);
                let secondary = format!("node{}", (p + 1 + s % (count - 1)) % count);
                let mut inst = if *drbd {
                    instance(&format!("inst{i}"), DiskTemplate::Drbd, &primary, &[&secondary])
                } else {
                    instance(&format!("inst{i}"), DiskTemplate::Plain, &primary, &[])
                };
                if !up { inst.admin_state = "down".into(); }
                inst
            }).collect();
            let mut readings = BTreeMap::new();
            for (i, (_, _, kind)) in flags.iter().enumerate() {
                let name = format!("node{i}");
                let reading = match kind {
                    0 => continue,
                    1 => StorageReading::Missing(Missing::Unreachable("x".into())),
                    2 => verified(DrbdState::NotInstalled {}),
                    _ => {
                        let list = minor_states
                            .iter()
                            .enumerate()
                            .filter(|(m, _)| m % count == i)
                            .map(|(m, (state, inst))| {
                                let owner = (*inst < instances.len()).then(|| format!("inst{inst}"));
                                minor(m as u64, owner.as_deref(), STATES[*state])
                            })
                            .collect();
                        minors(list)
                    }
                };
                readings.insert(name, reading);
            }
            (nodes, instances, readings)
        }
    }

    proptest! {
        #[test]
        fn problems_only_on_drbd_nodes_and_unknown_fails_closed(
            (nodes, instances, readings) in arb_cluster()
        ) {
            let problems = storage_problems(&nodes, &instances, &readings, NOW, MAX_AGE);
            let holders: BTreeSet<&String> = instances
                .iter()
                .filter(|i| i.disk_template == DiskTemplate::Drbd)
                .flat_map(instance_nodes)
                .collect();
            for p in &problems {
                prop_assert!(!p.nodes.is_empty(), "{p:?}");
                prop_assert!(!p.what.is_empty());
                // Nodes without DRBD instances never take part.
                for n in &p.nodes {
                    prop_assert!(holders.contains(n), "{n} in {p:?}");
                }
            }
            // Every DRBD node without a verified report is unknown, by name.
            for name in drbd_nodes(&nodes, &instances) {
                if !matches!(readings.get(&name), Some(StorageReading::Verified(_))) {
                    prop_assert!(
                        problems.iter().any(|p| p.unknown && p.nodes.contains(&name)),
                        "{name}: {problems:?}"
                    );
                }
            }
            // Every drained or offline node holding a DRBD instance is named.
            for n in nodes.iter().filter(|n| n.drained || n.offline) {
                if holders.contains(&n.name) {
                    prop_assert!(problems.iter().any(|p| !p.unknown && p.nodes.contains(&n.name)));
                }
            }
            // No problems: every DRBD node is in service, read and whole.
            if problems.is_empty() {
                for name in drbd_nodes(&nodes, &instances) {
                    let Some(StorageReading::Verified(o)) = readings.get(&name) else {
                        return Err(TestCaseError::fail(format!("{name} unread")));
                    };
                    if let DrbdState::Minors { minors } = &o.payload.drbd {
                        prop_assert!(minors.iter().all(|m| m.is_whole() || m.is_unconfigured()));
                    }
                }
                prop_assert!(nodes.iter().all(|n| !holders.contains(&n.name) || n.is_healthy()));
            }
            // Deterministic.
            prop_assert_eq!(problems, storage_problems(&nodes, &instances, &readings, NOW, MAX_AGE));
        }
    }
}
