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
}
