//! The executor's ledger in the state database ([`nodecare_exec::ledger`]): one row per entry,
//! keyed by its id (never reused) and unique per holder and key, with the entry as JSON.
//! Schema version 3 adds the table and carries the balancing moves of earlier versions over
//! (their `balancing_moves` table is dropped).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError, to_i64};
use nodecare_core::duty::balancing::BalanceMove;
use nodecare_core::gate::Holder;
use nodecare_exec::ledger::{self, Entry, Ledger, LedgerError};

/// Creates the ledger (schema version 3) and moves the balancing moves into it.
pub(super) fn migrate(connection: &Connection) -> Result<(), StoreError> {
    let transaction = connection.unchecked_transaction()?;
    transaction.execute_batch(
        "CREATE TABLE IF NOT EXISTS ledger (
             id INTEGER PRIMARY KEY AUTOINCREMENT,
             holder TEXT NOT NULL,
             key TEXT NOT NULL,
             state TEXT NOT NULL,
             recorded_ms INTEGER NOT NULL,
             record TEXT NOT NULL,
             UNIQUE (holder, key));
         CREATE INDEX IF NOT EXISTS ledger_state ON ledger(state);",
    )?;
    let has_moves: Option<String> = transaction
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'balancing_moves'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if has_moves.is_some() {
        let moves: Vec<String> = {
            let mut statement =
                transaction.prepare("SELECT record FROM balancing_moves ORDER BY rowid")?;
            let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for text in moves {
            let m: BalanceMove = serde_json::from_str(&text)
                .map_err(|error| StoreError::Corrupt(format!("balancing move: {error}")))?;
            insert(&transaction, &m.to_entry())?;
        }
        transaction.execute_batch("DROP TABLE balancing_moves;")?;
    }
    transaction.execute_batch("PRAGMA user_version = 3;")?;
    transaction.commit()?;
    Ok(())
}

fn holder_of(entry: &Entry) -> Result<String, LedgerError> {
    ledger::holder_text(&entry.holder)
        .ok_or_else(|| LedgerError::NotAnOwner(entry.holder.to_string()))
}

fn encode(entry: &Entry) -> Result<String, StoreError> {
    serde_json::to_string(entry)
        .map_err(|error| StoreError::Corrupt(format!("encoding ledger entry: {error}")))
}

/// Inserts `entry` (its id is assigned); returns the id.
pub(super) fn insert(connection: &Connection, entry: &Entry) -> Result<u64, StoreError> {
    let holder = holder_of(entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    connection
        .prepare_cached(
            "INSERT INTO ledger (holder, key, state, recorded_ms, record) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            holder,
            entry.key,
            entry.state.as_str(),
            to_i64(entry.recorded_ms),
            encode(entry)?
        ])?;
    Ok(u64::try_from(connection.last_insert_rowid()).unwrap_or(0))
}

/// Whether `error` is SQLite refusing a row that breaks a constraint (the ledger's only one a
/// new row can break: one entry per holder and key).
fn is_constraint(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(failure, _))
            if failure.code == rusqlite::ErrorCode::ConstraintViolation
    )
}

fn decode(id: i64, text: &str) -> Result<Entry, StoreError> {
    let mut entry: Entry = serde_json::from_str(text)
        .map_err(|error| StoreError::Corrupt(format!("ledger entry {id}: {error}")))?;
    entry.id = u64::try_from(id).unwrap_or(0);
    Ok(entry)
}

impl From<StoreError> for LedgerError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Ledger(error) => error,
            other => Self::Storage(other.to_string()),
        }
    }
}

/// A SQLite error as the ledger reports it.
fn sql(error: rusqlite::Error) -> LedgerError {
    LedgerError::Storage(error.to_string())
}

/// Most decoded entries kept for reading again ([`Store::ledger_rows`]).
const MAX_DECODED: usize = 100_000;

impl Ledger for Store {
    fn record(&self, entries: &[Entry]) -> Result<Vec<Entry>, LedgerError> {
        self.record_with(entries, |_| Ok(()))
    }

