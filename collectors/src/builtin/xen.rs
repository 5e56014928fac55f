//! Xen collectors, registered only where the `xl` toolstack exists (mond spawns `xentop`
//! every 5 s on every node, KVM ones included, and uses the removed `xm`):
//!
//! * `xen-cpu-avg-load`: `{"<instance>": <vCPUs used>, …}` over a moving window of `xl list`'s
//!   cumulative CPU seconds; restarts (counter going down) restart that instance's window.
//! * `inst-status-xen`: per-instance state from `xl list` and `xl uptime`. "Hung" means the
//!   domain wants to run (`r`) but its CPU time has not advanced for a real interval, instead
//!   of mond's two back-to-back samples that flag every idle domain.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nodecare_protocol::report::status_object;
use nodecare_protocol::{ReportKind, StatusCode};
use serde_json::{Map, Value, json};

use super::kvm::{ActualState, instance_status};
use super::systool::{ToolLimits, run_tool};
use super::{BuiltinConfig, ParseError, parse_u64};
use crate::confd::{InstanceInfo, ViewHandle};
use crate::{CollectError, CollectFuture, Collector, CollectorSpec};

/// One row of `xl list`.
#[derive(Debug, Clone, PartialEq)]
pub struct XlDomain {
    /// Domain name.
    pub name: String,
    /// Domain id.
    pub id: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Number of vCPUs.
    pub vcpus: u64,
    /// State flags, e.g. `-b----`.
    pub state: String,
    /// Cumulative CPU seconds.
    pub cpu_seconds: f64,
}

/// The control domain, which is not an instance.
const DOM0: &str = "Domain-0";

/// Parses `xl list` (header, then `Name ID Mem VCPUs State Time(s)` rows).
pub fn parse_xl_list(text: &str) -> Result<Vec<XlDomain>, ParseError> {
    let mut domains = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        if words[0] == "Name" {
            if words.last() != Some(&"Time(s)") {
                return Err(ParseError::new(
                    number,
                    "header",
                    "expected a Time(s) column",
                ));
            }
            continue;
        }
        if words.len() < 6 {
            return Err(ParseError::new(
                number,
                "columns",
                format!("{} columns, 6 expected", words.len()),
            ));
        }
        let tail = &words[words.len() - 5..];
        let cpu_seconds: f64 = tail[4].parse().map_err(|_| {
            ParseError::new(number, "Time(s)", format!("{:?} is not a number", tail[4]))
        })?;
        if !cpu_seconds.is_finite() || cpu_seconds < 0.0 {
            return Err(ParseError::new(
                number,
                "Time(s)",
                "not a non-negative number",
            ));
        }
        domains.push(XlDomain {
            name: words[..words.len() - 5].join(" "),
            id: parse_u64(number, "ID", tail[0])?,
            memory_mib: parse_u64(number, "Mem", tail[1])?,
            vcpus: parse_u64(number, "VCPUs", tail[2])?,
            state: tail[3].to_owned(),
            cpu_seconds,
        });
    }
    Ok(domains)
}

/// Parses `xl uptime` into `name → uptime text` (e.g. `15 days, 20:57:07`).
pub fn parse_xl_uptime(text: &str) -> Result<BTreeMap<String, String>, ParseError> {
    let mut uptimes = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let words: Vec<&str> = line.split_ascii_whitespace().collect();
        if words.is_empty() || words[0] == "Name" {
            continue;
        }
        // Name and ID, then the uptime, which itself may contain spaces.
        let Some(id_position) = words
            .iter()
            .position(|word| word.bytes().all(|b| b.is_ascii_digit()))
        else {
            return Err(ParseError::new(number, "ID", "missing"));
        };
        if id_position == 0 || id_position + 1 >= words.len() {
            return Err(ParseError::new(number, "Uptime", "missing"));
        }
        uptimes.insert(
            words[..id_position].join(" "),
            words[id_position + 1..].join(" "),
        );
    }
    Ok(uptimes)
}

/// The state of a domain from its flags (`r`unning, `b`locked, `p`aused, `s`hutdown,
/// `c`rashed, `d`ying); the most serious flag wins.
pub fn domain_state(flags: &str) -> ActualState {
    if flags.contains('c') {
        ActualState::Crashed
    } else if flags.contains('d') {
        ActualState::Dying
    } else if flags.contains('s') {
        ActualState::Shutdown
    } else if flags.contains('p') {
        ActualState::Paused
    } else if flags.contains('b') {
        ActualState::Blocked
    } else {
        // `r`, or no flag at all (runnable, not scheduled at this instant).
        ActualState::Running
    }
}

