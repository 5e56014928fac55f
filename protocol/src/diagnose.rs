//! The payload of the agent's signed diagnose report (`/1/report/node/diagnose/signed`).

use serde::{Deserialize, Serialize};

use crate::verdict::NodeVerdict;

/// HTTP path of the signed diagnose report on the agent.
pub const SIGNED_DIAGNOSE_PATH: &str = "/1/report/node/diagnose/signed";

/// What the agent signs: the node's verdict and how fresh it is.
///
/// All integers are below 2^53, so the payload survives any JSON implementation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiagnosePayload {
    /// The node's verdict.
    pub verdict: NodeVerdict,
    /// When the diagnose run that produced the verdict finished, Unix milliseconds.
    pub collected_at_ms: u64,
    /// How old the verdict was when signed, in milliseconds.
    pub age_ms: u64,
    /// `true` while the agent serves the verdict persisted before a restart and has not yet
    /// completed a fresh run; a stale verdict must not start new actions.
    pub stale: bool,
    /// The agent's diagnose interval, milliseconds (a verdict older than a few intervals is
    /// suspect even if the envelope is still valid).
    pub interval_ms: u64,
    /// The node's boot id (`/proc/sys/kernel/random/boot_id`) when the payload was signed: a
    /// different value means the node rebooted. Absent when the agent cannot read it (and from
    /// agents that predate the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// Whether the node asks for a reboot (the reboot sentinel, `/var/run/reboot-required`,
    /// exists). Absent when the agent cannot tell (and from agents that predate the field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_required: Option<bool>,
}

/// Longest boot id accepted (Linux's is a 36-character UUID).
pub const MAX_BOOT_ID_LEN: usize = 128;

/// Whether `id` is a usable boot id: 1 to [`MAX_BOOT_ID_LEN`] ASCII letters, digits and `-`.
pub fn is_valid_boot_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_BOOT_ID_LEN
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn round_trips_and_rejects_unknown_fields() {
        let payload = DiagnosePayload {
            verdict: NodeVerdict::merge(BTreeMap::new()).unwrap(),
            collected_at_ms: 1_800_000_000_000,
            age_ms: 12,
            stale: false,
            interval_ms: 60_000,
            boot_id: None,
            reboot_required: None,
        };
        let text = serde_json::to_string(&payload).unwrap();
        assert_eq!(
            serde_json::from_str::<DiagnosePayload>(&text).unwrap(),
            payload
        );
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["extra"] = serde_json::json!(1);
        assert!(serde_json::from_value::<DiagnosePayload>(value).is_err());
    }

    #[test]
    fn boot_fields_are_optional_and_omitted_when_absent() {
        let old = serde_json::json!({
            "verdict": NodeVerdict::merge(BTreeMap::new()).unwrap(),
            "collected_at_ms": 1, "age_ms": 0, "stale": false, "interval_ms": 1000,
        });
        let payload: DiagnosePayload = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(payload.boot_id, None);
        assert_eq!(payload.reboot_required, None);
        // Absent fields are not written: an agent without them signs the same bytes as before.
        assert_eq!(serde_json::to_value(&payload).unwrap(), old);
        let mut new = old;
        new["boot_id"] = serde_json::json!("0f8fad5b-d9cb-469f-a165-70867728950e");
        new["reboot_required"] = serde_json::json!(true);
        let payload: DiagnosePayload = serde_json::from_value(new.clone()).unwrap();
        assert_eq!(
            payload.boot_id.as_deref(),
            Some("0f8fad5b-d9cb-469f-a165-70867728950e")
        );
        assert_eq!(payload.reboot_required, Some(true));
        assert_eq!(serde_json::to_value(&payload).unwrap(), new);
        new["reboot_required"] = serde_json::json!("yes");
        assert!(serde_json::from_value::<DiagnosePayload>(new).is_err());
    }

    #[test]
    fn boot_id_validation() {
        assert!(is_valid_boot_id("0f8fad5b-d9cb-469f-a165-70867728950e"));
        for bad in ["", " x", "a/b", "x\n", &"a".repeat(MAX_BOOT_ID_LEN + 1)] {
            assert!(!is_valid_boot_id(bad), "{bad:?}");
        }
    }
}
