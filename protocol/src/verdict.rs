//! The self-diagnose verdict: what one diagnose script prints, and how the verdicts of several
//! scripts merge into the one verdict a node reports.
//!
//! A script prints one JSON object `{"status", "command"?, "details"?, "fingerprint"?}`. Anything
//! else (no output, bad JSON, a failed run, a refused script) becomes the explicit
//! [`DiagnoseStatus::Unknown`], which never reads as healthy and never triggers an action by itself.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canonical::{CanonicalError, fingerprint_of};

/// A node's need for repair, ordered by severity for merging:
/// `Ok < unknown < live-repair < evacuate < evacuate-failover`.
///
/// `unknown` outranks `Ok` so that a failed script can never hide behind a healthy one, and ranks
/// below every action so that it never causes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DiagnoseStatus {
    /// No action needed.
    #[serde(rename = "Ok")]
    Ok,
    /// No valid verdict could be obtained; carries a reason.
    #[serde(rename = "unknown")]
    Unknown,
    /// Repair while instances keep running, optionally with a repair command.
    #[serde(rename = "live-repair")]
    LiveRepair,
    /// Evacuate (live-migrate) the node.
    #[serde(rename = "evacuate")]
    Evacuate,
    /// Evacuate the node without live migration.
    #[serde(rename = "evacuate-failover")]
    EvacuateFailover,
}

impl DiagnoseStatus {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "Ok",
            Self::Unknown => "unknown",
            Self::LiveRepair => "live-repair",
            Self::Evacuate => "evacuate",
            Self::EvacuateFailover => "evacuate-failover",
        }
    }

    /// Whether this status asks the coordinator to act.
    pub const fn is_actionable(self) -> bool {
        matches!(
            self,
            Self::LiveRepair | Self::Evacuate | Self::EvacuateFailover
        )
    }

    /// Parses one of the four statuses a script may print (`unknown` is ours, not a script's).
    pub fn from_script(text: &str) -> Option<Self> {
        match text {
            "Ok" => Some(Self::Ok),
            "live-repair" => Some(Self::LiveRepair),
            "evacuate" => Some(Self::Evacuate),
            "evacuate-failover" => Some(Self::EvacuateFailover),
            _ => None,
        }
    }
}

impl std::fmt::Display for DiagnoseStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a script's output is not a valid verdict.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    /// Output is not UTF-8.
    #[error("output is not valid UTF-8 (invalid byte at offset {0})")]
    InvalidUtf8(usize),
    /// Output is empty or only whitespace.
    #[error("output is empty; expected one JSON object")]
    Empty,
    /// Output is not exactly one JSON value, or repeats a key.
    #[error("output is not exactly one JSON value without repeated keys: {0}")]
    InvalidJson(String),
    /// Output is JSON but not an object.
    #[error("output must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// `status` is missing or not one of the four statuses.
    #[error(
        "\"status\" must be one of \"Ok\", \"live-repair\", \"evacuate\", \"evacuate-failover\"; got {0}"
    )]
    BadStatus(String),
    /// `command` is not a valid repair command name.
    #[error("\"command\" must be a string matching ^[A-Za-z0-9_-]+$; got {0}")]
    BadCommand(String),
    /// `fingerprint` is not a list of JSON pointers.
    #[error(
        "\"fingerprint\" must be an array of JSON pointers (\"\" or starting with \"/\"); got {0}"
    )]
    BadFingerprint(String),
    /// The verdict has no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// Whether `name` is an acceptable command or script name (`^[A-Za-z0-9_-]+$`).
