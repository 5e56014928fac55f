//! Runs a system tool (`lvs`, `drbdsetup`, `xl`) with a timeout and an output cap.
//!
//! These are the node's own administration tools, not whitelisted scripts, so they do not go
//! through the script sandbox; they still never run without bounds: no shell, a fixed `PATH`,
//! empty stdin, their own process group (killed as a whole on timeout or drop), and a cap on
//! stdout so a misbehaving tool cannot exhaust the agent's memory.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// The `PATH` a tool sees; LVM and DRBD tools call helpers by name.
const TOOL_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

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

/// Runs `tool args…` and returns its stdout.
pub async fn run_tool(
    tool: &Path,
    args: &[&str],
    limits: ToolLimits,
) -> Result<Vec<u8>, ToolError> {
    if !tool_exists(tool) {
        return Err(ToolError::Missing(tool.to_owned()));
    }
    let mut command = Command::new(tool);
    command
        .args(args)
        .env_clear()
        .env("PATH", TOOL_PATH)
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| ToolError::Spawn {
        tool: tool.to_owned(),
        reason: error.to_string(),
    })?;
    let pgid = child.id();
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        kill_group(pgid);
        return Err(ToolError::Spawn {
            tool: tool.to_owned(),
            reason: "no output pipes".to_owned(),
        });
    };
    let cap = limits.stdout_cap;
    // stderr is drained concurrently (keeping its start) so a chatty tool cannot block on a
    // full pipe; the task ends at EOF or is aborted below.
    let stderr_task = tokio::spawn(drain_keeping_start(stderr, 4096));
    let work = async {
        // Read one byte past the cap to detect overflow without buffering it all.
        let mut out = Vec::new();
        let mut limited_out = stdout.take(cap as u64 + 1);
        limited_out
            .read_to_end(&mut out)
            .await
            .map_err(|error| error.to_string())?;
        if out.len() > cap {
            return Ok::<_, String>(None);
        }
        let status = child.wait().await.map_err(|error| error.to_string())?;
        Ok(Some((out, status)))
    };
    let outcome = tokio::time::timeout(limits.timeout, work).await;
    let stderr_text = |task: tokio::task::JoinHandle<Vec<u8>>| async move {
        match tokio::time::timeout(std::time::Duration::from_millis(100), task).await {
            Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).trim().to_owned(),
            _ => String::new(),
        }
    };
    match outcome {
        Err(_) => {
            kill_group(pgid);
            stderr_task.abort();
            Err(ToolError::Timeout {
                tool: tool.to_owned(),
                timeout: limits.timeout,
            })
        }
        Ok(Err(reason)) => {
            kill_group(pgid);
            stderr_task.abort();
            Err(ToolError::Spawn {
                tool: tool.to_owned(),
                reason,
            })
        }
        Ok(Ok(None)) => {
            kill_group(pgid);
            stderr_task.abort();
            Err(ToolError::OutputTooLarge {
                tool: tool.to_owned(),
                cap,
            })
        }
        Ok(Ok(Some((out, status)))) => {
            if status.success() {
                stderr_task.abort();
                Ok(out)
            } else {
                let status = match (
                    status.code(),
                    std::os::unix::process::ExitStatusExt::signal(&status),
                ) {
                    (Some(code), _) => format!("exit code {code}"),
                    (None, Some(signal)) => format!("signal {signal}"),
                    (None, None) => "unknown status".to_owned(),
                };
                Err(ToolError::Failed {
                    tool: tool.to_owned(),
                    status,
                    stderr: stderr_text(stderr_task).await,
                })
            }
        }
    }
}

/// Reads a pipe to EOF, keeping only its first `keep` bytes.
async fn drain_keeping_start(mut pipe: impl tokio::io::AsyncRead + Unpin, keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 4096];
    while let Ok(read) = pipe.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        let room = keep.saturating_sub(kept.len());
        kept.extend_from_slice(&buffer[..read.min(room)]);
    }
    kept
}

/// Kills the tool's whole process group (the tool may have forked helpers).
fn kill_group(pgid: Option<u32>) {
    if let Some(pgid) = pgid.and_then(|id| i32::try_from(id).ok()) {
        // The group may already be gone; nothing else to do then.
        if let Err(errno) = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        ) {
            tracing::debug!(pgid, %errno, "tool process group already gone");
        }
    }
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
