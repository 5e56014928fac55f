//! The sandboxed runner: executes a [`VerifiedExecutable`] with a timeout, output caps and
//! bounded concurrency.
//!
//! - No shell (except `/bin/sh` for a file without `#!`, as `execvp` does); no arguments; an empty environment plus a fixed `PATH`; working directory `/`;
//!   stdin from `/dev/null` or the given bytes.
//! - The executed file is the checked descriptor itself (`/proc/self/fd/N`), so a file swapped
//!   after the whitelist check cannot run. The descriptor stays open across `exec` in the child
//!   only, because a `#!` interpreter re-opens the script through that path.
//! - The child leads its own process group. One deadline covers the child's exit *and* the end
//!   of its stdout and stderr, so a grandchild that keeps stdout open cannot stall the run; on
//!   timeout, on overflow, and after every run, the whole group gets `SIGKILL`.
//! - stdout above its cap is an error (never a truncated parse); stderr is kept up to its cap
//!   for the log.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::whitelist::VerifiedExecutable;

/// The only environment variable a whitelisted executable gets.
pub const FIXED_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";
/// Default time limit of one run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default stdout cap.
pub const DEFAULT_STDOUT_CAP: usize = 64 * 1024;
/// Default stderr cap (kept for the log; the rest is discarded).
pub const DEFAULT_STDERR_CAP: usize = 16 * 1024;
/// Default number of executables that may run at once in this process.
pub const DEFAULT_MAX_CONCURRENT: usize = 4;

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecLimits {
    /// Time from spawn to exit plus end of output.
    pub timeout: Duration,
    /// Maximum stdout size; more is an error.
    pub stdout_cap: usize,
    /// Maximum stderr kept; more is discarded.
    pub stderr_cap: usize,
}

impl Default for ExecLimits {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            stdout_cap: DEFAULT_STDOUT_CAP,
            stderr_cap: DEFAULT_STDERR_CAP,
        }
    }
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl ExitStatus {
    /// Exit code 0.
    pub const fn success(self) -> bool {
        matches!(self, Self::Code(0))
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code(code) => write!(f, "exit code {code}"),
            Self::Signal(signal) => match Signal::try_from(*signal) {
                Ok(name) => write!(f, "killed by signal {signal} ({name})"),
                Err(_) => write!(f, "killed by signal {signal}"),
            },
        }
    }
}

/// A finished run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code or signal.
    pub status: ExitStatus,
    /// All of stdout (within the cap).
    pub stdout: Vec<u8>,
    /// stderr up to its cap.
    pub stderr: Vec<u8>,
    /// Whether stderr went over its cap.
    pub stderr_truncated: bool,
    /// Wall time from spawn to the end of the run.
    pub duration: Duration,
}

/// Why a run produced no output to use. The process group is gone in every case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The process could not be started.
    #[error("cannot execute {name}: {reason}")]
    Spawn {
        /// The executable.
        name: String,
        /// What went wrong.
        reason: String,
    },
    /// It did not finish (exit and close its output) in time; the group was killed.
    #[error("{name} timed out after {}s (process group killed){}", timeout.as_secs_f64(), stderr_note(stderr))]
    Timeout {
        /// The executable.
        name: String,
        /// The limit.
        timeout: Duration,
        /// stderr so far, for the log.
        stderr: String,
    },
    /// stdout went over its cap; the group was killed.
    #[error("{name} wrote more than {cap} bytes to stdout (process group killed)")]
    StdoutOverflow {
        /// The executable.
        name: String,
        /// The cap.
        cap: usize,
    },
    /// Reading its output or waiting for it failed.
    #[error("i/o error running {name}: {reason}")]
    Io {
        /// The executable.
        name: String,
        /// What went wrong.
        reason: String,
    },
}

fn stderr_note(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", stderr.trim())
    }
}

/// Runs executables with bounded concurrency.
#[derive(Debug, Clone)]
pub struct Runner {
    permits: Arc<Semaphore>,
}

impl Default for Runner {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_CONCURRENT)
    }
}

