//! The node's repair lock: one repair command at a time on a node, across processes (the daemon
//! and operators' manual runs), as Ganeti serialises its repair commands with a lock file.
//!
//! It is an exclusive `flock(2)` on a file. flock locks belong to the open file description, so
//! two acquisitions in the same process exclude each other too. The lock dies with its holder, so
//! a crashed agent never leaves it taken.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// How often a busy lock is retried.
const RETRY_INTERVAL: Duration = Duration::from_millis(25);

/// Why the lock was not acquired.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another repair held it for the whole timeout.
    #[error("another repair holds {path} (waited {waited_ms} ms)")]
    Busy {
        /// The lock file.
        path: String,
        /// How long we waited.
        waited_ms: u128,
    },
    /// The lock file cannot be opened or locked.
    #[error("cannot lock {path}: {reason}")]
    Io {
        /// The lock file.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

/// A held repair lock; released on drop.
#[derive(Debug)]
pub struct RepairLockGuard {
    _lock: Flock<File>,
}

/// Takes the lock at `path`, waiting at most `timeout`.
pub async fn acquire(path: &Path, timeout: Duration) -> Result<RepairLockGuard, LockError> {
    let io_error = |reason: String| LockError::Io {
        path: path.display().to_string(),
        reason,
    };
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    loop {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|error| io_error(error.to_string()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(RepairLockGuard { _lock: lock }),
            Err((_, Errno::EWOULDBLOCK)) => {}
            Err((_, errno)) => return Err(io_error(errno.desc().to_owned())),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(LockError::Busy {
                path: path.display().to_string(),
                waited_ms: now.duration_since(started).as_millis(),
            });
        }
        tokio::time::sleep(RETRY_INTERVAL.min(deadline - now)).await;
    }
}

/// The default lock file under a state directory.
pub fn default_lock_path(state_dir: &Path) -> PathBuf {
    state_dir.join("repair.lock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_holder_waits_then_gets_busy_and_succeeds_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repair.lock");
        let first = acquire(&path, Duration::ZERO).await.unwrap();
        let busy = acquire(&path, Duration::from_millis(60)).await;
        assert!(matches!(busy, Err(LockError::Busy { waited_ms, .. }) if waited_ms >= 60));
        drop(first);
        let _second = acquire(&path, Duration::ZERO).await.unwrap();
    }

    #[tokio::test]
    async fn waiting_holder_gets_the_lock_when_released() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repair.lock");
        let first = acquire(&path, Duration::ZERO).await.unwrap();
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(first);
        });
        acquire(&path, Duration::from_secs(5)).await.unwrap();
        releaser.await.unwrap();
    }

    #[tokio::test]
    async fn unusable_path_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("repair.lock");
        assert!(matches!(
            acquire(&path, Duration::ZERO).await,
            Err(LockError::Io { .. })
        ));
    }
}
