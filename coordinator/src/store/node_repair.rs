//! Node repair's intents in the executor's ledger ([`crate::exec::ledger`]): each [`Intent`]
//! is one entry held by its incident (`Holder::Incident`), under its key (so reason trails stay
//! what they were). Its step is the entry's action (a Ganeti `Op`, or the agent's live repair),
//! its locks become holds (drain: drained, offline: offline, live repair: repairing; undrain
//! and online release the node). A step planned again (`Replanned`) is a canceled entry.
//!
//! Schema version 4 moves the `intents` table of earlier versions into the ledger (and drops
//! it).

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use super::{Intent, IntentSpec, IntentState, StoreError, decode_incident, to_i64, to_u64};
use crate::exec::ledger::{self, Action, AgentOp, Entry, Hold, State};
use crate::gate::Holder;
use crate::plan::{Lock, Move};

/// The entry's facts that have no field of their own: the step as node repair plans it, the
/// locks the planner reads, when it was submitted, and a note on a step that did not fail.
const SPEC: &str = "spec";
const LOCKS: &str = "locks";
const SUBMITTED_MS: &str = "submitted-ms";
const NOTE: &str = "note";

/// How incidents are stored as holders (`incident:<uuid>`).
const HOLDER_PREFIX: &str = "incident:";

/// The holds of a step on incident node `node`.
fn holds(spec: &IntentSpec, node: &str) -> Vec<Hold> {
    match spec {
        IntentSpec::Drain { node } => vec![Hold::Drained { node: node.clone() }],
        IntentSpec::Offline { node } => vec![Hold::Offline { node: node.clone() }],
        IntentSpec::Undrain { node } | IntentSpec::Online { node } => {
            vec![Hold::Release { node: node.clone() }]
        }
        IntentSpec::Repair { node, .. } => vec![Hold::Repairing { node: node.clone() }],
        IntentSpec::Move { planned } => {
            let to = match planned {
                Move::Migrate { target, .. } | Move::Failover { target, .. } => {
                    target.iter().cloned().collect()
                }
                Move::ReplaceSecondary { remote_node, .. } => vec![remote_node.clone()],
            };
            vec![Hold::Moving {
                instance: planned.instance().to_owned(),
                from: vec![node.to_owned()],
                to,
            }]
        }
        IntentSpec::Tag { .. } | IntentSpec::Untag { .. } | IntentSpec::Shutdown { .. } => {
            Vec::new()
        }
    }
}

fn encode<T: serde::Serialize>(what: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|error| StoreError::Corrupt(format!("encoding intent {what}: {error}")))
}

/// The ledger entry of `intent`, an action of an incident on node `node`.
pub(super) fn to_entry(intent: &Intent, node: &str) -> Result<Entry, StoreError> {
    let action = match (&intent.spec, intent.spec.op()) {
        (_, Some(op)) => Action::ganeti(op),
        (IntentSpec::Repair { node, command }, None) => Action::Agent {
            op: AgentOp::Repair {
                node: node.clone(),
                command: command.clone(),
            },
        },
        (other, None) => {
            return Err(StoreError::Corrupt(format!(
                "intent {} has no action: {other:?}",
                intent.key
            )));
        }
    };
    // Node repair follows its jobs' time itself (`job_timeout`): no deadline of the ledger's.
    let mut entry = Entry::new(
        Holder::Incident {
            id: intent.incident,
        },
        intent.key.clone(),
        action,
        intent.spec.describe(node),
        intent.created_ms,
        u64::MAX,
    )
    .holding(holds(&intent.spec, node));
    // The key as it was (reason trails carry it so).
    entry.key.clone_from(&intent.key);
    entry
        .about
        .insert(SPEC.to_owned(), encode("step", &intent.spec)?);
    entry
        .about
        .insert(LOCKS.to_owned(), encode("locks", &intent.locks)?);
    if let Some(at) = intent.submitted_ms {
        entry.about.insert(SUBMITTED_MS.to_owned(), at.to_string());
    }
    let why = intent.error.clone().unwrap_or_default();
    entry.state = match intent.state {
        IntentState::Planned => State::Recorded,
        IntentState::Submitted => State::Submitted,
        IntentState::Succeeded => State::Succeeded,
        IntentState::Failed => State::Failed { why },
        IntentState::Replanned => State::Canceled { why },
    };
    if let (Some(note), IntentState::Planned | IntentState::Submitted | IntentState::Succeeded) =
        (&intent.error, intent.state)
    {
        entry.about.insert(NOTE.to_owned(), note.clone());
    }
    entry.job = intent.job_id;
    entry.finished_ms = intent.finished_ms;
    Ok(entry)
}

