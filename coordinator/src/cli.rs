//! The `nodecare-coordinator` command line (the binary is a one-line wrapper, so tests can
//! build the very same daemon under another name).
//!
//! Exit codes: 0 stopped by a signal, 1 runtime failure, 2 bad configuration, 11 not the master.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::config::{Config, DEFAULT_CONFIG_PATH, EXIT_CONFIG, EXIT_NOT_MASTER};
use crate::daemon::Coordinator;
use crate::ganeti::Ganeti;
use crate::ganeti::rapi::{Credentials, RapiClient, RapiConfig, ServerTrust};
use crate::reconcile::RoundError;
use anyhow::Context as _;
use clap::Parser;
use nodecare_protocol::HmacKey;

/// nodecare's master-side daemon: reads signed self-diagnose reports from every node's agent
/// and repairs nodes through Ganeti (live repair, evacuation), within a safety budget.
#[derive(Debug, Parser)]
#[command(name = "nodecare-coordinator", version)]
struct Args {
    /// Configuration file (TOML). A missing default file means all defaults.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Check the configuration (and that the key, certificate and credentials files are
    /// readable), print the effective configuration and exit.
    #[arg(long)]
    check_config: bool,
    /// This node's name as Ganeti knows it (default: the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// State directory.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// HTTP API address.
    #[arg(long, short = 'b')]
    listen: Option<std::net::SocketAddr>,
    /// Seconds between rounds.
    #[arg(long)]
    round_interval: Option<f64>,
    /// Cluster HMAC key file.
    #[arg(long)]
    hmac_key: Option<PathBuf>,
    /// RAPI base URL.
    #[arg(long)]
    rapi_url: Option<String>,
    /// PEM file with the RAPI certificate to pin.
    #[arg(long)]
    rapi_certificate: Option<PathBuf>,
    /// RAPI credentials file (`user:password`).
    #[arg(long)]
    rapi_credentials: Option<PathBuf>,
    /// Agent base URL template (`{ip}`, `{name}`).
    #[arg(long)]
    agent_url_template: Option<String>,
    /// Most nodes drained or evacuating at once.
    #[arg(long)]
    max_disrupted_nodes: Option<usize>,
    /// Fewest healthy nodes an evacuation may leave.
    #[arg(long)]
    min_healthy_nodes: Option<usize>,
    /// Run one round and exit.
    #[arg(long)]
    once: bool,
    /// Log filter (tracing syntax), e.g. `info` or `nodecare_coordinator=debug`.
    #[arg(long, env = "NODECARE_LOG", default_value = "info")]
    log: String,
}

impl Args {
    fn apply(&self, config: &mut Config) {
        if let Some(v) = &self.node_name {
            config.node_name = Some(v.clone());
        }
        if let Some(v) = &self.state_dir {
            config.state_dir.clone_from(v);
        }
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = self.round_interval {
            config.round_interval = v;
        }
        if let Some(v) = &self.hmac_key {
            config.hmac_key.clone_from(v);
        }
        if let Some(v) = &self.rapi_url {
            config.rapi.url.clone_from(v);
        }
        if let Some(v) = &self.rapi_certificate {
            config.rapi.certificate.clone_from(v);
        }
        if let Some(v) = &self.rapi_credentials {
            config.rapi.credentials = Some(v.clone());
        }
        if let Some(v) = &self.agent_url_template {
            config.agents.url_template.clone_from(v);
        }
        if let Some(v) = self.max_disrupted_nodes {
            config.max_disrupted_nodes = v;
        }
        if let Some(v) = self.min_healthy_nodes {
            config.min_healthy_nodes = v;
        }
    }
}

fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("cannot read the host name; pass --node-name")?;
    Ok(name.trim().to_owned())
}

struct Prepared {
    config: Config,
    node_name: String,
    key: HmacKey,
    ganeti: RapiClient,
}

