//! Durable state: incidents, the executor's ledger (`ledger`; incidents' intents, the jobs the
//! coordinator means to submit or has submitted, are its entries: `node_repair`), agents' last
//! accepted sequence numbers, the repair-request sequence counter, and the gate's grants,
//! overrides, storm breaker and audit log (`admission`).
//!
//! SQLite in WAL mode with `synchronous=FULL`: a committed transaction survives a crash or a
//! power cut. An intent's entry is committed before its job is submitted; after a crash, an
//! intent without a job id is looked up in Ganeti's job list by its reason before anything is
//! resubmitted (see `reconcile`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

pub use nodecare_core::duty::node_repair::intent::{
    Intent, IntentSpec, IntentState, incident_flag_changes,
};
use nodecare_core::gate::FlagChange;
use nodecare_core::incident::Incident;

mod admission;
mod approvals;
mod campaign_ops;
mod freezes;
pub use approvals::APPROVALS_DOCUMENT;
pub use freezes::{FREEZES_DOCUMENT, Lifted};
mod instance_repairs;
mod ledger;
mod node_repair;
mod recorder;
pub mod retention;
mod snapshot;
pub use admission::{BREAKER_DOCUMENT, GRANT_RENEWALS_DOCUMENT, Revoked, SYSTEM};
pub use nodecare_protocol::gate::AuditEntry;
pub use recorder::{RecordedRounds, Written};

