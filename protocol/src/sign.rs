//! The signed envelope: HMAC-SHA256, keyed by the cluster HMAC key, over canonical JSON.
//!
//! The MAC covers the RFC 8785 canonical bytes of
//! `{payload, node, key_id, sequence, issued_at_ms, expires_at_ms}`, so that neither the payload nor the
//! node it speaks for, nor its freshness, can be changed without detection. Times are Unix
//! milliseconds (`_ms`). Several keys may be trusted at once (by key id) while a cluster rotates
//! its key. `docs/PROTOCOL.md` describes the format; `protocol/tests/vectors/` pins it.

use std::collections::BTreeMap;
use std::path::Path;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::canonical::{CanonicalError, canonical_bytes};

type HmacSha256 = Hmac<Sha256>;

/// Ganeti's cluster HMAC key, copied to every node.
pub const DEFAULT_HMAC_KEY_PATH: &str = "/var/lib/ganeti/hmac.key";
/// The algorithm name carried in envelopes.
pub const ALGORITHM: &str = "hmac-sha256";

/// A secret key and its id. The id is public; the secret never appears in `Debug` output.
#[derive(Clone)]
pub struct HmacKey {
    id: String,
    secret: Vec<u8>,
}

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HmacKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl HmacKey {
    /// A key whose id is derived from the secret (the first 16 hex digits of its SHA-256), so that
    /// every holder of the same key file agrees on the id without configuration.
    pub fn new(secret: Vec<u8>) -> Self {
        let digest = hex::encode(Sha256::digest(&secret));
        Self {
            id: digest[..16].to_owned(),
            secret,
        }
    }

    /// Reads a key file verbatim. As in Ganeti, the trailing newline is part of the key.
    pub fn from_file(path: &Path) -> Result<Self, SignError> {
        let secret = std::fs::read(path).map_err(|error| SignError::KeyFile {
            path: path.display().to_string(),
            reason: error.to_string(),
        })?;
        if secret.is_empty() {
            return Err(SignError::KeyFile {
                path: path.display().to_string(),
                reason: "the key file is empty".into(),
            });
        }
        Ok(Self::new(secret))
    }

    /// The key id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn mac(&self, message: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail.
        let mut mac = match HmacSha256::new_from_slice(&self.secret) {
            Ok(mac) => mac,
            Err(_) => unreachable_hmac(),
        };
        mac.update(message);
        mac
    }
}

#[cold]
fn unreachable_hmac() -> ! {
    unreachable!("HMAC-SHA256 accepts keys of every length")
}

/// Why signing failed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The key file could not be read.
    #[error("cannot read HMAC key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The document has no canonical form.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// Why an envelope was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The envelope is not well formed.
    #[error("malformed signed envelope: {0}")]
    Malformed(String),
    /// The key id is not in the key ring.
    #[error("unknown key id {0:?}")]
    UnknownKey(String),
    /// The MAC does not match: wrong key or tampered content.
    #[error("signature mismatch (wrong key or tampered content)")]
    BadSignature,
    /// The envelope has expired.
    #[error("expired at {expires_at_ms} ms, now {now} ms (allowed skew {skew} ms)")]
    Expired {
        /// Expiry.
        expires_at_ms: u64,
        /// Verifier's clock.
        now: u64,
        /// Allowed clock skew.
        skew: u64,
    },
    /// Issued in the future beyond the allowed clock skew.
    #[error("issued at {issued_at_ms} ms, {ahead} ms ahead of this clock (allowed skew {skew} ms)")]
    ClockSkew {
        /// Issue time.
        issued_at_ms: u64,
        /// How far ahead.
        ahead: u64,
        /// Allowed clock skew.
        skew: u64,
    },
    /// The sequence number went backwards.
    #[error("sequence number {got} is below the last accepted {last} (replay)")]
    Replay {
        /// Received sequence.
        got: u64,
        /// Last accepted sequence.
        last: u64,
    },
    /// The envelope speaks for another node.
    #[error("envelope is for node {got:?}, expected {expected:?}")]
    WrongNode {
        /// Node in the envelope.
        got: String,
        /// Node expected.
        expected: String,
    },
}

