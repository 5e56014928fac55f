//! Replicas of the coordinator's state on the master candidates: the wire types of the agent's
//! `PUT /1/replica` (push) and `POST /1/replica/read` (read).
//!
//! The coordinator's state (its SQLite database, as one snapshot) travels to the agent of every
//! master candidate before any of its writes reaches Ganeti, so that a coordinator that becomes
//! master after `gnt-cluster master-failover` continues from the newest state (see
//! `docs/ARCHITECTURE.md`, "State across master failovers").
//!
//! A push is a frame: one line of JSON, a [`SignedEnvelope`] signed with the cluster key for the
//! receiving node whose payload is a [`ReplicaHeader`], then `\n`, then the snapshot's bytes. The
//! header names the snapshot's [`Generation`] (epoch, number), its size and SHA-256. The agent keeps
//! the frame exactly as received when its generation is higher than the one it holds and its
//! epoch is not below the epoch it promised ([`decide_push`]); anything else is refused, which
//! is how a coordinator learns that another one took over (fencing).
//!
//! A read is a signed [`ReplicaRead`] with a fresh nonce and the epoch the reading coordinator
//! will start; the agent promises that epoch when it is above every epoch it promised or holds
//! ([`decide_read`]), persists the promise and from then on refuses pushes of lower epochs (a
//! Paxos prepare: the old master's push cannot reach a majority between a takeover's read and
//! its push). It answers with a frame whose envelope it signs itself, with a [`ReplicaAnswer`]
//! payload echoing the nonce, naming the promise (or the refusal) and the generation it holds,
//! followed by the stored push frame (nothing when it holds none or refused). The reader checks
//! both signatures, that they agree, the promise, and the snapshot's digest. A read without an
//! epoch (a coordinator from before the promise) is answered without one and promises nothing.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::canonical::MAX_SAFE_INTEGER;
use crate::repair::{MAX_NODE_NAME_LEN, MAX_NONCE_LEN};
use crate::sign::{KeyRing, SignError, SignedEnvelope, Signer, VerifyError, VerifyPolicy};
use crate::verdict::is_valid_command_name;

/// Where the agent takes pushes (`PUT`).
pub const REPLICA_PATH: &str = "/1/replica";
/// Where the agent answers reads (`POST`).
pub const REPLICA_READ_PATH: &str = "/1/replica/read";
/// Largest snapshot accepted, in bytes.
pub const MAX_REPLICA_BYTES: u64 = 64 * 1024 * 1024;
/// Largest envelope line of a frame, in bytes.
pub const MAX_ENVELOPE_LINE_BYTES: usize = 16 * 1024;
/// Largest read request body, in bytes.
pub const MAX_READ_BODY_BYTES: usize = 16 * 1024;

/// A snapshot's place in the order of states: epochs grow with every takeover of a new master,
/// numbers with every push within an epoch. Compared as (epoch, number).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(deny_unknown_fields)]
pub struct Generation {
    /// Grows by one with every coordinator that takes over.
    pub epoch: u64,
    /// Grows by one with every push within the epoch.
    pub number: u64,
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.epoch, self.number)
    }
}

/// What a pushed snapshot is: the payload of the coordinator-signed envelope of a push.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaHeader {
    /// The node that keeps the copy; equal to the envelope's node.
    pub node: String,
    /// The node whose coordinator pushed it (the master then).
    pub coordinator: String,
    /// The snapshot's generation.
    pub generation: Generation,
    /// Its size in bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of its bytes.
    pub sha256: String,
    /// Unix ms when the snapshot was taken.
    pub created_ms: u64,
}

/// A request to read the copy a node keeps: the payload of a coordinator-signed envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaRead {
    /// The node asked; equal to the envelope's node.
    pub node: String,
    /// Fresh per read (`^[A-Za-z0-9_-]{1,128}$`); the answer echoes it.
    pub read_nonce: String,
    /// The epoch the reading coordinator will start (at least 1): the node promises to refuse
    /// pushes of lower epochs from then on. Absent in a read of a coordinator from before the
    /// promise (answered, promising nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

/// The agent's answer to a read: the payload of the envelope the agent signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplicaAnswer {
    /// The answering node.
    pub node: String,
    /// The read's nonce.
    pub read_nonce: String,
    /// The header of the copy it holds, `None` when it holds none or refused the read.
    pub held: Option<ReplicaHeader>,
    /// The read's epoch, promised: pushes of lower epochs are refused from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promised: Option<u64>,
    /// The read's epoch is not above what the node promised or holds: the highest epoch it
    /// promised or holds (the reader tries again above it). Nothing held is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<u64>,
}

/// The agent's answer to a refused push (`409`): the generation it holds, and the epoch it
/// promised when that is why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushRefused {
    /// What the node holds (`0.0` when nothing); at least the pushed generation unless
    /// `promised` is set.
    pub held: Generation,
    /// Refused for a promise: a takeover of this epoch, above the push's, read the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promised: Option<u64>,
}

