//! The flight recorder's rounds (`nodecare_core::recorder`): each recorded round is a row with
//! its parts, and each part's bytes are kept once by their content (SHA-256), so a view or a
//! policy that did not change between recorded rounds costs one row reference.
//!
//! The recorder is history, not state: its tables live in a database of their own (the file
//! [`RECORDER_FILE_SUFFIX`] beside the state's, attached to the state's connection as
//! [`SCHEMA`]), which is never replicated. The snapshot pushed to the master candidates is the
//! state's own database only, so however much the recorder keeps, it never crowds out what must
//! be replicated; a coordinator that takes over keeps the recorder of its own node (the rounds
//! it recorded when it was the master, if ever).
//!
//! Tables: `recorder_rounds` (one row per recorded round), `recorder_round_parts` (round → part
//! → hash) and `recorder_parts` (hash → bytes). Versions that kept them in the state's own
//! database are moved out at the first open ([`migrate`]).

use std::collections::{BTreeMap, HashMap};

use rusqlite::{Connection, OptionalExtension, params};
use sha2::Digest;

use nodecare_core::recorder::{Part, Recorded, RoundRecord};

use super::{Store, StoreError, to_i64, to_u64};

/// The schema name of the recorder's database on the state's connection.
pub(super) const SCHEMA: &str = "recorder";

/// What the recorder's file is named after the state's file stem (`state.db` →
/// `state-recorder.db`).
pub(super) const RECORDER_FILE_SUFFIX: &str = "-recorder.db";

/// The recorder's tables, oldest dependency last.
const TABLES: [&str; 3] = ["recorder_round_parts", "recorder_parts", "recorder_rounds"];

/// Whether `schema` of `connection` has table `table`.
fn has_table(connection: &Connection, schema: &str, table: &str) -> Result<bool, StoreError> {
    Ok(connection.query_row(
        &format!("SELECT EXISTS (SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?1)"),
        params![table],
        |row| row.get(0),
    )?)
}

/// Whether the recorder's database is attached to `connection`.
fn attached(connection: &Connection) -> Result<bool, StoreError> {
    Ok(connection.query_row(
        "SELECT EXISTS (SELECT 1 FROM pragma_database_list WHERE name = ?1)",
        params![SCHEMA],
        |row| row.get(0),
    )?)
}

/// Attaches the recorder's database `file` (`:memory:` for a store in memory) to `connection`,
/// in incremental auto-vacuum and (for a file) WAL mode.
pub(super) fn attach(connection: &Connection, file: &str) -> Result<(), StoreError> {
    connection.execute("ATTACH DATABASE ?1 AS recorder", params![file])?;
    super::ensure_incremental_vacuum(connection, SCHEMA)?;
    if file != ":memory:" {
        connection.pragma_update(Some(SCHEMA), "journal_mode", "WAL")?;
        // History: a crash may lose its last rounds, never the state's consistency.
        connection.pragma_update(Some(SCHEMA), "synchronous", "NORMAL")?;
    }
    Ok(())
}

