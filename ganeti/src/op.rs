//! The Ganeti writes nodecare makes, as one type.
//!
//! Every write is an [`Op`]: submitted through [`crate::Ganeti::submit`] with a
//! [`crate::Reason`], written as its RAPI request once ([`crate::rapi::request::rapi_request`]),
//! described for people by [`Op::describe`]. Free of IO, always built.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::rapi::request::DEFAULT_IALLOCATOR;
use crate::{EvacuateMode, ReplaceDisksMode, TagTarget};

/// One Ganeti write; submitting it starts one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    /// Sets or clears a node's drained flag (`OP_NODE_SET_PARAMS`; a master candidate drained
    /// is replaced by another, `auto_promote`).
    SetNodeDrained {
        /// Node name.
        node: String,
        /// Drained (`true`) or not.
        drained: bool,
    },
    /// Sets or clears a node's offline flag (`OP_NODE_SET_PARAMS`; a master candidate set
    /// offline is replaced by another, `auto_promote`).
    SetNodeOffline {
        /// Node name.
        node: String,
        /// Offline (`true`) or online.
        offline: bool,
    },
    /// Shuts an instance down and marks it down (`OP_INSTANCE_SHUTDOWN`; the admin state is
    /// remembered, so the watcher does not start it again).
    ShutdownInstance {
        /// Instance name.
        instance: String,
    },
    /// Live-migrates an instance (`OP_INSTANCE_MIGRATE`), to `target` when given (shared
    /// storage) or to its DRBD secondary.
    MigrateInstance {
        /// Instance name.
        instance: String,
        /// Target node.
        target: Option<String>,
    },
    /// Fails an instance over (`OP_INSTANCE_FAILOVER`), to `target` when given.
    FailoverInstance {
        /// Instance name.
        instance: String,
        /// Target node.
        target: Option<String>,
    },
    /// Replaces an instance's disks (`OP_INSTANCE_REPLACE_DISKS`).
    ReplaceDisks {
        /// Instance name.
        instance: String,
        /// Which disks, and where to.
        mode: ReplaceDisksMode,
    },
    /// Evacuates a node (`OP_NODE_EVACUATE`); the job's result lists one child job per
    /// instance.
    EvacuateNode {
        /// Node name.
        node: String,
        /// Which instances.
        mode: EvacuateMode,
        /// The allocator choosing the targets (`hail` when `None`).
        iallocator: Option<String>,
    },
    /// Adds tags (`OP_TAGS_SET`); at least one.
    AddTags {
        /// What is tagged.
        target: TagTarget,
        /// The tags.
        tags: Vec<String>,
    },
    /// Removes tags (`OP_TAGS_DEL`); at least one.
    RemoveTags {
        /// What is untagged.
        target: TagTarget,
        /// The tags.
        tags: Vec<String>,
    },
    /// Recreates all of an instance's disks on nodes chosen by `iallocator`
    /// (`OP_INSTANCE_RECREATE_DISKS` with `disks = []`, `nodes = []`).
    RecreateInstanceDisks {
        /// Instance name.
        instance: String,
        /// The allocator.
        iallocator: String,
    },
    /// Reinstalls an instance with its current OS and parameters (`OP_INSTANCE_SHUTDOWN`,
    /// `OP_INSTANCE_REINSTALL`, and `OP_INSTANCE_STARTUP` when `start`).
    ReinstallInstance {
        /// Instance name.
        instance: String,
        /// Start it afterwards.
        start: bool,
    },
}

impl Op {
    /// Drains a node.
    pub fn drain(node: impl Into<String>) -> Self {
        Self::SetNodeDrained {
            node: node.into(),
            drained: true,
        }
    }

    /// Clears a node's drained flag.
    pub fn undrain(node: impl Into<String>) -> Self {
        Self::SetNodeDrained {
            node: node.into(),
            drained: false,
        }
    }

