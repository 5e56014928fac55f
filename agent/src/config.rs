//! The agent's configuration: one TOML file, every option also a command-line flag.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nodecare_collectors::diagnose::{DEFAULT_DIAGNOSE_DIR, DiagnoseConfig};
use nodecare_collectors::runner::{DEFAULT_MAX_CONCURRENT, DEFAULT_STDERR_CAP, ExecLimits};
use nodecare_collectors::whitelist::{Owner, is_valid_name};
use serde::{Deserialize, Serialize};

/// Default configuration file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/nodecare/agent.toml";
/// Default listen address: mond's port on every address.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:1815";
/// Default ssconf directory (Ganeti's).
pub const DEFAULT_SSCONF_DIR: &str = "/var/lib/ganeti";
/// Default state directory (sequence number, last verdict).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/nodecare/agent";

/// Why a configuration is not usable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read configuration {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The file is not valid TOML for this configuration.
    #[error("invalid configuration {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What went wrong (line, unknown field, ...).
        reason: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The agent's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Node name used in signed envelopes; the host name when absent.
    pub node_name: Option<String>,
    /// The cluster HMAC key file.
    pub hmac_key: PathBuf,
    /// State directory: sequence number and last verdict.
    pub state_dir: PathBuf,
    /// Whitelist directory of diagnose executables.
    pub diagnose_dir: PathBuf,
    /// Run only this diagnose executable (Ganeti's single-command mode).
    pub diagnose_command: Option<String>,
    /// Seconds between diagnose runs.
    pub diagnose_interval_secs: u64,
    /// Seconds one diagnose executable may run.
    pub diagnose_timeout_secs: u64,
    /// Maximum bytes of a diagnose executable's stdout.
    pub diagnose_stdout_cap: usize,
    /// Consecutive identical runs before a changed non-Ok verdict is published.
    pub diagnose_confirmations: u32,
    /// Whitelist directory of external collector plugins (absent directory: no plugins).
    pub plugin_dir: PathBuf,
    /// Seconds between runs of each collector plugin.
    pub plugin_interval_secs: u64,
    /// Executables that may run at once.
    pub max_concurrent_scripts: usize,
    /// Lifetime of a signed report, in diagnose intervals.
    pub signature_ttl_intervals: u32,
    /// Log filter (tracing `EnvFilter` syntax); `RUST_LOG` overrides it.
    pub log: String,
    /// Whitelist directory of repair commands.
    pub repair_dir: PathBuf,
    /// The node's repair lock file; `repair.lock` in the state directory when absent.
    pub repair_lock: Option<PathBuf>,
    /// Seconds a repair request waits for the repair lock before it is refused as busy.
    pub repair_lock_timeout_secs: u64,
    /// Milliseconds before a refused repair request is answered.
    pub repair_invalid_request_delay_ms: u64,
    /// Bytes of stdout, and of stderr, kept from a repair command.
    pub repair_output_cap: usize,
    /// Seconds a repair command may run, unless listed in `repair_command_timeouts_secs`.
    pub repair_timeout_secs: u64,
    /// Per-command time limits in seconds, by repair command name.
    pub repair_command_timeouts_secs: std::collections::BTreeMap<String, u64>,
    /// The node's boot id file, reported in the signed diagnose payload.
    pub boot_id_path: PathBuf,
    /// The reboot sentinel: its existence is reported in the signed diagnose payload.
    pub reboot_required_path: PathBuf,
    /// Ganeti's ssconf directory: the master candidates' and the master's addresses there take
    /// the connections kept for the cluster's own callers ([`crate::peers`]).
    pub ssconf_dir: PathBuf,
    /// More addresses that take the connections kept for the cluster's own callers (e.g. a
    /// coordinator's address ssconf does not list).
    pub reserved_peers: Vec<std::net::IpAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 1815)),
            node_name: None,
            hmac_key: PathBuf::from(nodecare_protocol::sign::DEFAULT_HMAC_KEY_PATH),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            diagnose_dir: PathBuf::from(DEFAULT_DIAGNOSE_DIR),
            diagnose_command: None,
            diagnose_interval_secs: 60,
            diagnose_timeout_secs: 30,
            diagnose_stdout_cap: 64 * 1024,
            diagnose_confirmations: 1,
            plugin_dir: PathBuf::from(nodecare_collectors::plugin::DEFAULT_PLUGIN_DIR),
            plugin_interval_secs: 60,
            max_concurrent_scripts: DEFAULT_MAX_CONCURRENT,
            signature_ttl_intervals: 3,
            log: "info".to_owned(),
            repair_dir: PathBuf::from(nodecare_protocol::repair::DEFAULT_REPAIR_COMMANDS_DIR),
            repair_lock: None,
            repair_lock_timeout_secs: 8,
            repair_invalid_request_delay_ms: 1500,
            repair_output_cap: 64 * 1024,
            repair_timeout_secs: 600,
            repair_command_timeouts_secs: std::collections::BTreeMap::new(),
            boot_id_path: PathBuf::from(crate::boot::DEFAULT_BOOT_ID_PATH),
            reboot_required_path: PathBuf::from(crate::boot::DEFAULT_REBOOT_REQUIRED_PATH),
            ssconf_dir: PathBuf::from(DEFAULT_SSCONF_DIR),
            reserved_peers: Vec::new(),
        }
    }
}

