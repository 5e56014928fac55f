//! nodecare's built-in collectors: everything Ganeti's mond collects, with mond's names,
//! categories, kinds and data shapes, without mond's defects.
//!
//! Each source has a pure parser (`&str -> Result<T, ParseError>`) and a thin collector that does
//! the IO. Every path (the proc root, Ganeti's run directory, tool paths) comes from
//! [`BuiltinConfig`], so tests run on fixtures.
//!
//! | name | category | kind | source |
//! |---|---|---|---|
//! | `cpu-avg-load` | – | 0 | `/proc/stat`, moving window |
//! | `xen-cpu-avg-load` | – | 0 | `xl list`, moving window (`{}` without Xen, as mond) |
//! | `kvm-inst-rss` | – | 0 | KVM pid files + `/proc/<pid>/statm` |
//! | `diskstats` | storage | 0 | `/proc/diskstats` (14, 18 or 20 columns) |
//! | `drbd` | storage | 1 | `/proc/drbd` (8.x) or `drbdsetup status --json` (9.x) |
//! | `inst-status-xen` | instance | 1 | `xl list` + `xl uptime` (Xen nodes only) |
//! | `inst-status-kvm` | instance | 1 | KVM pid files, `/proc/<pid>/stat`, QMP |
//! | `lv` | storage | 0 | `lvs` with a timeout |

pub mod cpu;
pub mod diskstats;
pub mod drbd;
pub mod kvm;
pub mod lv;
pub mod systool;
pub mod xen;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::confd::ViewHandle;
use crate::{CollectError, Collector, Registry};

/// A parse failure that names the line (1-based) and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, field {field}: {reason}")]
pub struct ParseError {
    /// 1-based line number (0 when the input as a whole is wrong).
    pub line: usize,
    /// The field that did not parse.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ParseError {
    /// A parse error at `line` in `field`.
    pub fn new(line: usize, field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            line,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Turns this into a collector error for `source`.
    pub fn into_collect_error(self, source: &Path) -> CollectError {
        CollectError::Parse {
            source_name: source.display().to_string(),
            reason: self.to_string(),
        }
    }
}

/// Parses one unsigned integer field.
pub(crate) fn parse_u64(line: usize, field: &str, text: &str) -> Result<u64, ParseError> {
    text.parse::<u64>()
        .map_err(|_| ParseError::new(line, field, format!("{text:?} is not an unsigned integer")))
}

/// Paths and limits of the built-in collectors.
#[derive(Debug, Clone)]
pub struct BuiltinConfig {
    /// Where procfs is mounted (`/proc`).
    pub proc_root: PathBuf,
    /// Ganeti's run directory (`/var/run/ganeti`): KVM pid files, QMP sockets, reason trails.
    pub ganeti_run_dir: PathBuf,
    /// `lvs`.
    pub lvs_path: PathBuf,
    /// Where sysfs is mounted (`/sys`): the `lv` collector looks for LVM device-mapper devices
    /// there before it forks `lvs`.
    pub sys_root: PathBuf,
    /// LVM's configuration directory (`/etc/lvm`): a volume group has a metadata backup there.
    pub lvm_dir: PathBuf,
    /// `drbdsetup` (DRBD 9 status).
    pub drbdsetup_path: PathBuf,
    /// `xl` (the Xen toolstack); the Xen collectors exist only where it does.
    pub xl_path: PathBuf,
    /// Bounds for every tool run.
    pub tool_timeout: Duration,
    /// The moving window of the cpu load averages (mond: 600 s).
    pub cpu_window: Duration,
    /// How often collectors run unless the cluster configures another interval (mond: 5 s).
    pub default_interval: Duration,
    /// What confd told us about this node and cluster; `None` off a Ganeti cluster.
    pub cluster: Option<ViewHandle>,
    /// The least time without CPU progress before an unresponsive instance counts as hung.
    pub hung_after: Duration,
}

impl Default for BuiltinConfig {
    fn default() -> Self {
        Self {
            proc_root: PathBuf::from("/proc"),
            ganeti_run_dir: PathBuf::from("/var/run/ganeti"),
            lvs_path: PathBuf::from("/sbin/lvs"),
            sys_root: PathBuf::from("/sys"),
            lvm_dir: PathBuf::from("/etc/lvm"),
            drbdsetup_path: PathBuf::from("/usr/sbin/drbdsetup"),
            xl_path: PathBuf::from("/usr/sbin/xl"),
            tool_timeout: Duration::from_secs(10),
            cpu_window: Duration::from_secs(600),
            default_interval: Duration::from_secs(5),
            cluster: None,
            hung_after: Duration::from_secs(30),
        }
    }
}

impl BuiltinConfig {
    /// The defaults for this machine. On a Ganeti node (ssconf lists master candidates and the
    /// cluster key is readable) it also starts the background confd refresher, so collectors
    /// learn the cluster's collector configuration, this node's instances and DRBD minors.
    /// Must be called inside a Tokio runtime.
    pub fn for_node(node_name: &str, hmac_key: &Path) -> Self {
        let mut config = Self::default();
        let ssconf = Path::new("/var/lib/ganeti");
        let servers =
            crate::confd::ConfdClient::servers_from_ssconf(ssconf, crate::confd::DEFAULT_PORT);
        let key = crate::confd::ConfdKey::from_file(hmac_key);
        match (servers, key) {
            (Ok(servers), Ok(key)) => {
                let client = crate::confd::ConfdClient::new(key, servers, Duration::from_secs(5));
                config.cluster = Some(crate::confd::spawn_refresher(
                    client,
                    node_name.to_owned(),
                    Duration::from_secs(15),
                ));
            }
            (Err(error), _) | (_, Err(error)) => {
                tracing::info!(%error, "no confd: built-in collectors use their own configuration");
            }
        }
        config
    }

