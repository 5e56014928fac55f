//! An exhaustive model check of the replication of the coordinator's state to the master
//! candidates and of the takeover after a master failover (`docs/RELIABILITY.md`, "Model check of
//! the replication"). The model runs the code's own decision functions; [`explorer`] visits every
//! reachable state of it.

pub mod explorer;
pub mod replication;

use replication::Bounds;

/// The bounds of the test run (`cargo nextest run -p nodecare-model`): every state within them.
pub const BOUNDED: Bounds = Bounds {
    actions: 1,
    takeovers: 1,
    crashes: 0,
    max_number: 1,
    liveness: false,
    steady: true,
};

/// The largest bounds explored completely with every fault (`docs/RELIABILITY.md`): the test
/// bounds with a crash and restart of each coordinator (`cargo run -p nodecare-model -- complete`).
pub const COMPLETE: Bounds = Bounds {
    crashes: 1,
    ..BOUNDED
};

/// The bounds of the full run (`cargo run -p nodecare-model -- full`): not explored completely
/// yet (`docs/RELIABILITY.md`).
pub const FULL: Bounds = Bounds {
    actions: 2,
    takeovers: 2,
    crashes: 1,
    max_number: 2,
    liveness: true,
    steady: false,
};
