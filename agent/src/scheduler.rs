//! Runs every collector of the registry on its own interval with its own timeout and stores
//! each result in the cache. A failed, timed-out or panicking collection becomes a report whose
//! data carries status code 2 and the error; it never affects another collector.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nodecare_collectors::{CollectError, Collector};
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

/// How often the scheduler re-reads a collector's enablement and interval while it waits, so a
/// change in the cluster's configuration takes effect within this bound.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The shortest interval the scheduler runs any collector at.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Runs `collector` (at `position` in the cache) until `shutdown` changes; a notification on
/// `wake` starts a run at once (a signed check request).
///
/// Before every run, and at least every [`RECHECK`] while waiting, it reads the collector's
/// [`Collector::enabled`] and [`Collector::interval`]: a disabled collector is not run and is
/// left out of the lists; an interval change applies to the run after the current wait
/// (a shorter one at once).
pub async fn run_collector(
    collector: Arc<dyn Collector>,
    position: usize,
    cache: Arc<ReportCache>,
    node: String,
    mut shutdown: watch::Receiver<bool>,
    wake: Option<Arc<tokio::sync::Notify>>,
) {
    let woken = || async {
        match &wake {
            Some(wake) => wake.notified().await,
            None => std::future::pending().await,
        }
    };
    let name = collector.spec().name.clone();
    // A per-node phase, so that the nodes of a cluster do not all run a collector at once.
    let mut phase = jitter(&node, &name, collector.interval().max(MIN_INTERVAL));
    let mut last_start: Option<tokio::time::Instant> = None;
    loop {
        let enabled = collector.enabled();
        if enabled != cache.is_enabled(position) {
            tracing::info!(collector = %name, enabled, "collector configuration changed");
            cache.set_enabled(position, enabled);
        }
        let due = if enabled {
            let interval = collector.interval().max(MIN_INTERVAL);
            // The first run starts at once (fresh data, replacing a stale verdict soon).
            last_start.map(|start| start + interval + phase)
        } else {
            // Wait until it is enabled again; its next run then starts at once.
            last_start = None;
            Some(tokio::time::Instant::now() + RECHECK)
        };
        if let Some(due) = due {
            let now = tokio::time::Instant::now();
            if due > now {
                let wake = due.min(now + RECHECK);
                tokio::select! {
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = shutdown.changed() => return,
                    () = woken() => {
                        tracing::info!(collector = %name, "run requested now");
                        last_start = None;
                    }
                }
                continue;
            }
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
