//! nodecare-coordinator: the master-side daemon that turns signed self-diagnose reports into
//! Ganeti repair actions (the role of Ganeti's never-released maintd).

pub mod ganeti;
pub mod incident;
pub mod plan;
pub mod rapi;
pub mod simulation;
pub mod store;