/// The agent's answer to an accepted push (`200`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushAccepted {
    /// What the node holds now: the pushed generation.
    pub held: Generation,
}

/// Why a frame, push or read is not acceptable.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// No `\n` after the envelope line, or the line is too long.
    #[error("not a replica frame: {0}")]
    Frame(String),
    /// The envelope does not verify.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// The payload is not the expected type, or a field is malformed.
    #[error("bad replica payload: {0}")]
    Payload(String),
    /// The snapshot's bytes do not match the header.
    #[error("snapshot does not match its header: {0}")]
    Digest(String),
    /// The snapshot is too large.
    #[error("snapshot of {0} bytes exceeds {MAX_REPLICA_BYTES} bytes")]
    TooLarge(u64),
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn check_node(node: &str) -> Result<(), ReplicaError> {
    if node.is_empty() || node.len() > MAX_NODE_NAME_LEN {
        return Err(ReplicaError::Payload(format!("bad node name {node:?}")));
    }
    Ok(())
}

impl ReplicaHeader {
    /// A header describing `snapshot`.
    pub fn describe(
        node: impl Into<String>,
        coordinator: impl Into<String>,
        generation: Generation,
        snapshot: &[u8],
        created_ms: u64,
    ) -> Self {
        Self {
            node: node.into(),
            coordinator: coordinator.into(),
            generation,
            size: u64::try_from(snapshot.len()).unwrap_or(u64::MAX),
            sha256: sha256_hex(snapshot),
            created_ms,
        }
    }

    /// Checks every field's form.
    pub fn validate(&self) -> Result<(), ReplicaError> {
        check_node(&self.node)?;
        check_node(&self.coordinator)?;
        for (name, value) in [
            ("generation.epoch", self.generation.epoch),
            ("generation.number", self.generation.number),
            ("size", self.size),
            ("created_ms", self.created_ms),
        ] {
            if value > MAX_SAFE_INTEGER {
                return Err(ReplicaError::Payload(format!(
                    "{name} {value} exceeds 2^53 - 1 (docs/PROTOCOL.md, Conventions)"
                )));
            }
        }
        if self.size > MAX_REPLICA_BYTES {
            return Err(ReplicaError::TooLarge(self.size));
        }
        if self.sha256.len() != 64
            || !self
                .sha256
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        {
            return Err(ReplicaError::Payload(format!(
                "sha256 must be 64 lower-case hex digits, got {:?}",
                self.sha256
            )));
        }
        Ok(())
    }

    /// Checks that `snapshot` is the one this header describes.
    pub fn matches(&self, snapshot: &[u8]) -> Result<(), ReplicaError> {
        let size = u64::try_from(snapshot.len()).unwrap_or(u64::MAX);
        if size != self.size {
            return Err(ReplicaError::Digest(format!(
                "{size} bytes, header says {}",
                self.size
            )));
        }
        let digest = sha256_hex(snapshot);
        if digest != self.sha256 {
            return Err(ReplicaError::Digest(format!(
                "sha256 {digest}, header says {}",
                self.sha256
            )));
        }
        Ok(())
    }
}

impl ReplicaRead {
    /// Checks every field's form.
    pub fn validate(&self) -> Result<(), ReplicaError> {
        check_node(&self.node)?;
        if self.read_nonce.len() > MAX_NONCE_LEN || !is_valid_command_name(&self.read_nonce) {
            return Err(ReplicaError::Payload(format!(
                "bad read nonce {:?}",
                self.read_nonce
            )));
        }
        check_epoch("epoch", self.epoch)
    }
}

fn check_epoch(name: &str, epoch: Option<u64>) -> Result<(), ReplicaError> {
    match epoch {
        Some(0) => Err(ReplicaError::Payload(format!("{name} must be at least 1"))),
        Some(value) if value > MAX_SAFE_INTEGER => Err(ReplicaError::Payload(format!(
            "{name} {value} exceeds 2^53 - 1 (docs/PROTOCOL.md, Conventions)"
        ))),
        _ => Ok(()),
    }
}

/// Joins an envelope and the bytes after it into one frame.
pub fn frame(envelope: &SignedEnvelope, body: &[u8]) -> Result<Vec<u8>, ReplicaError> {
    let mut bytes =
        serde_json::to_vec(envelope).map_err(|error| ReplicaError::Payload(error.to_string()))?;
    bytes.push(b'\n');
    bytes.extend_from_slice(body);
    Ok(bytes)
}

