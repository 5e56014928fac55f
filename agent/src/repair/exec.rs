//! Running one repair command in the sandbox.
//!
//! The executable is the descriptor the whitelist checked (exec'd through `/proc/self/fd/N`, as
//! the diagnose runner does), so a file swapped after the check cannot run. No shell, no
//! arguments, an empty environment apart from a fixed `PATH`, working directory `/`, its own
//! process group. The verdict JSON is written to its stdin, which is then closed.
//!
//! Unlike a diagnose script, a repair command's output is not parsed: stdout and stderr are kept
//! up to their caps and the rest is read and discarded, so a chatty command is never killed for
//! talking. The output so far is visible while it runs. When the command exits, its output gets
//! a short grace period to close; then the whole process group is killed, so nothing of the run
//! outlives it. On timeout the group is killed at once.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use nodecare_collectors::runner::FIXED_PATH;
use nodecare_collectors::whitelist::VerifiedExecutable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Bytes kept from one output stream, up to a cap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capture {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl Capture {
    /// An empty capture keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            kept: Vec::new(),
            cap,
            truncated: false,
        }
    }

    /// Appends `chunk`, keeping only what fits under the cap.
    pub fn push(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        if chunk.len() > room {
            self.truncated = true;
        }
        self.kept
            .extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
    }

    /// The bytes kept.
    pub fn bytes(&self) -> &[u8] {
        &self.kept
    }

    /// Whether anything was dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }
}

/// stdout and stderr of a run, shared between the readers and whoever reports progress.
#[derive(Debug, Default)]
pub struct LiveOutput {
    /// Standard output.
    pub stdout: Capture,
    /// Standard error.
    pub stderr: Capture,
}

/// Shared handle on a run's output.
pub type SharedOutput = Arc<Mutex<LiveOutput>>;

/// A new shared output with the given caps.
pub fn shared_output(stdout_cap: usize, stderr_cap: usize) -> SharedOutput {
    Arc::new(Mutex::new(LiveOutput {
        stdout: Capture::new(stdout_cap),
        stderr: Capture::new(stderr_cap),
    }))
}

/// Limits of one repair run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// From spawn to exit; the process group is killed when it is exceeded.
    pub timeout: Duration,
    /// How long the output may stay open after the command exited.
    pub output_grace: Duration,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// Exited with this status.
    Exited(i32),
    /// Killed by this signal (not by us).
    Signalled(i32),
    /// Outlived its timeout; the group was killed.
    TimedOut(Duration),
    /// Could not be started.
    SpawnFailed(String),
    /// Waiting for it failed; the group was killed.
    Io(String),
}

fn kill_group(pgid: Pid) {
    match killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(errno) => tracing::warn!(pgid = pgid.as_raw(), %errno, "cannot kill process group"),
    }
}

/// Kills the process group led by `pgid` (a run being abandoned).
pub fn kill_run_group(pgid: i32) {
    if pgid > 0 {
        kill_group(Pid::from_raw(pgid));
    }
}

#[expect(
    unsafe_code,
    reason = "a pre_exec hook must clear FD_CLOEXEC on the checked descriptor in the child only"
)]
fn build_command(executable: &VerifiedExecutable) -> tokio::process::Command {
    let fd = executable.raw_fd();
    let mut command = tokio::process::Command::new(format!("/proc/self/fd/{fd}"));
    command
        .arg0(executable.name())
        .env_clear()
        .env("PATH", FIXED_PATH)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl(2), which is
    // async-signal-safe; it allocates nothing and takes no lock. Clearing FD_CLOEXEC there keeps
    // the checked descriptor open across exec in this child only, so that a `#!` interpreter can
    // open `/proc/self/fd/N`; in the parent and every other child it stays close-on-exec.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

async fn drain<R: AsyncRead + Unpin>(
    mut reader: R,
    output: SharedOutput,
    pick: fn(&mut LiveOutput) -> &mut Capture,
) {
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let chunk = buffer.get(..read).unwrap_or_default();
                let mut live = output.lock().unwrap_or_else(PoisonError::into_inner);
                pick(&mut live).push(chunk);
            }
        }
    }
}

