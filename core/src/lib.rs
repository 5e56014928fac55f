//! nodecare-core: the coordinator's decisions without IO. Everything here is a pure function of
//! what it is given (Ganeti's view, the agents' verified reports, the time as a number); the
//! coordinator reads and writes the world around it, the CLI plans with it.
//!
//! - [`incident`]: incidents and their lifecycle (pure state machine).
//! - [`plan`]: evacuation planning.
//! - [`gate`]: which proposed disruptions start this round: failure domains, caps, storage
//!   health, the storm breaker ([`breaker`]), overrides; [`duty`]: the duties that propose.
//! - [`storage`]: storage health (DRBD, instances on drained or offline nodes) for the gate;
//!   [`load`]: the nodes' dynamic load for balancing.
//! - [`ledger`]: the one ledger of what is in force: every operation of every duty, recorded
//!   before it is submitted, and what it holds.
//! - [`campaign`]: rolling maintenance campaigns (their state machine and group planning).
//! - [`config`]: the coordinator's configuration (parsing and validation; reading the file is
//!   the caller's); [`retention`]: its `[retention]` section.
//!
//! No IO crate is a dependency (no tokio, reqwest, rusqlite, axum, maud, hyper): `tests/pure.rs`
//! fails when one comes in.

pub mod approval;
pub mod breaker;
pub mod calendar;
pub mod campaign;
pub mod config;
pub mod duty;
pub mod gate;
pub mod incident;
pub mod ledger;
pub mod load;
pub mod plan;
pub mod recorder;
pub mod retention;
pub mod storage;
pub mod upgrade_check;
pub mod waits;

/// The Ganeti trait's types (the `nodecare-ganeti` crate, without its RAPI client).
pub use nodecare_ganeti as ganeti;
