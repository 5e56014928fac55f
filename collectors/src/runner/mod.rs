//! The one executor: every process nodecare starts (diagnose scripts, repair commands, plugins,
//! the node tools of the built-in collectors) starts here, in the same sandbox, with a timeout,
//! output caps and bounded concurrency. `clippy.toml` forbids `Command::new` anywhere else.
//!
//! The sandbox:
//! - No shell (except `/bin/sh` for a whitelisted file without `#!`, as `execvp` does); no
//!   arguments for whitelisted executables; an empty environment plus a fixed `PATH` (tools also
//!   get `LC_ALL=C`); working directory `/`; stdin from `/dev/null` or the given bytes.
//! - No inherited descriptor but 0, 1 and 2 (`close_range` in the child before `exec`).
//! - A whitelisted executable is run through the checked descriptor itself (`/proc/self/fd/N`),
//!   so a file swapped after the whitelist check cannot run. That descriptor stays open across
//!   `exec` in the child only, because a `#!` interpreter re-opens the script through that path.
//! - The child leads its own process group and is a child subreaper. After every run, whichever
//!   way it ended (exit, timeout, overflow, the caller giving up), every process it started is
//!   killed, including those that left the group with `setsid` (see [`reaper`]), and the output
//!   readers are stopped, so no process and no descriptor outlives a run.
//!
//! Two output policies ([`OutputPolicy`]):
//! - [`OutputPolicy::Reject`] (verdicts, plugins, tools): one deadline covers the exit *and* the
//!   end of stdout, so a grandchild that keeps stdout open cannot stall the run; stdout above its
//!   cap is an error, never a truncated parse.
//! - [`OutputPolicy::KeepFirst`] (repair logs): the first bytes of each stream are kept up to the
//!   caps and the rest is read and dropped, so a chatty command is never killed for talking;
//!   after the exit the output gets a grace period to close.
//!
//! stderr is always kept up to its cap for the log.
//!
//! Entry points: [`Runner::run`] / [`run`] run a whitelisted executable under
//! [`OutputPolicy::Reject`] and return [`ExecOutput`] or [`ExecError`] (a diagnose script's
//! verdict is then [`crate::diagnose::verdict_of`]; [`crate::diagnose::check_script`] does both
//! for one script by name). [`execute`] is the general form, with live output and the process
//! id as soon as it exists; the built-in collectors run node tools through it
//! ([`Program::Tool`], `builtin::systool`).

pub mod reaper;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub use self::reaper::init_reaper;
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
/// How long the output readers may take to finish once every process of a run is dead; they
/// are stopped after it.
const READER_GRACE: Duration = Duration::from_millis(200);

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

/// What happens to output above the caps, and when a run is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputPolicy {
    /// stdout above its cap ends the run with [`RunEnd::StdoutOverflow`]; the run is over when
    /// the process exited and stdout is closed, both within the timeout.
    Reject,
    /// Output above the caps is read and dropped; the run is over when the process exited and
    /// its output closed, or `grace` after the exit (within the timeout).
    KeepFirst {
        /// How long the output may stay open after the exit.
        grace: Duration,
    },
}

/// Limits and policy of one run of [`execute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSpec {
    /// From spawn to the end of the run; every process of the run is killed when it passes.
    pub timeout: Duration,
    /// What happens to output above the caps of `output`.
    pub policy: OutputPolicy,
}

/// What to execute.
#[derive(Debug, Clone, Copy)]
pub enum Program<'a> {
    /// A whitelisted executable, run through its checked descriptor, without arguments.
    Verified(&'a VerifiedExecutable),
    /// One of the node's own tools (`lvs`, `drbdsetup`, `xl`) by path, with arguments.
    Tool {
        /// The tool.
        path: &'a Path,
        /// Its arguments.
        args: &'a [&'a str],
    },
}

impl Program<'_> {
    fn name(&self) -> String {
        match self {
            Self::Verified(executable) => executable.name().to_owned(),
            Self::Tool { path, .. } => path.display().to_string(),
        }
    }
}

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