/// The intent of a ledger entry; `None` for entries of other holders.
pub(super) fn from_entry(entry: &Entry) -> Result<Option<Intent>, StoreError> {
    let Holder::Incident { id } = entry.holder else {
        return Ok(None);
    };
    let corrupt = |what: &str, error: String| {
        StoreError::Corrupt(format!("intent {}: {what}: {error}", entry.key))
    };
    let spec: IntentSpec = match entry.about.get(SPEC) {
        Some(text) => serde_json::from_str(text).map_err(|e| corrupt("step", e.to_string()))?,
        None => return Err(corrupt("step", "missing".into())),
    };
    let locks: Vec<Lock> = match entry.about.get(LOCKS) {
        Some(text) => serde_json::from_str(text).map_err(|e| corrupt("locks", e.to_string()))?,
        None => Vec::new(),
    };
    let submitted_ms = match entry.about.get(SUBMITTED_MS) {
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|e| corrupt("submitted", e.to_string()))?,
        ),
        None => None,
    };
    let some = |why: &str| (!why.is_empty()).then(|| why.to_owned());
    let (state, error) = match &entry.state {
        State::Recorded => (IntentState::Planned, entry.about.get(NOTE).cloned()),
        // Node repair never times an entry out in the ledger; should one, it is still followed.
        State::Submitted | State::TimedOut => {
            (IntentState::Submitted, entry.about.get(NOTE).cloned())
        }
        State::Succeeded => (IntentState::Succeeded, entry.about.get(NOTE).cloned()),
        State::Failed { why } => (IntentState::Failed, some(why)),
        State::Canceled { why } => (IntentState::Replanned, some(why)),
    };
    Ok(Some(Intent {
        incident: id,
        key: entry.key.clone(),
        spec,
        locks,
        state,
        job_id: entry.job,
        created_ms: entry.recorded_ms,
        submitted_ms,
        finished_ms: entry.finished_ms,
        error,
    }))
}

fn holder_of(incident: Uuid) -> String {
    format!("{HOLDER_PREFIX}{incident}")
}

/// Records `intent` (of an incident on `node`), or updates its entry (state, job, facts).
pub(super) fn save(connection: &Connection, intent: &Intent, node: &str) -> Result<(), StoreError> {
    let entry = to_entry(intent, node)?;
    debug_assert_eq!(
        ledger::holder_text(&entry.holder).as_deref(),
        Some(holder_of(intent.incident).as_str())
    );
    let record = encode("entry", &entry)?;
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
    let mut statement = connection
        .prepare("SELECT id, record FROM ledger WHERE substr(holder, 1, 9) = ?1 ORDER BY id")?;
    let rows = statement.query_map(params![HOLDER_PREFIX], |row| {
        Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
    })?;
    let mut intents = Vec::new();
    for row in rows {
        let (id, text) = row?;
        let entry: Entry = serde_json::from_str(&text)
            .map_err(|error| StoreError::Corrupt(format!("ledger entry {id}: {error}")))?;
        if let Some(intent) = from_entry(&entry)? {
            intents.push(intent);
        }
    }
    Ok(intents)
}