/// A payload signed for one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedEnvelope {
    /// The signed document.
    pub payload: Value,
    /// The node this document speaks for.
    pub node: String,
    /// Which key signed it.
    pub key_id: String,
    /// Strictly increasing per signer, across restarts.
    pub sequence: u64,
    /// When it was signed, Unix milliseconds.
    pub issued_at_ms: u64,
    /// When it stops being valid, Unix milliseconds.
    pub expires_at_ms: u64,
    /// Always [`ALGORITHM`].
    pub algorithm: String,
    /// Lower-case hex HMAC-SHA256.
    pub signature: String,
}

fn signed_bytes(
    payload: &Value,
    node: &str,
    key_id: &str,
    sequence: u64,
    issued_at_ms: u64,
    expires_at_ms: u64,
) -> Result<Vec<u8>, CanonicalError> {
    canonical_bytes(&json!({
        "payload": payload,
        "node": node,
        "key_id": key_id,
        "sequence": sequence,
        "issued_at_ms": issued_at_ms,
        "expires_at_ms": expires_at_ms,
    }))
}

impl SignedEnvelope {
    /// Reads an envelope from JSON text, strictly: a repeated key anywhere is malformed.
    pub fn from_json(text: &[u8]) -> Result<Self, VerifyError> {
        crate::json::decode(text).map_err(|error| VerifyError::Malformed(error.to_string()))
    }

    /// The bytes the MAC covers: the RFC 8785 canonical form of
    /// `{payload, node, key_id, sequence, issued_at_ms, expires_at_ms}`.
    pub fn signed_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        signed_bytes(
            &self.payload,
            &self.node,
            &self.key_id,
            self.sequence,
            self.issued_at_ms,
            self.expires_at_ms,
        )
    }
}

/// Signs payloads for one node with one key.
#[derive(Debug, Clone)]
pub struct Signer {
    key: HmacKey,
    node: String,
}

impl Signer {
    /// A signer for `node`.
    pub fn new(key: HmacKey, node: impl Into<String>) -> Self {
        Self {
            key,
            node: node.into(),
        }
    }

    /// The node this signer speaks for.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Signs `payload` with the given sequence number, valid from `issued_at_ms` for `ttl_ms`.
    pub fn sign(
        &self,
        payload: Value,
        sequence: u64,
        issued_at_ms: u64,
        ttl_ms: u64,
    ) -> Result<SignedEnvelope, SignError> {
        let expires_at_ms = issued_at_ms.saturating_add(ttl_ms);
        let bytes = signed_bytes(
            &payload,
            &self.node,
            self.key.id(),
            sequence,
            issued_at_ms,
            expires_at_ms,
        )?;
        let signature = hex::encode(self.key.mac(&bytes).finalize().into_bytes());
        Ok(SignedEnvelope {
            payload,
            node: self.node.clone(),
            key_id: self.key.id().to_owned(),
            sequence,
            issued_at_ms,
            expires_at_ms,
            algorithm: ALGORITHM.to_owned(),
            signature,
        })
    }
}

/// The default tolerated clock difference between signer and verifier, in milliseconds.
pub const DEFAULT_MAX_CLOCK_SKEW_MS: u64 = 2_000;
/// The largest clock difference a configuration may tolerate, in milliseconds.
///
/// The skew tolerance is for clocks, not for a report's lifetime: past its expiry plus this much
/// an envelope is refused, whatever the configuration says.
pub const MAX_CLOCK_SKEW_LIMIT_MS: u64 = 30_000;

/// Freshness rules applied on verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyPolicy {
    /// Tolerated clock difference between signer and verifier, in milliseconds (at most
    /// [`MAX_CLOCK_SKEW_LIMIT_MS`]; larger values are clamped).
    pub max_clock_skew_ms: u64,
}

