//! Rolling-maintenance planning for Ganeti clusters: which nodes can reboot
//! together, and which instance moves each reboot group needs.
//!
//! Pure library: loaders take text, planners take a [`model::Cluster`].

pub mod graph;
pub mod htext;
pub mod model;
pub mod plan;
pub mod rapi;
pub mod render;
mod sim;
mod split;

pub use model::Cluster;
pub use plan::{FailureDomains, Mode, Plan, PlanError, RebootGroup, RollOptions, plan, prepare};