/// Splits a frame into its envelope (read strictly) and the bytes after it.
pub fn split_frame(bytes: &[u8]) -> Result<(SignedEnvelope, &[u8]), ReplicaError> {
    let window = &bytes[..bytes.len().min(MAX_ENVELOPE_LINE_BYTES + 1)];
    let Some(end) = window.iter().position(|byte| *byte == b'\n') else {
        return Err(ReplicaError::Frame(format!(
            "no end of the envelope line within {MAX_ENVELOPE_LINE_BYTES} bytes"
        )));
    };
    let (line, rest) = bytes.split_at(end);
    let envelope = SignedEnvelope::from_json(line)?;
    Ok((envelope, rest.get(1..).unwrap_or_default()))
}

fn payload<T: serde::de::DeserializeOwned>(envelope: &SignedEnvelope) -> Result<T, ReplicaError> {
    serde_json::from_value(envelope.payload.clone())
        .map_err(|error| ReplicaError::Payload(error.to_string()))
}

fn signed<T: Serialize>(
    signer: &Signer,
    payload: &T,
    sequence: u64,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<SignedEnvelope, ReplicaError> {
    let value =
        serde_json::to_value(payload).map_err(|error| ReplicaError::Payload(error.to_string()))?;
    Ok(signer.sign(value, sequence, now_ms, ttl_ms)?)
}

fn node_agrees(payload_node: &str, envelope: &SignedEnvelope) -> Result<(), ReplicaError> {
    if payload_node != envelope.node {
        return Err(ReplicaError::Payload(format!(
            "payload names node {payload_node:?}, envelope {:?}",
            envelope.node
        )));
    }
    Ok(())
}

/// The coordinator's side of a push: the frame carrying `snapshot` to `header.node`, signed for
/// that node.
pub fn sign_push(
    signer: &Signer,
    header: &ReplicaHeader,
    snapshot: &[u8],
    sequence: u64,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Vec<u8>, ReplicaError> {
    header.validate()?;
    header.matches(snapshot)?;
    if header.node != signer.node() {
        return Err(ReplicaError::Payload(format!(
            "header names node {:?}, signer speaks for {:?}",
            header.node,
            signer.node()
        )));
    }
    frame(&signed(signer, header, sequence, now_ms, ttl_ms)?, snapshot)
}

/// The agent's side of a push: verifies the frame (signature, freshness, node) and the snapshot
/// against its header.
pub fn open_push<'a>(
    ring: &KeyRing,
    bytes: &'a [u8],
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
) -> Result<(ReplicaHeader, &'a [u8]), ReplicaError> {
    let window = &bytes[..bytes.len().min(MAX_ENVELOPE_LINE_BYTES + 1)];
    let Some(end) = window.iter().position(|byte| *byte == b'\n') else {
        return Err(ReplicaError::Frame(format!(
            "no end of the envelope line within {MAX_ENVELOPE_LINE_BYTES} bytes"
        )));
    };
    let (line, rest) = bytes.split_at(end);
    let header = open_push_line(ring, line, now_ms, policy, node)?;
    let snapshot = rest.get(1..).unwrap_or_default();
    header.matches(snapshot)?;
    Ok((header, snapshot))
}

/// The first step of a push read as a stream: verifies its envelope line (without the `\n`;
/// signature, freshness, node, header fields) before a byte of the snapshot is read. The caller
/// then checks the snapshot's size and digest against the header (see [`push_frame_len`]).
pub fn open_push_line(
    ring: &KeyRing,
    line: &[u8],
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
) -> Result<ReplicaHeader, ReplicaError> {
    if line.len() > MAX_ENVELOPE_LINE_BYTES {
        return Err(ReplicaError::Frame(format!(
            "envelope line of {} bytes exceeds {MAX_ENVELOPE_LINE_BYTES} bytes",
            line.len()
        )));
    }
    let envelope = SignedEnvelope::from_json(line)?;
    ring.verify(&envelope, now_ms, policy, Some(node), None)?;
    let header: ReplicaHeader = payload(&envelope)?;
    node_agrees(&header.node, &envelope)?;
    header.validate()?;
    Ok(header)
}

/// The length of a push frame whose envelope line (without its `\n`) is `line_len` bytes long and
/// whose snapshot is the one `header` describes: what its `Content-Length` must be.
pub fn push_frame_len(line_len: usize, header: &ReplicaHeader) -> u64 {
    u64::try_from(line_len)
        .unwrap_or(u64::MAX)
        .saturating_add(1)
        .saturating_add(header.size)
}

/// A push frame kept by an agent, read back: its signature is checked as of its issue time (a
/// kept copy outlives its push's validity window; the generation orders copies, not the clock).
pub fn open_kept<'a>(
    ring: &KeyRing,
    bytes: &'a [u8],
    node: &str,
) -> Result<(ReplicaHeader, &'a [u8]), ReplicaError> {
    let (envelope, snapshot) = split_frame(bytes)?;
    ring.verify(
        &envelope,
        envelope.issued_at_ms,
        VerifyPolicy::default(),
        Some(node),
        None,
    )?;
    let header: ReplicaHeader = payload(&envelope)?;
    node_agrees(&header.node, &envelope)?;
    header.validate()?;
    header.matches(snapshot)?;
    Ok((header, snapshot))
}

