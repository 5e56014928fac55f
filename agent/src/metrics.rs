//! `/metrics`: the agent's state in the Prometheus text exposition format (version 0.0.4,
//! also accepted by OpenMetrics scrapers), encoded by `prometheus-client`.
//!
//! The HTTP layer fills a [`MetricsInput`] from what it already has (cached reports, the latest
//! diagnose run, signing and refusal counters) and serves [`render`]'s output with
//! [`CONTENT_TYPE`]. Rendering is pure, so it is tested without a server.

use std::collections::BTreeMap;
use std::time::Duration;

use nodecare_daemon::metrics::escape_label;
use nodecare_protocol::repair::RefusalReason;
use nodecare_protocol::report::DEFAULT_CATEGORY;
use nodecare_protocol::{Report, ReportKind};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as MetricFamily;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::atomic::AtomicU64;

/// The `Content-Type` of the rendered text.
pub use nodecare_daemon::metrics::CONTENT_TYPE;

/// Most numeric leaves exported from one plugin report (keeps a chatty plugin from flooding
/// the scrape).
pub const MAX_PLUGIN_VALUES: usize = 500;

/// Everything `/metrics` shows.
#[derive(Debug, Clone, Default)]
pub struct MetricsInput {
    /// The latest report of every collector, with its age.
    pub reports: Vec<ReportMetrics>,
    /// The latest run of every diagnose script.
    pub scripts: Vec<ScriptMetrics>,
    /// The published diagnose verdict.
    pub verdict: Option<VerdictMetrics>,
    /// Signing and refusal counters.
    pub signatures: SignatureMetrics,
}

/// One collector's latest report.
#[derive(Debug, Clone)]
pub struct ReportMetrics {
    /// The report.
    pub report: Report,
    /// Time since it was collected.
    pub age: Duration,
}

/// How a script run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptExit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal, not sent by the agent.
    Signal(i32),
    /// Ran past its time limit; the agent killed its process group.
    TimedOut,
    /// Wrote more than the stdout cap; the agent killed its process group.
    OutputOverflow,
    /// Refused by the whitelist: never started.
    Refused,
    /// Could not be started, or its output could not be read.
    NotStarted,
}

impl ScriptExit {
    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Code(_) => "exited",
            Self::Signal(_) => "signalled",
            Self::TimedOut => "timed-out",
            Self::OutputOverflow => "output-overflow",
            Self::Refused => "refused",
            Self::NotStarted => "not-started",
        }
    }

    fn started(self) -> bool {
        !matches!(self, Self::Refused | Self::NotStarted)
    }
}

/// One diagnose script's latest run.
#[derive(Debug, Clone)]
pub struct ScriptMetrics {
    /// Script name.
    pub name: String,
    /// Wall-clock duration of the run, if it ran.
    pub duration: Option<Duration>,
    /// How it ended.
    pub exit: ScriptExit,
    /// Unix time (seconds) of its last successful run.
    pub last_success_unix: Option<f64>,
    /// Its verdict status (`Ok`, `unknown`, `live-repair`, …).
    pub status: String,
}

/// The published verdict.
#[derive(Debug, Clone)]
pub struct VerdictMetrics {
    /// The merged status.
    pub status: String,
    /// Time since the verdict was produced.
    pub age: Duration,
    /// Age after which it counts as stale.
    pub stale_after: Duration,
}

/// Counters of the signing side.
#[derive(Debug, Clone, Default)]
pub struct SignatureMetrics {
    /// Signed envelopes issued.
    pub signed_total: u64,
    /// Verdicts that could not be signed.
    pub sign_failures_total: u64,
    /// Signature verifications of incoming requests that failed, by reason (bad MAC,
    /// expired, replay, …).
    pub verify_failures_total: BTreeMap<String, u64>,
    /// Executables the whitelist refused, by kind (`diagnose-script`, `diagnose-directory`,
    /// `repair`).
    pub whitelist_refusals_total: BTreeMap<String, u64>,
    /// Repair requests refused, by reason.
    pub refusals_total: BTreeMap<String, u64>,
    /// Other requests refused (checks, replicas, long-polls, connections), by (endpoint,
    /// status).
    pub requests_refused_total: BTreeMap<(String, String), u64>,
}

/// Every verdict status, so the one-hot status metric always has all series.
const VERDICT_STATUSES: [&str; 5] = [
    "Ok",
    "unknown",
    "live-repair",
    "evacuate",
    "evacuate-failover",
];