/// Waits for the output readers; a reader is dropped from the list once it finished, so that this
/// can be called again after a timeout.
async fn join_readers(readers: &mut Vec<tokio::task::JoinHandle<()>>) {
    while let Some(reader) = readers.last_mut() {
        let _joined = reader.await;
        readers.pop();
    }
}

/// Runs `executable` with `input` on stdin, filling `output` as it goes.
///
/// `on_spawn` receives the process group id as soon as the child exists, so that the caller can
/// kill the group if it abandons the run.
pub async fn run_repair(
    executable: &VerifiedExecutable,
    input: Vec<u8>,
    limits: RunLimits,
    output: &SharedOutput,
    on_spawn: impl FnOnce(i32),
) -> (RunEnd, Duration) {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + limits.timeout;
    let mut child = match build_command(executable).spawn() {
        Ok(child) => child,
        Err(error) => return (RunEnd::SpawnFailed(error.to_string()), started.elapsed()),
    };
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return (
            RunEnd::SpawnFailed("child has no process id".into()),
            started.elapsed(),
        );
    };
    on_spawn(pid);
    let pgid = Pid::from_raw(pid);
    let stdin_task = child.stdin.take().map(|mut pipe| {
        tokio::spawn(async move {
            // The command may exit without reading its input; a broken pipe is not an error.
            let _ignored = pipe.write_all(&input).await;
        })
    });
    let stdout_task = child
        .stdout
        .take()
        .map(|reader| tokio::spawn(drain(reader, Arc::clone(output), |live| &mut live.stdout)));
    let stderr_task = child
        .stderr
        .take()
        .map(|reader| tokio::spawn(drain(reader, Arc::clone(output), |live| &mut live.stderr)));
    let mut readers: Vec<tokio::task::JoinHandle<()>> =
        [stdout_task, stderr_task].into_iter().flatten().collect();
    let end = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(Ok(status)) => {
            let grace = (tokio::time::Instant::now() + limits.output_grace).min(deadline);
            let _closed = tokio::time::timeout_at(grace, join_readers(&mut readers)).await;
            match (status.code(), status.signal()) {
                (Some(code), _) => RunEnd::Exited(code),
                (None, Some(signal)) => RunEnd::Signalled(signal),
                (None, None) => RunEnd::Io("exit status has neither code nor signal".into()),
            }
        }
        Ok(Err(error)) => RunEnd::Io(format!("waiting for the command: {error}")),
        Err(_) => RunEnd::TimedOut(limits.timeout),
    };
    // Whatever happened, nothing of this run may survive it.
    kill_group(pgid);
    let _reaped = child.wait().await;
    // With the group dead the pipes close; bound the wait for a process that left the group.
    let _closed =
        tokio::time::timeout(Duration::from_millis(200), join_readers(&mut readers)).await;
    for reader in readers {
        reader.abort();
    }
    if let Some(task) = stdin_task {
        task.abort();
    }
    (end, started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn capture_keeps_up_to_the_cap() {
        let mut capture = Capture::new(5);
        capture.push(b"abc");
        assert!(!capture.truncated());
        capture.push(b"de");
        assert!(!capture.truncated());
        capture.push(b"f");
        assert!(capture.truncated());
        assert_eq!(capture.bytes(), b"abcde");
        let mut zero = Capture::new(0);
        zero.push(b"");
        assert!(!zero.truncated());
        zero.push(b"x");
        assert!(zero.truncated());
    }

    proptest! {
        #[test]
        fn capture_is_a_prefix(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..50), 0..20), cap in 0usize..300) {
            let mut capture = Capture::new(cap);
            let mut all = Vec::new();
            for chunk in &chunks {
                capture.push(chunk);
                all.extend_from_slice(chunk);
            }
            let kept = all.len().min(cap);
            prop_assert_eq!(capture.bytes(), &all[..kept]);
            prop_assert_eq!(capture.truncated(), all.len() > cap);
        }
    }
}