/// Per-instance moving windows of cumulative CPU seconds.
#[derive(Debug, Clone)]
pub struct XenCpuWindows {
    window: Duration,
    min_span: Duration,
    series: HashMap<String, VecDeque<(Instant, f64)>>,
}

impl XenCpuWindows {
    /// Windows of `window` length that report once they span `min_span`.
    pub fn new(window: Duration, min_span: Duration) -> Self {
        Self {
            window,
            min_span,
            series: HashMap::new(),
        }
    }

    /// Adds one `xl list` sample; instances absent from it are forgotten.
    pub fn push(&mut self, at: Instant, domains: &[XlDomain]) {
        self.series
            .retain(|name, _| domains.iter().any(|domain| &domain.name == name));
        for domain in domains.iter().filter(|domain| domain.name != DOM0) {
            let series = self.series.entry(domain.name.clone()).or_default();
            if series
                .back()
                .is_some_and(|(_, last)| domain.cpu_seconds < *last)
            {
                // The domain restarted: older points are meaningless.
                series.clear();
            }
            series.push_back((at, domain.cpu_seconds));
            while series.len() > 2
                && series
                    .front()
                    .is_some_and(|(oldest, _)| at.saturating_duration_since(*oldest) > self.window)
            {
                series.pop_front();
            }
            while series.len() > 4096 {
                series.pop_front();
            }
        }
    }

    /// `instance → vCPUs used` for instances whose window spans at least `min_span`.
    pub fn loads(&self) -> BTreeMap<String, f64> {
        let mut loads = BTreeMap::new();
        for (name, series) in &self.series {
            let (Some((oldest_at, oldest)), Some((newest_at, newest))) =
                (series.front(), series.back())
            else {
                continue;
            };
            let span = newest_at.saturating_duration_since(*oldest_at);
            if span >= self.min_span && !span.is_zero() {
                loads.insert(name.clone(), (newest - oldest) / span.as_secs_f64());
            }
        }
        loads
    }
}

async fn xl(
    xl_path: &std::path::Path,
    args: &[&str],
    limits: ToolLimits,
) -> Result<String, CollectError> {
    let output = run_tool(xl_path, args, limits)
        .await
        .map_err(|error| CollectError::Source {
            source_name: format!("xl {}", args.join(" ")),
            reason: error.to_string(),
        })?;
    Ok(String::from_utf8_lossy(&output).into_owned())
}

fn parse_error(command: &str, error: ParseError) -> CollectError {
    CollectError::Parse {
        source_name: command.to_owned(),
        reason: error.to_string(),
    }
}

/// The `xen-cpu-avg-load` collector. Registered on every node, as mond lists it everywhere: on
/// a node without `xl` it reports `{}`, as mond does.
#[derive(Debug)]
pub struct XenCpuAvgLoad {
    spec: CollectorSpec,
    xl_path: PathBuf,
    limits: ToolLimits,
    windows: Mutex<XenCpuWindows>,
}

impl XenCpuAvgLoad {
    /// The collector running the configured `xl`.
    pub fn new(config: &BuiltinConfig) -> Self {
        // mond reports an instance once its samples span 100 s.
        let min_span = Duration::from_secs(100).min(config.cpu_window);
        Self {
            spec: config.spec("xen-cpu-avg-load", None, ReportKind::Performance),
            xl_path: config.xl_path.clone(),
            limits: config.tool_limits(),
            windows: Mutex::new(XenCpuWindows::new(config.cpu_window, min_span)),
        }
    }
}