/// The `/proc/diskstats` counters as metric names.
const DISK_FIELDS: [(&str, &str, &str); 11] = [
    (
        "readsNum",
        "nodecare_disk_reads_completed_total",
        "Reads completed.",
    ),
    (
        "mergedReads",
        "nodecare_disk_reads_merged_total",
        "Reads merged.",
    ),
    (
        "secRead",
        "nodecare_disk_sectors_read_total",
        "Sectors read.",
    ),
    (
        "timeRead",
        "nodecare_disk_read_time_milliseconds_total",
        "Milliseconds spent reading.",
    ),
    (
        "writes",
        "nodecare_disk_writes_completed_total",
        "Writes completed.",
    ),
    (
        "mergedWrites",
        "nodecare_disk_writes_merged_total",
        "Writes merged.",
    ),
    (
        "secWritten",
        "nodecare_disk_sectors_written_total",
        "Sectors written.",
    ),
    (
        "timeWrite",
        "nodecare_disk_write_time_milliseconds_total",
        "Milliseconds spent writing.",
    ),
    (
        "ios",
        "nodecare_disk_io_in_progress",
        "I/Os currently in progress.",
    ),
    (
        "timeIO",
        "nodecare_disk_io_time_milliseconds_total",
        "Milliseconds spent doing I/O.",
    ),
    (
        "wIOmillis",
        "nodecare_disk_weighted_io_time_milliseconds_total",
        "Weighted milliseconds spent doing I/O.",
    ),
];

#[derive(Debug)]
struct Family {
    help: &'static str,
    counter: bool,
    samples: Vec<(Vec<(String, String)>, f64)>,
}

/// Families in first-use order, samples grouped per family as the format requires.
#[derive(Debug, Default)]
struct Families {
    order: Vec<String>,
    families: BTreeMap<String, Family>,
}

type LabelSet = Vec<(String, String)>;

impl Families {
    fn add(
        &mut self,
        name: &str,
        help: &'static str,
        counter: bool,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let family = self.families.entry(name.to_owned()).or_insert_with(|| {
            self.order.push(name.to_owned());
            Family {
                help,
                counter,
                samples: Vec::new(),
            }
        });
        let labels = labels
            .iter()
            .map(|(key, value)| ((*key).to_owned(), escape_label(value)))
            .collect();
        family.samples.push((labels, value));
    }

    fn gauge(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], value: f64) {
        self.add(name, help, false, labels, value);
    }

    fn counter(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], value: f64) {
        self.add(name, help, true, labels, value);
    }

    /// The families as a `prometheus-client` registry (a fresh one per scrape: every value
    /// is a snapshot of the agent's state), in the Prometheus text format.
    fn render(&self) -> String {
        let mut registry = Registry::default();
        for name in &self.order {
            let Some(family) = self.families.get(name) else {
                continue;
            };
            // The library adds the final period to the help, and `_total` to counter names.
            let help = family.help.trim_end_matches('.');
            let unlabelled = family.samples.iter().all(|(labels, _)| labels.is_empty());
            let last = family.samples.last().map_or(0.0, |(_, value)| *value);
            if unlabelled && family.counter {
                let metric = Counter::<f64, AtomicU64>::default();
                metric.inc_by(last);
                registry.register(name.trim_end_matches("_total"), help, metric);
            } else if unlabelled {
                let metric = Gauge::<f64, AtomicU64>::default();
                metric.set(last);
                registry.register(name.as_str(), help, metric);
            } else if family.counter {
                let metric = MetricFamily::<LabelSet, Counter<f64, AtomicU64>>::default();
                for (labels, value) in &family.samples {
                    metric.get_or_create(labels).inc_by(*value);
                }
                registry.register(name.trim_end_matches("_total"), help, metric);
            } else {
                let metric = MetricFamily::<LabelSet, Gauge<f64, AtomicU64>>::default();
                for (labels, value) in &family.samples {
                    metric.get_or_create(labels).set(*value);
                }
                registry.register(name.as_str(), help, metric);
            }
        }
        nodecare_daemon::metrics::render(&registry)
    }
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// Whether a report is the scheduler's placeholder for a failed collection: only a
/// `status` with code 2.
fn is_failure(report: &Report) -> bool {
    match &report.data {
        Value::Object(map) => {
            map.len() == 1
                && map
                    .get("status")
                    .and_then(|s| s.get("code"))
                    .and_then(Value::as_u64)
                    == Some(2)
        }
        _ => false,
    }
}

fn status_code(data: &Value) -> Option<f64> {
    data.get("status")?.get("code").and_then(number)
}

