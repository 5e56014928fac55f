//! The Ganeti writes the executor submits, as one type: the shape of `nodecare_ganeti::Op`
//! (same variants, same serialized form), kept here until the client's write methods become
//! one `submit(&Op, &Reason)`; [`submit`] maps each operation onto today's write methods.

use serde::{Deserialize, Serialize};

use crate::ganeti::{
    EvacuateMode, Ganeti, GanetiError, JobId, Reason, ReplaceDisksMode, TagTarget,
};

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
}

/// Submits `op` with `reason` (one job); returns its id.
pub async fn submit(ganeti: &dyn Ganeti, op: &Op, reason: &Reason) -> Result<JobId, GanetiError> {
    match op {
        Op::SetNodeDrained { node, drained } => {
            ganeti.set_node_drained(node, *drained, reason).await
        }
        Op::SetNodeOffline { node, offline } => {
            ganeti.set_node_offline(node, *offline, reason).await
        }
        Op::ShutdownInstance { instance } => ganeti.shutdown_instance(instance, reason).await,
        Op::MigrateInstance { instance, target } => {
            ganeti
                .migrate_instance(instance, target.as_deref(), reason)
                .await
        }
        Op::FailoverInstance { instance, target } => {
            ganeti
                .failover_instance(instance, target.as_deref(), reason)
                .await
        }
        Op::ReplaceDisks { instance, mode } => ganeti.replace_disks(instance, mode, reason).await,
        Op::EvacuateNode {
            node,
            mode,
            iallocator,
        } => {
            ganeti
                .evacuate_node(node, *mode, iallocator.as_deref(), reason)
                .await
        }
        Op::AddTags { target, tags } => ganeti.add_tags(target, tags, reason).await,
        Op::RemoveTags { target, tags } => ganeti.remove_tags(target, tags, reason).await,
        Op::RecreateInstanceDisks {
            instance,
            iallocator,
        } => {
            ganeti
                .recreate_instance_disks(instance, iallocator, reason)
                .await
        }
        Op::ReinstallInstance { instance, start } => {
            ganeti.reinstall_instance(instance, *start, reason).await
        }
    }
}
