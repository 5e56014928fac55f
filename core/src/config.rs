//! Configuration: a TOML file (default `/etc/nodecare/coordinator.toml`, unknown keys are
//! errors) with command-line overrides applied on top by the binary.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::breaker::BreakerPolicy;
use crate::ganeti::Node;
use crate::gate::{Caps, DomainSource};
use crate::plan::{EvacuationPolicy, ImmovablePolicy};

/// Default configuration file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/nodecare/coordinator.toml";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nodecare";
/// Default local socket of the API (the CLI on the master uses it when it is there).
pub const DEFAULT_API_SOCKET: &str = "/run/nodecare/coordinator.sock";
/// Default listen address (maintd's port).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:1816";
/// Default seconds between rounds.
pub const DEFAULT_ROUND_INTERVAL_SECS: f64 = 30.0;
/// Default most nodes drained or evacuating at once.
pub const DEFAULT_MAX_DISRUPTED_NODES: usize = 1;
/// Default fewest healthy nodes an evacuation may leave.
pub const DEFAULT_MIN_HEALTHY_NODES: usize = 2;
/// Default RAPI base URL (RAPI on the master itself).
pub const DEFAULT_RAPI_URL: &str = "https://127.0.0.1:5080";
/// Default seconds a round may run before the daemon counts itself hung.
pub const DEFAULT_ROUND_STALL_TIMEOUT_SECS: f64 = 600.0;
/// Ganeti's ssconf directory.
pub const DEFAULT_SSCONF_DIR: &str = "/var/lib/ganeti";
/// Default RAPI certificate to pin (Ganeti's).
pub const DEFAULT_RAPI_CERTIFICATE: &str = "/var/lib/ganeti/rapi.pem";
/// Exit code when not running on the master (Ganeti's `exitNotmaster`).
pub const EXIT_NOT_MASTER: i32 = 11;
/// Exit code for configuration errors.
pub const EXIT_CONFIG: i32 = 2;
/// Default users file.
pub const DEFAULT_USERS_PATH: &str = "/etc/nodecare/users";
/// Default most connections the API serves at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default agent URL template (`{ip}`: primary IP, `{name}`: node name).
pub const DEFAULT_AGENT_URL_TEMPLATE: &str = "http://{ip}:1815";

