//! The command line: `nodecare-agent [OPTIONS] [COMMAND]`.
//!
//! Without a command the agent serves. Every configuration option is also a flag, and flags
//! override the file.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, ConfigError, DEFAULT_CONFIG_PATH};

/// nodecare's per-node agent: mond-compatible reports and the signed self-diagnose verdict.
#[derive(Debug, Parser)]
#[command(name = "nodecare-agent", version, about)]
pub struct Cli {
    /// Configuration file (TOML). The default file may be absent; an explicit one must exist.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check_config: bool,
    /// Options that override the configuration file.
    #[command(flatten)]
    pub overrides: ConfigOverrides,
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API and run the collectors (the default).
    Serve,
    /// Run the diagnose executables and print the merged verdict and the signed envelope.
    Diagnose {
        /// Run once and exit (otherwise repeat every diagnose interval).
        #[arg(long)]
        once: bool,
    },
    /// Read a signed envelope on stdin; exit 0 only if it is valid.
    Verify {
        /// Only accept envelopes for this node.
        #[arg(long)]
        node: Option<String>,
        /// Reject sequence numbers below this one (replay).
        #[arg(long)]
        min_sequence: Option<u64>,
    },
    /// Run a whitelisted repair command by hand, in the daemon's sandbox and under its repair
    /// lock, with a verdict JSON on its stdin; print the result. Exit 0 only if it succeeded.
    Repair {
        /// The repair command's name in the repair whitelist directory.
        #[arg(long, value_name = "NAME")]
        command: String,
        /// File holding the verdict JSON given to the command on stdin (`-` for stdin).
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
    },
    /// The copy of the coordinator's state this node keeps as a master candidate.
    Replica {
        /// What to do.
        #[command(subcommand)]
        action: ReplicaAction,
    },
    /// Tools for diagnose scripts' authors.
    Script {
        /// What to do.
        #[command(subcommand)]
        action: ScriptAction,
    },
}

/// `nodecare-agent replica ...`.
#[derive(Debug, Subcommand)]
pub enum ReplicaAction {
    /// Remove the kept copy (`<state_dir>/replica/kept`), e.g. one a coordinator cannot restore
    /// after a takeover; the running agent then holds none and accepts the next push. Local, as
    /// root. Exit 0 whether or not a copy was kept.
    Discard,
}

/// `nodecare-agent script ...`.
#[derive(Debug, Subcommand)]
pub enum ScriptAction {
    /// Run a diagnose script in the agent's sandbox a few times and say, in plain words, what
    /// the agent would make of it: whitelist problems, its verdict, output problems and
    /// unstable fingerprints. Exit 0 when it passes, 1 when it has problems, 2 when it cannot
    /// be checked. It runs the script as root, so it runs only what the whitelist's file rules
    /// allow: a regular file (a symbolic link is never followed), owned by root, writable by
    /// root alone, at most 1 MiB; any other file is reported and not run.
    Check {
        /// The script.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// How many times to run it.
        #[arg(long, default_value_t = crate::script_check::DEFAULT_RUNS,
              value_parser = clap::value_parser!(u32).range(1..=20))]
        runs: u32,
    },
}