/// The coordinator's side of a read: the signed request body for `read.node`.
pub fn sign_read(
    signer: &Signer,
    read: &ReplicaRead,
    sequence: u64,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Vec<u8>, ReplicaError> {
    read.validate()?;
    if read.node != signer.node() {
        return Err(ReplicaError::Payload(format!(
            "read names node {:?}, signer speaks for {:?}",
            read.node,
            signer.node()
        )));
    }
    serde_json::to_vec(&signed(signer, read, sequence, now_ms, ttl_ms)?)
        .map_err(|error| ReplicaError::Payload(error.to_string()))
}

/// The agent's side of a read: verifies the request for `node`.
pub fn open_read(
    ring: &KeyRing,
    body: &[u8],
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
) -> Result<ReplicaRead, ReplicaError> {
    let envelope = SignedEnvelope::from_json(body)?;
    ring.verify(&envelope, now_ms, policy, Some(node), None)?;
    let read: ReplicaRead = payload(&envelope)?;
    node_agrees(&read.node, &envelope)?;
    read.validate()?;
    Ok(read)
}

/// The agent's answer to a read: its signed [`ReplicaAnswer`], then the kept push frame.
/// `decision` is what [`decide_read`] said; a refusal carries no copy.
pub fn sign_answer(
    signer: &Signer,
    read_nonce: &str,
    decision: ReadDecision,
    kept: Option<(&ReplicaHeader, &[u8])>,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Vec<u8>, ReplicaError> {
    let (kept, promised, refused) = match decision {
        ReadDecision::Answer => (kept, None, None),
        ReadDecision::Promise(epoch) => (kept, Some(epoch), None),
        ReadDecision::Refuse { highest } => (None, None, Some(highest)),
    };
    let answer = ReplicaAnswer {
        node: signer.node().to_owned(),
        read_nonce: read_nonce.to_owned(),
        held: kept.map(|(header, _)| header.clone()),
        promised,
        refused,
    };
    frame(
        &signed(signer, &answer, 0, now_ms, ttl_ms)?,
        kept.map(|(_, frame)| frame).unwrap_or_default(),
    )
}

/// What a node answered to a read: the copy it keeps, if any, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCopy {
    /// The copy's header.
    pub header: ReplicaHeader,
    /// The snapshot.
    pub snapshot: Vec<u8>,
}

/// What a read's answer amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAnswer {
    /// The node promised the read's epoch (or, for a read without one, answered): the copy it
    /// keeps, if any.
    Copy(Option<ReadCopy>),
    /// The node refused the read's epoch: it promised or holds this one, not below it.
    Refused {
        /// The highest epoch the node promised or holds.
        highest: u64,
    },
}

/// The coordinator's side of a read's answer from `node` to the read with `read_nonce` naming
/// `epoch`: both signatures, the nonce, the promise of `epoch` (or a refusal naming an epoch not
/// below it), the agreement of the answer's header with the kept push, the digest.
pub fn open_answer(
    ring: &KeyRing,
    bytes: &[u8],
    now_ms: u64,
    policy: VerifyPolicy,
    node: &str,
    read_nonce: &str,
    epoch: Option<u64>,
) -> Result<ReadAnswer, ReplicaError> {
    let (envelope, kept) = split_frame(bytes)?;
    ring.verify(&envelope, now_ms, policy, Some(node), None)?;
    let answer: ReplicaAnswer = payload(&envelope)?;
    node_agrees(&answer.node, &envelope)?;
    if answer.read_nonce != read_nonce {
        return Err(ReplicaError::Payload(format!(
            "answer to read {:?}, expected {read_nonce:?}",
            answer.read_nonce
        )));
    }
    check_epoch("promised", answer.promised)?;
    check_epoch("refused", answer.refused)?;
    match (epoch, answer.promised, answer.refused) {
        (_, None, Some(highest)) if epoch.is_some_and(|epoch| highest >= epoch) => {
            if answer.held.is_some() || !kept.is_empty() {
                return Err(ReplicaError::Frame(
                    "a refused read's answer carries a copy".into(),
                ));
            }
            return Ok(ReadAnswer::Refused { highest });
        }
        (Some(epoch), Some(promised), None) if promised == epoch => {}
        (None, None, None) => {}
        (epoch, promised, refused) => {
            return Err(ReplicaError::Payload(format!(
                "the answer to a read of epoch {epoch:?} promises {promised:?}, refuses {refused:?}"
            )));
        }
    }
    match answer.held {
        None if kept.is_empty() => Ok(ReadAnswer::Copy(None)),
        None => Err(ReplicaError::Frame(
            "answer holds nothing but carries bytes".into(),
        )),
        Some(held) => {
            let (header, snapshot) = open_kept(ring, kept, node)?;
            if header != held {
                return Err(ReplicaError::Payload(
                    "the answer's header differs from the kept push".into(),
                ));
            }
            Ok(ReadAnswer::Copy(Some(ReadCopy {
                header,
                snapshot: snapshot.to_vec(),
            })))
        }
    }
}

