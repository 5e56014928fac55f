//! Durable repair state under the state directory: one record per incident and the nonces of
//! accepted requests.
//!
//! - `repair/records/<incident-id>.json`: the incident's [`RepairRecord`], replaced atomically
//!   (write a temporary file, fsync, rename, fsync the directory). The "running" record is on
//!   disk before the command is spawned, so a run is never repeated after a crash: a record still
//!   "running" when the agent starts is turned into `interrupted`.
//! - `repair/nonces.jsonl`: `{"nonce", "keep_until"}` lines, appended and fsync'd before a request
//!   runs, so a replay is refused even after a restart. Expired nonces are dropped on load and the
//!   file is compacted when most of it is stale.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nodecare_protocol::repair::{RepairRecord, RepairState, is_canonical_uuid};
use serde::{Deserialize, Serialize};

/// Why durable state could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("repair state {path}: {reason}")]
pub struct StoreError {
    /// The file or directory.
    pub path: String,
    /// What went wrong.
    pub reason: String,
}

fn store_error(path: &Path, error: impl std::fmt::Display) -> StoreError {
    StoreError {
        path: path.display().to_string(),
        reason: error.to_string(),
    }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|error| store_error(dir, error))
}

/// Writes `bytes` to `path` atomically and durably.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let temporary = path.with_extension("tmp");
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)
        .map_err(|error| store_error(&temporary, error))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|error| store_error(&temporary, error))?;
    std::fs::rename(&temporary, path).map_err(|error| store_error(path, error))?;
    sync_dir(dir)
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|error| store_error(dir, error))
}

/// What a record becomes when the agent finds it still running at start-up.
pub fn interrupted(mut record: RepairRecord) -> RepairRecord {
    record.state = RepairState::Interrupted;
    record.error = Some(
        "the agent stopped while the command ran; its outcome is unknown and it is not run again"
            .into(),
    );
    record
}

/// The incidents' records.
#[derive(Debug)]
pub struct RecordStore {
    dir: PathBuf,
    known: HashSet<String>,
}

impl RecordStore {
    /// Opens the store under `state_dir`, turning leftover "running" records into
    /// `interrupted`. Returns the store and the records it changed.
    pub fn open(state_dir: &Path) -> Result<(Self, Vec<RepairRecord>), StoreError> {
        let dir = state_dir.join("repair").join("records");
        create_private_dir(&dir)?;
        let mut known = HashSet::new();
        let mut changed = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(|error| store_error(&dir, error))?;
        for entry in entries {
            let entry = entry.map_err(|error| store_error(&dir, error))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(stem) = name.strip_suffix(".tmp") {
                // A replacement that never completed; the record it was replacing is intact.
                if is_canonical_uuid(stem) {
                    let _removed = std::fs::remove_file(entry.path());
                }
                continue;
            }
            let Some(incident) = name.strip_suffix(".json") else {
                continue;
            };
            if !is_canonical_uuid(incident) {
                continue;
            }
            // Known even if unreadable: such an incident is never run again.
            known.insert(incident.to_owned());
            let store = Self {
                dir: dir.clone(),
                known: HashSet::new(),
            };
            if let Ok(record) = store.load(incident)
                && record.state == RepairState::Running
            {
                let record = interrupted(record);
                store.save(&record)?;
                changed.push(record);
            }
        }
        Ok((Self { dir, known }, changed))
    }

    fn path_of(&self, incident: &str) -> PathBuf {
        self.dir.join(format!("{incident}.json"))
    }

    /// Whether the incident has a record.
    pub fn contains(&self, incident: &str) -> bool {
        self.known.contains(incident)
    }

    /// Marks the incident as having a record (call before saving its first record).
    pub fn reserve(&mut self, incident: &str) {
        self.known.insert(incident.to_owned());
    }

    /// Forgets a reservation whose record was never written.
    pub fn unreserve(&mut self, incident: &str) {
        if !self.path_of(incident).exists() {
            self.known.remove(incident);
        }
    }

    /// A handle that reads and writes records without the index (for use outside a lock).
    pub fn files(&self) -> RecordFiles {
        RecordFiles {
            dir: self.dir.clone(),
        }
    }

    fn load(&self, incident: &str) -> Result<RepairRecord, StoreError> {
        self.files().load(incident)
    }

    fn save(&self, record: &RepairRecord) -> Result<(), StoreError> {
        self.files().save(record)
    }
}

