//! The Ganeti writes nodecare makes, as one type.
//!
//! Every write is an [`Op`]: submitted through [`crate::Ganeti::submit`] with a
//! [`crate::Reason`], written as its RAPI request once ([`crate::rapi::request::rapi_request`]),
//! described for people by [`Op::describe`]. Free of IO, always built.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{EvacuateMode, ReplaceDisksMode, TagTarget};

/// One Ganeti write; submitting it starts one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Op {
    /// Sets or clears a node's drained flag (`OP_NODE_SET_PARAMS`).
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

    /// Ganeti's short name of the operation (as in `gnt-job list`'s summaries, lower case).
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

    /// What the operation does, one sentence for people.
    pub fn describe(&self) -> String {
        match self {
            Self::SetNodeDrained {
                node,
                drained: true,
            } => format!("Draining node {node}"),
            Self::SetNodeDrained {
                node,
                drained: false,
            } => format!("Undraining node {node}"),
            Self::SetNodeOffline {
                node,
                offline: true,
            } => format!("Setting node {node} offline"),
            Self::SetNodeOffline {
                node,
                offline: false,
            } => format!("Setting node {node} online"),
            Self::ShutdownInstance { instance } => format!("Shutting down instance {instance}"),
            Self::MigrateInstance { instance, target } => match target {
                Some(target) => format!("Migrating instance {instance} to {target}"),
                None => format!("Migrating instance {instance} to its secondary"),
            },
            Self::FailoverInstance { instance, target } => match target {
                Some(target) => format!("Failing over instance {instance} to {target}"),
                None => format!("Failing over instance {instance} to its secondary"),
            },
            Self::ReplaceDisks { instance, mode } => match mode {
                ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: Some(node),
                    ..
                } => format!("Moving the secondary of instance {instance} to {node}"),
                ReplaceDisksMode::ReplaceNewSecondary {
                    remote_node: None,
                    iallocator,
                } => format!(
                    "Moving the secondary of instance {instance} where {} says",
                    iallocator.as_deref().unwrap_or("the allocator")
                ),
                other => format!(
                    "Replacing the disks of instance {instance} ({})",
                    other.as_str()
                ),
            },
            Self::EvacuateNode {
                node,
                mode,
                iallocator,
            } => format!(
                "Evacuating node {node} ({}, targets from {})",
                mode.as_str(),
                iallocator.as_deref().unwrap_or("hail")
            ),
            Self::AddTags { target, tags } => {
                format!("Adding tags {} to {target}", tags.join(", "))
            }
            Self::RemoveTags { target, tags } => {
                format!("Removing tags {} from {target}", tags.join(", "))
            }
            Self::RecreateInstanceDisks {
                instance,
                iallocator,
            } => format!("Recreating the disks of instance {instance} where {iallocator} says"),
            Self::ReinstallInstance { instance, start } => {
                if *start {
                    format!("Reinstalling instance {instance} and starting it")
                } else {
                    format!("Reinstalling instance {instance}")
                }
            }
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}
