//! Collectors: the plugin trait every data source implements, and the registry that lists them in
//! mond's order.
//!
//! A collector produces the `data` of one mond report. The agent's scheduler runs each collector
//! on its own interval with its own timeout and caches the result, so a slow or failing collector
//! never delays or breaks another one.

pub mod diagnose;
pub mod runner;
pub mod whitelist;

pub mod builtin;
pub mod confd;
pub mod plugin;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use nodecare_protocol::ReportKind;
use nodecare_protocol::report::{BUILTIN_COLLECTOR_VERSION, BUILTIN_FORMAT_VERSION};
use serde_json::Value;

/// What a collector is: its identity in mond's API and how often it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorSpec {
    /// Report name, e.g. `cpu-avg-load`.
    pub name: String,
    /// Report category, or `None` (listed as `"default"`).
    pub category: Option<String>,
    /// Performance or status.
    pub kind: ReportKind,
    /// Collector version (`"B"` for built-ins).
    pub version: String,
    /// Data format version.
    pub format_version: u32,
    /// How often the scheduler runs it.
    pub interval: Duration,
    /// How long one run may take before it is abandoned.
    pub timeout: Duration,
}

impl CollectorSpec {
    /// A built-in collector's spec with mond's version fields.
    pub fn builtin(
        name: &str,
        category: Option<&str>,
        kind: ReportKind,
        interval: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            name: name.to_owned(),
            category: category.map(str::to_owned),
            kind,
            version: BUILTIN_COLLECTOR_VERSION.to_owned(),
            format_version: BUILTIN_FORMAT_VERSION,
            interval,
            timeout,
        }
    }
}

/// Why a collection failed. The scheduler turns it into a status-2 report; it never fails
/// another collector or the HTTP response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    /// A source (file, command) could not be read.
    #[error("cannot read {source_name}: {reason}")]
    Source {
        /// The file or command.
        source_name: String,
        /// What went wrong.
        reason: String,
    },
    /// The source was read but its content did not parse.
    #[error("cannot parse {source_name}: {reason}")]
    Parse {
        /// The file or command.
        source_name: String,
        /// What went wrong, naming line and field where possible.
        reason: String,
    },
    /// The collection did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The collector does not apply on this node (e.g. no Xen toolstack).
    #[error("not applicable on this node: {0}")]
    NotApplicable(String),
}

/// The future a collection returns.
pub type CollectFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, CollectError>> + Send + 'a>>;

/// How the agent schedules a collector whose report nobody reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// At its interval, always: a moving window that needs every sample, or data the agent
    /// itself consumes (the diagnose verdict).
    Steady,
    /// At its interval while someone reads its report; paused when nobody has for a while
    /// (the first read after a pause serves the cached report and starts a run at once). For
    /// collectors that fork tools or whose data only a reader needs.
    OnDemand,
}

/// A data source that produces the `data` of one mond report.
pub trait Collector: Send + Sync + std::fmt::Debug {
    /// Identity and schedule.
    fn spec(&self) -> &CollectorSpec;

    /// Collects once. Stateful collectors (moving averages) keep their state inside.
    fn collect(&self) -> CollectFuture<'_>;

    /// Whether the collector runs and is listed now. The cluster can disable a collector at
    /// run time (`gnt-cluster modify --enabled-data-collectors`); the scheduler checks this
    /// before every run and whenever [`Collector::settings_changes`] notifies.
    fn enabled(&self) -> bool {
        true
    }

    /// How often the scheduler runs the collector now: the spec's interval unless the cluster
    /// configures another one (`gnt-cluster modify --data-collector-interval`).
    fn interval(&self) -> Duration {
        self.spec().interval
    }

    /// Whether the collector runs when nobody reads its report.
    fn pace(&self) -> Pace {
        Pace::Steady
    }

    /// What changes when [`Collector::enabled`] or [`Collector::interval`] may have changed (the
    /// cluster's configuration from confd); `None`: they never change. The scheduler waits on
    /// it instead of polling.
    fn settings_changes(&self) -> Option<confd::ViewHandle> {
        None
    }
}

/// The collectors of one agent, in the order mond lists them.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    collectors: Vec<Arc<dyn Collector>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a collector; a later one with the same name replaces the earlier one in place.
    pub fn register(&mut self, collector: Arc<dyn Collector>) {
        let name = collector.spec().name.clone();
        if let Some(slot) = self
            .collectors
            .iter_mut()
            .find(|existing| existing.spec().name == name)
        {
            *slot = collector;
        } else {
            self.collectors.push(collector);
        }
    }

    /// All collectors in list order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Collector>> {
        self.collectors.iter()
    }

    /// The collector with this category and name, as mond resolves `/1/report/<category>/<name>`.
    pub fn find(&self, category: &str, name: &str) -> Option<&Arc<dyn Collector>> {
        self.collectors.iter().find(|collector| {
            let spec = collector.spec();
            spec.name == name
                && spec
                    .category
                    .as_deref()
                    .unwrap_or(nodecare_protocol::report::DEFAULT_CATEGORY)
                    == category
        })
    }

    /// Number of collectors.
    pub fn len(&self) -> usize {
        self.collectors.len()
    }

    /// Whether there is no collector.
    pub fn is_empty(&self) -> bool {
        self.collectors.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed(CollectorSpec, Value);

    impl Collector for Fixed {
        fn spec(&self) -> &CollectorSpec {
            &self.0
        }
        fn collect(&self) -> CollectFuture<'_> {
            let value = self.1.clone();
            Box::pin(async move { Ok(value) })
        }
    }

    fn fixed(name: &str, category: Option<&str>, value: Value) -> Arc<dyn Collector> {
        Arc::new(Fixed(
            CollectorSpec::builtin(
                name,
                category,
                ReportKind::Performance,
                Duration::from_secs(5),
                Duration::from_secs(1),
            ),
            value,
        ))
    }

    #[test]
    fn registry_keeps_order_and_resolves_default_category() {
        let mut registry = Registry::new();
        registry.register(fixed("cpu-avg-load", None, Value::Null));
        registry.register(fixed("diskstats", Some("storage"), Value::Null));
        registry.register(fixed("cpu-avg-load", None, Value::Bool(true)));
        let names: Vec<_> = registry.iter().map(|c| c.spec().name.clone()).collect();
        assert_eq!(names, ["cpu-avg-load", "diskstats"]);
        assert!(registry.find("default", "cpu-avg-load").is_some());
        assert!(registry.find("storage", "diskstats").is_some());
        assert!(registry.find("storage", "cpu-avg-load").is_none());
        assert!(registry.find("collector", "cpu-avg-load").is_none());
    }
}
