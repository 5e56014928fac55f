//! The signed load report (`/1/report/default/load/signed`): every interval the agent takes the
//! latest reports of mond's load collectors (`cpu-avg-load`, `kvm-inst-rss`) from its cache,
//! exactly as it serves them unsigned, signs them with the cluster HMAC key and the node's one
//! sequence counter ([`Sequencer`]) and caches the envelope for HTTP, so that the coordinator
//! can give `hbal` load it has verified. [`LoadSigner::run`] is the task.

use std::sync::Arc;
use std::time::Duration;

use nodecare_protocol::load::LOAD_COLLECTORS;
use nodecare_protocol::report::DEFAULT_CATEGORY;
use nodecare_protocol::{LoadPayload, Report, SignedEnvelope, Signer, now_ms};
use tokio::sync::watch;

use crate::cache::{CachedSigned, ReportCache, Snapshot};
use crate::signing::{Sequencer, SignErrorLog, SigningError, cached_signed, sign_payload};

/// How often the agent signs its load reports.
pub const LOAD_INTERVAL: Duration = Duration::from_secs(10);

/// The reports of the load collectors in `snapshot` (enabled, collected), in
/// [`LOAD_COLLECTORS`] order; notes them read, so that they keep running at their interval.
pub fn load_reports(cache: &ReportCache, snapshot: &Snapshot) -> Vec<Report> {
    LOAD_COLLECTORS
        .iter()
        .filter_map(|name| cache.position(DEFAULT_CATEGORY, name))
        .inspect(|&position| cache.note_read(position))
        .filter(|&position| snapshot.enabled.get(position).copied().unwrap_or(false))
        .filter_map(|position| snapshot.reports.get(position)?.as_ref())
        .filter_map(|cached| serde_json::from_slice::<Report>(&cached.body).ok())
        .collect()
}

/// Signs load reports for one node.
#[derive(Debug)]
pub struct LoadSigner {
    signer: Result<Signer, String>,
    sequencer: Sequencer,
    interval: Duration,
    ttl: Duration,
}

impl LoadSigner {
    /// A signer signing every `interval`; each envelope lives `ttl_intervals` intervals.
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

    /// Signs `load`, taken at `collected_at_ms`.
    pub async fn sign(
        &self,
        load: Vec<Report>,
        collected_at_ms: u64,
    ) -> Result<SignedEnvelope, SigningError> {
        let signer = self
            .signer
            .as_ref()
            .map_err(|error| SigningError::NoKey(error.clone()))?;
        let payload = LoadPayload {
            load,
            collected_at_ms,
            interval_ms: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
        };
        sign_payload(signer, &self.sequencer, &payload, now_ms(), self.ttl).await
    }

    /// Signs `load` and returns what the cache should serve.
    pub async fn sign_for_cache(&self, load: Vec<Report>, collected_at_ms: u64) -> CachedSigned {
        cached_signed(self.sign(load, collected_at_ms).await)
    }

    /// Signs and caches the load reports every interval (the first one interval after the
    /// start) until `shutdown` changes. A failure to
    /// sign is logged when it starts or changes. The agent runs this as one task.
    pub async fn run(self, cache: Arc<ReportCache>, mut shutdown: watch::Receiver<bool>) {
        let mut sign_log = SignErrorLog::new("load report", "the load report is signed");
        // The first signing one interval after the start: the collectors have data by then.
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + self.interval, self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.changed() => return,
            }
            let load = load_reports(&cache, &cache.snapshot());
            let signed = self.sign_for_cache(load, now_ms()).await;
            sign_log.note(&signed);
            cache.store_load(signed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodecare_protocol::{HmacKey, KeyRing, ReportKind, VerifyPolicy};

    use crate::state::StateDir;

    #[tokio::test]
    async fn load_is_signed_with_the_node_sequence_and_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let key = HmacKey::new(b"k\n".to_vec());
        let signer = Signer::new(key.clone(), "node1");
        let diagnose = crate::signing::DiagnoseSigner::new(
            Ok(signer.clone()),
            state,
            Duration::from_secs(60),
            Duration::from_secs(60),
        )
        .unwrap();
        let load = LoadSigner::new(Ok(signer), diagnose.sequencer(), LOAD_INTERVAL, 3);
        let report = Report {
            name: "cpu-avg-load".into(),
            version: "B".into(),
            format_version: 1,
            timestamp: 1,
            category: None,
            kind: ReportKind::Performance,
            data: serde_json::json!({"cpu_number": 0, "cpus": [0.5], "cpu_total": 0.5}),
        };
        let first = load.sign(vec![report.clone()], 7).await.unwrap();
        let second = diagnose.sequencer().next_async(now_ms()).await.unwrap();
        assert!(first.sequence < second);
        KeyRing::single(key)
            .verify(
                &first,
                now_ms(),
                VerifyPolicy::default(),
                Some("node1"),
                None,
            )
            .unwrap();
        let payload: LoadPayload = serde_json::from_value(first.payload).unwrap();
        assert_eq!(payload.load, [report]);
        assert_eq!(payload.collected_at_ms, 7);
        let keyless = LoadSigner::new(
            Err("no key file".into()),
            diagnose.sequencer(),
            LOAD_INTERVAL,
            3,
        );
        assert!(matches!(
            keyless.sign_for_cache(Vec::new(), 0).await,
            CachedSigned::Unavailable(reason) if reason.contains("no key file")
        ));
    }
}