/// A configuration problem.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// Path.
        path: String,
        /// Cause.
        error: String,
    },
    /// The file does not parse or has unknown keys.
    #[error("invalid configuration {path}: {error}")]
    Parse {
        /// Path.
        path: String,
        /// Cause.
        error: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The coordinator's configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// This node's name as Ganeti knows it (default: the host name).
    pub node_name: Option<String>,
    /// Directory of the state database.
    pub state_dir: PathBuf,
    /// Cluster HMAC key (verifies reports, signs repair requests).
    pub hmac_key: PathBuf,
    /// HTTP API address.
    pub listen: SocketAddr,
    /// Users file authorising writes (cancel, the web page's actions), in Ganeti RAPI's
    /// format: `user password [write]`. Read on each write; missing means writes are refused.
    pub users: PathBuf,
    /// Most connections the HTTP API holds open at once (more are answered 503 and closed);
    /// keep it well below the unit's `LimitNOFILE` (65536), whose rest serves the agents.
    pub api_max_connections: usize,
    /// The API's local socket, with connections of its own, for the CLI on this node: root, the
    /// coordinator's own user and the members of `api_socket_group` use it without a password
    /// and unaffected by floods and throttling on the network. Empty: none.
    pub api_socket: PathBuf,
    /// The group whose members may use `api_socket` besides root; empty: root only.
    pub api_socket_group: String,
    /// Every read of the HTTP API (status, incidents, the page, `/metrics`, explain) needs a
    /// user of `users` too, not only writes (the local socket's callers excepted). Off by
    /// default: the reads show what Ganeti's own commands show on the management network.
    pub api_reads_need_login: bool,
    /// Seconds between rounds.
    pub round_interval: f64,
    /// Seconds a Ganeti job may run before its incident fails.
    pub job_timeout: f64,
    /// Record every round whose gate judged anything (the flight recorder behind
    /// `nodecare explain`); kept as `[retention]` says.
    pub record_rounds: bool,
    /// Seconds a round may run before the daemon counts itself hung: the systemd watchdog is
    /// then no longer fed, and systemd restarts the service.
    pub round_stall_timeout: f64,
    /// Ganeti's ssconf directory: `ssconf_master_node` there names the master. A coordinator on
    /// another node waits (standby) without asking RAPI.
    pub ssconf_dir: PathBuf,
    /// Seconds a repair command may run before its incident fails.
    pub repair_timeout: f64,
    /// Seconds a round waits for a just-requested repair to finish.
    pub repair_poll: f64,
    /// Seconds a signed repair request stays valid.
    pub repair_request_ttl: f64,
    /// Most nodes drained or evacuating at once.
    pub max_disrupted_nodes: usize,
    /// Fewest healthy nodes an evacuation may leave.
    pub min_healthy_nodes: usize,
    /// Most nodes disrupted at once, in percent of the vm-capable nodes (none: no such cap).
    pub max_disrupted_percent: Option<f64>,
    /// Failure domains: `group` (one per node group) or a node-tag prefix such as `rack:`.
    pub failure_domains: String,
    /// Caps per node group (by name or uuid), besides the cluster-wide ones.
    pub group_caps: BTreeMap<String, Caps>,
    /// Seconds after a planned disruption during which its domain's nodes opening incidents
    /// are not acted on: after an admission grant is granted or renewed, after a maintenance
    /// reboot ends (throughout the reboot too).
    pub grace: f64,
    /// The storm breaker.
    pub breaker: BreakerPolicy,
    /// Submit an evacuation as one Ganeti job chain per round (drain, moves, tag depending on
    /// each other); `false` submits one step per round, each after the previous step's jobs.
    pub job_chains: bool,
    /// Set a node offline once its evacuation emptied it, before tagging it repairready
    /// (maintd's "evacuate and offline").
    pub offline_after_evacuation: bool,
    /// What an evacuation does with instances that cannot leave the node (`plain`, `file`):
    /// `fail` the incident, `leave` them (the node stays online; the incident completes with
    /// a warning naming them) or `shutdown` them before the node is offlined.
    pub immovable_instances: ImmovablePolicy,
    /// When an operator acknowledges an incident (removes its tag), return the node to
    /// service: online it if nodecare offlined it, undrain it if nodecare drained it.
    pub undrain_on_ack: bool,
    /// Agents.
    pub agents: AgentsConfig,
    /// The source written at the start of every job's reason text (Ganeti's job filters match
    /// it, see `docs/ganeti-filters.md`): the design's `gnt:daemon:maintd` by default. Jobs
    /// submitted under another source (the earlier `gnt:daemon:nodecare`) stay recognised.
    pub reason_source: String,
    /// Ganeti RAPI.
    pub rapi: RapiSection,
    /// Notifications of incident changes.
    pub notify: NotifySection,
    /// Balancing with Ganeti's hbal (off by default).
    pub balancing: crate::duty::balancing::BalancingConfig,
    /// Instance auto-repair (harep's duty).
    pub instance_repair: InstanceRepairSection,
    /// What the state database forgets, and when.
    pub retention: crate::retention::RetentionConfig,
    /// The state's replicas on the master candidates (master failover).
    pub replication: ReplicationSection,
    /// Maintenance windows and freezes: when planned work may start.
    pub calendar: crate::calendar::CalendarConfig,
    /// The escalation ladder: repairs bounded by each node's repair history.
    pub repair_ladder: crate::duty::node_repair::ladder::LadderPolicy,
    /// The kinds of work that need an approval before they start.
    pub approvals: crate::approval::ApprovalsConfig,
    /// Failback: the instances an evacuation moved off a node, back once it is healthy.
    pub failback: crate::duty::failback::FailbackConfig,
}