fn lock(output: &SharedOutput) -> std::sync::MutexGuard<'_, LiveOutput> {
    output.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a run of [`execute`] ended. Every process of the run is gone in every case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal (not by the executor).
    Signalled(i32),
    /// Did not finish within its timeout.
    TimedOut(Duration),
    /// Wrote more than this many bytes to stdout under [`OutputPolicy::Reject`].
    StdoutOverflow(usize),
    /// Could not be started.
    SpawnFailed(String),
    /// Reading its output or waiting for it failed.
    Io(String),
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

/// Why a run produced no output to use. Every process of the run is gone in every case.
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

    /// Runs `executable` once under [`OutputPolicy::Reject`] (see the module documentation),
    /// waiting for a slot first. The time spent waiting for a slot does not count against the
    /// timeout.
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

async fn run_unbounded(
    executable: &VerifiedExecutable,
    stdin: Option<Vec<u8>>,
    limits: &ExecLimits,
) -> Result<ExecOutput, ExecError> {
    let name = executable.name().to_owned();
    let output = shared_output(limits.stdout_cap, limits.stderr_cap);
    let spec = RunSpec {
        timeout: limits.timeout,
        policy: OutputPolicy::Reject,
    };
    let (end, duration) =
        execute(Program::Verified(executable), stdin, &spec, &output, |_| {}).await;
    let mut live = lock(&output);
    let stdout = std::mem::take(&mut live.stdout);
    let stderr = std::mem::take(&mut live.stderr);
    drop(live);
    let status = match end {
        RunEnd::Exited(code) => ExitStatus::Code(code),
        RunEnd::Signalled(signal) => ExitStatus::Signal(signal),
        RunEnd::TimedOut(timeout) => {
            return Err(ExecError::Timeout {
                name,
                timeout,
                stderr: stderr.text(),
            });
        }
        RunEnd::StdoutOverflow(cap) => return Err(ExecError::StdoutOverflow { name, cap }),
        RunEnd::SpawnFailed(reason) => return Err(ExecError::Spawn { name, reason }),
        RunEnd::Io(reason) => return Err(ExecError::Io { name, reason }),
    };
    Ok(ExecOutput {
        status,
        stdout: stdout.kept,
        stderr_truncated: stderr.truncated,
        stderr: stderr.kept,
        duration,
    })
}

/// How one output reader ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReaderEnd {
    Eof,
    Overflow,
    Failed(String),
}

/// Reads a stream to its end into the shared capture; under `reject`, stops at the first byte
/// over the cap.
async fn read_into<R: AsyncRead + Unpin>(
    mut reader: R,
    output: SharedOutput,
    pick: fn(&mut LiveOutput) -> &mut Capture,
    reject: bool,
) -> ReaderEnd {
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) => return ReaderEnd::Eof,
            Err(error) => return ReaderEnd::Failed(error.to_string()),
            Ok(read) => {
                let chunk = buffer.get(..read).unwrap_or_default();
                let mut live = lock(&output);
                let capture = pick(&mut live);
                capture.push(chunk);
                if reject && capture.truncated() {
                    return ReaderEnd::Overflow;
                }
            }
        }
    }
}

/// An output reader task, awaited at most once to completion.
struct Reader {
    task: Option<JoinHandle<ReaderEnd>>,
    end: Option<ReaderEnd>,
}