    /// Sets a node offline.
    pub fn offline(node: impl Into<String>) -> Self {
        Self::SetNodeOffline {
            node: node.into(),
            offline: true,
        }
    }

    /// Sets a node online.
    pub fn online(node: impl Into<String>) -> Self {
        Self::SetNodeOffline {
            node: node.into(),
            offline: false,
        }
    }

    /// Adds tags to a node.
    pub fn add_node_tags(node: impl Into<String>, tags: Vec<String>) -> Self {
        Self::AddTags {
            target: TagTarget::Node(node.into()),
            tags,
        }
    }

    /// Removes tags from a node.
    pub fn remove_node_tags(node: impl Into<String>, tags: Vec<String>) -> Self {
        Self::RemoveTags {
            target: TagTarget::Node(node.into()),
            tags,
        }
    }

    /// Whether its job carries the reason trail it is submitted with. RAPI's reinstall does
    /// not: Ganeti 3.0.2 builds that job (shutdown, reinstall, startup) without the `reason`
    /// parameter, so it cannot be found again in the job list by its reason.
    pub const fn carries_reason(&self) -> bool {
        !matches!(self, Self::ReinstallInstance { .. })
    }

    /// Whether `job` may be this operation's job, told by what its opcodes do: for an
    /// operation whose job carries no reason trail ([`Op::carries_reason`]), a reinstall's job
    /// has an `OP_INSTANCE_REINSTALL` opcode on its instance (whoever submitted it). Any other
    /// operation's job is told by its reason trail: `false`.
    pub fn may_be_job(&self, job: &crate::JobSummary) -> bool {
        match self {
            Self::ReinstallInstance { instance, .. } => job.ops.iter().any(|op| {
                op.op_id == "OP_INSTANCE_REINSTALL" && op.instance.as_deref() == Some(instance)
            }),
            _ => false,
        }
    }