/// Reads and writes record files.
#[derive(Debug, Clone)]
pub struct RecordFiles {
    dir: PathBuf,
}

impl RecordFiles {
    /// Reads an incident's record.
    pub fn load(&self, incident: &str) -> Result<RepairRecord, StoreError> {
        let path = self.dir.join(format!("{incident}.json"));
        let text = std::fs::read(&path).map_err(|error| store_error(&path, error))?;
        serde_json::from_slice(&text).map_err(|error| store_error(&path, error))
    }

    /// Replaces an incident's record atomically and durably.
    pub fn save(&self, record: &RepairRecord) -> Result<(), StoreError> {
        let path = self.dir.join(format!("{}.json", record.incident_id));
        let bytes = serde_json::to_vec_pretty(record).map_err(|error| store_error(&path, error))?;
        write_atomically(&path, &bytes)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct NonceLine {
    nonce: String,
    keep_until: u64,
}

/// Whether a nonce was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceCheck {
    /// First time seen; now remembered durably.
    Fresh,
    /// Seen before and still remembered.
    Replayed,
}

/// Nonces of accepted requests, remembered until their envelope could no longer verify.
#[derive(Debug)]
pub struct NonceStore {
    path: PathBuf,
    file: File,
    live: HashMap<String, u64>,
    lines_in_file: usize,
    purge_at: usize,
}

/// Expired nonces are dropped (and the file compacted) every this many appends at least.
const PURGE_EVERY: usize = 1024;

impl NonceStore {
    /// Loads the nonces under `state_dir` that are still to be kept at `now_ms`.
    pub fn open(state_dir: &Path, now_ms: u64) -> Result<Self, StoreError> {
        Self::open_in(&state_dir.join("repair"), now_ms)
    }

    /// Loads the nonces of `dir/nonces.jsonl` (`dir` created private if missing) that are still
    /// to be kept at `now_ms`.
    pub fn open_in(dir: &Path, now_ms: u64) -> Result<Self, StoreError> {
        let dir = dir.to_path_buf();
        create_private_dir(&dir)?;
        let path = dir.join("nonces.jsonl");
        let mut live = HashMap::new();
        let mut lines_in_file = 0;
        match File::open(&path) {
            Ok(file) => {
                for line in BufReader::new(file).lines() {
                    let line = line.map_err(|error| store_error(&path, error))?;
                    lines_in_file += 1;
                    // A torn last line (crash mid-append) belonged to a request that never ran.
                    if let Ok(entry) = serde_json::from_str::<NonceLine>(&line)
                        && entry.keep_until >= now_ms
                    {
                        live.insert(entry.nonce, entry.keep_until);
                    }
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(store_error(&path, error)),
        }
        let file = Self::open_append(&path)?;
        let mut store = Self {
            path,
            file,
            live,
            lines_in_file,
            purge_at: 0,
        };
        store.compact_if_stale()?;
        store.purge_at = store.lines_in_file + PURGE_EVERY.max(store.live.len());
        Ok(store)
    }

    fn open_append(path: &Path) -> Result<File, StoreError> {
        open_append(path).map_err(|error| store_error(path, error))
    }

    /// How many nonces are remembered.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Whether `nonce` is remembered at `now_ms`.
    pub fn is_remembered(&self, nonce: &str, now_ms: u64) -> bool {
        self.live.get(nonce).is_some_and(|&until| until >= now_ms)
    }

    /// Refuses a remembered nonce; otherwise remembers it durably until `keep_until`.
    pub fn check_and_insert(
        &mut self,
        nonce: &str,
        keep_until: u64,
        now_ms: u64,
    ) -> Result<NonceCheck, StoreError> {
        if let Some(&until) = self.live.get(nonce)
            && until >= now_ms
        {
            return Ok(NonceCheck::Replayed);
        }
        if self.lines_in_file >= self.purge_at {
            self.live.retain(|_, until| *until >= now_ms);
            self.compact_if_stale()?;
            self.purge_at = self.lines_in_file + PURGE_EVERY.max(self.live.len());
        }
        let mut line = serde_json::to_vec(&NonceLine {
            nonce: nonce.to_owned(),
            keep_until,
        })
        .map_err(|error| store_error(&self.path, error))?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|error| store_error(&self.path, error))?;
        self.lines_in_file += 1;
        self.live.insert(nonce.to_owned(), keep_until);
        Ok(NonceCheck::Fresh)
    }

    fn compact_if_stale(&mut self) -> Result<(), StoreError> {
        if self.lines_in_file <= 2 * self.live.len() + 64 {
            return Ok(());
        }
        let mut bytes = Vec::new();
        for (nonce, &keep_until) in &self.live {
            let line = serde_json::to_vec(&NonceLine {
                nonce: nonce.clone(),
                keep_until,
            })
            .map_err(|error| store_error(&self.path, error))?;
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
        }
        write_atomically(&self.path, &bytes)?;
        self.file = Self::open_append(&self.path)?;
        self.lines_in_file = self.live.len();
        Ok(())
    }
}

/// Opens (creating, mode 0600) an append-only file of the state directory, never through a
/// symbolic link.
pub(crate) fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INCIDENT: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

