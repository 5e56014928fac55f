//! The gate's durable state: grants to other tools (`/1/disruptions`), operator overrides,
//! the storm breaker, and the audit log of every write to them (who, when, what, why).

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::{Connection, OptionalExtension, params};
use uuid::Uuid;

use super::{Store, StoreError, to_i64, to_u64};
use nodecare_core::breaker::BreakerState;
use nodecare_core::gate::{Holder, Override};
use nodecare_protocol::gate::{AuditEntry, BreakerView, Grant, OverrideView};

/// The store document holding the storm breaker's state ([`BreakerState`]).
pub const BREAKER_DOCUMENT: &str = "breaker";

/// The audit log's `what` of an operator's breaker reset.
pub(super) const RESET_WHAT: &str = "reset the storm breaker";

/// The store document of when each grant was last renewed (grant id → Unix ms): a renewal
/// starts the planned disruption's grace again ([`Store::planned_grants`]).
pub const GRANT_RENEWALS_DOCUMENT: &str = "grant_renewals";

/// Who the coordinator itself is in the audit log (expiry, automatic breaker changes).
pub const SYSTEM: &str = "nodecare";

/// Creates the tables of schema version 2.
pub(super) fn migrate(connection: &Connection) -> Result<(), StoreError> {
    connection.execute_batch(
        "BEGIN;
         CREATE TABLE IF NOT EXISTS grants (
             id TEXT PRIMARY KEY,
             node TEXT NOT NULL,
             requester TEXT NOT NULL,
             reason TEXT NOT NULL,
             who TEXT NOT NULL,
             granted_ms INTEGER NOT NULL,
             expires_ms INTEGER NOT NULL);
         CREATE INDEX IF NOT EXISTS grants_node ON grants(node, requester);
         CREATE TABLE IF NOT EXISTS overrides (
             id TEXT PRIMARY KEY,
             domain TEXT NOT NULL,
             until_ms INTEGER NOT NULL,
             reason TEXT NOT NULL,
             who TEXT NOT NULL,
             created_ms INTEGER NOT NULL,
             revoked_ms INTEGER,
             revoked_by TEXT);
         CREATE TABLE IF NOT EXISTS audit (
             seq INTEGER PRIMARY KEY AUTOINCREMENT,
             at_ms INTEGER NOT NULL,
             who TEXT NOT NULL,
             what TEXT NOT NULL,
             why TEXT NOT NULL);
         PRAGMA user_version = 2;
         COMMIT;",
    )?;
    Ok(())
}

/// What revoking an override found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked now.
    Now(OverrideView),
    /// Revoked before, or expired.
    Ended(OverrideView),
    /// No such override.
    NotFound,
}

pub(super) fn audit(
    connection: &Connection,
    now_ms: u64,
    who: &str,
    what: &str,
    why: &str,
) -> Result<(), StoreError> {
    // History within the replicated state: held to its byte budget as it is written.
    let audit = AUDIT;
    audit.bytes(connection)?;
    connection.execute(
        "INSERT INTO audit (at_ms, who, what, why) VALUES (?1, ?2, ?3, ?4)",
        params![to_i64(now_ms), who, what, why],
    )?;
    audit.add(connection, text_bytes(&[who, what, why], 16))?;
    trim_audit(connection, super::AUDIT_BUDGET_BYTES)?;
    Ok(())
}

