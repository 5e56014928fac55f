//! The whole state as one snapshot, for the replicas on the master candidates
//! (`crate::replica`): taken with SQLite's serialization, put back with its online backup, so
//! the live connection (and its WAL mode) stays open throughout. The snapshot is the state's own
//! database: the flight recorder's (history, `super::recorder`) is never in it, and a restore
//! leaves this node's recorder as it was.

use rusqlite::{Connection, MAIN_DB};

use super::{SCHEMA_VERSION, Store, StoreError};

impl Store {
    /// The database's bytes now (a consistent image: taken under the store's lock).
    pub fn snapshot(&self) -> Result<Vec<u8>, StoreError> {
        let mut connection = self.lock();
        let data = connection.serialize(MAIN_DB)?;
        Ok(data.to_vec())
    }

    /// A private copy of the whole state in memory: what it writes never reaches this store
    /// (or its file), and it has no replication of its own (a what-if's rounds run on it).
    pub fn private_copy(&self) -> Result<Store, StoreError> {
        let copy = Store::open_memory()?;
        copy.restore(&self.snapshot()?)?;
        Ok(copy)
    }

    /// An empty state in memory, at this schema (its recorder in memory too).
    pub fn open_memory() -> Result<Store, StoreError> {
        let connection = Connection::open_in_memory()?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        super::recorder::attach(&connection, ":memory:")?;
        super::migrate(&connection)?;
        Store::with_connection(connection)
    }

    /// Rows of the state changed through this store since it was opened: a change counter for
    /// replication (the recorder's rows, never replicated, are not counted).
    pub fn changes(&self) -> u64 {
        let connection = self.lock();
        connection.total_changes().saturating_sub(
            self.history_changes
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Replaces the whole state by `snapshot` (the bytes of [`Store::snapshot`]), atomically: a
    /// snapshot that is not a database, or of a newer schema, is refused and the state left as
    /// it was; one of an older schema is brought to this one's first.
    pub fn restore(&self, snapshot: &[u8]) -> Result<(), StoreError> {
        // The image of a WAL database says so in its header (bytes 18 and 19 = 2); an image
        // holds no WAL, so it is read as the rollback-journal database it is (1).
        let mut image = snapshot.to_vec();
        if let Some(versions) = image.get_mut(18..20)
            && versions == [2, 2]
        {
            versions.copy_from_slice(&[1, 1]);
        }
        let mut source = Connection::open_in_memory()?;
        source.deserialize_read_exact(MAIN_DB, image.as_slice(), image.len(), false)?;
        let check: String = source.query_row("PRAGMA quick_check", [], |row| row.get(0))?;
        if check != "ok" {
            return Err(StoreError::Corrupt(format!("snapshot: {check}")));
        }
        let version: i64 = source.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew(version));
        }
        // A copy an older coordinator pushed is brought to this schema first (in memory).
        super::migrate(&source)?;
        let mut connection = self.lock();
        let backup = rusqlite::backup::Backup::new(&source, &mut connection)?;
        let copied = backup.run_to_completion(256, std::time::Duration::ZERO, None);
        drop(backup);
        // Under the connection's lock, as every ledger query: none remembered before the
        // restore is trusted after it, and the restored ledger's writes are watched again.
        let watched = self.ledger_memory.restored(&connection);
        copied?;
        watched
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;

    #[test]
    fn a_snapshot_restores_into_another_store() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(&dir.path().join("a.db")).unwrap();
        first
            .save_agent_sequences(&[("node1".into(), 5), ("node2".into(), 7)])
            .unwrap();
        first.save_document("example", &vec![1, 2, 3]).unwrap();
        let changes = first.changes();
        let snapshot = first.snapshot().unwrap();
        assert_eq!(first.changes(), changes, "a snapshot changes nothing");

        let second = Store::open(&dir.path().join("b.db")).unwrap();
        second.save_agent_sequences(&[("node3".into(), 1)]).unwrap();
        second.restore(&snapshot).unwrap();
        let sequences = second.agent_sequences().unwrap();
        assert_eq!(sequences.len(), 2);
        assert_eq!(sequences["node2"], 7);
        assert_eq!(
            second.document::<Vec<i32>>("example").unwrap(),
            Some(vec![1, 2, 3])
        );
        // Still a working, durable database afterwards.
        second.save_document("after", &1).unwrap();
        drop(second);
        let reopened = Store::open(&dir.path().join("b.db")).unwrap();
        assert_eq!(reopened.document::<i32>("after").unwrap(), Some(1));
        assert_eq!(reopened.agent_sequences().unwrap()["node1"], 5);
    }

    /// Rounds at 1 000 nodes, each deciding anew (every node's free memory moved).
    fn changing_rounds(store: &Store, rounds: u64) -> u64 {
        let mut written = 0;
        for n in 0..rounds {
            let mut record = nodecare_core::recorder::tests_support::round(1_000 + n, 1, 1000);
            for facts in std::sync::Arc::make_mut(&mut record.gate.view)
                .nodes
                .values_mut()
            {
                facts.memory_free = Some(4096 + n);
            }
            written += store.record_round(&record).unwrap().new_bytes as u64;
        }
        written
    }