    fn record(state: RepairState) -> RepairRecord {
        serde_json::from_value(json!({
            "incident_id": INCIDENT, "node": "node1", "command": "fix",
            "input_fingerprint": "00", "state": state, "exit_code": null, "signal": null,
            "started_at": 5, "finished_at": null, "duration_ms": null, "stdout": "",
            "stderr": "", "stdout_truncated": false, "stderr_truncated": false, "error": null
        }))
        .unwrap()
    }

    #[test]
    fn running_records_become_interrupted_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, changed) = RecordStore::open(dir.path()).unwrap();
        assert!(changed.is_empty());
        store.reserve(INCIDENT);
        store.files().save(&record(RepairState::Running)).unwrap();
        std::fs::write(
            dir.path()
                .join("repair/records/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c.json"),
            b"{torn",
        )
        .unwrap();
        let (store, changed) = RecordStore::open(dir.path()).unwrap();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].state, RepairState::Interrupted);
        assert_eq!(
            store.files().load(INCIDENT).unwrap().state,
            RepairState::Interrupted
        );
        // An unreadable record still counts as known: that incident never runs again.
        assert!(store.contains("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"));
        assert!(!store.contains("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5d"));
    }

    #[test]
    fn finished_records_survive_reopen_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = RecordStore::open(dir.path()).unwrap();
        store.files().save(&record(RepairState::Succeeded)).unwrap();
        let (store, changed) = RecordStore::open(dir.path()).unwrap();
        assert!(changed.is_empty());
        assert!(store.contains(INCIDENT));
        assert_eq!(
            store.files().load(INCIDENT).unwrap(),
            record(RepairState::Succeeded)
        );
    }

    #[test]
    fn nonces_persist_until_they_expire() {
        let dir = tempfile::tempdir().unwrap();
        let mut nonces = NonceStore::open(dir.path(), 100).unwrap();
        assert_eq!(
            nonces.check_and_insert("a", 200, 100).unwrap(),
            NonceCheck::Fresh
        );
        assert_eq!(
            nonces.check_and_insert("a", 200, 150).unwrap(),
            NonceCheck::Replayed
        );
        assert_eq!(
            nonces.check_and_insert("b", 1000, 150).unwrap(),
            NonceCheck::Fresh
        );
        drop(nonces);
        let mut nonces = NonceStore::open(dir.path(), 150).unwrap();
        assert_eq!(nonces.len(), 2);
        assert_eq!(
            nonces.check_and_insert("a", 300, 160).unwrap(),
            NonceCheck::Replayed
        );
        drop(nonces);
        // After "a" expired it is forgotten (its envelope can no longer verify anyway).
        let mut nonces = NonceStore::open(dir.path(), 250).unwrap();
        assert_eq!(nonces.len(), 1);
        assert_eq!(
            nonces.check_and_insert("a", 300, 250).unwrap(),
            NonceCheck::Fresh
        );
    }

    #[test]
    fn nonce_file_is_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let mut nonces = NonceStore::open(dir.path(), 0).unwrap();
        for index in 0..1500_u64 {
            nonces
                .check_and_insert(&format!("n{index}"), index + 10, index)
                .unwrap();
        }
        let lines = std::fs::read_to_string(dir.path().join("repair/nonces.jsonl"))
            .unwrap()
            .lines()
            .count();
        assert!(lines < 1200, "{lines} lines");
        assert!(nonces.len() < 1200);
        assert_eq!(
            nonces.check_and_insert("n1499", 5000, 1495).unwrap(),
            NonceCheck::Replayed
        );
    }
}
