//! Runs a system tool (`lvs`, `drbdsetup`, `xl`) with a timeout and an output cap.
//!
//! These are the node's own administration tools (and Ganeti's `hbal` on the master), not
//! whitelisted scripts: they run by path with arguments, but in the executor's sandbox all the
//! same ([`crate::runner`]): no shell, the fixed `PATH` and `LC_ALL=C`, empty stdin (or the given
//! bytes: the coordinator feeds `hbal` the cluster this way), no inherited descriptor, every
//! process killed after the run, and a cap on stdout so a misbehaving tool cannot exhaust the
//! caller's memory.

use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::time::Duration;

use crate::runner::{OutputPolicy, Program, RunEnd, RunSpec, execute, shared_output};

/// Bounds for one tool run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Wall-clock limit; the process group is killed when it passes.
    pub timeout: Duration,
    /// Maximum stdout bytes; more is an error.
    pub stdout_cap: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(10),
            stdout_cap: 8 * 1024 * 1024,
        }
    }
}

/// Why a tool run failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The tool is not installed at the configured path.
    #[error("{0} is not installed")]
    Missing(PathBuf),
    /// It could not be started.
    #[error("cannot start {tool}: {reason}")]
    Spawn {
        /// The tool.
        tool: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// It ran longer than allowed and was killed.
    #[error("{tool} did not finish within {timeout:?} and was killed")]
    Timeout {
        /// The tool.
        tool: PathBuf,
        /// The limit.
        timeout: Duration,
    },
    /// It printed more than allowed and was killed.
    #[error("{tool} printed more than {cap} bytes and was killed")]
    OutputTooLarge {
        /// The tool.
        tool: PathBuf,
        /// The cap.
        cap: usize,
    },
    /// It exited unsuccessfully.
    #[error("{tool} failed ({status}): {stderr}")]
    Failed {
        /// The tool.
        tool: PathBuf,
        /// Exit code or signal as text.
        status: String,
        /// The start of its stderr.
        stderr: String,
    },
}

/// Whether an executable exists at `path`.
pub fn tool_exists(path: &Path) -> bool {
    path.is_file()
}

/// How much of a tool's stderr is kept for its error.
const STDERR_CAP: usize = 4096;

/// Runs `tool args…` in the executor's sandbox and returns its stdout.
pub async fn run_tool(
    tool: &Path,
    args: &[&str],
    limits: ToolLimits,
) -> Result<Vec<u8>, ToolError> {
    run_tool_with_input(tool, args, None, limits).await
}

/// Runs `tool args…` in the executor's sandbox with `stdin` on its standard input (or
/// `/dev/null`) and returns its stdout.
pub async fn run_tool_with_input(
    tool: &Path,
    args: &[&str],
    stdin: Option<Vec<u8>>,
    limits: ToolLimits,
) -> Result<Vec<u8>, ToolError> {
    if !tool_exists(tool) {
        return Err(ToolError::Missing(tool.to_owned()));
    }
    let output = shared_output(limits.stdout_cap, STDERR_CAP);
    let spec = RunSpec {
        timeout: limits.timeout,
        policy: OutputPolicy::Reject,
    };
    let program = Program::Tool { path: tool, args };
    let (end, _duration) = execute(program, stdin, &spec, &output, |_| {}).await;
    let mut live = output.lock().unwrap_or_else(PoisonError::into_inner);
    let stdout = std::mem::take(&mut live.stdout);
    let stderr = live.stderr.text().trim().to_owned();
    drop(live);
    let tool = tool.to_owned();
    let status = match end {
        RunEnd::Exited(0) => return Ok(stdout.bytes().to_vec()),
        RunEnd::Exited(code) => format!("exit code {code}"),
        RunEnd::Signalled(signal) => format!("signal {signal}"),
        RunEnd::TimedOut(timeout) => return Err(ToolError::Timeout { tool, timeout }),
        RunEnd::StdoutOverflow(cap) => return Err(ToolError::OutputTooLarge { tool, cap }),
        RunEnd::SpawnFailed(reason) | RunEnd::Io(reason) => {
            return Err(ToolError::Spawn { tool, reason });
        }
    };
    Err(ToolError::Failed {
        tool,
        status,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(timeout_ms: u64, cap: usize) -> ToolLimits {
        ToolLimits {
            timeout: Duration::from_millis(timeout_ms),
            stdout_cap: cap,
        }
    }

    #[tokio::test]
    async fn captures_stdout() {
        let out = run_tool(Path::new("/bin/echo"), &["hello"], limits(5000, 100))
            .await
            .unwrap();
        assert_eq!(out, b"hello\n");
    }

    #[tokio::test]
    async fn feeds_stdin() {
        let out = run_tool_with_input(
            Path::new("/bin/cat"),
            &[],
            Some(b"cluster text\n".to_vec()),
            limits(5000, 100),
        )
        .await
        .unwrap();
        assert_eq!(out, b"cluster text\n");
    }

    #[tokio::test]
    async fn missing_tool_is_reported() {
        let error = run_tool(Path::new("/nonexistent/lvs"), &[], limits(100, 10))
            .await
            .unwrap_err();
        assert!(matches!(error, ToolError::Missing(_)));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let started = std::time::Instant::now();
        let error = run_tool(
            Path::new("/bin/sh"),
            &["-c", "sleep 30 & sleep 30"],
            limits(200, 100),
        )
        .await
        .unwrap_err();
        assert!(matches!(error, ToolError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn output_cap_is_enforced() {
        let error = run_tool(Path::new("/bin/sh"), &["-c", "yes"], limits(5000, 1000))
            .await
            .unwrap_err();
        assert!(
            matches!(error, ToolError::OutputTooLarge { cap: 1000, .. }),
            "{error}"
        );
    }

    #[tokio::test]
    async fn failure_carries_stderr() {
        let error = run_tool(
            Path::new("/bin/sh"),
            &["-c", "echo broken >&2; exit 3"],
            limits(5000, 1000),
        )
        .await
        .unwrap_err();
        assert_eq!(
            error,
            ToolError::Failed {
                tool: PathBuf::from("/bin/sh"),
                status: "exit code 3".to_owned(),
                stderr: "broken".to_owned()
            }
        );
    }
}