impl Reader {
    fn spawn<R: AsyncRead + Unpin + Send + 'static>(
        reader: Option<R>,
        output: &SharedOutput,
        pick: fn(&mut LiveOutput) -> &mut Capture,
        reject: bool,
    ) -> Self {
        match reader {
            Some(reader) => Self {
                task: Some(tokio::spawn(read_into(
                    reader,
                    Arc::clone(output),
                    pick,
                    reject,
                ))),
                end: None,
            },
            None => Self {
                task: None,
                end: Some(ReaderEnd::Eof),
            },
        }
    }

    async fn finish(&mut self) -> ReaderEnd {
        if let Some(end) = &self.end {
            return end.clone();
        }
        let end = match self.task.as_mut() {
            Some(task) => match task.await {
                Ok(end) => end,
                Err(error) => ReaderEnd::Failed(error.to_string()),
            },
            None => ReaderEnd::Eof,
        };
        self.task = None;
        self.end = Some(end.clone());
        end
    }

    /// Stops the reader if it is still running; its end of the pipe closes with it.
    fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Kills every process of the run when dropped (the caller gave up on the run).
struct RunGuard(i32);

impl Drop for RunGuard {
    fn drop(&mut self) {
        if self.0 > 0 {
            reaper::kill_run_now(self.0);
            reaper::forget(self.0);
        }
    }
}

/// Kills every process of the run led by `leader` (a run being abandoned by its owner).
pub fn kill_run(leader: i32) {
    reaper::kill_run_now(leader);
}

enum Outcome {
    Exited(std::process::ExitStatus),
    Overflow(usize),
    Timeout,
    Io(String),
}

