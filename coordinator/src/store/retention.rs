//! Retention: what the state database forgets once it is old and finished, so that it stays
//! bounded however long the coordinator runs.
//!
//! The policy is pure ([`incident_expired`], [`campaign_expired`], [`overrides_cutoff_ms`],
//! [`audit_cutoff`]); [`Store::apply_retention`] applies it in one transaction and
//! [`Store::compact`] gives the freed pages back to the file system (the database is in
//! `auto_vacuum = INCREMENTAL` mode, see [`ensure_incremental_vacuum`]).
//!
//! Nothing open or in flight is ever deleted, and no incident whose record still decides
//! something: an incident still observed (a canceled or acknowledged one suppresses a new
//! incident for the same verdict; forgetting it would start the action again) or one waiting for
//! the operator's acknowledgement (its tag is on the node; acknowledging it returns the node to
//! service) is kept at any age. Incidents are mostly forgotten by their own state machine
//! (acknowledged, canceled and gone); retention removes the finished ones it keeps otherwise.

use std::collections::BTreeSet;

use rusqlite::params;
use uuid::Uuid;

use super::admission::{AUDIT, OVERRIDES, trim_audit};
use super::{Store, StoreError, decode_incident, ensure_incremental_vacuum, file_bytes, to_i64};
use nodecare_core::incident::{Incident, RepairStatus};
use nodecare_protocol::maintenance::Campaign;

pub use nodecare_core::retention::{
    DEFAULT_AUDIT_ROWS, DEFAULT_AUDIT_SECS, DEFAULT_INCIDENTS_SECS, DEFAULT_INTERVAL_SECS,
    RetentionConfig, RetentionPolicy,
};

/// What one retention run deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Incidents.
    pub incidents: usize,
    /// Intents (of those incidents).
    pub intents: usize,
    /// Campaigns.
    pub campaigns: usize,
    /// Balancing moves.
    pub balancing_moves: usize,
    /// Ended operator overrides.
    pub overrides: usize,
    /// Audit log lines.
    pub audit: usize,
    /// Recorded rounds of the flight recorder.
    pub rounds: usize,
}

impl Pruned {
    /// Rows deleted in all.
    pub const fn total(&self) -> usize {
        self.incidents
            + self.intents
            + self.campaigns
            + self.balancing_moves
            + self.overrides
            + self.audit
            + self.rounds
    }

    /// Each kind with its count (the metric's `kind` label).
    pub const fn by_kind(&self) -> [(&'static str, usize); 7] {
        [
            ("incident", self.incidents),
            ("intent", self.intents),
            ("campaign", self.campaigns),
            ("balancing_move", self.balancing_moves),
            ("override", self.overrides),
            ("audit", self.audit),
            ("round", self.rounds),
        ]
    }
}

/// Whether `incident` may be deleted at `now_ms`: finished (completed, failed or canceled),
/// unchanged for `keep_ms`, no intent of it in flight (`in_flight`), no longer observed, and not
/// waiting for the operator's acknowledgement.
pub fn incident_expired(incident: &Incident, in_flight: bool, now_ms: u64, keep_ms: u64) -> bool {
    let finished = matches!(
        incident.repair_status,
        RepairStatus::Completed | RepairStatus::Failed | RepairStatus::Canceled
    );
    let awaits_acknowledgement = incident.tag_applied
        && !incident.acknowledged
        && matches!(
            incident.repair_status,
            RepairStatus::Completed | RepairStatus::Failed
        );
    let changed_ms = if incident.mtime.is_finite() && incident.mtime > 0.0 {
        (incident.mtime.min(1e12) * 1000.0) as u64
    } else {
        0
    };
    finished
        && !in_flight
        && !incident.observed
        && !awaits_acknowledgement
        && changed_ms.saturating_add(keep_ms) <= now_ms
}

/// Whether `campaign` may be deleted at `now_ms`: ended (completed, failed or aborted) at least
/// `keep_ms` ago (its last change when the end time is missing).
pub fn campaign_expired(campaign: &Campaign, now_ms: u64, keep_ms: u64) -> bool {
    let ended_ms = campaign.finished_ms.unwrap_or(campaign.updated_ms);
    campaign.state.is_final() && ended_ms.saturating_add(keep_ms) <= now_ms
}

/// Overrides that ended (revoked, or past their end) before this time may be deleted.
pub const fn overrides_cutoff_ms(now_ms: u64, keep_ms: u64) -> u64 {
    now_ms.saturating_sub(keep_ms)
}

/// Which audit lines go: those written before `before_ms`, and those whose sequence number is
/// at most `through_seq` (beyond the newest `rows` lines, given the newest line's `max_seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCutoff {
    /// Lines written before this time go.
    pub before_ms: u64,
    /// Lines with a sequence number up to this go.
    pub through_seq: u64,
}