impl Runner {
    /// A runner allowing `max_concurrent` runs at once (at least one).
    pub fn new(max_concurrent: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
        }
    }

    /// Runs `executable` once (see the module documentation), waiting for a slot first. The time
    /// spent waiting for a slot does not count against the timeout.
    pub async fn run(
        &self,
        executable: &VerifiedExecutable,
        stdin: Option<Vec<u8>>,
        limits: &ExecLimits,
    ) -> Result<ExecOutput, ExecError> {
        let _permit = self.permits.acquire().await.map_err(|_| ExecError::Spawn {
            name: executable.name().to_owned(),
            reason: "runner is shut down".into(),
        })?;
        run_unbounded(executable, stdin, limits).await
    }
}

/// Runs `executable` with the process-wide default runner ([`DEFAULT_MAX_CONCURRENT`] slots).
pub async fn run(
    executable: &VerifiedExecutable,
    stdin: Option<Vec<u8>>,
    limits: &ExecLimits,
) -> Result<ExecOutput, ExecError> {
    static DEFAULT: OnceLock<Runner> = OnceLock::new();
    DEFAULT
        .get_or_init(Runner::default)
        .run(executable, stdin, limits)
        .await
}

/// Reads a stream to its end. Returns the bytes and `true` as soon as more than `cap` bytes
/// arrive (the caller then kills the writer).
async fn read_capped<R: AsyncRead + Unpin>(
    mut reader: R,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        let read = reader.read(&mut buffer).await?;
        if read == 0 {
            return Ok((kept, false));
        }
        if read > cap.saturating_sub(kept.len()) {
            return Ok((kept, true));
        }
        kept.extend_from_slice(buffer.get(..read).unwrap_or_default());
    }
}

fn kill_group(pgid: Pid) {
    match killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(errno) => tracing::warn!(pgid = pgid.as_raw(), %errno, "cannot kill process group"),
    }
}

/// Kills the process group when dropped, whichever way the run ends.
struct GroupGuard(Pid);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_group(self.0);
    }
}

enum Outcome {
    Finished(std::process::ExitStatus, Vec<u8>),
    Overflow,
    Timeout,
    Io(String),
}

