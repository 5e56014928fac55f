//! Signs every published diagnose verdict with the cluster HMAC key, once per run (never per
//! request), and persists the verdict and the sequence number: [`DiagnoseSigner::run`] is the
//! agent's signer task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nodecare_collectors::diagnose::DiagnoseRun;
use nodecare_protocol::diagnose::DiagnosePayload;
use nodecare_protocol::now_ms;
use nodecare_protocol::{SignedEnvelope, Signer};

use tokio::sync::watch;

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

/// Signs diagnose runs for one node.
#[derive(Debug)]
pub struct DiagnoseSigner {
    counters: Arc<SignCounters>,
    signer: Result<Signer, String>,
    state: StateDir,
    last_sequence: u64,
    ttl: Duration,
    interval: Duration,
}

impl DiagnoseSigner {
    /// A signer; `signer` is the key error when the key could not be loaded.
    pub fn new(
        signer: Result<Signer, String>,
        state: StateDir,
        ttl: Duration,
        interval: Duration,
    ) -> Result<Self, SigningError> {
        let last_sequence = state.load_sequence()?;
        Ok(Self {
            counters: Arc::default(),
            signer,
            state,
            last_sequence,
            ttl,
            interval,
        })
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
        let payload = DiagnosePayload {
            verdict: run.verdict.clone(),
            collected_at_ms: run.collected_at_ms,
            age_ms: now.saturating_sub(run.collected_at_ms),
            stale,
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
        };
        let payload = serde_json::to_value(&payload)
            .map_err(|error| SigningError::Sign(error.to_string()))?;
        let sequence = next_sequence(self.last_sequence, now);
        // Persist first: a sequence number is never handed out twice, even across a crash.
        self.state.store_sequence(sequence)?;
        self.last_sequence = sequence;
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        signer
            .sign(payload, sequence, now, ttl_ms)
            .map_err(|error| SigningError::Sign(error.to_string()))
    }

    /// Signs `run` and returns what the cache should serve; logs failures.
    pub fn sign_for_cache(&mut self, run: &DiagnoseRun, stale: bool) -> CachedSigned {
        match self.sign(run, stale) {
            Ok(envelope) => match serde_json::to_vec(&envelope) {
                Ok(body) => CachedSigned::Envelope {
                    report: CachedReport {
                        body: Bytes::from(body),
                        collected: Instant::now(),
                    },
                    sequence: envelope.sequence,
                },
                Err(error) => CachedSigned::Unavailable(error.to_string()),
            },
            Err(error) => {
                tracing::error!(%error, "cannot sign the diagnose verdict");
                CachedSigned::Unavailable(error.to_string())
            }
        }
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

/// Loads the signer for `node` from the key file, or the reason it cannot be used.
pub fn load_signer(key_file: &std::path::Path, node: &str) -> Result<Signer, String> {
    nodecare_protocol::HmacKey::from_file(key_file)
        .map(|key| Signer::new(key, node))
        .map_err(|error| error.to_string())
}

/// Shared handle for tests and callers that sign outside the agent loop.
pub type SharedSigner = Arc<tokio::sync::Mutex<DiagnoseSigner>>;
