//! The whole state as one snapshot, for the replicas on the master candidates
//! (`crate::replica`): taken with SQLite's serialization, put back with its online backup, so
//! the live connection (and its WAL mode) stays open throughout.

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

    /// An empty state in memory, at this schema.
    pub fn open_memory() -> Result<Store, StoreError> {
        let connection = Connection::open_in_memory()?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        super::migrate(&connection)?;
        Store::with_connection(connection)
    }

    /// Rows changed through this store since it was opened: a change counter for replication.
    pub fn changes(&self) -> u64 {
        self.lock().total_changes()
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
