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
//!
//! The index ([`nodecare_core::recorder::index`]), written with each round: `recorder_judged`
//! (round → each judgement's holder, admitted, outcome digest), `recorder_judged_nodes` (node →
//! the rounds that judged a proposal disrupting or touching it) and `recorder_chunks` (a view or
//! verdicts chunk's hash → its first and last node). Explanations choose their rounds from it
//! and read only those ([`RecordedRounds`]). The rounds recorded before the index get their
//! judgements indexed when it is created; their chunks' bounds stay unknown (such a chunk is
//! read when its round is).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::{Connection, OptionalExtension, params};
use sha2::Digest;
use uuid::Uuid;

use nodecare_core::gate::Decision;
use nodecare_core::recorder::index::{
    EXCERPT_PARTS, Excerpt, HolderJudged, IndexedJudgement, RoundIndex, index_decision,
};
use nodecare_core::recorder::{Part, Recorded, RoundRecord};

use super::{Store, StoreError, to_i64, to_u64};

/// The schema name of the recorder's database on the state's connection.
pub(super) const SCHEMA: &str = "recorder";

/// What the recorder's file is named after the state's file stem (`state.db` →
/// `state-recorder.db`).
pub(super) const RECORDER_FILE_SUFFIX: &str = "-recorder.db";

/// The recorder's tables, oldest dependency last.
const TABLES: [&str; 3] = ["recorder_round_parts", "recorder_parts", "recorder_rounds"];

/// The index's tables (in the recorder's database only).
const INDEX: &str = "CREATE TABLE recorder.recorder_judged (
         round INTEGER NOT NULL,
         seq INTEGER NOT NULL,
         holder TEXT,
         admitted INTEGER NOT NULL,
         outcome TEXT NOT NULL,
         PRIMARY KEY (round, seq));
     CREATE INDEX recorder.recorder_judged_holder ON recorder_judged(holder, round);
     CREATE TABLE recorder.recorder_judged_nodes (
         node TEXT NOT NULL,
         round INTEGER NOT NULL,
         PRIMARY KEY (node, round)) WITHOUT ROWID;
     CREATE INDEX recorder.recorder_judged_nodes_round ON recorder_judged_nodes(round);
     CREATE TABLE recorder.recorder_chunks (
         hash TEXT PRIMARY KEY,
         first TEXT NOT NULL,
         last TEXT NOT NULL) WITHOUT ROWID;";

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
    if attached && (dropped || !has_table(connection, SCHEMA, "recorder_judged")?) {
        in_savepoint(connection, |connection| {
            if !has_table(connection, SCHEMA, "recorder_judged")? {
                connection.execute_batch(INDEX)?;
            }
            index_rounds_without(connection)
        })?;
    }
    if dropped {
        // The pages they held go back at once: a snapshot copies the free pages too.
        let mut statement = connection.prepare("PRAGMA main.incremental_vacuum")?;
        let mut rows = statement.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}

/// Runs `run` in a savepoint of `connection`: all of it or nothing.
fn in_savepoint(
    connection: &Connection,
    run: impl FnOnce(&Connection) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    connection.execute_batch("SAVEPOINT recorder_index")?;
    match run(connection) {
        Ok(()) => {
            connection.execute_batch("RELEASE recorder_index")?;
            Ok(())
        }
        Err(error) => {
            // The error that matters is `error`; undoing cannot fail where doing did not.
            let _undone =
                connection.execute_batch("ROLLBACK TO recorder_index; RELEASE recorder_index");
            Err(error)
        }
    }
}

