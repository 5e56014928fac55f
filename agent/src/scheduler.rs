//! Runs every collector of the registry on its own interval with its own timeout and stores
//! each result in the cache. A failed, timed-out or panicking collection becomes a report whose
//! data carries status code 2 and the error; it never affects another collector.
//!
//! At rest the scheduler sleeps: it wakes for a due run, a change of the cluster's collector
//! settings (a notification, not a poll), a read of a paused on-demand collector's report, or a
//! signed check request.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecare_collectors::confd::ViewHandle;
use nodecare_collectors::{CollectError, Collector, Pace};
use nodecare_protocol::report::with_status;
use nodecare_protocol::{Report, StatusCode};
use serde_json::{Map, Value};
use tokio::sync::watch;

use crate::cache::ReportCache;

/// Nanoseconds since the epoch with microsecond precision, as mond stamps reports.
pub fn mond_timestamp() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX / 1000))
        .unwrap_or(0);
    micros.saturating_mul(1000)
}

/// A stable offset in `[0, interval / 4)` for this node and collector, so that the nodes of a
/// cluster do not all run the same collector at the same moment.
pub fn jitter(node: &str, collector: &str, interval: Duration) -> Duration {
    let mut hasher = DefaultHasher::new();
    (node, collector).hash(&mut hasher);
    let span = u64::try_from(interval.as_millis() / 4).unwrap_or(u64::MAX);
    if span == 0 {
        return Duration::ZERO;
    }
    Duration::from_millis(hasher.finish() % span)
}

/// The report for one collection result.
pub fn report_for(collector: &dyn Collector, result: Result<Value, CollectError>) -> Report {
    let spec = collector.spec();
    let data = match result {
        Ok(data) => data,
        Err(error) => with_status(
            Value::Object(Map::new()),
            StatusCode::Unknown,
            &error.to_string(),
        ),
    };
    Report {
        name: spec.name.clone(),
        version: spec.version.clone(),
        format_version: spec.format_version,
        timestamp: mond_timestamp(),
        category: spec.category.clone(),
        kind: spec.kind,
        data,
    }
}

/// Runs one collection with the collector's timeout, isolated in its own task.
pub async fn collect_once(collector: &Arc<dyn Collector>) -> Result<Value, CollectError> {
    let timeout = collector.spec().timeout;
    let owned = Arc::clone(collector);
    let mut task = tokio::spawn(async move { owned.collect().await });
    match tokio::time::timeout(timeout, &mut task).await {
        Ok(Ok(result)) => result,
        Ok(Err(join_error)) => Err(CollectError::Source {
            source_name: collector.spec().name.clone(),
            reason: if join_error.is_panic() {
                "the collector panicked".to_owned()
            } else {
                "the collection was cancelled".to_owned()
            },
        }),
        Err(_) => {
            task.abort();
            Err(CollectError::Timeout(timeout))
        }
    }
}

/// The shortest interval the scheduler runs any collector at.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A collector run on demand ([`Pace::OnDemand`]) keeps its interval while its report was read
/// within this many intervals...
pub const DEMAND_INTERVALS: u32 = 3;

/// ...and at least within this time; after that it pauses until the next read.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(60);

/// How long after its last read a collector run on demand keeps running. Pure.
pub fn demand_window(interval: Duration) -> Duration {
    interval.saturating_mul(DEMAND_INTERVALS).max(DEMAND_WINDOW)
}

/// Waits until `settings` notifies a change; forever when there is nothing to watch (or the
/// publisher is gone, which then stops the watching).
async fn settings_changed(settings: &mut Option<ViewHandle>) {
    if let Some(view) = settings {
        if view.changed().await {
            return;
        }
        *settings = None;
    }
    std::future::pending::<()>().await;
}

/// What ended a wait of the scheduler.
enum Woken {
    /// The wait ran out (the run is due).
    Due,
    /// The settings changed, a read or a signed check asked for a run: look again.
    Again,
    /// The agent stops.
    Shutdown,
}