/// Creates the recorder's tables in its own database and moves there the rounds an earlier
/// version kept in the state's database. Without the recorder's database attached (a snapshot
/// being restored), the state's copies of those tables are dropped: they are never restored.
pub(super) fn migrate(connection: &Connection) -> Result<(), StoreError> {
    connection
        .execute_batch("CREATE INDEX IF NOT EXISTS main.ledger_recorded ON ledger(recorded_ms);")?;
    let attached = attached(connection)?;
    if attached {
        connection.execute_batch(
            "CREATE TABLE IF NOT EXISTS recorder.recorder_rounds (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 at_ms INTEGER NOT NULL,
                 last_ms INTEGER NOT NULL,
                 repeats INTEGER NOT NULL,
                 coordinator TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS recorder.recorder_rounds_at ON recorder_rounds(at_ms);
             CREATE TABLE IF NOT EXISTS recorder.recorder_round_parts (
                 round INTEGER NOT NULL,
                 part TEXT NOT NULL,
                 hash TEXT NOT NULL,
                 PRIMARY KEY (round, part));
             CREATE INDEX IF NOT EXISTS recorder.recorder_round_parts_hash
                 ON recorder_round_parts(hash);
             CREATE TABLE IF NOT EXISTS recorder.recorder_parts (
                 hash TEXT PRIMARY KEY,
                 bytes BLOB NOT NULL);",
        )?;
    }
    let mut dropped = false;
    for table in TABLES {
        if !has_table(connection, "main", table)? {
            continue;
        }
        if attached {
            connection.execute_batch(&format!(
                "INSERT OR IGNORE INTO recorder.{table} SELECT * FROM main.{table};"
            ))?;
        }
        connection.execute_batch(&format!("DROP TABLE main.{table};"))?;
        dropped = true;
    }
    if dropped {
        // The pages they held go back at once: a snapshot copies the free pages too.
        let mut statement = connection.prepare("PRAGMA main.incremental_vacuum")?;
        let mut rows = statement.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}

/// What recording one round wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The round's number.
    pub round: u64,
    /// Bytes of the parts new to the recorder (the parts it shares with earlier rounds cost
    /// nothing more).
    pub new_bytes: usize,
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("recorder: {what}"))
}

impl Store {
    /// Records `record` as a new round; its parts already kept are not written again.
    pub fn record_round(&self, record: &RoundRecord) -> Result<Written, StoreError> {
        let parts = record.parts().map_err(corrupt)?;
        let mut connection = self.lock();
        let before = connection.total_changes();
        let transaction = connection.transaction()?;
        transaction.execute(
            "INSERT INTO recorder.recorder_rounds (at_ms, last_ms, repeats, coordinator)
             VALUES (?1, ?1, 0, ?2)",
            params![to_i64(record.now_ms), record.coordinator],
        )?;
        let round = transaction.last_insert_rowid();
        let mut new_bytes = 0;
        for (part, bytes) in parts {
            let hash = hex::encode(sha2::Sha256::digest(&bytes));
            let inserted = transaction.execute(
                "INSERT OR IGNORE INTO recorder.recorder_parts (hash, bytes) VALUES (?1, ?2)",
                params![hash, bytes],
            )?;
            if inserted > 0 {
                new_bytes += bytes.len();
            }
            transaction.execute(
                "INSERT INTO recorder.recorder_round_parts (round, part, hash) VALUES (?1, ?2, ?3)",
                params![round, part.name(), hash],
            )?;
        }
        transaction.commit()?;
        self.not_state_changes(connection.total_changes().saturating_sub(before));
        Ok(Written {
            round: to_u64(round),
            new_bytes,
        })
    }

    /// Notes that `repeats` later rounds, the last at `last_ms`, decided what round `round` did.
    pub fn note_round_repeats(
        &self,
        round: u64,
        last_ms: u64,
        repeats: u64,
    ) -> Result<(), StoreError> {
        let changed = self.lock().execute(
            "UPDATE recorder.recorder_rounds SET last_ms = ?2, repeats = ?3 WHERE id = ?1",
            params![to_i64(round), to_i64(last_ms), to_i64(repeats)],
        )?;
        self.not_state_changes(u64::try_from(changed).unwrap_or(0));
        Ok(())
    }

