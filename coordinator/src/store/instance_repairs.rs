//! Schema version 6: the records instance repair kept of its work in flight (table
//! `instance_repairs`) become entries of the executor's ledger, held by the repair
//! (`Holder::InstanceRepair`, its uuid) under the intents its jobs were submitted with (so their
//! reason trails stay the same), and the table is dropped. A job recorded is an entry submitted
//! with it; a job not recorded is an entry recorded, adopted by its reason trail (or submitted
//! again when Ganeti does not show it). Holds are not known for old records: the nodes of
//! repairs in flight are held from Ganeti's view ([`crate::instance_repair_exec::holds`]).

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use super::StoreError;
use crate::instance_repair_exec::{Record, repair_entries, tag_entries, tag_identity};
use nodecare_core::gate::Holder;
use nodecare_exec::ledger::{self, Entry, State};

/// Moves the stored instance repairs into the ledger (after schema version 3's `ledger` table)
/// and drops their table.
pub(super) fn migrate(connection: &Connection) -> Result<(), StoreError> {
    let transaction = connection.unchecked_transaction()?;
    let table: Option<String> = transaction
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'instance_repairs'",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if table.is_some() {
        let rows: Vec<(String, String)> = {
            let mut statement =
                transaction.prepare("SELECT uuid, record FROM instance_repairs ORDER BY rowid")?;
            let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (id, text) in rows {
            let record: Record = serde_json::from_str(&text)
                .map_err(|error| StoreError::Corrupt(format!("instance repair {id}: {error}")))?;
            let id = Uuid::parse_str(&id)
                .map_err(|error| StoreError::Corrupt(format!("instance repair {id}: {error}")))?;
            for entry in entries(&record, id) {
                let holder = ledger::holder_text(&entry.holder).unwrap_or_default();
                let recorded: Option<i64> = transaction
                    .query_row(
                        "SELECT id FROM ledger WHERE holder = ?1 AND key = ?2",
                        params![holder, entry.key],
                        |row| row.get(0),
                    )
                    .optional()?;
                if recorded.is_none() {
                    super::ledger::insert(&transaction, &entry)?;
                }
            }
        }
        transaction.execute_batch("DROP TABLE instance_repairs;")?;
    }
    transaction.execute_batch("PRAGMA user_version = 6;")?;
    transaction.commit()?;
    Ok(())
}