/// `[replication]`: the state kept by the agents of the master candidates, so that the
/// coordinator of a new master continues where the old one was (`crate::replica`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplicationSection {
    /// Replicate (off by default in the code; the packaged configuration turns it on).
    pub enabled: bool,
    /// Seconds between pushes of state that changed without a write (new incidents, report
    /// sequences); writes and operator decisions push at once.
    pub interval: f64,
    /// Seconds a push kept by a majority lets this coordinator start writes after it was sent
    /// (the lease, `nodecare_protocol::replica::Lease`); a new master waits this long, plus the
    /// longest a write takes (`rapi.timeout`, `agents.timeout`), and a tenth more, before it
    /// acts. The same on every master candidate; longer than a push takes.
    pub lease: f64,
}

/// Default seconds of the lease of a confirmation (`[replication] lease`).
pub const DEFAULT_REPLICATION_LEASE_SECS: f64 = 10.0;

impl Default for ReplicationSection {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: 30.0,
            lease: DEFAULT_REPLICATION_LEASE_SECS,
        }
    }
}

/// `[instance_repair]`: harep's duty, driven by the `ganeti:watcher:autorepair:*` tags.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InstanceRepairSection {
    /// Run the duty each round (off by default: harep's tags are then left to harep).
    pub enabled: bool,
}

/// `[notify]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifySection {
    /// Where to POST a JSON notification on every incident state change (none when unset).
    pub webhook_url: Option<String>,
    /// Seconds per attempt.
    pub timeout: f64,
    /// Attempts after a failed one.
    pub retries: u32,
    /// Seconds before the first retry; doubles with each retry (at most 300).
    pub backoff: f64,
}

impl Default for NotifySection {
    fn default() -> Self {
        Self {
            webhook_url: None,
            timeout: 10.0,
            retries: 5,
            backoff: 2.0,
        }
    }
}

/// `[agents]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsConfig {
    /// Base URL template: `{ip}` = primary IP, `{name}` = node name.
    pub url_template: String,
    /// Per-node base URLs (shared with every [`AgentUrls`] made from them: one per node of a
    /// big cluster is megabytes).
    pub overrides: std::sync::Arc<BTreeMap<String, String>>,
    /// Requests at once.
    pub concurrency: usize,
    /// Seconds per request.
    pub timeout: f64,
    /// Seconds of clock difference tolerated between a node and the coordinator when judging a
    /// report's freshness (at most 30: it is for clocks, not for a report's lifetime).
    pub max_clock_skew: f64,
    /// Keep a long-poll open to every agent so that a changed verdict starts a round at once
    /// (rounds still read every agent).
    pub watch: bool,
}

/// `[rapi]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RapiSection {
    /// RAPI base URL.
    pub url: String,
    /// PEM file with the cluster certificate to pin (Ganeti's `rapi.pem` works).
    pub certificate: PathBuf,
    /// File with `user:password` (or a Ganeti RAPI users file).
    pub credentials: Option<PathBuf>,
    /// Allow an `http://` URL (only for the simulation on loopback).
    pub allow_plain_http: bool,
    /// Seconds per request.
    pub timeout: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_name: None,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            hmac_key: PathBuf::from(nodecare_protocol::sign::DEFAULT_HMAC_KEY_PATH),
            listen: DEFAULT_LISTEN
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 1816))),
            users: PathBuf::from(DEFAULT_USERS_PATH),
            api_max_connections: DEFAULT_MAX_CONNECTIONS,
            api_socket: PathBuf::from(DEFAULT_API_SOCKET),
            api_socket_group: String::new(),
            api_reads_need_login: false,
            round_interval: DEFAULT_ROUND_INTERVAL_SECS,
            job_timeout: 3600.0,
            record_rounds: true,
            round_stall_timeout: DEFAULT_ROUND_STALL_TIMEOUT_SECS,
            ssconf_dir: PathBuf::from(DEFAULT_SSCONF_DIR),
            repair_timeout: 1800.0,
            repair_poll: 5.0,
            repair_request_ttl: 300.0,
            max_disrupted_nodes: DEFAULT_MAX_DISRUPTED_NODES,
            min_healthy_nodes: DEFAULT_MIN_HEALTHY_NODES,
            max_disrupted_percent: None,
            failure_domains: "group".to_owned(),
            group_caps: BTreeMap::new(),
            grace: 600.0,
            breaker: BreakerPolicy::default(),
            job_chains: true,
            offline_after_evacuation: true,
            immovable_instances: ImmovablePolicy::Fail,
            undrain_on_ack: false,
            agents: AgentsConfig::default(),
            reason_source: crate::ganeti::REASON_SOURCE.to_owned(),
            rapi: RapiSection::default(),
            notify: NotifySection::default(),
            balancing: crate::duty::balancing::BalancingConfig::default(),
            instance_repair: InstanceRepairSection::default(),
            retention: crate::retention::RetentionConfig::default(),
            replication: ReplicationSection::default(),
            calendar: crate::calendar::CalendarConfig::default(),
            repair_ladder: crate::duty::node_repair::ladder::LadderPolicy::default(),
            approvals: crate::approval::ApprovalsConfig::default(),
            failback: crate::duty::failback::FailbackConfig::default(),
        }
    }
}