    fn mark(&self, entry: &Entry) -> Result<(), LedgerError> {
        self.mark_all(std::slice::from_ref(entry))
    }

    fn mark_all(&self, entries: &[Entry]) -> Result<(), LedgerError> {
        if entries.is_empty() {
            return Ok(());
        }
        let memory = &self.ledger_memory;
        let mut connection = self.lock();
        let before = memory.stamp(&connection)?;
        // What memory knows of the rows, looked up once: the writes below are this call's own,
        // and what each stores is kept in `stored` for a later mark of the same entry.
        let mut stored: std::collections::HashMap<i64, Arc<Entry>> = {
            let decoded = memory.refreshed(before);
            entries
                .iter()
                .filter_map(|e| {
                    let id = to_i64(e.id);
                    decoded
                        .entries
                        .get(&id)
                        .map(|known| (id, Arc::clone(known)))
                })
                .collect()
        };
        let transaction = connection.transaction().map_err(sql)?;
        for entry in entries {
            let id = to_i64(entry.id);
            let now = mark_in(&transaction, stored.get(&id).cloned(), entry)?;
            stored.insert(id, Arc::new(now));
        }
        transaction.commit().map_err(sql)?;
        memory.learn(&connection, before, stored.into_values())
    }

    fn entries(&self) -> Result<Vec<Entry>, LedgerError> {
        self.ledger_rows(ALL, &[])
    }

    fn unfinished(&self) -> Result<Vec<Entry>, LedgerError> {
        self.ledger_rows(UNFINISHED, &[])
    }

    fn of_holder(&self, holder: &Holder) -> Result<Vec<Entry>, LedgerError> {
        let Some(text) = ledger::holder_text(holder) else {
            return Ok(Vec::new());
        };
        self.ledger_rows(OF_HOLDER, &[text.as_str()])
    }

    fn shared_entries(&self) -> Result<Vec<Arc<Entry>>, LedgerError> {
        self.shared_ledger_rows(ALL, &[])
    }

    fn shared_unfinished(&self) -> Result<Vec<Arc<Entry>>, LedgerError> {
        self.shared_ledger_rows(UNFINISHED, &[])
    }

    fn shared_of_holder(&self, holder: &Holder) -> Result<Vec<Arc<Entry>>, LedgerError> {
        let Some(text) = ledger::holder_text(holder) else {
            return Ok(Vec::new());
        };
        self.shared_ledger_rows(OF_HOLDER, &[text.as_str()])
    }

    fn entry(&self, holder: &Holder, key: &str) -> Result<Option<Entry>, LedgerError> {
        let Some(text) = ledger::holder_text(holder) else {
            return Ok(None);
        };
        Ok(self.ledger_rows(OF_KEY, &[text.as_str(), key])?.pop())
    }

    fn forget(&self, holder: &Holder) -> Result<usize, LedgerError> {
        let Some(text) = ledger::holder_text(holder) else {
            return Ok(0);
        };
        self.lock()
            .execute("DELETE FROM ledger WHERE holder = ?1", params![text])
            .map_err(sql)
    }
}

/// Stores where `entry` is now (its state, job and finish time) through `connection` (a
/// transaction of several, or the connection itself); the rest of the entry is the stored one,
/// `known` where memory knows it unchanged, else read. Returns the entry as stored now.
fn mark_in(
    connection: &rusqlite::Connection,
    known: Option<Arc<Entry>>,
    entry: &Entry,
) -> Result<Entry, LedgerError> {
    let id = to_i64(entry.id);
    let mut stored = match known {
        Some(known) => Arc::unwrap_or_clone(known),
        None => {
            let text: Option<String> = connection
                .prepare_cached(RECORD)
                .and_then(|mut statement| {
                    statement
                        .query_row(params![id], |row| row.get(0))
                        .optional()
                })
                .map_err(sql)?;
            let Some(text) = text else {
                return Err(LedgerError::Unknown(entry.id));
            };
            decode(id, &text)?
        }
    };
    stored.state = entry.state.clone();
    stored.job = entry.job;
    stored.finished_ms = entry.finished_ms;
    let text = encode(&stored)?;
    let changed = connection
        .prepare_cached("UPDATE ledger SET state = ?1, record = ?2 WHERE id = ?3")
        .and_then(|mut statement| statement.execute(params![stored.state.as_str(), text, id]))
        .map_err(sql)?;
    if changed == 0 {
        return Err(LedgerError::Unknown(entry.id));
    }
    Ok(stored)
}