#[expect(
    unsafe_code,
    reason = "a pre_exec hook must close inherited descriptors, make the child a subreaper and \
              clear FD_CLOEXEC on the checked descriptor, in the child only"
)]
#[allow(
    clippy::disallowed_methods,
    reason = "the one place where processes are created"
)]
fn build_command(
    program: Program<'_>,
    with_stdin: bool,
    through_shell: bool,
) -> tokio::process::Command {
    let (mut command, keep_fd) = match program {
        Program::Verified(executable) => {
            let fd = executable.raw_fd();
            let script = format!("/proc/self/fd/{fd}");
            let mut command = if through_shell {
                let mut command = tokio::process::Command::new("/bin/sh");
                command.arg(&script);
                command
            } else {
                tokio::process::Command::new(&script)
            };
            command.arg0(executable.name()).env_clear();
            (command, Some(fd))
        }
        Program::Tool { path, args } => {
            let mut command = tokio::process::Command::new(path);
            command.args(args).env_clear().env("LC_ALL", "C");
            (command, None)
        }
    };
    command
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
    // SAFETY: the closure runs in the forked child before exec and only calls close_range(2),
    // fcntl(2) and prctl(2), which are async-signal-safe; it allocates nothing and touches no
    // lock. Clearing FD_CLOEXEC there keeps the checked descriptor open across exec in this
    // child only, so that a `#!` interpreter can open `/proc/self/fd/N`; in the parent (and in
    // every other child) it stays close-on-exec.
    unsafe {
        command.pre_exec(move || {
            // Descriptors this process inherited without close-on-exec (e.g. a jobserver pipe)
            // must not reach the executable: everything above 2 closes at exec.
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
            // Orphans of the run become children of its first process, which is kept across
            // exec, so the whole tree stays findable while it lives.
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1_u64, 0_u64, 0_u64, 0_u64) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = keep_fd
                && libc::fcntl(fd, libc::F_SETFD, 0) == -1
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

fn spawn(program: Program<'_>, with_stdin: bool) -> std::io::Result<tokio::process::Child> {
    match reaper::spawn(&mut build_command(program, with_stdin, false)) {
        // A whitelisted file without a `#!` line is run by /bin/sh, as execvp(3) does (and so
        // Ganeti).
        Err(error)
            if error.raw_os_error() == Some(libc::ENOEXEC)
                && matches!(program, Program::Verified(_)) =>
        {
            reaper::spawn(&mut build_command(program, with_stdin, true))
        }
        other => other,
    }
}

/// Runs `program` once in the sandbox (see the module documentation), with `stdin` written to
/// its standard input (or `/dev/null`), filling `output` as it goes.
///
/// `on_spawn` receives the process id of the run's first process (which leads its process
/// group) as soon as it exists, so that an owner who abandons the run can [`kill_run`] it.
/// Returns how the run ended and how long it took; every process of the run is gone by then.
pub async fn execute(
    program: Program<'_>,
    stdin: Option<Vec<u8>>,
    spec: &RunSpec,
    output: &SharedOutput,
    on_spawn: impl FnOnce(i32),
) -> (RunEnd, Duration) {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut child = match spawn(program, stdin.is_some()) {
        Ok(child) => child,
        Err(error) => return (RunEnd::SpawnFailed(error.to_string()), started.elapsed()),
    };
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return (
            RunEnd::SpawnFailed(format!("{} has no process id", program.name())),
            started.elapsed(),
        );
    };
    // If this future is dropped (its caller gave up), the run dies with it.
    let mut guard = RunGuard(pid);
    on_spawn(pid);

    let stdin_task = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
            // The child may exit without reading; a broken pipe is not our error.
            let _ignored = pipe.write_all(&bytes).await;
            drop(pipe);
        })),
        _ => None,
    };
    let reject = spec.policy == OutputPolicy::Reject;
    let mut stdout = Reader::spawn(child.stdout.take(), output, |live| &mut live.stdout, reject);
    let mut stderr = Reader::spawn(child.stderr.take(), output, |live| &mut live.stderr, false);

    let outcome = match spec.policy {
        OutputPolicy::Reject => {
            // stdout to EOF (or over the cap), then the exit, all under one deadline.
            let work = async {
                match stdout.finish().await {
                    ReaderEnd::Overflow => return Outcome::Overflow(lock(output).stdout.cap),
                    ReaderEnd::Failed(error) => {
                        return Outcome::Io(format!("reading stdout: {error}"));
                    }
                    ReaderEnd::Eof => {}
                }
                match child.wait().await {
                    Ok(status) => Outcome::Exited(status),
                    Err(error) => Outcome::Io(format!("waiting: {error}")),
                }
            };
            tokio::time::timeout_at(deadline, work)
                .await
                .unwrap_or(Outcome::Timeout)
        }
        OutputPolicy::KeepFirst { grace } => {
            match tokio::time::timeout_at(deadline, child.wait()).await {
                Ok(Ok(status)) => {
                    let until = (tokio::time::Instant::now() + grace).min(deadline);
                    let _closed = tokio::time::timeout_at(until, async {
                        stdout.finish().await;
                        stderr.finish().await;
                    })
                    .await;
                    Outcome::Exited(status)
                }
                Ok(Err(error)) => Outcome::Io(format!("waiting: {error}")),
                Err(_) => Outcome::Timeout,
            }
        }
    };
    // Whatever happened, nothing of this run may survive it.
    let reaped = matches!(outcome, Outcome::Exited(_));
    let _killed = tokio::task::spawn_blocking(move || reaper::kill_run_blocking(pid, reaped)).await;
    // Reap the first process (already reaped if it exited). SIGKILL makes this prompt.
    let _reaped = child.wait().await;
    reaper::forget(pid);
    guard.0 = 0;
    // With every process dead the pipes close; the readers get a moment to take the last bytes
    // and are then stopped, so that no descriptor outlives the run.
    let _closed = tokio::time::timeout(READER_GRACE, async {
        stdout.finish().await;
        stderr.finish().await;
    })
    .await;
    stdout.stop();
    stderr.stop();
    if let Some(task) = stdin_task {
        task.abort();
    }
    let end = match outcome {
        Outcome::Exited(status) => match (status.code(), status.signal()) {
            (Some(code), _) => RunEnd::Exited(code),
            (None, Some(signal)) => RunEnd::Signalled(signal),
            (None, None) => RunEnd::Io("exit status has neither code nor signal".into()),
        },
        Outcome::Overflow(cap) => RunEnd::StdoutOverflow(cap),
        Outcome::Timeout => RunEnd::TimedOut(spec.timeout),
        Outcome::Io(reason) => RunEnd::Io(reason),
    };
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