#[expect(
    unsafe_code,
    reason = "a pre_exec hook must clear FD_CLOEXEC on the checked descriptor in the child only"
)]
fn build_command(
    executable: &VerifiedExecutable,
    with_stdin: bool,
    through_shell: bool,
) -> tokio::process::Command {
    let fd = executable.raw_fd();
    let script = format!("/proc/self/fd/{fd}");
    let mut command = if through_shell {
        let mut command = tokio::process::Command::new("/bin/sh");
        command.arg(&script);
        command
    } else {
        tokio::process::Command::new(&script)
    };
    command
        .arg0(executable.name())
        .env_clear()
        .env("PATH", FIXED_PATH)
        .current_dir("/")
        .stdin(if with_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: the closure runs in the forked child before exec and only calls close_range(2) and
    // fcntl(2), which are async-signal-safe; it allocates nothing and touches no lock. Clearing FD_CLOEXEC there
    // keeps the checked descriptor open across exec in this child only, so that a `#!`
    // interpreter can open `/proc/self/fd/N`; in the parent (and in every other child) it stays
    // close-on-exec.
    unsafe {
        command.pre_exec(move || {
            // Descriptors this process inherited without close-on-exec (e.g. a jobserver pipe)
            // must not reach the executable either.
            if libc::syscall(
                libc::SYS_close_range,
                3_u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            ) == -1
            {
                for other in 3..4096 {
                    libc::fcntl(other, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

async fn run_unbounded(
    executable: &VerifiedExecutable,
    stdin: Option<Vec<u8>>,
    limits: &ExecLimits,
) -> Result<ExecOutput, ExecError> {
    let name = executable.name().to_owned();
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + limits.timeout;
    // A file without a `#!` line is run by /bin/sh, as execvp(3) does (and so Ganeti).
    let spawned = match build_command(executable, stdin.is_some(), false).spawn() {
        Err(error) if error.raw_os_error() == Some(libc::ENOEXEC) => {
            build_command(executable, stdin.is_some(), true).spawn()
        }
        other => other,
    };
    let mut child = spawned.map_err(|error| ExecError::Spawn {
        name: name.clone(),
        reason: error.to_string(),
    })?;
    let Some(pid) = child.id() else {
        return Err(ExecError::Spawn {
            name,
            reason: "child has no process id".into(),
        });
    };
    let pgid = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    // If this future is dropped (its caller gave up), the group dies with it.
    let _group = GroupGuard(pgid);

    let stdin_task = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
            // The child may exit without reading; a broken pipe is not our error.
            let _ignored = pipe.write_all(&bytes).await;
            drop(pipe);
        })),
        _ => None,
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let stdout_cap = limits.stdout_cap;
    let stderr_cap = limits.stderr_cap;
    // stderr is read by its own task so that the partial text is available on timeout.
    let stderr_shared = Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let stderr_sink = Arc::clone(&stderr_shared);
    let stderr_task = tokio::spawn(async move {
        let Some(mut reader) = stderr else {
            return Ok((Vec::new(), false));
        };
        let mut over = false;
        let mut buffer = vec![0_u8; 4096];
        loop {
            let read = reader.read(&mut buffer).await?;
            if read == 0 {
                break;
            }
            let chunk = buffer.get(..read).unwrap_or_default();
            if let Ok(mut kept) = stderr_sink.lock() {
                let room = stderr_cap.saturating_sub(kept.len());
                if read > room {
                    over = true;
                }
                kept.extend_from_slice(chunk.get(..room.min(read)).unwrap_or_default());
            }
        }
        let kept = stderr_sink
            .lock()
            .map(|kept| kept.clone())
            .unwrap_or_default();
        Ok::<_, std::io::Error>((kept, over))
    });

    // stdout to EOF (or over the cap), then the exit, all under one deadline.
    let work = async {
        let (stdout_bytes, over) = match stdout {
            Some(reader) => match read_capped(reader, stdout_cap).await {
                Ok(result) => result,
                Err(error) => return Outcome::Io(format!("reading stdout: {error}")),
            },
            None => (Vec::new(), false),
        };
        if over {
            return Outcome::Overflow;
        }
        match child.wait().await {
            Ok(status) => Outcome::Finished(status, stdout_bytes),
            Err(error) => Outcome::Io(format!("waiting: {error}")),
        }
    };
    let outcome = match tokio::time::timeout_at(deadline, work).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Timeout,
    };
    // Whatever happened, nothing of this run may survive it.
    kill_group(pgid);
    // Reap the child (already reaped if it finished). SIGKILL makes this prompt.
    let _reaped = child.wait().await;
    // With the group dead, stderr reaches EOF; bound the wait anyway (a process that left the
    // group could still hold it).
    let stderr_result = match tokio::time::timeout(Duration::from_millis(200), stderr_task).await {
        Ok(Ok(Ok(result))) => result,
        _ => {
            let kept = stderr_shared
                .lock()
                .map(|kept| kept.clone())
                .unwrap_or_default();
            (kept, true)
        }
    };
    if let Some(task) = stdin_task {
        task.abort();
    }
    let duration = started.elapsed();
    match outcome {
        Outcome::Finished(status, stdout) => {
            let status = match (status.code(), status.signal()) {
                (Some(code), _) => ExitStatus::Code(code),
                (None, Some(signal)) => ExitStatus::Signal(signal),
                (None, None) => ExitStatus::Code(-1),
            };
            Ok(ExecOutput {
                status,
                stdout,
                stderr: stderr_result.0,
                stderr_truncated: stderr_result.1,
                duration,
            })
        }
        Outcome::Overflow => Err(ExecError::StdoutOverflow {
            name,
            cap: stdout_cap,
        }),
        Outcome::Timeout => Err(ExecError::Timeout {
            name,
            timeout: limits.timeout,
            stderr: String::from_utf8_lossy(&stderr_result.0).into_owned(),
        }),
        Outcome::Io(reason) => Err(ExecError::Io { name, reason }),
    }
}
