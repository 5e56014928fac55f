//! The `nodecare-coordinator` command line (the binary is a one-line wrapper, so tests can
//! build the very same daemon under another name).
//!
//! Exit codes: 0 stopped by a signal, 1 runtime failure, 2 bad configuration, 11 not the master
//! (`--once` only: the daemon stands by on a node that is not the master).
//! `--harep` exits as harep: 0, or 1 when anything went wrong (a bad configuration included).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::config::{
    Config, DEFAULT_CONFIG_PATH, DEFAULT_LISTEN, DEFAULT_MAX_DISRUPTED_NODES,
    DEFAULT_MIN_HEALTHY_NODES, DEFAULT_RAPI_CERTIFICATE, DEFAULT_RAPI_URL,
    DEFAULT_ROUND_INTERVAL_SECS, DEFAULT_STATE_DIR, EXIT_CONFIG, EXIT_NOT_MASTER,
};
use crate::daemon::Coordinator;
use crate::reconcile::RoundError;
use crate::scrape::DEFAULT_AGENT_URL_TEMPLATE;
use anyhow::Context as _;
use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches as _, Parser};
use nodecare_ganeti::Ganeti;
use nodecare_ganeti::rapi::RapiClient;
use nodecare_protocol::HmacKey;
use nodecare_protocol::sign::DEFAULT_HMAC_KEY_PATH;

/// nodecare's master-side daemon: reads signed self-diagnose reports from every node's agent
/// and repairs nodes through Ganeti (live repair, evacuation), within the gate (failure domains, caps, storage health, storm breaker).
///
/// Every setting comes from the configuration file; a flag given on the command line overrides
/// it. The defaults shown are those of an absent file.
#[derive(Debug, Parser)]
#[command(name = "nodecare-coordinator", version)]
struct Args {
    /// Configuration file (TOML). A missing default file means all defaults.
    #[arg(long, short = 'c', default_value = DEFAULT_CONFIG_PATH)]
    config: PathBuf,
    /// Check the configuration (and that the key, certificate and credentials files are
    /// readable), print the effective configuration and exit.
    #[arg(long)]
    check_config: bool,
    /// This node's name as Ganeti knows it [default: the host name].
    #[arg(long)]
    node_name: Option<String>,
    /// State directory.
    #[arg(long, default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// HTTP API address.
    #[arg(long, short = 'b', default_value = DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
    /// Seconds between rounds (each round reads every agent and takes the next step).
    #[arg(long, default_value_t = DEFAULT_ROUND_INTERVAL_SECS)]
    round_interval: f64,
    /// Cluster HMAC key file.
    #[arg(long, default_value = DEFAULT_HMAC_KEY_PATH)]
    hmac_key: PathBuf,
    /// RAPI base URL.
    #[arg(long, default_value = DEFAULT_RAPI_URL)]
    rapi_url: String,
    /// PEM file with the RAPI certificate to pin.
    #[arg(long, default_value = DEFAULT_RAPI_CERTIFICATE)]
    rapi_certificate: PathBuf,
    /// RAPI credentials file (`user:password`) [default: none].
    #[arg(long)]
    rapi_credentials: Option<PathBuf>,
    /// Agent base URL template (`{ip}`, `{name}`).
    #[arg(long, default_value = DEFAULT_AGENT_URL_TEMPLATE)]
    agent_url_template: String,
    /// Most nodes drained or evacuating at once, whoever drained them.
    #[arg(long, default_value_t = DEFAULT_MAX_DISRUPTED_NODES)]
    max_disrupted_nodes: usize,
    /// Fewest healthy nodes an evacuation may leave.
    #[arg(long, default_value_t = DEFAULT_MIN_HEALTHY_NODES)]
    min_healthy_nodes: usize,
    /// Run one round and exit.
    #[arg(long)]
    once: bool,
    /// Run the instance auto-repair duty once, as `harep` does (within the gate's caps), print
    /// harep's output and exit.
    #[arg(long, conflicts_with = "once")]
    harep: bool,
    /// With `--harep`: submit nothing, print what would be done (harep's `--dry-run`).
    #[arg(long, requires = "harep")]
    dry_run: bool,
    /// With `--harep`: reach the local master (harep's Luxi option) through the configuration's
    /// RAPI settings (`[rapi]`); a SOCKET given is not used.
    #[arg(short = 'L', long = "luxi", num_args = 0..=1, value_name = "SOCKET", requires = "harep")]
    luxi: Option<Option<String>>,
    /// With `--harep`: reach the cluster via RAPI at ADDRESS (host, host:port or
    /// https://user:pass@host:port) instead of the configuration's.
    #[arg(
        short = 'm',
        long = "master",
        value_name = "ADDRESS",
        requires = "harep",
        conflicts_with = "luxi"
    )]
    master: Option<String>,
    /// With `--harep -m`: PEM file with the cluster's RAPI certificate, pinned.
    #[arg(long, value_name = "FILE", requires = "master")]
    rapi_ca: Option<PathBuf>,
    /// With `--harep`: harep's delay before a repair's opcodes (seconds, at least 0). Accepted
    /// for compatibility: a repair is recorded before it is submitted, so that no other run
    /// starts one on the same instance, and needs no delay (see docs/harep.md).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10.0,
        requires = "harep"
    )]
    job_delay: f64,
    /// With `--harep`: reason added to the reason trail of every job submitted.
    #[arg(long, value_name = "TEXT", requires = "harep")]
    reason: Option<String>,
    /// harep takes no arguments (refused with harep's message).
    #[arg(hide = true, requires = "harep")]
    extra: Vec<String>,
    /// Shrink the state database now and exit: apply the retention policy at once (what is old
    /// and finished), then give every free page back to the file system (VACUUM). Safe while the
    /// daemon runs (it waits for the database); revoke overrides and release grants first for
    /// them to be pruned.
    #[arg(long, conflicts_with_all = ["once", "harep"])]
    shrink_state: bool,
    /// Replay every round the flight recorder kept (the gate's decision, from what it saw) and
    /// exit: 0 when each replays to the decision it recorded, 1 when one differs (each is
    /// printed) or the state cannot be read. Safe while the daemon runs.
    #[arg(long, conflicts_with_all = ["once", "harep", "shrink_state"])]
    replay_rounds: bool,
    /// Log filter (tracing syntax), e.g. `info` or `nodecare_coordinator=debug`.
    #[arg(long, env = "NODECARE_LOG", default_value = "info")]
    log: String,
}