fn collector_families(families: &mut Families, entry: &ReportMetrics) {
    let report = &entry.report;
    let name = report.name.as_str();
    let category = report.category.as_deref().unwrap_or(DEFAULT_CATEGORY);
    let labels = [("collector", name), ("category", category)];
    families.gauge(
        "nodecare_collector_age_seconds",
        "Seconds since the collector's latest report was produced.",
        &labels,
        entry.age.as_secs_f64(),
    );
    let failed = is_failure(report);
    families.gauge(
        "nodecare_collector_failed",
        "1 if the collector's latest run failed (the report carries status 2 and the error).",
        &labels,
        if failed { 1.0 } else { 0.0 },
    );
    if report.kind == ReportKind::Status
        && let Some(code) = status_code(&report.data)
    {
        families.gauge(
            "nodecare_collector_status_code",
            "mond status code of a status collector: 0 ok, 1 being fixed, 2 unknown, 4 bad.",
            &labels,
            code,
        );
    }
    if failed {
        return;
    }
    let data = &report.data;
    match name {
        "cpu-avg-load" => {
            if let Some(cpus) = data.get("cpus").and_then(Value::as_array) {
                for (index, load) in cpus.iter().enumerate() {
                    if let Some(load) = number(load) {
                        let cpu = index.to_string();
                        families.gauge(
                            "nodecare_cpu_load",
                            "CPU load over the moving window, 1.0 = one busy CPU.",
                            &[("cpu", &cpu)],
                            load,
                        );
                    }
                }
            }
            if let Some(total) = data.get("cpu_total").and_then(number) {
                families.gauge(
                    "nodecare_cpu_load_total",
                    "Load of all CPUs together over the moving window.",
                    &[],
                    total,
                );
            }
        }
        "kvm-inst-rss" => {
            for (instance, pages) in data.as_object().into_iter().flatten() {
                if let Some(pages) = number(pages) {
                    families.gauge(
                        "nodecare_instance_rss_pages",
                        "Resident memory of a KVM instance in 4 KiB pages.",
                        &[("instance", instance)],
                        pages,
                    );
                }
            }
        }
        "xen-cpu-avg-load" => {
            for (instance, load) in data.as_object().into_iter().flatten() {
                if let Some(load) = number(load) {
                    families.gauge(
                        "nodecare_instance_cpu_load",
                        "vCPUs used by a Xen instance over the moving window.",
                        &[("instance", instance)],
                        load,
                    );
                }
            }
        }
        "diskstats" => {
            for device in data.as_array().into_iter().flatten() {
                let Some(device_name) = device.get("name").and_then(Value::as_str) else {
                    continue;
                };
                for (field, metric, help) in DISK_FIELDS {
                    if let Some(value) = device.get(field).and_then(number) {
                        if metric.ends_with("_total") {
                            families.counter(metric, help, &[("device", device_name)], value);
                        } else {
                            families.gauge(metric, help, &[("device", device_name)], value);
                        }
                    }
                }
            }
        }
        "drbd" => drbd_families(families, data),
        "lv" => {
            for volume in data.as_array().into_iter().flatten() {
                let text = |key: &str| {
                    volume
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                let (vg, lv, instance) = (text("vg_name"), text("name"), text("instance"));
                if let Some(size) = volume.get("seg_size").and_then(number) {
                    let start = text("seg_start_pe");
                    let start = volume
                        .get("seg_start_pe")
                        .map(Value::to_string)
                        .unwrap_or(start);
                    families.gauge(
                        "nodecare_lv_segment_size_bytes",
                        "Size of a logical volume segment.",
                        &[
                            ("vg", &vg),
                            ("lv", &lv),
                            ("segment_start_pe", &start),
                            ("instance", &instance),
                        ],
                        size,
                    );
                }
            }
        }
        "inst-status-kvm" | "inst-status-xen" => {
            for instance in data
                .get("instances")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let text = |key: &str| {
                    instance
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                if let Some(code) = status_code(instance) {
                    families.gauge(
                        "nodecare_instance_status_code",
                        "Per-instance status code (0 ok, 2 unknown/hung, 4 bad) with admin and actual state.",
                        &[("collector", name), ("instance", &text("name")), ("admin_state", &text("adminState")), ("actual_state", &text("actualState"))],
                        code,
                    );
                }
            }
        }
        _ if report.version != nodecare_protocol::report::BUILTIN_COLLECTOR_VERSION
            && name != "diagnose" =>
        {
            let mut leaves = Vec::new();
            numeric_leaves(data, String::new(), &mut leaves);
            for (path, value) in leaves.into_iter().take(MAX_PLUGIN_VALUES) {
                families.gauge(
                    "nodecare_plugin_value",
                    "Numeric values of plugin reports, by JSON path.",
                    &[("collector", name), ("path", &path)],
                    value,
                );
            }
        }
        _ => {}
    }
}

fn drbd_families(families: &mut Families, data: &Value) {
    for device in data
        .get("deviceInfos")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(minor) = device.get("minor").map(Value::to_string) else {
            continue;
        };
        let instance = device
            .get("instance")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let state = device
            .get("connectionState")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        families.gauge(
            "nodecare_drbd_device_info",
            "DRBD minor with its connection state and roles (value always 1).",
            &[
                ("minor", &minor),
                ("instance", &instance),
                ("connection_state", &state),
                (
                    "local_role",
                    device
                        .get("localRole")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                ),
                (
                    "local_disk",
                    device
                        .get("localState")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                ),
                (
                    "remote_disk",
                    device
                        .get("remoteState")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                ),
            ],
            1.0,
        );
        let perf = device.get("perfIndicators");
        let labels = [("minor", minor.as_str()), ("instance", instance.as_str())];
        if let Some(oos) = perf.and_then(|p| p.get("outOfSync")).and_then(number) {
            families.gauge(
                "nodecare_drbd_out_of_sync_kibibytes",
                "KiB out of sync with the peer.",
                &labels,
                oos,
            );
        }
        for (field, metric, help) in [
            (
                "networkSend",
                "nodecare_drbd_network_sent_kibibytes_total",
                "KiB sent to the peer.",
            ),
            (
                "networkReceive",
                "nodecare_drbd_network_received_kibibytes_total",
                "KiB received from the peer.",
            ),
            (
                "diskWrite",
                "nodecare_drbd_disk_written_kibibytes_total",
                "KiB written to the local disk.",
            ),
            (
                "diskRead",
                "nodecare_drbd_disk_read_kibibytes_total",
                "KiB read from the local disk.",
            ),
        ] {
            if let Some(value) = perf.and_then(|p| p.get(field)).and_then(number) {
                families.counter(metric, help, &labels, value);
            }
        }
        if let Some(percentage) = device
            .get("syncStatus")
            .and_then(|s| s.get("percentage"))
            .and_then(number)
        {
            families.gauge(
                "nodecare_drbd_sync_percent",
                "Resynchronisation progress in percent.",
                &labels,
                percentage,
            );
        }
    }
}

