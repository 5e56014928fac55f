//! The latest report of every collector, pre-serialised, and the pre-built bodies HTTP serves.
//!
//! Collectors write into the cache when they finish; HTTP only reads it. Reads take a read lock
//! just long enough to clone an `Arc`, so serving never waits for a collector.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore, watch};

use bytes::Bytes;
use nodecare_collectors::Registry;
use nodecare_protocol::report::DEFAULT_CATEGORY;
use nodecare_protocol::{CollectorListEntry, Report};

/// Why there is no verdict before the first diagnose run has finished.
pub const NOT_DIAGNOSED_YET: &str = "no diagnose run has completed since the agent started";

/// One cached report.
#[derive(Debug, Clone)]
pub struct CachedReport {
    /// The serialised report envelope.
    pub body: Bytes,
    /// When it was collected (for the `Age` header).
    pub collected: Instant,
}

/// A cached signed envelope (the diagnose, storage or load report), or why there is none.
#[derive(Debug, Clone)]
pub enum CachedSigned {
    /// The serialised envelope and its sequence number.
    Envelope {
        /// The serialised envelope.
        report: CachedReport,
        /// The envelope's sequence number (what long-polling waiters compare against).
        sequence: u64,
    },
    /// Why there is no envelope (e.g. no key).
    Unavailable(String),
}

/// Everything HTTP serves, as of one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Per collector, in registry order.
    pub reports: Vec<Option<CachedReport>>,
    /// Per collector, whether it is enabled (the cluster can disable built-in collectors);
    /// disabled ones are left out of the list and `/1/report/all`, as mond does.
    pub enabled: Vec<bool>,
    /// `/1/list/collectors`.
    pub list: Bytes,
    /// `/1/report/all`.
    pub all: CachedReport,
    /// `/1/report/node/diagnose/signed`.
    pub signed: CachedSigned,
    /// `/1/report/storage/drbd/signed`.
    pub storage: CachedSigned,
    /// `/1/report/default/load/signed`.
    pub load: CachedSigned,
}

/// The cache.
#[derive(Debug)]
pub struct ReportCache {
    index: HashMap<(String, String), usize>,
    names: Vec<String>,
    entries: Vec<CollectorListEntry>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// The sequence of the signed envelope served (0: none yet); waiters of the long-poll
    /// subscribe to it, one notification wakes them all.
    signed_sequence: watch::Sender<u64>,
    /// Bounds the number of requests waiting for a new signed report at once.
    waiters: Arc<Semaphore>,
    /// Per collector, who reads its report (for collectors run on demand).
    demand: Vec<Demand>,
    /// The origin of [`Demand::last_read_ms`] (Tokio's clock, which tests can pause).
    epoch: tokio::time::Instant,
}

/// When a collector's report was last read, and how to wake its paused scheduler.
#[derive(Debug, Default)]
struct Demand {
    /// Milliseconds after the cache's epoch, plus one (0: never read).
    last_read_ms: AtomicU64,
    /// Whether the collector's scheduler is paused until the next read.
    paused: AtomicBool,
    /// Woken by the first read while paused.
    wake: Notify,
}

/// At most this many requests wait for a new signed report at once; further ones are answered
/// at once, as if they had not asked to wait.
pub const MAX_WAITERS: usize = 64;

fn enabled_reports<'a>(
    reports: &'a [Option<CachedReport>],
    enabled: &'a [bool],
) -> impl Iterator<Item = &'a CachedReport> {
    reports
        .iter()
        .zip(enabled)
        .filter_map(|(report, enabled)| if *enabled { report.as_ref() } else { None })
}

