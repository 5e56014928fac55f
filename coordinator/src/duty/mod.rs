//! The duties: pure planners that turn what the coordinator knows into [`crate::gate::Proposal`]s.
//!
//! - [`node_repair`]: incidents from the agents' verdicts (maintd's node repair).
//! - [`balancing`]: the first job set of Ganeti's `hbal` (maintd's balancing).

pub mod balancing;
pub mod node_repair;