impl Collector for XenCpuAvgLoad {
    /// A moving window where Xen runs (it needs every sample); `{}` on demand elsewhere.
    fn pace(&self) -> crate::Pace {
        if super::systool::tool_exists(&self.xl_path) {
            crate::Pace::Steady
        } else {
            crate::Pace::OnDemand
        }
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            // As mond on a node without Xen: the collector is listed and reports no instance.
            if !super::systool::tool_exists(&self.xl_path) {
                return Ok(Value::Object(Map::new()));
            }
            let text = xl(&self.xl_path, &["list"], self.limits).await?;
            let domains = parse_xl_list(&text).map_err(|error| parse_error("xl list", error))?;
            let mut windows = self.windows.lock().map_err(|_| CollectError::Source {
                source_name: "xen cpu windows".to_owned(),
                reason: "state lock poisoned".to_owned(),
            })?;
            windows.push(Instant::now(), &domains);
            let loads: Map<String, Value> = windows
                .loads()
                .into_iter()
                .map(|(name, load)| (name, Value::from(load)))
                .collect();
            Ok(Value::Object(loads))
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Progress {
    id: u64,
    cpu_seconds: f64,
    last_change: Instant,
}

/// The `inst-status-xen` collector.
#[derive(Debug)]
pub struct InstStatusXen {
    spec: CollectorSpec,
    xl_path: PathBuf,
    limits: ToolLimits,
    cluster: Option<ViewHandle>,
    reason_dir: PathBuf,
    hung_after: Duration,
    progress: Mutex<HashMap<String, Progress>>,
}

impl InstStatusXen {
    /// The collector running the configured `xl`.
    pub fn new(config: &BuiltinConfig) -> Self {
        Self {
            spec: config.spec("inst-status-xen", Some("instance"), ReportKind::Status),
            xl_path: config.xl_path.clone(),
            limits: config.tool_limits(),
            cluster: config.cluster.clone(),
            reason_dir: config.ganeti_run_dir.join("instance-reason"),
            hung_after: config.hung_after,
            progress: Mutex::new(HashMap::new()),
        }
    }

    fn classify(&self, domain: &XlDomain, now: Instant) -> ActualState {
        let state = domain_state(&domain.state);
        let Ok(mut progress) = self.progress.lock() else {
            return state;
        };
        let entry = progress.entry(domain.name.clone()).or_insert(Progress {
            id: domain.id,
            cpu_seconds: domain.cpu_seconds,
            last_change: now,
        });
        if entry.id != domain.id || entry.cpu_seconds != domain.cpu_seconds {
            *entry = Progress {
                id: domain.id,
                cpu_seconds: domain.cpu_seconds,
                last_change: now,
            };
        }
        let wants_cpu = domain.state.contains('r');
        if state == ActualState::Running
            && wants_cpu
            && now.saturating_duration_since(entry.last_change) >= self.hung_after
        {
            ActualState::Hung
        } else {
            state
        }
    }
}

/// Builds inst-status-xen's data from parsed tool output and the instances to report.
pub fn build_xen_status(
    instances: &[InstanceInfo],
    domains: &[XlDomain],
    uptimes: &BTreeMap<String, String>,
    mut state_of: impl FnMut(&XlDomain) -> ActualState,
    mut reason_of: impl FnMut(&str) -> Value,
) -> Value {
    let mut merged = StatusCode::Ok;
    let mut messages = Vec::new();
    let mut reports = Vec::new();
    for instance in instances {
        let domain = domains.iter().find(|domain| domain.name == instance.name);
        let actual = domain.map_or(ActualState::Shutdown, &mut state_of);
        let (code, message) = instance_status(instance.admin_state.as_deref(), actual);
        merged = merged.max(code);
        if !message.is_empty() {
            messages.push(format!("{}: {message}", instance.name));
        }
        reports.push(json!({
            "name": instance.name,
            "uuid": instance.uuid,
            "adminState": instance.admin_state,
            "actualState": actual.as_str(),
            "uptime": uptimes.get(&instance.name),
            "mtime": instance.mtime,
            "state_reason": reason_of(&instance.name),
            "status": status_object(code, &message),
        }));
    }
    json!({"instances": reports, "status": status_object(merged, &messages.join("\n"))})
}

impl Collector for InstStatusXen {
    fn pace(&self) -> crate::Pace {
        crate::Pace::OnDemand
    }

    fn spec(&self) -> &CollectorSpec {
        &self.spec
    }

    fn collect(&self) -> CollectFuture<'_> {
        Box::pin(async move {
            let list = xl(&self.xl_path, &["list"], self.limits).await?;
            let domains = parse_xl_list(&list).map_err(|error| parse_error("xl list", error))?;
            let uptimes = match xl(&self.xl_path, &["uptime"], self.limits).await {
                Ok(text) => parse_xl_uptime(&text).unwrap_or_default(),
                Err(_) => BTreeMap::new(),
            };
            let instances: Vec<InstanceInfo> = match self
                .cluster
                .as_ref()
                .and_then(|view| view.current().instances.clone())
            {
                Some(instances) => instances
                    .primary
                    .into_iter()
                    .filter(|instance| {
                        instance
                            .hypervisor
                            .as_deref()
                            .is_none_or(|hypervisor| hypervisor.starts_with("xen"))
                    })
                    .collect(),
                None => domains
                    .iter()
                    .filter(|domain| domain.name != DOM0)
                    .map(|domain| InstanceInfo {
                        name: domain.name.clone(),
                        ..InstanceInfo::default()
                    })
                    .collect(),
            };
            let now = Instant::now();
            let mut reasons = BTreeMap::new();
            for instance in &instances {
                let trail =
                    match tokio::fs::read_to_string(self.reason_dir.join(&instance.name)).await {
                        Ok(text) => serde_json::from_str::<Value>(&text)
                            .ok()
                            .filter(Value::is_array)
                            .unwrap_or_else(|| Value::Array(Vec::new())),
                        Err(_) => Value::Array(Vec::new()),
                    };
                reasons.insert(instance.name.clone(), trail);
            }
            let data = build_xen_status(
                &instances,
                &domains,
                &uptimes,
                |domain| self.classify(domain, now),
                |name| {
                    reasons
                        .get(name)
                        .cloned()
                        .unwrap_or_else(|| Value::Array(Vec::new()))
                },
            );
            if let Ok(mut progress) = self.progress.lock() {
                progress.retain(|name, _| domains.iter().any(|domain| &domain.name == name));
            }
            Ok(data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str =
        "Name                                        ID   Mem VCPUs      State   Time(s)
Domain-0                                     0  1023     1     r----- 154706.1
server01.example.com                         1  1024     1     -b---- 167643.2
(null)                                   28441   789     1     --psc-      1.2
";

    #[test]
    fn xl_list_parses() {
        let domains = parse_xl_list(LIST).unwrap();
        assert_eq!(domains.len(), 3);
        assert_eq!(domains[1].name, "server01.example.com");
        assert_eq!(domains[1].cpu_seconds, 167643.2);
        assert_eq!(domain_state(&domains[1].state), ActualState::Blocked);
        assert_eq!(domain_state(&domains[2].state), ActualState::Crashed);
        let error =
            parse_xl_list("Name ID Mem VCPUs State Time(s)\nx 1 2 3 r----- abc\n").unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (2, "Time(s)"));
    }

    #[test]
    fn xl_uptime_parses() {
        let uptimes = parse_xl_uptime(
            "Name                                ID Uptime\nDomain-0                             0 98 days,  2:27:44\ninstance1.example.com               119 15 days, 20:57:07\n",
        )
        .unwrap();
        assert_eq!(uptimes["instance1.example.com"], "15 days, 20:57:07");
    }

    #[test]
    fn cpu_windows_need_the_minimum_span_and_handle_restarts() {
        let start = Instant::now();
        let domain = |cpu: f64| XlDomain {
            name: "i1".into(),
            id: 1,
            memory_mib: 1,
            vcpus: 1,
            state: "r-----".into(),
            cpu_seconds: cpu,
        };
        let mut windows = XenCpuWindows::new(Duration::from_secs(600), Duration::from_secs(100));
        windows.push(start, &[domain(0.0)]);
        windows.push(start + Duration::from_secs(50), &[domain(25.0)]);
        assert!(windows.loads().is_empty());
        windows.push(start + Duration::from_secs(100), &[domain(50.0)]);
        assert_eq!(windows.loads()["i1"], 0.5);
        windows.push(start + Duration::from_secs(105), &[domain(1.0)]);
        assert!(windows.loads().is_empty());
        windows.push(start + Duration::from_secs(110), &[]);
        assert!(windows.series.is_empty());
    }

    #[test]
    fn status_data_shape() {
        let domains = parse_xl_list(LIST).unwrap();
        let instances = vec![
            InstanceInfo {
                name: "server01.example.com".into(),
                admin_state: Some("up".into()),
                ..InstanceInfo::default()
            },
            InstanceInfo {
                name: "gone.example.com".into(),
                admin_state: Some("up".into()),
                ..InstanceInfo::default()
            },
        ];
        let data = build_xen_status(
            &instances,
            &domains,
            &BTreeMap::new(),
            |d| domain_state(&d.state),
            |_| json!([]),
        );
        assert_eq!(data["instances"][0]["actualState"], "blocked");
        assert_eq!(data["instances"][1]["actualState"], "shutdown");
        assert_eq!(data["status"]["code"], 4);
        assert_eq!(data["instances"][0]["status"]["code"], 0);
    }
}