fn all_body(reports: &[Option<CachedReport>], enabled: &[bool]) -> CachedReport {
    let mut body = Vec::with_capacity(
        enabled_reports(reports, enabled)
            .map(|r| r.body.len() + 1)
            .sum(),
    );
    body.push(b'[');
    let mut first = true;
    let mut oldest: Option<Instant> = None;
    for report in enabled_reports(reports, enabled) {
        if !first {
            body.push(b',');
        }
        first = false;
        body.extend_from_slice(&report.body);
        oldest = Some(oldest.map_or(report.collected, |old| old.min(report.collected)));
    }
    body.push(b']');
    CachedReport {
        body: Bytes::from(body),
        collected: oldest.unwrap_or_else(Instant::now),
    }
}

fn list_body(entries: &[CollectorListEntry], enabled: &[bool]) -> Bytes {
    let listed: Vec<&CollectorListEntry> = entries
        .iter()
        .zip(enabled)
        .filter_map(|(entry, enabled)| enabled.then_some(entry))
        .collect();
    Bytes::from(serde_json::to_vec(&listed).unwrap_or_else(|_| b"[]".to_vec()))
}

impl ReportCache {
    /// An empty cache for the collectors of `registry`.
    pub fn new(registry: &Registry) -> Self {
        let mut index = HashMap::new();
        let mut names = Vec::new();
        let mut list = Vec::new();
        for (position, collector) in registry.iter().enumerate() {
            let spec = collector.spec();
            let category = spec
                .category
                .clone()
                .unwrap_or_else(|| DEFAULT_CATEGORY.to_owned());
            index.insert((category, spec.name.clone()), position);
            names.push(spec.name.clone());
            list.push(CollectorListEntry {
                name: spec.name.clone(),
                category: spec.category.clone(),
                kind: spec.kind,
            });
        }
        let reports = vec![None; names.len()];
        let enabled = vec![true; names.len()];
        let all = all_body(&reports, &enabled);
        let list_body = list_body(&list, &enabled);
        let demand = (0..list.len()).map(|_| Demand::default()).collect();
        Self {
            index,
            names,
            entries: list,
            snapshot: RwLock::new(Arc::new(Snapshot {
                reports,
                enabled,
                list: list_body,
                all,
                signed: CachedSigned::Unavailable(NOT_DIAGNOSED_YET.into()),
                storage: CachedSigned::Unavailable("DRBD has not been read yet".into()),
                load: CachedSigned::Unavailable("the load has not been signed yet".into()),
            })),
            signed_sequence: watch::Sender::new(0),
            waiters: Arc::new(Semaphore::new(MAX_WAITERS)),
            demand,
            epoch: tokio::time::Instant::now(),
        }
    }

    /// Notes that the report of the collector at `position` was read (HTTP, the load
    /// signer): a collector run on demand keeps its interval while it is read, and the first
    /// read while it is paused starts a run. Two atomic operations; never waits.
    pub fn note_read(&self, position: usize) {
        let Some(demand) = self.demand.get(position) else {
            return;
        };
        let since = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        demand
            .last_read_ms
            .store(since.saturating_add(1), Ordering::SeqCst);
        if demand.paused.load(Ordering::SeqCst) {
            demand.wake.notify_one();
        }
    }

    /// Notes that every report was read (`/1/report/all`).
    pub fn note_read_all(&self) {
        for position in 0..self.demand.len() {
            self.note_read(position);
        }
    }

    /// How long ago the report at `position` was last read; `None`: never.
    pub fn read_ago(&self, position: usize) -> Option<Duration> {
        let read = self
            .demand
            .get(position)?
            .last_read_ms
            .load(Ordering::SeqCst);
        let at = Duration::from_millis(read.checked_sub(1)?);
        Some(self.epoch.elapsed().saturating_sub(at))
    }

    /// Pauses the scheduler of the collector at `position` unless its report was read within
    /// `window`: returns the notification that the next read sends, or `None` when the
    /// report is in demand (it then keeps running).
    pub fn pause_unless_read(&self, position: usize, window: Duration) -> Option<&Notify> {
        let demand = self.demand.get(position)?;
        demand.paused.store(true, Ordering::SeqCst);
        // After the flag: a read between the two is either seen here or wakes the pause.
        if self.read_ago(position).is_some_and(|ago| ago < window) {
            demand.paused.store(false, Ordering::SeqCst);
            return None;
        }
        Some(&demand.wake)
    }