impl Default for AgentsConfig {
    fn default() -> Self {
        Self {
            url_template: DEFAULT_AGENT_URL_TEMPLATE.to_owned(),
            overrides: std::sync::Arc::default(),
            concurrency: 64,
            timeout: 5.0,
            max_clock_skew: 2.0,
            watch: true,
        }
    }
}

impl Default for RapiSection {
    fn default() -> Self {
        Self {
            url: DEFAULT_RAPI_URL.to_owned(),
            certificate: PathBuf::from(DEFAULT_RAPI_CERTIFICATE),
            credentials: None,
            allow_plain_http: false,
            timeout: 30.0,
        }
    }
}

fn seconds(name: &str, value: f64, min: f64) -> Result<Duration, ConfigError> {
    if !value.is_finite() || value < min || value > 1e9 {
        return Err(ConfigError::Invalid(format!(
            "{name} must be between {min} and 1e9 seconds, got {value}"
        )));
    }
    Ok(Duration::from_secs_f64(value))
}

impl Config {
    /// The configuration of the file at `path`, given what reading it gave (the reading is the
    /// caller's: `std::fs::read_to_string(path)`); a missing file is an error only if `required`.
    pub fn from_read(
        path: &Path,
        read: std::io::Result<String>,
        required: bool,
    ) -> Result<Self, ConfigError> {
        let text = match read {
            Ok(text) => text,
            Err(error) if !required && error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(error) => {
                return Err(ConfigError::Read {
                    path: path.display().to_string(),
                    error: error.to_string(),
                });
            }
        };
        Self::parse(&text).map_err(|error| match error {
            ConfigError::Parse { error, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                error,
            },
            other => other,
        })
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|error| ConfigError::Parse {
            path: "<text>".into(),
            error: error.to_string(),
        })
    }

    /// Checks value ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.approvals.validate().map_err(ConfigError::Invalid)?;
        self.failback.validate().map_err(ConfigError::Invalid)?;
        self.repair_ladder
            .validate()
            .map_err(ConfigError::Invalid)?;
        self.calendar
            .calendar(jiff::tz::TimeZone::UTC, "UTC", &[])
            .map_err(|e| ConfigError::Invalid(format!("calendar: {e}")))?;
        self.round_interval_duration()?;
        seconds("job_timeout", self.job_timeout, 1.0)?;
        seconds("round_stall_timeout", self.round_stall_timeout, 0.1)?;
        seconds("repair_timeout", self.repair_timeout, 1.0)?;
        seconds("repair_poll", self.repair_poll, 0.0)?;
        seconds("repair_request_ttl", self.repair_request_ttl, 1.0)?;
        seconds("agents.timeout", self.agents.timeout, 0.001)?;
        seconds("replication.interval", self.replication.interval, 0.0)?;
        seconds("replication.lease", self.replication.lease, 0.1)?;
        let skew = seconds("agents.max_clock_skew", self.agents.max_clock_skew, 0.0)?;
        let limit = Duration::from_millis(nodecare_protocol::sign::MAX_CLOCK_SKEW_LIMIT_MS);
        if skew > limit {
            return Err(ConfigError::Invalid(format!(
                "agents.max_clock_skew must be at most {} seconds (it tolerates clock differences, \
                 not old reports), got {}",
                limit.as_secs(),
                self.agents.max_clock_skew
            )));
        }
        seconds("rapi.timeout", self.rapi.timeout, 0.001)?;
        if self.replication.enabled {
            // The takeover's wait runs in a round: the watchdog must not count it as a hang.
            let wait = self.replication_lease().takeover_wait();
            let stall = Self::duration(self.round_stall_timeout);
            if wait >= stall {
                return Err(ConfigError::Invalid(format!(
                    "a new master waits (replication.lease + the longer of rapi.timeout and \
                     agents.timeout) × 1.1 = {:.1} seconds for the old master's last writes before \
                     it acts, which must be below round_stall_timeout ({:.1}); lower \
                     replication.lease or rapi.timeout, or raise round_stall_timeout",
                    wait.as_secs_f64(),
                    stall.as_secs_f64()
                )));
            }
        }
        crate::ganeti::check_reason_source(&self.reason_source)
            .map_err(|e| ConfigError::Invalid(format!("reason_source: {e}")))?;
        if self.agents.concurrency == 0 {
            return Err(ConfigError::Invalid(
                "agents.concurrency must be at least 1".into(),
            ));
        }
        if self.api_max_connections == 0 || self.api_max_connections > 32_768 {
            return Err(ConfigError::Invalid(format!(
                "api_max_connections must be between 1 and 32768 (half the unit's LimitNOFILE), got {}",
                self.api_max_connections
            )));
        }
        if self.max_disrupted_nodes == 0 {
            return Err(ConfigError::Invalid(
                "max_disrupted_nodes must be at least 1 (0 would forbid every evacuation)".into(),
            ));
        }
        if let Some(percent) = self.max_disrupted_percent
            && !(percent > 0.0 && percent <= 100.0)
        {
            return Err(ConfigError::Invalid(format!(
                "max_disrupted_percent must be above 0 and at most 100, got {percent}"
            )));
        }
        for (group, caps) in &self.group_caps {
            if caps.max_disrupted_nodes == 0 {
                return Err(ConfigError::Invalid(format!(
                    "group_caps.{group}.max_disrupted_nodes must be at least 1"
                )));
            }
        }
        DomainSource::parse(&self.failure_domains).map_err(ConfigError::Invalid)?;
        self.balancing.validate().map_err(ConfigError::Invalid)?;
        self.retention.validate().map_err(ConfigError::Invalid)?;
        seconds("grace", self.grace, 0.0)?;
        seconds("breaker.window_secs", self.breaker.window_secs, 1.0)?;
        if let Some(secs) = self.breaker.auto_close_secs {
            seconds("breaker.auto_close_secs", secs, 0.0)?;
        }
        for (name, value) in [
            (
                "breaker.max_incident_percent",
                self.breaker.max_incident_percent,
            ),
            (
                "breaker.max_unreachable_percent",
                self.breaker.max_unreachable_percent,
            ),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be between 0 and 100, got {value}"
                )));
            }
        }
        if !self.agents.url_template.starts_with("http://")
            && !self.agents.url_template.starts_with("https://")
        {
            return Err(ConfigError::Invalid(format!(
                "agents.url_template must start with http:// or https://, got {:?}",
                self.agents.url_template
            )));
        }
        let plain = self.rapi.url.starts_with("http://");
        if !plain && !self.rapi.url.starts_with("https://") {
            return Err(ConfigError::Invalid(format!(
                "rapi.url must be an http(s) URL, got {:?}",
                self.rapi.url
            )));
        }
        if plain && !self.rapi.allow_plain_http {
            return Err(ConfigError::Invalid(
                "rapi.url is plain http://; set rapi.allow_plain_http = true only for a simulation"
                    .into(),
            ));
        }
        seconds("notify.timeout", self.notify.timeout, 0.001)?;
        seconds("notify.backoff", self.notify.backoff, 0.0)?;
        if let Some(url) = &self.notify.webhook_url
            && !url.starts_with("http://")
            && !url.starts_with("https://")
        {
            return Err(ConfigError::Invalid(format!(
                "notify.webhook_url must be an http(s) URL, got {url:?}"
            )));
        }
        if self.node_name.as_deref().is_some_and(str::is_empty) {
            return Err(ConfigError::Invalid("node_name is empty".into()));
        }
        Ok(())
    }

    /// Round interval.
    pub fn round_interval_duration(&self) -> Result<Duration, ConfigError> {
        seconds("round_interval", self.round_interval, 0.01)
    }

    /// The cluster-wide caps.
    pub const fn caps(&self) -> Caps {
        Caps {
            max_disrupted_nodes: self.max_disrupted_nodes,
            max_disrupted_percent: self.max_disrupted_percent,
            min_healthy_nodes: self.min_healthy_nodes,
        }
    }

    /// The gate policy of a one-shot instance auto-repair run (`nodecare-coordinator --harep`,
    /// `nodecare harep`): the configuration's cluster caps (no percentage); nothing else is in
    /// force but what Ganeti shows drained or offline.
    pub fn one_shot_policy(&self) -> crate::gate::Policy {
        crate::gate::Policy {
            cluster: Caps {
                max_disrupted_nodes: self.max_disrupted_nodes,
                max_disrupted_percent: None,
                min_healthy_nodes: self.min_healthy_nodes,
            },
            ..crate::gate::Policy::default()
        }
    }

    /// How evacuations end.
    pub const fn evacuation_policy(&self) -> EvacuationPolicy {
        EvacuationPolicy {
            immovable: self.immovable_instances,
            offline_after_evacuation: self.offline_after_evacuation,
        }
    }

    /// Where failure domains come from (checked by [`Config::validate`]; `group` otherwise).
    pub fn domain_source(&self) -> DomainSource {
        DomainSource::parse(&self.failure_domains).unwrap_or_default()
    }

    /// The lease of the replication's confirmations (`[replication] lease`): a write started
    /// within it ends within the longer of `rapi.timeout` (a Ganeti call) and `agents.timeout`
    /// (an agent request).
    pub fn replication_lease(&self) -> nodecare_protocol::replica::Lease {
        nodecare_protocol::replica::Lease {
            duration: Self::duration(self.replication.lease),
            call_bound: Self::duration(self.rapi.timeout).max(Self::duration(self.agents.timeout)),
        }
    }

    /// Agent URLs.
    pub fn agent_urls(&self) -> AgentUrls {
        AgentUrls {
            template: self.agents.url_template.clone(),
            overrides: std::sync::Arc::clone(&self.agents.overrides),
        }
    }

    /// The webhook settings, when `[notify] webhook_url` is set.
    pub fn webhook(&self) -> Option<WebhookSettings> {
        Some(WebhookSettings {
            url: self.notify.webhook_url.clone()?,
            timeout: Self::duration(self.notify.timeout),
            retries: self.notify.retries,
            backoff: Self::duration(self.notify.backoff),
        })
    }

    /// Duration from a seconds field already checked by [`Config::validate`].
    pub fn duration(value: f64) -> Duration {
        if value.is_finite() && value >= 0.0 {
            Duration::from_secs_f64(value.min(1e9))
        } else {
            Duration::ZERO
        }
    }
}

