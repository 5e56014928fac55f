//! What a rolling maintenance campaign checks before it starts: a hook that upgrades packages
//! (`apt-upgrade-and-reboot`) upgrades qemu and Ganeti node after node, and the campaign
//! live-migrates instances between upgraded and not yet upgraded nodes.
//!
//! - **Unpinned `machine_version`.** A running KVM instance whose `machine_version` is set
//!   neither on the instance nor on the cluster's `kvm` hypervisor parameters gets the newest
//!   machine type of the qemu that started it; live-migrated to an older or newer qemu it may
//!   crash (Ganeti 3.1's upgrade notes). Overridden by
//!   [`UpgradeCheckOptions::allow_unpinned_machine_version`].
//! - **Mixed Ganeti versions.** Nodes known to run different Ganeti versions: an instance
//!   started by 3.1 shows `ERROR_down` to 3.0. Overridden by
//!   [`UpgradeCheckOptions::allow_mixed_versions`]. RAPI names the master's version (`/2/info`
//!   `software_version`) and a node's only where its answer carries one (Ganeti 3.0.2's and
//!   3.1's node answers do not): nodes whose version is not known count as neither.
//!
//! Clusters without the `kvm` hypervisor enabled are not checked for machine versions.
//! Pure: a function of the cluster as read and the options.

use std::collections::BTreeMap;
use std::fmt;

use crate::ganeti::{ClusterInfo, Instance, MachineVersion, Node};

/// Which findings the operator accepted (`--allow-unpinned-machine-version`,
/// `--allow-mixed-versions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpgradeCheckOptions {
    /// Start despite running KVM instances with an unpinned `machine_version`.
    pub allow_unpinned_machine_version: bool,
    /// Start despite nodes running different Ganeti versions.
    pub allow_mixed_versions: bool,
}

/// What the check found, refusing or overridden.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradeCheck {
    /// Running KVM instances without a pinned `machine_version`, sorted.
    pub unpinned: Vec<String>,
    /// The Ganeti versions known per node, when they differ (version → nodes, sorted);
    /// empty when every known version is the same.
    pub mixed_versions: BTreeMap<String, Vec<String>>,
    /// The options it was judged with.
    pub options: UpgradeCheckOptions,
}

impl UpgradeCheck {
    /// Whether a finding refuses the campaign (one not overridden).
    pub fn refuses(&self) -> bool {
        (!self.unpinned.is_empty() && !self.options.allow_unpinned_machine_version)
            || (!self.mixed_versions.is_empty() && !self.options.allow_mixed_versions)
    }

    /// The findings overridden, for the campaign's record and the jobs' reasons (e.g.
    /// `allowed unpinned machine_version: inst1, inst2`); empty when none was.
    pub fn overrides(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.unpinned.is_empty() && self.options.allow_unpinned_machine_version {
            out.push(format!(
                "allowed unpinned machine_version: {}",
                list(&self.unpinned)
            ));
        }
        if !self.mixed_versions.is_empty() && self.options.allow_mixed_versions {
            out.push(format!(
                "allowed mixed Ganeti versions: {}",
                versions(&self.mixed_versions)
            ));
        }
        out
    }
}

/// Names at most this many instances in a message, then how many more.
const NAMED: usize = 20;

fn list(names: &[String]) -> String {
    let mut text = names
        .iter()
        .take(NAMED)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMED {
        text.push_str(&format!(" and {} more", names.len() - NAMED));
    }
    text
}

fn versions(mixed: &BTreeMap<String, Vec<String>>) -> String {
    mixed
        .iter()
        .map(|(version, nodes)| format!("{version} on {}", list(nodes)))
        .collect::<Vec<_>>()
        .join("; ")
}