    /// Ends a pause of the collector at `position`.
    pub fn resume(&self, position: usize) {
        if let Some(demand) = self.demand.get(position) {
            demand.paused.store(false, Ordering::SeqCst);
        }
    }

    /// `/1/list/collectors`.
    pub fn list_body(&self) -> Bytes {
        self.snapshot().list.clone()
    }

    /// Whether the collector at `position` is enabled.
    pub fn is_enabled(&self, position: usize) -> bool {
        self.snapshot()
            .enabled
            .get(position)
            .copied()
            .unwrap_or(false)
    }

    /// Enables or disables the collector at `position`: a disabled collector is left out of
    /// the list and of `/1/report/all`, and its own report path answers 404.
    pub fn set_enabled(&self, position: usize, enabled: bool) {
        if self.is_enabled(position) == enabled || position >= self.names.len() {
            return;
        }
        self.update(|snapshot| {
            if let Some(slot) = snapshot.enabled.get_mut(position) {
                *slot = enabled;
            }
            snapshot.list = list_body(&self.entries, &snapshot.enabled);
            snapshot.all = all_body(&snapshot.reports, &snapshot.enabled);
        });
    }

    /// Position of the collector with this category (or `default`) and name.
    pub fn position(&self, category: &str, name: &str) -> Option<usize> {
        self.index
            .get(&(category.to_owned(), name.to_owned()))
            .copied()
    }

    /// Name of the collector at `position`.
    pub fn name(&self, position: usize) -> Option<&str> {
        self.names.get(position).map(String::as_str)
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.snapshot.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        let mut guard = match self.snapshot.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut next = Snapshot::clone(&guard);
        change(&mut next);
        *guard = Arc::new(next);
    }

    /// Stores the report of the collector at `position`, collected at `collected`.
    pub fn store(&self, position: usize, report: &Report, collected: Instant) {
        let Ok(body) = serde_json::to_vec(report) else {
            tracing::error!(collector = %report.name, "cannot serialise report");
            return;
        };
        self.update(|snapshot| {
            if let Some(slot) = snapshot.reports.get_mut(position) {
                *slot = Some(CachedReport {
                    body: Bytes::from(body),
                    collected,
                });
            }
            snapshot.all = all_body(&snapshot.reports, &snapshot.enabled);
        });
    }

    /// Stores the signed diagnose envelope (or why there is none).
    pub fn store_signed(&self, signed: CachedSigned) {
        let sequence = match &signed {
            CachedSigned::Envelope { sequence, .. } => Some(*sequence),
            CachedSigned::Unavailable(_) => None,
        };
        self.update(|snapshot| snapshot.signed = signed);
        // After the snapshot: a woken waiter reads the new envelope.
        if let Some(sequence) = sequence {
            self.signed_sequence.send_replace(sequence);
        }
    }

    /// Stores the signed storage envelope (or why there is none).
    pub fn store_storage(&self, signed: CachedSigned) {
        self.update(|snapshot| snapshot.storage = signed);
    }

    /// Stores the signed load envelope (or why there is none).
    pub fn store_load(&self, signed: CachedSigned) {
        self.update(|snapshot| snapshot.load = signed);
    }

    /// Follows the sequence number of the signed envelope served.
    pub fn subscribe_signed(&self) -> watch::Receiver<u64> {
        self.signed_sequence.subscribe()
    }

    /// The bound on requests waiting for a new signed report.
    pub fn waiters(&self) -> &Arc<Semaphore> {
        &self.waiters
    }

    /// How many requests wait for a new signed report now.
    pub fn waiting(&self) -> usize {
        MAX_WAITERS.saturating_sub(self.waiters.available_permits())
    }
}
