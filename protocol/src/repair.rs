//! Repair requests and their results: the wire types of the agent's `POST /1/repair` and
//! `GET /1/repair/<incident-id>`.
//!
//! The coordinator asks a node to run one whitelisted repair command for one incident. The
//! request is the payload of a [`SignedEnvelope`]; the envelope's node, issue time and expiry are
//! authenticated with it, and the request repeats the node so that the payload alone says which
//! node it is for (the agent checks both agree). `nonce` is unique per request and lets the agent
//! refuse a replayed envelope; `incident_id` makes the request idempotent: the agent runs a
//! command at most once per incident and answers every later request for it with the first run's
//! [`RepairRecord`].
//!
//! The command gets `input` (the incident's original verdict JSON) on stdin, like Ganeti's repair
//! commands get the diagnose object. Its exit code alone decides success.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{CanonicalError, fingerprint_of};
use crate::sign::{KeyRing, SignError, SignedEnvelope, Signer, VerifyError, VerifyPolicy};
use crate::verdict::is_valid_command_name;

/// Where the agent serves repairs.
pub const REPAIR_PATH: &str = "/1/repair";
/// Ganeti's whitelist directory for repair commands.
pub const DEFAULT_REPAIR_COMMANDS_DIR: &str = "/etc/ganeti/node-repair-commands";
/// Largest request body the agent reads, in bytes.
pub const MAX_REPAIR_BODY_BYTES: usize = 256 * 1024;
/// Longest accepted nonce, in bytes.
pub const MAX_NONCE_LEN: usize = 128;
/// Longest accepted command name, in bytes (a file name on Linux).
pub const MAX_COMMAND_NAME_LEN: usize = 255;
/// Longest accepted node name, in bytes (a DNS name).
pub const MAX_NODE_NAME_LEN: usize = 253;

/// One request to run a repair command. The payload of a signed envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairRequest {
    /// The node that must run the command; equal to the envelope's node.
    pub node: String,
    /// The incident this repair is for, a UUID in canonical lower-case hyphenated form. Requests
    /// are idempotent by this id.
    pub incident_id: String,
    /// The repair command's name in the node's repair whitelist (`^[A-Za-z0-9_-]+$`).
    pub command: String,
    /// The incident's original verdict JSON, given to the command on stdin.
    pub input: Value,
    /// Unique per request (`^[A-Za-z0-9_-]{1,128}$`), so that a replayed envelope is refused.
    pub nonce: String,
}

/// Why a repair request is not well formed, or could not be signed or opened.
#[derive(Debug, thiserror::Error)]
pub enum RepairRequestError {
    /// The incident id is not a canonical UUID.
    #[error("incident_id must be a lower-case hyphenated UUID, got {0:?}")]
    BadIncidentId(String),
    /// The command name is not acceptable.
    #[error(
        "command must match ^[A-Za-z0-9_-]+$ and be at most {MAX_COMMAND_NAME_LEN} bytes, got {0:?}"
    )]
    BadCommand(String),
    /// The nonce is not acceptable.
    #[error("nonce must match ^[A-Za-z0-9_-]+$ and be 1 to {MAX_NONCE_LEN} bytes, got {0:?}")]
    BadNonce(String),
    /// The node name is empty or too long.
    #[error("node must be 1 to {MAX_NODE_NAME_LEN} bytes, got {0:?}")]
    BadNode(String),
    /// The request's node differs from the envelope's (or the signer's) node.
    #[error("request is for node {request:?} but the envelope speaks for {envelope:?}")]
    NodeMismatch {
        /// Node named in the request.
        request: String,
        /// Node of the envelope or signer.
        envelope: String,
    },
    /// The input has no canonical form (e.g. an integer beyond 2^53).
    #[error("input has no canonical JSON form: {0}")]
    Input(#[from] CanonicalError),
    /// The payload is not a repair request.
    #[error("payload is not a repair request: {0}")]
    Payload(String),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// The envelope did not verify.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

/// Whether `text` is a UUID in canonical lower-case hyphenated form (8-4-4-4-12 hex digits).
///
/// Only one spelling is accepted so that one incident cannot be run twice under two spellings.
pub fn is_canonical_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(index, &byte)| match index {
            8 | 13 | 18 | 23 => byte == b'-',
            _ => byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte),
        })
}

