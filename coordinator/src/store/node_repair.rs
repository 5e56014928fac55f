//! Node repair's intents in the executor's ledger ([`nodecare_exec::ledger`]): each [`Intent`]
//! is one entry held by its incident (`Holder::Incident`), under its key (so reason trails stay
//! what they were). Its step is the entry's action (a Ganeti `Op`, or the agent's live repair),
//! its locks become holds (drain: drained, offline: offline, live repair: repairing; undrain
//! and online release the node). A step planned again (`Replanned`) is a canceled entry.
//! The mapping is pure: `duty::node_repair::intent::{to_entry, from_entry}`.
//!
//! Schema version 4 moves the `intents` table of earlier versions into the ledger (and drops
//! it).

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use super::{Intent, IntentState, StoreError, decode_incident, to_i64, to_u64};
use nodecare_core::duty::node_repair::intent::{from_entry, to_entry};
use nodecare_exec::ledger::{self, Entry};

/// How incidents are stored as holders (`incident:<uuid>`).
const HOLDER_PREFIX: &str = "incident:";
/// Just past every holder that starts with [`HOLDER_PREFIX`] (`;` follows `:`): the holders of
/// incidents are the range `[HOLDER_PREFIX, HOLDER_END)` of the ledger's `(holder, key)` index,
/// read without a scan of the other holders' entries.
const HOLDER_END: &str = "incident;";

/// The entries of every incident, in recording order.
const ALL: &str = "SELECT id, record FROM ledger WHERE holder >= ?1 AND holder < ?2 ORDER BY id";
/// The incidents with an unfinished entry.
const IN_FLIGHT: &str = "SELECT DISTINCT substr(holder, 10) FROM ledger
     WHERE holder >= ?1 AND holder < ?2 AND state IN ('recorded', 'submitted', 'timed-out')";

fn holder_of(incident: Uuid) -> String {
    format!("{HOLDER_PREFIX}{incident}")
}

/// Records `intent` (of an incident on `node`), or updates its entry (state, job, facts).
pub(super) fn save(connection: &Connection, intent: &Intent, node: &str) -> Result<(), StoreError> {
    let entry = to_entry(intent, node).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    debug_assert_eq!(
        ledger::holder_text(&entry.holder).as_deref(),
        Some(holder_of(intent.incident).as_str())
    );
    let record = serde_json::to_string(&entry)
        .map_err(|error| StoreError::Corrupt(format!("encoding ledger entry: {error}")))?;
    connection.execute(
        "INSERT INTO ledger (holder, key, state, recorded_ms, record) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(holder, key) DO UPDATE SET state = excluded.state, record = excluded.record",
        params![
            holder_of(intent.incident),
            entry.key,
            entry.state.as_str(),
            to_i64(entry.recorded_ms),
            record
        ],
    )?;
    Ok(())
}

/// Deletes an intent's entry (one never submitted).
pub(super) fn drop(connection: &Connection, incident: Uuid, key: &str) -> Result<(), StoreError> {
    connection.execute(
        "DELETE FROM ledger WHERE holder = ?1 AND key = ?2",
        params![holder_of(incident), key],
    )?;
    Ok(())
}

/// Deletes an incident's entries; how many.
pub(super) fn forget(connection: &Connection, incident: Uuid) -> Result<usize, StoreError> {
    Ok(connection.execute(
        "DELETE FROM ledger WHERE holder = ?1",
        params![holder_of(incident)],
    )?)
}

