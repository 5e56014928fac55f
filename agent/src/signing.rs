//! Signs every published diagnose verdict with the cluster HMAC key, once per run (never per
//! request), and persists the verdict and the sequence number: [`DiagnoseSigner::run`] is the
//! agent's signer task.
//!
//! Every signed report of the node (diagnose, storage and load) takes its number from one
//! [`Sequencer`]: one strictly increasing sequence per node and key, across report kinds and
//! restarts. The sequencer reserves numbers in blocks ([`SEQUENCE_BLOCK`]): it persists the top
//! of a block before handing out any number in it, and after a restart starts above the
//! persisted top, so a crash skips ahead and never repeats a number. Persisting runs on the
//! runtime's blocking pool, never on the async worker that answers requests.

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
pub(crate) async fn sign_payload<P: serde::Serialize>(
    signer: &Signer,
    sequencer: &Sequencer,
    payload: &P,
    now: u64,
    ttl: Duration,
) -> Result<SignedEnvelope, SigningError> {
    let payload =
        serde_json::to_value(payload).map_err(|error| SigningError::Sign(error.to_string()))?;
    let sequence = sequencer.next_async(now).await?;
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

/// How far ahead of the last number handed out the sequencer reserves (persists) numbers: an
/// hour of milliseconds. Numbers follow the clock (at least the current time in ms), so the
/// counter persists about once an hour instead of once per signed report, and a restart after
/// a crash skips at most an hour of numbers.
pub const SEQUENCE_BLOCK: u64 = 3_600_000;

/// The node's one sequence counter, shared by the signers of every report kind: numbers are
/// handed out from a block whose top is persisted first.
#[derive(Debug, Clone)]
pub struct Sequencer {
    inner: Arc<Mutex<SequenceState>>,
}

#[derive(Debug)]
struct SequenceState {
    state: StateDir,
    /// The last number handed out.
    last: u64,
    /// The persisted top of the block: every number handed out is at most this one.
    reserved: u64,
    /// How many times the top was persisted (for tests and `/metrics`).
    persisted: u64,
}

impl SequenceState {
    /// The next number, if the current block holds it (no IO).
    fn take_reserved(&mut self, now_ms: u64) -> Option<u64> {
        let sequence = next_sequence(self.last, now_ms);
        (sequence <= self.reserved).then(|| {
            self.last = sequence;
            sequence
        })
    }
}

impl Sequencer {
    /// The counter persisted in `state`: the first number is above the persisted top.
    pub fn open(state: StateDir) -> Result<Self, crate::state::StateError> {
        let reserved = state.load_sequence()?;
        Ok(Self {
            inner: Arc::new(Mutex::new(SequenceState {
                state,
                last: reserved,
                reserved,
                persisted: 0,
            })),
        })
    }

    /// The next sequence number (above every number handed out before, and at least `now_ms`).
    /// When it is beyond the reserved block, the new block's top is persisted first (blocking:
    /// refused on an async worker thread; use [`Sequencer::next_async`] there).
    pub fn next(&self, now_ms: u64) -> Result<u64, crate::state::StateError> {
        let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sequence) = guard.take_reserved(now_ms) {
            return Ok(sequence);
        }
        let sequence = next_sequence(guard.last, now_ms);
        let reserved = sequence.saturating_add(SEQUENCE_BLOCK);
        guard.state.store_sequence(reserved)?;
        guard.reserved = reserved;
        guard.persisted = guard.persisted.saturating_add(1);
        guard.last = sequence;
        Ok(sequence)
    }

    /// [`Sequencer::next`] for async tasks: a number of the reserved block at once, a new
    /// block persisted on the blocking pool.
    pub async fn next_async(&self, now_ms: u64) -> Result<u64, crate::state::StateError> {
        // Never wait for the lock here: its holder may be persisting on the blocking pool.
        if let Ok(mut guard) = self.inner.try_lock()
            && let Some(sequence) = guard.take_reserved(now_ms)
        {
            return Ok(sequence);
        }
        let sequencer = self.clone();
        crate::state::blocking(move || sequencer.next(now_ms)).await
    }

    /// How many blocks were persisted since the counter was opened.
    pub fn persisted_blocks(&self) -> u64 {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .persisted
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
    pub async fn sign(
        &mut self,
        run: &DiagnoseRun,
        stale: bool,
    ) -> Result<SignedEnvelope, SigningError> {
        let result = self.sign_uncounted(run, stale).await;
        let counter = match result {
            Ok(_) => &self.counters.signed,
            Err(_) => &self.counters.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn sign_uncounted(
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
        sign_payload(signer, &self.sequencer, &payload, now, self.ttl).await
    }

    /// Signs `run` and returns what the cache should serve; logs failures.
    pub async fn sign_for_cache(&mut self, run: &DiagnoseRun, stale: bool) -> CachedSigned {
        let signed = self.sign(run, stale).await;
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
                self.persist(&run).await;
                cache.store_signed(self.sign_for_cache(&run, false).await);
            }
        }
    }

    /// Persists the published run on the blocking pool (logged, not fatal, on failure).
    pub async fn persist(&self, run: &DiagnoseRun) {
        let state = self.state.clone();
        let run = run.clone();
        if let Err(error) = crate::state::blocking(move || state.store_verdict(&run)).await {
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
    fn numbers_come_from_persisted_blocks_and_a_restart_skips_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let sequencer = Sequencer::open(state.clone()).unwrap();
        let start = 1_000_000;
        let first = sequencer.next(start).unwrap();
        assert_eq!(first, start);
        assert_eq!(state.load_sequence().unwrap(), first + SEQUENCE_BLOCK);
        // A day of reports every 10 s within the block: one persist, not one per report.
        let mut last = first;
        for step in 1..=300 {
            let sequence = sequencer.next(start + step * 10_000).unwrap();
            assert!(sequence > last);
            last = sequence;
        }
        assert_eq!(sequencer.persisted_blocks(), 1);
        assert_eq!(state.load_sequence().unwrap(), first + SEQUENCE_BLOCK);
        // A crash: the restarted counter starts above the whole reserved block, even with a
        // clock that went back.
        let restarted = Sequencer::open(state.clone()).unwrap();
        let after_crash = restarted.next(start).unwrap();
        assert_eq!(after_crash, first + SEQUENCE_BLOCK + 1);
        assert!(after_crash > last);
        assert_eq!(state.load_sequence().unwrap(), after_crash + SEQUENCE_BLOCK);
        // Beyond the block: the next block's top is persisted before the number is used.
        let beyond = after_crash + SEQUENCE_BLOCK + 5;
        assert_eq!(restarted.next(beyond).unwrap(), beyond);
        assert_eq!(restarted.persisted_blocks(), 2);
        assert_eq!(state.load_sequence().unwrap(), beyond + SEQUENCE_BLOCK);
    }

    #[test]
    fn async_signers_persist_on_the_blocking_pool() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let sequencer = Sequencer::open(state.clone()).unwrap();
        // On a current-thread runtime the sync call is refused (it would stall the worker)...
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let on_worker = sequencer.clone();
        assert!(matches!(
            runtime.block_on(async move { on_worker.next(5) }),
            Err(crate::state::StateError::AsyncWorker { .. })
        ));
        // ...and the async one persists on the blocking pool, then hands out the block.
        let numbers = runtime.block_on(async {
            let mut numbers = Vec::new();
            for now in [5, 6, 7] {
                numbers.push(sequencer.next_async(now).await.unwrap());
            }
            numbers
        });
        assert_eq!(numbers, [5, 6, 7]);
        assert_eq!(state.load_sequence().unwrap(), 5 + SEQUENCE_BLOCK);
        assert_eq!(sequencer.persisted_blocks(), 1);
    }

    #[tokio::test]
    async fn payload_carries_the_boot_id_and_the_reboot_sentinel() {
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
        let without = payload(plain.sign(&run, false).await.unwrap());
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
        let first = payload(signer.sign(&run, false).await.unwrap());
        assert_eq!(
            first.boot_id.as_deref(),
            Some("11111111-2222-3333-4444-555555555555")
        );
        assert_eq!(first.reboot_required, Some(false));
        // Read at every signing: a new boot id and a sentinel show at once.
        std::fs::write(&boot_id, "66666666-2222-3333-4444-555555555555\n").unwrap();
        std::fs::write(&sentinel, "").unwrap();
        let second = payload(signer.sign(&run, true).await.unwrap());
        assert_eq!(
            second.boot_id.as_deref(),
            Some("66666666-2222-3333-4444-555555555555")
        );
        assert_eq!(second.reboot_required, Some(true));
        // An unreadable boot id is absent, never a made-up value.
        std::fs::remove_file(&boot_id).unwrap();
        assert_eq!(
            payload(signer.sign(&run, false).await.unwrap()).boot_id,
            None
        );
    }
}