/// The audit cutoff at `now_ms` when the newest line is `max_seq`.
pub const fn audit_cutoff(policy: &RetentionPolicy, now_ms: u64, max_seq: u64) -> AuditCutoff {
    AuditCutoff {
        before_ms: now_ms.saturating_sub(policy.audit_ms),
        through_seq: max_seq.saturating_sub(policy.audit_rows),
    }
}

impl Store {
    /// Deletes what `policy` lets go at `now_ms`, in one transaction (balancing moves in a
    /// second one); what was deleted.
    pub fn apply_retention(
        &self,
        policy: &RetentionPolicy,
        now_ms: u64,
    ) -> Result<Pruned, StoreError> {
        let keep = policy.incidents_ms;
        let balancing_moves = self.prune_balancing_moves(now_ms.saturating_sub(keep))?;
        let mut connection = self.lock();
        let transaction = connection.transaction()?;
        let in_flight: BTreeSet<String> = super::node_repair::in_flight(&transaction)?
            .into_iter()
            .collect();
        let mut expired: Vec<Uuid> = Vec::new();
        {
            let mut statement = transaction.prepare("SELECT uuid, record FROM incidents")?;
            let rows = statement.query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?;
            for row in rows {
                let (uuid, text) = row?;
                // A record that does not decode is left alone: reading it reports it.
                let Ok(incident) = decode_incident(&text) else {
                    continue;
                };
                if incident_expired(&incident, in_flight.contains(&uuid), now_ms, keep) {
                    expired.push(incident.uuid);
                }
            }
        }
        let mut pruned = Pruned {
            balancing_moves,
            ..Pruned::default()
        };
        for uuid in &expired {
            pruned.intents += super::node_repair::forget(&transaction, *uuid)?;
            let uuid = uuid.to_string();
            pruned.incidents +=
                transaction.execute("DELETE FROM incidents WHERE uuid = ?1", params![uuid])?;
        }
        let mut campaigns: Vec<(String, String)> = Vec::new();
        {
            let mut statement = transaction.prepare("SELECT id, record FROM campaigns")?;
            let rows = statement.query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
            })?;
            for row in rows {
                let (id, text) = row?;
                let Ok(record) = serde_json::from_str::<nodecare_core::campaign::Record>(&text)
                else {
                    continue;
                };
                if !campaign_expired(&record.campaign, now_ms, keep) {
                    continue;
                }
                // Its operations are ledger entries: it goes with them once none is in flight.
                let holder =
                    nodecare_exec::ledger::holder_text(&record.holder()).unwrap_or_default();
                let in_flight: i64 = transaction.query_row(
                    "SELECT count(*) FROM ledger
                     WHERE holder = ?1 AND state IN ('recorded', 'submitted', 'timed-out')",
                    params![holder],
                    |row| row.get(0),
                )?;
                if in_flight == 0 {
                    campaigns.push((id, holder));
                }
            }
        }
        for (id, holder) in &campaigns {
            transaction.execute("DELETE FROM ledger WHERE holder = ?1", params![holder])?;
            pruned.campaigns +=
                transaction.execute("DELETE FROM campaigns WHERE id = ?1", params![id])?;
        }
        pruned.overrides = transaction.execute(
            "DELETE FROM overrides
             WHERE (revoked_ms IS NOT NULL AND revoked_ms < ?1)
                OR (revoked_ms IS NULL AND until_ms < ?1)",
            params![to_i64(overrides_cutoff_ms(now_ms, keep))],
        )?;
        let max_seq: i64 =
            transaction.query_row("SELECT coalesce(max(seq), 0) FROM audit", [], |row| {
                row.get(0)
            })?;
        let cutoff = audit_cutoff(policy, now_ms, super::to_u64(max_seq));
        // The last breaker reset is kept: the breaker's view names who did it.
        pruned.audit = transaction.execute(
            "DELETE FROM audit
             WHERE (at_ms < ?1 OR seq <= ?2)
               AND seq IS NOT (SELECT max(seq) FROM audit WHERE what = ?3)",
            params![
                to_i64(cutoff.before_ms),
                to_i64(cutoff.through_seq),
                super::admission::RESET_WHAT
            ],
        )?;
        // What was deleted is counted again; the audit log's budget is kept for a log written
        // before it was kept at write time.
        OVERRIDES.recount(&transaction)?;
        AUDIT.recount(&transaction)?;
        pruned.audit += trim_audit(&transaction, super::AUDIT_BUDGET_BYTES)?;
        let before = transaction.total_changes();
        pruned.rounds = super::recorder::prune(
            &transaction,
            now_ms.saturating_sub(policy.rounds_ms),
            policy.rounds_kept,
        )?;
        let history = transaction.total_changes().saturating_sub(before);
        transaction.commit()?;
        self.not_state_changes(history);
        Ok(pruned)
    }

    /// Gives free pages back to the file system (`PRAGMA incremental_vacuum`) and truncates
    /// the write-ahead logs, so the files (the state's and the recorder's) shrink after
    /// deletions.
    pub fn compact(&self) -> Result<(), StoreError> {
        let connection = self.lock();
        // A state restored from an older replica's image may have brought back another mode.
        ensure_incremental_vacuum(&connection, "main")?;
        for schema in ["main", super::recorder::SCHEMA] {
            // incremental_vacuum returns a row per freed page batch: step through all of them.
            let mut statement =
                connection.prepare(&format!("PRAGMA {schema}.incremental_vacuum"))?;
            let mut rows = statement.query([])?;
            while rows.next()?.is_some() {}
            drop(rows);
            drop(statement);
            connection.query_row(
                &format!("PRAGMA {schema}.wal_checkpoint(TRUNCATE)"),
                [],
                |_| Ok(()),
            )?;
        }
        Ok(())
    }

    /// Rewrites the state's and the recorder's databases without their free pages (`VACUUM`),
    /// then truncates the write-ahead logs: the smallest files they fit in.
    pub fn vacuum(&self) -> Result<(), StoreError> {
        let connection = self.lock();
        for schema in ["main", super::recorder::SCHEMA] {
            connection.execute_batch(&format!("VACUUM {schema}"))?;
            connection.query_row(
                &format!("PRAGMA {schema}.wal_checkpoint(TRUNCATE)"),
                [],
                |_| Ok(()),
            )?;
        }
        Ok(())
    }

    /// The state's database on disk (what is replicated; the recorder's is apart, see
    /// [`Store::recorder_file_bytes`]): the file and its write-ahead log, in bytes.
    pub fn size_bytes(&self) -> Result<u64, StoreError> {
        file_bytes(&self.lock(), "main")
    }

    /// The bytes of a snapshot of the state now ([`Store::snapshot`]: every page of the state's
    /// database, the free ones included), without taking one.
    pub fn snapshot_bytes(&self) -> Result<u64, StoreError> {
        let connection = self.lock();
        let pages: i64 = connection.query_row("PRAGMA main.page_count", [], |row| row.get(0))?;
        let size: i64 = connection.query_row("PRAGMA main.page_size", [], |row| row.get(0))?;
        Ok(super::to_u64(pages).saturating_mul(super::to_u64(size)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_core::incident::Action;
    use nodecare_protocol::{CanonicalJson, NodeVerdict, ScriptVerdict};

    const DAY_MS: u64 = 86_400_000;

    fn incident(
        status: RepairStatus,
        observed: bool,
        tag: bool,
        ack: bool,
        mtime: f64,
    ) -> Incident {
        let verdict = NodeVerdict::merge(
            [(
                "disk".to_owned(),
                ScriptVerdict::parse(br#"{"status":"evacuate"}"#).unwrap(),
            )]
            .into_iter()
            .collect(),
        )
        .unwrap();
        let original = CanonicalJson::new(&serde_json::to_value(&verdict).unwrap()).unwrap();
        let mut incident = Incident::new(
            Uuid::new_v4(),
            "node1",
            "u1",
            verdict,
            original,
            Action::Evacuate,
            mtime,
        );
        incident.repair_status = status;
        incident.observed = observed;
        incident.tag_applied = tag;
        incident.acknowledged = ack;
        incident.mtime = mtime;
        incident
    }

    #[test]
    fn incidents_kept_and_deleted() {
        use RepairStatus::{Canceled, Completed, Failed, Noted, Pending};
        let keep = 90 * DAY_MS;
        let now = 1_000 * DAY_MS;
        let old = (now - 91 * DAY_MS) as f64 / 1000.0;
        let recent = (now - 89 * DAY_MS) as f64 / 1000.0;
        // (status, observed, tag applied, acknowledged, mtime, intent in flight, expired, why)
        let table = [
            (Noted, false, false, false, old, false, false, "open"),
            (Pending, false, false, false, old, false, false, "open"),
            (
                Completed,
                false,
                true,
                true,
                old,
                false,
                true,
                "acknowledged, gone",
            ),
            (
                Completed,
                false,
                true,
                true,
                recent,
                false,
                false,
                "too recent",
            ),
            (
                Completed,
                false,
                true,
                false,
                old,
                false,
                false,
                "awaits acknowledgement",
            ),
            (
                Completed,
                true,
                true,
                true,
                old,
                false,
                false,
                "still observed",
            ),
            (
                Failed,
                false,
                true,
                false,
                old,
                false,
                false,
                "awaits acknowledgement",
            ),
            (Failed, false, true, true, old, false, true, "acknowledged"),
            (
                Failed,
                false,
                false,
                false,
                old,
                false,
                true,
                "tag never applied, gone",
            ),
            (
                Failed,
                false,
                false,
                false,
                old,
                true,
                false,
                "failure tag in flight",
            ),
            (
                Failed,
                true,
                false,
                false,
                old,
                false,
                false,
                "still observed",
            ),
            (
                Canceled,
                false,
                false,
                false,
                old,
                false,
                true,
                "canceled, gone",
            ),
            (
                Canceled,
                true,
                false,
                false,
                old,
                false,
                false,
                "canceled, still observed",
            ),
            (
                Canceled,
                false,
                false,
                false,
                recent,
                false,
                false,
                "too recent",
            ),
        ];
        for (status, observed, tag, ack, mtime, in_flight, expected, why) in table {
            let i = incident(status, observed, tag, ack, mtime);
            assert_eq!(
                incident_expired(&i, in_flight, now, keep),
                expected,
                "{status:?} observed={observed} tag={tag} ack={ack} in_flight={in_flight}: {why}"
            );
        }
        // Exactly at the limit it goes; a clock before the record never deletes it.
        let at = incident(Canceled, false, false, false, (now - keep) as f64 / 1000.0);
        assert!(incident_expired(&at, false, now, keep));
        assert!(!incident_expired(&at, false, 0, keep));
        let broken = incident(Canceled, false, false, false, f64::NAN);
        assert!(incident_expired(&broken, false, now, keep));
    }

    #[test]
    fn campaigns_go_once_ended_and_old() {
        use nodecare_protocol::maintenance::CampaignState as S;
        let keep = 10 * DAY_MS;
        let now = 100 * DAY_MS;
        let mut campaign = Campaign {
            id: "c1".into(),
            request: nodecare_protocol::maintenance::CampaignRequest::new("reboot"),
            who: "op".into(),
            state: S::Running,
            created_ms: 0,
            updated_ms: 0,
            finished_ms: None,
            groups: Vec::new(),
            planned: Vec::new(),
            failure: None,
            failures: Vec::new(),
            blocked_by: None,
            warnings: Vec::new(),
            overrides: Vec::new(),
        };
        // (state, finished, updated, expired)
        let table = [
            (S::Running, None, 0, false),
            (S::Paused, None, 0, false),
            (S::Aborting, None, 0, false),
            (S::Completed, Some(now - 11 * DAY_MS), now, true),
            (S::Completed, Some(now - 9 * DAY_MS), 0, false),
            (S::Failed, None, now - 11 * DAY_MS, true),
            (S::Aborted, None, now - DAY_MS, false),
            (S::Aborted, Some(now - keep), now, true),
        ];
        for (state, finished, updated, expected) in table {
            campaign.state = state;
            campaign.finished_ms = finished;
            campaign.updated_ms = updated;
            assert_eq!(
                campaign_expired(&campaign, now, keep),
                expected,
                "{state:?} finished {finished:?} updated {updated}"
            );
        }
    }

    #[test]
    fn audit_cutoff_by_age_and_count() {
        let policy = RetentionPolicy {
            incidents_ms: 0,
            audit_ms: 1000,
            audit_rows: 10,
            rounds_ms: 0,
            rounds_kept: 1,
        };
        assert_eq!(
            audit_cutoff(&policy, 5000, 25),
            AuditCutoff {
                before_ms: 4000,
                through_seq: 15
            }
        );
        // Fewer lines than the cap, a clock near zero: nothing by count, nothing by age.
        assert_eq!(
            audit_cutoff(&policy, 10, 3),
            AuditCutoff {
                before_ms: 0,
                through_seq: 0
            }
        );
    }

    #[test]
    fn config_defaults_and_validation() {
        let config = RetentionConfig::default();
        assert!(config.validate().is_ok());
        assert_eq!(
            config.policy(),
            RetentionPolicy {
                incidents_ms: 90 * DAY_MS,
                audit_ms: 365 * DAY_MS,
                audit_rows: 100_000,
                rounds_ms: 30 * DAY_MS,
                rounds_kept: 5_000,
            }
        );
        for bad in [
            RetentionConfig {
                interval: 0.5,
                ..config
            },
            RetentionConfig {
                incidents: f64::NAN,
                ..config
            },
            RetentionConfig {
                audit: -1.0,
                ..config
            },
            RetentionConfig {
                audit_rows: 0,
                ..config
            },
            RetentionConfig {
                rounds: 0.0,
                ..config
            },
            RetentionConfig {
                rounds_kept: 0,
                ..config
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_configuration_file_section() {
        use crate::config::Config;
        let config = Config::parse(
            "[retention]\ninterval = 10\nincidents = 30.0\naudit = 60\naudit_rows = 1000\n",
        )
        .unwrap();
        assert!(config.validate().is_ok());
        assert_eq!(
            config.retention.policy(),
            RetentionPolicy {
                incidents_ms: 30_000,
                audit_ms: 60_000,
                audit_rows: 1000,
                rounds_ms: 30 * DAY_MS,
                rounds_kept: 5_000,
            }
        );
        assert_eq!(
            Config::parse("").unwrap().retention,
            RetentionConfig::default()
        );
        assert!(
            Config::parse("[retention]\nincident = 30\n").is_err(),
            "unknown key"
        );
        let error = Config::parse("[retention]\naudit_rows = 0\n")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(error.contains("retention.audit_rows"), "{error}");
        // The packaged example, every commented key set as written, is valid.
        let example = include_str!("../../../packaging/config/coordinator.toml");
        let section = example
            .split("[retention]")
            .nth(1)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .filter(|l| l.contains(" = "))
            .map(|l| l.split(" #").next().unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let packaged = Config::parse(&format!("[retention]\n{section}\n")).unwrap();
        assert_eq!(packaged.retention, RetentionConfig::default());
    }

    /// An old finished campaign goes with its ledger entries, unless one is still in flight.
    #[test]
    fn old_finished_campaigns_go_with_their_ledger_entries() {
        use nodecare_exec::ledger::{Action, Entry, Ledger as _, Op, State};
        use nodecare_protocol::maintenance::CampaignState;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).unwrap();
        let now = 1_000 * DAY_MS;
        let policy = RetentionPolicy {
            incidents_ms: 90 * DAY_MS,
            audit_ms: 365 * DAY_MS,
            audit_rows: 100,
            rounds_ms: 30 * DAY_MS,
            rounds_kept: 5_000,
        };
        let campaign = |n: u128| {
            let mut r = nodecare_core::campaign::Record::new(
                Uuid::from_u128(n),
                nodecare_protocol::maintenance::CampaignRequest::new("reboot"),
                "ops",
                1,
            );
            r.campaign.state = CampaignState::Completed;
            r.campaign.finished_ms = Some(2);
            store.save_campaign(&r).unwrap();
            let mut e = Entry::new(
                r.holder(),
                "g0-n1-drain",
                Action::ganeti(Op::drain("n1")),
                "d",
                1,
                9,
            );
            e.state = State::Succeeded;
            store.record(&[e]).unwrap();
            r
        };
        let (done, busy) = (campaign(1), campaign(2));
        let mut left = store.of_holder(&busy.holder()).unwrap().remove(0);
        left.state = State::Submitted;
        store.mark(&left).unwrap();
        let pruned = store.apply_retention(&policy, now).unwrap();
        assert_eq!(pruned.campaigns, 1);
        assert!(store.of_holder(&done.holder()).unwrap().is_empty());
        assert_eq!(store.of_holder(&busy.holder()).unwrap().len(), 1);
        let ids: Vec<String> = store
            .campaigns()
            .unwrap()
            .into_iter()
            .map(|r| r.campaign.id)
            .collect();
        assert_eq!(ids, [busy.campaign.id]);
    }

    fn file_bytes(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }

    #[test]
    fn retention_deletes_old_finished_rows_and_the_file_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let now = 1_000 * DAY_MS;
        let old = (now - 100 * DAY_MS) as f64 / 1000.0;
        let fresh = now as f64 / 1000.0;
        // 400 old canceled incidents with bulky histories, 3 that must stay.
        let filler = "x".repeat(2000);
        for _ in 0..400 {
            let mut i = incident(RepairStatus::Canceled, false, false, false, old);
            i.failure = Some(filler.clone());
            store.save_incident(&i).unwrap();
        }
        let kept = [
            incident(RepairStatus::Canceled, true, false, false, old),
            incident(RepairStatus::Completed, false, true, false, old),
            incident(RepairStatus::Pending, false, false, false, old),
        ];
        for i in &kept {
            store.save_incident(i).unwrap();
        }
        let recent = incident(RepairStatus::Canceled, false, false, false, fresh);
        store.save_incident(&recent).unwrap();
        // Old failed incidents whose failure tag was never applied: one with its intents
        // finished (deleted with them), one whose tag job is still in flight (kept).
        let intent = |incident: &Incident, state: super::super::IntentState| super::super::Intent {
            incident: incident.uuid,
            key: "tag".into(),
            spec: super::super::IntentSpec::Tag {
                node: "node1".into(),
                tag: "t".into(),
            },
            locks: Vec::new(),
            state,
            job_id: Some(1),
            created_ms: 1,
            submitted_ms: Some(1),
            finished_ms: None,
            error: None,
        };
        let done = incident(RepairStatus::Failed, false, false, false, old);
        store
            .plan_intent(&done, &intent(&done, super::super::IntentState::Failed))
            .unwrap();
        let tagging = incident(RepairStatus::Failed, false, false, false, old);
        store
            .plan_intent(
                &tagging,
                &intent(&tagging, super::super::IntentState::Submitted),
            )
            .unwrap();
        // The last breaker reset is the oldest line, older than the audit retention: kept.
        store
            .audit(
                now - 400 * DAY_MS,
                "op",
                super::super::admission::RESET_WHAT,
                "old",
            )
            .unwrap();
        for n in 0..3000_u64 {
            store
                .audit(now - 2 * DAY_MS + n, "op", &filler[..100], "why")
                .unwrap();
        }
        store.compact().unwrap();
        let before = file_bytes(&path);
        let policy = RetentionPolicy {
            incidents_ms: 90 * DAY_MS,
            audit_ms: 365 * DAY_MS,
            audit_rows: 100,
            rounds_ms: 30 * DAY_MS,
            rounds_kept: 5_000,
        };
        let pruned = store.apply_retention(&policy, now).unwrap();
        assert_eq!(pruned.incidents, 401);
        assert_eq!(pruned.intents, 1);
        assert_eq!(pruned.audit, 2900, "{pruned:?}");
        let left: BTreeSet<Uuid> = store.incidents().unwrap().iter().map(|i| i.uuid).collect();
        let expected: BTreeSet<Uuid> = kept
            .iter()
            .chain([&recent, &tagging])
            .map(|i| i.uuid)
            .collect();
        assert_eq!(left, expected);
        let intents = store.intents().unwrap();
        assert_eq!(intents.len(), 1);
        assert_eq!(intents[0].incident, tagging.uuid);
        let log = store.audit_log(10_000).unwrap();
        assert_eq!(
            log.len(),
            101,
            "the newest 100 lines and the last breaker reset"
        );
        assert_eq!(log[0].what, super::super::admission::RESET_WHAT);
        store.compact().unwrap();
        let after = file_bytes(&path);
        assert!(
            after * 4 < before,
            "the file shrinks: {before} → {after} bytes"
        );
        assert_eq!(
            store.size_bytes().unwrap(),
            after + file_bytes(&dir.path().join("state.db-wal"))
        );
        // A second run finds nothing.
        assert_eq!(store.apply_retention(&policy, now).unwrap().total(), 0);
    }

    #[test]
    fn an_existing_database_is_converted_to_incremental_vacuum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            // As an earlier coordinator left it: WAL mode, no auto-vacuum.
            let connection = rusqlite::Connection::open(&path).unwrap();
            connection
                .pragma_update(None, "journal_mode", "WAL")
                .unwrap();
            connection
                .execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);")
                .unwrap();
            let mode: i64 = connection
                .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
                .unwrap();
            assert_eq!(mode, 0);
        }
        let store = Store::open(&path).unwrap();
        let mode: i64 = store
            .lock()
            .query_row("PRAGMA auto_vacuum", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, 2);
        let x: i64 = store
            .lock()
            .query_row("SELECT x FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(x, 1, "the conversion keeps the data");
    }
}
