//! The duties: pure planners that turn what the coordinator knows into [`crate::gate::Proposal`]s.
//!
//! - [`node_repair`]: incidents from the agents' verdicts (maintd's node repair).
//! - [`instance_repair`]: harep's instance auto-repair, tag for tag (executed by
//!   the coordinator's `instance_repair_exec`).
//! - [`maintenance`]: the next reboot group of a rolling maintenance campaign (executed by
//!   the coordinator's `campaign_exec`).
//! - [`balancing`]: the first job set of Ganeti's `hbal` (maintd's balancing).
//! - [`failback`]: the instances an evacuation moved off a node, back to it once it is healthy
//!   (proposed and carried out as balancing moves).

pub mod balancing;
pub mod failback;
pub mod instance_repair;
pub mod maintenance;
pub mod node_repair;