/// What an agent does with a verified push, given what it holds and promised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushDecision {
    /// Newer than what it holds (or it holds nothing): keep it.
    Keep,
    /// The very copy it holds (same generation and digest): nothing to do, accepted.
    Same,
    /// Older than what it holds, or the same generation with other bytes: refused.
    Refuse {
        /// What it holds.
        held: Generation,
    },
    /// Of an epoch below the one it promised to a takeover's read: refused.
    Promised {
        /// The epoch promised.
        epoch: u64,
    },
}

/// Decides a push: a push of an epoch below `promised` is refused; otherwise only a higher
/// generation replaces the copy held.
pub fn decide_push(
    held: Option<&ReplicaHeader>,
    promised: u64,
    incoming: &ReplicaHeader,
) -> PushDecision {
    if incoming.generation.epoch < promised {
        return PushDecision::Promised { epoch: promised };
    }
    match held {
        None => PushDecision::Keep,
        Some(held) if incoming.generation > held.generation => PushDecision::Keep,
        Some(held) if incoming.generation == held.generation && incoming.sha256 == held.sha256 => {
            PushDecision::Same
        }
        Some(held) => PushDecision::Refuse {
            held: held.generation,
        },
    }
}

/// What an agent does with a verified read, given what it holds and promised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadDecision {
    /// A read without an epoch: answered with the copy, promising nothing.
    Answer,
    /// Promise the read's epoch (persisted before the answer) and answer with the copy.
    Promise(u64),
    /// The read's epoch is not above what it promised or holds: refused, naming the highest.
    Refuse {
        /// The highest epoch it promised or holds.
        highest: u64,
    },
}

/// Decides a read naming `epoch`: promised when it is above every epoch promised or held (so at
/// most one takeover gets a node's promise of a given epoch).
pub fn decide_read(
    held: Option<&ReplicaHeader>,
    promised: u64,
    epoch: Option<u64>,
) -> ReadDecision {
    let Some(epoch) = epoch else {
        return ReadDecision::Answer;
    };
    let highest = promised.max(held.map_or(0, |held| held.generation.epoch));
    if epoch > highest {
        ReadDecision::Promise(epoch)
    } else {
        ReadDecision::Refuse { highest }
    }
}

/// The lease of a confirmation: a push that a majority of the master candidates kept lets its
/// coordinator start writes (Ganeti jobs, agent requests) for a while after the push was sent,
/// and a coordinator taking over waits that long (and the longest a started write may take)
/// after its read's promises before its first push, so that the old master's last write is
/// over before the new master acts. Every coordinator of a cluster must use the same lease.
///
/// Counted on each coordinator's monotonic clock. The holder starts writes within
/// [`Lease::validity`] (the lease less a tenth), the taker waits [`Lease::takeover_wait`] (the
/// lease and `call_bound`, and a tenth more): correct while neither clock runs more than 10 %
/// faster than the other (NTP slews a clock by at most 0.05 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// How long a confirmation stays valid, from when its push was sent.
    pub duration: std::time::Duration,
    /// The longest a write started within the lease may take before it is abandoned (the RAPI
    /// request timeout, the agents' request timeout).
    pub call_bound: std::time::Duration,
}

impl Lease {
    /// How long after its push was sent a confirmation admits the start of a write.
    pub fn validity(&self) -> std::time::Duration {
        self.duration.saturating_sub(self.duration / 10)
    }

    /// Whether a write may start `elapsed` after its confirmation's push was sent.
    pub fn admits(&self, elapsed: std::time::Duration) -> bool {
        elapsed < self.validity()
    }

