//! The payload of the agent's signed storage report (`/1/report/storage/drbd/signed`): the
//! node's DRBD minors as `/proc/drbd` (or `drbdsetup`) shows them, so that the coordinator can
//! tell whether every mirror is whole before it disrupts another failure domain.
//!
//! It travels in the same [`SignedEnvelope`](crate::SignedEnvelope) as the diagnose payload,
//! signed with the same key and the same sequence counter: one strictly increasing sequence per
//! node across both kinds of report. A receiver keeps the last sequence it accepted per node
//! *and per kind of report*, so that a diagnose report signed before the latest storage report
//! is never taken for a replay, and a payload of one kind never decodes as the other (both
//! refuse unknown fields).

use serde::{Deserialize, Serialize};

/// HTTP path of the signed storage (DRBD) report on the agent.
pub const SIGNED_DRBD_PATH: &str = "/1/report/storage/drbd/signed";

/// The connection state of a healthy, connected DRBD minor.
pub const CONNECTED: &str = "Connected";
/// The disk state of a healthy DRBD disk.
pub const UP_TO_DATE: &str = "UpToDate";
/// The state of every field of a minor that exists but is not configured.
pub const UNCONFIGURED: &str = "Unconfigured";

/// What the agent signs: the node's DRBD state and when it was read.
///
/// All integers are below 2^53, so the payload survives any JSON implementation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoragePayload {
    /// The DRBD state.
    pub drbd: DrbdState,
    /// When it was read, Unix milliseconds.
    pub collected_at_ms: u64,
    /// How often the agent reads it, milliseconds (a reading older than a few intervals is
    /// suspect even if the envelope is still valid).
    pub interval_ms: u64,
}

/// The DRBD state of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DrbdState {
    /// No `/proc/drbd`: the DRBD module is not loaded, so no DRBD disk can be degraded here.
    ///
    /// (A struct variant, so that unknown fields are refused here too.)
    NotInstalled {},
    /// The minors DRBD shows, in minor order (possibly none).
    Minors {
        /// One entry per minor.
        minors: Vec<DrbdMinor>,
    },
    /// DRBD is loaded but its state could not be read (unparsable `/proc/drbd`, `drbdsetup`
    /// failed or timed out): storage health on this node is unknown.
    Unreadable {
        /// What went wrong.
        reason: String,
    },
}

/// One DRBD minor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrbdMinor {
    /// Minor number (`/dev/drbd<minor>`).
    pub minor: u64,
    /// The Ganeti instance using it, when the agent knows (from confd).
    pub instance: Option<String>,
    /// Connection (or replication) state: `Connected`, `StandAlone`, `WFConnection`,
    /// `SyncSource`, `SyncTarget`, ... ([`UNCONFIGURED`] for a minor without configuration).
    pub connection: String,
    /// This node's disk state: `UpToDate`, `Inconsistent`, `Outdated`, `Diskless`, ...
    pub local_disk: String,
    /// The peer's disk state as this node sees it (`DUnknown` when disconnected).
    pub peer_disk: String,
    /// This node's role: `Primary`, `Secondary` or `Unknown`.
    pub role: String,
    /// The peer's role as this node sees it.
    pub peer_role: String,
    /// Resynchronisation progress in percent, while resyncing.
    pub sync_percent: Option<f64>,
    /// Data out of sync with the peer, KiB, when DRBD shows it.
    pub out_of_sync_kib: Option<u64>,
}

impl DrbdMinor {
    /// A minor that exists without configuration (`cs:Unconfigured`): every state field is
    /// [`UNCONFIGURED`].
    pub fn unconfigured(minor: u64) -> Self {
        Self {
            minor,
            instance: None,
            connection: UNCONFIGURED.to_owned(),
            local_disk: UNCONFIGURED.to_owned(),
            peer_disk: UNCONFIGURED.to_owned(),
            role: UNCONFIGURED.to_owned(),
            peer_role: UNCONFIGURED.to_owned(),
            sync_percent: None,
            out_of_sync_kib: None,
        }
    }

    /// Whether the minor exists without configuration (no disk, nothing to mirror).
    pub fn is_unconfigured(&self) -> bool {
        self.connection == UNCONFIGURED
    }

    /// Whether the mirror is whole: connected, both disks up to date.
    pub fn is_whole(&self) -> bool {
        self.connection == CONNECTED
            && self.local_disk == UP_TO_DATE
            && self.peer_disk == UP_TO_DATE
    }