impl RepairRequest {
    /// Checks every field's form (not the node, which only the receiver can judge).
    pub fn validate(&self) -> Result<(), RepairRequestError> {
        if self.node.is_empty() || self.node.len() > MAX_NODE_NAME_LEN {
            return Err(RepairRequestError::BadNode(self.node.clone()));
        }
        if !is_canonical_uuid(&self.incident_id) {
            return Err(RepairRequestError::BadIncidentId(self.incident_id.clone()));
        }
        if self.command.len() > MAX_COMMAND_NAME_LEN || !is_valid_command_name(&self.command) {
            return Err(RepairRequestError::BadCommand(self.command.clone()));
        }
        if self.nonce.len() > MAX_NONCE_LEN || !is_valid_command_name(&self.nonce) {
            return Err(RepairRequestError::BadNonce(self.nonce.clone()));
        }
        fingerprint_of(&self.input)?;
        Ok(())
    }

    /// Lower-case hex SHA-256 of the canonical input: tells two requests for the same incident
    /// apart when their inputs differ.
    pub fn input_fingerprint(&self) -> Result<String, CanonicalError> {
        fingerprint_of(&self.input)
    }
}

/// Signs `request` for its node: the coordinator's side.
///
/// The signer must speak for the request's node. `sequence` is the signer's strictly increasing
/// counter, `now_ms` the issue time and `ttl_ms` how long the request stays valid (the agent
/// remembers its nonce that long).
pub fn sign_repair_request(
    signer: &Signer,
    request: RepairRequest,
    sequence: u64,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<SignedEnvelope, RepairRequestError> {
    sign_request(signer, &request, sequence, now_ms, ttl_ms)
}

/// A request to a node's agent carried in a signed envelope: it names its node and checks its
/// own fields.
trait NodeRequest: Serialize + serde::de::DeserializeOwned {
    fn node(&self) -> &str;
    fn validate(&self) -> Result<(), RepairRequestError>;
}

impl NodeRequest for RepairRequest {
    fn node(&self) -> &str {
        &self.node
    }
    fn validate(&self) -> Result<(), RepairRequestError> {
        Self::validate(self)
    }
}

impl NodeRequest for CheckRequest {
    fn node(&self) -> &str {
        &self.node
    }
    fn validate(&self) -> Result<(), RepairRequestError> {
        Self::validate(self)
    }
}

/// Signs a well-formed `request` for the signer's node.
fn sign_request<T: NodeRequest>(
    signer: &Signer,
    request: &T,
    sequence: u64,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<SignedEnvelope, RepairRequestError> {
    request.validate()?;
    if request.node() != signer.node() {
        return Err(RepairRequestError::NodeMismatch {
            request: request.node().to_owned(),
            envelope: signer.node().to_owned(),
        });
    }
    let payload = serde_json::to_value(request)
        .map_err(|error| RepairRequestError::Payload(error.to_string()))?;
    Ok(signer.sign(payload, sequence, now_ms, ttl_ms)?)
}

/// Verifies a signed request for `node` and decodes it: signature, freshness, the envelope's
/// node, then a well-formed payload for the same node.
fn open_request<T: NodeRequest>(
    ring: &KeyRing,
    envelope: &SignedEnvelope,
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
) -> Result<T, RepairRequestError> {
    ring.verify(envelope, now_ms, policy, Some(node), None)?;
    let request: T = serde_json::from_value(envelope.payload.clone())
        .map_err(|error| RepairRequestError::Payload(error.to_string()))?;
    if request.node() != envelope.node {
        return Err(RepairRequestError::NodeMismatch {
            request: request.node().to_owned(),
            envelope: envelope.node.clone(),
        });
    }
    request.validate()?;
    Ok(request)
}

/// Verifies a signed repair request for `node` and extracts the request: the agent's side.
///
/// Checks the signature, freshness and the envelope's node, then that the payload is a
/// well-formed request for the same node. Replays (a nonce seen before) are the caller's to
/// refuse, since only it remembers nonces.
pub fn open_repair_request(
    ring: &KeyRing,
    envelope: &SignedEnvelope,
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
) -> Result<RepairRequest, RepairRequestError> {
    open_request(ring, envelope, now_ms, policy, node)
}

/// Where the agent takes requests to run its diagnose scripts at once.
pub const CHECK_PATH: &str = "/1/check";

/// A request to run the node's diagnose scripts now instead of at the next interval (`nodecare
/// check NODE`). The payload of a signed envelope, like a [`RepairRequest`]; its fields differ, so
/// neither ever reads as the other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// The node that must run its scripts; equal to the envelope's node.
    pub node: String,
    /// Unique per request (`^[A-Za-z0-9_-]{1,128}$`), so that a replayed envelope is refused.
    pub check_nonce: String,
}

impl CheckRequest {
    /// Checks every field's form.
    pub fn validate(&self) -> Result<(), RepairRequestError> {
        if self.node.is_empty() || self.node.len() > MAX_NODE_NAME_LEN {
            return Err(RepairRequestError::BadNode(self.node.clone()));
        }
        if self.check_nonce.len() > MAX_NONCE_LEN || !is_valid_command_name(&self.check_nonce) {
            return Err(RepairRequestError::BadNonce(self.check_nonce.clone()));
        }
        Ok(())
    }
}

/// Signs a check request for its node: the coordinator's side (see [`sign_repair_request`]).
pub fn sign_check_request(
    signer: &Signer,
    request: CheckRequest,
    sequence: u64,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<SignedEnvelope, RepairRequestError> {
    sign_request(signer, &request, sequence, now_ms, ttl_ms)
}

/// Verifies a signed check request for `node`: the agent's side (see [`open_repair_request`]).
pub fn open_check_request(
    ring: &KeyRing,
    envelope: &SignedEnvelope,
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
) -> Result<CheckRequest, RepairRequestError> {
    open_request(ring, envelope, now_ms, policy, node)
}

/// The agent's answer to an accepted check request (`202`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckAnswer {
    /// The node.
    pub node: String,
    /// The sequence of the signed report served when the check was accepted: the check's result
    /// is the first report with a higher sequence.
    pub after_sequence: Option<u64>,
}

/// Where a repair run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RepairState {
    /// The command is running.
    Running,
    /// The command exited with status 0.
    Succeeded,
    /// The command exited non-zero, was killed by a signal, or could not be started.
    Failed,
    /// The command outlived its timeout; its whole process group was killed.
    TimedOut,
    /// The agent stopped while the command ran; the outcome is unknown and the command is not
    /// run again.
    Interrupted,
    /// The request was refused and nothing ran (audit log outcome; never an incident's record).
    Refused,
}

