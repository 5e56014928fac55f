//! What survives a restart: the last signed sequence number and the last published verdict.
//!
//! Files are replaced atomically (write, fsync, rename, fsync the directory), so a crash leaves
//! either the old or the new content.
//!
//! An fsync can take long on a busy disk, and the agent has one async worker thread: every
//! write here refuses to run on a thread of a Tokio runtime unless it came through
//! [`blocking`] (the runtime's blocking pool), so a persistence call placed in an async task
//! fails its tests instead of stalling every request of the node.

use std::cell::Cell;
use std::io::Write;
use std::path::{Path, PathBuf};

use nodecare_collectors::diagnose::DiagnoseRun;

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing failed.
    #[error("state file {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A write was attempted on an async worker thread (a bug: it would stall the runtime).
    #[error("state file {path}: written on an async worker thread, not on the blocking pool")]
    AsyncWorker {
        /// The file.
        path: String,
    },
    /// The blocking pool did not run the write (the runtime is shutting down).
    #[error("state files: the blocking pool did not finish the write: {0}")]
    Pool(String),
}

thread_local! {
    /// Whether this thread is running work handed to [`blocking`].
    static ON_BLOCKING_POOL: Cell<bool> = const { Cell::new(false) };
}

/// Clears [`ON_BLOCKING_POOL`] when the work ends, even by a panic.
struct PoolMark;

impl Drop for PoolMark {
    fn drop(&mut self) {
        ON_BLOCKING_POOL.with(|mark| mark.set(false));
    }
}

/// Runs `work` (which may write state files) on the runtime's blocking pool.
pub async fn blocking<T, F>(work: F) -> Result<T, StateError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StateError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        ON_BLOCKING_POOL.with(|mark| mark.set(true));
        let _mark = PoolMark;
        work()
    })
    .await
    .map_err(|error| StateError::Pool(error.to_string()))?
}

/// Refuses a write on a thread of a Tokio runtime that is not running [`blocking`] work
/// (an async worker, or a `block_on` thread); threads outside any runtime may write.
fn refuse_on_async_worker(path: &Path) -> Result<(), StateError> {
    let in_runtime = tokio::runtime::Handle::try_current().is_ok();
    if in_runtime && !ON_BLOCKING_POOL.with(Cell::get) {
        return Err(StateError::AsyncWorker {
            path: path.display().to_string(),
        });
    }
    Ok(())
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

const SEQUENCE_FILE: &str = "sequence";
const VERDICT_FILE: &str = "last-verdict.json";

fn io_error(path: &Path, error: &std::io::Error) -> StateError {
    StateError::Io {
        path: path.display().to_string(),
        reason: error.to_string(),
    }
}

impl StateDir {
    /// Opens (creating it with mode 0700 if needed) the state directory.
    pub fn open(dir: &Path) -> Result<Self, StateError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|error| io_error(dir, &error))?;
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    fn replace(&self, name: &str, content: &[u8]) -> Result<(), StateError> {
        let path = self.dir.join(name);
        refuse_on_async_worker(&path)?;
        let temporary = self.dir.join(format!(".{name}.tmp"));
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(content)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        };
        write().map_err(|error| io_error(&path, &error))
    }

    /// The highest sequence number reserved (0 if none): every number handed out is at most
    /// this one.
    pub fn load_sequence(&self) -> Result<u64, StateError> {
        let path = self.dir.join(SEQUENCE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().map_err(|error| StateError::Io {
                path: path.display().to_string(),
                reason: format!("not a sequence number: {error}"),
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(io_error(&path, &error)),
        }
    }

    /// Records `sequence` as reserved (the numbers up to it may be handed out).
    pub fn store_sequence(&self, sequence: u64) -> Result<(), StateError> {
        self.replace(SEQUENCE_FILE, format!("{sequence}\n").as_bytes())
    }

    /// The last published run, if any. An unreadable file is reported, not fatal.
    pub fn load_verdict(&self) -> Result<Option<DiagnoseRun>, StateError> {
        let path = self.dir.join(VERDICT_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|error| StateError::Io {
                    path: path.display().to_string(),
                    reason: format!("not a saved verdict: {error}"),
                }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error(&path, &error)),
        }
    }

    /// Saves the published run.
    pub fn store_verdict(&self, run: &DiagnoseRun) -> Result<(), StateError> {
        let bytes = serde_json::to_vec(run).map_err(|error| StateError::Io {
            path: VERDICT_FILE.to_owned(),
            reason: error.to_string(),
        })?;
        self.replace(VERDICT_FILE, &bytes)
    }
}

/// The next sequence number: above the last one, and at least the current time in
/// milliseconds, so that it keeps increasing even if the state file is lost.
pub const fn next_sequence(last: u64, now_ms: u64) -> u64 {
    let after = last.saturating_add(1);
    if after > now_ms { after } else { now_ms }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::NodeVerdict;
    use std::collections::BTreeMap;

    #[test]
    fn sequence_and_verdict_survive() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("agent")).unwrap();
        assert_eq!(state.load_sequence().unwrap(), 0);
        state.store_sequence(41).unwrap();
        assert_eq!(state.load_sequence().unwrap(), 41);
        assert!(state.load_verdict().unwrap().is_none());
        let run = DiagnoseRun {
            verdict: NodeVerdict::merge(BTreeMap::new()).unwrap(),
            collected_at_ms: 5,
        };
        state.store_verdict(&run).unwrap();
        assert_eq!(state.load_verdict().unwrap(), Some(run));
        std::fs::write(dir.path().join("agent").join(VERDICT_FILE), "{").unwrap();
        assert!(state.load_verdict().is_err());
    }

    #[test]
    fn a_write_on_an_async_worker_is_refused_and_the_blocking_pool_may_write() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let on_worker = state.clone();
        let refused = runtime.block_on(async move {
            tokio::spawn(async move { on_worker.store_sequence(7) })
                .await
                .unwrap()
        });
        assert!(
            matches!(refused, Err(StateError::AsyncWorker { .. })),
            "{refused:?}"
        );
        let on_block_on = runtime.block_on(async { state.store_sequence(8) });
        assert!(matches!(on_block_on, Err(StateError::AsyncWorker { .. })));
        assert_eq!(state.load_sequence().unwrap(), 0);
        let pool = state.clone();
        runtime
            .block_on(blocking(move || pool.store_sequence(9)))
            .unwrap();
        assert_eq!(state.load_sequence().unwrap(), 9);
        // Outside any runtime (the operator commands' plain threads): allowed.
        state.store_sequence(10).unwrap();
        assert_eq!(state.load_sequence().unwrap(), 10);
    }

    #[test]
    fn sequence_only_increases() {
        assert_eq!(next_sequence(10, 5), 11);
        assert_eq!(next_sequence(10, 50), 50);
        assert_eq!(next_sequence(u64::MAX, 0), u64::MAX);
    }
}