// The queries select ids only (from an index where one serves); the entries are read by id
// where the store's memory does not know them unchanged.
/// Every entry, in recording order.
const ALL: &str = "SELECT id FROM ledger ORDER BY id";
/// The unfinished entries, in recording order.
const UNFINISHED: &str = "SELECT id FROM ledger
     WHERE state IN ('recorded', 'submitted', 'timed-out') ORDER BY id";
/// The entries of one holder, in recording order.
const OF_HOLDER: &str = "SELECT id FROM ledger WHERE holder = ?1 ORDER BY id";
/// The entry of one holder and key.
const OF_KEY: &str = "SELECT id FROM ledger WHERE holder = ?1 AND key = ?2";
/// One entry's record.
const RECORD: &str = "SELECT record FROM ledger WHERE id = ?1";

/// What the ledger looked like when a query was answered: the rows of the ledger written
/// through this connection (every insert, update and delete, committed or not), the restores,
/// and SQLite's count of other connections' commits. Equal stamps: the same rows.
type Stamp = (u64, u64, i64);

/// The ids each ledger query returned, by query text and parameters, with the stamp then.
type Queries = std::collections::HashMap<(String, Vec<String>), (Stamp, Vec<i64>)>;

/// Most ledger queries remembered at once (the executor and the duties ask a handful).
const MAX_QUERIES: usize = 256;

/// The rows of the ledger written through the store's connection, seen by its temporary
/// triggers: how many, and which ids since the store's memory last looked.
#[derive(Debug, Default)]
struct Writes {
    count: AtomicU64,
    ids: Mutex<std::collections::HashSet<i64>>,
    /// Set when a trigger could not say which row it wrote: nothing decoded is trusted.
    unknown: AtomicBool,
}

/// What the store keeps of the ledger in memory: the entries as last decoded, and what each
/// query returned while the ledger has not changed since.
#[derive(Debug, Default)]
pub(super) struct Memory {
    /// Entries as last decoded, by id. One is trusted until a trigger sees its row written;
    /// all of them until a restore or another connection's commit (which no trigger of this
    /// connection sees).
    decoded: Mutex<Decoded>,
    /// The ids each query (text and parameters) returned, with the [`Stamp`] then: asked again
    /// before the ledger changed, it is answered from `decoded` without reading the table.
    queries: Mutex<Queries>,
    /// Rows of the ledger written through the connection (temporary triggers,
    /// [`Memory::watch_writes`]).
    writes: Arc<Writes>,
    /// Restores (a restore writes pages, not rows: no trigger sees it).
    restores: AtomicU64,
    /// Queries that read the table.
    reads: AtomicU64,
    /// Entries decoded from their stored text.
    decodes: AtomicU64,
    /// Set when the ledger's writes could not be watched again after a restore: every query
    /// then reads the table, and every entry is decoded again.
    unwatched: AtomicBool,
}

/// The decoded entries and what they were decoded under: the restores and other connections'
/// commits then.
#[derive(Debug, Default)]
struct Decoded {
    entries: std::collections::HashMap<i64, Arc<Entry>>,
    under: Option<(u64, i64)>,
}

