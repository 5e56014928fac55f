//! KVM instances: `kvm-inst-rss` (resident memory per instance) and `inst-status-kvm` (the KVM
//! counterpart of `inst-status-xen`).
//!
//! Both find an instance's QEMU through Ganeti's pid file
//! (`<run dir>/kvm-hypervisor/pid/<instance>`) and check that the process really is that
//! instance (its command line names it), so a stale pid file reused by another process is not
//! mistaken for the instance.
//!
//! "Hung" is defined soundly: the QEMU process is alive, its monitor (QMP) socket does not
//! answer within the timeout, *and* its CPU time has not advanced for at least
//! [`BuiltinConfig::hung_after`] of real time across collections. mond compared two
//! back-to-back samples, which flags every idle domain.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nodecare_protocol::report::status_object;
use nodecare_protocol::{ReportKind, StatusCode};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::cpu::clock_ticks_per_second;
use super::{BuiltinConfig, ParseError, parse_u64};
use crate::confd::{InstanceInfo, ViewHandle};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// Parses a pid file: one positive integer, surrounding whitespace allowed.
pub fn parse_pid_file(text: &str) -> Result<u32, ParseError> {
    let pid = text.trim();
    let value: u32 = pid
        .parse()
        .map_err(|_| ParseError::new(1, "pid", format!("{pid:?} is not a process id")))?;
    if value == 0 {
        return Err(ParseError::new(1, "pid", "process id 0"));
    }
    Ok(value)
}