impl VerifyPolicy {
    /// The skew actually applied: the configured one, at most [`MAX_CLOCK_SKEW_LIMIT_MS`].
    pub const fn skew_ms(self) -> u64 {
        if self.max_clock_skew_ms > MAX_CLOCK_SKEW_LIMIT_MS {
            MAX_CLOCK_SKEW_LIMIT_MS
        } else {
            self.max_clock_skew_ms
        }
    }
}

impl Default for VerifyPolicy {
    fn default() -> Self {
        // Cluster nodes keep their clocks in sync (Ganeti's cluster verify warns about skew); a
        // report lives a few diagnose intervals, so tolerating minutes would keep dead agents
        // looking alive.
        Self {
            max_clock_skew_ms: DEFAULT_MAX_CLOCK_SKEW_MS,
        }
    }
}

/// The keys a verifier trusts, by id.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    keys: BTreeMap<String, HmacKey>,
}

impl KeyRing {
    /// A ring with one key.
    pub fn single(key: HmacKey) -> Self {
        let mut ring = Self::default();
        ring.insert(key);
        ring
    }

    /// Adds (or replaces) a key.
    pub fn insert(&mut self, key: HmacKey) {
        self.keys.insert(key.id().to_owned(), key);
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Ids of the trusted keys.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Verifies `envelope` at time `now_ms`.
    ///
    /// `expected_node` rejects an envelope for another node; `min_sequence` rejects a sequence
    /// number below the last one accepted from the same signer (a replay). An equal sequence
    /// number is the same document read again, which is not a replay.
    pub fn verify(
        &self,
        envelope: &SignedEnvelope,
        now_ms: u64,
        policy: VerifyPolicy,
        expected_node: Option<&str>,
        min_sequence: Option<u64>,
    ) -> Result<(), VerifyError> {
        self.authenticate(envelope, expected_node)?;
        check_current(
            Times::of(envelope),
            envelope.sequence,
            now_ms,
            policy,
            min_sequence,
        )
    }

    /// The checks of [`KeyRing::verify`] that do not depend on the clock or on the last
    /// accepted sequence: algorithm, key, MAC and node. An envelope authenticated once stays
    /// authentic under the same ring; [`check_current`] judges its times and sequence whenever
    /// it is read again.
    pub fn authenticate(
        &self,
        envelope: &SignedEnvelope,
        expected_node: Option<&str>,
    ) -> Result<(), VerifyError> {
        if envelope.algorithm != ALGORITHM {
            return Err(VerifyError::Malformed(format!(
                "algorithm must be {ALGORITHM:?}, got {:?}",
                envelope.algorithm
            )));
        }
        let key = self
            .keys
            .get(&envelope.key_id)
            .ok_or_else(|| VerifyError::UnknownKey(envelope.key_id.clone()))?;
        let tag = hex::decode(&envelope.signature)
            .map_err(|error| VerifyError::Malformed(format!("signature is not hex: {error}")))?;
        let bytes = envelope
            .signed_bytes()
            .map_err(|error| VerifyError::Malformed(error.to_string()))?;
        // verify_slice compares in constant time.
        key.mac(&bytes)
            .verify_slice(&tag)
            .map_err(|_| VerifyError::BadSignature)?;
        // Only authenticated fields are interpreted from here on.
        if let Some(expected) = expected_node
            && envelope.node != expected
        {
            return Err(VerifyError::WrongNode {
                got: envelope.node.clone(),
                expected: expected.to_owned(),
            });
        }
        Ok(())
    }

    /// Parses (strictly: a repeated key anywhere is malformed) and verifies an envelope from
    /// JSON text.
    pub fn verify_json(
        &self,
        text: &[u8],
        now_ms: u64,
        policy: VerifyPolicy,
        expected_node: Option<&str>,
        min_sequence: Option<u64>,
    ) -> Result<SignedEnvelope, VerifyError> {
        let envelope = SignedEnvelope::from_json(text)?;
        self.verify(&envelope, now_ms, policy, expected_node, min_sequence)?;
        Ok(envelope)
    }
}

/// An authenticated envelope's times, for [`check_current`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Times {
    /// When it was signed, Unix ms.
    pub issued_at_ms: u64,
    /// When it stops being valid, Unix ms.
    pub expires_at_ms: u64,
}