impl Memory {
    /// Watches every row of the ledger written through `connection`: temporary triggers (this
    /// connection's own, never stored in the database) call a function that counts the write
    /// and notes the row's id.
    pub(super) fn watch_writes(&self, connection: &Connection) -> Result<(), StoreError> {
        let writes = Arc::clone(&self.writes);
        connection.create_scalar_function(
            "nodecare_ledger_written",
            1,
            rusqlite::functions::FunctionFlags::SQLITE_UTF8,
            move |context| {
                writes.count.fetch_add(1, Ordering::SeqCst);
                let id = context.get::<i64>(0).ok();
                match (id, writes.ids.lock()) {
                    (Some(id), Ok(mut ids)) => {
                        ids.insert(id);
                    }
                    _ => writes.unknown.store(true, Ordering::SeqCst),
                }
                Ok(0_i64)
            },
        )?;
        connection.execute_batch(
            "DROP TRIGGER IF EXISTS temp.nodecare_ledger_inserted;
             DROP TRIGGER IF EXISTS temp.nodecare_ledger_updated;
             DROP TRIGGER IF EXISTS temp.nodecare_ledger_deleted;
             CREATE TEMP TRIGGER nodecare_ledger_inserted AFTER INSERT ON main.ledger
                 BEGIN SELECT nodecare_ledger_written(NEW.id); END;
             CREATE TEMP TRIGGER nodecare_ledger_updated AFTER UPDATE ON main.ledger
                 BEGIN SELECT nodecare_ledger_written(OLD.id), nodecare_ledger_written(NEW.id); END;
             CREATE TEMP TRIGGER nodecare_ledger_deleted AFTER DELETE ON main.ledger
                 BEGIN SELECT nodecare_ledger_written(OLD.id); END;",
        )?;
        Ok(())
    }

    /// After a restore through `connection` (whether or not it copied everything): no query
    /// remembered before is trusted, and the restored ledger's writes are watched again; if they
    /// cannot be (the error is returned), no query is answered from memory any more.
    pub(super) fn restored(&self, connection: &Connection) -> Result<(), StoreError> {
        self.restores.fetch_add(1, Ordering::SeqCst);
        let watched = self.watch_writes(connection);
        if watched.is_err() {
            self.unwatched.store(true, Ordering::SeqCst);
        }
        watched
    }

    fn stamp(&self, connection: &Connection) -> Result<Stamp, LedgerError> {
        let others: i64 = connection
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut statement| statement.query_row([], |row| row.get(0)))
            .map_err(sql)?;
        Ok((
            self.writes.count.load(Ordering::SeqCst),
            self.restores.load(Ordering::SeqCst),
            others,
        ))
    }

    /// The decoded entries, rid of every one whose row may have changed since it was decoded
    /// (`stamp`: the ledger now).
    fn refreshed<'a>(&'a self, stamp: Stamp) -> std::sync::MutexGuard<'a, Decoded> {
        let mut decoded = self
            .decoded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let written: Vec<i64> = self
            .writes
            .ids
            .lock()
            .map(|mut ids| ids.drain().collect())
            .unwrap_or_default();
        let (_, restores, others) = stamp;
        let unknown = self.writes.unknown.swap(false, Ordering::SeqCst);
        if unknown
            || self.unwatched.load(Ordering::SeqCst)
            || decoded.under != Some((restores, others))
            || decoded.entries.len() > MAX_DECODED
        {
            decoded.entries.clear();
            decoded.under = Some((restores, others));
        } else {
            for id in written {
                decoded.entries.remove(&id);
            }
        }
        decoded
    }

    /// Keeps `entries`, just written and committed through `connection`, as their rows now are
    /// (no decoding them again), unless another connection committed since `before` (the
    /// stamp taken before the writes): then its writes may be newer, and they are read again.
    fn learn(
        &self,
        connection: &Connection,
        before: Stamp,
        entries: impl IntoIterator<Item = Arc<Entry>>,
    ) -> Result<(), LedgerError> {
        let now = self.stamp(connection)?;
        let mut decoded = self.refreshed(now);
        if (now.1, now.2) != (before.1, before.2) {
            return Ok(());
        }
        for entry in entries {
            let id = to_i64(entry.id);
            #[cfg(debug_assertions)]
            {
                let text: Option<String> = connection
                    .query_row(RECORD, params![id], |row| row.get(0))
                    .optional()
                    .map_err(sql)?;
                debug_assert_eq!(
                    text.map(|text| decode(id, &text).map_err(|e| e.to_string())),
                    Some(Ok(Entry::clone(&entry))),
                    "an entry learned differs from its stored row"
                );
            }
            decoded.entries.insert(id, entry);
        }
        Ok(())
    }
}