/// Indexes the judgements of the rounds that have none indexed (recorded before the index, or
/// judging nothing), one decision at a time (a decision shared by rounds decoded once). A round
/// whose decision is missing or does not decode is left out: the state still opens, and the
/// round is an error only where it is read, as before.
fn index_rounds_without(connection: &Connection) -> Result<(), StoreError> {
    let rounds: Vec<(i64, String)> = connection
        .prepare(
            "SELECT round, hash FROM recorder.recorder_round_parts
             WHERE part = 'decision'
               AND round NOT IN (SELECT round FROM recorder.recorder_judged)
             ORDER BY hash",
        )?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut last: Option<(String, Option<Vec<IndexedJudgement>>)> = None;
    for (round, hash) in rounds {
        if last.as_ref().is_none_or(|(known, _)| *known != hash) {
            let bytes: Option<Vec<u8>> = connection
                .query_row(
                    "SELECT bytes FROM recorder.recorder_parts WHERE hash = ?1",
                    params![hash],
                    |row| row.get(0),
                )
                .optional()?;
            let index = bytes
                .and_then(|bytes| serde_json::from_slice::<Decision>(&bytes).ok())
                .and_then(|decision| index_decision(&decision).ok());
            last = Some((hash, index));
        }
        if let Some((_, Some(index))) = &last {
            write_index(connection, round, index)?;
        }
    }
    Ok(())
}