/// The bytes of `texts` and `fixed` more, as a budget counts them.
fn text_bytes(texts: &[&str], fixed: usize) -> i64 {
    let bytes = texts
        .iter()
        .map(|text| text.len())
        .fold(fixed, usize::saturating_add);
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// What `new` weighs as a row of `overrides` ([`OVERRIDES`]).
fn override_bytes(new: &Override) -> i64 {
    text_bytes(
        &[&new.id.to_string(), &new.domain, &new.reason, &new.who],
        24,
    )
}

/// Makes room for an override of `needed` bytes within [`super::OVERRIDES_BUDGET_BYTES`]: the
/// overrides that ended (revoked, or past their end at `now_ms`) are history and go first,
/// oldest first; those in force are never deleted. `Err(Full)` when they alone leave no room.
fn room_for_override(connection: &Connection, needed: i64, now_ms: u64) -> Result<(), StoreError> {
    let overrides = OVERRIDES;
    let budget = super::OVERRIDES_BUDGET_BYTES;
    let needed = to_u64(needed);
    let used = overrides.bytes(connection)?;
    if used.saturating_add(needed) <= budget {
        return Ok(());
    }
    let ended: Vec<(String, i64)> = {
        let mut statement = connection.prepare(&format!(
            "SELECT id, {} FROM overrides
             WHERE revoked_ms IS NOT NULL OR until_ms <= ?1
             ORDER BY min(until_ms, coalesce(revoked_ms, until_ms)), created_ms, id",
            overrides.row_bytes
        ))?;
        let rows = statement.query_map(params![to_i64(now_ms)], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        rows.collect::<Result<_, _>>()?
    };
    let mut left = used;
    for (id, bytes) in ended {
        if left.saturating_add(needed) <= budget {
            break;
        }
        connection.execute("DELETE FROM overrides WHERE id = ?1", params![id])?;
        overrides.add(connection, -bytes)?;
        left = left.saturating_sub(to_u64(bytes));
    }
    if left.saturating_add(needed) <= budget {
        return Ok(());
    }
    let count: i64 =
        connection.query_row("SELECT count(*) FROM overrides", [], |row| row.get(0))?;
    Err(StoreError::Full(format!(
        "no room for another override: the {count} overrides in force take {left} of the \
         {budget} bytes the replicated state keeps for overrides (this one needs {needed}); \
         revoke the overrides no longer needed"
    )))
}

fn grant_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Grant> {
    Ok(Grant {
        id: row.get(0)?,
        node: row.get(1)?,
        requester: row.get(2)?,
        reason: row.get(3)?,
        who: row.get(4)?,
        granted_ms: to_u64(row.get(5)?),
        expires_ms: to_u64(row.get(6)?),
    })
}

const GRANT_COLUMNS: &str = "id, node, requester, reason, who, granted_ms, expires_ms";

fn override_from_row(row: &rusqlite::Row<'_>, now_ms: u64) -> rusqlite::Result<OverrideView> {
    let until_ms = to_u64(row.get(2)?);
    let revoked_ms: Option<i64> = row.get(6)?;
    Ok(OverrideView {
        id: row.get(0)?,
        domain: row.get(1)?,
        until_ms,
        reason: row.get(3)?,
        who: row.get(4)?,
        created_ms: to_u64(row.get(5)?),
        revoked_ms: revoked_ms.map(to_u64),
        revoked_by: row.get(7)?,
        active: revoked_ms.is_none() && until_ms > now_ms,
    })
}

const OVERRIDE_COLUMNS: &str =
    "id, domain, until_ms, reason, who, created_ms, revoked_ms, revoked_by";

impl Store {
    /// Appends a line to the audit log.
    pub fn audit(&self, now_ms: u64, who: &str, what: &str, why: &str) -> Result<(), StoreError> {
        audit(&self.lock(), now_ms, who, what, why)
    }

    /// The audit log's last `limit` lines, oldest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let connection = self.lock();
        let mut statement = connection
            .prepare("SELECT seq, at_ms, who, what, why FROM audit ORDER BY seq DESC LIMIT ?1")?;
        let rows = statement.query_map(params![to_i64(limit as u64)], |row| {
            Ok(AuditEntry {
                seq: to_u64(row.get(0)?),
                at_ms: to_u64(row.get(1)?),
                who: row.get(2)?,
                what: row.get(3)?,
                why: row.get(4)?,
            })
        })?;
        let mut entries = rows.collect::<Result<Vec<_>, _>>()?;
        entries.reverse();
        Ok(entries)
    }

    /// The grants not expired at `now_ms`, oldest first.
    pub fn grants(&self, now_ms: u64) -> Result<Vec<Grant>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(&format!(
            "SELECT {GRANT_COLUMNS} FROM grants WHERE expires_ms > ?1 ORDER BY granted_ms, id"
        ))?;
        let rows = statement.query_map(params![to_i64(now_ms)], grant_from_row)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The nodes held by grants not expired at `now_ms`, with their holders (what the round
    /// adds to the gate's disruptions in force).
    pub fn grants_in_force(&self, now_ms: u64) -> Result<Vec<(String, Holder)>, StoreError> {
        self.grants(now_ms)?
            .into_iter()
            .map(|grant| {
                let id = Uuid::parse_str(&grant.id)
                    .map_err(|e| StoreError::Corrupt(format!("grant id {:?}: {e}", grant.id)))?;
                Ok((
                    grant.node,
                    Holder::Grant {
                        id,
                        requester: grant.requester,
                    },
                ))
            })
            .collect()
    }

    /// The grants not expired at `now_ms` as planned disruptions for the grace
    /// ([`nodecare_core::gate::grace`]): node, Unix ms the grace runs from, the grant's last renewal
    /// (else when it was granted). A renewal starts the grace again.
    pub fn planned_grants(
        &self,
        now_ms: u64,
    ) -> Result<Vec<nodecare_core::gate::Planned>, StoreError> {
        let renewals: BTreeMap<String, u64> =
            self.document(GRANT_RENEWALS_DOCUMENT)?.unwrap_or_default();
        Ok(self
            .grants(now_ms)?
            .into_iter()
            .map(|grant| {
                let from_ms = renewals
                    .get(&grant.id)
                    .map_or(grant.granted_ms, |renewed| (*renewed).max(grant.granted_ms));
                nodecare_core::gate::Planned {
                    holder: format!("admission {} of {}", grant.id, grant.requester),
                    node: grant.node,
                    from_ms,
                }
            })
            .collect())
    }

    /// The unexpired grant of `requester` for `node`, if any.
    pub fn grant_of(
        &self,
        node: &str,
        requester: &str,
        now_ms: u64,
    ) -> Result<Option<Grant>, StoreError> {
        let connection = self.lock();
        Ok(connection
            .query_row(
                &format!(
                    "SELECT {GRANT_COLUMNS} FROM grants
                     WHERE node = ?1 AND requester = ?2 AND expires_ms > ?3"
                ),
                params![node, requester, to_i64(now_ms)],
                grant_from_row,
            )
            .optional()?)
    }

    /// Stores a new or renewed grant, with its audit line.
    pub fn save_grant(&self, grant: &Grant, now_ms: u64, renewed: bool) -> Result<(), StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        transaction.execute(
            &format!(
                "INSERT INTO grants ({GRANT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT(id) DO UPDATE SET reason = excluded.reason, who = excluded.who,
                     expires_ms = excluded.expires_ms"
            ),
            params![
                grant.id,
                grant.node,
                grant.requester,
                grant.reason,
                grant.who,
                to_i64(grant.granted_ms),
                to_i64(grant.expires_ms)
            ],
        )?;
        if renewed {
            // When it was renewed, for its grace; entries of grants gone are dropped.
            let text: Option<String> = transaction
                .query_row(
                    "SELECT record FROM documents WHERE name = ?1",
                    params![GRANT_RENEWALS_DOCUMENT],
                    |row| row.get(0),
                )
                .optional()?;
            let mut renewals: BTreeMap<String, u64> = match text {
                Some(text) => serde_json::from_str(&text).map_err(|error| {
                    StoreError::Corrupt(format!("document {GRANT_RENEWALS_DOCUMENT}: {error}"))
                })?,
                None => BTreeMap::new(),
            };
            let mut live = transaction.prepare("SELECT id FROM grants")?;
            let ids = live
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<BTreeSet<String>, _>>()?;
            drop(live);
            renewals.retain(|id, _| ids.contains(id));
            renewals.insert(grant.id.clone(), now_ms);
            let text = serde_json::to_string(&renewals).map_err(|error| {
                StoreError::Corrupt(format!(
                    "encoding document {GRANT_RENEWALS_DOCUMENT}: {error}"
                ))
            })?;
            transaction.execute(
                "INSERT INTO documents (name, record) VALUES (?1, ?2)
                 ON CONFLICT(name) DO UPDATE SET record = excluded.record",
                params![GRANT_RENEWALS_DOCUMENT, text],
            )?;
        }
        let verb = if renewed { "renew" } else { "grant" };
        audit(
            &transaction,
            now_ms,
            &grant.who,
            &format!(
                "{verb} disruption {} of {} to {} until {} ms",
                grant.id, grant.node, grant.requester, grant.expires_ms
            ),
            &grant.reason,
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// Releases a grant (expired or not); the grant if there was one.
    pub fn release_grant(
        &self,
        id: &str,
        who: &str,
        now_ms: u64,
    ) -> Result<Option<Grant>, StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let grant = transaction
            .query_row(
                &format!("SELECT {GRANT_COLUMNS} FROM grants WHERE id = ?1"),
                params![id],
                grant_from_row,
            )
            .optional()?;
        if let Some(grant) = &grant {
            transaction.execute("DELETE FROM grants WHERE id = ?1", params![id])?;
            audit(
                &transaction,
                now_ms,
                who,
                &format!(
                    "release disruption {} of {} (requester {})",
                    grant.id, grant.node, grant.requester
                ),
                "released",
            )?;
        }
        transaction.commit()?;
        Ok(grant)
    }

    /// Deletes the grants expired at `now_ms` (each with an audit line); the expired grants.
    pub fn expire_grants(&self, now_ms: u64) -> Result<Vec<Grant>, StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let expired = {
            let mut statement = transaction.prepare(&format!(
                "SELECT {GRANT_COLUMNS} FROM grants WHERE expires_ms <= ?1"
            ))?;
            let rows = statement.query_map(params![to_i64(now_ms)], grant_from_row)?;
            rows.collect::<Result<Vec<_>, _>>()?
        };
        for grant in &expired {
            transaction.execute("DELETE FROM grants WHERE id = ?1", params![grant.id])?;
            audit(
                &transaction,
                now_ms,
                SYSTEM,
                &format!(
                    "expire disruption {} of {} (requester {})",
                    grant.id, grant.node, grant.requester
                ),
                "not renewed within its ttl",
            )?;
        }
        transaction.commit()?;
        Ok(expired)
    }

    /// Stores a new override, with its audit line; refused ([`StoreError::Full`]) when the
    /// overrides in force leave no room for it within [`super::OVERRIDES_BUDGET_BYTES`] (the
    /// ended ones are deleted first to make room).
    pub fn add_override(&self, new: &Override) -> Result<(), StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let bytes = override_bytes(new);
        room_for_override(&transaction, bytes, new.created_ms)?;
        OVERRIDES.add(&transaction, bytes)?;
        transaction.execute(
            &format!(
                "INSERT INTO overrides ({OVERRIDE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, NULL)"
            ),
            params![
                new.id.to_string(),
                new.domain,
                to_i64(new.until_ms),
                new.reason,
                new.who,
                to_i64(new.created_ms)
            ],
        )?;
        audit(
            &transaction,
            new.created_ms,
            &new.who,
            &format!(
                "override {} of failure domain {} until {} ms",
                new.id, new.domain, new.until_ms
            ),
            &new.reason,
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// Revokes an override.
    pub fn revoke_override(&self, id: Uuid, who: &str, now_ms: u64) -> Result<Revoked, StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let found = transaction
            .query_row(
                &format!("SELECT {OVERRIDE_COLUMNS} FROM overrides WHERE id = ?1"),
                params![id.to_string()],
                |row| override_from_row(row, now_ms),
            )
            .optional()?;
        let Some(mut view) = found else {
            return Ok(Revoked::NotFound);
        };
        if !view.active {
            return Ok(Revoked::Ended(view));
        }
        OVERRIDES.add(&transaction, text_bytes(&[who], 0))?;
        transaction.execute(
            "UPDATE overrides SET revoked_ms = ?2, revoked_by = ?3 WHERE id = ?1",
            params![id.to_string(), to_i64(now_ms), who],
        )?;
        audit(
            &transaction,
            now_ms,
            who,
            &format!("revoke override {id} of failure domain {}", view.domain),
            "revoked",
        )?;
        transaction.commit()?;
        view.revoked_ms = Some(now_ms);
        view.revoked_by = Some(who.to_owned());
        view.active = false;
        Ok(Revoked::Now(view))
    }

    /// The overrides in force at `now_ms` or that ended (expired or revoked) after
    /// `ended_since_ms`, oldest first.
    pub fn overrides(
        &self,
        now_ms: u64,
        ended_since_ms: u64,
    ) -> Result<Vec<OverrideView>, StoreError> {
        let connection = self.lock();
        let mut statement = connection.prepare(&format!(
            "SELECT {OVERRIDE_COLUMNS} FROM overrides
             WHERE min(until_ms, coalesce(revoked_ms, until_ms)) > ?1
             ORDER BY created_ms, id"
        ))?;
        let rows = statement.query_map(params![to_i64(ended_since_ms)], |row| {
            override_from_row(row, now_ms)
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The overrides in force at `now_ms`, as the gate takes them.
    pub fn overrides_in_force(&self, now_ms: u64) -> Result<Vec<Override>, StoreError> {
        self.overrides(now_ms, now_ms)?
            .into_iter()
            .filter(|view| view.active)
            .map(|view| {
                Ok(Override {
                    id: Uuid::parse_str(&view.id).map_err(|e| {
                        StoreError::Corrupt(format!("override id {:?}: {e}", view.id))
                    })?,
                    domain: view.domain,
                    until_ms: view.until_ms,
                    reason: view.reason,
                    who: view.who,
                    created_ms: view.created_ms,
                })
            })
            .collect()
    }

    /// The storm breaker's state (the round's [`BreakerState`], closed when nothing is stored).
    fn breaker_state(connection: &Connection) -> Result<BreakerState, StoreError> {
        let text: Option<String> = connection
            .query_row(
                "SELECT record FROM documents WHERE name = ?1",
                params![BREAKER_DOCUMENT],
                |row| row.get(0),
            )
            .optional()?;
        text.map_or_else(
            || Ok(BreakerState::default()),
            |text| {
                serde_json::from_str(&text).map_err(|error| {
                    StoreError::Corrupt(format!("document {BREAKER_DOCUMENT}: {error}"))
                })
            },
        )
    }

    fn save_breaker_state(connection: &Connection, state: &BreakerState) -> Result<(), StoreError> {
        let text = serde_json::to_string(state)
            .map_err(|error| StoreError::Corrupt(format!("encoding breaker: {error}")))?;
        connection.execute(
            "INSERT INTO documents (name, record) VALUES (?1, ?2)
             ON CONFLICT(name) DO UPDATE SET record = excluded.record",
            params![BREAKER_DOCUMENT, text],
        )?;
        Ok(())
    }

    /// The storm breaker as status pages show it: open or not, since when and why, and the
    /// last operator reset (who from the audit log).
    pub fn breaker(&self) -> Result<BreakerView, StoreError> {
        let connection = self.lock();
        let state = Self::breaker_state(&connection)?;
        let reset_by: Option<String> = connection
            .query_row(
                "SELECT who FROM audit WHERE what = ?1 ORDER BY seq DESC LIMIT 1",
                params![RESET_WHAT],
                |row| row.get(0),
            )
            .optional()?;
        let (since_ms, why) = state
            .open
            .map_or((None, None), |(since, why)| (Some(since), Some(why)));
        Ok(BreakerView {
            open: since_ms.is_some(),
            since_ms,
            why,
            reset_by: state.reset_ms.and(reset_by),
            reset_ms: state.reset_ms,
        })
    }

    /// Opens the storm breaker (a no-op when it is open already), with an audit line; whether
    /// it opened now.
    pub fn set_breaker_open(&self, why: &str, now_ms: u64) -> Result<bool, StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let mut state = Self::breaker_state(&transaction)?;
        if state.open.is_some() {
            return Ok(false);
        }
        state.open = Some((now_ms, why.to_owned()));
        state.quiet_since_ms = None;
        Self::save_breaker_state(&transaction, &state)?;
        audit(&transaction, now_ms, SYSTEM, "open the storm breaker", why)?;
        transaction.commit()?;
        Ok(true)
    }

    /// An operator closes the storm breaker ([`nodecare_core::breaker::reset`]: incidents opened before
    /// now no longer count), with an audit line; whether it was open.
    pub fn reset_breaker(&self, who: &str, why: &str, now_ms: u64) -> Result<bool, StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let state = Self::breaker_state(&transaction)?;
        if state.open.is_none() {
            return Ok(false);
        }
        Self::save_breaker_state(&transaction, &nodecare_core::breaker::reset(state, now_ms))?;
        audit(&transaction, now_ms, who, RESET_WHAT, why)?;
        transaction.commit()?;
        Ok(true)
    }
}

/// A table held to a byte budget: what its rows weigh (texts' bytes and a fixed part for the
/// integers) is kept in the `counters` table as rows are written and deleted, so a write checks
/// the budget without reading the table; it is counted again from the rows when missing (a
/// state from before it was kept) and after every retention run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Budgeted {
    /// The table.
    pub table: &'static str,
    /// Its entry in `counters`.
    pub counter: &'static str,
    /// What a row weighs, in SQL over the table's columns.
    pub row_bytes: &'static str,
}

/// The audit log, held to [`super::AUDIT_BUDGET_BYTES`].
pub(super) const AUDIT: Budgeted = Budgeted {
    table: "audit",
    counter: "audit_bytes",
    row_bytes: "(length(CAST(who AS BLOB)) + length(CAST(what AS BLOB)) \
                + length(CAST(why AS BLOB)) + 16)",
};

/// The operator overrides, held to [`super::OVERRIDES_BUDGET_BYTES`].
pub(super) const OVERRIDES: Budgeted = Budgeted {
    table: "overrides",
    counter: "overrides_bytes",
    row_bytes: "(length(CAST(id AS BLOB)) + length(CAST(domain AS BLOB)) \
                + length(CAST(reason AS BLOB)) + length(CAST(who AS BLOB)) \
                + coalesce(length(CAST(revoked_by AS BLOB)), 0) + 24)",
};

impl Budgeted {
    /// The table's bytes (counted from its rows when the counter is missing).
    pub(super) fn bytes(&self, connection: &Connection) -> Result<u64, StoreError> {
        let kept: Option<i64> = connection
            .query_row(
                "SELECT value FROM counters WHERE name = ?1",
                params![self.counter],
                |row| row.get(0),
            )
            .optional()?;
        match kept {
            Some(bytes) => Ok(super::to_u64(bytes)),
            None => self.recount(connection),
        }
    }

    /// Counts the table's bytes from its rows, and keeps the figure.
    pub(super) fn recount(&self, connection: &Connection) -> Result<u64, StoreError> {
        let bytes: i64 = connection.query_row(
            &format!(
                "SELECT coalesce(sum({}), 0) FROM {}",
                self.row_bytes, self.table
            ),
            [],
            |row| row.get(0),
        )?;
        connection.execute(
            "INSERT INTO counters (name, value) VALUES (?1, ?2)
             ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            params![self.counter, bytes],
        )?;
        Ok(super::to_u64(bytes))
    }

    /// Adds `delta` bytes (rows written: positive; deleted: negative) to the kept figure.
    pub(super) fn add(&self, connection: &Connection, delta: i64) -> Result<(), StoreError> {
        self.bytes(connection)?;
        connection.execute(
            "UPDATE counters SET value = max(value + ?2, 0) WHERE name = ?1",
            params![self.counter, delta],
        )?;
        Ok(())
    }
}

/// Deletes the oldest audit lines (the last breaker reset excepted) while the log weighs more
/// than `budget` bytes, down to seven eighths of it (so that the next lines do not each delete
/// one); the lines deleted.
pub(super) fn trim_audit(connection: &Connection, budget: u64) -> Result<usize, StoreError> {
    let total = AUDIT.bytes(connection)?;
    if total <= budget {
        return Ok(0);
    }
    let target = budget - budget / 8;
    let reset: Option<i64> = connection.query_row(
        "SELECT max(seq) FROM audit WHERE what = ?1",
        params![RESET_WHAT],
        |row| row.get(0),
    )?;
    let mut freed = 0_u64;
    let mut through: Option<i64> = None;
    {
        let mut statement = connection.prepare(&format!(
            "SELECT seq, {} FROM audit ORDER BY seq",
            AUDIT.row_bytes
        ))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            if total.saturating_sub(freed) <= target {
                break;
            }
            let seq: i64 = row.get(0)?;
            through = Some(seq);
            if Some(seq) != reset {
                freed = freed.saturating_add(super::to_u64(row.get(1)?));
            }
        }
    }
    let Some(through) = through else {
        return Ok(0);
    };
    let deleted = connection.execute(
        "DELETE FROM audit WHERE seq <= ?1 AND seq IS NOT ?2",
        params![through, reset],
    )?;
    AUDIT.add(connection, -i64::try_from(freed).unwrap_or(i64::MAX))?;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(id: u128, node: &str, expires_ms: u64) -> Grant {
        Grant {
            id: Uuid::from_u128(id).to_string(),
            node: node.into(),
            reason: "kernel update".into(),
            requester: "kured".into(),
            granted_ms: 1_000,
            expires_ms,
            who: "admin".into(),
        }
    }

    fn override_of(id: u128, domain: &str, until_ms: u64) -> Override {
        Override {
            id: Uuid::from_u128(id),
            domain: domain.into(),
            until_ms,
            reason: "firmware".into(),
            who: "admin".into(),
            created_ms: 1_000,
        }
    }

    /// The audit log is held to its byte budget as it is written: the longest lines, written
    /// past the budget, leave the newest lines and the last breaker reset.
    #[test]
    fn the_audit_log_keeps_to_its_budget() {
        let store = Store::open_memory().unwrap();
        let reason = "r".repeat(nodecare_protocol::limits::MAX_TEXT_BYTES);
        let who = "w".repeat(nodecare_protocol::limits::MAX_NAME_BYTES);
        store.audit(1, "op", RESET_WHAT, "storm over").unwrap();
        let line = (reason.len() + who.len() + 40) as u64;
        let lines = 2 * super::super::AUDIT_BUDGET_BYTES / line;
        for n in 0..lines {
            store
                .audit(2 + n, &who, "renew disruption", &reason)
                .unwrap();
        }
        let log = store.audit_log(usize::MAX).unwrap();
        let bytes: u64 = log
            .iter()
            .map(|l| (l.who.len() + l.what.len() + l.why.len() + 16) as u64)
            .sum();
        assert!(bytes <= super::super::AUDIT_BUDGET_BYTES, "{bytes}");
        assert!(
            bytes > super::super::AUDIT_BUDGET_BYTES / 2,
            "{bytes}: only the oldest go"
        );
        assert_eq!(log[0].what, RESET_WHAT, "the last breaker reset is kept");
        assert_eq!(log.last().unwrap().at_ms, 1 + lines);
        assert!(
            (store.snapshot().unwrap().len() as u64) < 2 * super::super::AUDIT_BUDGET_BYTES,
            "the state holds about the budget"
        );
    }

    /// Overrides are held to their byte budget: the ended ones go to make room, and a new one
    /// that the overrides in force leave no room for is refused, saying why.
    #[test]
    fn overrides_past_their_budget_are_refused() {
        let store = Store::open_memory().unwrap();
        let long = |id: u128, until_ms: u64| Override {
            id: Uuid::from_u128(id),
            domain: "d".repeat(nodecare_protocol::limits::MAX_NAME_BYTES),
            until_ms,
            reason: "r".repeat(nodecare_protocol::limits::MAX_TEXT_BYTES),
            who: "w".repeat(nodecare_protocol::limits::MAX_NAME_BYTES),
            created_ms: 1_000,
        };
        // Half the budget of overrides that ended (expired at 2 000), then the rest in force.
        let mut id = 0;
        let refusal = loop {
            id += 1;
            let until = if id <= 600 { 2_000 } else { 1_000_000 };
            let mut new = long(id, until);
            new.created_ms = if id <= 600 { 1_000 } else { 3_000 };
            match store.add_override(&new) {
                Ok(()) => {}
                Err(error) => break error,
            }
            assert!(id < 100_000, "never refused");
        };
        let StoreError::Full(why) = refusal else {
            panic!("{refusal}");
        };
        assert!(
            why.contains("revoke the overrides no longer needed"),
            "{why}"
        );
        let kept = store.overrides(3_000, 0).unwrap();
        assert!(
            kept.iter().all(|o| o.active),
            "the ended ones went first: {} ended kept",
            kept.iter().filter(|o| !o.active).count()
        );
        assert!(kept.len() > 1_000, "{}", kept.len());
        // Revoking one makes room for one.
        let first = Uuid::parse_str(&kept[0].id).unwrap();
        store.revoke_override(first, "op", 3_000).unwrap();
        let mut next = long(id + 1, 1_000_000);
        next.created_ms = 3_001;
        store.add_override(&next).unwrap();
    }

    #[test]
    fn grants_renew_release_and_expire_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open_dir(dir.path()).unwrap();
            store
                .save_grant(&grant(1, "n1", 5_000), 1_000, false)
                .unwrap();
            store
                .save_grant(&grant(2, "n2", 9_000), 1_000, false)
                .unwrap();
            store
                .save_grant(&grant(3, "n3", 9_000), 1_000, false)
                .unwrap();
            let mut renewed = grant(1, "n1", 20_000);
            renewed.reason = "still rebooting".into();
            store.save_grant(&renewed, 4_000, true).unwrap();
        }
        let store = Store::open_dir(dir.path()).unwrap();
        assert_eq!(
            store
                .grant_of("n1", "kured", 10_000)
                .unwrap()
                .unwrap()
                .expires_ms,
            20_000
        );
        assert_eq!(store.grant_of("n1", "other", 10_000).unwrap(), None);
        assert_eq!(
            store
                .release_grant(&Uuid::from_u128(3).to_string(), "ops", 5_000)
                .unwrap()
                .map(|g| g.node),
            Some("n3".to_owned())
        );
        assert_eq!(store.release_grant("nope", "ops", 5_000).unwrap(), None);
        // At 10 s, grant 2 is expired: ignored at once, cleaned up by expire_grants.
        let held = store.grants_in_force(10_000).unwrap();
        assert_eq!(
            held,
            vec![(
                "n1".to_owned(),
                Holder::Grant {
                    id: Uuid::from_u128(1),
                    requester: "kured".into()
                }
            )]
        );
        let expired = store.expire_grants(10_000).unwrap();
        assert_eq!(
            expired.iter().map(|g| g.node.as_str()).collect::<Vec<_>>(),
            ["n2"]
        );
        assert_eq!(store.grants(0).unwrap().len(), 1);
        let log = store.audit_log(10).unwrap();
        let whats: Vec<&str> = log
            .iter()
            .map(|e| e.what.split(' ').next().unwrap_or(""))
            .collect();
        assert_eq!(
            whats,
            ["grant", "grant", "grant", "renew", "release", "expire"]
        );
        assert_eq!(log[3].why, "still rebooting");
        assert_eq!(log[5].who, SYSTEM);
    }

    /// Issue 25 (3): renewing a grant starts its grace again; a grant never renewed keeps the
    /// grace from when it was granted.
    #[test]
    fn renewing_a_grant_renews_its_grace() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store
            .save_grant(&grant(1, "n1", 100_000), 1_000, false)
            .unwrap();
        store
            .save_grant(&grant(2, "n2", 100_000), 1_000, false)
            .unwrap();
        store
            .save_grant(&grant(1, "n1", 200_000), 50_000, true)
            .unwrap();
        let planned = store.planned_grants(60_000).unwrap();
        assert_eq!(
            planned
                .iter()
                .map(|p| (p.node.as_str(), p.from_ms))
                .collect::<Vec<_>>(),
            vec![("n1", 50_000), ("n2", 1_000)]
        );
        let facts = |name: &str| nodecare_core::gate::NodeFacts {
            name: name.into(),
            group: "g".into(),
            domain: format!("rack:{name}"),
            vm_capable: true,
            drained: false,
            offline: false,
            master: false,
            memory_free: None,
            primary_memory: None,
            primaries: 0,
        };
        let view = nodecare_core::gate::View {
            nodes: [
                ("n1".to_owned(), facts("n1")),
                ("n2".to_owned(), facts("n2")),
            ]
            .into(),
            storage: Vec::new(),
            now_ms: 60_000,
        };
        // A grace of 30 s: n2's (granted at 1 s) ended, n1's (renewed at 50 s) runs.
        let graced = nodecare_core::gate::grace(&view, &planned, &BTreeMap::new(), 30_000);
        assert_eq!(
            graced
                .iter()
                .map(|(node, grace)| (node.as_str(), grace.until_ms))
                .collect::<Vec<_>>(),
            vec![("n1", 80_000)]
        );
    }

    #[test]
    fn overrides_expire_and_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store
            .add_override(&override_of(1, "rack:r1", 10_000))
            .unwrap();
        store
            .add_override(&override_of(2, "rack:r2", 50_000))
            .unwrap();
        store
            .add_override(&override_of(3, "rack:r3", 50_000))
            .unwrap();
        let domains = |list: Vec<Override>| list.into_iter().map(|o| o.domain).collect::<Vec<_>>();
        assert_eq!(
            domains(store.overrides_in_force(5_000).unwrap()),
            ["rack:r1", "rack:r2", "rack:r3"]
        );
        assert_eq!(
            domains(store.overrides_in_force(10_000).unwrap()),
            ["rack:r2", "rack:r3"]
        );
        match store
            .revoke_override(Uuid::from_u128(2), "ops", 11_000)
            .unwrap()
        {
            Revoked::Now(view) => {
                assert!(!view.active);
                assert_eq!(view.revoked_by.as_deref(), Some("ops"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store
                .revoke_override(Uuid::from_u128(2), "ops", 12_000)
                .unwrap(),
            Revoked::Ended(_)
        ));
        assert!(matches!(
            store
                .revoke_override(Uuid::from_u128(1), "ops", 12_000)
                .unwrap(),
            Revoked::Ended(_)
        ));
        assert_eq!(
            store
                .revoke_override(Uuid::from_u128(9), "ops", 12_000)
                .unwrap(),
            Revoked::NotFound
        );
        assert_eq!(
            domains(store.overrides_in_force(12_000).unwrap()),
            ["rack:r3"]
        );
        // Listing: in force, or ended after the given time.
        let listed: Vec<(String, bool)> = store
            .overrides(12_000, 10_500)
            .unwrap()
            .into_iter()
            .map(|o| (o.domain, o.active))
            .collect();
        assert_eq!(
            listed,
            [("rack:r2".to_owned(), false), ("rack:r3".to_owned(), true)]
        );
        let log = store.audit_log(100).unwrap();
        assert_eq!(log.len(), 4, "{log:?}");
        assert_eq!(log[3].who, "ops");
    }

    #[test]
    fn the_breaker_opens_once_and_is_reset_by_an_operator() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open_dir(dir.path()).unwrap();
            assert_eq!(store.breaker().unwrap(), BreakerView::default());
            assert_eq!(
                store.document::<BreakerState>(BREAKER_DOCUMENT).unwrap(),
                None
            );
            assert!(!store.reset_breaker("ops", "nothing to reset", 500).unwrap());
            assert!(
                store
                    .set_breaker_open("30 of 60 nodes want evacuate", 1_000)
                    .unwrap()
            );
            assert!(!store.set_breaker_open("later", 2_000).unwrap());
        }
        let store = Store::open_dir(dir.path()).unwrap();
        let breaker = store.breaker().unwrap();
        assert!(breaker.open);
        assert_eq!(breaker.since_ms, Some(1_000));
        assert_eq!(breaker.why.as_deref(), Some("30 of 60 nodes want evacuate"));
        assert!(store.reset_breaker("ops", "detector fixed", 3_000).unwrap());
        // The round's state: closed, incidents before the reset no longer count.
        let state: BreakerState = store.document(BREAKER_DOCUMENT).unwrap().unwrap();
        assert_eq!((state.open, state.reset_ms), (None, Some(3_000)));
        let breaker = store.breaker().unwrap();
        assert!(!breaker.open);
        assert_eq!(
            (breaker.reset_by.as_deref(), breaker.reset_ms),
            (Some("ops"), Some(3_000))
        );
        let log = store.audit_log(10).unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(
            (log[1].who.as_str(), log[1].why.as_str()),
            ("ops", "detector fixed")
        );
    }

    #[test]
    fn version_1_databases_are_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let connection = Connection::open(&path).unwrap();
            connection
                .execute_batch("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL); PRAGMA user_version = 1;")
                .unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert!(store.grants(0).unwrap().is_empty());
        assert!(store.set_breaker_open("x", 1).unwrap());
    }
}