impl Store {
    /// Records `entries` (as [`Ledger::record`]) and, in the same durable write, whatever
    /// `also` writes through the transaction: both or neither survive a crash.
    pub(crate) fn record_with(
        &self,
        entries: &[Entry],
        also: impl FnOnce(&Connection) -> Result<(), StoreError>,
    ) -> Result<Vec<Entry>, LedgerError> {
        let mut connection = self.lock();
        let before = self.ledger_memory.stamp(&connection)?;
        let transaction = connection.transaction().map_err(sql)?;
        also(&transaction)?;
        let mut recorded = Vec::with_capacity(entries.len());
        for entry in entries {
            let holder = holder_of(entry)?;
            let mut entry = entry.clone();
            // One entry per holder and key (recorded before, or twice in `entries`): the
            // table's constraint refuses the row, and the whole record with it.
            entry.id = match insert(&transaction, &entry) {
                Ok(id) => id,
                Err(error) if is_constraint(&error) => {
                    return Err(LedgerError::Duplicate {
                        holder,
                        key: entry.key.clone(),
                    });
                }
                Err(error) => return Err(error.into()),
            };
            recorded.push(entry);
        }
        transaction.commit().map_err(sql)?;
        self.ledger_memory.learn(
            &connection,
            before,
            recorded.iter().map(|e| Arc::new(e.clone())),
        )?;
        Ok(recorded)
    }

    /// [`Store::shared_ledger_rows`], each entry a copy of its own.
    fn ledger_rows(&self, query: &str, parameters: &[&str]) -> Result<Vec<Entry>, LedgerError> {
        Ok(self
            .shared_ledger_rows(query, parameters)?
            .into_iter()
            .map(Arc::unwrap_or_clone)
            .collect())
    }

    /// The entries whose ids `query` (selecting `id`) returns with `parameters`, shared with
    /// the store's memory of them: an entry is read and decoded only where memory does not know
    /// its row unchanged. Asked again while the ledger has not changed, it is answered from
    /// memory without reading the table: a round asks the same questions in each of its phases.
    fn shared_ledger_rows(
        &self,
        query: &str,
        parameters: &[&str],
    ) -> Result<Vec<Arc<Entry>>, LedgerError> {
        let connection = self.lock();
        let memory = &self.ledger_memory;
        let stamp = memory.stamp(&connection)?;
        let asked = (
            query.to_owned(),
            parameters
                .iter()
                .map(|p| (*p).to_owned())
                .collect::<Vec<_>>(),
        );
        let mut decoded = memory.refreshed(stamp);
        let mut queries = memory
            .queries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((then, ids)) = queries.get(&asked)
            && *then == stamp
            && !memory.unwatched.load(Ordering::SeqCst)
        {
            let known: Option<Vec<Arc<Entry>>> = ids
                .iter()
                .map(|id| decoded.entries.get(id).cloned())
                .collect();
            if let Some(entries) = known {
                return Ok(entries);
            }
        }
        memory.reads.fetch_add(1, Ordering::Relaxed);
        let ids: Vec<i64> = {
            let mut statement = connection.prepare_cached(query).map_err(sql)?;
            let rows = statement
                .query_map(rusqlite::params_from_iter(parameters), |row| {
                    row.get::<_, i64>(0)
                })
                .map_err(sql)?;
            rows.collect::<Result<_, _>>().map_err(sql)?
        };
        let mut entries = Vec::with_capacity(ids.len());
        let mut record = connection.prepare_cached(RECORD).map_err(sql)?;
        for &id in &ids {
            if let Some(entry) = decoded.entries.get(&id) {
                entries.push(Arc::clone(entry));
                continue;
            }
            let text: Option<String> = record
                .query_row(params![id], |row| row.get(0))
                .optional()
                .map_err(sql)?;
            // Gone between the two reads: impossible under the connection's lock; left out.
            let Some(text) = text else { continue };
            let entry = Arc::new(decode(id, &text)?);
            memory.decodes.fetch_add(1, Ordering::Relaxed);
            decoded.entries.insert(id, Arc::clone(&entry));
            entries.push(entry);
        }
        if queries.len() >= MAX_QUERIES {
            queries.clear();
        }
        queries.insert(asked, (stamp, ids));
        Ok(entries)
    }

