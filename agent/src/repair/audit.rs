//! The repair audit log: one JSON line per repair request, accepted or refused, plus one per
//! finished run, appended under the state directory and fsync'd before the request is answered.
//! Accepted requests, runs and what an operator ran by hand go to `repair-audit.jsonl`; requests
//! refused over HTTP go to their own log, `repair-refused.jsonl`, so that a flood of refused
//! requests can rotate only its own lines away, never the audit of a real repair.
//!
//! One writer thread appends and syncs whatever lines are queued at once (a group commit), so a
//! flood of refused requests costs one fsync per batch, not per line, and never holds up a
//! valid request for more than one batch. Each file is rotated to `<name>.1` when it passes a
//! size limit, so that a flood cannot fill the disk.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::store::open_append;

/// The audit log's file name under the state directory.
pub const AUDIT_FILE_NAME: &str = "repair-audit.jsonl";
/// The log of refused requests under the state directory.
pub const REFUSED_FILE_NAME: &str = "repair-refused.jsonl";
/// Longest attacker-controlled string copied into a line.
const MAX_FIELD_CHARS: usize = 128;
/// Lines written per fsync at most.
const MAX_BATCH: usize = 256;

/// Where a request came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditSource {
    /// `POST /1/repair`.
    Http,
    /// `nodecare-agent repair` run by an operator.
    Cli,
    /// The agent itself (a finished run).
    Agent,
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    /// Unix milliseconds.
    pub at: u64,
    /// Where the request came from.
    pub source: AuditSource,
    /// Peer address (HTTP) or the operator's uid (CLI).
    pub peer: String,
    /// Whether the fields below were authenticated by a valid signature.
    pub authenticated: bool,
    /// The incident, as claimed by the request.
    pub incident_id: Option<String>,
    /// The command, as claimed by the request.
    pub command: Option<String>,
    /// The signing key id, as claimed.
    pub key_id: Option<String>,
    /// The nonce, as claimed.
    pub nonce: Option<String>,
    /// `accepted`, `duplicate`, `refused` or `finished`.
    pub outcome: String,
    /// Refusal reason or final state.
    pub detail: Option<String>,
    /// Human-readable explanation.
    pub message: Option<String>,
}

/// Cuts attacker-controlled text to a bounded length.
pub fn bounded(text: &str) -> String {
    if text.chars().count() <= MAX_FIELD_CHARS {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_FIELD_CHARS).collect();
        cut.push('…');
        cut
    }
}

/// Why a line could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Opening, writing or syncing the file failed.
    #[error("audit log {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The writer thread is gone.
    #[error("audit log writer stopped")]
    Stopped,
}

type Pending = (Vec<u8>, oneshot::Sender<Result<(), String>>);

/// Handle on the audit log writer. Cloning shares the writer.
#[derive(Debug, Clone)]
pub struct AuditLog {
    sender: mpsc::Sender<Pending>,
    path: PathBuf,
}

struct Writer {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
}

impl Writer {
    fn write_batch(&mut self, lines: &[&[u8]]) -> std::io::Result<()> {
        if self.size >= self.max_bytes {
            let rotated = self.path.with_extension("jsonl.1");
            std::fs::rename(&self.path, rotated)?;
            self.file = open_append(&self.path)?;
            self.size = 0;
            if let Some(dir) = self.path.parent() {
                File::open(dir)?.sync_all()?;
            }
        }
        let mut buffer = Vec::new();
        for line in lines {
            buffer.extend_from_slice(line);
        }
        self.file.write_all(&buffer)?;
        self.file.sync_data()?;
        self.size = self.size.saturating_add(buffer.len() as u64);
        Ok(())
    }
}

impl AuditLog {
    /// Opens (creating) the log in `state_dir` and starts its writer thread. The file is rotated
    /// once it exceeds `max_bytes`.
    pub fn open(state_dir: &Path, max_bytes: u64) -> Result<Self, AuditError> {
        Self::open_named(state_dir, AUDIT_FILE_NAME, max_bytes)
    }

    /// [`Self::open`] of the log `file_name` ([`AUDIT_FILE_NAME`] or [`REFUSED_FILE_NAME`]).
    pub fn open_named(
        state_dir: &Path,
        file_name: &str,
        max_bytes: u64,
    ) -> Result<Self, AuditError> {
        let path = state_dir.join(file_name);
        let io_error = |error: std::io::Error| AuditError::Io {
            path: path.display().to_string(),
            reason: error.to_string(),
        };
        let file = open_append(&path).map_err(io_error)?;
        let size = file.metadata().map_err(io_error)?.len();
        let mut writer = Writer {
            path: path.clone(),
            file,
            size,
            max_bytes,
        };
        let (sender, mut receiver) = mpsc::channel::<Pending>(4096);
        std::thread::Builder::new()
            .name("repair-audit".into())
            .spawn(move || {
                while let Some(first) = receiver.blocking_recv() {
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match receiver.try_recv() {
                            Ok(next) => batch.push(next),
                            Err(_) => break,
                        }
                    }
                    let lines: Vec<&[u8]> = batch.iter().map(|(line, _)| line.as_slice()).collect();
                    let result = writer.write_batch(&lines).map_err(|error| error.to_string());
                    if let Err(reason) = &result {
                        tracing::error!(path = %writer.path.display(), %reason, "cannot write the repair audit log");
                    }
                    for (_, reply) in batch {
                        let _ignored = reply.send(result.clone());
                    }
                }
            })
            .map_err(io_error)?;
        Ok(Self { sender, path })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` and waits until it is on disk.
    pub async fn record(&self, entry: &AuditEntry) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(entry).map_err(|error| AuditError::Io {
            path: self.path.display().to_string(),
            reason: error.to_string(),
        })?;
        line.push(b'\n');
        let (reply, done) = oneshot::channel();
        self.sender
            .send((line, reply))
            .await
            .map_err(|_| AuditError::Stopped)?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(AuditError::Io {
                path: self.path.display().to_string(),
                reason,
            }),
            Err(_) => Err(AuditError::Stopped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(outcome: &str) -> AuditEntry {
        AuditEntry {
            at: 1,
            source: AuditSource::Http,
            peer: "127.0.0.1:1".into(),
            authenticated: false,
            incident_id: None,
            command: Some(bounded(&"x".repeat(1000))),
            key_id: None,
            nonce: None,
            outcome: outcome.into(),
            detail: None,
            message: None,
        }
    }

    #[tokio::test]
    async fn lines_are_appended_and_rotated() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path(), 600).unwrap();
        for index in 0..4 {
            log.record(&entry(&format!("o{index}"))).await.unwrap();
        }
        let current = std::fs::read_to_string(log.path()).unwrap();
        let rotated = std::fs::read_to_string(dir.path().join("repair-audit.jsonl.1")).unwrap();
        let lines: Vec<&str> = rotated.lines().chain(current.lines()).collect();
        assert!(lines.len() >= 2 && lines.len() <= 4, "{lines:?}");
        for line in lines {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(value["command"].as_str().unwrap().chars().count() <= 129);
        }
        assert!(current.contains("\"o3\""));
    }

    #[test]
    fn bounded_cuts_long_text_only() {
        assert_eq!(bounded("abc"), "abc");
        assert_eq!(bounded(&"é".repeat(200)).chars().count(), 129);
    }
}