impl fmt::Display for UpgradeCheck {
    /// The refusal's message: each finding not overridden, with its flag.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.unpinned.is_empty() && !self.options.allow_unpinned_machine_version {
            parts.push(format!(
                "{} running KVM instance(s) without a pinned machine_version ({}): a live \
                 migration between qemu versions during a rolling upgrade may crash them; pin \
                 it (gnt-cluster modify -H kvm:machine_version=..., or gnt-instance modify -H \
                 machine_version=...), or start with --allow-unpinned-machine-version",
                self.unpinned.len(),
                list(&self.unpinned)
            ));
        }
        if !self.mixed_versions.is_empty() && !self.options.allow_mixed_versions {
            parts.push(format!(
                "the nodes run different Ganeti versions ({}): instances started by the newer \
                 one may show ERROR_down to the older; finish the upgrade first, or start with \
                 --allow-mixed-versions",
                versions(&self.mixed_versions)
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Checks the cluster as read: running KVM instances without a pinned `machine_version` (on
/// a cluster with `kvm` enabled), and nodes known to run different Ganeti versions (the
/// master's from `info`, the others' where their answer names one).
pub fn check(
    info: &ClusterInfo,
    nodes: &[Node],
    instances: &[Instance],
    options: UpgradeCheckOptions,
) -> UpgradeCheck {
    let kvm = info.enabled_hypervisors.iter().any(|h| h == "kvm");
    let cluster_pinned = info
        .kvm_machine_version
        .as_deref()
        .is_some_and(|v| !v.trim().is_empty());
    let mut unpinned: Vec<String> = if kvm && !cluster_pinned {
        instances
            .iter()
            .filter(|i| i.status == "running" && i.machine_version == MachineVersion::Unpinned)
            .map(|i| i.name.clone())
            .collect()
    } else {
        Vec::new()
    };
    unpinned.sort();
    let mut by_version: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in nodes.iter().filter(|n| !n.offline) {
        let version = if node.name == info.master {
            node.software_version
                .as_ref()
                .or(info.software_version.as_ref())
        } else {
            node.software_version.as_ref()
        };
        if let Some(version) = version {
            by_version
                .entry(version.clone())
                .or_default()
                .push(node.name.clone());
        }
    }
    for names in by_version.values_mut() {
        names.sort();
    }
    let mixed_versions = if by_version.len() > 1 {
        by_version
    } else {
        BTreeMap::new()
    };
    UpgradeCheck {
        unpinned,
        mixed_versions,
        options,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests_support::{instance, node};

    fn info(hypervisors: &[&str], kvm_machine_version: Option<&str>) -> ClusterInfo {
        ClusterInfo {
            name: "c".into(),
            master: "n1".into(),
            uuid: None,
            default_iallocator: None,
            software_version: Some("3.0.2".into()),
            enabled_hypervisors: hypervisors.iter().map(|h| (*h).to_owned()).collect(),
            kvm_machine_version: kvm_machine_version.map(str::to_owned),
        }
    }

    fn inst(name: &str, status: &str, machine_version: MachineVersion) -> Instance {
        let mut i = instance(name, "n1", 128);
        i.status = status.into();
        i.machine_version = machine_version;
        i
    }

    fn versioned(name: &str, version: Option<&str>) -> Node {
        let mut n = node(name);
        n.software_version = version.map(str::to_owned);
        n
    }

    const UNPINNED: MachineVersion = MachineVersion::Unpinned;

    /// Hypervisors, the cluster's machine_version, the instances, the unpinned found.
    type PinCase = (
        &'static [&'static str],
        Option<&'static str>,
        Vec<Instance>,
        Vec<&'static str>,
    );
    /// Nodes with their versions, the mixed versions found.
    type VersionCase = (Vec<Node>, Vec<(&'static str, Vec<&'static str>)>);

    #[test]
    fn unpinned_running_kvm_instances_are_found_where_kvm_is_enabled_and_not_pinned() {
        let pinned = MachineVersion::Pinned("pc-i440fx-7.2".into());
        // (hypervisors, cluster machine_version, instances, unpinned found)
        let cases: Vec<PinCase> = vec![
            (
                &["kvm"],
                None,
                vec![inst("a", "running", UNPINNED)],
                vec!["a"],
            ),
            (
                &["kvm"],
                Some(""),
                vec![inst("a", "running", UNPINNED)],
                vec!["a"],
            ),
            // Pinned on the cluster: every instance inherits it.
            (
                &["kvm"],
                Some("pc-q35-7.2"),
                vec![inst("a", "running", UNPINNED)],
                vec![],
            ),
            // Pinned on the instance.
            (
                &["kvm"],
                None,
                vec![inst("a", "running", pinned.clone())],
                vec![],
            ),
            // Not running: not migrated.
            (
                &["kvm"],
                None,
                vec![inst("a", "ADMIN_down", UNPINNED)],
                vec![],
            ),
            // Not KVM (fake, xen): not checked.
            (
                &["fake"],
                None,
                vec![inst("a", "running", UNPINNED)],
                vec![],
            ),
            (
                &["xen-pvm"],
                None,
                vec![inst("a", "running", UNPINNED)],
                vec![],
            ),
            (
                &["kvm", "xen-pvm"],
                None,
                vec![inst("x", "running", MachineVersion::NotKvm)],
                vec![],
            ),
            (
                &["kvm"],
                None,
                vec![
                    inst("c", "running", UNPINNED),
                    inst("b", "running", pinned),
                    inst("a", "running", UNPINNED),
                ],
                vec!["a", "c"],
            ),
        ];
        for (hypervisors, cluster, instances, want) in cases {
            let got = check(
                &info(hypervisors, cluster),
                &[node("n1")],
                &instances,
                UpgradeCheckOptions::default(),
            );
            assert_eq!(got.unpinned, want, "{hypervisors:?} {cluster:?}");
            assert_eq!(
                got.refuses(),
                !want.is_empty(),
                "{hypervisors:?} {cluster:?}"
            );
        }
    }

    #[test]
    fn mixed_versions_are_the_known_versions_that_differ() {
        // (nodes with their versions, mixed found)
        let cases: Vec<VersionCase> = vec![
            // The master's from /2/info, the others unknown: nothing mixed.
            (vec![versioned("n1", None), versioned("n2", None)], vec![]),
            (
                vec![versioned("n1", None), versioned("n2", Some("3.0.2"))],
                vec![],
            ),
            (
                vec![versioned("n1", None), versioned("n2", Some("3.1.0"))],
                vec![("3.0.2", vec!["n1"]), ("3.1.0", vec!["n2"])],
            ),
            // The master's own answer wins over /2/info.
            (
                vec![
                    versioned("n1", Some("3.1.0")),
                    versioned("n2", Some("3.1.0")),
                ],
                vec![],
            ),
            // Offline nodes are not counted.
            (
                vec![versioned("n1", None), {
                    let mut n = versioned("n3", Some("3.1.0"));
                    n.offline = true;
                    n
                }],
                vec![],
            ),
        ];
        for (nodes, want) in cases {
            let got = check(
                &info(&["fake"], None),
                &nodes,
                &[],
                UpgradeCheckOptions::default(),
            );
            let want: BTreeMap<String, Vec<String>> = want
                .into_iter()
                .map(|(v, ns)| (v.to_owned(), ns.into_iter().map(str::to_owned).collect()))
                .collect();
            assert_eq!(got.mixed_versions, want);
            assert_eq!(got.refuses(), !want.is_empty());
        }
    }

    #[test]
    fn overrides_let_it_start_and_are_named() {
        let nodes = [versioned("n1", None), versioned("n2", Some("3.1.0"))];
        let instances = [inst("a", "running", UNPINNED)];
        let cases = [
            (false, false, true, 0),
            (true, false, true, 1),
            (false, true, true, 1),
            (true, true, false, 2),
        ];
        for (unpinned, mixed, refuses, overrides) in cases {
            let options = UpgradeCheckOptions {
                allow_unpinned_machine_version: unpinned,
                allow_mixed_versions: mixed,
            };
            let got = check(&info(&["kvm"], None), &nodes, &instances, options);
            assert_eq!(got.refuses(), refuses, "{options:?}");
            assert_eq!(got.overrides().len(), overrides, "{options:?}");
            let message = got.to_string();
            assert_eq!(
                message.contains("--allow-unpinned-machine-version"),
                !unpinned,
                "{message}"
            );
            assert_eq!(
                message.contains("--allow-mixed-versions"),
                !mixed,
                "{message}"
            );
        }
        let check = check(
            &info(&["kvm"], None),
            &nodes,
            &instances,
            UpgradeCheckOptions::default(),
        );
        assert_eq!(
            check.to_string(),
            "1 running KVM instance(s) without a pinned machine_version (a): a live migration \
             between qemu versions during a rolling upgrade may crash them; pin it (gnt-cluster \
             modify -H kvm:machine_version=..., or gnt-instance modify -H machine_version=...), \
             or start with --allow-unpinned-machine-version; the nodes run different Ganeti \
             versions (3.0.2 on n1; 3.1.0 on n2): instances started by the newer one may show \
             ERROR_down to the older; finish the upgrade first, or start with \
             --allow-mixed-versions"
        );
    }

    #[test]
    fn long_lists_are_cut() {
        let instances: Vec<Instance> = (0..25)
            .map(|i| inst(&format!("i{i:02}"), "running", UNPINNED))
            .collect();
        let got = check(
            &info(&["kvm"], None),
            &[node("n1")],
            &instances,
            UpgradeCheckOptions::default(),
        );
        assert!(got.to_string().contains("i19 and 5 more"), "{got}");
    }
}