    /// How long a takeover waits, from the end of its read (after every promise it counts), before
    /// it pushes its epoch and acts: any confirmation of the old master was pushed before one of
    /// those promises, so its writes started within [`Lease::validity`] of that and are over
    /// `call_bound` later.
    pub fn takeover_wait(&self) -> std::time::Duration {
        let longest = self.duration.saturating_add(self.call_bound);
        longest.saturating_add(longest / 10)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

    use super::*;
    use crate::sign::HmacKey;

    fn key() -> HmacKey {
        HmacKey::new(b"replica test key".to_vec())
    }

    fn generation(epoch: u64, number: u64) -> Generation {
        Generation { epoch, number }
    }

    fn header(node: &str, generation: Generation, snapshot: &[u8]) -> ReplicaHeader {
        ReplicaHeader::describe(node, "node1", generation, snapshot, 1_000)
    }

    #[test]
    fn a_confirmation_admits_writes_within_its_lease_and_a_takeover_outwaits_it() {
        use std::time::Duration;
        let lease = Lease {
            duration: Duration::from_secs(10),
            call_bound: Duration::from_secs(30),
        };
        assert_eq!(lease.validity(), Duration::from_secs(9));
        assert!(lease.admits(Duration::ZERO));
        assert!(lease.admits(Duration::from_millis(8_999)));
        assert!(!lease.admits(Duration::from_secs(9)));
        assert!(!lease.admits(Duration::from_secs(60)));
        assert_eq!(lease.takeover_wait(), Duration::from_secs(44));
        // The old master's last write starts within validity of its push (sent before the
        // takeover's read ended) and ends call_bound later, both on its clock; the wait is on
        // the taker's. The write is over first whatever the clocks' rates (ticks per second),
        // while neither runs more than 10 % faster than the other.
        for holder_rate in [0.9, 0.95, 1.0, 1.05, 1.1] {
            for taker_rate in [0.9, 0.95, 1.0, 1.05, 1.1] {
                if taker_rate / holder_rate > 1.1 + 1e-9 {
                    continue;
                }
                let last_write_over =
                    (lease.validity() + lease.call_bound).as_secs_f64() / holder_rate;
                let wait_over = lease.takeover_wait().as_secs_f64() / taker_rate;
                assert!(
                    last_write_over <= wait_over,
                    "{holder_rate} {taker_rate}: {last_write_over} > {wait_over}"
                );
            }
        }
        // No lease: nothing admitted, and the takeover waits only for a started call.
        let none = Lease {
            duration: Duration::ZERO,
            call_bound: Duration::from_secs(1),
        };
        assert!(!none.admits(Duration::ZERO));
        assert_eq!(none.takeover_wait(), Duration::from_millis(1_100));
    }

    #[test]
    fn generations_order_by_epoch_then_number() {
        assert!(generation(2, 0) > generation(1, 99));
        assert!(generation(1, 2) > generation(1, 1));
        assert_eq!(generation(3, 4).to_string(), "3.4");
    }

    #[test]
    fn push_round_trips_and_checks_the_digest() {
        let signer = Signer::new(key(), "node2");
        let ring = KeyRing::single(key());
        let snapshot = b"SQLite format 3\0 pretend";
        let head = header("node2", generation(1, 5), snapshot);
        let bytes = sign_push(&signer, &head, snapshot, 1, 10_000, 60_000).unwrap();
        let (opened, body) =
            open_push(&ring, &bytes, 10_500, VerifyPolicy::default(), "node2").unwrap();
        assert_eq!(opened, head);
        assert_eq!(body, snapshot);
        // For another node, tampered bytes, another key, expired: refused.
        assert!(open_push(&ring, &bytes, 10_500, VerifyPolicy::default(), "node3").is_err());
        let mut tampered = bytes.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(matches!(
            open_push(&ring, &tampered, 10_500, VerifyPolicy::default(), "node2"),
            Err(ReplicaError::Digest(_))
        ));
        let other = KeyRing::single(HmacKey::new(b"other".to_vec()));
        assert!(open_push(&other, &bytes, 10_500, VerifyPolicy::default(), "node2").is_err());
        assert!(open_push(&ring, &bytes, 200_000, VerifyPolicy::default(), "node2").is_err());
        // A kept copy still opens long after its push expired.
        assert_eq!(open_kept(&ring, &bytes, "node2").unwrap().0, head);
    }

    #[test]
    fn a_header_for_other_bytes_cannot_be_signed() {
        let signer = Signer::new(key(), "node2");
        let head = header("node2", generation(1, 1), b"one");
        assert!(sign_push(&signer, &head, b"two", 1, 0, 1).is_err());
        let wrong_node = header("node3", generation(1, 1), b"one");
        assert!(sign_push(&signer, &wrong_node, b"one", 1, 0, 1).is_err());
    }

    fn open(bytes: &[u8], nonce: &str, epoch: Option<u64>) -> Result<ReadAnswer, ReplicaError> {
        let ring = KeyRing::single(key());
        open_answer(
            &ring,
            bytes,
            5_003,
            VerifyPolicy::default(),
            "node2",
            nonce,
            epoch,
        )
    }

    #[test]
    fn read_and_answer_round_trip() {
        let ring = KeyRing::single(key());
        let coordinator = Signer::new(key(), "node2");
        let read = ReplicaRead {
            node: "node2".into(),
            read_nonce: "n-1".into(),
            epoch: Some(3),
        };
        let body = sign_read(&coordinator, &read, 1, 5_000, 30_000).unwrap();
        assert_eq!(
            open_read(&ring, &body, 5_001, VerifyPolicy::default(), "node2").unwrap(),
            read
        );
        let agent = Signer::new(key(), "node2");
        let promise = ReadDecision::Promise(3);
        // Holding nothing.
        let none = sign_answer(&agent, "n-1", promise, None, 5_002, 30_000).unwrap();
        assert_eq!(open(&none, "n-1", Some(3)).unwrap(), ReadAnswer::Copy(None));
        // A stale answer (another nonce), or one promising another epoch, is refused.
        assert!(open(&none, "n-2", Some(3)).is_err());
        assert!(open(&none, "n-1", Some(4)).is_err());
        assert!(open(&none, "n-1", None).is_err());
        // Holding a copy.
        let snapshot = b"state";
        let head = header("node2", generation(2, 7), snapshot);
        let kept = sign_push(&coordinator, &head, snapshot, 2, 4_000, 60_000).unwrap();
        let answer =
            sign_answer(&agent, "n-1", promise, Some((&head, &kept)), 5_002, 30_000).unwrap();
        let ReadAnswer::Copy(Some(copy)) = open(&answer, "n-1", Some(3)).unwrap() else {
            panic!("a copy");
        };
        assert_eq!(copy.header, head);
        assert_eq!(copy.snapshot, snapshot);
        // An answer naming another generation than the kept push is refused.
        let lie = header("node2", generation(3, 0), snapshot);
        let forged =
            sign_answer(&agent, "n-1", promise, Some((&lie, &kept)), 5_002, 30_000).unwrap();
        assert!(open(&forged, "n-1", Some(3)).is_err());
        // A refusal names the highest epoch and carries no copy.
        let refused = ReadDecision::Refuse { highest: 5 };
        let answer =
            sign_answer(&agent, "n-1", refused, Some((&head, &kept)), 5_002, 30_000).unwrap();
        assert_eq!(
            open(&answer, "n-1", Some(3)).unwrap(),
            ReadAnswer::Refused { highest: 5 }
        );
        // A refusal naming an epoch below the read's is no refusal of it.
        assert!(open(&answer, "n-1", Some(6)).is_err());
        assert!(open(&answer, "n-1", None).is_err());
    }

    #[test]
    fn a_read_without_an_epoch_is_answered_without_a_promise() {
        // The wire of a coordinator from before the promise: `{"node", "read_nonce"}`.
        let old: ReplicaRead =
            serde_json::from_str(r#"{"node":"node2","read_nonce":"n-1"}"#).unwrap();
        assert_eq!(old.epoch, None);
        assert!(old.validate().is_ok());
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"node":"node2","read_nonce":"n-1"}"#
        );
        let agent = Signer::new(key(), "node2");
        let answer = sign_answer(&agent, "n-1", ReadDecision::Answer, None, 5_002, 30_000).unwrap();
        // Read as a coordinator from before the promise reads it: no field it does not know.
        let (envelope, _) = split_frame(&answer).unwrap();
        assert_eq!(
            envelope.payload,
            serde_json::json!({"node": "node2", "read_nonce": "n-1", "held": null})
        );
        assert_eq!(open(&answer, "n-1", None).unwrap(), ReadAnswer::Copy(None));
        // An answer without a promise is no answer to a read naming an epoch.
        assert!(open(&answer, "n-1", Some(1)).is_err());
        // A read's epoch is at least 1 and at most 2^53 - 1.
        for epoch in [0, 1 << 53] {
            let read = ReplicaRead {
                epoch: Some(epoch),
                ..old.clone()
            };
            assert!(read.validate().is_err(), "{epoch}");
        }
    }