impl RepairState {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::TimedOut => "timed-out",
            Self::Interrupted => "interrupted",
            Self::Refused => "refused",
        }
    }

    /// Whether the run is over.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Running)
    }

    /// Whether the repair is known to have worked.
    pub fn is_success(self) -> bool {
        matches!(self, Self::Succeeded)
    }
}

/// The result (or progress) of one incident's repair run. Returned by `POST /1/repair` (status
/// 202 while running, 200 once final) and `GET /1/repair/<incident-id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairRecord {
    /// The incident.
    pub incident_id: String,
    /// The node that ran it.
    pub node: String,
    /// The command run.
    pub command: String,
    /// Fingerprint of the input given on stdin (see [`RepairRequest::input_fingerprint`]).
    pub input_fingerprint: String,
    /// Where the run is.
    pub state: RepairState,
    /// Exit status, when the command exited.
    pub exit_code: Option<i32>,
    /// Signal number, when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Unix milliseconds when the run started.
    #[serde(alias = "started_at")]
    pub started_at_ms: u64,
    /// Unix milliseconds when it ended.
    #[serde(alias = "finished_at")]
    pub finished_at_ms: Option<u64>,
    /// Wall-clock duration.
    pub duration_ms: Option<u64>,
    /// Standard output, lossily decoded as UTF-8, at most the configured cap.
    pub stdout: String,
    /// Standard error, likewise capped.
    pub stderr: String,
    /// Whether standard output was cut at the cap.
    pub stdout_truncated: bool,
    /// Whether standard error was cut at the cap.
    pub stderr_truncated: bool,
    /// Why the run failed without an exit status (could not start, timed out, interrupted).
    pub error: Option<String>,
}