fn numeric_leaves(value: &Value, path: String, out: &mut Vec<(String, f64)>) {
    if out.len() >= MAX_PLUGIN_VALUES {
        return;
    }
    match value {
        Value::Number(number) => {
            if let Some(number) = number.as_f64() {
                out.push((path, number));
            }
        }
        Value::Bool(flag) => out.push((path, if *flag { 1.0 } else { 0.0 })),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let child = if path.is_empty() {
                    index.to_string()
                } else {
                    format!("{path}.{index}")
                };
                numeric_leaves(item, child, out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                numeric_leaves(item, child, out);
            }
        }
        Value::Null | Value::String(_) => {}
    }
}

/// Renders the whole page.
pub fn render(input: &MetricsInput) -> String {
    let mut families = Families::default();
    for entry in &input.reports {
        collector_families(&mut families, entry);
    }
    for script in &input.scripts {
        let labels = [("script", script.name.as_str())];
        if let Some(duration) = script.duration {
            families.gauge(
                "nodecare_diagnose_script_duration_seconds",
                "Duration of the script's latest run.",
                &labels,
                duration.as_secs_f64(),
            );
        }
        let (code, signal) = match script.exit {
            ScriptExit::Code(code) => (f64::from(code), 0.0),
            ScriptExit::Signal(signal) => (-1.0, f64::from(signal)),
            // The agent killed the group with SIGKILL.
            ScriptExit::TimedOut | ScriptExit::OutputOverflow => (-1.0, 9.0),
            ScriptExit::Refused | ScriptExit::NotStarted => (-1.0, 0.0),
        };
        families.gauge(
            "nodecare_diagnose_script_exit_code",
            "Exit code of the script's latest run (-1: killed or not started).",
            &labels,
            code,
        );
        families.gauge(
            "nodecare_diagnose_script_signal",
            "Signal that ended the script's latest run (0: none).",
            &labels,
            signal,
        );
        families.gauge(
            "nodecare_diagnose_script_started",
            "1 if the script's latest run started (0: refused by the whitelist or failed to spawn).",
            &labels,
            if script.exit.started() { 1.0 } else { 0.0 },
        );
        families.gauge(
            "nodecare_diagnose_script_outcome",
            "How the script's latest run ended (value always 1).",
            &[
                ("script", script.name.as_str()),
                ("outcome", script.exit.label()),
            ],
            1.0,
        );
        if let Some(when) = script.last_success_unix {
            families.gauge(
                "nodecare_diagnose_script_last_success_timestamp_seconds",
                "Unix time of the script's last successful run.",
                &labels,
                when,
            );
        }
        for status in VERDICT_STATUSES {
            families.gauge(
                "nodecare_diagnose_script_verdict",
                "The script's latest verdict (one series per status, 1 for the current one).",
                &[("script", script.name.as_str()), ("status", status)],
                if script.status == status { 1.0 } else { 0.0 },
            );
        }
    }
    if let Some(verdict) = &input.verdict {
        families.gauge(
            "nodecare_verdict_age_seconds",
            "Seconds since the published verdict was produced.",
            &[],
            verdict.age.as_secs_f64(),
        );
        families.gauge(
            "nodecare_verdict_stale",
            "1 if the published verdict is older than its staleness limit.",
            &[],
            if verdict.age > verdict.stale_after {
                1.0
            } else {
                0.0
            },
        );
        for status in VERDICT_STATUSES {
            families.gauge(
                "nodecare_verdict_status",
                "The node's merged verdict (one series per status, 1 for the current one).",
                &[("status", status)],
                if verdict.status == status { 1.0 } else { 0.0 },
            );
        }
    }
    families.counter(
        "nodecare_signed_envelopes_total",
        "Signed verdict envelopes issued.",
        &[],
        input.signatures.signed_total as f64,
    );
    families.counter(
        "nodecare_sign_failures_total",
        "Verdicts that could not be signed (no key, sequence number not persisted).",
        &[],
        input.signatures.sign_failures_total as f64,
    );
    for (reason, count) in &input.signatures.verify_failures_total {
        families.counter(
            "nodecare_signature_verify_failures_total",
            "Signature verifications of incoming requests that failed, by reason.",
            &[("reason", reason)],
            *count as f64,
        );
    }
    for (kind, count) in &input.signatures.whitelist_refusals_total {
        families.counter(
            "nodecare_whitelist_refusals_total",
            "Executables or directories the whitelist refused, by kind.",
            &[("kind", kind)],
            *count as f64,
        );
    }
    for (reason, count) in &input.signatures.refusals_total {
        families.counter(
            "nodecare_repair_refusals_total",
            "Repair requests refused (nothing ran), by reason.",
            &[("reason", reason)],
            *count as f64,
        );
    }
    for ((endpoint, status), count) in &input.signatures.requests_refused_total {
        families.counter(
            "nodecare_agent_requests_refused_total",
            "Requests refused by the check, replica and long-poll endpoints and connections closed beyond the caps, by endpoint and HTTP status.",
            &[("endpoint", endpoint), ("status", status)],
            *count as f64,
        );
    }
    families.render()
}