    /// The state for people: `StandAlone, disks UpToDate/DUnknown`, `SyncTarget 45.2%, disks
    /// Inconsistent/UpToDate`.
    pub fn describe(&self) -> String {
        let progress = self
            .sync_percent
            .map(|percent| format!(" {percent}%"))
            .unwrap_or_default();
        format!(
            "{}{progress}, disks {}/{}",
            self.connection, self.local_disk, self.peer_disk
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minor() -> DrbdMinor {
        DrbdMinor {
            minor: 0,
            instance: Some("inst1".into()),
            connection: "SyncTarget".into(),
            local_disk: "Inconsistent".into(),
            peer_disk: UP_TO_DATE.into(),
            role: "Secondary".into(),
            peer_role: "Primary".into(),
            sync_percent: Some(45.2),
            out_of_sync_kib: Some(1024),
        }
    }

    #[test]
    fn round_trips_and_rejects_unknown_fields() {
        for drbd in [
            DrbdState::NotInstalled {},
            DrbdState::Minors {
                minors: vec![minor(), DrbdMinor::unconfigured(3)],
            },
            DrbdState::Unreadable {
                reason: "drbdsetup timed out".into(),
            },
        ] {
            let payload = StoragePayload {
                drbd,
                collected_at_ms: 1_800_000_000_000,
                interval_ms: 10_000,
            };
            let text = serde_json::to_string(&payload).unwrap();
            assert_eq!(
                serde_json::from_str::<StoragePayload>(&text).unwrap(),
                payload
            );
            let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
            value["extra"] = json!(1);
            assert!(serde_json::from_value::<StoragePayload>(value).is_err());
        }
        let mut value = serde_json::to_value(minor()).unwrap();
        value["extra"] = json!(1);
        assert!(serde_json::from_value::<DrbdMinor>(value).is_err());
        assert!(
            serde_json::from_value::<DrbdState>(json!({"state": "not-installed", "x": 1})).is_err()
        );
        assert!(
            serde_json::from_value::<DrbdState>(json!({"state": "minors", "minors": [], "x": 1}))
                .is_err()
        );
        assert!(serde_json::from_value::<DrbdState>(json!({"state": "weird"})).is_err());
        assert_eq!(
            serde_json::from_value::<DrbdState>(json!({"state": "not-installed"})).unwrap(),
            DrbdState::NotInstalled {}
        );
    }

    #[test]
    fn a_diagnose_payload_is_not_a_storage_payload_nor_the_reverse() {
        let storage = serde_json::to_value(StoragePayload {
            drbd: DrbdState::NotInstalled {},
            collected_at_ms: 1,
            interval_ms: 1,
        })
        .unwrap();
        assert!(serde_json::from_value::<crate::DiagnosePayload>(storage).is_err());
        let diagnose = serde_json::to_value(crate::DiagnosePayload {
            verdict: crate::NodeVerdict::merge(std::collections::BTreeMap::new()).unwrap(),
            collected_at_ms: 1,
            age_ms: 0,
            stale: false,
            interval_ms: 1,
            boot_id: None,
            reboot_required: None,
        })
        .unwrap();
        assert!(serde_json::from_value::<StoragePayload>(diagnose).is_err());
    }

    #[test]
    fn whole_only_when_connected_and_both_disks_up_to_date() {
        let mut whole = minor();
        whole.connection = CONNECTED.into();
        whole.local_disk = UP_TO_DATE.into();
        whole.sync_percent = None;
        assert!(whole.is_whole());
        assert_eq!(whole.describe(), "Connected, disks UpToDate/UpToDate");
        assert!(!minor().is_whole());
        assert_eq!(
            minor().describe(),
            "SyncTarget 45.2%, disks Inconsistent/UpToDate"
        );
        for (connection, local, peer) in [
            ("StandAlone", UP_TO_DATE, "DUnknown"),
            ("WFConnection", UP_TO_DATE, "DUnknown"),
            (CONNECTED, "Diskless", UP_TO_DATE),
            (CONNECTED, UP_TO_DATE, "Outdated"),
            ("SyncSource", UP_TO_DATE, "Inconsistent"),
        ] {
            let mut m = whole.clone();
            m.connection = connection.into();
            m.local_disk = local.into();
            m.peer_disk = peer.into();
            assert!(!m.is_whole(), "{connection} {local}/{peer}");
        }
        assert!(DrbdMinor::unconfigured(2).is_unconfigured());
        assert!(!DrbdMinor::unconfigured(2).is_whole());
    }
}