    /// A short name of the operation, for logs and labels (`drain`, `migrate`, `add-tags`).
    pub const fn name(&self) -> &'static str {
        match self {
            Self::SetNodeDrained { drained: true, .. } => "drain",
            Self::SetNodeDrained { drained: false, .. } => "undrain",
            Self::SetNodeOffline { offline: true, .. } => "offline",
            Self::SetNodeOffline { offline: false, .. } => "online",
            Self::ShutdownInstance { .. } => "shutdown",
            Self::MigrateInstance { .. } => "migrate",
            Self::FailoverInstance { .. } => "failover",
            Self::ReplaceDisks { .. } => "replace-disks",
            Self::EvacuateNode { .. } => "evacuate",
            Self::AddTags { .. } => "add-tags",
            Self::RemoveTags { .. } => "remove-tags",
            Self::RecreateInstanceDisks { .. } => "recreate-disks",
            Self::ReinstallInstance { .. } => "reinstall",
        }
    }

    /// What the operation does, for people, in the words of the coordinator's steps
    /// (`drain node1`, `migrate inst1 to node2`, `set node1 offline`).
    pub fn describe(&self) -> String {
        let onto = |target: &Option<String>| match target {
            Some(target) => format!("to {target}"),
            None => "to its DRBD secondary (or where the allocator says)".to_owned(),
        };
        match self {
            Self::SetNodeDrained {
                node,
                drained: true,
            } => format!("drain {node}"),
            Self::SetNodeDrained {
                node,
                drained: false,
            } => format!("undrain {node}"),
            Self::SetNodeOffline {
                node,
                offline: true,
            } => format!("set {node} offline"),
            Self::SetNodeOffline {
                node,
                offline: false,
            } => format!("set {node} online"),
            Self::ShutdownInstance { instance } => format!("shut down {instance}"),
            Self::MigrateInstance { instance, target } => {
                format!("migrate {instance} {}", onto(target))
            }
            Self::FailoverInstance { instance, target } => {
                format!("fail {instance} over {}", onto(target))
            }
            Self::ReplaceDisks {
                instance,
                mode:
                    ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: Some(node),
                        ..
                    },
            } => format!("move the DRBD secondary of {instance} to {node}"),
            Self::ReplaceDisks {
                instance,
                mode:
                    ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: None,
                        iallocator,
                    },
            } => format!(
                "move the DRBD secondary of {instance} where {} says",
                iallocator.as_deref().unwrap_or(DEFAULT_IALLOCATOR)
            ),
            Self::ReplaceDisks { instance, mode } => {
                format!("replace the disks of {instance} ({})", mode.as_str())
            }
            Self::EvacuateNode {
                node,
                mode,
                iallocator,
            } => format!(
                "evacuate {node} ({}) where {} says",
                mode.as_str(),
                iallocator.as_deref().unwrap_or(DEFAULT_IALLOCATOR)
            ),
            Self::AddTags { target, tags } => format!("tag {target} {}", tags.join(" ")),
            Self::RemoveTags { target, tags } => format!("untag {target} {}", tags.join(" ")),
            Self::RecreateInstanceDisks {
                instance,
                iallocator,
            } => format!("recreate the disks of {instance} where {iallocator} says"),
            Self::ReinstallInstance {
                instance,
                start: true,
            } => format!("reinstall {instance} and start it"),
            Self::ReinstallInstance {
                instance,
                start: false,
            } => format!("reinstall {instance}"),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_read_like_the_coordinator_steps() {
        let cases = [
            (Op::drain("node1"), "drain node1"),
            (Op::undrain("node1"), "undrain node1"),
            (Op::offline("node1"), "set node1 offline"),
            (Op::online("node1"), "set node1 online"),
            (
                Op::ShutdownInstance {
                    instance: "inst1".into(),
                },
                "shut down inst1",
            ),
            (
                Op::MigrateInstance {
                    instance: "inst1".into(),
                    target: Some("node2".into()),
                },
                "migrate inst1 to node2",
            ),
            (
                Op::FailoverInstance {
                    instance: "inst1".into(),
                    target: None,
                },
                "fail inst1 over to its DRBD secondary (or where the allocator says)",
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceNewSecondary {
                        remote_node: Some("node3".into()),
                        iallocator: None,
                    },
                },
                "move the DRBD secondary of inst1 to node3",
            ),
            (
                Op::ReplaceDisks {
                    instance: "inst1".into(),
                    mode: ReplaceDisksMode::ReplaceAuto,
                },
                "replace the disks of inst1 (replace_auto)",
            ),
            (
                Op::EvacuateNode {
                    node: "node1".into(),
                    mode: EvacuateMode::SecondaryOnly,
                    iallocator: None,
                },
                "evacuate node1 (secondary-only) where hail says",
            ),
            (
                Op::add_node_tags("node1", vec!["a".into(), "b".into()]),
                "tag node node1 a b",
            ),
            (
                Op::RemoveTags {
                    target: TagTarget::Cluster,
                    tags: vec!["a".into()],
                },
                "untag the cluster a",
            ),
            (
                Op::RecreateInstanceDisks {
                    instance: "inst1".into(),
                    iallocator: "hail".into(),
                },
                "recreate the disks of inst1 where hail says",
            ),
            (
                Op::ReinstallInstance {
                    instance: "inst1".into(),
                    start: true,
                },
                "reinstall inst1 and start it",
            ),
        ];
        for (op, text) in cases {
            assert_eq!(op.describe(), text);
            assert_eq!(op.to_string(), text);
        }
    }

    #[test]
    fn ops_serialize_with_their_name() {
        let op = Op::MigrateInstance {
            instance: "inst1".into(),
            target: None,
        };
        let json = serde_json::to_value(&op).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({"op": "migrate-instance", "instance": "inst1", "target": null})
        );
        assert_eq!(serde_json::from_value::<Op>(json).ok(), Some(op));
    }
}