    #[test]
    fn a_push_refusal_reads_with_and_without_a_promise() {
        let old: PushRefused = serde_json::from_str(r#"{"held":{"epoch":2,"number":5}}"#).unwrap();
        assert_eq!(old.promised, None);
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"held":{"epoch":2,"number":5}}"#
        );
        let promised = PushRefused {
            held: generation(2, 5),
            promised: Some(3),
        };
        assert_eq!(
            serde_json::to_string(&promised).unwrap(),
            r#"{"held":{"epoch":2,"number":5},"promised":3}"#
        );
    }

    #[test]
    fn read_decisions() {
        let held = header("n", generation(2, 5), b"a");
        let table = [
            (None, 0, None, ReadDecision::Answer),
            (Some(&held), 7, None, ReadDecision::Answer),
            (None, 0, Some(1), ReadDecision::Promise(1)),
            (Some(&held), 0, Some(3), ReadDecision::Promise(3)),
            (Some(&held), 0, Some(2), ReadDecision::Refuse { highest: 2 }),
            (Some(&held), 4, Some(4), ReadDecision::Refuse { highest: 4 }),
            (Some(&held), 4, Some(3), ReadDecision::Refuse { highest: 4 }),
            (Some(&held), 4, Some(5), ReadDecision::Promise(5)),
        ];
        for (held, promised, epoch, expected) in table {
            assert_eq!(
                decide_read(held, promised, epoch),
                expected,
                "{held:?} {promised} {epoch:?}"
            );
        }
    }

    #[test]
    fn integers_beyond_2_pow_53_are_refused() {
        let signer = Signer::new(key(), "node2");
        let ring = KeyRing::single(key());
        let snapshot = b"state";
        for (epoch, number, created_ms) in [
            (1 << 53, 0, 1_000),
            (1, 1 << 53, 1_000),
            (1, 0, 1 << 53),
            (u64::MAX, 0, 1_000),
        ] {
            let mut head = header("node2", generation(epoch, number), snapshot);
            head.created_ms = created_ms;
            // Signed as another implementation might, bypassing `sign_push`'s own check.
            let envelope = signed(&signer, &head, 1, 10_000, 60_000)
                .and_then(|envelope| frame(&envelope, snapshot));
            let Ok(bytes) = envelope else {
                continue; // no canonical form: refused at signing already
            };
            let error = open_push(&ring, &bytes, 10_500, VerifyPolicy::default(), "node2")
                .expect_err("an integer beyond 2^53 - 1 is refused");
            assert!(
                error.to_string().contains("2^53") || matches!(error, ReplicaError::Verify(_)),
                "{error}"
            );
            assert!(sign_push(&signer, &head, snapshot, 1, 10_000, 60_000).is_err());
        }
        let fine = header(
            "node2",
            generation(MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
            snapshot,
        );
        let bytes = sign_push(&signer, &fine, snapshot, 1, 10_000, 60_000).unwrap();
        assert!(open_push(&ring, &bytes, 10_500, VerifyPolicy::default(), "node2").is_ok());
    }

    #[test]
    fn a_push_line_opens_alone_and_names_its_frame_length() {
        let signer = Signer::new(key(), "node2");
        let ring = KeyRing::single(key());
        let snapshot = b"SQLite format 3\0 pretend";
        let head = header("node2", generation(1, 5), snapshot);
        let bytes = sign_push(&signer, &head, snapshot, 1, 10_000, 60_000).unwrap();
        let end = bytes.iter().position(|byte| *byte == b'\n').unwrap();
        let opened = open_push_line(
            &ring,
            &bytes[..end],
            10_500,
            VerifyPolicy::default(),
            "node2",
        )
        .unwrap();
        assert_eq!(opened, head);
        assert_eq!(push_frame_len(end, &opened), bytes.len() as u64);
        assert!(open_push_line(&ring, b"{}", 10_500, VerifyPolicy::default(), "node2").is_err());
        let long = vec![b' '; MAX_ENVELOPE_LINE_BYTES + 1];
        assert!(matches!(
            open_push_line(&ring, &long, 10_500, VerifyPolicy::default(), "node2"),
            Err(ReplicaError::Frame(_))
        ));
    }

    #[test]
    fn frames_without_an_envelope_line_are_refused() {
        assert!(matches!(split_frame(b"{}"), Err(ReplicaError::Frame(_))));
        let long = vec![b' '; MAX_ENVELOPE_LINE_BYTES + 10];
        assert!(matches!(split_frame(&long), Err(ReplicaError::Frame(_))));
        assert!(split_frame(b"not json\nbytes").is_err());
    }

    #[test]
    fn push_decisions() {
        let held = header("n", generation(2, 5), b"a");
        let table = [
            (None, generation(1, 0), b"a".as_slice(), PushDecision::Keep),
            (Some(&held), generation(2, 6), b"b", PushDecision::Keep),
            (Some(&held), generation(3, 0), b"b", PushDecision::Keep),
            (Some(&held), generation(2, 5), b"a", PushDecision::Same),
            (
                Some(&held),
                generation(2, 5),
                b"b",
                PushDecision::Refuse {
                    held: generation(2, 5),
                },
            ),
            (
                Some(&held),
                generation(2, 4),
                b"a",
                PushDecision::Refuse {
                    held: generation(2, 5),
                },
            ),
            (
                Some(&held),
                generation(1, 99),
                b"a",
                PushDecision::Refuse {
                    held: generation(2, 5),
                },
            ),
        ];
        for (held, incoming, bytes, expected) in table {
            assert_eq!(
                decide_push(held, 0, &header("n", incoming, bytes)),
                expected,
                "{held:?} {incoming}"
            );
            // A promise of a later epoch refuses it, whatever is held.
            let promised = incoming.epoch + 1;
            assert_eq!(
                decide_push(held, promised, &header("n", incoming, bytes)),
                PushDecision::Promised { epoch: promised },
                "{held:?} {incoming}"
            );
        }
        // A promise of the push's own epoch (or a lower one) does not refuse it.
        let held = header("n", generation(2, 5), b"a");
        assert_eq!(
            decide_push(Some(&held), 3, &header("n", generation(3, 0), b"b")),
            PushDecision::Keep
        );
        assert_eq!(
            decide_push(None, 2, &header("n", generation(3, 0), b"b")),
            PushDecision::Keep
        );
    }
}