/// Writes the index of round `round`'s judgements.
fn write_index(
    connection: &Connection,
    round: i64,
    judgements: &[IndexedJudgement],
) -> Result<(), StoreError> {
    let mut judged = connection.prepare_cached(
        "INSERT OR IGNORE INTO recorder.recorder_judged (round, seq, holder, admitted, outcome)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut nodes = connection.prepare_cached(
        "INSERT OR IGNORE INTO recorder.recorder_judged_nodes (node, round) VALUES (?1, ?2)",
    )?;
    for judgement in judgements {
        judged.execute(params![
            round,
            judgement.seq,
            judgement.holder.map(|id| id.to_string()),
            judgement.admitted,
            hex::encode(sha2::Sha256::digest(judgement.outcome.as_bytes())),
        ])?;
        for node in &judgement.nodes {
            nodes.execute(params![node, round])?;
        }
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
        let index = index_decision(&record.gate.decision).map_err(corrupt)?;
        let bounds: HashMap<Part, (String, String)> = record
            .chunk_bounds()
            .into_iter()
            .map(|(part, first, last)| (part, (first, last)))
            .collect();
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
            if let Some((first, last)) = bounds.get(&part) {
                transaction.execute(
                    "INSERT OR IGNORE INTO recorder.recorder_chunks (hash, first, last)
                     VALUES (?1, ?2, ?3)",
                    params![hash, first, last],
                )?;
            }
        }
        write_index(&transaction, round, &index)?;
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
    /// newest first, each decoded whole ([`Store::read_recorded_rounds`] reads only what an
    /// explanation shows).
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
            self.recorder_parts_decoded
                .fetch_add(u64::try_from(parts.len()).unwrap_or(0), Ordering::Relaxed);
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

    /// Reads, through the index, the recorded rounds at or before `until_ms` (all when `None`),
    /// the newest `limit` of them ([`RecordedRounds`]), under the store's lock: no round is
    /// recorded or forgotten meanwhile.
    pub fn read_recorded_rounds<T>(
        &self,
        until_ms: Option<u64>,
        limit: usize,
        read: impl FnOnce(&RecordedRounds<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let connection = self.lock();
        let until = until_ms.map_or(i64::MAX, to_i64);
        let offset = i64::try_from(limit.saturating_sub(1)).unwrap_or(i64::MAX);
        let floor = if limit == 0 {
            Some((i64::MAX, i64::MAX))
        } else {
            connection
                .query_row(
                    "SELECT at_ms, id FROM recorder.recorder_rounds WHERE at_ms <= ?1
                     ORDER BY at_ms DESC, id DESC LIMIT 1 OFFSET ?2",
                    params![until, offset],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()?
        };
        read(&RecordedRounds {
            connection: &connection,
            until,
            floor: floor.unwrap_or((i64::MIN, i64::MIN)),
            decoded: &self.recorder_parts_decoded,
        })
    }

    /// Parts of recorded rounds decoded by the reads of the recorder since the store opened.
    pub fn recorder_parts_decoded(&self) -> u64 {
        self.recorder_parts_decoded.load(Ordering::Relaxed)
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

/// The recorded rounds an explanation looks through, read through the index
/// ([`Store::read_recorded_rounds`]): the newest rounds at or before a time, at most a number of
/// them.
#[derive(Debug)]
pub struct RecordedRounds<'a> {
    connection: &'a Connection,
    /// The latest time of the rounds.
    until: i64,
    /// The oldest round (time, number) of the window.
    floor: (i64, i64),
    decoded: &'a AtomicU64,
}

/// The rounds of the window (`r`) at or before `?1`, the oldest being (`?2`, `?3`).
const WINDOW: &str = "r.at_ms <= ?1 AND (r.at_ms > ?2 OR (r.at_ms = ?2 AND r.id >= ?3))";

impl RecordedRounds<'_> {
    /// The window's latest time, or `at_most_ms` if earlier.
    fn until(&self, at_most_ms: Option<u64>) -> i64 {
        at_most_ms.map_or(self.until, |at| self.until.min(to_i64(at)))
    }

    /// The newest round of `query` (its window's parameters `?1`..`?3`, then `more`).
    fn newest(
        &self,
        query: &str,
        at_most_ms: Option<u64>,
        more: &[&dyn rusqlite::ToSql],
    ) -> Result<Option<u64>, StoreError> {
        let (at, id) = self.floor;
        let until = self.until(at_most_ms);
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&until, &at, &id];
        values.extend_from_slice(more);
        let round: Option<i64> = self
            .connection
            .prepare_cached(query)?
            .query_row(values.as_slice(), |row| row.get(0))
            .optional()?;
        Ok(round.map(to_u64))
    }

    /// The bytes of part `hash` of round `round` (named `name`).
    fn bytes(&self, round: i64, name: &str, hash: &str) -> Result<Vec<u8>, StoreError> {
        self.decoded.fetch_add(1, Ordering::Relaxed);
        self.connection
            .prepare_cached("SELECT bytes FROM recorder.recorder_parts WHERE hash = ?1")?
            .query_row(params![hash], |row| row.get(0))
            .optional()?
            .ok_or_else(|| corrupt(format!("round {round}: part {name} missing")))
    }
}

impl RoundIndex for RecordedRounds<'_> {
    type Error = StoreError;

    fn latest_judging_node(
        &self,
        node: &str,
        at_most_ms: Option<u64>,
    ) -> Result<Option<u64>, StoreError> {
        self.newest(
            &format!(
                "SELECT r.id FROM recorder.recorder_judged_nodes n
                 JOIN recorder.recorder_rounds r ON r.id = n.round
                 WHERE n.node = ?4 AND {WINDOW} ORDER BY r.at_ms DESC, r.id DESC LIMIT 1"
            ),
            at_most_ms,
            &[&node],
        )
    }

    fn latest_judging(
        &self,
        id: Uuid,
        admitted_only: bool,
        at_most_ms: Option<u64>,
    ) -> Result<Option<u64>, StoreError> {
        self.newest(
            &format!(
                "SELECT r.id FROM recorder.recorder_judged j
                 JOIN recorder.recorder_rounds r ON r.id = j.round
                 WHERE j.holder = ?4 AND (j.admitted OR NOT ?5) AND {WINDOW}
                 ORDER BY r.at_ms DESC, r.id DESC LIMIT 1"
            ),
            at_most_ms,
            &[&id.to_string(), &admitted_only],
        )
    }

    fn latest(&self, at_most_ms: Option<u64>) -> Result<Option<u64>, StoreError> {
        self.newest(
            &format!(
                "SELECT r.id FROM recorder.recorder_rounds r WHERE {WINDOW}
                 ORDER BY r.at_ms DESC, r.id DESC LIMIT 1"
            ),
            at_most_ms,
            &[],
        )
    }

    fn judgements_of(&self, id: Uuid) -> Result<Vec<HolderJudged>, StoreError> {
        let (at, floor) = self.floor;
        let judged = self
            .connection
            .prepare_cached(&format!(
                "SELECT j.round, j.outcome FROM recorder.recorder_judged j
                 JOIN recorder.recorder_rounds r ON r.id = j.round
                 WHERE j.holder = ?4 AND {WINDOW} ORDER BY r.at_ms, r.id, j.seq"
            ))?
            .query_map(params![self.until, at, floor, id.to_string()], |row| {
                Ok(HolderJudged {
                    round: to_u64(row.get(0)?),
                    outcome: row.get(1)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(judged)
    }

    fn excerpt(
        &self,
        round: u64,
        focus: &dyn Fn(&Decision) -> Option<String>,
    ) -> Result<Recorded, StoreError> {
        let id = to_i64(round);
        let (at_ms, last_ms, repeats, coordinator): (i64, i64, i64, String) = self
            .connection
            .prepare_cached(
                "SELECT at_ms, last_ms, repeats, coordinator FROM recorder.recorder_rounds
                 WHERE id = ?1",
            )?
            .query_row(params![id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()?
            .ok_or_else(|| corrupt(format!("round {round} is not recorded")))?;
        type PartRow = (String, String, Option<String>, Option<String>);
        let rows: Vec<PartRow> = self
            .connection
            .prepare_cached(
                "SELECT p.part, p.hash, c.first, c.last FROM recorder.recorder_round_parts p
                 LEFT JOIN recorder.recorder_chunks c ON c.hash = p.hash WHERE p.round = ?1",
            )?
            .query_map(params![id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })?
            .collect::<Result<_, _>>()?;
        /// A part's hash and, for a chunk, its first and last node when known.
        type Located<'a> = (&'a str, Option<(&'a str, &'a str)>);
        let mut parts: BTreeMap<Part, Located<'_>> = BTreeMap::new();
        for (name, hash, first, last) in &rows {
            let part = Part::parse(name)
                .ok_or_else(|| corrupt(format!("round {round}: unknown part {name:?}")))?;
            let bounds = first.as_deref().zip(last.as_deref());
            parts.insert(part, (hash.as_str(), bounds));
        }
        let whole = |part: Part| -> Result<Vec<u8>, StoreError> {
            let (hash, _) = parts
                .get(&part)
                .ok_or_else(|| corrupt(format!("round {round}: part {} missing", part.name())))?;
            self.bytes(id, &part.name(), hash)
        };
        let [frame, policy, in_force, decision] = EXCERPT_PARTS;
        let (frame, policy, in_force, decision) = (
            whole(frame)?,
            whole(policy)?,
            whole(in_force)?,
            whole(decision)?,
        );
        let mut excerpt = Excerpt::new(
            round,
            to_u64(at_ms),
            to_u64(last_ms),
            to_u64(repeats),
            coordinator,
            [&frame, &policy, &in_force, &decision],
            focus,
        )
        .map_err(|error| corrupt(format!("round {round}: {error}")))?;
        let chunks =
            excerpt.chunks_to_read(parts.iter().map(|(part, (_, bounds))| (*part, *bounds)));
        for part in chunks {
            let bytes = whole(part)?;
            excerpt
                .add(part, &bytes)
                .map_err(|error| corrupt(format!("round {round}: {error}")))?;
        }
        Ok(excerpt.finish())
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
             WHERE hash NOT IN (SELECT hash FROM recorder.recorder_round_parts);
             DELETE FROM recorder.recorder_judged
             WHERE round NOT IN (SELECT id FROM recorder.recorder_rounds);
             DELETE FROM recorder.recorder_judged_nodes
             WHERE round NOT IN (SELECT id FROM recorder.recorder_rounds);
             DELETE FROM recorder.recorder_chunks
             WHERE hash NOT IN (SELECT hash FROM recorder.recorder_parts);",
        )?;
    }
    Ok(forgotten)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use nodecare_core::recorder::index::{
        explain_job_indexed, explain_node_indexed, explain_record_indexed,
    };
    use nodecare_core::recorder::tests_support::varied;
    use nodecare_core::recorder::{Operation, explain_job, explain_node, explain_record};

    use super::*;

    /// Every explanation through the index is the one of every round of the window, for each
    /// node, record and operation, at each time, with windows of `limit` rounds.
    fn assert_explained_alike(store: &Store, rounds: u64, nodes: usize, limit: usize) {
        let last = 1_000 * (rounds / 2 + 1);
        let times = [
            None,
            Some(0),
            Some(999),
            Some(1_000),
            Some(last / 3),
            Some(last / 2 + 500),
            Some(last),
        ];
        let names: Vec<String> = (0..nodes)
            .map(|n| format!("node{n}"))
            .chain(["nope".to_owned()])
            .collect();
        for at in times {
            let all = store.recorded_rounds(at, limit).unwrap();
            for node in &names {
                let indexed = store
                    .read_recorded_rounds(at, limit, |r| explain_node_indexed(r, node, at))
                    .unwrap();
                assert_eq!(indexed, explain_node(&all, node, at), "{node} at {at:?}");
            }
        }
        let all = store.recorded_rounds(None, limit).unwrap();
        for id in [1, 2, 5, 9, 77] {
            let id = Uuid::from_u128(id);
            let indexed = store
                .read_recorded_rounds(None, limit, |r| explain_record_indexed(r, id))
                .unwrap();
            assert_eq!(indexed, explain_record(&all, id), "{id}");
        }
        for trail in [2, 5, 9, 77] {
            for holder in [Some("incident".to_owned()), None] {
                for node in [Some("node7".to_owned()), None] {
                    for recorded_ms in [0, 999, 1_000, last / 3, last / 2 + 500, last + 1] {
                        let operation = Operation {
                            trail: Uuid::from_u128(trail),
                            holder: holder.clone(),
                            intent: "drain".into(),
                            description: "drain".into(),
                            state: "succeeded".into(),
                            recorded_ms,
                            node: node.clone(),
                        };
                        let indexed = store
                            .read_recorded_rounds(None, limit, |r| {
                                explain_job_indexed(r, 7, &operation)
                            })
                            .unwrap();
                        assert_eq!(indexed, explain_job(&all, 7, &operation), "{operation:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn explanations_through_the_index_are_those_of_every_round_of_the_window() {
        let store = Store::open_memory().unwrap();
        for i in 0..80 {
            store.record_round(&varied(i, 150)).unwrap();
        }
        assert_explained_alike(&store, 80, 150, 2_000);
        // A window of the newest 30 rounds at or before the time: the same rounds looked
        // through.
        assert_explained_alike(&store, 80, 150, 30);
    }

    #[test]
    fn explaining_a_node_decodes_one_round_of_many_and_of_its_view_only_the_chunks_shown() {
        let store = Store::open_memory().unwrap();
        // 1 000 nodes: 16 chunks of the view and 16 of the verdicts per round.
        for i in 0..300 {
            store.record_round(&varied(i, 1_000)).unwrap();
        }
        let before = store.recorder_parts_decoded();
        let all = store.recorded_rounds(None, 2_000).unwrap();
        let whole = store.recorder_parts_decoded() - before;
        assert_eq!(whole, 300 * (4 + 16 + 16), "every part of every round");
        for node in ["node2", "node500", "node999"] {
            let before = store.recorder_parts_decoded();
            let explanation = crate::explain_api::node_from_recorder(&store, node, None).unwrap();
            let decoded = store.recorder_parts_decoded() - before;
            assert_eq!(explanation, explain_node(&all, node, None));
            // One round: frame, policy, in force, decision; the node's chunk of the view and of
            // the verdicts, and those of the nodes in force (node1, node2, node5, node7: the
            // first chunk).
            assert!(decoded <= 8, "{node}: {decoded} parts decoded");
        }
    }

    #[test]
    fn rounds_recorded_before_the_index_are_indexed_when_it_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let store = Store::open(&path).unwrap();
            for i in 0..40 {
                store.record_round(&varied(i, 150)).unwrap();
            }
            store
                .lock()
                .execute_batch(
                    "DROP TABLE recorder.recorder_judged;
                     DROP TABLE recorder.recorder_judged_nodes;
                     DROP TABLE recorder.recorder_chunks;",
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let count = |table: &str| -> i64 {
            store
                .lock()
                .query_row(
                    &format!("SELECT count(*) FROM recorder.{table}"),
                    [],
                    |row| row.get(0),
                )
                .unwrap()
        };
        assert!(count("recorder_judged") >= 40);
        // Their chunks' bounds are unknown: read when their round is.
        assert_eq!(count("recorder_chunks"), 0);
        assert_explained_alike(&store, 40, 150, 2_000);
        // Rounds recorded since have their bounds.
        store.record_round(&varied(40, 150)).unwrap();
        assert!(count("recorder_chunks") > 0);
        assert_explained_alike(&store, 41, 150, 2_000);
    }

    #[test]
    fn an_old_round_that_does_not_decode_is_left_out_of_the_index_and_the_state_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let store = Store::open(&path).unwrap();
            for i in 0..4 {
                store.record_round(&varied(i, 20)).unwrap();
            }
            store
                .lock()
                .execute_batch(
                    "DROP TABLE recorder.recorder_judged;
                     DROP TABLE recorder.recorder_judged_nodes;
                     DROP TABLE recorder.recorder_chunks;
                     UPDATE recorder.recorder_parts SET bytes = x'00'
                     WHERE hash = (SELECT hash FROM recorder.recorder_round_parts
                                   WHERE round = 2 AND part = 'decision');",
                )
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        let indexed: Vec<i64> = store
            .lock()
            .prepare("SELECT DISTINCT round FROM recorder.recorder_judged ORDER BY round")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(indexed, vec![1, 3, 4]);
        // Read, it is the error it was.
        let error = store
            .read_recorded_rounds(None, 10, |r| r.excerpt(2, &|_| None).map(|_| ()))
            .unwrap_err();
        assert!(error.to_string().contains("round 2"), "{error}");
    }

    #[test]
    fn retention_forgets_the_index_of_the_rounds_it_forgets() {
        let store = Store::open_memory().unwrap();
        for i in 0..20 {
            store.record_round(&varied(i, 150)).unwrap();
        }
        let orphans = |store: &Store| -> i64 {
            store
                .lock()
                .query_row(
                    "SELECT (SELECT count(*) FROM recorder.recorder_judged
                             WHERE round NOT IN (SELECT id FROM recorder.recorder_rounds))
                          + (SELECT count(*) FROM recorder.recorder_judged_nodes
                             WHERE round NOT IN (SELECT id FROM recorder.recorder_rounds))
                          + (SELECT count(*) FROM recorder.recorder_chunks
                             WHERE hash NOT IN (SELECT hash FROM recorder.recorder_parts))",
                    [],
                    |row| row.get(0),
                )
                .unwrap()
        };
        let forgotten = prune(&store.lock(), 0, 5).unwrap();
        assert_eq!(forgotten, 15);
        assert_eq!(orphans(&store), 0);
        let judged: i64 = store
            .lock()
            .query_row(
                "SELECT count(DISTINCT round) FROM recorder.recorder_judged",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(judged, 5);
        assert_explained_alike(&store, 20, 150, 2_000);
    }
}