/// Loads everything that can be wrong in the configuration (exit code 2).
fn prepare(args: &Args) -> anyhow::Result<Prepared> {
    let (path, required) = match &args.config {
        Some(path) => (path.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    };
    let mut config = Config::load(&path, required)?;
    args.apply(&mut config);
    config.validate()?;
    let node_name = match &config.node_name {
        Some(name) => name.clone(),
        None => hostname()?,
    };
    let key = HmacKey::from_file(&config.hmac_key)?;
    let trust = if config.rapi.url.starts_with("http://") {
        ServerTrust::PlainHttp
    } else {
        // Read now so that a missing certificate is a configuration error.
        let pem = std::fs::read(&config.rapi.certificate).with_context(|| {
            format!(
                "cannot read the RAPI certificate {}",
                config.rapi.certificate.display()
            )
        })?;
        ServerTrust::PinnedCertPem(pem)
    };
    let mut rapi = RapiConfig::new(config.rapi.url.clone(), trust);
    rapi.request_timeout = Config::duration(config.rapi.timeout);
    if let Some(path) = &config.rapi.credentials {
        rapi = rapi.with_credentials(Credentials::from_file(path)?);
    }
    crate::install_crypto_provider();
    let ganeti = RapiClient::new(rapi)?;
    Ok(Prepared {
        config,
        node_name,
        key,
        ganeti,
    })
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::error!(%error, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        result = tokio::signal::ctrl_c() => match result {
            Ok(()) => tracing::info!("SIGINT: stopping"),
            Err(error) => tracing::error!(%error, "cannot listen for SIGINT"),
        },
    }
}

async fn run(prepared: Prepared, once: bool) -> anyhow::Result<ExitCode> {
    let Prepared {
        config,
        node_name,
        key,
        ganeti,
    } = prepared;
    let ganeti: Arc<dyn Ganeti> = Arc::new(ganeti);
    let mut coordinator = Coordinator::new(&config, node_name.clone(), ganeti, key)?;
    // Master check at start-up; transient RAPI trouble is retried for a while.
    let mut attempt = 0;
    loop {
        match coordinator.check_master().await {
            Ok(()) => break,
            Err(error @ RoundError::NotMaster { .. }) => {
                tracing::error!(%error, "refusing to run");
                return Ok(ExitCode::from(EXIT_NOT_MASTER as u8));
            }
            Err(error) if attempt < 5 => {
                attempt += 1;
                tracing::warn!(%error, attempt, "cannot check mastership yet; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            Err(error) => return Err(error).context("cannot check mastership"),
        }
    }
    if once {
        return match coordinator.round().await {
            Ok(summary) => {
                println!("{}", serde_json::to_string_pretty(&summary)?);
                Ok(ExitCode::SUCCESS)
            }
            Err(RoundError::NotMaster { .. }) => Ok(ExitCode::from(EXIT_NOT_MASTER as u8)),
            Err(error) => Err(error.into()),
        };
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    tracing::info!(node = %node_name, listen = %config.listen, interval_s = config.round_interval,
        "nodecare-coordinator running on the master");
    let _watchdog = crate::systemd::notify_ready();
    let shutdown = async {
        shutdown_signal().await;
        crate::systemd::notify_stopping();
    };
    match coordinator.run(listener, shutdown).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(error @ RoundError::NotMaster { .. }) => {
            tracing::error!(%error, "no longer the master; exiting");
            Ok(ExitCode::from(EXIT_NOT_MASTER as u8))
        }
        Err(error) => Err(error.into()),
    }
}

/// The command-line definition, for generated documentation (man pages, shell completions).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Parses the command line, runs the daemon and returns its exit code.
pub fn main() -> ExitCode {
    let args = Args::parse();
    nodecare_daemon::logging::init(&args.log);
    let prepared = match prepare(&args) {
        Ok(prepared) => prepared,
        Err(error) => {
            eprintln!("nodecare-coordinator: configuration error: {error:#}");
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    if args.check_config {
        match toml::to_string_pretty(&prepared.config) {
            Ok(text) => {
                println!("# configuration OK (node {})\n{text}", prepared.node_name);
                return ExitCode::SUCCESS;
            }
            Err(error) => {
                eprintln!("nodecare-coordinator: cannot print the configuration: {error}");
                return ExitCode::from(EXIT_CONFIG as u8);
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("nodecare-coordinator: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(prepared, args.once)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("nodecare-coordinator: {error:#}");
            ExitCode::FAILURE
        }
    }
}