/// How agent URLs are formed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AgentUrls {
    /// Base URL template; `{ip}` and `{name}` are replaced.
    pub template: String,
    /// Per-node base URLs that override the template (shared with the configuration's).
    pub overrides: std::sync::Arc<BTreeMap<String, String>>,
}

impl AgentUrls {
    /// The agent base URL (no trailing slash) of `node`.
    pub fn base(&self, node: &Node) -> String {
        let base = self.overrides.get(&node.name).cloned().unwrap_or_else(|| {
            let ip = if node.primary_ip.contains(':') {
                format!("[{}]", node.primary_ip)
            } else {
                node.primary_ip.clone()
            };
            self.template
                .replace("{ip}", &ip)
                .replace("{name}", &node.name)
        });
        base.trim_end_matches('/').to_owned()
    }
}

/// Webhook settings (`[notify]`).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Where to POST.
    pub url: String,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Attempts after the first one.
    pub retries: u32,
    /// Wait before the first retry; doubles each time, at most five minutes (the notifier's cap).
    pub backoff: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_maintd() {
        let config = Config::parse("").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.listen.port(), 1816);
        assert_eq!(config.hmac_key, PathBuf::from("/var/lib/ganeti/hmac.key"));
        config.validate().unwrap();
    }

    #[test]
    fn reason_source_defaults_to_the_design_and_is_checked() {
        assert_eq!(Config::default().reason_source, "gnt:daemon:maintd");
        let config = Config::parse("reason_source = \"gnt:daemon:nodecare\"\n").unwrap();
        assert_eq!(config.reason_source, "gnt:daemon:nodecare");
        config.validate().unwrap();
        for bad in ["", "gnt:daemon:maintd nodecare", "a\\nb"] {
            let config = Config::parse(&format!("reason_source = \"{bad}\"\n")).unwrap();
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("reason_source"), "{bad:?}: {error}");
        }
    }

    #[test]
    fn the_replication_lease_is_checked_against_the_rapi_timeout() {
        let config = Config::parse("[replication]\nenabled = true\n").unwrap();
        config.validate().unwrap();
        let lease = config.replication_lease();
        assert_eq!(lease.duration, Duration::from_secs(10));
        // A write started within the lease ends within the RAPI timeout (longer than the
        // agents' by default).
        assert_eq!(lease.call_bound, Duration::from_secs(30));
        assert_eq!(lease.takeover_wait(), Duration::from_secs(44));
        let config =
            Config::parse("[replication]\nenabled = true\nlease = 2.5\n[agents]\ntimeout = 40.0\n")
                .unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.replication_lease().call_bound,
            Duration::from_secs(40)
        );
        // A RAPI timeout that makes the new master's wait outlast the round watchdog.
        let text =
            "round_stall_timeout = 120.0\n[replication]\nenabled = true\n[rapi]\ntimeout = 100.0\n";
        let error = Config::parse(text)
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rapi.timeout") && error.contains("round_stall_timeout"),
            "{error}"
        );
        // Without replication there is no takeover to wait for.
        let text = "round_stall_timeout = 120.0\n[rapi]\ntimeout = 100.0\n";
        Config::parse(text).unwrap().validate().unwrap();
        for bad in ["0.0", "-1.0", "nan"] {
            let text = format!("[replication]\nlease = {bad}\n");
            let error = Config::parse(&text)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(error.contains("replication.lease"), "{bad}: {error}");
        }
    }

    #[test]
    fn users_file_defaults_to_etc_and_can_be_set() {
        assert_eq!(
            Config::default().users,
            PathBuf::from("/etc/nodecare/users")
        );
        let config = Config::parse("users = \"/srv/nodecare/users\"\n").unwrap();
        assert_eq!(config.users, PathBuf::from("/srv/nodecare/users"));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors() {
        let error = Config::parse("round_intervall = 3")
            .unwrap_err()
            .to_string();
        assert!(error.contains("round_intervall"), "{error}");
        assert!(Config::parse("[agents]\nbogus = 1").is_err());
        let config = Config::parse("round_interval = -1").unwrap();
        assert!(config.validate().is_err());
        let config = Config::parse("[rapi]\nurl = \"http://127.0.0.1:1\"").unwrap();
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("allow_plain_http")
        );
        let config = Config::parse("[notify]\nwebhook_url = \"ftp://x\"").unwrap();
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("notify.webhook_url"), "{error}");
        let config =
            Config::parse("[notify]\nwebhook_url = \"https://x/hook\"\nretries = 2").unwrap();
        config.validate().unwrap();
        assert_eq!(config.webhook().unwrap().retries, 2);
        assert!(Config::default().webhook().is_none());
        let config = Config::parse("max_disrupted_nodes = 0").unwrap();
        assert!(config.validate().is_err());
        // Clock skew is bounded: it must not stretch a report's lifetime.
        assert!(Config::default().agents.max_clock_skew <= 5.0);
        let config = Config::parse("[agents]\nmax_clock_skew = 150.0").unwrap();
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("max_clock_skew"), "{error}");
        Config::parse("[agents]\nmax_clock_skew = 30.0")
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn node_repair_settings_parse_and_bad_values_name_the_key() {
        for (text, immovable) in [
            ("fail", ImmovablePolicy::Fail),
            ("leave", ImmovablePolicy::Leave),
            ("shutdown", ImmovablePolicy::Shutdown),
        ] {
            let config = Config::parse(&format!(
                "immovable_instances = \"{text}\"\noffline_after_evacuation = false\nundrain_on_ack = true\n"
            ))
            .unwrap();
            config.validate().unwrap();
            assert_eq!(config.immovable_instances, immovable);
            assert_eq!(immovable.as_str(), text);
            assert!(!config.evacuation_policy().offline_after_evacuation);
            assert!(config.undrain_on_ack);
        }
        let error = Config::parse("immovable_instances = \"migrate\"")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("immovable_instances") || error.contains("migrate"),
            "{error}"
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_unless_missing_and_optional() {
        let path = Path::new("/etc/nodecare/coordinator.toml");
        let denied = || Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        for required in [false, true] {
            let error = Config::from_read(path, denied(), required)
                .unwrap_err()
                .to_string();
            assert!(error.contains("/etc/nodecare/coordinator.toml"), "{error}");
        }
        let error = Config::from_read(path, Ok("round_intervall = 3".into()), false)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("/etc/nodecare/coordinator.toml") && error.contains("round_intervall"),
            "{error}"
        );
        let config = Config::from_read(path, Ok("max_disrupted_nodes = 3".into()), true).unwrap();
        assert_eq!(config.max_disrupted_nodes, 3);
    }

    #[test]
    fn the_one_shot_policy_has_the_cluster_caps_and_nothing_else() {
        let config = Config::parse(
            "max_disrupted_nodes = 3\nmin_healthy_nodes = 5\nmax_disrupted_percent = 10\n",
        )
        .unwrap();
        let policy = config.one_shot_policy();
        assert_eq!(
            policy.cluster,
            Caps {
                max_disrupted_nodes: 3,
                max_disrupted_percent: None,
                min_healthy_nodes: 5,
            }
        );
        assert_eq!(
            crate::gate::Policy {
                cluster: Caps::default(),
                ..policy
            },
            crate::gate::Policy {
                cluster: Caps::default(),
                ..crate::gate::Policy::default()
            }
        );
    }

    #[test]
    fn full_file_parses() {
        let config = Config::parse(
            r#"
            node_name = "node1.example.com"
            state_dir = "/tmp/x"
            round_interval = 0.5
            max_disrupted_nodes = 2
            [agents]
            url_template = "http://{name}:1815"
            overrides = { "node2.example.com" = "http://127.0.0.1:4000" }
            [rapi]
            url = "https://cluster:5080"
            credentials = "/etc/nodecare/rapi-credentials"
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.caps().max_disrupted_nodes, 2);
        assert_eq!(config.agent_urls().overrides.len(), 1);
        let missing = || Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let path = Path::new("/nonexistent/coordinator.toml");
        assert!(Config::from_read(path, missing(), true).is_err());
        assert_eq!(
            config.evacuation_policy(),
            EvacuationPolicy {
                immovable: ImmovablePolicy::Fail,
                offline_after_evacuation: true
            }
        );
        assert!(!config.undrain_on_ack);
        assert_eq!(
            Config::from_read(path, missing(), false).unwrap(),
            Config::default()
        );
    }
}