    /// The limits for one tool run.
    pub fn tool_limits(&self) -> systool::ToolLimits {
        systool::ToolLimits {
            timeout: self.tool_timeout,
            ..systool::ToolLimits::default()
        }
    }

    /// The spec of a built-in collector with the configured interval and a timeout that leaves
    /// room for a tool run.
    pub(crate) fn spec(
        &self,
        name: &str,
        category: Option<&str>,
        kind: nodecare_protocol::ReportKind,
    ) -> crate::CollectorSpec {
        crate::CollectorSpec::builtin(
            name,
            category,
            kind,
            self.default_interval,
            self.tool_timeout + Duration::from_secs(2),
        )
    }

    /// Whether the Xen toolstack is installed.
    pub fn has_xen(&self) -> bool {
        systool::tool_exists(&self.xl_path)
    }
}

/// Registers every built-in collector that applies on this node, in mond's list order
/// (`xen-cpu-avg-load` everywhere, reporting `{}` without Xen as mond does; `inst-status-xen`
/// only where `xl` exists, as mond only activates it on Xen clusters). On a Ganeti node (`config.cluster` set) each one follows
/// the cluster's data collector configuration (see [`ClusterGated`]).
pub fn register_all(registry: &mut Registry, config: &BuiltinConfig) {
    let xen = config.has_xen();
    let mut collectors: Vec<Arc<dyn Collector>> = vec![
        Arc::new(cpu::CpuAvgLoad::new(config)),
        Arc::new(xen::XenCpuAvgLoad::new(config)),
    ];
    collectors.push(Arc::new(kvm::KvmInstRss::new(config)));
    collectors.push(Arc::new(diskstats::Diskstats::new(config)));
    collectors.push(Arc::new(drbd::Drbd::new(config)));
    if xen {
        collectors.push(Arc::new(xen::InstStatusXen::new(config)));
    }
    collectors.push(Arc::new(kvm::InstStatusKvm::new(config)));
    collectors.push(Arc::new(lv::Lv::new(config)));
    for collector in collectors {
        match &config.cluster {
            Some(view) => registry.register(Arc::new(ClusterGated::new(collector, view.clone()))),
            None => registry.register(collector),
        }
    }
}

/// The shortest collector interval the agent accepts from the cluster: a misconfigured tiny
/// interval must not turn a collector into a busy loop.
pub const MIN_CLUSTER_INTERVAL: Duration = Duration::from_secs(1);

/// Applies the cluster's data collector configuration (`gnt-cluster modify
/// --enabled-data-collectors` / `--data-collector-interval`, read from confd in the background)
/// to a collector: a disabled collector is neither run nor listed (as in mond), and the
/// cluster's interval is honoured (mond ignores it), floored at [`MIN_CLUSTER_INTERVAL`].
/// Collectors the cluster does not know, or an unreachable confd, leave the collector on its
/// own schedule.
#[derive(Debug)]
pub struct ClusterGated {
    inner: Arc<dyn Collector>,
    view: ViewHandle,
}

impl ClusterGated {
    /// Gates `inner` by the cluster view.
    pub fn new(inner: Arc<dyn Collector>, view: ViewHandle) -> Self {
        Self { inner, view }
    }