/// The incidents with an intent in flight (planned or submitted).
pub(super) fn in_flight(connection: &Connection) -> Result<Vec<String>, StoreError> {
    let mut statement = connection.prepare(
        "SELECT DISTINCT substr(holder, 10) FROM ledger
         WHERE substr(holder, 1, 9) = ?1 AND state IN ('recorded', 'submitted', 'timed-out')",
    )?;
    let rows = statement.query_map(params![HOLDER_PREFIX], |row| row.get::<_, String>(0))?;
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
    use crate::exec::ledger::Ledger as _;
    use crate::store::Store;
    use crate::store::tests::incident;

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

    /// Every step and state of an intent is kept by its ledger entry as it was, and the entry
    /// says what it does and holds in the ledger's terms.
    #[test]
    fn intents_are_ledger_entries_of_their_incident() {
        let id = Uuid::from_u128(1);
        let node = || "node1".to_owned();
        let specs = [
            IntentSpec::Drain { node: node() },
            IntentSpec::Undrain { node: node() },
            IntentSpec::Offline { node: node() },
            IntentSpec::Online { node: node() },
            IntentSpec::Shutdown {
                instance: "web".into(),
            },
            IntentSpec::Tag {
                node: node(),
                tag: "t".into(),
            },
            IntentSpec::Untag {
                node: node(),
                tag: "t".into(),
            },
            IntentSpec::Move {
                planned: Move::Migrate {
                    instance: "web".into(),
                    target: Some("node3".into()),
                },
            },
            IntentSpec::Repair {
                node: node(),
                command: "reset-bmc".into(),
            },
        ];
        let states = [
            (IntentState::Planned, None),
            (IntentState::Submitted, None),
            (IntentState::Succeeded, Some("done already".to_owned())),
            (IntentState::Failed, Some("job 3 error: no".to_owned())),
            (IntentState::Replanned, Some("precondition".to_owned())),
        ];
        for spec in &specs {
            for (state, error) in &states {
                let mut it = intent(id, "step-1", spec.clone(), *state);
                it.error.clone_from(error);
                it.job_id = Some(3);
                it.submitted_ms = Some(6);
                it.finished_ms = Some(7);
                let entry = to_entry(&it, "node1").unwrap();
                assert_eq!(entry.holder, Holder::Incident { id });
                assert_eq!(entry.key, "step-1");
                assert_eq!(entry.action.op().cloned(), spec.op());
                assert_eq!(entry.description, spec.describe("node1"));
                assert_eq!(from_entry(&entry).unwrap(), Some(it));
            }
        }
        let held = |spec: IntentSpec| {
            to_entry(&intent(id, "k", spec, IntentState::Planned), "node1")
                .unwrap()
                .holds
        };
        assert_eq!(held(specs[0].clone()), [Hold::Drained { node: node() }]);
        assert_eq!(held(specs[1].clone()), [Hold::Release { node: node() }]);
        assert_eq!(held(specs[2].clone()), [Hold::Offline { node: node() }]);
        assert_eq!(held(specs[3].clone()), [Hold::Release { node: node() }]);
        assert_eq!(held(specs[8].clone()), [Hold::Repairing { node: node() }]);
        assert!(matches!(
            to_entry(
                &intent(id, "k", specs[8].clone(), IntentState::Planned),
                "node1"
            )
            .unwrap()
            .action,
            Action::Agent {
                op: AgentOp::Repair { .. }
            }
        ));
        assert_eq!(
            held(specs[7].clone()),
            [Hold::Moving {
                instance: "web".into(),
                from: vec![node()],
                to: vec!["node3".into()],
            }]
        );
        // Another holder's entry is no intent.
        let mut other = to_entry(
            &intent(id, "k", specs[0].clone(), IntentState::Planned),
            "n",
        )
        .unwrap();
        other.holder = Holder::Balancing { id };
        assert_eq!(from_entry(&other).unwrap(), None);
    }

    /// The store keeps intents in the ledger: recorded, updated, dropped, forgotten with their
    /// incident, and refused as a duplicate key by the ledger.
    #[test]
    fn the_store_keeps_intents_in_the_ledger() {
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
            assert_eq!(version, 4);
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