/// Builds the input from the report cache: every collector's report and age, the diagnose
/// verdict (its age, staleness after `stale_after`) and each script's verdict status.
/// Script durations, exit statuses and signing counters are added by callers that track them.
pub fn input_from_cache(cache: &crate::cache::ReportCache, stale_after: Duration) -> MetricsInput {
    let snapshot = cache.snapshot();
    let mut input = MetricsInput::default();
    for (cached, _) in snapshot
        .reports
        .iter()
        .zip(&snapshot.enabled)
        .filter_map(|(cached, enabled)| cached.as_ref().map(|cached| (cached, *enabled)))
        .filter(|(_, enabled)| *enabled)
    {
        let Ok(report) = serde_json::from_slice::<Report>(&cached.body) else {
            continue;
        };
        let age = cached.collected.elapsed();
        if report.name == "diagnose" {
            if let Some(status) = report.data.get("status").and_then(Value::as_str) {
                input.verdict = Some(VerdictMetrics {
                    status: status.to_owned(),
                    age,
                    stale_after,
                });
            }
            for (script, verdict) in report
                .data
                .get("details")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                input.scripts.push(ScriptMetrics {
                    name: script.clone(),
                    duration: None,
                    exit: ScriptExit::NotStarted,
                    last_success_unix: None,
                    status: verdict
                        .get("status")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown")
                        .to_owned(),
                });
            }
        }
        input.reports.push(ReportMetrics { report, age });
    }
    input
}

/// Refusal reasons that are failed signature verifications of an incoming request.
const VERIFY_FAILURE_REASONS: [RefusalReason; 4] = [
    RefusalReason::BadSignature,
    RefusalReason::Expired,
    RefusalReason::Replayed,
    RefusalReason::WrongNode,
];