impl RepairRecord {
    /// A record for a run that is starting now.
    pub fn running(
        request: &RepairRequest,
        started_at_ms: u64,
    ) -> Result<Self, RepairRequestError> {
        Ok(Self {
            incident_id: request.incident_id.clone(),
            node: request.node.clone(),
            command: request.command.clone(),
            input_fingerprint: request.input_fingerprint()?,
            state: RepairState::Running,
            exit_code: None,
            signal: None,
            started_at_ms,
            finished_at_ms: None,
            duration_ms: None,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
            error: None,
        })
    }
}

/// Machine-readable reason a repair request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalReason {
    /// The body is larger than the limit (413).
    BodyTooLarge,
    /// The body is not a signed envelope or the payload is not a well-formed request (400).
    Malformed,
    /// The signature does not verify or its key is unknown (401).
    BadSignature,
    /// The envelope is expired or issued too far in the future (401).
    Expired,
    /// The nonce was seen before (409).
    Replayed,
    /// The request (envelope or payload) is for another node (403).
    WrongNode,
    /// The command is not in the repair whitelist or fails its checks (403).
    NotWhitelisted,
    /// The incident already has a run with another command or input (409).
    IncidentConflict,
    /// Another repair holds the node's repair lock beyond the lock timeout (503, retry later).
    Busy,
    /// The agent could not record the request durably, so it ran nothing (500).
    Internal,
}

impl RefusalReason {
    /// Every reason, for counters that always show every series.
    pub const ALL: [Self; 10] = [
        Self::BodyTooLarge,
        Self::Malformed,
        Self::BadSignature,
        Self::Expired,
        Self::Replayed,
        Self::WrongNode,
        Self::NotWhitelisted,
        Self::IncidentConflict,
        Self::Busy,
        Self::Internal,
    ];

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::BodyTooLarge => "body-too-large",
            Self::Malformed => "malformed",
            Self::BadSignature => "bad-signature",
            Self::Expired => "expired",
            Self::Replayed => "replayed",
            Self::WrongNode => "wrong-node",
            Self::NotWhitelisted => "not-whitelisted",
            Self::IncidentConflict => "incident-conflict",
            Self::Busy => "busy",
            Self::Internal => "internal",
        }
    }

    /// The HTTP status the agent answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::BodyTooLarge => 413,
            Self::Malformed => 400,
            Self::BadSignature | Self::Expired => 401,
            Self::WrongNode | Self::NotWhitelisted => 403,
            Self::Replayed | Self::IncidentConflict => 409,
            Self::Busy => 503,
            Self::Internal => 500,
        }
    }
}

/// The body of every refused repair request: nothing was run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairRefusal {
    /// Always [`RepairState::Refused`].
    pub state: RepairState,
    /// Why, for machines.
    pub reason: RefusalReason,
    /// Why, for people.
    pub message: String,
}

