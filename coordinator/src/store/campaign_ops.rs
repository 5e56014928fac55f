//! Schema version 5: the operations maintenance campaigns kept inside their records (the
//! `ops` of a `campaigns` row) become entries of the executor's ledger, held by their campaign
//! under the same keys (so their reason trails stay the same), and the records are stored
//! without them. Every operation moves, finished ones too: the state machine reads the
//! outcomes of its group's operations. A hook's "did not reboot" answer moves into the
//! record (`hooks_no_reboot`).

use std::collections::BTreeSet;

use rusqlite::{Connection, params};

use super::StoreError;
use nodecare_core::campaign::{CampaignOp, Record};
use nodecare_exec::ledger;

/// Moves the campaigns' operations into the ledger (after schema version 3's `ledger` table).
pub(super) fn migrate(connection: &Connection) -> Result<(), StoreError> {
    let transaction = connection.unchecked_transaction()?;
    let rows: Vec<(String, String)> = {
        let mut statement =
            transaction.prepare("SELECT id, record FROM campaigns ORDER BY rowid")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (id, text) in rows {
        let mut record: Record = serde_json::from_str(&text)
            .map_err(|error| StoreError::Corrupt(format!("campaign {id}: {error}")))?;
        if record.ops.is_empty() {
            continue;
        }
        let holder = record.holder();
        let holder_text = ledger::holder_text(&holder).unwrap_or_default();
        let recorded: BTreeSet<String> = {
            let mut statement = transaction.prepare("SELECT key FROM ledger WHERE holder = ?1")?;
            let rows = statement.query_map(params![holder_text], |row| row.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        // In the order they were planned (a drain before its undrain: a release ends the
        // holds recorded before it).
        let mut ops: Vec<CampaignOp> = record.ops.values().cloned().collect();
        ops.sort_by(|a, b| (a.created_ms, a.step, &a.key).cmp(&(b.created_ms, b.step, &b.key)));
        for op in &ops {
            if op.no_reboot {
                record.hooks_no_reboot.insert(op.key.clone());
            }
            if !recorded.contains(&ledger::trail_key(&op.key)) {
                super::ledger::insert(&transaction, &record.entry(op))?;
            }
        }
        let text = serde_json::to_string(&record)
            .map_err(|error| StoreError::Corrupt(format!("encoding campaign: {error}")))?;
        transaction.execute(
            "UPDATE campaigns SET record = ?1 WHERE id = ?2",
            params![text, id],
        )?;
    }
    transaction.execute_batch("PRAGMA user_version = 5;")?;
    transaction.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use std::collections::BTreeMap;

    use nodecare_protocol::maintenance::{
        CampaignGroup, CampaignNode, CampaignRequest, HOOK_CONTEXT_KIND, HookContext, NodeStep,
    };
    use rusqlite::Connection;
    use uuid::Uuid;

    use super::*;
    use crate::store::Store;
    use nodecare_core::campaign::{OpKind, OpState};
    use nodecare_core::gate::Holder;
    use nodecare_exec::ledger::{Action, AgentOp, Hold, Ledger as _, State};

    fn op(
        key: &str,
        node: &str,
        step: NodeStep,
        kind: OpKind,
        state: OpState,
        at: u64,
    ) -> CampaignOp {
        CampaignOp {
            key: key.into(),
            node: node.into(),
            step,
            kind,
            state,
            job_id: (state != OpState::Planned).then_some(at),
            created_ms: at,
            finished_ms: matches!(state, OpState::Succeeded | OpState::Failed).then_some(at + 1),
            error: (state == OpState::Failed).then(|| "job 3 error: no".to_owned()),
            no_reboot: false,
            canceled: false,
            after: Vec::new(),
        }
    }

    /// A campaign in the middle of a group as a version-3 coordinator stored it: `n1` past its
    /// hook (which said it did not reboot) and undraining with a migration back planned, `n2`
    /// draining with a migration in flight.
    fn mid_group() -> (Record, BTreeMap<String, CampaignOp>) {
        let id = Uuid::from_u128(42);
        let mut record = Record::new(id, CampaignRequest::new("reboot"), "ops", 1);
        let node = |name: &str, step| CampaignNode {
            node: name.into(),
            step,
            step_started_ms: Some(5),
            step_deadline_ms: None,
            original_primaries: vec![],
            boot_id_before: Some("b0".into()),
            waiting_for: None,
            failure: None,
        };
        record.campaign.groups.push(CampaignGroup {
            index: 0,
            nodes: vec![node("n1", NodeStep::Undrain), node("n2", NodeStep::Drain)],
            started_ms: Some(1),
            finished_ms: None,
        });
        let hook = OpKind::Hook {
            request_id: Uuid::from_u128(7).to_string(),
            context: HookContext {
                kind: HOOK_CONTEXT_KIND.into(),
                campaign: id.to_string(),
                node: "n1".into(),
                hook: "reboot".into(),
                group: 0,
                groups_total: 1,
                group_nodes: vec!["n1".into(), "n2".into()],
                reboot_required: None,
                reason: None,
            },
        };
        let mut ops = BTreeMap::new();
        for o in [
            op(
                "g0-n1-drain",
                "n1",
                NodeStep::Drain,
                OpKind::Drain,
                OpState::Succeeded,
                2,
            ),
            op(
                "g0-n2-drain",
                "n2",
                NodeStep::Drain,
                OpKind::Drain,
                OpState::Submitted,
                2,
            ),
            op(
                "g0-n2-move-web-migrate",
                "n2",
                NodeStep::MovePrimaries,
                OpKind::Migrate {
                    instance: "web".into(),
                    target: None,
                },
                OpState::Submitted,
                3,
            ),
            CampaignOp {
                no_reboot: true,
                ..op(
                    "g0-n1-hook",
                    "n1",
                    NodeStep::Hook,
                    hook,
                    OpState::Succeeded,
                    4,
                )
            },
            op(
                "g0-n1-undrain",
                "n1",
                NodeStep::Undrain,
                OpKind::Undrain,
                OpState::Submitted,
                6,
            ),
            op(
                "g0-n1-back-db-migrate",
                "n1",
                NodeStep::MigrateBack,
                OpKind::Migrate {
                    instance: "db".into(),
                    target: None,
                },
                OpState::Planned,
                6,
            ),
        ] {
            ops.insert(o.key.clone(), o);
        }
        (record, ops)
    }

    /// A version-3 database (and a snapshot of it, pushed by an older master) holding a
    /// campaign in the middle of a group opens with the campaign's operations in the ledger,
    /// held by the campaign under their keys, and the record without them; the state machine
    /// sees the same operations.
    #[test]
    fn version_3_campaigns_carry_their_operations_into_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let (record, ops) = mid_group();
        {
            // Written as version 3 wrote it: the operations inside the record.
            let store = Store::open(&path).unwrap();
            let mut value = serde_json::to_value(&record).unwrap();
            value["ops"] = serde_json::to_value(&ops).unwrap();
            let connection = store.lock();
            connection
                .execute(
                    "INSERT INTO campaigns (id, created_ms, record) VALUES (?1, 1, ?2)",
                    params![record.campaign.id, value.to_string()],
                )
                .unwrap();
            connection
                .execute_batch("PRAGMA user_version = 3;")
                .unwrap();
        }
        let snapshot = {
            let mut connection = Connection::open(&path).unwrap();
            connection.serialize(rusqlite::MAIN_DB).unwrap().to_vec()
        };
        let check = |store: &Store| {
            let holder = Holder::Campaign {
                id: Uuid::from_u128(42),
            };
            let entries = store.of_holder(&holder).unwrap();
            let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "g0-n1-drain",
                    "g0-n2-drain",
                    "g0-n2-move-web-migrate",
                    "g0-n1-hook",
                    "g0-n1-undrain",
                    "g0-n1-back-db-migrate"
                ]
            );
            assert_eq!(entries[1].state, State::Submitted);
            assert_eq!(entries[1].job, Some(2));
            assert_eq!(entries[1].holds, [Hold::Rebooting { node: "n2".into() }]);
            assert_eq!(entries[4].holds, [Hold::Release { node: "n1".into() }]);
            assert_eq!(entries[5].state, State::Recorded);
            assert_eq!(entries[5].after, ["g0-n1-undrain"]);
            assert_eq!(entries[5].holds, [Hold::Receiving { node: "n1".into() }]);
            assert_eq!(
                entries[3].action,
                Action::Agent {
                    op: AgentOp::Hook {
                        node: "n1".into(),
                        command: "reboot".into()
                    }
                }
            );
            assert_eq!(
                entries[5].description,
                "maintenance campaign 00000000-0000-0000-0000-00000000002a group 0 step \
                 migrate-back: migrating db to its secondary"
            );
            // n1 released only once its undrain succeeds; n2 drained.
            let held = nodecare_exec::ledger::in_force(&entries);
            assert_eq!(
                held.nodes.keys().map(String::as_str).collect::<Vec<_>>(),
                ["n1", "n2"]
            );
            let mut stored = store.campaigns().unwrap().remove(0);
            assert!(stored.ops.is_empty(), "the record keeps no operations");
            stored.set_ops(&entries);
            assert_eq!(*stored.ops, ops);
            let text: String = store
                .lock()
                .query_row("SELECT record FROM campaigns", [], |row| row.get(0))
                .unwrap();
            assert!(!text.contains("\"ops\":"), "{text}");
        };
        check(&Store::open(&path).unwrap());
        // Opened again: nothing moves twice.
        check(&Store::open(&path).unwrap());
        let fresh = Store::open(&dir.path().join("new.db")).unwrap();
        fresh.restore(&snapshot).unwrap();
        check(&fresh);
    }
}