    /// How many ledger queries read the table (not answered from memory) since it opened.
    pub fn ledger_table_reads(&self) -> u64 {
        self.ledger_memory.reads.load(Ordering::Relaxed)
    }

    /// How many ledger entries were decoded from their stored text since it opened.
    pub fn ledger_decodes(&self) -> u64 {
        self.ledger_memory.decodes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use uuid::Uuid;

    use super::*;
    use nodecare_exec::ledger::{Action, Hold, Op, State};

    fn entry(holder: u128, key: &str) -> Entry {
        Entry::new(
            Holder::Incident {
                id: Uuid::from_u128(holder),
            },
            key,
            Action::ganeti(Op::drain("n1")),
            "drain n1",
            10,
            20,
        )
        .holding([Hold::Drained { node: "n1".into() }])
    }

    #[test]
    fn entries_are_recorded_marked_listed_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let recorded = store
            .record(&[entry(1, "drain"), entry(2, "drain")])
            .unwrap();
        assert_eq!(recorded.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2]);
        // All or none: a duplicate refuses the whole record.
        assert!(matches!(
            store.record(&[entry(3, "drain"), entry(1, "drain")]),
            Err(LedgerError::Duplicate { .. })
        ));
        assert_eq!(store.entries().unwrap().len(), 2);
        let mut first = recorded[0].clone();
        first.state = State::Failed { why: "no".into() };
        first.job = Some(5);
        first.finished_ms = Some(30);
        store.mark(&first).unwrap();
        assert_eq!(store.entries().unwrap()[0], first);
        assert_eq!(store.unfinished().unwrap(), recorded[1..]);
        assert_eq!(store.of_holder(&first.holder).unwrap(), [first.clone()]);
        assert_eq!(
            store.entry(&first.holder, "drain").unwrap(),
            Some(first.clone())
        );
        assert_eq!(store.entry(&first.holder, "undrain").unwrap(), None);
        // Ids are never reused, also after forgetting; the rows survive reopening.
        assert_eq!(store.forget(&recorded[1].holder).unwrap(), 1);
        drop(store);
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        assert_eq!(store.record(&[entry(4, "drain")]).unwrap()[0].id, 3);
        assert!(matches!(
            store.mark(&Entry { id: 99, ..first }),
            Err(LedgerError::Unknown(99))
        ));
    }

    /// A query asked again is answered from memory while the ledger has not changed (writes to
    /// other tables do not count); a write to the ledger, through any path of the store, a
    /// restore or another connection, is seen by the next query.
    #[test]
    fn a_ledger_query_is_read_again_only_once_the_ledger_changed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let recorded = store.record(&[entry(1, "a"), entry(1, "b")]).unwrap();
        let holder = recorded[0].holder.clone();
        assert_eq!(store.of_holder(&holder).unwrap(), recorded);
        let reads = store.ledger_table_reads();
        assert_eq!(store.of_holder(&holder).unwrap(), recorded);
        assert_eq!(store.unfinished().unwrap(), recorded);
        assert_eq!(store.unfinished().unwrap(), recorded);
        store.save_document("elsewhere", &1_u32).unwrap();
        assert_eq!(store.of_holder(&holder).unwrap(), recorded);
        assert_eq!(
            store.ledger_table_reads(),
            reads + 1,
            "only the first unfinished()"
        );

        // A mark, a record, a forget: each seen at once.
        let mut first = recorded[0].clone();
        first.state = State::Succeeded;
        store.mark(&first).unwrap();
        assert_eq!(store.of_holder(&holder).unwrap()[0], first);
        assert_eq!(store.unfinished().unwrap(), recorded[1..]);
        let more = store.record(&[entry(1, "c")]).unwrap();
        assert_eq!(store.of_holder(&holder).unwrap().len(), 3);
        assert_eq!(store.entry(&holder, "c").unwrap(), Some(more[0].clone()));
        assert_eq!(store.forget(&holder).unwrap(), 3);
        assert!(store.of_holder(&holder).unwrap().is_empty());
        assert_eq!(store.entry(&holder, "c").unwrap(), None);

        // Another connection's commit.
        let again = store.record(&[entry(2, "x")]).unwrap();
        let other = again[0].holder.clone();
        assert_eq!(store.of_holder(&other).unwrap(), again);
        {
            let connection = Connection::open(&path).unwrap();
            connection
                .execute("DELETE FROM ledger WHERE key = 'x'", [])
                .unwrap();
        }
        assert!(store.of_holder(&other).unwrap().is_empty());

        // A restore, then writes after it: each seen.
        let source = Store::open_memory().unwrap();
        let theirs = source.record(&[entry(3, "y")]).unwrap();
        let third = theirs[0].clone();
        assert!(store.of_holder(&third.holder).unwrap().is_empty());
        store.restore(&source.snapshot().unwrap()).unwrap();
        assert_eq!(store.of_holder(&third.holder).unwrap(), theirs);
        let mut done = third.clone();
        done.state = State::Succeeded;
        store.mark(&done).unwrap();
        assert_eq!(store.of_holder(&third.holder).unwrap(), [done]);
    }

    /// What the store writes itself (a record, a mark) it keeps as written: no entry is decoded
    /// again for it; a restore or another connection's commit (which no trigger sees) decodes
    /// them all again.
    #[test]
    fn only_the_entries_written_elsewhere_are_decoded_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let recorded = store
            .record(&[entry(1, "a"), entry(1, "b"), entry(1, "c")])
            .unwrap();
        let holder = recorded[0].holder.clone();
        assert_eq!(store.of_holder(&holder).unwrap(), recorded);
        assert_eq!(store.ledger_decodes(), 0, "the recorded entries are known");

        let mut second = recorded[1].clone();
        second.state = State::Submitted;
        second.job = Some(7);
        store.mark(&second).unwrap();
        let now = store.of_holder(&holder).unwrap();
        assert_eq!(
            now,
            [recorded[0].clone(), second.clone(), recorded[2].clone()]
        );
        assert_eq!(store.entries().unwrap(), now);
        assert_eq!(store.ledger_decodes(), 0, "the marked entry is known");
        // The same entry marked twice in one write: the last mark is what is kept.
        let mut again = second.clone();
        again.state = State::Succeeded;
        again.finished_ms = Some(40);
        store.mark_all(&[second.clone(), again.clone()]).unwrap();
        assert_eq!(store.entry(&holder, "b").unwrap(), Some(again.clone()));
        assert_eq!(store.ledger_decodes(), 0);

        // The mark kept the stored rest of the entry, not the caller's.
        let mut third = recorded[2].clone();
        third.state = State::Succeeded;
        third.description = "not what was recorded".into();
        store.mark(&third).unwrap();
        assert_eq!(
            store.entry(&holder, "c").unwrap().map(|e| e.description),
            Some(recorded[2].description.clone())
        );

        {
            let connection = Connection::open(&path).unwrap();
            connection
                .execute("UPDATE ledger SET state = 'succeeded' WHERE key = 'a'", [])
                .unwrap();
        }
        let before = store.ledger_decodes();
        let read = store.of_holder(&holder).unwrap();
        assert_eq!(
            store.ledger_decodes(),
            before + 3,
            "another connection wrote"
        );
        // A store that opens the same file reads what this one kept.
        let other = Store::open(&path).unwrap();
        assert_eq!(other.of_holder(&holder).unwrap(), read);
    }

    /// Many entries marked in one write: all of them, or (an unknown one among them) none.
    #[test]
    fn many_entries_are_marked_all_or_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let recorded = store
            .record(&[entry(1, "a"), entry(1, "b"), entry(1, "c")])
            .unwrap();
        let submitted: Vec<Entry> = recorded
            .iter()
            .enumerate()
            .map(|(k, e)| Entry {
                state: State::Submitted,
                job: Some(100 + k as u64),
                ..e.clone()
            })
            .collect();
        let unknown = Entry {
            id: 99,
            ..submitted[0].clone()
        };
        let with_unknown = [submitted[0].clone(), unknown];
        assert!(matches!(
            store.mark_all(&with_unknown),
            Err(LedgerError::Unknown(99))
        ));
        assert_eq!(store.entries().unwrap(), recorded);
        store.mark_all(&submitted).unwrap();
        assert_eq!(store.entries().unwrap(), submitted);
        store.mark_all(&[]).unwrap();
        assert_eq!(store.entries().unwrap(), submitted);
    }

    /// A database of schema version 2 with balancing moves in flight opens with them in the
    /// ledger, their run as the holder, and a snapshot of it restores the same way.
    #[test]
    fn version_2_databases_and_snapshots_carry_their_balancing_moves_over() {
        use nodecare_core::duty::balancing::MoveState;
        use nodecare_roll::hbal::HbalOp;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let run = Uuid::from_u128(7);
        let old = |key: &str, state: MoveState, job: Option<u64>| BalanceMove {
            run,
            key: key.into(),
            holder: Uuid::from_u128(8),
            group: "default".into(),
            instance: "inst1".into(),
            op: HbalOp::Migrate { target: None },
            state,
            job_id: job,
            created_ms: 10,
            finished_ms: None,
            error: None,
        };
        let moves = [
            old("inst1-1", MoveState::Submitted, Some(4)),
            old("inst1-2", MoveState::Planned, None),
        ];
        {
            // Written as version 2 wrote it.
            let store = Store::open(&path).unwrap();
            let connection = store.lock();
            connection
                .execute_batch(
                    "DROP TABLE ledger;
                     CREATE TABLE balancing_moves (run TEXT NOT NULL, key TEXT NOT NULL,
                         record TEXT NOT NULL, PRIMARY KEY (run, key));
                     PRAGMA user_version = 2;",
                )
                .unwrap();
            for m in &moves {
                connection
                    .execute(
                        "INSERT INTO balancing_moves (run, key, record) VALUES (?1, ?2, ?3)",
                        params![m.run.to_string(), m.key, serde_json::to_string(m).unwrap()],
                    )
                    .unwrap();
            }
        }
        let snapshot = {
            let mut connection = Connection::open(&path).unwrap();
            connection.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
        };
        let check = |store: &Store| {
            let entries = store.entries().unwrap();
            assert_eq!(entries.len(), 2);
            assert_eq!(entries[0].holder, Holder::Balancing { id: run });
            assert_eq!(entries[0].state, State::Submitted);
            assert_eq!(entries[0].job, Some(4));
            assert_eq!(entries[1].state, State::Recorded);
            assert_eq!(entries[1].after, ["inst1-1"]);
            assert_eq!(store.balancing_moves().unwrap(), moves);
        };
        check(&Store::open(&path).unwrap());
        let fresh = Store::open(&dir.path().join("new.db")).unwrap();
        fresh.restore(&snapshot).unwrap();
        check(&fresh);
        fresh.record(&[entry(1, "drain")]).unwrap();
    }
}