/// Runs `collector` (at `position` in the cache) until `shutdown` changes; a notification on
/// `wake` starts a run at once (a signed check request).
///
/// Before every run, and whenever [`Collector::settings_changes`] notifies, it reads the
/// collector's [`Collector::enabled`] and [`Collector::interval`]: a disabled collector is not
/// run and is left out of the lists; an interval change applies at once. Nothing wakes it in
/// between: no polling. A collector run [`Pace::OnDemand`] pauses when its report was not
/// read within [`demand_window`] and runs at once on the next read.
pub async fn run_collector(
    collector: Arc<dyn Collector>,
    position: usize,
    cache: Arc<ReportCache>,
    node: String,
    mut shutdown: watch::Receiver<bool>,
    wake: Option<Arc<tokio::sync::Notify>>,
) {
    let requested = || async {
        match &wake {
            Some(wake) => wake.notified().await,
            None => std::future::pending().await,
        }
    };
    let name = collector.spec().name.clone();
    let pace = collector.pace();
    let mut settings = collector.settings_changes();
    // A per-node phase, so that the nodes of a cluster do not all run a collector at once.
    let mut phase = jitter(&node, &name, collector.interval().max(MIN_INTERVAL));
    let mut last_start: Option<tokio::time::Instant> = None;
    loop {
        let enabled = collector.enabled();
        if enabled != cache.is_enabled(position) {
            tracing::info!(collector = %name, enabled, "collector configuration changed");
            cache.set_enabled(position, enabled);
        }
        let interval = collector.interval().max(MIN_INTERVAL);
        let woken = if !enabled {
            // Wait until it is enabled again; its next run then starts at once.
            last_start = None;
            tokio::select! {
                () = settings_changed(&mut settings) => Woken::Again,
                _ = shutdown.changed() => Woken::Shutdown,
            }
        } else if let Some(start) = last_start {
            let paused = match pace {
                Pace::OnDemand => cache.pause_unless_read(position, demand_window(interval)),
                Pace::Steady => None,
            };
            if let Some(read) = paused {
                tracing::debug!(collector = %name, "nobody reads the report: paused");
                let woken = tokio::select! {
                    () = read.notified() => {
                        // The first read after a pause: run now.
                        last_start = None;
                        Woken::Again
                    }
                    () = settings_changed(&mut settings) => Woken::Again,
                    () = requested() => {
                        last_start = None;
                        Woken::Again
                    }
                    _ = shutdown.changed() => Woken::Shutdown,
                };
                cache.resume(position);
                woken
            } else {
                let due = start + interval + phase;
                if due > tokio::time::Instant::now() {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => Woken::Due,
                        () = settings_changed(&mut settings) => Woken::Again,
                        () = requested() => {
                            tracing::info!(collector = %name, "run requested now");
                            last_start = None;
                            Woken::Again
                        }
                        _ = shutdown.changed() => Woken::Shutdown,
                    }
                } else {
                    Woken::Due
                }
            }
        } else {
            // The first run (and a requested one) starts at once.
            Woken::Due
        };
        match woken {
            Woken::Shutdown => return,
            Woken::Again if last_start.is_some() => continue,
            Woken::Again | Woken::Due => {}
        }
        if !collector.enabled() {
            continue;
        }
        if last_start.is_some() {
            // The phase shifts the second run only; later runs keep it.
            phase = Duration::ZERO;
        }
        last_start = Some(tokio::time::Instant::now());
        let result = tokio::select! {
            result = collect_once(&collector) => result,
            _ = shutdown.changed() => return,
        };
        if let Err(error) = &result {
            tracing::warn!(collector = %name, %error, "collection failed");
        }
        let report = report_for(collector.as_ref(), result);
        cache.store(position, &report, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicU64, Ordering};

    use nodecare_collectors::{CollectFuture, CollectorSpec, Registry};
    use nodecare_protocol::ReportKind;

    #[derive(Debug)]
    struct Counting {
        spec: CollectorSpec,
        runs: AtomicU64,
    }

    impl Collector for Counting {
        fn spec(&self) -> &CollectorSpec {
            &self.spec
        }
        fn collect(&self) -> CollectFuture<'_> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(Value::Null) })
        }
        fn pace(&self) -> Pace {
            Pace::OnDemand
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_unread_on_demand_collector_pauses_and_the_next_read_runs_it() {
        let collector = Arc::new(Counting {
            spec: CollectorSpec::builtin(
                "lv",
                Some("storage"),
                ReportKind::Performance,
                Duration::from_secs(5),
                Duration::from_secs(1),
            ),
            runs: AtomicU64::new(0),
        });
        let runs = || collector.runs.load(Ordering::SeqCst);
        let mut registry = Registry::new();
        registry.register(collector.clone());
        let cache = Arc::new(ReportCache::new(&registry));
        let (stop, shutdown) = watch::channel(false);
        let task = tokio::spawn(run_collector(
            collector.clone(),
            0,
            Arc::clone(&cache),
            "node1".into(),
            shutdown,
            None,
        ));
        // Nobody reads it: the run at start, then nothing for ten minutes.
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(runs(), 1);
        // A read starts a run at once.
        cache.note_read(0);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(runs(), 2);
        // A reader polling every interval keeps it at its interval.
        for _ in 0..12 {
            cache.note_read(0);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        let polled = runs();
        assert!((12..=14).contains(&polled), "{polled}");
        // The reader leaves: it runs on through the demand window, then pauses.
        tokio::time::sleep(Duration::from_secs(600)).await;
        let after = runs() - polled;
        assert!((10..=13).contains(&after), "{after}");
        stop.send_replace(true);
        task.await.unwrap();
    }

    #[test]
    fn jitter_is_stable_and_bounded() {
        let interval = Duration::from_secs(60);
        let a = jitter("node1", "diagnose", interval);
        assert_eq!(a, jitter("node1", "diagnose", interval));
        assert!(a < Duration::from_secs(15));
        assert_eq!(jitter("n", "c", Duration::from_millis(3)), Duration::ZERO);
    }

    #[test]
    fn timestamp_has_microsecond_precision() {
        let stamp = mond_timestamp();
        assert_eq!(stamp % 1000, 0);
        assert!(stamp > 1_700_000_000_000_000_000);
    }
}
