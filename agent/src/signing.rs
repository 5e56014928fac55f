//! Signs every published diagnose verdict with the cluster HMAC key, once per run (never per
//! request), and persists the verdict and the sequence number: [`DiagnoseSigner::run`] is the
//! agent's signer task.
//!
//! Every signed report of the node (diagnose and storage) takes its number from one
//! [`Sequencer`]: one strictly increasing sequence per node and key, across report kinds and
//! restarts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nodecare_collectors::diagnose::DiagnoseRun;
use nodecare_protocol::diagnose::DiagnosePayload;
use nodecare_protocol::now_ms;
use nodecare_protocol::{SignedEnvelope, Signer};

use tokio::sync::watch;

use crate::boot::BootSource;
use crate::cache::{CachedReport, CachedSigned, ReportCache};
use crate::state::{StateDir, next_sequence};

/// Why a verdict could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// No key is loaded.
    #[error("no HMAC key: {0}")]
    NoKey(String),
    /// The sequence number cannot be persisted (signing without it could replay).
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    /// The payload has no canonical form.
    #[error("cannot sign: {0}")]
    Sign(String),
}

/// Signs `payload` with `signer` and the node's next `sequencer` number, at `now` (ms), the
/// envelope living `ttl`. Shared by the signers of every report kind.
pub(crate) fn sign_payload<P: serde::Serialize>(
    signer: &Signer,
    sequencer: &Sequencer,
    payload: &P,
    now: u64,
    ttl: Duration,
) -> Result<SignedEnvelope, SigningError> {
    let payload =
        serde_json::to_value(payload).map_err(|error| SigningError::Sign(error.to_string()))?;
    let sequence = sequencer.next(now)?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    signer
        .sign(payload, sequence, now, ttl_ms)
        .map_err(|error| SigningError::Sign(error.to_string()))
}

/// What the cache should serve for a signing result: the serialised envelope, or why there is
/// none.
pub(crate) fn cached_signed(signed: Result<SignedEnvelope, SigningError>) -> CachedSigned {
    let envelope = match signed {
        Ok(envelope) => envelope,
        Err(error) => return CachedSigned::Unavailable(error.to_string()),
    };
    match serde_json::to_vec(&envelope) {
        Ok(body) => CachedSigned::Envelope {
            report: CachedReport {
                body: Bytes::from(body),
                collected: Instant::now(),
            },
            sequence: envelope.sequence,
        },
        Err(error) => CachedSigned::Unavailable(error.to_string()),
    }
}

/// Logs a periodic signer's failure to sign when it starts or changes, and its recovery, not at
/// every interval.
#[derive(Debug)]
pub(crate) struct SignErrorLog {
    /// What is signed, for the log ("load report").
    what: &'static str,
    /// What is logged when signing works again.
    recovered: &'static str,
    last: Option<String>,
}

impl SignErrorLog {
    /// A log for signing `what`, logging `recovered` when signing works again.
    pub(crate) fn new(what: &'static str, recovered: &'static str) -> Self {
        Self {
            what,
            recovered,
            last: None,
        }
    }

    /// Notes what the cache is given.
    pub(crate) fn note(&mut self, signed: &CachedSigned) {
        let error = match signed {
            CachedSigned::Unavailable(error) => Some(error.clone()),
            CachedSigned::Envelope { .. } => None,
        };
        if error != self.last {
            match &error {
                Some(error) => tracing::error!(%error, "cannot sign the {}", self.what),
                None => tracing::info!("{}", self.recovered),
            }
            self.last = error;
        }
    }
}

/// What the signer did since the agent started (for `/metrics`).
#[derive(Debug, Default)]
pub struct SignCounters {
    /// Envelopes signed.
    pub signed: AtomicU64,
    /// Verdicts that could not be signed (no key, sequence not persisted, ...).
    pub failed: AtomicU64,
}

impl SignCounters {
    /// Envelopes signed so far.
    pub fn signed(&self) -> u64 {
        self.signed.load(Ordering::Relaxed)
    }

