//! nodecare-agent: the per-node daemon and its operator commands.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use nodecare_agent::cli::{Cli, Command, ReplicaAction, ScriptAction};
use nodecare_agent::config::Config;
use nodecare_agent::signing::{DiagnoseSigner, load_signer};
use nodecare_agent::state::StateDir;
use nodecare_collectors::diagnose::DiagnoseCollector;
use nodecare_collectors::runner::Runner;
use nodecare_protocol::now_ms;
use nodecare_protocol::{DiagnosePayload, KeyRing, VerifyPolicy};
use serde::Deserialize;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.config() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("nodecare-agent: {error}");
            return ExitCode::from(2);
        }
    };
    if cli.check_config {
        return check_config(&config);
    }
    nodecare_agent::logging::init(&config.log);
    let command = cli.command.unwrap_or(Command::Serve);
    // Processes that escape a script's process group become ours and die with its run; the
    // daemon also kills what a previous instance, killed mid-run, left running.
    let ledger = matches!(command, Command::Serve).then(|| config.state_dir.join("runs"));
    if let Err(error) = nodecare_collectors::runner::init_reaper(ledger.as_deref()) {
        tracing::warn!(%error, "cannot collect the orphans of scripts");
    }
    let result = match command {
        Command::Serve => runtime().and_then(|rt| rt.block_on(serve(config))),
        Command::Diagnose { once } => runtime().and_then(|rt| rt.block_on(diagnose(config, once))),
        Command::Verify { node, min_sequence } => {
            return verify(&config, node.as_deref(), min_sequence);
        }
        Command::Repair { command, input } => {
            runtime().and_then(|rt| rt.block_on(repair(&config, &command, &input)))
        }
        Command::Script {
            action: ScriptAction::Check { file, runs },
        } => return script_check(&config, &file, runs),
        Command::Replica {
            action: ReplicaAction::Discard,
        } => replica_discard(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("nodecare-agent: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `nodecare-agent replica discard`.
fn replica_discard(config: &Config) -> anyhow::Result<()> {
    let dir = config.state_dir.join("replica");
    if nodecare_agent::replica::discard(&dir)? {
        println!("discarded the replica kept in {}", dir.display());
    } else {
        println!("no replica kept in {}", dir.display());
    }
    Ok(())
}

/// `nodecare-agent repair --command NAME --input FILE`.
async fn repair(config: &Config, command: &str, input: &std::path::Path) -> anyhow::Result<()> {
    let text = if input == std::path::Path::new("-") {
        let mut text = Vec::new();
        std::io::stdin()
            .read_to_end(&mut text)
            .context("cannot read the verdict from stdin")?;
        text
    } else {
        std::fs::read(input).with_context(|| format!("cannot read {}", input.display()))?
    };
    let verdict: serde_json::Value = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not JSON", input.display()))?;
    let operator = format!("uid={}", nix::unistd::getuid());
    let repair = config.repair(&config.resolved_node_name());
    let record =
        nodecare_agent::repair::run_manually(&repair, command, &verdict, &operator).await?;
    let mut text = serde_json::to_string_pretty(&record)?;
    text.push('\n');
    // A closed stdout (e.g. piped into `head`) must not hide the outcome.
    let _ignored = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    if record.state.is_success() {
        Ok(())
    } else {
        anyhow::bail!("repair command {command} {}", record.state.as_str())
    }
}

/// `nodecare-agent script check FILE`: 0 pass, 1 fail, 2 cannot check.
fn script_check(config: &Config, file: &std::path::Path, runs: u32) -> ExitCode {
    let diagnose = config.diagnose();
    let checked = runtime()
        .map_err(|error| format!("{error:#}"))
        .and_then(|rt| {
            rt.block_on(nodecare_agent::script_check::check_script(
                file,
                &diagnose.dir,
                diagnose.limits,
                runs,
            ))
            .map_err(|error| error.to_string())
        });
    match checked {
        Ok(report) => {
            let _ignored = std::io::Write::write_all(
                &mut std::io::stdout().lock(),
                report.render().as_bytes(),
            );
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("nodecare-agent: {error}");
            ExitCode::from(2)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // One worker serves cached bytes and drives the collectors; blocking work (fsync, whitelist
    // checks) goes to the blocking pool. A second worker only competes with the node's own load
    // for the CPU: on 2 cores it tripled the agent's p99 latency (docs/PERFORMANCE.md).
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn check_config(config: &Config) -> ExitCode {
    // A key file that is missing or empty is a node not set up yet (warned); one that others
    // could have written or can read is refused, as the daemon refuses it.
    match nodecare_daemon::secret::read_secret_file(&config.hmac_key) {
        Err(error @ nodecare_daemon::secret::SecretFileError::Unsafe { .. }) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
        _ => {
            println!("configuration is valid");
            match toml::to_string(config) {
                Ok(text) => print!("{text}"),
                Err(error) => eprintln!("cannot print the configuration: {error}"),
            }
            if let Err(error) = nodecare_agent::signing::load_key(&config.hmac_key) {
                eprintln!("warning: {error}; signed diagnose reports will be unavailable");
            }
        }
    }
    ExitCode::SUCCESS
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let agent = nodecare_agent::serve(config, listener).await?;
    tracing::info!(address = %agent.local_addr(), "nodecare-agent serving");
    let _watchdog = nodecare_agent::systemd::notify_ready();
    agent
        .run_until(async {
            shutdown_signal().await;
            nodecare_agent::systemd::notify_stopping();
        })
        .await;
    tracing::info!("nodecare-agent stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

async fn diagnose(config: Config, once: bool) -> anyhow::Result<()> {
    let node = config.resolved_node_name();
    let state = StateDir::open(&config.state_dir)?;
    let mut signer = DiagnoseSigner::new(
        load_signer(&config.hmac_key, &node),
        state,
        config.signature_ttl(),
        config.diagnose_interval(),
    )?
    .with_boot(config.boot());
    let collector = DiagnoseCollector::new(
        config.diagnose(),
        Runner::new(config.max_concurrent_scripts),
        None,
    );
    loop {
        let run = collector.run_and_publish().await;
        let envelope = match signer.sign(&run, false).await {
            Ok(envelope) => serde_json::to_value(envelope)?,
            Err(error) => {
                eprintln!("nodecare-agent: not signed: {error}");
                serde_json::Value::Null
            }
        };
        let output = serde_json::json!({ "verdict": run.verdict, "envelope": envelope });
        println!("{}", serde_json::to_string_pretty(&output)?);
        if once {
            return Ok(());
        }
        tokio::time::sleep(config.diagnose_interval()).await;
    }
}

/// Accepts a bare envelope, or the output of `diagnose --once` (`{"envelope": …}`).
fn envelope_text(input: &[u8]) -> Result<Vec<u8>, String> {
    let value = nodecare_protocol::json::from_slice(input)
        .map_err(|error| format!("input is not JSON: {error}"))?;
    let envelope = match value.get("envelope") {
        Some(inner) if value.get("signature").is_none() => inner.clone(),
        _ => value,
    };
    serde_json::to_vec(&envelope).map_err(|error| error.to_string())
}

fn verify(config: &Config, node: Option<&str>, min_sequence: Option<u64>) -> ExitCode {
    let key = match nodecare_agent::signing::load_key(&config.hmac_key) {
        Ok(key) => key,
        Err(error) => {
            println!("invalid: {error}");
            return ExitCode::from(2);
        }
    };
    let mut input = Vec::new();
    if let Err(error) = std::io::stdin().read_to_end(&mut input) {
        println!("invalid: cannot read stdin: {error}");
        return ExitCode::FAILURE;
    }
    let text = match envelope_text(&input) {
        Ok(text) => text,
        Err(error) => {
            println!("invalid: {error}");
            return ExitCode::FAILURE;
        }
    };
    let ring = KeyRing::single(key);
    match ring.verify_json(&text, now_ms(), VerifyPolicy::default(), node, min_sequence) {
        Ok(envelope) => match DiagnosePayload::deserialize(&envelope.payload) {
            Ok(payload) => {
                println!(
                    "valid: node {} sequence {} status {} expires_at_ms {}",
                    envelope.node,
                    envelope.sequence,
                    payload.verdict.status,
                    envelope.expires_at_ms
                );
                ExitCode::SUCCESS
            }
            Err(error) => {
                println!("invalid: signed payload is not a diagnose payload: {error}");
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            println!("invalid: {error}");
            ExitCode::FAILURE
        }
    }
}
