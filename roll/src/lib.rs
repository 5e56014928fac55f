//! Rolling-maintenance planning for Ganeti clusters: which nodes can reboot
//! together, and which instance moves each reboot group needs.
//!
//! Pure library: loaders take text, planners take a [`cluster::Cluster`].

mod capacity;
pub mod cluster;
pub mod from_rapi;
pub mod graph;
pub mod hbal;
pub mod htext;
pub mod render;
pub mod schedule;
mod split;

pub use cluster::Cluster;
pub use schedule::{
    FailureDomains, Mode, Plan, PlanError, RebootGroup, RollOptions, plan, prepare,
};