/// The resident set size in pages: field 2 of `/proc/<pid>/statm`.
pub fn parse_statm_rss(text: &str) -> Result<u64, ParseError> {
    let mut fields = text.split_ascii_whitespace();
    parse_u64(1, "size", fields.next().unwrap_or(""))?;
    parse_u64(1, "resident", fields.next().unwrap_or(""))
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessStat {
    /// State letter (`R`, `S`, `D`, `Z`, `T`, …).
    pub state: char,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time after boot, in clock ticks.
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat` (the command name may contain spaces and parentheses).
pub fn parse_process_stat(text: &str) -> Result<ProcessStat, ParseError> {
    let close = text
        .rfind(')')
        .ok_or_else(|| ParseError::new(1, "comm", "missing ')'"))?;
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    // After the command: state(3) ppid … utime(14) stime(15) … starttime(22), 1-based overall.
    let field = |index: usize, name: &str| -> Result<&str, ParseError> {
        rest.get(index)
            .copied()
            .ok_or_else(|| ParseError::new(1, name, "missing"))
    };
    let state = field(0, "state")?
        .chars()
        .next()
        .ok_or_else(|| ParseError::new(1, "state", "empty"))?;
    let utime = parse_u64(1, "utime", field(11, "utime")?)?;
    let stime = parse_u64(1, "stime", field(12, "stime")?)?;
    let start_ticks = parse_u64(1, "starttime", field(19, "starttime")?)?;
    Ok(ProcessStat {
        state,
        cpu_ticks: utime.saturating_add(stime),
        start_ticks,
    })
}

/// Whether a NUL-separated command line names `instance` (QEMU gets `-name <instance>`, or
/// `-name <instance>,…` on newer Ganeti).
pub fn cmdline_names_instance(cmdline: &[u8], instance: &str) -> bool {
    let mut args = cmdline.split(|byte| *byte == 0);
    while let Some(arg) = args.next() {
        if arg == b"-name"
            && let Some(value) = args.next()
        {
            let name = value.split(|byte| *byte == b',').next().unwrap_or(&[]);
            let name = name.strip_prefix(b"guest=").unwrap_or(name);
            return name == instance.as_bytes();
        }
    }
    false
}

/// The instance state, with inst-status-xen's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActualState {
    /// Running.
    Running,
    /// Alive but idle (no monitor to ask, no CPU use).
    Blocked,
    /// Paused or stopped.
    Paused,
    /// Not running (no pid file: stopped cleanly).
    Shutdown,
    /// Died without Ganeti stopping it, or QEMU reports a guest/internal error.
    Crashed,
    /// Exiting.
    Dying,
    /// Alive, monitor unresponsive, no CPU progress for a real interval.
    Hung,
    /// Cannot tell yet.
    Unknown,
}

impl ActualState {
    /// inst-status-xen's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Blocked => "blocked",
            Self::Paused => "paused",
            Self::Shutdown => "shutdown",
            Self::Crashed => "crashed",
            Self::Dying => "dying",
            Self::Hung => "hung",
            Self::Unknown => "unknown",
        }
    }
}

/// What the monitor said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorAnswer {
    /// QMP `query-status` answered with this status.
    Status(String),
    /// There is no monitor socket to ask.
    NoSocket,
    /// The socket exists but did not answer in time.
    Unresponsive,
}

/// What is known about an instance's process for classification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Whether Ganeti's pid file exists.
    pub pid_file: bool,
    /// The process, when it is alive and is this instance.
    pub process: Option<ProcessStat>,
    /// How long the CPU time has not advanced (None: not observed long enough).
    pub cpu_stalled_for: Option<Duration>,
    /// The monitor's answer.
    pub monitor: MonitorAnswer,
}

/// Classifies an instance; `hung_after` is the least real time without CPU progress.
pub fn classify(observation: &Observation, hung_after: Duration) -> ActualState {
    if !observation.pid_file {
        return ActualState::Shutdown;
    }
    let Some(process) = observation.process else {
        return ActualState::Crashed;
    };
    if matches!(process.state, 'Z' | 'X' | 'x') {
        return ActualState::Dying;
    }
    let stalled = observation
        .cpu_stalled_for
        .is_some_and(|stalled| stalled >= hung_after);
    match &observation.monitor {
        MonitorAnswer::Status(status) => match status.as_str() {
            "running" => ActualState::Running,
            "paused" | "suspended" | "prelaunch" | "inmigrate" | "postmigrate"
            | "finish-migrate" | "save-vm" | "restore-vm" | "debug" | "colo" => ActualState::Paused,
            "shutdown" => ActualState::Shutdown,
            "internal-error" | "io-error" | "guest-panicked" | "watchdog" => ActualState::Crashed,
            _ => ActualState::Unknown,
        },
        MonitorAnswer::Unresponsive if stalled => ActualState::Hung,
        MonitorAnswer::Unresponsive if observation.cpu_stalled_for.is_some() && !stalled => {
            // Still using CPU: busy, not hung.
            ActualState::Running
        }
        MonitorAnswer::Unresponsive => ActualState::Unknown,
        MonitorAnswer::NoSocket if process.state == 'T' || process.state == 't' => {
            ActualState::Paused
        }
        MonitorAnswer::NoSocket if stalled => ActualState::Blocked,
        MonitorAnswer::NoSocket => ActualState::Running,
    }
}

/// The per-instance status with inst-status-xen's codes and a merged message.
pub fn instance_status(admin_state: Option<&str>, actual: ActualState) -> (StatusCode, String) {
    use ActualState as A;
    match (admin_state, actual) {
        (Some("offline"), _) => (
            StatusCode::Unknown,
            "The instance is marked as offline".into(),
        ),
        (Some("down"), A::Shutdown | A::Dying) => (StatusCode::Ok, String::new()),
        (Some("down"), _) => (
            StatusCode::Bad,
            "The instance is not stopped as it should be".into(),
        ),
        (_, A::Hung) => (StatusCode::Unknown, "The instance is hung".into()),
        (_, A::Unknown) => (
            StatusCode::Unknown,
            "The state of the instance cannot be determined".into(),
        ),
        (Some("up"), A::Running | A::Blocked) => (StatusCode::Ok, String::new()),
        (Some("up"), _) => (
            StatusCode::Bad,
            "The instance is not running as it should be".into(),
        ),
        (_, A::Crashed) => (StatusCode::Bad, "The instance crashed".into()),
        _ => (StatusCode::Ok, String::new()),
    }
}

/// Formats seconds like `xm uptime`: `[D days, ]H:MM:SS`.
pub fn format_uptime(seconds: u64) -> String {
    let days = seconds / 86_400;
    let hours = (seconds % 86_400) / 3600;
    let minutes = (seconds % 3600) / 60;
    let secs = seconds % 60;
    match days {
        0 => format!("{hours}:{minutes:02}:{secs:02}"),
        1 => format!("1 day, {hours}:{minutes:02}:{secs:02}"),
        _ => format!("{days} days, {hours}:{minutes:02}:{secs:02}"),
    }
}

/// Extracts the `status` of a QMP `query-status` reply from the lines QEMU sent.
pub fn parse_qmp_status(line: &str) -> Option<String> {
    let value: Value = serde_json::from_str(line).ok()?;
    value
        .get("return")?
        .get("status")?
        .as_str()
        .map(str::to_owned)
}

/// Ganeti's KVM file locations.
#[derive(Debug, Clone)]
struct KvmPaths {
    proc_root: PathBuf,
    pid_dir: PathBuf,
    ctrl_dir: PathBuf,
    reason_dir: PathBuf,
}

impl KvmPaths {
    fn new(config: &BuiltinConfig) -> Self {
        let hv = config.ganeti_run_dir.join("kvm-hypervisor");
        Self {
            proc_root: config.proc_root.clone(),
            pid_dir: hv.join("pid"),
            ctrl_dir: hv.join("ctrl"),
            reason_dir: config.ganeti_run_dir.join("instance-reason"),
        }
    }

    /// The instances to look at: this node's primaries from confd, else every pid file.
    async fn instances(&self, cluster: Option<&ViewHandle>) -> Vec<InstanceInfo> {
        if let Some(instances) = cluster.and_then(|view| view.current().instances.clone()) {
            return instances
                .primary
                .into_iter()
                .filter(|instance| {
                    instance
                        .hypervisor
                        .as_deref()
                        .is_none_or(|hypervisor| hypervisor == "kvm")
                })
                .collect();
        }
        let mut names = Vec::new();
        if let Ok(mut entries) = tokio::fs::read_dir(&self.pid_dir).await {
            while let Ok(Some(entry)) = entries.next_entry().await {
                if let Some(name) = entry.file_name().to_str()
                    && !name.starts_with('.')
                {
                    names.push(InstanceInfo {
                        name: name.to_owned(),
                        ..InstanceInfo::default()
                    });
                }
            }
        }
        names.sort_by(|a, b| a.name.cmp(&b.name));
        names
    }

    /// The pid from the instance's pid file, if the file exists and parses.
    async fn pid(&self, instance: &str) -> Result<Option<u32>, CollectError> {
        let path = self.pid_dir.join(instance);
        match tokio::fs::read_to_string(&path).await {
            Ok(text) => parse_pid_file(&text)
                .map(Some)
                .map_err(|error| error.into_collect_error(&path)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(CollectError::Source {
                source_name: path.display().to_string(),
                reason: error.to_string(),
            }),
        }
    }

    /// Whether `pid` is alive and is the QEMU of `instance`.
    async fn is_instance(&self, pid: u32, instance: &str) -> bool {
        let path = self.proc_root.join(pid.to_string()).join("cmdline");
        tokio::fs::read(&path)
            .await
            .is_ok_and(|cmdline| cmdline_names_instance(&cmdline, instance))
    }

    async fn proc_file(&self, pid: u32, name: &str) -> Option<String> {
        tokio::fs::read_to_string(self.proc_root.join(pid.to_string()).join(name))
            .await
            .ok()
    }

    async fn state_reason(&self, instance: &str) -> Value {
        match tokio::fs::read_to_string(self.reason_dir.join(instance)).await {
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Ok(trail @ Value::Array(_)) => trail,
                _ => Value::Array(Vec::new()),
            },
            Err(_) => Value::Array(Vec::new()),
        }
    }
}

/// The `kvm-inst-rss` collector: `{"<instance>": <resident pages>, …}`.
#[derive(Debug)]
pub struct KvmInstRss {
    spec: CollectorSpec,
    paths: KvmPaths,
    cluster: Option<ViewHandle>,
}

impl KvmInstRss {
    /// The collector with the configured paths.
    pub fn new(config: &BuiltinConfig) -> Self {
        Self {
            spec: config.spec("kvm-inst-rss", None, ReportKind::Performance),
            paths: KvmPaths::new(config),
            cluster: config.cluster.clone(),
        }
    }
}

impl Collector for KvmInstRss {
    fn pace(&self) -> crate::Pace {
        crate::Pace::OnDemand
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let mut data = Map::new();
            for instance in self.paths.instances(self.cluster.as_ref()).await {
                // Like mond, instances whose memory cannot be read are left out.
                let Ok(Some(pid)) = self.paths.pid(&instance.name).await else {
                    continue;
                };
                if !self.paths.is_instance(pid, &instance.name).await {
                    continue;
                }
                let Some(statm) = self.paths.proc_file(pid, "statm").await else {
                    continue;
                };
                if let Ok(pages) = parse_statm_rss(&statm) {
                    data.insert(instance.name, Value::from(pages));
                }
            }
            Ok(Value::Object(data))
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct CpuProgress {
    pid: u32,
    ticks: u64,
    last_change: Instant,
}

/// The `inst-status-kvm` collector (category `instance`, kind 1), with inst-status-xen's data
/// shape: `{"instances":[{name,uuid,adminState,actualState,uptime,mtime,state_reason,status}],
/// "status":merged}`.
#[derive(Debug)]
pub struct InstStatusKvm {
    spec: CollectorSpec,
    paths: KvmPaths,
    cluster: Option<ViewHandle>,
    hung_after: Duration,
    monitor_timeout: Duration,
    progress: Mutex<HashMap<String, CpuProgress>>,
}

impl InstStatusKvm {
    /// The collector with the configured paths.
    pub fn new(config: &BuiltinConfig) -> Self {
        Self {
            spec: config.spec("inst-status-kvm", Some("instance"), ReportKind::Status),
            paths: KvmPaths::new(config),
            cluster: config.cluster.clone(),
            hung_after: config.hung_after,
            monitor_timeout: Duration::from_secs(2),
            progress: Mutex::new(HashMap::new()),
        }
    }

    /// How long the CPU time of `instance` has not advanced, updating the history.
    fn stalled_for(&self, instance: &str, pid: u32, ticks: u64, now: Instant) -> Option<Duration> {
        let mut progress = self.progress.lock().ok()?;
        match progress.get_mut(instance) {
            Some(entry) if entry.pid == pid => {
                if ticks != entry.ticks {
                    entry.ticks = ticks;
                    entry.last_change = now;
                }
                Some(now.saturating_duration_since(entry.last_change))
            }
            _ => {
                progress.insert(
                    instance.to_owned(),
                    CpuProgress {
                        pid,
                        ticks,
                        last_change: now,
                    },
                );
                None
            }
        }
    }

    async fn ask_monitor(&self, instance: &str) -> MonitorAnswer {
        let socket = self.paths.ctrl_dir.join(format!("{instance}.qmp"));
        if tokio::fs::symlink_metadata(&socket).await.is_err() {
            return MonitorAnswer::NoSocket;
        }
        match tokio::time::timeout(self.monitor_timeout, query_status(&socket)).await {
            Ok(Some(status)) => MonitorAnswer::Status(status),
            _ => MonitorAnswer::Unresponsive,
        }
    }

    async fn uptime(&self, process: &ProcessStat) -> Option<String> {
        let text = tokio::fs::read_to_string(self.paths.proc_root.join("uptime"))
            .await
            .ok()?;
        let since_boot: f64 = text.split_ascii_whitespace().next()?.parse().ok()?;
        let started = process.start_ticks as f64 / clock_ticks_per_second() as f64;
        let seconds = (since_boot - started).max(0.0);
        Some(format_uptime(seconds as u64))
    }

    async fn instance_report(&self, instance: &InstanceInfo) -> (StatusCode, String, Value) {
        let now = Instant::now();
        let pid = self.paths.pid(&instance.name).await;
        let (pid_file, process, pid) = match pid {
            Ok(Some(pid)) if self.paths.is_instance(pid, &instance.name).await => {
                let stat = self
                    .paths
                    .proc_file(pid, "stat")
                    .await
                    .and_then(|text| parse_process_stat(&text).ok());
                (true, stat, Some(pid))
            }
            Ok(Some(_)) | Err(_) => (true, None, None),
            Ok(None) => (false, None, None),
        };
        let cpu_stalled_for = match (pid, process) {
            (Some(pid), Some(stat)) => self.stalled_for(&instance.name, pid, stat.cpu_ticks, now),
            _ => None,
        };
        let monitor = if process.is_some() {
            self.ask_monitor(&instance.name).await
        } else {
            MonitorAnswer::NoSocket
        };
        let observation = Observation {
            pid_file,
            process,
            cpu_stalled_for,
            monitor,
        };
        let actual = classify(&observation, self.hung_after);
        let (code, message) = instance_status(instance.admin_state.as_deref(), actual);
        let uptime = match &process {
            Some(stat) => self.uptime(stat).await.map_or(Value::Null, Value::from),
            None => Value::Null,
        };
        let report = json!({
            "name": instance.name,
            "uuid": instance.uuid,
            "adminState": instance.admin_state,
            "actualState": actual.as_str(),
            "uptime": uptime,
            "mtime": instance.mtime,
            "state_reason": self.paths.state_reason(&instance.name).await,
            "status": status_object(code, &message),
        });
        (code, message, report)
    }
}

/// Speaks just enough QMP to ask `query-status`.
async fn query_status(socket: &Path) -> Option<String> {
    let stream = tokio::net::UnixStream::connect(socket).await.ok()?;
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    // Greeting first, then negotiate capabilities, then ask.
    lines.next_line().await.ok()??;
    write
        .write_all(b"{\"execute\":\"qmp_capabilities\"}\n")
        .await
        .ok()?;
    loop {
        let line = lines.next_line().await.ok()??;
        if line.contains("\"return\"") {
            break;
        }
    }
    write
        .write_all(b"{\"execute\":\"query-status\"}\n")
        .await
        .ok()?;
    loop {
        let line = lines.next_line().await.ok()??;
        if let Some(status) = parse_qmp_status(&line) {
            return Some(status);
        }
        if line.contains("\"error\"") {
            return None;
        }
    }
}

impl Collector for InstStatusKvm {
    fn pace(&self) -> crate::Pace {
        crate::Pace::OnDemand
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let instances = self.paths.instances(self.cluster.as_ref()).await;
            let mut merged = StatusCode::Ok;
            let mut messages = Vec::new();
            let mut reports = Vec::new();
            for instance in &instances {
                let (code, message, report) = self.instance_report(instance).await;
                merged = merged.max(code);
                if !message.is_empty() {
                    messages.push(format!("{}: {message}", instance.name));
                }
                reports.push(report);
            }
            // Forget instances that are gone so the history stays bounded.
            if let Ok(mut progress) = self.progress.lock() {
                progress.retain(|name, _| instances.iter().any(|i| &i.name == name));
            }
            Ok(json!({
                "instances": reports,
                "status": status_object(merged, &messages.join("\n")),
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(state: char) -> Option<ProcessStat> {
        Some(ProcessStat {
            state,
            cpu_ticks: 10,
            start_ticks: 0,
        })
    }

    fn observe(stalled: Option<u64>, monitor: MonitorAnswer) -> Observation {
        Observation {
            pid_file: true,
            process: alive('S'),
            cpu_stalled_for: stalled.map(Duration::from_secs),
            monitor,
        }
    }

    #[test]
    fn hung_needs_unresponsive_monitor_and_a_real_stall() {
        let after = Duration::from_secs(30);
        assert_eq!(
            classify(&observe(Some(60), MonitorAnswer::Unresponsive), after),
            ActualState::Hung
        );
        // Two samples close together prove nothing.
        assert_eq!(
            classify(&observe(Some(5), MonitorAnswer::Unresponsive), after),
            ActualState::Running
        );
        assert_eq!(
            classify(&observe(None, MonitorAnswer::Unresponsive), after),
            ActualState::Unknown
        );
        // An idle guest whose monitor answers is running, however long it idles.
        assert_eq!(
            classify(
                &observe(Some(3600), MonitorAnswer::Status("running".into())),
                after
            ),
            ActualState::Running
        );
        assert_eq!(
            classify(&observe(Some(3600), MonitorAnswer::NoSocket), after),
            ActualState::Blocked
        );
    }

    #[test]
    fn process_states() {
        let after = Duration::from_secs(30);
        let mut observation = observe(None, MonitorAnswer::NoSocket);
        observation.pid_file = false;
        assert_eq!(classify(&observation, after), ActualState::Shutdown);
        observation.pid_file = true;
        observation.process = None;
        assert_eq!(classify(&observation, after), ActualState::Crashed);
        observation.process = alive('Z');
        assert_eq!(classify(&observation, after), ActualState::Dying);
        let panicked = observe(None, MonitorAnswer::Status("guest-panicked".into()));
        assert_eq!(classify(&panicked, after), ActualState::Crashed);
        let paused = observe(None, MonitorAnswer::Status("paused".into()));
        assert_eq!(classify(&paused, after), ActualState::Paused);
    }

    #[test]
    fn status_rules() {
        assert_eq!(
            instance_status(Some("up"), ActualState::Running).0,
            StatusCode::Ok
        );
        assert_eq!(
            instance_status(Some("up"), ActualState::Crashed).0,
            StatusCode::Bad
        );
        assert_eq!(
            instance_status(Some("up"), ActualState::Hung).0,
            StatusCode::Unknown
        );
        assert_eq!(
            instance_status(Some("down"), ActualState::Running).0,
            StatusCode::Bad
        );
        assert_eq!(
            instance_status(Some("down"), ActualState::Shutdown).0,
            StatusCode::Ok
        );
        assert_eq!(
            instance_status(Some("offline"), ActualState::Shutdown).0,
            StatusCode::Unknown
        );
        assert_eq!(
            instance_status(None, ActualState::Crashed).0,
            StatusCode::Bad
        );
    }

    #[test]
    fn proc_parsers() {
        assert_eq!(parse_pid_file(" 1234\n").unwrap(), 1234);
        assert!(parse_pid_file("abc").is_err());
        assert!(parse_pid_file("0").is_err());
        assert_eq!(parse_statm_rss("1000 250 10 1 0 100 0\n").unwrap(), 250);
        assert_eq!(parse_statm_rss("1000\n").unwrap_err().field, "resident");
        let stat =
            "42 (qemu (kvm) x) S 1 42 42 0 -1 4194560 100 0 0 0 700 300 0 0 20 0 3 0 5000 1000 250";
        let parsed = parse_process_stat(stat).unwrap();
        assert_eq!(parsed.state, 'S');
        assert_eq!(parsed.cpu_ticks, 1000);
        assert_eq!(parsed.start_ticks, 5000);
        assert!(parse_process_stat("42 (x) S 1").is_err());
    }

    #[test]
    fn cmdline_identifies_the_instance() {
        let cmdline = b"/usr/bin/kvm\x00-name\x00inst1\x00-m\x00128\x00";
        assert!(cmdline_names_instance(cmdline, "inst1"));
        assert!(!cmdline_names_instance(cmdline, "inst2"));
        assert!(cmdline_names_instance(
            b"qemu\0-name\0inst1,debug-threads=on\0",
            "inst1"
        ));
        assert!(!cmdline_names_instance(b"bash\0", "inst1"));
    }

    #[test]
    fn uptime_and_qmp() {
        assert_eq!(format_uptime(59), "0:00:59");
        assert_eq!(
            format_uptime(86_400 * 15 + 20 * 3600 + 57 * 60 + 7),
            "15 days, 20:57:07"
        );
        assert_eq!(
            parse_qmp_status(
                r#"{"return": {"status": "running", "singlestep": false, "running": true}}"#
            ),
            Some("running".to_owned())
        );
        assert_eq!(parse_qmp_status(r#"{"event": "STOP"}"#), None);
    }
}