/// Whether the argument `id` was given (command line or environment), not defaulted.
fn given(matches: &ArgMatches, id: &str) -> bool {
    matches!(
        matches.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

impl Args {
    /// Applies the flags given on the command line over the file's values.
    fn apply(&self, matches: &ArgMatches, config: &mut Config) {
        if let Some(v) = &self.node_name {
            config.node_name = Some(v.clone());
        }
        if given(matches, "state_dir") {
            config.state_dir.clone_from(&self.state_dir);
        }
        if given(matches, "listen") {
            config.listen = self.listen;
        }
        if given(matches, "round_interval") {
            config.round_interval = self.round_interval;
        }
        if given(matches, "hmac_key") {
            config.hmac_key.clone_from(&self.hmac_key);
        }
        if given(matches, "rapi_url") {
            config.rapi.url.clone_from(&self.rapi_url);
        }
        if given(matches, "rapi_certificate") {
            config.rapi.certificate.clone_from(&self.rapi_certificate);
        }
        if let Some(v) = &self.rapi_credentials {
            config.rapi.credentials = Some(v.clone());
        }
        if given(matches, "agent_url_template") {
            config
                .agents
                .url_template
                .clone_from(&self.agent_url_template);
        }
        if given(matches, "max_disrupted_nodes") {
            config.max_disrupted_nodes = self.max_disrupted_nodes;
        }
        if given(matches, "min_healthy_nodes") {
            config.min_healthy_nodes = self.min_healthy_nodes;
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

/// Reads the cluster HMAC key as every secret file is read (`nodecare_daemon::secret`): refused,
/// with the reason, when others can write or read it or it belongs to another user, or when it
/// is empty. As in Ganeti, the file's bytes are the key, trailing newline included.
fn load_hmac_key(path: &std::path::Path) -> anyhow::Result<HmacKey> {
    let secret = nodecare_daemon::secret::read_secret_file(path)?;
    if secret.is_empty() {
        anyhow::bail!(
            "cannot read HMAC key file {}: the key file is empty",
            path.display()
        );
    }
    Ok(HmacKey::new(secret))
}

/// Loads everything that can be wrong in the configuration (exit code 2).
fn prepare(args: &Args, matches: &ArgMatches) -> anyhow::Result<Prepared> {
    let mut config = crate::config::load(&args.config, given(matches, "config"))?;
    args.apply(matches, &mut config);
    config.validate()?;
    // The calendar's time zone is read from the system now: an unknown one stops the start.
    crate::config::calendar(&config)?;
    let node_name = match &config.node_name {
        Some(name) => name.clone(),
        None => hostname()?,
    };
    let key = load_hmac_key(&config.hmac_key)?;
    let ganeti = crate::config::rapi_client(&config)?;
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
    let source: Arc<dyn crate::balance::ClusterSource> = Arc::new(ganeti.clone());
    let ganeti: Arc<dyn Ganeti> = Arc::new(ganeti);
    let mut coordinator =
        Coordinator::new(&config, node_name.clone(), ganeti, key)?.with_cluster_source(source);
    if once {
        return once_round(&mut coordinator).await;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    if let Some((listener, access)) = local_socket(&config) {
        coordinator = coordinator.with_local_socket(listener, access);
    }
    tracing::info!(node = %node_name, listen = %config.listen, interval_s = config.round_interval,
        "nodecare-coordinator running (it acts while this node is the master)");
    let _watchdog = nodecare_daemon::systemd::notify_ready_on_progress(coordinator.progress());
    let shutdown = async {
        shutdown_signal().await;
        nodecare_daemon::systemd::notify_stopping();
    };
    coordinator.run(listener, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// The API's local socket (`api_socket`) bound, and who may use it; `None` (logged) when it is
/// off or cannot be bound: the API on the network still serves.
fn local_socket(config: &Config) -> Option<(tokio::net::UnixListener, crate::server::LocalAccess)> {
    if config.api_socket.as_os_str().is_empty() {
        return None;
    }
    let group = if config.api_socket_group.is_empty() {
        None
    } else {
        match nix::unistd::Group::from_name(&config.api_socket_group) {
            Ok(Some(group)) => Some(group.gid.as_raw()),
            Ok(None) | Err(_) => {
                tracing::warn!(group = %config.api_socket_group, "api_socket_group does not exist: the local socket is for root only");
                None
            }
        }
    };
    match crate::server::bind_local(&config.api_socket) {
        Ok(listener) => {
            tracing::info!(socket = %config.api_socket.display(), group = %config.api_socket_group, "the API serves the local socket too");
            Some((listener, crate::server::LocalAccess { group }))
        }
        Err(error) => {
            let default_without_directory = config.api_socket.as_os_str()
                == nodecare_core::config::DEFAULT_API_SOCKET
                && config.api_socket.parent().is_some_and(|dir| !dir.exists());
            if default_without_directory {
                // Outside the packaged unit (its RuntimeDirectory makes /run/nodecare) the
                // default socket has no directory: nothing is wrong, the network serves.
                tracing::info!(socket = %config.api_socket.display(), "no local socket for the API (its directory does not exist; the packaged unit makes it): the CLI on this node uses the network");
            } else {
                tracing::warn!(socket = %config.api_socket.display(), %error, "no local socket for the API: the CLI on this node uses the network");
            }
            None
        }
    }
}

/// `--once`: one round on the master (exit 11 elsewhere).
async fn once_round(coordinator: &mut Coordinator) -> anyhow::Result<ExitCode> {
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
    match coordinator.round().await {
        Ok(summary) => {
            println!("{}", serde_json::to_string_pretty(&summary)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(RoundError::NotMaster { .. }) => Ok(ExitCode::from(EXIT_NOT_MASTER as u8)),
        Err(error) => Err(error.into()),
    }
}

/// `--harep`: one run of the instance auto-repair duty with harep's options
/// ([`crate::harep`]): harep's output on stdout, problems on stderr (exit 1 when there were
/// any, a bad configuration included). Needs only the configuration and RAPI (no HMAC key).
fn harep(args: &Args, matches: &ArgMatches) -> ExitCode {
    let mut config = match crate::config::load(&args.config, given(matches, "config")) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("Error: {error}");
            return ExitCode::from(1);
        }
    };
    args.apply(matches, &mut config);
    if let Err(error) = config.validate() {
        eprintln!("Error: {error}");
        return ExitCode::from(1);
    }
    let options = crate::harep::HarepOptions {
        luxi: args.luxi.clone(),
        master: args.master.clone(),
        rapi_ca: args.rapi_ca.clone(),
        dry_run: args.dry_run,
        job_delay: args.job_delay,
        reason: args.reason.clone(),
        extra: args.extra.clone(),
    };
    crate::harep::run(&config, &options)
}

/// `--shrink-state`: retention now, then a full VACUUM of the state's and the flight
/// recorder's databases; what it did, for people, and whether the state now fits the replica
/// limit (what a master candidate keeps).
pub fn shrink_state(config: &Config) -> anyhow::Result<(String, bool)> {
    let store = crate::store::Store::open_dir(&config.state_dir)
        .with_context(|| format!("cannot open the state in {}", config.state_dir.display()))?;
    let before = store.size_bytes()?;
    let recorder_before = store.recorder_file_bytes()?;
    let now_ms = nodecare_protocol::now_ms();
    let pruned = store.apply_retention(&config.retention.policy(), now_ms)?;
    store.vacuum()?;
    let after = store.size_bytes()?;
    let recorder_after = store.recorder_file_bytes()?;
    let snapshot = store.snapshot_bytes()?;
    let limit = nodecare_protocol::replica::MAX_REPLICA_BYTES;
    let fits = snapshot <= limit;
    let mut report = format!(
        "state {}: {before} bytes before, {after} after; {} rows deleted by retention\n\
         replicated to the master candidates: {snapshot} bytes, of the {limit} they keep\n\
         flight recorder (not replicated): {recorder_before} bytes before, {recorder_after} after",
        config.state_dir.display(),
        pruned.total()
    );
    if !fits {
        report.push_str(
            "\nstill past the replica limit: what must be replicated (incidents, the ledger, \
             campaigns, grants, overrides) holds it; end the incidents and campaigns no longer \
             needed, revoke overrides, release grants, then run this again",
        );
    }
    Ok((report, fits))
}

/// `--replay-rounds`: every recorded round replayed; what it found, for people, and whether
/// every round replayed to its decision.
pub fn replay_rounds(config: &Config) -> anyhow::Result<(String, bool)> {
    let store = crate::store::Store::open_dir(&config.state_dir)
        .with_context(|| format!("cannot open the state in {}", config.state_dir.display()))?;
    let rounds = store.recorded_rounds(None, usize::MAX)?;
    let differ: Vec<u64> = rounds
        .iter()
        .filter(|r| !r.record.replays())
        .map(|r| r.round)
        .collect();
    let judgements: usize = rounds
        .iter()
        .map(|r| r.record.gate.decision.judgements.len())
        .sum();
    let mut report = format!(
        "{} recorded rounds ({judgements} judgements) replayed: {} differ",
        rounds.len(),
        differ.len()
    );
    for round in &differ {
        report.push_str(&format!(
            "\nround {round}: the gate decides otherwise from what it saw"
        ));
    }
    Ok((report, differ.is_empty()))
}

/// The command-line definition, for generated documentation (man pages, shell completions).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Parses the command line, runs the daemon and returns its exit code.
pub fn main() -> ExitCode {
    let matches = command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(args) => args,
        Err(error) => error.exit(),
    };
    nodecare_daemon::logging::init(&args.log);
    if args.harep {
        return harep(&args, &matches);
    }
    let prepared = match prepare(&args, &matches) {
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
    if args.replay_rounds {
        return match replay_rounds(&prepared.config) {
            Ok((report, same)) => {
                println!("{report}");
                if same {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => {
                eprintln!("nodecare-coordinator: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    if args.shrink_state {
        return match shrink_state(&prepared.config) {
            Ok((report, fits)) => {
                println!("{report}");
                if fits {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => {
                eprintln!("nodecare-coordinator: {error:#}");
                ExitCode::FAILURE
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrink_state_prunes_now_and_gives_the_space_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            state_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        config.retention.audit = 1.0;
        {
            let store = crate::store::Store::open_dir(dir.path()).unwrap();
            let long = "x".repeat(1000);
            for i in 0..2000 {
                store.audit(i, "ops", "override", &long).unwrap();
            }
        }
        let size = |report: &str| -> (u64, u64) {
            let numbers: Vec<u64> = report
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|word| word.parse().ok())
                .collect();
            (numbers[numbers.len() - 3], numbers[numbers.len() - 2])
        };
        let (report, fits) = shrink_state(&config).unwrap();
        let first = report.lines().next().unwrap();
        let (before, after) = size(first);
        assert!(before > 2_000_000, "{report}");
        assert!(after < before / 4, "{report}");
        assert!(
            first.ends_with("2000 rows deleted by retention"),
            "{report}"
        );
        assert!(fits, "{report}");
    }

    /// A state past the replica limit, as earlier versions could leave it (the flight recorder's
    /// rounds in the state's database, an audit log of long lines), gets back under the limit
    /// with the default retention: the recorder moves to its own database, the audit log is
    /// held to its budget.
    #[test]
    fn shrink_state_gets_back_under_the_replica_limit_with_the_default_retention() {
        use nodecare_protocol::replica::MAX_REPLICA_BYTES;
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            state_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let now = nodecare_protocol::now_ms() as i64;
        crate::store::Store::open_dir(dir.path()).unwrap();
        {
            let mut connection = rusqlite::Connection::open(dir.path().join("state.db")).unwrap();
            let transaction = connection.transaction().unwrap();
            transaction
                .execute_batch(
                    "CREATE TABLE main.recorder_rounds (
                         id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL,
                         last_ms INTEGER NOT NULL, repeats INTEGER NOT NULL,
                         coordinator TEXT NOT NULL);
                     CREATE TABLE main.recorder_round_parts (
                         round INTEGER NOT NULL, part TEXT NOT NULL, hash TEXT NOT NULL,
                         PRIMARY KEY (round, part));
                     CREATE TABLE main.recorder_parts (
                         hash TEXT PRIMARY KEY, bytes BLOB NOT NULL);",
                )
                .unwrap();
            // 400 recent rounds of 1 000 nodes, each with 209 KB of new parts.
            for round in 0..400_i64 {
                transaction
                    .execute(
                        "INSERT INTO main.recorder_rounds VALUES (?1, ?2, ?2, 0, 'node1')",
                        rusqlite::params![round + 1, now - 1000 * (400 - round)],
                    )
                    .unwrap();
                let hash = format!("{round:064}");
                transaction
                    .execute(
                        "INSERT INTO main.recorder_round_parts VALUES (?1, 'decision', ?2)",
                        rusqlite::params![round + 1, hash],
                    )
                    .unwrap();
                let mut bytes = vec![u8::try_from(round % 251).unwrap(); 209_000];
                bytes[..8].copy_from_slice(&round.to_le_bytes());
                transaction
                    .execute(
                        "INSERT INTO main.recorder_parts VALUES (?1, ?2)",
                        rusqlite::params![hash, bytes],
                    )
                    .unwrap();
            }
            // 20 000 recent audit lines with the longest reasons.
            let reason = "r".repeat(1024);
            for n in 0..20_000_i64 {
                transaction
                    .execute(
                        "INSERT INTO audit (at_ms, who, what, why) VALUES (?1, 'ops', 'override', ?2)",
                        rusqlite::params![now - 20_000 + n, reason],
                    )
                    .unwrap();
            }
            transaction.commit().unwrap();
        }
        let before = std::fs::metadata(dir.path().join("state.db"))
            .unwrap()
            .len();
        assert!(
            before > MAX_REPLICA_BYTES + MAX_REPLICA_BYTES / 2,
            "{before}"
        );
        let (report, fits) = shrink_state(&config).unwrap();
        assert!(fits, "{report}");
        let store = crate::store::Store::open_dir(dir.path()).unwrap();
        let snapshot = store.snapshot().unwrap().len() as u64;
        assert!(snapshot < MAX_REPLICA_BYTES / 4, "{snapshot}: {report}");
        assert_eq!(
            store.recorder_size().unwrap().0,
            400,
            "the recorder's rounds are kept, apart"
        );
    }

    #[test]
    fn replay_rounds_finds_a_recorded_decision_the_gate_would_not_make() {
        use nodecare_core::gate::Admitted;
        use nodecare_core::recorder::tests_support::round;
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            state_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let record = |now_ms: u64| round(now_ms, 1, 4);
        {
            let store = crate::store::Store::open_dir(dir.path()).unwrap();
            store.record_round(&record(1_000)).unwrap();
        }
        let (report, same) = replay_rounds(&config).unwrap();
        assert!(same, "{report}");
        assert_eq!(
            report,
            "1 recorded rounds (1 judgements) replayed: 0 differ"
        );
        // A round whose decision the gate does not make from what it saw: found and named.
        {
            let store = crate::store::Store::open_dir(dir.path()).unwrap();
            let mut forged = record(2_000);
            forged.gate.decision.judgements[0].outcome = Ok(Admitted::New);
            store.record_round(&forged).unwrap();
        }
        let (report, same) = replay_rounds(&config).unwrap();
        assert!(!same);
        assert!(report.contains("1 differ"), "{report}");
        assert!(
            report.contains("round 2: the gate decides otherwise"),
            "{report}"
        );
    }

    #[test]
    fn an_hmac_key_others_can_write_or_read_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hmac.key");
        std::fs::write(&path, "k\n").unwrap();
        for mode in [0o666, 0o644, 0o620] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = load_hmac_key(&path).unwrap_err().to_string();
            assert!(error.contains("refusing secret file"), "{mode:o}: {error}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            load_hmac_key(&path).unwrap().id(),
            HmacKey::new(b"k\n".to_vec()).id()
        );
        std::fs::write(&path, "").unwrap();
        let error = load_hmac_key(&path).unwrap_err().to_string();
        assert!(error.contains("empty"), "{error}");
    }

    #[test]
    fn rapi_credentials_others_can_read_are_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rapi-credentials");
        std::fs::write(&path, "nodecare:secret\n").unwrap();
        let mut config = Config::default();
        config.rapi.url = "http://127.0.0.1:5080".into();
        config.rapi.credentials = Some(path.clone());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = crate::config::rapi_client(&config).unwrap_err().to_string();
        assert!(error.contains("refusing secret file"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(crate::config::rapi_client(&config).is_ok());
    }

    fn parse(argv: &[&str]) -> (Args, ArgMatches) {
        let matches = command().try_get_matches_from(argv).unwrap();
        let args = Args::from_arg_matches(&matches).unwrap();
        (args, matches)
    }

    /// Issue 11: `--help` shows the defaults, and they are the configuration's.
    #[test]
    fn help_shows_the_defaults() {
        let help = command().render_long_help().to_string();
        for default in [
            "[default: 30]",
            "[default: 1]",
            "[default: 2]",
            "[default: https://127.0.0.1:5080]",
            "[default: /var/lib/ganeti/rapi.pem]",
            "[default: /var/lib/ganeti/hmac.key]",
            "[default: /var/lib/nodecare]",
            "[default: 0.0.0.0:1816]",
            "[default: http://{ip}:1815]",
            "[default: /etc/nodecare/coordinator.toml]",
        ] {
            assert!(help.contains(default), "{default} missing from:\n{help}");
        }
        let defaults = Config::default();
        assert_eq!(defaults.rapi.url, DEFAULT_RAPI_URL);
        assert!((defaults.round_interval - DEFAULT_ROUND_INTERVAL_SECS).abs() < f64::EPSILON);
        assert_eq!(defaults.max_disrupted_nodes, DEFAULT_MAX_DISRUPTED_NODES);
    }

    /// A default shown in `--help` never overrides the file; a flag given does.
    #[test]
    fn only_given_flags_override_the_file() {
        let mut config = Config::parse(
            "round_interval = 5.0\nmax_disrupted_nodes = 3\n[rapi]\nurl = \"https://master:5080\"\n",
        )
        .unwrap();
        let (args, matches) = parse(&["nodecare-coordinator"]);
        args.apply(&matches, &mut config);
        assert!((config.round_interval - 5.0).abs() < f64::EPSILON);
        assert_eq!(config.max_disrupted_nodes, 3);
        assert_eq!(config.rapi.url, "https://master:5080");
        assert!(!given(&matches, "config"));
        let (args, matches) = parse(&[
            "nodecare-coordinator",
            "--round-interval",
            "2",
            "--max-disrupted-nodes",
            "1",
            "-c",
            "/etc/x.toml",
        ]);
        args.apply(&matches, &mut config);
        assert!((config.round_interval - 2.0).abs() < f64::EPSILON);
        assert_eq!(config.max_disrupted_nodes, 1);
        assert_eq!(config.rapi.url, "https://master:5080");
        assert!(given(&matches, "config"));
    }
}