/// Schema version stored in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 6;

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("state database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored record does not decode.
    #[error("state database holds a corrupt record: {0}")]
    Corrupt(String),
    /// The database was written by a newer version.
    #[error("state database schema version {0} is newer than this coordinator ({SCHEMA_VERSION})")]
    TooNew(i64),
    /// The executor's ledger failed.
    #[error(transparent)]
    Ledger(#[from] nodecare_exec::ledger::LedgerError),
    /// A write would grow the replicated state past the budget of what it writes: refused,
    /// the state left as it was (why, and what to do about it).
    #[error("{0}")]
    Full(String),
    /// The creating directory failed.
    #[error("cannot create state directory {path}: {error}")]
    Directory {
        /// Directory.
        path: String,
        /// Cause.
        error: String,
    },
}

/// The store's document of the flags forgotten incidents left set ([`Store::left_flags`]).
pub const LEFT_FLAGS_DOCUMENT: &str = "left_flags";

/// Most bytes the audit log keeps in the replicated state (an eighth of the replica limit): past
/// it, its oldest lines go as a new one is written (the last breaker reset is kept).
pub const AUDIT_BUDGET_BYTES: u64 = nodecare_protocol::replica::MAX_REPLICA_BYTES / 8;

/// Most bytes of operator overrides the replicated state keeps (a thirty-second of the replica
/// limit): past it, the ended overrides go first, and a new override that still does not fit is
/// refused ([`StoreError::Full`]).
pub const OVERRIDES_BUDGET_BYTES: u64 = nodecare_protocol::replica::MAX_REPLICA_BYTES / 32;

/// The coordinator's state database.
#[derive(Debug)]
pub struct Store {
    connection: Mutex<Connection>,
    /// What the store keeps of the ledger in memory ([`Store::ledger_rows`]).
    ledger_memory: ledger::Memory,
    /// The campaigns last read, each with the text it was decoded from: a round reads them
    /// several times, and decodes only those whose stored text changed.
    campaigns_read: Mutex<Vec<(String, nodecare_core::campaign::Record)>>,
    /// Rows changed in the recorder's database (history, not replicated): left out of
    /// [`Store::changes`].
    history_changes: AtomicU64,
    /// Parts of recorded rounds decoded by the reads of the recorder, since the store opened.
    recorder_parts_decoded: AtomicU64,
}

/// The flight recorder's database beside the state's at `state` (`state.db` →
/// `state-recorder.db`): history, never replicated.
pub fn recorder_path(state: &Path) -> std::path::PathBuf {
    let stem = state
        .file_stem()
        .map_or_else(|| "state".into(), |stem| stem.to_string_lossy());
    state.with_file_name(format!("{stem}{}", recorder::RECORDER_FILE_SUFFIX))
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl Store {
    /// Opens (creating if needed) `state.db` in `dir`.
    pub fn open_dir(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|error| StoreError::Directory {
            path: dir.display().to_string(),
            error: error.to_string(),
        })?;
        Self::open(&dir.join("state.db"))
    }

    /// Opens (creating if needed) the database file at `path`, and the flight recorder's beside
    /// it ([`recorder_path`]).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        ensure_incremental_vacuum(&connection, "main")?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        // SQLite's names of a database in memory (or a temporary one): its recorder is too.
        let recorder = if path.as_os_str().is_empty() || path.as_os_str() == ":memory:" {
            ":memory:".to_owned()
        } else {
            recorder_path(path).to_string_lossy().into_owned()
        };
        recorder::attach(&connection, &recorder)?;
        migrate(&connection)?;
        Self::with_connection(connection)
    }

    /// The store over an open connection at this schema.
    fn with_connection(connection: Connection) -> Result<Self, StoreError> {
        let ledger_memory = ledger::Memory::default();
        ledger_memory.watch_writes(&connection)?;
        Ok(Self {
            connection: Mutex::new(connection),
            ledger_memory,
            campaigns_read: Mutex::default(),
            history_changes: AtomicU64::new(0),
            recorder_parts_decoded: AtomicU64::new(0),
        })
    }

    /// Counts `rows` changed in the recorder's database: they are not changes of the state.
    fn not_state_changes(&self, rows: u64) {
        self.history_changes.fetch_add(rows, Ordering::Relaxed);
    }

    /// The document stored under `name`, if any.
    pub fn document<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, StoreError> {
        document_in(&self.lock(), name)
    }

    /// Stores `value` under `name`, replacing what was there.
    pub fn save_document<T: serde::Serialize>(
        &self,
        name: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        save_document_in(&self.lock(), name, value)
    }

    /// Every balancing move (the ledger's balancing entries), oldest first.
    pub fn balancing_moves(
        &self,
    ) -> Result<Vec<nodecare_core::duty::balancing::BalanceMove>, StoreError> {
        use nodecare_exec::ledger::Ledger as _;
        Ok(self
            .entries()?
            .iter()
            .filter_map(nodecare_core::duty::balancing::BalanceMove::from_entry)
            .collect())
    }

    /// Stores balancing moves as ledger entries: records those not recorded yet, marks the
    /// others (moves written by hand, and by earlier versions).
    pub fn save_balancing_moves(
        &self,
        moves: &[nodecare_core::duty::balancing::BalanceMove],
    ) -> Result<(), StoreError> {
        use nodecare_exec::ledger::Ledger as _;
        let entries = self.entries()?;
        let mut new = Vec::new();
        for m in moves {
            let mut entry = m.to_entry();
            match entries
                .iter()
                .find(|e| e.holder == entry.holder && e.key == entry.key)
            {
                Some(stored) => {
                    entry.id = stored.id;
                    self.mark(&entry)?;
                }
                None => new.push(entry),
            }
        }
        self.record(&new)?;
        Ok(())
    }

    /// Forgets the balancing runs recorded before `before_ms` whose moves are all finished;
    /// returns how many moves were forgotten.
    pub fn prune_balancing_moves(&self, before_ms: u64) -> Result<usize, StoreError> {
        use nodecare_exec::ledger::Ledger as _;
        Ok(self.prune("balancing", before_ms)?)
    }

    /// Every stored maintenance campaign, newest first. A campaign whose stored text is the one
    /// last read is not decoded again.
    pub fn campaigns(&self) -> Result<Vec<nodecare_core::campaign::Record>, StoreError> {
        let texts = {
            let connection = self.lock();
            let mut statement = connection.prepare_cached(
                "SELECT record FROM campaigns ORDER BY created_ms DESC, rowid DESC",
            )?;
            let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
            rows.collect::<Result<Vec<String>, _>>()?
        };
        let mut read = self
            .campaigns_read
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut campaigns = Vec::with_capacity(texts.len());
        let mut now_read = Vec::with_capacity(texts.len());
        for text in texts {
            let record = match read.iter().position(|(known, _)| *known == text) {
                Some(at) => read.swap_remove(at).1,
                None => serde_json::from_str(&text)
                    .map_err(|error| StoreError::Corrupt(format!("campaign: {error}")))?,
            };
            campaigns.push(nodecare_core::campaign::Record::clone(&record));
            now_read.push((text, record));
        }
        *read = now_read;
        Ok(campaigns)
    }

    /// Stores (inserts or replaces) a maintenance campaign.
    pub fn save_campaign(
        &self,
        record: &nodecare_core::campaign::Record,
    ) -> Result<(), StoreError> {
        save_campaign_in(&self.lock(), record)
    }

    /// Saves `record` and records the ledger `entries` of the operations it planned in one
    /// durable write; returns the entries recorded.
    pub fn save_campaign_recording(
        &self,
        record: &nodecare_core::campaign::Record,
        entries: &[nodecare_exec::ledger::Entry],
    ) -> Result<Vec<nodecare_exec::ledger::Entry>, nodecare_exec::ledger::LedgerError> {
        self.record_with(entries, |transaction| save_campaign_in(transaction, record))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent (transactions roll
        // back), so a poisoned lock is still usable.
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every stored incident, oldest first.
    pub fn incidents(&self) -> Result<Vec<Incident>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare("SELECT record FROM incidents")?;
        let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
        let mut incidents = Vec::new();
        for row in rows {
            let text = row?;
            let incident = decode_incident(&text)
                .map_err(|error| StoreError::Corrupt(format!("incident: {error}")))?;
            incidents.push(incident);
        }
        incidents.sort_by(|a, b| a.ctime.total_cmp(&b.ctime).then(a.uuid.cmp(&b.uuid)));
        Ok(incidents)
    }

    /// One incident.
    pub fn incident(&self, uuid: Uuid) -> Result<Option<Incident>, StoreError> {
        let connection = self.lock();
        let text: Option<String> = connection
            .query_row(
                "SELECT record FROM incidents WHERE uuid = ?1",
                params![uuid.to_string()],
                |row| row.get(0),
            )
            .optional()?;
        text.map(|text| {
            decode_incident(&text)
                .map_err(|error| StoreError::Corrupt(format!("incident {uuid}: {error}")))
        })
        .transpose()
    }

    /// Inserts or replaces an incident.
    pub fn save_incident(&self, incident: &Incident) -> Result<(), StoreError> {
        let connection = self.lock();
        save_incident(&connection, incident)
    }

    /// Deletes an incident and its intents. The drained and offline flags its jobs left set
    /// are remembered first ([`Self::left_flags`]), so the node is not shown as flagged
    /// outside nodecare once the incident is gone.
    pub fn forget_incident(&self, uuid: Uuid) -> Result<(), StoreError> {
        let incident: Vec<Incident> = self.incident(uuid)?.into_iter().collect();
        let intents: Vec<Intent> = self
            .intents()?
            .into_iter()
            .filter(|i| i.incident == uuid)
            .collect();
        let left: Vec<FlagChange> = incident_flag_changes(&incident, &intents)
            .into_iter()
            .filter(|change| change.set)
            .collect();
        if !left.is_empty() {
            let mut remembered: Vec<FlagChange> =
                self.document(LEFT_FLAGS_DOCUMENT)?.unwrap_or_default();
            remembered.extend(left);
            self.save_document(
                LEFT_FLAGS_DOCUMENT,
                &nodecare_core::gate::latest_flag_changes(remembered),
            )?;
        }
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        node_repair::forget(&transaction, uuid)?;
        transaction.execute(
            "DELETE FROM incidents WHERE uuid = ?1",
            params![uuid.to_string()],
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// The drained and offline flags set by forgotten incidents that nodes in `view` still
    /// carry; those of nodes seen back in service since are dropped for good
    /// ([`nodecare_core::gate::still_left`]).
    pub fn left_flags(
        &self,
        view: &nodecare_core::gate::View,
    ) -> Result<Vec<FlagChange>, StoreError> {
        let remembered: Vec<FlagChange> = self.document(LEFT_FLAGS_DOCUMENT)?.unwrap_or_default();
        let kept = nodecare_core::gate::still_left(view, remembered.clone());
        if kept != remembered {
            self.save_document(LEFT_FLAGS_DOCUMENT, &kept)?;
        }
        Ok(kept)
    }

    /// Records a new intent (state planned) as the incident's ledger entry, atomically with
    /// the incident's new record.
    pub fn plan_intent(&self, incident: &Incident, intent: &Intent) -> Result<(), StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        save_incident(&transaction, incident)?;
        node_repair::save(&transaction, intent, &incident.node)?;
        transaction.commit()?;
        Ok(())
    }

    /// Updates an intent's entry, atomically with the incident's new record.
    pub fn update_intent(&self, incident: &Incident, intent: &Intent) -> Result<(), StoreError> {
        self.plan_intent(incident, intent)
    }

    /// Deletes an intent that was never submitted.
    pub fn drop_intent(&self, incident: Uuid, key: &str) -> Result<(), StoreError> {
        node_repair::drop(&self.lock(), incident, key)
    }

    /// Every intent (the incidents' ledger entries), in recording order.
    pub fn intents(&self) -> Result<Vec<Intent>, StoreError> {
        node_repair::all(&self.lock())
    }

    /// Last accepted report sequence per node.
    pub fn agent_sequences(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare("SELECT node, sequence FROM agent_sequences")?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, to_u64(row.get::<_, i64>(1)?)))
        })?;
        let mut sequences = BTreeMap::new();
        for row in rows {
            let (node, sequence) = row?;
            sequences.insert(node, sequence);
        }
        Ok(sequences)
    }

    /// Stores accepted report sequences (only ever raised) in one transaction.
    pub fn save_agent_sequences(&self, sequences: &[(String, u64)]) -> Result<(), StoreError> {
        if sequences.is_empty() {
            return Ok(());
        }
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        {
            let mut statement = transaction.prepare_cached(
                "INSERT INTO agent_sequences (node, sequence) VALUES (?1, ?2)
                 ON CONFLICT(node) DO UPDATE SET sequence = max(sequence, excluded.sequence)",
            )?;
            for (node, sequence) in sequences {
                statement.execute(params![node, to_i64(*sequence)])?;
            }
        }
        transaction.commit()?;
        Ok(())
    }

    /// Returns a new value of a strictly increasing, durable counter (starting at `floor` if
    /// that is higher, e.g. the current time in ms, so a lost database never reuses values).
    pub fn next_counter(&self, name: &str, floor: u64) -> Result<u64, StoreError> {
        let connection = self.lock();
        let value: i64 = connection.query_row(
            "INSERT INTO counters (name, value) VALUES (?1, ?2)
             ON CONFLICT(name) DO UPDATE SET value = max(value + 1, excluded.value)
             RETURNING value",
            params![name, to_i64(floor)],
            |row| row.get(0),
        )?;
        Ok(to_u64(value))
    }

    /// Reserves `count` (at least 1) consecutive new values of the counter of
    /// [`Store::next_counter`] in one durable write; returns the first.
    pub fn next_counters(&self, name: &str, count: u64, floor: u64) -> Result<u64, StoreError> {
        let count = count.max(1);
        let connection = self.lock();
        let last: i64 = connection.query_row(
            "INSERT INTO counters (name, value) VALUES (?1, ?2)
             ON CONFLICT(name) DO UPDATE SET value = max(value + ?3, excluded.value)
             RETURNING value",
            params![name, to_i64(floor.saturating_add(count - 1)), to_i64(count)],
            |row| row.get(0),
        )?;
        Ok(to_u64(last).saturating_sub(count - 1))
    }
}