/// Adds what the diagnose collector, the signer and the repair service counted to `input`
/// (whose scripts come from the cached verdict): each script's latest run and last success,
/// signing counters, whitelist refusals and repair refusals by reason.
pub fn add_counters(
    input: &mut MetricsInput,
    diagnose: &nodecare_collectors::diagnose::DiagnoseStats,
    signing: &crate::signing::SignCounters,
    repair_refusals: Option<&BTreeMap<&'static str, u64>>,
) {
    use nodecare_collectors::diagnose::ScriptOutcome;
    use nodecare_collectors::runner::ExitStatus;
    let mut scripts = Vec::new();
    for (name, stats) in &diagnose.scripts {
        let exit = match stats.last.outcome {
            ScriptOutcome::Exited(ExitStatus::Code(code)) => ScriptExit::Code(code),
            ScriptOutcome::Exited(ExitStatus::Signal(signal)) => ScriptExit::Signal(signal),
            ScriptOutcome::TimedOut => ScriptExit::TimedOut,
            ScriptOutcome::OutputOverflow => ScriptExit::OutputOverflow,
            ScriptOutcome::Refused => ScriptExit::Refused,
            ScriptOutcome::Failed => ScriptExit::NotStarted,
        };
        scripts.push(ScriptMetrics {
            name: name.clone(),
            duration: stats.last.duration,
            exit,
            #[allow(
                clippy::cast_precision_loss,
                reason = "milliseconds since 1970 fit in f64"
            )]
            last_success_unix: stats.last_success_ms.map(|ms| ms as f64 / 1000.0),
            status: stats.last.status.as_str().to_owned(),
        });
    }
    // Runs since the start know more than the cached verdict (which may be restored from
    // before a restart, without run details); keep the cached entries only before the first run.
    if diagnose.runs_total > 0 {
        input.scripts = scripts;
    }
    input.signatures.signed_total = signing.signed();
    input.signatures.sign_failures_total = signing.failed();
    input.signatures.whitelist_refusals_total = BTreeMap::from([
        ("diagnose-script".to_owned(), diagnose.script_refusals_total),
        (
            "diagnose-directory".to_owned(),
            diagnose.directory_refusals_total,
        ),
    ]);
    if let Some(refusals) = repair_refusals {
        input.signatures.whitelist_refusals_total.insert(
            "repair".to_owned(),
            refusals
                .get(RefusalReason::NotWhitelisted.as_str())
                .copied()
                .unwrap_or(0),
        );
        input.signatures.verify_failures_total = VERIFY_FAILURE_REASONS
            .iter()
            .map(|reason| {
                (
                    reason.as_str().to_owned(),
                    refusals.get(reason.as_str()).copied().unwrap_or(0),
                )
            })
            .collect();
        input.signatures.refusals_total = refusals
            .iter()
            .map(|(reason, count)| ((*reason).to_owned(), *count))
            .collect();
    }
}

/// Where the `/metrics` figures come from.
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a> {
    /// The report cache.
    pub cache: &'a crate::cache::ReportCache,
    /// Age after which the published verdict counts as stale.
    pub stale_after: Duration,
    /// The diagnose collector.
    pub diagnose: &'a nodecare_collectors::diagnose::DiagnoseCollector,
    /// The signer's counters.
    pub sign_counters: &'a crate::signing::SignCounters,
    /// The repair service, when it runs.
    pub repair: Option<&'a crate::repair::RepairService>,
    /// Refused requests of the other endpoints.
    pub refusals: &'a crate::refusals::Refusals,
}