impl RepairRefusal {
    /// A refusal.
    pub fn new(reason: RefusalReason, message: impl Into<String>) -> Self {
        Self {
            state: RepairState::Refused,
            reason,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::HmacKey;
    use proptest::prelude::*;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000_000;
    const INCIDENT: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

    fn key() -> HmacKey {
        HmacKey::new(b"0123456789abcdef0123456789abcdef01234567\n".to_vec())
    }

    fn request(node: &str) -> RepairRequest {
        RepairRequest {
            node: node.into(),
            incident_id: INCIDENT.into(),
            command: "restart-unit".into(),
            input: json!({"status": "live-repair", "command": "restart-unit",
                          "details": {"unit": "multipathd.service"}}),
            nonce: "n-1".into(),
        }
    }

    #[test]
    fn signed_request_round_trips() {
        let signer = Signer::new(key(), "node1");
        let envelope = sign_repair_request(&signer, request("node1"), 3, NOW, 60_000).unwrap();
        let text = serde_json::to_vec(&envelope).unwrap();
        let back: SignedEnvelope = serde_json::from_slice(&text).unwrap();
        let ring = KeyRing::single(key());
        let opened =
            open_repair_request(&ring, &back, NOW + 5, VerifyPolicy::default(), "node1").unwrap();
        assert_eq!(opened, request("node1"));
    }

    #[test]
    fn signer_must_speak_for_the_requests_node() {
        let signer = Signer::new(key(), "node1");
        assert!(matches!(
            sign_repair_request(&signer, request("node2"), 3, NOW, 60_000),
            Err(RepairRequestError::NodeMismatch { .. })
        ));
    }

    #[test]
    fn open_refuses_other_node_mismatch_and_bad_signature() {
        let ring = KeyRing::single(key());
        let signer = Signer::new(key(), "node1");
        let envelope = sign_repair_request(&signer, request("node1"), 3, NOW, 60_000).unwrap();
        assert!(matches!(
            open_repair_request(&ring, &envelope, NOW, VerifyPolicy::default(), "node2"),
            Err(RepairRequestError::Verify(VerifyError::WrongNode { .. }))
        ));
        // A correctly signed envelope for node1 whose payload names node2.
        let forged = signer
            .sign(
                serde_json::to_value(request("node2")).unwrap(),
                4,
                NOW,
                60_000,
            )
            .unwrap();
        assert!(matches!(
            open_repair_request(&ring, &forged, NOW, VerifyPolicy::default(), "node1"),
            Err(RepairRequestError::NodeMismatch { .. })
        ));
        let mut tampered = envelope.clone();
        tampered.payload["command"] = json!("reboot");
        assert!(matches!(
            open_repair_request(&ring, &tampered, NOW, VerifyPolicy::default(), "node1"),
            Err(RepairRequestError::Verify(VerifyError::BadSignature))
        ));
        assert!(matches!(
            open_repair_request(
                &ring,
                &envelope,
                NOW + 10_000_000,
                VerifyPolicy::default(),
                "node1"
            ),
            Err(RepairRequestError::Verify(VerifyError::Expired { .. }))
        ));
    }

    #[test]
    fn open_refuses_signed_but_malformed_payloads() {
        let ring = KeyRing::single(key());
        let signer = Signer::new(key(), "node1");
        let mut bad_command = serde_json::to_value(request("node1")).unwrap();
        bad_command["command"] = json!("../bin/sh");
        let mut unknown_field = serde_json::to_value(request("node1")).unwrap();
        unknown_field["extra"] = json!(1);
        let mut bad_id = serde_json::to_value(request("node1")).unwrap();
        bad_id["incident_id"] = json!("0190A1B2-C3D4-7E5F-8A9B-0C1D2E3F4A5B");
        for payload in [bad_command, unknown_field, bad_id, json!("text"), json!({})] {
            let envelope = signer.sign(payload, 1, NOW, 60_000).unwrap();
            assert!(
                open_repair_request(&ring, &envelope, NOW, VerifyPolicy::default(), "node1")
                    .is_err()
            );
        }
    }

    #[test]
    fn validation_rules() {
        let ok = request("node1");
        ok.validate().unwrap();
        type Mutation = Box<dyn Fn(&mut RepairRequest)>;
        let cases: Vec<Mutation> = vec![
            Box::new(|r| r.node.clear()),
            Box::new(|r| r.node = "n".repeat(MAX_NODE_NAME_LEN + 1)),
            Box::new(|r| r.incident_id = "not-a-uuid".into()),
            Box::new(|r| r.incident_id = "0190a1b2c3d47e5f8a9b0c1d2e3f4a5b".into()),
            Box::new(|r| r.incident_id = format!("{INCIDENT} ")),
            Box::new(|r| r.command = String::new()),
            Box::new(|r| r.command = "a/b".into()),
            Box::new(|r| r.command = "a.sh".into()),
            Box::new(|r| r.command = "c".repeat(MAX_COMMAND_NAME_LEN + 1)),
            Box::new(|r| r.nonce = String::new()),
            Box::new(|r| r.nonce = "n".repeat(MAX_NONCE_LEN + 1)),
            Box::new(|r| r.nonce = "a b".into()),
            Box::new(|r| r.input = json!({"n": 9_007_199_254_740_993_u64})),
        ];
        for (index, case) in cases.iter().enumerate() {
            let mut bad = ok.clone();
            case(&mut bad);
            assert!(bad.validate().is_err(), "case {index} should be refused");
        }
    }

    #[test]
    fn states_and_reasons_serialise_in_kebab_case() {
        assert_eq!(
            serde_json::to_value(RepairState::TimedOut).unwrap(),
            json!("timed-out")
        );
        assert_eq!(
            serde_json::to_value(RepairState::Succeeded).unwrap(),
            json!("succeeded")
        );
        assert!(!RepairState::Running.is_final());
        assert!(RepairState::Interrupted.is_final());
        assert!(!RepairState::Failed.is_success());
        assert_eq!(
            serde_json::to_value(RepairRefusal::new(RefusalReason::NotWhitelisted, "no")).unwrap(),
            json!({"state": "refused", "reason": "not-whitelisted", "message": "no"})
        );
        assert_eq!(RefusalReason::BodyTooLarge.http_status(), 413);
        assert_eq!(RefusalReason::Replayed.http_status(), 409);
    }

    #[test]
    fn as_str_is_the_wire_spelling() {
        use RefusalReason as R;
        use RepairState as S;
        for state in [
            S::Running,
            S::Succeeded,
            S::Failed,
            S::TimedOut,
            S::Interrupted,
            S::Refused,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), json!(state.as_str()));
        }
        for reason in R::ALL {
            assert_eq!(
                serde_json::to_value(reason).unwrap(),
                json!(reason.as_str())
            );
        }
    }