/// Brings `connection`'s database to this coordinator's schema (every version's tables, the
/// additive ones included); refuses a newer one. Also run on a snapshot before it is restored,
/// so a copy pushed by an older coordinator restores as this one's schema.
fn migrate(connection: &Connection) -> Result<(), StoreError> {
    let version: i64 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::TooNew(version));
    }
    if version < 1 {
        connection.execute_batch(
            "BEGIN;
             CREATE TABLE IF NOT EXISTS incidents (
                 uuid TEXT PRIMARY KEY,
                 node_uuid TEXT NOT NULL,
                 fingerprint TEXT NOT NULL,
                 record TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS incidents_identity ON incidents(node_uuid, fingerprint);
             CREATE TABLE IF NOT EXISTS intents (
                 incident TEXT NOT NULL REFERENCES incidents(uuid) ON DELETE CASCADE,
                 key TEXT NOT NULL,
                 spec TEXT NOT NULL,
                 locks TEXT NOT NULL,
                 state TEXT NOT NULL,
                 job_id INTEGER,
                 created_ms INTEGER NOT NULL,
                 submitted_ms INTEGER,
                 finished_ms INTEGER,
                 error TEXT,
                 PRIMARY KEY (incident, key));
             CREATE TABLE IF NOT EXISTS agent_sequences (
                 node TEXT PRIMARY KEY,
                 sequence INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS counters (
                 name TEXT PRIMARY KEY,
                 value INTEGER NOT NULL);
             PRAGMA user_version = 1;
             COMMIT;",
        )?;
    }
    if version < 2 {
        admission::migrate(connection)?;
    }
    // Small typed records (the storm breaker's state): one JSON document per name.
    connection.execute_batch(
        "CREATE TABLE IF NOT EXISTS documents (
             name TEXT PRIMARY KEY,
             record TEXT NOT NULL);",
    )?;
    connection.execute_batch(
        "CREATE TABLE IF NOT EXISTS campaigns (
             id TEXT PRIMARY KEY,
             created_ms INTEGER NOT NULL,
             record TEXT NOT NULL);",
    )?;
    // The executor's ledger (balancing moves of earlier versions carried over).
    if version < 3 {
        ledger::migrate(connection)?;
    }
    // Node repair's intents move into the ledger.
    if version < 4 {
        node_repair::migrate(connection)?;
    }
    // Campaigns' operations move into the ledger.
    if version < 5 {
        campaign_ops::migrate(connection)?;
    }
    // Instance repairs in flight move into the ledger (their table dropped).
    if version < 6 {
        instance_repairs::migrate(connection)?;
    }
    // The flight recorder's rounds, in their own database (an index on the ledger).
    recorder::migrate(connection)?;
    Ok(())
}

