//! The run-time maintenance freezes (`nodecare freeze`): one document of the state, replicated
//! with it, every change audited. The configuration's freezes are not stored: they are the
//! configuration's.

use uuid::Uuid;

use super::{Store, StoreError};
use nodecare_core::calendar::{Freeze, MAX_FREEZES};

/// The store document holding the run-time freezes (a list of [`Freeze`]).
pub const FREEZES_DOCUMENT: &str = "freezes";

/// How long an ended freeze is still listed (and kept in the state).
const ENDED_KEPT_MS: u64 = nodecare_core::calendar::ENDED_SHOWN_MS;

/// What lifting a freeze found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifted {
    /// Lifted now.
    Now(Freeze),
    /// It had ended (lifted before, or past its end).
    Ended(Freeze),
    /// No such freeze.
    NotFound,
}

fn read(connection: &rusqlite::Connection) -> Result<Vec<Freeze>, StoreError> {
    Ok(super::document_in(connection, FREEZES_DOCUMENT)?.unwrap_or_default())
}

fn write(connection: &rusqlite::Connection, freezes: &[Freeze]) -> Result<(), StoreError> {
    super::save_document_in(connection, FREEZES_DOCUMENT, &freezes)
}

impl Store {
    /// The run-time freezes: in force, planned, and those ended within the last week.
    pub fn freezes(&self) -> Result<Vec<Freeze>, StoreError> {
        read(&self.lock())
    }

    /// Stores a new freeze with its audit line; freezes ended more than a week ago are
    /// forgotten first. Refused ([`StoreError::Full`]) when [`MAX_FREEZES`] are in force or
    /// planned.
    pub fn add_freeze(&self, new: &Freeze) -> Result<(), StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let now = new.created_ms;
        let mut freezes: Vec<Freeze> = read(&transaction)?
            .into_iter()
            .filter(|f| !f.ended(now.saturating_sub(ENDED_KEPT_MS)))
            .collect();
        let open = freezes.iter().filter(|f| !f.ended(now)).count();
        if open >= MAX_FREEZES {
            return Err(StoreError::Full(format!(
                "{open} freezes are in force or planned (at most {MAX_FREEZES}): lift those no longer needed"
            )));
        }
        // Ended ones make room, oldest first.
        while freezes.len() >= MAX_FREEZES {
            let Some(oldest) = freezes
                .iter()
                .enumerate()
                .filter(|(_, f)| f.ended(now))
                .min_by_key(|(_, f)| f.lifted_ms.unwrap_or(f.until_ms).min(f.until_ms))
                .map(|(i, _)| i)
            else {
                break;
            };
            freezes.remove(oldest);
        }
        freezes.push(new.clone());
        write(&transaction, &freezes)?;
        super::admission::audit(
            &transaction,
            now,
            &new.who,
            &format!(
                "freeze {} from {} ms until {} ms",
                new.id, new.from_ms, new.until_ms
            ),
            &new.reason,
        )?;
        transaction.commit()?;
        Ok(())
    }

    /// Lifts a freeze (audited).
    pub fn lift_freeze(&self, id: Uuid, who: &str, now_ms: u64) -> Result<Lifted, StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let mut freezes = read(&transaction)?;
        let Some(freeze) = freezes.iter_mut().find(|f| f.id == id) else {
            return Ok(Lifted::NotFound);
        };
        if freeze.ended(now_ms) {
            return Ok(Lifted::Ended(freeze.clone()));
        }
        freeze.lifted_ms = Some(now_ms);
        freeze.lifted_by = Some(who.to_owned());
        let lifted = freeze.clone();
        write(&transaction, &freezes)?;
        super::admission::audit(
            &transaction,
            now_ms,
            who,
            &format!("lift freeze {id}"),
            &lifted.reason,
        )?;
        transaction.commit()?;
        Ok(Lifted::Now(lifted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn freeze(id: u128, from_ms: u64, until_ms: u64, created_ms: u64) -> Freeze {
        Freeze {
            id: Uuid::from_u128(id),
            from_ms,
            until_ms,
            reason: "year end".into(),
            who: "alice".into(),
            created_ms,
            lifted_ms: None,
            lifted_by: None,
        }
    }

    #[test]
    fn freezes_are_kept_lifted_once_and_audited() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let store = Store::open_dir(dir.path())?;
        assert!(store.freezes()?.is_empty());
        store.add_freeze(&freeze(1, 1_000, 10_000, 500))?;
        assert_eq!(store.freezes()?.len(), 1);
        assert!(matches!(
            store.lift_freeze(Uuid::from_u128(1), "bob", 2_000)?,
            Lifted::Now(f) if f.lifted_by.as_deref() == Some("bob")
        ));
        assert!(matches!(
            store.lift_freeze(Uuid::from_u128(1), "bob", 3_000)?,
            Lifted::Ended(_)
        ));
        assert_eq!(
            store.lift_freeze(Uuid::from_u128(9), "bob", 3_000)?,
            Lifted::NotFound
        );
        let audit = store.audit_log(10)?;
        assert!(
            audit
                .iter()
                .any(|a| a.what.starts_with("freeze ") && a.who == "alice")
        );
        assert!(
            audit
                .iter()
                .any(|a| a.what.starts_with("lift freeze ") && a.who == "bob")
        );
        Ok(())
    }

    #[test]
    fn open_freezes_are_bounded_and_ended_ones_make_room() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let store = Store::open_dir(dir.path())?;
        for id in 0..MAX_FREEZES as u128 {
            store.add_freeze(&freeze(id, 1_000, 100_000, 500))?;
        }
        assert!(matches!(
            store.add_freeze(&freeze(999, 1_000, 100_000, 600)),
            Err(StoreError::Full(_))
        ));
        // Once they ended, a new one fits, and the list stays bounded.
        store.add_freeze(&freeze(1_000, 200_000, 300_000, 150_000))?;
        assert!(store.freezes()?.len() <= MAX_FREEZES);
        assert!(
            store
                .freezes()?
                .iter()
                .any(|f| f.id == Uuid::from_u128(1_000))
        );
        Ok(())
    }
}