    /// The flight recorder is history: its rounds never enter the snapshot pushed to the master
    /// candidates, a restore leaves the receiving node's recorder as it was, and the change
    /// counter that decides a push does not move for it.
    #[test]
    fn the_recorder_is_never_in_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let first = Store::open(&dir.path().join("a.db")).unwrap();
        first.save_document("example", &1).unwrap();
        let empty = first.snapshot().unwrap().len();
        let changes = first.changes();
        let written = changing_rounds(&first, 20);
        assert!(written > 2_000_000, "{written}");
        assert_eq!(
            first.changes(),
            changes,
            "recording is no change of the state"
        );
        let snapshot = first.snapshot().unwrap();
        assert!(
            snapshot.len() <= empty,
            "{} bytes recorded, the snapshot went from {empty} to {} bytes",
            written,
            snapshot.len()
        );
        assert_eq!(first.snapshot_bytes().unwrap(), snapshot.len() as u64);
        assert!(dir.path().join("a-recorder.db").exists());
        assert!(first.recorder_file_bytes().unwrap() > written / 2);

        let second = Store::open(&dir.path().join("b.db")).unwrap();
        changing_rounds(&second, 1);
        second.restore(&snapshot).unwrap();
        assert_eq!(second.document::<i32>("example").unwrap(), Some(1));
        assert_eq!(
            second.recorder_size().unwrap().0,
            1,
            "its own recorder kept"
        );
        assert_eq!(first.recorder_size().unwrap().0, 20);
        // A copy in memory (a what-if's) has a recorder of its own, empty.
        let copy = first.private_copy().unwrap();
        assert_eq!(copy.recorder_size().unwrap().0, 0);
        changing_rounds(&copy, 1);
        assert_eq!(first.recorder_size().unwrap().0, 20);
        // A state opened in memory by SQLite's name leaves no recorder's file behind.
        let cwd = std::env::current_dir().unwrap();
        let memory = Store::open(std::path::Path::new(":memory:")).unwrap();
        changing_rounds(&memory, 1);
        assert!(!cwd.join(":memory:-recorder.db").exists());
    }

    /// A state written by a version that kept the recorder in the state's database: opening it
    /// moves the rounds to the recorder's database (the state's shrinks), and a snapshot pushed
    /// by such a version restores without them.
    #[test]
    fn an_earlier_recorder_in_the_state_moves_out() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.db");
        {
            let store = Store::open(&old).unwrap();
            changing_rounds(&store, 3);
            store.save_document("kept", &7).unwrap();
        }
        // As the earlier version left it: the recorder's tables in the state's database.
        let wal = dir.path().join("old-recorder.db-wal");
        if wal.exists() {
            std::fs::remove_file(wal).unwrap();
        }
        std::fs::rename(
            dir.path().join("old-recorder.db"),
            dir.path().join("elsewhere.db"),
        )
        .unwrap();
        {
            let connection = Connection::open(&old).unwrap();
            connection
                .execute(
                    "ATTACH DATABASE ?1 AS moved",
                    [dir.path().join("elsewhere.db").to_string_lossy()],
                )
                .unwrap();
            connection
                .execute_batch(
                    "CREATE TABLE main.recorder_rounds AS SELECT * FROM moved.recorder_rounds;
                     CREATE TABLE main.recorder_round_parts AS SELECT * FROM moved.recorder_round_parts;
                     CREATE TABLE main.recorder_parts AS SELECT * FROM moved.recorder_parts;",
                )
                .unwrap();
        }
        let old_image = {
            let mut connection = Connection::open(&old).unwrap();
            connection.serialize(MAIN_DB).unwrap().to_vec()
        };
        let store = Store::open(&old).unwrap();
        assert_eq!(store.recorder_size().unwrap().0, 3, "the rounds moved");
        assert_eq!(store.recorded_rounds(None, 10).unwrap().len(), 3);
        assert!(store.snapshot().unwrap().len() < old_image.len() / 2);
        let other = Store::open(&dir.path().join("other.db")).unwrap();
        other.restore(&old_image).unwrap();
        assert_eq!(other.document::<i32>("kept").unwrap(), Some(7));
        assert_eq!(other.recorder_size().unwrap().0, 0, "never restored");
        let tables: i64 = other
            .lock()
            .query_row(
                "SELECT count(*) FROM main.sqlite_master WHERE name LIKE 'recorder_%'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(tables, 0);
    }

    #[test]
    fn garbage_is_refused_and_the_state_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a.db")).unwrap();
        store.save_document("keep", &1).unwrap();
        assert!(store.restore(b"not a database at all").is_err());
        let mut truncated = store.snapshot().unwrap();
        truncated.truncate(100);
        assert!(store.restore(&truncated).is_err());
        assert_eq!(store.document::<i32>("keep").unwrap(), Some(1));
    }
}
