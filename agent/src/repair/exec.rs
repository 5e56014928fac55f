//! Running one repair command: the executor of [`nodecare_collectors::runner`] under its
//! keep-the-first-bytes policy.
//!
//! The executable is the descriptor the whitelist checked, in the same sandbox as a diagnose
//! script (no shell, no arguments, an empty environment apart from a fixed `PATH`, working
//! directory `/`, no inherited descriptor but 0, 1 and 2, its own process group). The verdict
//! JSON is written to its stdin, which is then closed.
//!
//! Unlike a diagnose script, a repair command's output is not parsed: stdout and stderr are kept
//! up to their caps and the rest is read and discarded, so a chatty command is never killed for
//! talking. The output so far is visible while it runs. When the command exits, its output gets
//! a short grace period to close; then every process it started is killed, so nothing of the run
//! outlives it. On timeout they are killed at once.

use std::time::Duration;

pub use nodecare_collectors::runner::{
    Capture, LiveOutput, RunEnd, SharedOutput, kill_run as kill_run_group, shared_output,
};
use nodecare_collectors::runner::{OutputPolicy, Program, RunSpec, execute};
use nodecare_collectors::whitelist::VerifiedExecutable;

/// Limits of one repair run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// From spawn to exit; every process of the run is killed when it is exceeded.
    pub timeout: Duration,
    /// How long the output may stay open after the command exited.
    pub output_grace: Duration,
}

/// Runs `executable` with `input` on stdin, filling `output` as it goes.
///
/// `on_spawn` receives the process group id as soon as the child exists, so that the caller can
/// kill the run if it abandons it.
pub async fn run_repair(
    executable: &VerifiedExecutable,
    input: Vec<u8>,
    limits: RunLimits,
    output: &SharedOutput,
    on_spawn: impl FnOnce(i32),
) -> (RunEnd, Duration) {
    let spec = RunSpec {
        timeout: limits.timeout,
        policy: OutputPolicy::KeepFirst {
            grace: limits.output_grace,
        },
    };
    execute(
        Program::Verified(executable),
        Some(input),
        &spec,
        output,
        on_spawn,
    )
    .await
}
