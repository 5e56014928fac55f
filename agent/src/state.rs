//! What survives a restart: the last signed sequence number and the last published verdict.
//!
//! Files are replaced atomically (write, fsync, rename, fsync the directory), so a crash leaves
//! either the old or the new content.

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

    /// The last sequence number used (0 if none).
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

    /// Records `sequence` as used.
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
    fn sequence_only_increases() {
        assert_eq!(next_sequence(10, 5), 11);
        assert_eq!(next_sequence(10, 50), 50);
        assert_eq!(next_sequence(u64::MAX, 0), u64::MAX);
    }
}
