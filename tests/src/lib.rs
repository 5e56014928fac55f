//! Test support for nodecare-coordinator: fake agents, an in-process harness (simulated Ganeti
//! + fake agents + coordinator), and the binaries for the demo, crash tests and benchmarks.

pub mod fake_agent;
pub mod harness;
pub mod htools;
pub mod measure;
pub mod nemesis_check;
pub mod state_growth;