/// The `/metrics` body (served with [`CONTENT_TYPE`]).
pub fn text(sources: Sources<'_>) -> String {
    let mut input = input_from_cache(sources.cache, sources.stale_after);
    let refusals = sources
        .repair
        .map(crate::repair::RepairService::refusal_counts);
    add_counters(
        &mut input,
        &sources.diagnose.stats(),
        sources.sign_counters,
        refusals.as_ref(),
    );
    input.signatures.requests_refused_total = sources
        .refusals
        .totals()
        .into_iter()
        .map(|((endpoint, status), count)| {
            ((endpoint.as_str().to_owned(), status.to_string()), count)
        })
        .collect();
    render(&input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(
        name: &str,
        category: Option<&str>,
        kind: ReportKind,
        version: &str,
        data: Value,
    ) -> ReportMetrics {
        ReportMetrics {
            report: Report {
                name: name.into(),
                version: version.into(),
                format_version: 1,
                timestamp: 0,
                category: category.map(str::to_owned),
                kind,
                data,
            },
            age: Duration::from_millis(1500),
        }
    }

    /// Whether `text` has the sample `expected` (`series value`), values compared as numbers.
    fn has(text: &str, expected: &str) -> bool {
        let (series, value) = expected.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap();
        text.lines().any(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
                .and_then(|v| v.parse::<f64>().ok())
                == Some(value)
        })
    }

    /// Minimal exposition-format check: every sample line belongs to the family declared
    /// right before it and parses as `name{labels} value`.
    fn assert_well_formed(text: &str) {
        let mut current = String::new();
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap().to_owned();
                assert!(seen.insert(name.clone()), "family {name} declared twice");
                current = name;
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap();
            assert_eq!(&line[..name_end], current, "{line}");
            let value = line.rsplit(' ').next().unwrap();
            assert!(
                value.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&value),
                "{line}"
            );
        }
    }

    fn rich_input() -> MetricsInput {
        MetricsInput {
            reports: vec![
                report(
                    "cpu-avg-load",
                    None,
                    ReportKind::Performance,
                    "B",
                    json!({"cpu_number": 2, "cpus": [0.5, 0.25], "cpu_total": 0.75}),
                ),
                report(
                    "kvm-inst-rss",
                    None,
                    ReportKind::Performance,
                    "B",
                    json!({"inst\"1": 2560}),
                ),
                report(
                    "diskstats",
                    Some("storage"),
                    ReportKind::Performance,
                    "B",
                    json!([{"major": 8, "minor": 0, "name": "sda", "readsNum": 10, "mergedReads": 0, "secRead": 80, "timeRead": 4, "writes": 1, "mergedWrites": 0, "secWritten": 8, "timeWrite": 1, "ios": 0, "timeIO": 5, "wIOmillis": 5}]),
                ),
                report(
                    "drbd",
                    Some("storage"),
                    ReportKind::Status,
                    "B",
                    json!({"status": {"code": 4, "message": "\n0: x"}, "versionInfo": {}, "deviceInfos": [{"minor": 0, "connectionState": "StandAlone", "localRole": "Primary", "localState": "UpToDate", "remoteState": "DUnknown", "perfIndicators": {"networkSend": 1, "networkReceive": 2, "diskWrite": 3, "diskRead": 4, "outOfSync": 1024}, "instance": "inst1"}, {"minor": 1, "connectionState": "Unconfigured"}]}),
                ),
                report(
                    "lv",
                    Some("storage"),
                    ReportKind::Performance,
                    "B",
                    json!({"status": {"code": 2, "message": "cannot read lvs: not installed"}}),
                ),
                report(
                    "raid",
                    Some("storage"),
                    ReportKind::Status,
                    "P",
                    json!({"status": {"code": 0, "message": ""}, "arrays": [{"degraded": false, "disks": 2}]}),
                ),
            ],
            scripts: vec![
                ScriptMetrics {
                    name: "smart".into(),
                    duration: Some(Duration::from_millis(250)),
                    exit: ScriptExit::Code(0),
                    last_success_unix: Some(1_700_000_000.0),
                    status: "Ok".into(),
                },
                ScriptMetrics {
                    name: "hang".into(),
                    duration: Some(Duration::from_secs(30)),
                    exit: ScriptExit::Signal(9),
                    last_success_unix: None,
                    status: "unknown".into(),
                },
            ],
            verdict: Some(VerdictMetrics {
                status: "unknown".into(),
                age: Duration::from_secs(400),
                stale_after: Duration::from_secs(300),
            }),
            signatures: SignatureMetrics {
                signed_total: 12,
                verify_failures_total: [("bad-mac".to_owned(), 1)].into(),
                refusals_total: [("not-whitelisted".to_owned(), 3)].into(),
                ..SignatureMetrics::default()
            },
        }
    }

    /// The names, types and help of every metric (values and sample order normalised), as
    /// scrapers and dashboards see them. `UPDATE_GOLDEN=1` rewrites the golden file.
    #[test]
    fn golden_names_types_and_help() {
        let mut input = rich_input();
        input.signatures.whitelist_refusals_total = [("repair".to_owned(), 1)].into();
        input.signatures.sign_failures_total = 1;
        let text = render(&input);
        let mut out = String::new();
        let mut samples: Vec<String> = Vec::new();
        for line in text.lines() {
            if line.starts_with("# HELP ") {
                samples.sort();
                samples.dedup();
                for sample in samples.drain(..) {
                    out.push_str(&sample);
                    out.push('\n');
                }
                out.push_str(line);
                out.push('\n');
            } else if line.starts_with('#') {
                out.push_str(line);
                out.push('\n');
            } else {
                let series = line.rsplit_once(' ').map_or(line, |(series, _)| series);
                samples.push(format!("{series} V"));
            }
        }
        samples.sort();
        for sample in samples {
            out.push_str(&sample);
            out.push('\n');
        }
        nodecare_protocol::golden::assert_golden(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/metrics.txt"),
            &out,
        );
    }

    #[test]
    fn renders_collectors_scripts_verdict_and_counters() {
        let input = rich_input();
        let text = render(&input);
        assert_well_formed(&text);
        for expected in [
            "nodecare_cpu_load{cpu=\"1\"} 0.25",
            "nodecare_cpu_load_total 0.75",
            "nodecare_instance_rss_pages{instance=\"inst\\\"1\"} 2560",
            "nodecare_disk_reads_completed_total{device=\"sda\"} 10",
            "nodecare_disk_io_in_progress{device=\"sda\"} 0",
            "nodecare_collector_status_code{collector=\"drbd\",category=\"storage\"} 4",
            "nodecare_drbd_out_of_sync_kibibytes{minor=\"0\",instance=\"inst1\"} 1024",
            "nodecare_collector_failed{collector=\"lv\",category=\"storage\"} 1",
            "nodecare_collector_failed{collector=\"drbd\",category=\"storage\"} 0",
            "nodecare_collector_age_seconds{collector=\"cpu-avg-load\",category=\"default\"} 1.5",
            "nodecare_plugin_value{collector=\"raid\",path=\"arrays.0.disks\"} 2",
            "nodecare_plugin_value{collector=\"raid\",path=\"arrays.0.degraded\"} 0",
            "nodecare_diagnose_script_exit_code{script=\"hang\"} -1",
            "nodecare_diagnose_script_signal{script=\"hang\"} 9",
            "nodecare_diagnose_script_last_success_timestamp_seconds{script=\"smart\"} 1700000000",
            "nodecare_diagnose_script_verdict{script=\"hang\",status=\"unknown\"} 1",
            "nodecare_verdict_stale 1",
            "nodecare_verdict_status{status=\"unknown\"} 1",
            "nodecare_verdict_status{status=\"Ok\"} 0",
            "nodecare_signed_envelopes_total 12",
            "nodecare_repair_refusals_total{reason=\"not-whitelisted\"} 3",
            "nodecare_signature_verify_failures_total{reason=\"bad-mac\"} 1",
        ] {
            assert!(has(&text, expected), "missing {expected:?} in\n{text}");
        }
        // Failed collectors export no data series; unconfigured DRBD minors have no counters.
        assert!(!text.contains("nodecare_lv_segment_size_bytes"));
        assert!(!text.contains("minor=\"1\",instance=\"\"} "));
    }

    #[test]
    fn empty_input() {
        let text = render(&MetricsInput::default());
        assert_well_formed(&text);
        assert!(has(&text, "nodecare_signed_envelopes_total 0"));
    }

    #[test]
    fn counters_fill_scripts_signatures_and_refusals() {
        use nodecare_collectors::diagnose::{DiagnoseStats, ScriptOutcome, ScriptRun, ScriptStats};
        use nodecare_protocol::DiagnoseStatus;
        let stats_of = |name: &str, outcome, success: Option<u64>| {
            (
                name.to_owned(),
                ScriptStats {
                    last: ScriptRun {
                        name: name.to_owned(),
                        outcome,
                        duration: Some(Duration::from_millis(1500)),
                        status: DiagnoseStatus::Unknown,
                        succeeded: false,
                        finished_at_ms: 2_000,
                    },
                    last_success_ms: success,
                },
            )
        };
        let diagnose = DiagnoseStats {
            scripts: [
                stats_of("slow", ScriptOutcome::TimedOut, Some(1_500)),
                stats_of("gone", ScriptOutcome::Failed, None),
            ]
            .into(),
            script_refusals_total: 4,
            directory_refusals_total: 1,
            runs_total: 7,
        };
        let signing = crate::signing::SignCounters::default();
        signing
            .signed
            .store(5, std::sync::atomic::Ordering::Relaxed);
        let refusals = BTreeMap::from([("bad-signature", 2), ("not-whitelisted", 3), ("busy", 1)]);
        // Before the first run, the cached verdict's scripts stay.
        let mut input = MetricsInput {
            scripts: vec![ScriptMetrics {
                name: "restored".into(),
                duration: None,
                exit: ScriptExit::NotStarted,
                last_success_unix: None,
                status: "Ok".into(),
            }],
            ..MetricsInput::default()
        };
        add_counters(
            &mut input,
            &DiagnoseStats::default(),
            &signing,
            Some(&refusals),
        );
        assert_eq!(input.scripts.len(), 1);
        add_counters(&mut input, &diagnose, &signing, Some(&refusals));
        let text = render(&input);
        assert_well_formed(&text);
        for expected in [
            "nodecare_diagnose_script_duration_seconds{script=\"slow\"} 1.5",
            "nodecare_diagnose_script_signal{script=\"slow\"} 9",
            "nodecare_diagnose_script_outcome{script=\"slow\",outcome=\"timed-out\"} 1",
            "nodecare_diagnose_script_last_success_timestamp_seconds{script=\"slow\"} 1.5",
            "nodecare_diagnose_script_started{script=\"gone\"} 0",
            "nodecare_signed_envelopes_total 5",
            "nodecare_sign_failures_total 0",
            "nodecare_whitelist_refusals_total{kind=\"diagnose-script\"} 4",
            "nodecare_whitelist_refusals_total{kind=\"diagnose-directory\"} 1",
            "nodecare_whitelist_refusals_total{kind=\"repair\"} 3",
            "nodecare_signature_verify_failures_total{reason=\"bad-signature\"} 2",
            "nodecare_signature_verify_failures_total{reason=\"replayed\"} 0",
            "nodecare_repair_refusals_total{reason=\"busy\"} 1",
        ] {
            assert!(has(&text, expected), "missing {expected:?} in\n{text}");
        }
        assert!(!text.contains("script=\"restored\""));
        // Busy is a refusal, not a failed verification.
        assert!(!text.contains("nodecare_signature_verify_failures_total{reason=\"busy\"}"));
    }
}