    /// The recorded rounds at or before `until_ms` (all when `None`), the newest `limit` of them,
    /// newest first.
    pub fn recorded_rounds(
        &self,
        until_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Recorded>, StoreError> {
        let connection = self.lock();
        let rows: Vec<(i64, i64, i64, i64, String)> = {
            let mut statement = connection.prepare(
                "SELECT id, at_ms, last_ms, repeats, coordinator FROM recorder.recorder_rounds
                 WHERE at_ms <= ?1 ORDER BY at_ms DESC, id DESC LIMIT ?2",
            )?;
            let rows = statement.query_map(
                params![
                    until_ms.map_or(i64::MAX, to_i64),
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                    ))
                },
            )?;
            rows.collect::<Result<_, _>>()?
        };
        let mut bytes_of: HashMap<String, Vec<u8>> = HashMap::new();
        let mut parts_of = connection
            .prepare("SELECT part, hash FROM recorder.recorder_round_parts WHERE round = ?1")?;
        let mut bytes_statement =
            connection.prepare("SELECT bytes FROM recorder.recorder_parts WHERE hash = ?1")?;
        let mut recorded = Vec::with_capacity(rows.len());
        for (id, at_ms, last_ms, repeats, coordinator) in rows {
            let mut parts: BTreeMap<Part, Vec<u8>> = BTreeMap::new();
            let named: Vec<(String, String)> = parts_of
                .query_map(params![id], |row| Ok((row.get(0)?, row.get(1)?)))?
                .collect::<Result<_, _>>()?;
            for (name, hash) in named {
                let part = Part::parse(&name)
                    .ok_or_else(|| corrupt(format!("round {id}: unknown part {name:?}")))?;
                if !bytes_of.contains_key(&hash) {
                    let bytes: Vec<u8> = bytes_statement
                        .query_row(params![hash], |row| row.get(0))
                        .optional()?
                        .ok_or_else(|| corrupt(format!("round {id}: part {name} missing")))?;
                    bytes_of.insert(hash.clone(), bytes);
                }
                if let Some(bytes) = bytes_of.get(&hash) {
                    parts.insert(part, bytes.clone());
                }
            }
            let record = RoundRecord::from_parts(to_u64(at_ms), coordinator, &parts)
                .map_err(|error| corrupt(format!("round {id}: {error}")))?;
            recorded.push(Recorded {
                round: to_u64(id),
                last_ms: to_u64(last_ms),
                repeats: to_u64(repeats),
                record,
            });
        }
        Ok(recorded)
    }

    /// Whether the ledger has an entry recorded at `now_ms` (a round's time: an operation the
    /// round planned).
    pub fn ledger_recorded_at(&self, now_ms: u64) -> Result<bool, StoreError> {
        let planned: bool = self.lock().query_row(
            "SELECT EXISTS (SELECT 1 FROM ledger WHERE recorded_ms = ?1)",
            params![to_i64(now_ms)],
            |row| row.get(0),
        )?;
        Ok(planned)
    }

    /// Size of the recorder in the database: rounds, distinct parts and their bytes.
    pub fn recorder_size(&self) -> Result<(u64, u64, u64), StoreError> {
        let connection = self.lock();
        let rounds: i64 =
            connection.query_row("SELECT count(*) FROM recorder.recorder_rounds", [], |row| {
                row.get(0)
            })?;
        let (parts, bytes): (i64, i64) = connection.query_row(
            "SELECT count(*), coalesce(sum(length(bytes)), 0) FROM recorder.recorder_parts",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok((to_u64(rounds), to_u64(parts), to_u64(bytes)))
    }

    /// The recorder's database on disk: its file and its write-ahead log, in bytes (0 in
    /// memory).
    pub fn recorder_file_bytes(&self) -> Result<u64, StoreError> {
        super::file_bytes(&self.lock(), SCHEMA)
    }
}

/// Forgets the recorded rounds whose last round is before `before_ms`, and all but the newest
/// `keep_rounds`, with the parts no kept round shares. Returns the rounds forgotten.
pub(super) fn prune(
    connection: &Connection,
    before_ms: u64,
    keep_rounds: u64,
) -> Result<usize, StoreError> {
    let forgotten = connection.execute(
        "DELETE FROM recorder.recorder_rounds
         WHERE last_ms < ?1
            OR id NOT IN (SELECT id FROM recorder.recorder_rounds ORDER BY id DESC LIMIT ?2)",
        params![to_i64(before_ms), to_i64(keep_rounds)],
    )?;
    if forgotten > 0 {
        connection.execute_batch(
            "DELETE FROM recorder.recorder_round_parts
             WHERE round NOT IN (SELECT id FROM recorder.recorder_rounds);
             DELETE FROM recorder.recorder_parts
             WHERE hash NOT IN (SELECT hash FROM recorder.recorder_round_parts);",
        )?;
    }
    Ok(forgotten)
}