/// The document stored under `name` through `connection` (a transaction of several writes, or
/// the connection itself), if any.
pub(super) fn document_in<T: serde::de::DeserializeOwned>(
    connection: &Connection,
    name: &str,
) -> Result<Option<T>, StoreError> {
    let text: Option<String> = connection
        .query_row(
            "SELECT record FROM documents WHERE name = ?1",
            params![name],
            |row| row.get(0),
        )
        .optional()?;
    text.map(|text| {
        serde_json::from_str(&text)
            .map_err(|error| StoreError::Corrupt(format!("document {name}: {error}")))
    })
    .transpose()
}

/// Stores `value` under `name` through `connection`, replacing what was there.
pub(super) fn save_document_in<T: serde::Serialize>(
    connection: &Connection,
    name: &str,
    value: &T,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(value)
        .map_err(|error| StoreError::Corrupt(format!("encoding document {name}: {error}")))?;
    connection.execute(
        "INSERT INTO documents (name, record) VALUES (?1, ?2)
         ON CONFLICT(name) DO UPDATE SET record = excluded.record",
        params![name, text],
    )?;
    Ok(())
}

fn save_incident(connection: &Connection, incident: &Incident) -> Result<(), StoreError> {
    // A cancel is recorded at once, while a round may hold a copy read before it: such a
    // copy never replaces the canceled record (canceled is final, and every change of a
    // canceled record bumps its serial number).
    let stored: Option<String> = connection
        .query_row(
            "SELECT record FROM incidents WHERE uuid = ?1",
            params![incident.uuid.to_string()],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(stored) = stored
        && let Ok(stored) = serde_json::from_str::<serde_json::Value>(&stored)
        && stored
            .get("repair-status")
            .and_then(serde_json::Value::as_str)
            == Some(nodecare_core::incident::RepairStatus::Canceled.as_str())
    {
        let serial = stored
            .get("serial_no")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if incident.repair_status != nodecare_core::incident::RepairStatus::Canceled
            || incident.serial_no <= serial
        {
            tracing::debug!(incident = %incident.uuid, "an older copy of a canceled incident is not saved");
            return Ok(());
        }
    }
    let record = serde_json::to_string(incident)
        .map_err(|error| StoreError::Corrupt(format!("encoding incident: {error}")))?;
    connection.execute(
        "INSERT INTO incidents (uuid, node_uuid, fingerprint, record) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(uuid) DO UPDATE SET node_uuid = excluded.node_uuid,
             fingerprint = excluded.fingerprint, record = excluded.record",
        params![
            incident.uuid.to_string(),
            incident.node_uuid,
            incident.fingerprint,
            record
        ],
    )?;
    Ok(())
}

/// Reads a stored incident record. Records written before incidents carried the decoded
/// `verdict` have only `original` (the same verdict as JSON): it is decoded from there.
fn decode_incident(text: &str) -> Result<Incident, serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(text)?;
    if let serde_json::Value::Object(map) = &mut value
        && !map.contains_key("verdict")
        && let Some(original) = map.get("original").cloned()
    {
        map.insert("verdict".into(), original);
    }
    serde_json::from_value(value)
}