impl Config {
    /// Parses TOML text.
    pub fn from_toml(text: &str, path: &Path) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|error| ConfigError::Parse {
            path: path.display().to_string(),
            reason: error.to_string(),
        })
    }

    /// Reads a file. `required = false` makes a missing file mean "all defaults".
    pub fn load(path: &Path, required: bool) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::from_toml(&text, path),
            Err(error) if !required && error.kind() == std::io::ErrorKind::NotFound => {
                Ok(Self::default())
            }
            Err(error) => Err(ConfigError::Read {
                path: path.display().to_string(),
                reason: error.to_string(),
            }),
        }
    }

    /// Checks value ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |text: String| Err(ConfigError::Invalid(text));
        if self.diagnose_interval_secs == 0 {
            return invalid("diagnose_interval_secs must be at least 1".into());
        }
        if self.plugin_interval_secs == 0 {
            return invalid("plugin_interval_secs must be at least 1".into());
        }
        if self.diagnose_timeout_secs == 0 {
            return invalid("diagnose_timeout_secs must be at least 1".into());
        }
        if self.diagnose_stdout_cap == 0 {
            return invalid("diagnose_stdout_cap must be at least 1".into());
        }
        if self.max_concurrent_scripts == 0 {
            return invalid("max_concurrent_scripts must be at least 1".into());
        }
        if self.signature_ttl_intervals == 0 {
            return invalid("signature_ttl_intervals must be at least 1".into());
        }
        if let Some(name) = &self.diagnose_command
            && !is_valid_name(name)
        {
            return invalid(format!(
                "diagnose_command {name:?} must match ^[A-Za-z0-9_-]+$"
            ));
        }
        if let Some(node) = &self.node_name
            && node.trim().is_empty()
        {
            return invalid("node_name must not be empty".into());
        }
        if self.repair_timeout_secs == 0
            || self
                .repair_command_timeouts_secs
                .values()
                .any(|secs| *secs == 0)
        {
            return invalid("repair timeouts must be at least 1 second".into());
        }
        if self.repair_output_cap == 0 {
            return invalid("repair_output_cap must be at least 1".into());
        }
        if let Some(name) = self
            .repair_command_timeouts_secs
            .keys()
            .find(|name| !is_valid_name(name))
        {
            return invalid(format!(
                "repair_command_timeouts_secs: {name:?} must match ^[A-Za-z0-9_-]+$"
            ));
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log).is_err() {
            return invalid(format!("log filter {:?} is not valid", self.log));
        }
        Ok(())
    }

    /// The diagnose interval.
    pub fn diagnose_interval(&self) -> Duration {
        Duration::from_secs(self.diagnose_interval_secs)
    }

    /// Lifetime of a signed report.
    pub fn signature_ttl(&self) -> Duration {
        self.diagnose_interval()
            .saturating_mul(self.signature_ttl_intervals)
    }

    /// The diagnose collector's configuration (root:root whitelist).
    pub fn diagnose(&self) -> DiagnoseConfig {
        DiagnoseConfig {
            dir: self.diagnose_dir.clone(),
            owner: Owner::ROOT,
            only: self.diagnose_command.clone(),
            limits: ExecLimits {
                timeout: Duration::from_secs(self.diagnose_timeout_secs),
                stdout_cap: self.diagnose_stdout_cap,
                stderr_cap: DEFAULT_STDERR_CAP,
            },
            interval: self.diagnose_interval(),
            confirmations: self.diagnose_confirmations,
        }
    }

    /// The collector plugins' configuration (root:root whitelist, the diagnose output cap).
    pub fn plugins(&self) -> nodecare_collectors::plugin::PluginConfig {
        let defaults = nodecare_collectors::plugin::PluginConfig::default();
        nodecare_collectors::plugin::PluginConfig {
            dir: self.plugin_dir.clone(),
            owner: Owner::ROOT,
            interval: Duration::from_secs(self.plugin_interval_secs),
            limits: ExecLimits {
                stdout_cap: self.diagnose_stdout_cap,
                ..defaults.limits
            },
        }
    }

    /// The repair path's configuration for `node` (root:root whitelist).
    pub fn repair(&self, node: &str) -> crate::repair::RepairConfig {
        let mut repair = crate::repair::RepairConfig::new(node, &self.state_dir);
        repair.commands_dir = self.repair_dir.clone();
        if let Some(lock) = &self.repair_lock {
            repair.lock_path = lock.clone();
        }
        repair.lock_timeout = Duration::from_secs(self.repair_lock_timeout_secs);
        repair.invalid_request_delay = Duration::from_millis(self.repair_invalid_request_delay_ms);
        repair.stdout_cap = self.repair_output_cap;
        repair.stderr_cap = self.repair_output_cap;
        repair.default_timeout = Duration::from_secs(self.repair_timeout_secs);
        repair.command_timeouts = self
            .repair_command_timeouts_secs
            .iter()
            .map(|(name, secs)| (name.clone(), Duration::from_secs(*secs)))
            .collect();
        repair
    }

    /// Where the boot id and the reboot sentinel are read.
    pub fn boot(&self) -> crate::boot::BootSource {
        crate::boot::BootSource {
            boot_id_path: Some(self.boot_id_path.clone()),
            reboot_required_path: Some(self.reboot_required_path.clone()),
        }
    }

    /// The node name: configured, or the host name.
    pub fn resolved_node_name(&self) -> String {
        if let Some(name) = &self.node_name {
            return name.clone();
        }
        nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .unwrap_or_else(|| "localhost".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_file() {
        assert_eq!(
            DEFAULT_LISTEN.parse::<SocketAddr>().unwrap(),
            Config::default().listen
        );
        let text = r#"
            listen = "127.0.0.1:9000"
            node_name = "node1.example.com"
            hmac_key = "/tmp/key"
            state_dir = "/tmp/state"
            diagnose_dir = "/tmp/diag"
            diagnose_command = "smart"
            diagnose_interval_secs = 10
            diagnose_timeout_secs = 5
            diagnose_stdout_cap = 1000
            diagnose_confirmations = 2
            max_concurrent_scripts = 2
            signature_ttl_intervals = 4
            log = "debug"
            boot_id_path = "/tmp/node1/boot_id"
            reboot_required_path = "/tmp/node1/reboot-required"
        "#;
        let config = Config::from_toml(text, Path::new("x")).unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.boot().boot_id_path.as_deref(),
            Some(Path::new("/tmp/node1/boot_id"))
        );
        assert_eq!(
            Config::default().boot().reboot_required_path.as_deref(),
            Some(Path::new("/var/run/reboot-required"))
        );
        assert_eq!(config.signature_ttl(), Duration::from_secs(40));
        assert_eq!(config.diagnose().only.as_deref(), Some("smart"));
        let repair = Config::from_toml(
            "repair_dir = \"/tmp/rep\"\nrepair_timeout_secs = 60\n\
             [repair_command_timeouts_secs]\nrescan-scsi-host = 30\n",
            Path::new("x"),
        )
        .unwrap();
        repair.validate().unwrap();
        let repair = repair.repair("node1");
        assert_eq!(repair.commands_dir, Path::new("/tmp/rep"));
        assert_eq!(
            repair.timeout_of("rescan-scsi-host"),
            Duration::from_secs(30)
        );
        assert_eq!(repair.timeout_of("other"), Duration::from_secs(60));
        assert_eq!(
            repair.lock_path,
            Path::new(DEFAULT_STATE_DIR).join("repair.lock")
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_are_refused() {
        let error = Config::from_toml("listen_port = 1", Path::new("a.toml")).unwrap_err();
        assert!(error.to_string().contains("unknown field"), "{error}");
        let error = Config::from_toml("listen = \"nope\"", Path::new("a.toml")).unwrap_err();
        assert!(error.to_string().contains("a.toml"), "{error}");
        for text in [
            "diagnose_interval_secs = 0",
            "diagnose_command = \"../x\"",
            "max_concurrent_scripts = 0",
            "node_name = \" \"",
            "repair_timeout_secs = 0",
            "[repair_command_timeouts_secs]\n\"a/b\" = 5",
        ] {
            let config = Config::from_toml(text, Path::new("a.toml")).unwrap();
            assert!(config.validate().is_err(), "{text}");
        }
        assert!(Config::load(Path::new("/nonexistent/agent.toml"), false).is_ok());
        assert!(Config::load(Path::new("/nonexistent/agent.toml"), true).is_err());
    }
}