pub fn is_valid_command_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-')
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The verdict of one diagnose script, or `unknown` with the reason there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptVerdict {
    /// The script's status.
    pub status: DiagnoseStatus,
    /// The repair command requested with `live-repair`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Opaque details, passed through.
    #[serde(default)]
    pub details: Value,
    /// JSON pointers into the verdict naming the fields that identify the hardware state;
    /// by default `status`, `command` and `details`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<Vec<String>>,
    /// Why the status is `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ScriptVerdict {
    /// An `unknown` verdict with its reason.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Self {
            status: DiagnoseStatus::Unknown,
            command: None,
            details: Value::Null,
            fingerprint: None,
            reason: Some(reason.into()),
        }
    }

    /// Parses a script's standard output. Exactly one JSON object, with surrounding whitespace.
    pub fn parse(output: &[u8]) -> Result<Self, VerdictError> {
        let text = std::str::from_utf8(output)
            .map_err(|error| VerdictError::InvalidUtf8(error.valid_up_to()))?;
        if text.trim().is_empty() {
            return Err(VerdictError::Empty);
        }
        // A repeated key (`{"status":"evacuate","status":"Ok"}`) is refused, at any depth.
        let value = crate::json::from_slice(text.as_bytes())
            .map_err(|error| VerdictError::InvalidJson(error.to_string()))?;
        Self::from_value(&value)
    }

    /// Validates an already-parsed verdict object.
    pub fn from_value(value: &Value) -> Result<Self, VerdictError> {
        let Value::Object(object) = value else {
            return Err(VerdictError::NotAnObject(json_type(value)));
        };
        let status = match object.get("status") {
            Some(Value::String(text)) => DiagnoseStatus::from_script(text)
                .ok_or_else(|| VerdictError::BadStatus(format!("{text:?}")))?,
            Some(other) => return Err(VerdictError::BadStatus(other.to_string())),
            None => return Err(VerdictError::BadStatus("no \"status\" field".into())),
        };
        let command = match object.get("command") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) if is_valid_command_name(name) => Some(name.clone()),
            Some(other) => return Err(VerdictError::BadCommand(other.to_string())),
        };
        let fingerprint = match object.get("fingerprint") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                let pointers = items
                    .iter()
                    .map(|item| match item {
                        Value::String(pointer)
                            if pointer.is_empty() || pointer.starts_with('/') =>
                        {
                            Ok(pointer.clone())
                        }
                        other => Err(VerdictError::BadFingerprint(other.to_string())),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(pointers)
            }
            Some(other) => return Err(VerdictError::BadFingerprint(other.to_string())),
        };
        let verdict = Self {
            status,
            command,
            details: object.get("details").cloned().unwrap_or(Value::Null),
            fingerprint,
            reason: None,
        };
        // Refuse, up front, anything that cannot be fingerprinted or signed.
        crate::canonical::canonical_bytes(value)?;
        Ok(verdict)
    }

    /// The fields that identify the hardware state this verdict describes.
    pub fn identity(&self) -> Value {
        let mut whole = Map::new();
        whole.insert("status".into(), Value::from(self.status.as_str()));
        if let Some(command) = &self.command {
            whole.insert("command".into(), Value::from(command.as_str()));
        }
        whole.insert("details".into(), self.details.clone());
        if let Some(reason) = &self.reason {
            whole.insert("reason".into(), Value::from(reason.as_str()));
        }
        let whole = Value::Object(whole);
        match &self.fingerprint {
            None => whole,
            Some(pointers) => {
                let mut subset = Map::new();
                // The status always identifies: an escalation is a different problem.
                subset.insert("/status".into(), Value::from(self.status.as_str()));
                for pointer in pointers {
                    let field = whole.pointer(pointer).cloned().unwrap_or(Value::Null);
                    subset.insert(pointer.clone(), field);
                }
                Value::Object(subset)
            }
        }
    }
}

/// The one verdict of a node: the merge of every diagnose script's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    /// The most severe status of all scripts.
    pub status: DiagnoseStatus,
    /// The command of the most severe live-repair (first script by name on a tie).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Each script's verdict, keyed by script name.
    pub details: BTreeMap<String, ScriptVerdict>,
    /// SHA-256 over the canonical identity of the verdict.
    pub fingerprint: String,
}

