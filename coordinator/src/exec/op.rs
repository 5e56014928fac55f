//! Submitting a Ganeti write ([`Op`]): [`submit`] maps each operation onto the client's write
//! methods, until the [`Ganeti`] trait's write methods become one `submit(&Op, &Reason)`.

pub use crate::ganeti::Op;
use crate::ganeti::{Ganeti, GanetiError, JobId, Reason};

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