    #[test]
    fn running_record_round_trips() {
        let record = RepairRecord::running(&request("node1"), NOW).unwrap();
        assert_eq!(record.state, RepairState::Running);
        assert_eq!(record.input_fingerprint.len(), 64);
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<RepairRecord>(&text).unwrap(), record);
    }

    proptest! {
        #[test]
        fn uuid_check_matches_a_reference(text in "[0-9a-fA-F-]{30,40}") {
            let reference = text.len() == 36
                && text.chars().enumerate().all(|(i, c)| {
                    if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() && !c.is_ascii_uppercase() }
                });
            prop_assert_eq!(is_canonical_uuid(&text), reference);
        }
    }
}

#[cfg(test)]
mod check_tests {
    use super::*;
    use crate::sign::HmacKey;

    #[test]
    fn a_check_request_signs_opens_and_never_reads_as_a_repair_request() {
        let key = HmacKey::new(b"check-test-key".to_vec());
        let signer = Signer::new(key.clone(), "node1");
        let ring = KeyRing::single(key);
        let request = CheckRequest {
            node: "node1".into(),
            check_nonce: "n1".into(),
        };
        let envelope = sign_check_request(&signer, request.clone(), 7, 1_000, 60_000).unwrap();
        let policy = VerifyPolicy::default();
        assert_eq!(
            open_check_request(&ring, &envelope, 1_000, policy, "node1").unwrap(),
            request
        );
        assert!(matches!(
            open_check_request(&ring, &envelope, 1_000, policy, "node2"),
            Err(RepairRequestError::Verify(_))
        ));
        assert!(matches!(
            open_repair_request(&ring, &envelope, 1_000, policy, "node1"),
            Err(RepairRequestError::Payload(_))
        ));
        let bad = CheckRequest {
            node: "node1".into(),
            check_nonce: "a b".into(),
        };
        assert!(matches!(
            sign_check_request(&signer, bad, 8, 1_000, 60_000),
            Err(RepairRequestError::BadNonce(_))
        ));
    }
}