/// A stored record as ledger entries (stored record `id`), with the jobs it names.
pub(super) fn entries(record: &Record, id: Uuid) -> Vec<Entry> {
    let with_job = |mut entry: Entry, job: Option<u64>| {
        if let Some(job) = job {
            entry.state = State::Submitted;
            entry.job = Some(job);
        }
        entry
    };
    match record {
        Record::Repair {
            plan,
            jobs,
            tag_job,
        } => {
            let mut out: Vec<Entry> = repair_entries(plan, &BTreeSet::new(), None, 0)
                .into_iter()
                .zip(jobs.iter().copied().chain(std::iter::repeat(None)))
                .map(|(entry, job)| with_job(entry, job))
                .collect();
            if let Some(tag_job) = tag_job {
                let submitted: Vec<u64> = jobs.iter().copied().flatten().collect();
                let holder = Holder::InstanceRepair { id: plan.uuid };
                let target = nodecare_ganeti::TagTarget::Instance(plan.instance.clone());
                let tag = plan.pending_tag(&submitted);
                let mut tags = tag_entries(
                    &holder,
                    "pending",
                    &target,
                    tag.as_deref(),
                    &plan.remove,
                    None,
                    0,
                )
                .into_iter();
                if let Some(add) = tags.next() {
                    out.push(with_job(add, Some(*tag_job)));
                }
                out.extend(tags);
            }
            out
        }
        Record::Tags { change, jobs } => {
            let (uuid, intent) = tag_identity(change, id);
            let holder = Holder::InstanceRepair { id: uuid };
            let mut jobs = jobs.iter().copied();
            tag_entries(
                &holder,
                intent,
                &change.target,
                change.add.as_deref(),
                &change.remove,
                None,
                0,
            )
            .into_iter()
            .map(|entry| {
                let job = jobs.next();
                with_job(entry, job)
            })
            .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use rusqlite::Connection;

    use super::*;
    use crate::store::Store;
    use nodecare_core::duty::instance_repair::{RepairOp, RepairPlan, RepairType, TagChange};
    use nodecare_exec::ledger::{Ledger as _, Op};
    use nodecare_ganeti::TagTarget;

    fn plan() -> RepairPlan {
        RepairPlan {
            instance: "inst2".into(),
            kind: RepairType::Reinstall,
            uuid: Uuid::from_u128(9),
            ts: 1000,
            ops: vec![
                RepairOp::RecreateDisks {
                    iallocator: "hail".into(),
                },
                RepairOp::Reinstall { start: true },
            ],
            remove: vec!["ganeti:watcher:autorepair:result:failover:x:1:success:".into()],
            message: "Executing ArReinstall repair on inst2".into(),
        }
    }

    /// A version-5 database (and a snapshot of it, pushed by an older master) holding a repair
    /// in flight (its first job submitted, the reinstall not yet) and a tag change whose add was
    /// submitted opens with both in the ledger under their trails' keys, and without the table;
    /// the repair goes on from there (its reinstall waits for the first job's success).
    #[test]
    fn version_5_instance_repairs_move_into_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let repair = Record::Repair {
            plan: plan(),
            jobs: vec![Some(3), None],
            tag_job: None,
        };
        let change = TagChange {
            target: TagTarget::Instance("inst1".into()),
            add: Some(format!(
                "ganeti:watcher:autorepair:result:failover:{}:1100:success:1",
                Uuid::from_u128(8)
            )),
            remove: vec!["ganeti:watcher:autorepair:pending:failover:x:1000:1".into()],
            message: None,
        };
        let tags = Record::Tags {
            change,
            jobs: vec![7],
        };
        {
            let store = Store::open(&path).unwrap();
            let connection = store.lock();
            connection
                .execute_batch(
                    "CREATE TABLE instance_repairs (
                         uuid TEXT PRIMARY KEY,
                         instance TEXT NOT NULL,
                         record TEXT NOT NULL);
                     PRAGMA user_version = 5;",
                )
                .unwrap();
            for (id, instance, record) in [
                (Uuid::from_u128(9), "inst2", &repair),
                (Uuid::from_u128(10), "inst1", &tags),
            ] {
                connection
                    .execute(
                        "INSERT INTO instance_repairs (uuid, instance, record) VALUES (?1, ?2, ?3)",
                        params![
                            id.to_string(),
                            instance,
                            serde_json::to_string(record).unwrap()
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
            let entries = store
                .of_holder(&Holder::InstanceRepair {
                    id: Uuid::from_u128(9),
                })
                .unwrap();
            let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
            assert_eq!(
                keys,
                ["instance-repair-reinstall-0", "instance-repair-reinstall-1"]
            );
            assert_eq!(entries[0].state, State::Submitted);
            assert_eq!(entries[0].job, Some(3));
            assert_eq!(entries[1].state, State::Recorded);
            assert!(entries[1].unchained);
            assert_eq!(entries[1].after, ["instance-repair-reinstall-0"]);
            assert_eq!(crate::instance_repair_exec::plan_of(&entries), Some(plan()));
            // The reinstall waits for the first job's success: nothing ready now.
            assert!(ledger::ready(&entries).submit.is_empty());
            let tag = store
                .of_holder(&Holder::InstanceRepair {
                    id: Uuid::from_u128(8),
                })
                .unwrap();
            let keys: Vec<&str> = tag.iter().map(|e| e.key.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "instance-repair-success-tag",
                    "instance-repair-success-untag"
                ]
            );
            assert_eq!(
                (tag[0].state.clone(), tag[0].job),
                (State::Submitted, Some(7))
            );
            assert_eq!((tag[1].state.clone(), tag[1].job), (State::Recorded, None));
            assert!(matches!(tag[1].action.op(), Some(Op::RemoveTags { .. })));
            let table: Option<String> = store
                .lock()
                .query_row(
                    "SELECT name FROM sqlite_master WHERE name = 'instance_repairs'",
                    [],
                    |row| row.get(0),
                )
                .optional()
                .unwrap();
            assert_eq!(table, None);
        };
        check(&Store::open(&path).unwrap());
        // Opened again: nothing moves twice.
        check(&Store::open(&path).unwrap());
        let fresh = Store::open(&dir.path().join("new.db")).unwrap();
        fresh.restore(&snapshot).unwrap();
        check(&fresh);
    }

    #[test]
    fn a_pending_tag_submitted_is_carried_with_its_job() {
        let record = Record::Repair {
            plan: plan(),
            jobs: vec![Some(3), Some(5)],
            tag_job: Some(6),
        };
        let entries = entries(&record, Uuid::from_u128(1));
        let keys: Vec<(&str, Option<u64>)> =
            entries.iter().map(|e| (e.key.as_str(), e.job)).collect();
        assert_eq!(
            keys,
            [
                ("instance-repair-reinstall-0", Some(3)),
                ("instance-repair-reinstall-1", Some(5)),
                ("instance-repair-pending-tag", Some(6)),
                ("instance-repair-pending-untag", None),
            ]
        );
    }
}