impl Times {
    /// The times of `envelope`.
    pub fn of(envelope: &SignedEnvelope) -> Self {
        Self {
            issued_at_ms: envelope.issued_at_ms,
            expires_at_ms: envelope.expires_at_ms,
        }
    }
}

/// The checks of [`KeyRing::verify`] after [`KeyRing::authenticate`]: times in order, not
/// issued ahead of `now_ms` beyond the allowed skew, not expired, `sequence` not below
/// `min_sequence` (in this order). Pure.
pub fn check_current(
    times: Times,
    sequence: u64,
    now_ms: u64,
    policy: VerifyPolicy,
    min_sequence: Option<u64>,
) -> Result<(), VerifyError> {
    let skew = policy.skew_ms();
    if times.expires_at_ms < times.issued_at_ms {
        return Err(VerifyError::Malformed(
            "expires_at_ms is before issued_at_ms".into(),
        ));
    }
    if times.issued_at_ms > now_ms.saturating_add(skew) {
        return Err(VerifyError::ClockSkew {
            issued_at_ms: times.issued_at_ms,
            ahead: times.issued_at_ms - now_ms,
            skew,
        });
    }
    if times.expires_at_ms.saturating_add(skew) < now_ms {
        return Err(VerifyError::Expired {
            expires_at_ms: times.expires_at_ms,
            now: now_ms,
            skew,
        });
    }
    if let Some(last) = min_sequence
        && sequence < last
    {
        return Err(VerifyError::Replay {
            got: sequence,
            last,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: u64 = 1_800_000_000_000;

    fn key(secret: &str) -> HmacKey {
        HmacKey::new(secret.as_bytes().to_vec())
    }

    fn signed() -> (KeyRing, SignedEnvelope) {
        let signer = Signer::new(key("0123456789abcdef0123456789abcdef01234567\n"), "node1");
        let envelope = signer
            .sign(
                json!({"status": "evacuate", "details": {"disk": "sda"}}),
                7,
                NOW,
                60_000,
            )
            .unwrap();
        (
            KeyRing::single(key("0123456789abcdef0123456789abcdef01234567\n")),
            envelope,
        )
    }

    #[test]
    fn valid_envelope_verifies_and_round_trips() {
        let (ring, envelope) = signed();
        ring.verify(
            &envelope,
            NOW + 1,
            VerifyPolicy::default(),
            Some("node1"),
            Some(7),
        )
        .unwrap();
        let text = serde_json::to_vec(&envelope).unwrap();
        let back = ring
            .verify_json(&text, NOW, VerifyPolicy::default(), None, None)
            .unwrap();
        assert_eq!(back, envelope);
    }

    #[test]
    fn rejects_wrong_key_and_tampering() {
        let (_, envelope) = signed();
        let mut other = KeyRing::single(key("another key"));
        assert!(matches!(
            other.verify(&envelope, NOW, VerifyPolicy::default(), None, None),
            Err(VerifyError::UnknownKey(_))
        ));
        // Same id, different secret: the MAC does not match.
        other = KeyRing::default();
        other.insert(HmacKey {
            id: envelope.key_id.clone(),
            secret: b"wrong".to_vec(),
        });
        assert_eq!(
            other.verify(&envelope, NOW, VerifyPolicy::default(), None, None),
            Err(VerifyError::BadSignature)
        );
        let (ring, envelope) = signed();
        type Tampering = Box<dyn Fn(&mut SignedEnvelope)>;
        let tamperings: Vec<Tampering> = vec![
            Box::new(|e| e.payload["status"] = json!("Ok")),
            Box::new(|e| e.node = "node2".into()),
            Box::new(|e| e.sequence += 1),
            Box::new(|e| e.issued_at_ms += 1),
            Box::new(|e| e.expires_at_ms += 1),
            Box::new(|e| e.signature.replace_range(0..2, "00")),
        ];
        for tamper in tamperings {
            let mut copy = envelope.clone();
            tamper(&mut copy);
            if copy == envelope {
                continue;
            }
            assert_eq!(
                ring.verify(&copy, NOW, VerifyPolicy::default(), None, None),
                Err(VerifyError::BadSignature)
            );
        }
    }

    #[test]
    fn rejects_expiry_skew_replay_and_other_node() {
        let (ring, envelope) = signed();
        let policy = VerifyPolicy {
            max_clock_skew_ms: 1_000,
        };
        assert!(matches!(
            ring.verify(&envelope, NOW + 61_001 + 1, policy, None, None),
            Err(VerifyError::Expired { .. })
        ));
        ring.verify(&envelope, NOW + 61_000, policy, None, None)
            .unwrap();
        assert!(matches!(
            ring.verify(&envelope, NOW - 1_001, policy, None, None),
            Err(VerifyError::ClockSkew { .. })
        ));
        assert_eq!(
            ring.verify(&envelope, NOW, policy, None, Some(8)),
            Err(VerifyError::Replay { got: 7, last: 8 })
        );
        assert!(matches!(
            ring.verify(&envelope, NOW, policy, Some("node2"), None),
            Err(VerifyError::WrongNode { .. })
        ));
    }

    #[test]
    fn skew_is_clamped_and_defaults_to_seconds() {
        assert!(VerifyPolicy::default().skew_ms() <= 5_000);
        let (ring, envelope) = signed();
        let huge = VerifyPolicy {
            max_clock_skew_ms: 3_600_000,
        };
        assert_eq!(huge.skew_ms(), MAX_CLOCK_SKEW_LIMIT_MS);
        // Even a configured hour of skew does not extend a report's life past the limit.
        assert!(matches!(
            ring.verify(
                &envelope,
                NOW + 60_000 + MAX_CLOCK_SKEW_LIMIT_MS + 1,
                huge,
                None,
                None
            ),
            Err(VerifyError::Expired { .. })
        ));
    }

    #[test]
    fn repeated_keys_make_an_envelope_malformed() {
        let (ring, envelope) = signed();
        let text = String::from_utf8(serde_json::to_vec(&envelope).unwrap()).unwrap();
        let doubled = text.replacen("\"node\":", "\"node\":\"x\",\"node\":", 1);
        assert!(matches!(
            ring.verify_json(doubled.as_bytes(), NOW, VerifyPolicy::default(), None, None),
            Err(VerifyError::Malformed(message)) if message.contains("repeated key")
        ));
    }

    #[test]
    fn malformed_input_is_an_error() {
        let ring = KeyRing::single(key("k"));
        for text in [&b"{}"[..], b"not json", b"[]"] {
            assert!(matches!(
                ring.verify_json(text, NOW, VerifyPolicy::default(), None, None),
                Err(VerifyError::Malformed(_))
            ));
        }
        let (ring, mut envelope) = signed();
        envelope.signature = "zz".into();
        assert!(matches!(
            ring.verify(&envelope, NOW, VerifyPolicy::default(), None, None),
            Err(VerifyError::Malformed(_))
        ));
    }

    #[test]
    fn key_id_is_stable_and_debug_hides_secret() {
        let a = key("secret\n");
        assert_eq!(a.id(), key("secret\n").id());
        assert_ne!(a.id(), key("secret").id());
        assert!(!format!("{a:?}").contains("secret"));
    }

    proptest! {
        #[test]
        fn verify_never_panics(text in prop::collection::vec(any::<u8>(), 0..512)) {
            let ring = KeyRing::single(key("k"));
            prop_assert!(ring.verify_json(&text, NOW, VerifyPolicy::default(), None, None).is_err());
        }
    }
}
