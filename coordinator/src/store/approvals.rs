//! The approvals of holders' work (`[approvals]`): one document of the replicated state, every
//! decision audited.

use super::{Store, StoreError};
use nodecare_core::approval::{ApprovalRecord, keep};

/// The store document of the decisions (a list of [`ApprovalRecord`]).
pub const APPROVALS_DOCUMENT: &str = "approvals";

impl Store {
    /// The decisions kept, oldest first.
    pub fn approvals(&self) -> Result<Vec<ApprovalRecord>, StoreError> {
        Ok(self.document(APPROVALS_DOCUMENT)?.unwrap_or_default())
    }

    /// Keeps a decision, with its audit line, in one transaction.
    pub fn add_approval(&self, record: ApprovalRecord) -> Result<(), StoreError> {
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let mut records: Vec<ApprovalRecord> =
            super::document_in(&transaction, APPROVALS_DOCUMENT)?.unwrap_or_default();
        let what = match &record.ticket {
            Some(ticket) => format!("approve {} with ticket {ticket}", record.id),
            None => format!("refuse {}", record.id),
        };
        let why = record
            .refused
            .clone()
            .unwrap_or_else(|| "approved".to_owned());
        let (who, at_ms) = (record.who.clone(), record.at_ms);
        keep(&mut records, record);
        super::save_document_in(&transaction, APPROVALS_DOCUMENT, &records)?;
        super::admission::audit(&transaction, at_ms, &who, &what, &why)?;
        transaction.commit()?;
        Ok(())
    }
}