    /// Signing failures so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The node's one sequence counter, persisted before every number it hands out; shared by
/// the signers of every report kind.
#[derive(Debug, Clone)]
pub struct Sequencer {
    inner: Arc<Mutex<SequenceState>>,
}

#[derive(Debug)]
struct SequenceState {
    state: StateDir,
    last: u64,
}

impl Sequencer {
    /// The counter persisted in `state`.
    pub fn open(state: StateDir) -> Result<Self, crate::state::StateError> {
        let last = state.load_sequence()?;
        Ok(Self {
            inner: Arc::new(Mutex::new(SequenceState { state, last })),
        })
    }

    /// The next sequence number (above every number handed out before, and at least `now_ms`),
    /// persisted first: a number is never handed out twice, even across a crash.
    pub fn next(&self, now_ms: u64) -> Result<u64, crate::state::StateError> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let sequence = next_sequence(guard.last, now_ms);
        guard.state.store_sequence(sequence)?;
        guard.last = sequence;
        Ok(sequence)
    }
}

/// Signs diagnose runs for one node.
#[derive(Debug)]
pub struct DiagnoseSigner {
    counters: Arc<SignCounters>,
    signer: Result<Signer, String>,
    state: StateDir,
    sequencer: Sequencer,
    ttl: Duration,
    interval: Duration,
    boot: BootSource,
}

impl DiagnoseSigner {
    /// A signer; `signer` is the key error when the key could not be loaded.
    pub fn new(
        signer: Result<Signer, String>,
        state: StateDir,
        ttl: Duration,
        interval: Duration,
    ) -> Result<Self, SigningError> {
        let sequencer = Sequencer::open(state.clone())?;
        Ok(Self {
            counters: Arc::default(),
            signer,
            state,
            sequencer,
            ttl,
            interval,
            boot: BootSource::default(),
        })
    }

    /// Reports the boot id and reboot sentinel read from `boot` in every payload (none by
    /// default).
    pub fn with_boot(mut self, boot: BootSource) -> Self {
        self.boot = boot;
        self
    }

    /// The node's sequence counter (shared with the storage report's signer).
    pub fn sequencer(&self) -> Sequencer {
        self.sequencer.clone()
    }

    /// The signer's counters.
    pub fn counters(&self) -> Arc<SignCounters> {
        Arc::clone(&self.counters)
    }

    /// Builds and signs the payload for `run`, counting the outcome.
    pub fn sign(&mut self, run: &DiagnoseRun, stale: bool) -> Result<SignedEnvelope, SigningError> {
        let result = self.sign_uncounted(run, stale);
        let counter = match result {
            Ok(_) => &self.counters.signed,
            Err(_) => &self.counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    fn sign_uncounted(
        &mut self,
        run: &DiagnoseRun,
        stale: bool,
    ) -> Result<SignedEnvelope, SigningError> {
        let signer = self
            .signer
            .as_ref()
            .map_err(|error| SigningError::NoKey(error.clone()))?;
        let now = now_ms();
        let boot = self.boot.read();
        let payload = DiagnosePayload {
            verdict: run.verdict.clone(),
            collected_at_ms: run.collected_at_ms,
            age_ms: now.saturating_sub(run.collected_at_ms),
            stale,
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
            boot_id: boot.boot_id,
            reboot_required: boot.reboot_required,
        };
        sign_payload(signer, &self.sequencer, &payload, now, self.ttl)
    }

    /// Signs `run` and returns what the cache should serve; logs failures.
    pub fn sign_for_cache(&mut self, run: &DiagnoseRun, stale: bool) -> CachedSigned {
        let signed = self.sign(run, stale);
        if let Err(error) = &signed {
            tracing::error!(%error, "cannot sign the diagnose verdict");
        }
        cached_signed(signed)
    }

    /// Signs and persists every run `published`, storing the envelope in `cache`, until
    /// `shutdown` changes or the publisher goes away. The agent runs this as one task.
    pub async fn run(
        mut self,
        mut published: watch::Receiver<Option<Arc<DiagnoseRun>>>,
        cache: Arc<ReportCache>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                changed = published.changed() => if changed.is_err() { return },
                _ = shutdown.changed() => return,
            }
            let run = published.borrow_and_update().clone();
            if let Some(run) = run {
                self.persist(&run);
                cache.store_signed(self.sign_for_cache(&run, false));
            }
        }
    }

