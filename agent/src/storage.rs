//! The signed storage report (`/1/report/storage/drbd/signed`): the agent reads the node's DRBD
//! state on its own schedule (independent of the mond `drbd` collector, which the cluster may
//! disable), signs each reading with the cluster HMAC key and the node's one sequence counter
//! ([`Sequencer`]), and caches the envelope for HTTP. [`StorageSigner::run`] is the task.

use std::sync::Arc;
use std::time::Duration;

use nodecare_collectors::builtin::drbd::{Drbd, DrbdStatus, to_storage_minors};
use nodecare_collectors::{CollectError, Collector};
use nodecare_protocol::{DrbdState, SignedEnvelope, Signer, StoragePayload, now_ms};
use tokio::sync::watch;

use crate::cache::{CachedSigned, ReportCache};
use crate::signing::{Sequencer, SignErrorLog, SigningError, cached_signed, sign_payload};

/// How often the agent reads and signs the DRBD state.
pub const STORAGE_INTERVAL: Duration = Duration::from_secs(10);

/// Where the agent reads DRBD from, and how often.
#[derive(Debug, Clone)]
pub struct StorageSource {
    /// The DRBD reader (paired with instances through confd on a Ganeti node).
    pub drbd: Arc<Drbd>,
    /// How often to read it.
    pub interval: Duration,
}

/// The signed DRBD state for one reading. Pure.
pub fn drbd_state(reading: Result<Option<DrbdStatus>, CollectError>) -> DrbdState {
    match reading {
        Ok(None) => DrbdState::NotInstalled {},
        Ok(Some(status)) => DrbdState::Minors {
            minors: to_storage_minors(&status),
        },
        Err(error) => DrbdState::Unreadable {
            reason: error.to_string(),
        },
    }
}

/// Signs storage readings for one node.
#[derive(Debug)]
pub struct StorageSigner {
    signer: Result<Signer, String>,
    sequencer: Sequencer,
    interval: Duration,
    ttl: Duration,
}

impl StorageSigner {
    /// A signer reading every `interval`; each envelope lives `ttl_intervals` intervals.
    /// `signer` is the key error when the key could not be loaded.
    pub fn new(
        signer: Result<Signer, String>,
        sequencer: Sequencer,
        interval: Duration,
        ttl_intervals: u32,
    ) -> Self {
        Self {
            signer,
            sequencer,
            interval,
            ttl: interval.saturating_mul(ttl_intervals.max(1)),
        }
    }

    /// Signs one reading taken at `collected_at_ms`.
    pub async fn sign(
        &self,
        drbd: DrbdState,
        collected_at_ms: u64,
    ) -> Result<SignedEnvelope, SigningError> {
        let signer = self
            .signer
            .as_ref()
            .map_err(|error| SigningError::NoKey(error.clone()))?;
        let payload = StoragePayload {
            drbd,
            collected_at_ms,
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
        };
        sign_payload(signer, &self.sequencer, &payload, now_ms(), self.ttl).await
    }

    /// Signs one reading and returns what the cache should serve.
    pub async fn sign_for_cache(&self, drbd: DrbdState, collected_at_ms: u64) -> CachedSigned {
        cached_signed(self.sign(drbd, collected_at_ms).await)
    }

    /// Reads DRBD (bounded by the collector's timeout), signs and caches the result every
    /// interval, until `shutdown` changes. A failure to read or to sign is logged when it
    /// starts or changes, not at every interval. The agent runs this as one task.
    pub async fn run(
        self,
        source: StorageSource,
        cache: Arc<ReportCache>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let timeout = source.drbd.spec().timeout;
        let mut last_read_error: Option<String> = None;
        let mut sign_log =
            SignErrorLog::new("storage report", "the storage report is signed again");
        let mut ticks = tokio::time::interval(source.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.changed() => return,
            }
            let reading = tokio::select! {
                reading = tokio::time::timeout(timeout, source.drbd.read()) => {
                    reading.unwrap_or(Err(CollectError::Timeout(timeout)))
                }
                _ = shutdown.changed() => return,
            };
            let read_error = reading.as_ref().err().map(ToString::to_string);
            if read_error != last_read_error {
                match &read_error {
                    Some(error) => tracing::warn!(%error, "cannot read the DRBD state"),
                    None => tracing::info!("the DRBD state is readable again"),
                }
                last_read_error = read_error;
            }
            let signed = self.sign_for_cache(drbd_state(reading), now_ms()).await;
            sign_log.note(&signed);
            cache.store_storage(signed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_collectors::builtin::drbd::parse_proc_drbd;
    use nodecare_protocol::{HmacKey, KeyRing, VerifyError, VerifyPolicy};

    use crate::state::StateDir;

    #[test]
    fn readings_become_states() {
        assert_eq!(drbd_state(Ok(None)), DrbdState::NotInstalled {});
        let status =
            parse_proc_drbd(" 0: cs:StandAlone ro:Primary/Unknown ds:UpToDate/DUnknown   r-----\n")
                .unwrap();
        let DrbdState::Minors { minors } = drbd_state(Ok(Some(status))) else {
            panic!("minors expected")
        };
        assert_eq!(minors[0].connection, "StandAlone");
        let DrbdState::Unreadable { reason } =
            drbd_state(Err(CollectError::Timeout(Duration::from_secs(12))))
        else {
            panic!("unreadable expected")
        };
        assert!(reason.contains("timed out"), "{reason}");
    }

    #[tokio::test]
    async fn storage_and_diagnose_share_one_increasing_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let key = HmacKey::new(b"k\n".to_vec());
        let signer = Signer::new(key.clone(), "node1");
        let diagnose = crate::signing::DiagnoseSigner::new(
            Ok(signer.clone()),
            state.clone(),
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
        .unwrap();
        let storage = StorageSigner::new(Ok(signer), diagnose.sequencer(), STORAGE_INTERVAL, 3);
        let first = storage
            .sign(DrbdState::NotInstalled {}, now_ms())
            .await
            .unwrap();
        let second_seq = diagnose.sequencer().next_async(now_ms()).await.unwrap();
        let third = storage
            .sign(DrbdState::NotInstalled {}, now_ms())
            .await
            .unwrap();
        assert!(first.sequence < second_seq && second_seq < third.sequence);
        // Persisted once, for the whole block the three numbers come from.
        assert_eq!(
            state.load_sequence().unwrap(),
            first.sequence + crate::signing::SEQUENCE_BLOCK
        );
        assert_eq!(third.expires_at_ms - third.issued_at_ms, 30_000);
        // It verifies, decodes as a storage payload, and an older one is a replay.
        let ring = KeyRing::single(key);
        let policy = VerifyPolicy::default();
        ring.verify(
            &third,
            now_ms(),
            policy,
            Some("node1"),
            Some(third.sequence),
        )
        .unwrap();
        let payload: StoragePayload = serde_json::from_value(third.payload.clone()).unwrap();
        assert_eq!(payload.drbd, DrbdState::NotInstalled {});
        assert!(matches!(
            ring.verify(
                &first,
                now_ms(),
                policy,
                Some("node1"),
                Some(third.sequence)
            ),
            Err(VerifyError::Replay { .. })
        ));
        // Without a key: the reason, never an unsigned report.
        let keyless = StorageSigner::new(
            Err("no key file".into()),
            diagnose.sequencer(),
            STORAGE_INTERVAL,
            3,
        );
        assert!(matches!(
            keyless.sign_for_cache(DrbdState::NotInstalled {}, 0).await,
            CachedSigned::Unavailable(reason) if reason.contains("no key file")
        ));
    }
}