/// Every intent, in recording order.
pub(super) fn all(connection: &Connection) -> Result<Vec<Intent>, StoreError> {
    let mut statement = connection.prepare_cached(ALL)?;
    let rows = statement.query_map(params![HOLDER_PREFIX, HOLDER_END], |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut intents = Vec::new();
    for row in rows {
        let (id, text) = row?;
        let entry: Entry = serde_json::from_str(&text)
            .map_err(|error| StoreError::Corrupt(format!("ledger entry {id}: {error}")))?;
        if let Some(intent) = from_entry(&entry).map_err(|e| StoreError::Corrupt(e.to_string()))? {
            intents.push(intent);
        }
    }
    Ok(intents)
}

/// The incidents with an intent in flight (planned or submitted).
pub(super) fn in_flight(connection: &Connection) -> Result<Vec<String>, StoreError> {
    let mut statement = connection.prepare(IN_FLIGHT)?;
    let rows = statement.query_map(params![HOLDER_PREFIX, HOLDER_END], |row| {
        row.get::<_, String>(0)
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Schema version 4: the intents of earlier versions move into the ledger, in the order they
/// were created, and their table is dropped.
pub(super) fn migrate(connection: &Connection) -> Result<(), StoreError> {
    let transaction = connection.unchecked_transaction()?;
    let has_intents: Option<String> = transaction
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'intents'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if has_intents.is_some() {
        let intents = old_intents(&transaction)?;
        for intent in &intents {
            let node: Option<String> = transaction
                .query_row(
                    "SELECT record FROM incidents WHERE uuid = ?1",
                    params![intent.incident.to_string()],
                    |row| row.get(0),
                )
                .optional()?;
            let node = node
                .and_then(|text| decode_incident(&text).ok())
                .map(|incident| incident.node)
                .unwrap_or_default();
            save(&transaction, intent, &node)?;
        }
        transaction.execute_batch("DROP TABLE intents;")?;
    }
    transaction.execute_batch("PRAGMA user_version = 4;")?;
    transaction.commit()?;
    Ok(())
}

/// The rows of the `intents` table of schema versions 1 to 3.
fn old_intents(connection: &Connection) -> Result<Vec<Intent>, StoreError> {
    let mut statement = connection.prepare(
        "SELECT incident, key, spec, locks, state, job_id, created_ms, submitted_ms,
                finished_ms, error
         FROM intents ORDER BY created_ms, incident, key",
    )?;
    let rows = statement.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
            row.get::<_, String>(3)?,
            row.get::<_, String>(4)?,
            row.get::<_, Option<i64>>(5)?,
            row.get::<_, i64>(6)?,
            row.get::<_, Option<i64>>(7)?,
            row.get::<_, Option<i64>>(8)?,
            row.get::<_, Option<String>>(9)?,
        ))
    })?;
    let mut intents = Vec::new();
    for row in rows {
        let (incident, key, spec, locks, state, job_id, created, submitted, finished, error) = row?;
        intents.push(Intent {
            incident: Uuid::parse_str(&incident)
                .map_err(|error| StoreError::Corrupt(format!("intent incident: {error}")))?,
            key,
            spec: serde_json::from_str(&spec)
                .map_err(|error| StoreError::Corrupt(format!("intent spec: {error}")))?,
            locks: serde_json::from_str(&locks)
                .map_err(|error| StoreError::Corrupt(format!("intent locks: {error}")))?,
            state: IntentState::parse(&state)
                .ok_or_else(|| StoreError::Corrupt(format!("intent state {state:?}")))?,
            job_id: job_id.map(to_u64),
            created_ms: to_u64(created),
            submitted_ms: submitted.map(to_u64),
            finished_ms: finished.map(to_u64),
            error,
        });
    }
    Ok(intents)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use crate::store::IntentSpec;
    use crate::store::Store;
    use crate::store::tests::incident;
    use nodecare_core::gate::Holder;
    use nodecare_core::plan::{Lock, Move};
    use nodecare_exec::ledger::{Ledger as _, State};

    fn intent(incident: Uuid, key: &str, spec: IntentSpec, state: IntentState) -> Intent {
        Intent {
            incident,
            key: key.into(),
            spec,
            locks: vec![Lock::Node("node1".into())],
            state,
            job_id: None,
            created_ms: 5,
            submitted_ms: None,
            finished_ms: None,
            error: None,
        }
    }

    /// A new store (in the directory returned) with incident 1's drain of node1 planned.
    fn store_with_a_drain() -> (
        tempfile::TempDir,
        Store,
        nodecare_core::incident::Incident,
        Intent,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let first = incident(1);
        let drain = intent(
            first.uuid,
            "drain",
            IntentSpec::Drain {
                node: "node1".into(),
            },
            IntentState::Planned,
        );
        store.plan_intent(&first, &drain).unwrap();
        (dir, store, first, drain)
    }

    /// The store keeps intents in the ledger: recorded, updated, dropped, forgotten with their
    /// incident, and refused as a duplicate key by the ledger.
    #[test]
    fn the_store_keeps_intents_in_the_ledger() {
        let (_dir, store, first, drain) = store_with_a_drain();
        let mut submitted = drain.clone();
        submitted.state = IntentState::Submitted;
        submitted.job_id = Some(4);
        store.update_intent(&first, &submitted).unwrap();
        let entries = store.entries().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].state, State::Submitted);
        assert_eq!(entries[0].job, Some(4));
        assert_eq!(store.intents().unwrap(), [submitted]);
        assert!(store.record(&[entries[0].clone()]).is_err(), "one key once");
        let planned = intent(
            first.uuid,
            "offline-1",
            IntentSpec::Offline {
                node: "node1".into(),
            },
            IntentState::Planned,
        );
        store.plan_intent(&first, &planned).unwrap();
        store.drop_intent(first.uuid, "offline-1").unwrap();
        assert_eq!(store.intents().unwrap().len(), 1);
        store.forget_incident(first.uuid).unwrap();
        assert!(store.entries().unwrap().is_empty());
    }

    /// The incidents' intents are read through an index (a range of the holder index, or the
    /// unfinished entries), not by a scan of every holder's entries (a campaign keeps
    /// thousands), and only theirs.
    #[test]
    fn intents_are_read_from_the_holder_index_alone() {
        let (_dir, store, first, drain) = store_with_a_drain();
        let mut other = store.entries().unwrap()[0].clone();
        other.holder = Holder::Campaign {
            id: Uuid::from_u128(7),
        };
        other.id = 0;
        store.record(&[other]).unwrap();
        assert_eq!(store.entries().unwrap().len(), 2);
        assert_eq!(store.intents().unwrap(), [drain]);
        let connection = store.lock();
        assert_eq!(in_flight(&connection).unwrap(), [first.uuid.to_string()]);
        for query in [ALL, IN_FLIGHT] {
            let plan: Vec<String> = connection
                .prepare(&format!("EXPLAIN QUERY PLAN {query}"))
                .unwrap()
                .query_map(params![HOLDER_PREFIX, HOLDER_END], |row| row.get(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(
                plan.iter()
                    .any(|step| step.starts_with("SEARCH ledger USING INDEX"))
                    && !plan.iter().any(|step| step.starts_with("SCAN ledger")),
                "{query}: {plan:?}"
            );
        }
    }

    /// A database of schema version 3 with intents in flight opens with them in the ledger,
    /// a snapshot of it restores the same way, and the incident goes on from there.
    #[test]
    fn version_3_databases_and_snapshots_carry_their_intents_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let first = incident(1);
        let mut done = intent(
            first.uuid,
            "drain",
            IntentSpec::Drain {
                node: "node1".into(),
            },
            IntentState::Succeeded,
        );
        done.job_id = Some(3);
        done.finished_ms = Some(9);
        let mut running = intent(
            first.uuid,
            "move-web-1",
            IntentSpec::Move {
                planned: Move::Migrate {
                    instance: "web".into(),
                    target: None,
                },
            },
            IntentState::Submitted,
        );
        running.created_ms = 8;
        running.job_id = Some(4);
        running.submitted_ms = Some(8);
        running.locks = vec![Lock::Instance("web".into())];
        let mut unsure = intent(
            first.uuid,
            "move-db-1",
            IntentSpec::Move {
                planned: Move::Failover {
                    instance: "db".into(),
                    target: None,
                },
            },
            IntentState::Planned,
        );
        unsure.created_ms = 9;
        {
            // Written as version 3 wrote it.
            let store = Store::open(&path).unwrap();
            store.save_incident(&first).unwrap();
            let connection = store.lock();
            connection
                .execute_batch(
                    "CREATE TABLE intents (
                         incident TEXT NOT NULL REFERENCES incidents(uuid) ON DELETE CASCADE,
                         key TEXT NOT NULL, spec TEXT NOT NULL, locks TEXT NOT NULL,
                         state TEXT NOT NULL, job_id INTEGER, created_ms INTEGER NOT NULL,
                         submitted_ms INTEGER, finished_ms INTEGER, error TEXT,
                         PRIMARY KEY (incident, key));
                     PRAGMA user_version = 3;",
                )
                .unwrap();
            // Stored in another order than they were created.
            for (it, state) in [
                (&unsure, "planned"),
                (&done, "succeeded"),
                (&running, "submitted"),
            ] {
                connection
                    .execute(
                        "INSERT INTO intents (incident, key, spec, locks, state, job_id,
                             created_ms, submitted_ms, finished_ms, error)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        params![
                            it.incident.to_string(),
                            it.key,
                            serde_json::to_string(&it.spec).unwrap(),
                            serde_json::to_string(&it.locks).unwrap(),
                            state,
                            it.job_id.map(to_i64),
                            to_i64(it.created_ms),
                            it.submitted_ms.map(to_i64),
                            it.finished_ms.map(to_i64),
                            it.error,
                        ],
                    )
                    .unwrap();
            }
        }
        let snapshot = {
            let mut connection = Connection::open(&path).unwrap();
            connection.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
        };
        let check = |store: &Store| {
            assert_eq!(
                store.intents().unwrap(),
                [done.clone(), running.clone(), unsure.clone()]
            );
            let entries = store.entries().unwrap();
            assert_eq!(entries.len(), 3);
            assert!(
                entries
                    .iter()
                    .all(|e| e.holder == Holder::Incident { id: first.uuid })
            );
            assert_eq!(entries[1].state, State::Submitted);
            assert_eq!(entries[1].job, Some(4));
            assert_eq!(entries[2].state, State::Recorded);
            assert_eq!(entries[0].description, "drain node1");
            let version: i64 = store
                .lock()
                .query_row("PRAGMA user_version", [], |row| row.get(0))
                .unwrap();
            assert_eq!(version, super::super::SCHEMA_VERSION);
            let tables: i64 = store
                .lock()
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'intents'",
                    [],
                    |row| row.get(0),
                )
                .unwrap();
            assert_eq!(tables, 0);
        };
        check(&Store::open(&path).unwrap());
        let fresh = Store::open(&dir.path().join("new.db")).unwrap();
        fresh.restore(&snapshot).unwrap();
        check(&fresh);
        // The incident goes on: the unsure step adopted, the running one finished.
        let mut adopted = unsure.clone();
        adopted.state = IntentState::Submitted;
        adopted.job_id = Some(5);
        fresh.update_intent(&first, &adopted).unwrap();
        let mut finished = running.clone();
        finished.state = IntentState::Succeeded;
        fresh.update_intent(&first, &finished).unwrap();
        assert_eq!(fresh.intents().unwrap(), [done, finished, adopted]);
        // Retention sees nothing in flight once they ended, and forgets them with the incident.
        fresh.forget_incident(first.uuid).unwrap();
        assert!(fresh.intents().unwrap().is_empty());
    }
}