    /// Persists the published run (logged, not fatal, on failure).
    pub fn persist(&self, run: &DiagnoseRun) {
        if let Err(error) = self.state.store_verdict(run) {
            tracing::error!(%error, "cannot persist the diagnose verdict");
        }
    }
}

/// Reads the cluster key file, refused (with the reason) when others can write or read it or
/// it belongs to another user (`nodecare_daemon::secret`), or when it is empty. Every use of the
/// key in the agent reads it here.
pub fn load_key(key_file: &std::path::Path) -> Result<nodecare_protocol::HmacKey, String> {
    let secret =
        nodecare_daemon::secret::read_secret_file(key_file).map_err(|error| error.to_string())?;
    if secret.is_empty() {
        return Err(format!(
            "cannot read HMAC key file {}: the key file is empty",
            key_file.display()
        ));
    }
    Ok(nodecare_protocol::HmacKey::new(secret))
}

/// Loads the signer for `node` from the key file, or the reason it cannot be used.
pub fn load_signer(key_file: &std::path::Path, node: &str) -> Result<Signer, String> {
    load_key(key_file).map(|key| Signer::new(key, node))
}

/// Shared handle for tests and callers that sign outside the agent loop.
pub type SharedSigner = Arc<tokio::sync::Mutex<DiagnoseSigner>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot::BootSource;
    use nodecare_protocol::{HmacKey, NodeVerdict};

    #[test]
    fn payload_carries_the_boot_id_and_the_reboot_sentinel() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("state")).unwrap();
        let boot_id = dir.path().join("boot_id");
        let sentinel = dir.path().join("reboot-required");
        std::fs::write(&boot_id, "11111111-2222-3333-4444-555555555555\n").unwrap();
        let signer = Signer::new(HmacKey::new(b"k\n".to_vec()), "node1");
        let run = DiagnoseRun {
            verdict: NodeVerdict::merge(std::collections::BTreeMap::new()).unwrap(),
            collected_at_ms: now_ms(),
        };
        let mut plain = DiagnoseSigner::new(
            Ok(signer.clone()),
            state.clone(),
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
        .unwrap();
        let payload = |envelope: SignedEnvelope| -> DiagnosePayload {
            serde_json::from_value(envelope.payload).unwrap()
        };
        let without = payload(plain.sign(&run, false).unwrap());
        assert_eq!((without.boot_id, without.reboot_required), (None, None));

        let mut signer = DiagnoseSigner::new(
            Ok(signer),
            state,
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
        .unwrap()
        .with_boot(BootSource {
            boot_id_path: Some(boot_id.clone()),
            reboot_required_path: Some(sentinel.clone()),
        });
        let first = payload(signer.sign(&run, false).unwrap());
        assert_eq!(
            first.boot_id.as_deref(),
            Some("11111111-2222-3333-4444-555555555555")
        );
        assert_eq!(first.reboot_required, Some(false));
        // Read at every signing: a new boot id and a sentinel show at once.
        std::fs::write(&boot_id, "66666666-2222-3333-4444-555555555555\n").unwrap();
        std::fs::write(&sentinel, "").unwrap();
        let second = payload(signer.sign(&run, true).unwrap());
        assert_eq!(
            second.boot_id.as_deref(),
            Some("66666666-2222-3333-4444-555555555555")
        );
        assert_eq!(second.reboot_required, Some(true));
        // An unreadable boot id is absent, never a made-up value.
        std::fs::remove_file(&boot_id).unwrap();
        assert_eq!(payload(signer.sign(&run, false).unwrap()).boot_id, None);
    }
}