/// Saves (inserts or replaces) campaign `record` through `connection`.
fn save_campaign_in(
    connection: &Connection,
    record: &nodecare_core::campaign::Record,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(record)
        .map_err(|error| StoreError::Corrupt(format!("encoding campaign: {error}")))?;
    connection
        .prepare_cached(
            "INSERT INTO campaigns (id, created_ms, record) VALUES (?1, ?2, ?3)
             ON CONFLICT(id) DO UPDATE SET record = excluded.record",
        )?
        .execute(params![
            record.campaign.id,
            i64::try_from(record.campaign.created_ms).unwrap_or(i64::MAX),
            text
        ])?;
    Ok(())
}

/// Sets `auto_vacuum = INCREMENTAL` on `schema` (the state's database or the recorder's): before
/// the first table of a new database, or by a one-time `VACUUM` of an existing one (which
/// rewrites the file: it takes as long as copying it).
pub(crate) fn ensure_incremental_vacuum(
    connection: &Connection,
    name: &str,
) -> Result<(), StoreError> {
    const INCREMENTAL: i64 = 2;
    let schema = name;
    let mode: i64 = connection.pragma_query_value(Some(schema), "auto_vacuum", |row| row.get(0))?;
    if mode == INCREMENTAL {
        return Ok(());
    }
    connection.pragma_update(Some(schema), "auto_vacuum", "INCREMENTAL")?;
    let tables: i64 = connection.query_row(
        &format!("SELECT count(*) FROM {name}.sqlite_master WHERE type = 'table'"),
        [],
        |row| row.get(0),
    )?;
    if tables > 0 {
        tracing::info!(
            database = name,
            "converting a database to incremental vacuum (once)"
        );
        connection.execute_batch(&format!("VACUUM {name}"))?;
    }
    Ok(())
}