    /// Whether the cluster currently enables this collector.
    pub fn is_active(&self) -> bool {
        self.view.current().is_active(&self.inner.spec().name)
    }
}

/// The interval to run a collector at: the cluster's, floored, or `own` when the cluster does
/// not configure it. Pure.
pub fn effective_interval(
    cluster: Option<crate::confd::CollectorConfig>,
    own: Duration,
) -> Duration {
    match cluster {
        Some(config) => config.interval.max(MIN_CLUSTER_INTERVAL),
        None => own,
    }
}

impl Collector for ClusterGated {
    fn spec(&self) -> &crate::CollectorSpec {
        self.inner.spec()
    }

    fn collect(&self) -> crate::CollectFuture<'_> {
        Box::pin(async move {
            // The scheduler does not run disabled collectors; this covers a run that was
            // already due when the cluster disabled it.
            if !self.is_active() {
                return Err(CollectError::NotApplicable(
                    "disabled by the cluster (gnt-cluster modify --enabled-data-collectors)"
                        .to_owned(),
                ));
            }
            self.inner.collect().await
        })
    }

    fn enabled(&self) -> bool {
        self.is_active() && self.inner.enabled()
    }

    fn pace(&self) -> crate::Pace {
        self.inner.pace()
    }

    fn settings_changes(&self) -> Option<ViewHandle> {
        Some(self.view.clone())
    }

    fn interval(&self) -> Duration {
        let config = self
            .view
            .current()
            .collector_config(&self.inner.spec().name);
        effective_interval(config, self.inner.interval())
    }
}

/// Reads a whole file as text, as a collector error on failure.
pub(crate) async fn read_text(path: &Path) -> Result<String, CollectError> {
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|error| CollectError::Source {
            source_name: path.display().to_string(),
            reason: error.to_string(),
        })?;
    String::from_utf8(bytes).map_err(|_| CollectError::Parse {
        source_name: path.display().to_string(),
        reason: "not valid UTF-8".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confd::{ClusterView, CollectorConfig};
    use std::collections::BTreeMap;

    #[derive(Debug)]
    struct Fixed(crate::CollectorSpec);

    impl Collector for Fixed {
        fn spec(&self) -> &crate::CollectorSpec {
            &self.0
        }
        fn collect(&self) -> crate::CollectFuture<'_> {
            Box::pin(async { Ok(serde_json::Value::Null) })
        }
    }

    fn config(active: bool, micros: u64) -> CollectorConfig {
        CollectorConfig {
            active,
            interval: Duration::from_micros(micros),
        }
    }

    #[test]
    fn cluster_interval_is_honoured_with_a_floor() {
        let own = Duration::from_secs(5);
        assert_eq!(effective_interval(None, own), own);
        assert_eq!(
            effective_interval(Some(config(true, 60_000_000)), own),
            Duration::from_secs(60)
        );
        assert_eq!(
            effective_interval(Some(config(true, 2_000_000)), own),
            Duration::from_secs(2)
        );
        assert_eq!(
            effective_interval(Some(config(true, 1)), own),
            MIN_CLUSTER_INTERVAL
        );
        assert_eq!(
            effective_interval(Some(config(true, 0)), own),
            MIN_CLUSTER_INTERVAL
        );
    }

    #[tokio::test]
    async fn gate_follows_the_published_view() {
        let inner: Arc<dyn Collector> = Arc::new(Fixed(crate::CollectorSpec::builtin(
            "lv",
            Some("storage"),
            nodecare_protocol::ReportKind::Performance,
            Duration::from_secs(5),
            Duration::from_secs(1),
        )));
        let (sender, view) = ViewHandle::channel(ClusterView::default());
        let gated = ClusterGated::new(inner, view);
        // No answer from confd yet: fail-open, own interval.
        assert!(gated.enabled());
        assert_eq!(gated.interval(), Duration::from_secs(5));
        let publish = |collectors: BTreeMap<String, CollectorConfig>| {
            sender.send_replace(Arc::new(ClusterView {
                data_collectors: Some(collectors),
                ..ClusterView::default()
            }));
        };
        publish(BTreeMap::from([(
            "lv".to_owned(),
            config(false, 5_000_000),
        )]));
        assert!(!gated.enabled());
        assert!(matches!(
            gated.collect().await,
            Err(CollectError::NotApplicable(_))
        ));
        publish(BTreeMap::from([("lv".to_owned(), config(true, 3_000_000))]));
        assert!(gated.enabled());
        assert_eq!(gated.interval(), Duration::from_secs(3));
        assert!(gated.collect().await.is_ok());
        // A cluster that does not know the collector leaves it alone.
        publish(BTreeMap::from([(
            "drbd".to_owned(),
            config(false, 5_000_000),
        )]));
        assert!(gated.enabled());
        assert_eq!(gated.interval(), Duration::from_secs(5));
    }
}