/// Every configuration option as a flag; `None` keeps the file's value.
#[derive(Debug, Default, Args)]
pub struct ConfigOverrides {
    /// HTTP listen address [default: 0.0.0.0:1815].
    #[arg(long, global = true, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Node name in signed envelopes [default: host name].
    #[arg(long, global = true)]
    pub node_name: Option<String>,
    /// Cluster HMAC key file [default: /var/lib/ganeti/hmac.key].
    #[arg(long, global = true, value_name = "FILE")]
    pub hmac_key: Option<PathBuf>,
    /// State directory [default: /var/lib/nodecare/agent].
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Diagnose whitelist directory [default: /etc/ganeti/node-diagnose-commands].
    #[arg(long, global = true, value_name = "DIR")]
    pub diagnose_dir: Option<PathBuf>,
    /// Run only this diagnose executable.
    #[arg(long, global = true, value_name = "NAME")]
    pub diagnose_command: Option<String>,
    /// Seconds between diagnose runs [default: 60].
    #[arg(long, global = true, value_name = "SECS")]
    pub diagnose_interval_secs: Option<u64>,
    /// Seconds one diagnose executable may run [default: 30].
    #[arg(long, global = true, value_name = "SECS")]
    pub diagnose_timeout_secs: Option<u64>,
    /// Maximum stdout bytes of a diagnose executable [default: 65536].
    #[arg(long, global = true, value_name = "BYTES")]
    pub diagnose_stdout_cap: Option<usize>,
    /// Identical runs before a changed non-Ok verdict is published [default: 1].
    #[arg(long, global = true, value_name = "N")]
    pub diagnose_confirmations: Option<u32>,
    /// Collector plugin whitelist directory [default: /etc/nodecare/collectors.d].
    #[arg(long, global = true, value_name = "DIR")]
    pub plugin_dir: Option<PathBuf>,
    /// Seconds between runs of each collector plugin [default: 60].
    #[arg(long, global = true, value_name = "SECS")]
    pub plugin_interval_secs: Option<u64>,
    /// Executables that may run at once [default: 4].
    #[arg(long, global = true, value_name = "N")]
    pub max_concurrent_scripts: Option<usize>,
    /// Signed report lifetime in diagnose intervals [default: 3].
    #[arg(long, global = true, value_name = "N")]
    pub signature_ttl_intervals: Option<u32>,
    /// Log filter [default: info].
    #[arg(long, global = true, value_name = "FILTER")]
    pub log: Option<String>,
    /// Boot id file [default: /proc/sys/kernel/random/boot_id].
    #[arg(long, global = true, value_name = "FILE")]
    pub boot_id_path: Option<PathBuf>,
    /// Reboot sentinel [default: /var/run/reboot-required].
    #[arg(long, global = true, value_name = "FILE")]
    pub reboot_required_path: Option<PathBuf>,
}

impl ConfigOverrides {
    /// Applies the flags given on top of `config`.
    pub fn apply(&self, config: &mut Config) {
        macro_rules! set {
            ($($field:ident),*) => {$(
                if let Some(value) = &self.$field {
                    config.$field = value.clone().into();
                }
            )*};
        }
        set!(
            listen,
            hmac_key,
            state_dir,
            diagnose_dir,
            diagnose_interval_secs,
            diagnose_timeout_secs,
            diagnose_stdout_cap,
            diagnose_confirmations,
            plugin_dir,
            plugin_interval_secs,
            max_concurrent_scripts,
            signature_ttl_intervals,
            log,
            boot_id_path,
            reboot_required_path
        );
        if let Some(name) = &self.node_name {
            config.node_name = Some(name.clone());
        }
        if let Some(name) = &self.diagnose_command {
            config.diagnose_command = Some(name.clone());
        }
    }
}

impl Cli {
    /// The effective configuration: file (or defaults), then flags, validated.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::load(path, true)?,
            None => Config::load(std::path::Path::new(DEFAULT_CONFIG_PATH), false)?,
        };
        self.overrides.apply(&mut config);
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, "diagnose_interval_secs = 10\nlog = \"debug\"\n").unwrap();
        let cli = Cli::try_parse_from([
            "nodecare-agent",
            "--config",
            file.to_str().unwrap(),
            "--diagnose-interval-secs",
            "5",
            "--listen",
            "127.0.0.1:1",
            "diagnose",
            "--once",
            "--diagnose-command",
            "smart",
        ])
        .unwrap();
        let config = cli.config().unwrap();
        assert_eq!(config.diagnose_interval_secs, 5);
        assert_eq!(config.log, "debug");
        assert_eq!(config.diagnose_command.as_deref(), Some("smart"));
        assert!(matches!(
            cli.command,
            Some(Command::Diagnose { once: true })
        ));

        let cli = Cli::try_parse_from(["nodecare-agent", "--diagnose-command", "a.b"]).unwrap();
        let error = cli.config().unwrap_err().to_string();
        assert!(error.contains("must match"), "{error}");
    }
}