/// The file of `schema` on `connection` and its write-ahead log, in bytes (0 in memory).
pub(crate) fn file_bytes(connection: &Connection, schema: &str) -> Result<u64, StoreError> {
    let path: Option<String> = connection
        .query_row(
            "SELECT file FROM pragma_database_list WHERE name = ?1",
            params![schema],
            |row| row.get(0),
        )
        .optional()?;
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        return Ok(0);
    };
    Ok([path.clone(), format!("{path}-wal")]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_core::incident::{Action, Event};
    use nodecare_core::plan::Lock;
    use nodecare_protocol::{CanonicalJson, NodeVerdict, ScriptVerdict};

    pub(super) fn incident(n: u128) -> Incident {
        let verdict = NodeVerdict::merge(
            [(
                "disk".to_owned(),
                ScriptVerdict::parse(br#"{"status":"evacuate"}"#).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original = CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap();
        Incident::new(
            Uuid::from_u128(n),
            "node1",
            "u1",
            verdict,
            original,
            Action::Evacuate,
            n as f64,
        )
    }

    /// A round's copy read before a cancel never brings the incident back to life.
    #[test]
    fn a_canceled_incident_is_not_replaced_by_an_older_copy() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let mut pending = incident(1);
        pending
            .apply(Event::ActionStarted("draining".into()), 2.0)
            .unwrap();
        store.save_incident(&pending).unwrap();
        let mut canceled = pending.clone();
        canceled.apply(Event::Cancel, 3.0).unwrap();
        store.save_incident(&canceled).unwrap();
        // The round's copy goes on: a job submitted, then a failure.
        let mut stale = pending.clone();
        stale.apply(Event::JobSubmitted(7), 4.0).unwrap();
        store.save_incident(&stale).unwrap();
        stale.apply(Event::ActionFailed("x".into()), 5.0).unwrap();
        store.plan_intent(&stale, &intent_of(&stale)).unwrap();
        let kept = store.incident(canceled.uuid).unwrap().unwrap();
        assert_eq!(kept, canceled);
        // The intent is recorded all the same (its job is to be canceled).
        assert_eq!(store.intents().unwrap().len(), 1);
        // A canceled copy older than the record is not saved; a newer one is.
        let mut older = canceled.clone();
        older.serial_no = canceled.serial_no;
        older.history.clear();
        store.save_incident(&older).unwrap();
        assert_eq!(store.incident(canceled.uuid).unwrap().unwrap(), canceled);
        let mut newer = canceled.clone();
        newer
            .apply(Event::Progress("job 7 canceled".into()), 6.0)
            .unwrap();
        store.save_incident(&newer).unwrap();
        assert_eq!(store.incident(canceled.uuid).unwrap().unwrap(), newer);
    }

    fn intent_of(incident: &Incident) -> Intent {
        Intent {
            incident: incident.uuid,
            key: "drain".into(),
            spec: IntentSpec::Drain {
                node: "node1".into(),
            },
            locks: vec![],
            state: IntentState::Planned,
            job_id: None,
            created_ms: 1,
            submitted_ms: None,
            finished_ms: None,
            error: None,
        }
    }

    #[test]
    fn balancing_moves_round_trip_and_old_finished_runs_are_forgotten() {
        use nodecare_core::duty::balancing::{BalanceMove, MoveState};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let stored = |run: u128, key: &str, state: MoveState, created_ms: u64| BalanceMove {
            run: Uuid::from_u128(run),
            key: key.into(),
            holder: Uuid::from_u128(100 + run),
            group: "default".into(),
            instance: "inst1".into(),
            op: nodecare_roll::hbal::HbalOp::ReplaceSecondary { node: "n3".into() },
            state,
            job_id: Some(7),
            created_ms,
            finished_ms: None,
            error: None,
        };
        let moves = [
            stored(1, "inst1-1", MoveState::Succeeded, 10),
            stored(1, "inst1-2", MoveState::Failed, 10),
            stored(2, "inst1-1", MoveState::Succeeded, 10),
            stored(2, "inst1-2", MoveState::Submitted, 10),
            stored(3, "inst1-1", MoveState::Succeeded, 500),
        ];
        store.save_balancing_moves(&moves).unwrap();
        assert_eq!(store.balancing_moves().unwrap(), moves);
        // Run 1 is old and done; run 2 has a move in flight; run 3 is recent.
        assert_eq!(store.prune_balancing_moves(100).unwrap(), 2);
        assert_eq!(store.balancing_moves().unwrap(), moves[2..]);
        // Reopening keeps the table and its rows.
        drop(store);
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        assert_eq!(store.balancing_moves().unwrap().len(), 3);
    }

    #[test]
    fn records_without_a_decoded_verdict_are_read_from_original() {
        let stored = incident(4);
        let mut value = serde_json::to_value(&stored).unwrap();
        value.as_object_mut().unwrap().remove("verdict");
        let back = decode_incident(&value.to_string()).unwrap();
        assert_eq!(back, stored);
        value.as_object_mut().unwrap().remove("original");
        assert!(decode_incident(&value.to_string()).is_err());
    }

    #[test]
    fn incidents_and_intents_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = incident(1);
        {
            let store = Store::open_dir(dir.path()).unwrap();
            store.save_incident(&incident(2)).unwrap();
            first.apply(Event::JobSubmitted(9), 3.0).unwrap();
            let intent = Intent {
                incident: first.uuid,
                key: "drain".into(),
                spec: IntentSpec::Drain {
                    node: "node1".into(),
                },
                locks: vec![Lock::Node("node1".into())],
                state: IntentState::Submitted,
                job_id: Some(9),
                created_ms: 1,
                submitted_ms: Some(2),
                finished_ms: None,
                error: None,
            };
            store.plan_intent(&first, &intent).unwrap();
            store
                .save_agent_sequences(&[("node1".into(), 5), ("node2".into(), 7)])
                .unwrap();
            store.save_agent_sequences(&[("node1".into(), 3)]).unwrap();
        }
        let store = Store::open_dir(dir.path()).unwrap();
        let incidents = store.incidents().unwrap();
        assert_eq!(incidents.len(), 2);
        assert_eq!(incidents[0], first);
        let intents = store.intents().unwrap();
        assert_eq!(intents.len(), 1);
        assert_eq!(intents[0].job_id, Some(9));
        assert_eq!(intents[0].locks, vec![Lock::Node("node1".into())]);
        // Sequences only go up.
        assert_eq!(store.agent_sequences().unwrap()["node1"], 5);
        store.forget_incident(first.uuid).unwrap();
        assert!(
            store.intents().unwrap().is_empty(),
            "intents are deleted with the incident"
        );
        assert!(store.incident(first.uuid).unwrap().is_none());
    }

    #[test]
    fn counter_is_strictly_increasing_and_respects_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        assert_eq!(store.next_counter("seq", 100).unwrap(), 100);
        assert_eq!(store.next_counter("seq", 50).unwrap(), 101);
        assert_eq!(store.next_counter("seq", 500).unwrap(), 500);
        // A block of values: none given before, none given again after.
        assert_eq!(store.next_counters("seq", 3, 50).unwrap(), 501);
        assert_eq!(store.next_counter("seq", 50).unwrap(), 504);
        assert_eq!(store.next_counters("seq", 2, 1_000).unwrap(), 1_000);
        assert_eq!(store.next_counter("seq", 50).unwrap(), 1_002);
        assert_eq!(store.next_counters("new", 4, 7).unwrap(), 7);
        assert_eq!(store.next_counter("new", 0).unwrap(), 11);
        assert_eq!(store.next_counters("new", 0, 0).unwrap(), 12);
        assert_eq!(store.next_counter("new", 0).unwrap(), 13);
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", 99)
            .unwrap();
        assert!(matches!(Store::open(&path), Err(StoreError::TooNew(99))));
    }
}