impl NodeVerdict {
    /// Merges per-script verdicts. No scripts at all means `Ok`, as Ganeti's built-in default.
    pub fn merge(verdicts: BTreeMap<String, ScriptVerdict>) -> Result<Self, CanonicalError> {
        let status = verdicts
            .values()
            .map(|verdict| verdict.status)
            .max()
            .unwrap_or(DiagnoseStatus::Ok);
        let command = if status == DiagnoseStatus::LiveRepair {
            verdicts
                .values()
                .filter(|verdict| verdict.status == DiagnoseStatus::LiveRepair)
                .find_map(|verdict| verdict.command.clone())
        } else {
            None
        };
        // Scripts that do not carry the merged status (or an action) are left out of the
        // identity, so that a flapping minor script does not make a new incident.
        let identities: Map<String, Value> = verdicts
            .iter()
            .filter(|(_, verdict)| {
                verdict.status == status
                    || (status.is_actionable() && verdict.status.is_actionable())
            })
            .map(|(name, verdict)| (name.clone(), verdict.identity()))
            .collect();
        let mut identity = Map::new();
        identity.insert("status".into(), Value::from(status.as_str()));
        identity.insert(
            "command".into(),
            command.as_deref().map_or(Value::Null, Value::from),
        );
        identity.insert("details".into(), Value::Object(identities));
        let fingerprint = fingerprint_of(&Value::Object(identity))?;
        Ok(Self {
            status,
            command,
            details: verdicts,
            fingerprint,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn verdicts(items: &[(&str, ScriptVerdict)]) -> BTreeMap<String, ScriptVerdict> {
        items
            .iter()
            .map(|(name, verdict)| ((*name).to_owned(), verdict.clone()))
            .collect()
    }

    #[test]
    fn parses_the_four_statuses() {
        for (text, status) in [
            ("Ok", DiagnoseStatus::Ok),
            ("live-repair", DiagnoseStatus::LiveRepair),
            ("evacuate", DiagnoseStatus::Evacuate),
            ("evacuate-failover", DiagnoseStatus::EvacuateFailover),
        ] {
            let output = format!(r#" {{"status": "{text}", "details": "x"}} "#);
            let verdict = ScriptVerdict::parse(output.as_bytes()).unwrap();
            assert_eq!(verdict.status, status);
            assert_eq!(verdict.details, json!("x"));
        }
    }

    #[test]
    fn invalid_outputs_are_errors_not_ok() {
        let cases: [(&[u8], &str); 11] = [
            (
                b"{\"status\":\"evacuate\",\"status\":\"Ok\"}",
                "repeated key",
            ),
            (
                b"{\"status\":\"Ok\",\"details\":{\"a\":[{\"b\":1,\"b\":2}]}}",
                "repeated key \"b\"",
            ),
            (b"", "empty"),
            (b"\xff\xfe{}", "UTF-8"),
            (b"{\"status\":", "JSON"),
            (b"{\"status\":\"Ok\"}{\"status\":\"Ok\"}", "exactly one"),
            (b"[1]", "object"),
            (b"{\"details\":1}", "no \"status\""),
            (b"{\"status\":\"unknown\"}", "status"),
            (
                b"{\"status\":\"live-repair\",\"command\":\"../x\"}",
                "command",
            ),
            (
                b"{\"status\":\"Ok\",\"details\":9007199254740993}",
                "IEEE-754",
            ),
        ];
        for (output, expected) in cases {
            let error = ScriptVerdict::parse(output).unwrap_err().to_string();
            assert!(error.contains(expected), "{output:?}: {error}");
        }
    }

    #[test]
    fn merge_takes_most_severe_and_live_repair_command() {
        let live = ScriptVerdict::parse(br#"{"status":"live-repair","command":"fix-a"}"#).unwrap();
        let live_b =
            ScriptVerdict::parse(br#"{"status":"live-repair","command":"fix-b"}"#).unwrap();
        let ok = ScriptVerdict::parse(br#"{"status":"Ok"}"#).unwrap();
        let merged =
            NodeVerdict::merge(verdicts(&[("b", live_b), ("a", live), ("c", ok)])).unwrap();
        assert_eq!(merged.status, DiagnoseStatus::LiveRepair);
        assert_eq!(merged.command.as_deref(), Some("fix-a"));
        assert_eq!(merged.details.len(), 3);

        let evacuate = ScriptVerdict::parse(br#"{"status":"evacuate"}"#).unwrap();
        let live = ScriptVerdict::parse(br#"{"status":"live-repair","command":"fix-a"}"#).unwrap();
        let merged = NodeVerdict::merge(verdicts(&[("a", live), ("z", evacuate)])).unwrap();
        assert_eq!(merged.status, DiagnoseStatus::Evacuate);
        assert_eq!(merged.command, None);
    }

    #[test]
    fn unknown_is_never_ok_and_never_an_action() {
        let ok = ScriptVerdict::parse(br#"{"status":"Ok"}"#).unwrap();
        let merged = NodeVerdict::merge(verdicts(&[
            ("a", ok.clone()),
            ("b", ScriptVerdict::unknown("timed out")),
        ]))
        .unwrap();
        assert_eq!(merged.status, DiagnoseStatus::Unknown);
        assert!(!merged.status.is_actionable());
        let evacuate = ScriptVerdict::parse(br#"{"status":"evacuate"}"#).unwrap();
        let merged = NodeVerdict::merge(verdicts(&[
            ("a", evacuate),
            ("b", ScriptVerdict::unknown("timed out")),
        ]))
        .unwrap();
        assert_eq!(merged.status, DiagnoseStatus::Evacuate);
        assert_eq!(
            NodeVerdict::merge(BTreeMap::new()).unwrap().status,
            DiagnoseStatus::Ok
        );
    }

    #[test]
    fn declared_fingerprint_ignores_volatile_fields() {
        let a = ScriptVerdict::parse(
            br#"{"status":"evacuate","details":{"disk":"sda","temperature":41},"fingerprint":["/details/disk"]}"#,
        )
        .unwrap();
        let b = ScriptVerdict::parse(
            br#"{"fingerprint":["/details/disk"],"details":{"temperature":44,"disk":"sda"},"status":"evacuate"}"#,
        )
        .unwrap();
        let c = ScriptVerdict::parse(
            br#"{"status":"evacuate","details":{"disk":"sdb","temperature":41},"fingerprint":["/details/disk"]}"#,
        )
        .unwrap();
        let fp = |verdict: &ScriptVerdict| {
            NodeVerdict::merge(verdicts(&[("smart", verdict.clone())]))
                .unwrap()
                .fingerprint
        };
        assert_eq!(fp(&a), fp(&b));
        assert_ne!(fp(&a), fp(&c));
    }

    #[test]
    fn flapping_minor_script_keeps_fingerprint() {
        let evacuate = ScriptVerdict::parse(br#"{"status":"evacuate","details":"disk"}"#).unwrap();
        let first = NodeVerdict::merge(verdicts(&[
            ("a", evacuate.clone()),
            ("b", ScriptVerdict::unknown("timed out")),
        ]))
        .unwrap();
        let second = NodeVerdict::merge(verdicts(&[
            ("a", evacuate),
            ("b", ScriptVerdict::parse(br#"{"status":"Ok"}"#).unwrap()),
        ]))
        .unwrap();
        assert_eq!(first.fingerprint, second.fingerprint);
    }

    #[test]
    fn merged_verdict_round_trips() {
        let merged = NodeVerdict::merge(verdicts(&[(
            "a",
            ScriptVerdict::parse(br#"{"status":"live-repair","command":"x","details":[1]}"#)
                .unwrap(),
        )]))
        .unwrap();
        let text = serde_json::to_string(&merged).unwrap();
        let back: NodeVerdict = serde_json::from_str(&text).unwrap();
        assert_eq!(back, merged);
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            // Any outcome is fine; a panic is not.
            drop(ScriptVerdict::parse(&bytes));
        }

        #[test]
        fn key_order_does_not_change_the_fingerprint(disk in "[a-z]{1,8}", n in 0u32..1000) {
            let one = format!(r#"{{"status":"evacuate","details":{{"disk":"{disk}","n":{n}}}}}"#);
            let two = format!(r#"{{"details":{{"n":{n},"disk":"{disk}"}},  "status":"evacuate"}}"#);
            let merge = |text: &str| {
                let verdict = ScriptVerdict::parse(text.as_bytes()).unwrap();
                NodeVerdict::merge(BTreeMap::from([("s".to_owned(), verdict)])).unwrap()
            };
            prop_assert_eq!(merge(&one).fingerprint, merge(&two).fingerprint);
        }
    }
}
