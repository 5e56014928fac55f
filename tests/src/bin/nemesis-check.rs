//! `nemesis-check`: the nemesis's independent checker (`tests/nemesis/run.sh` runs it; see
//! `nodecare_tests::nemesis_check`). Exit 0 without violation, 1 with, 2 on unreadable input.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Parser;
use nodecare_tests::nemesis_check::{
    Addresses, Inputs, Settings, check, parse_audit, parse_coordinator_log, parse_faults,
    parse_hook_log, parse_jobs, parse_rapi_log,
};

/// Judges a nemesis run from Ganeti's job list, the coordinators' logs, the RAPI daemons' logs,
/// the agents' repair audit and the fault log.
#[derive(Parser)]
struct Args {
    /// RAPI `/2/jobs?bulk=1`, saved.
    #[arg(long)]
    jobs: PathBuf,
    /// The nemesis's fault log (JSON lines).
    #[arg(long)]
    faults: PathBuf,
    /// NODE=PATH: the log of the coordinator running on NODE.
    #[arg(long = "coordinator-log", value_parser = pair)]
    coordinator_logs: Vec<(String, PathBuf)>,
    /// NODE=PATH: NODE's `rapi-daemon.log`.
    #[arg(long = "rapi-log", value_parser = pair)]
    rapi_logs: Vec<(String, PathBuf)>,
    /// NODE=PATH: NODE's agent's `repair-audit.jsonl` (missing file: no repair).
    #[arg(long = "audit", value_parser = pair)]
    audits: Vec<(String, PathBuf)>,
    /// NODE=PATH: the log of the nemesis's campaign hook on NODE (missing file: no run).
    #[arg(long = "hook-log", value_parser = pair)]
    hook_logs: Vec<(String, PathBuf)>,
    /// NODE=IP: a node's address, to attribute RAPI requests.
    #[arg(long = "node-ip", value_parser = pair)]
    node_ips: Vec<(String, PathBuf)>,
    /// The nemesis's own RAPI client address (its requests are left out).
    #[arg(long, default_value = "198.18.0.2")]
    client_ip: String,
    /// The cluster IP.
    #[arg(long, default_value = "198.18.0.100")]
    cluster_ip: String,
    /// Tolerance for requests in flight, in ms.
    #[arg(long, default_value_t = 2000)]
    slack_ms: u64,
}

fn pair(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_owned(), PathBuf::from(v))),
        _ => Err(format!("{text:?}: expected NODE=VALUE")),
    }
}

fn read(path: &PathBuf) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn run(args: &Args) -> Result<bool> {
    let mut inputs = Inputs {
        jobs: parse_jobs(&read(&args.jobs)?)?,
        ..Inputs::default()
    };
    let (faults, skipped) = parse_faults(&read(&args.faults)?);
    inputs.faults = faults;
    inputs.skipped_lines += skipped;
    for (node, path) in &args.coordinator_logs {
        let (events, skipped) = parse_coordinator_log(&read(path)?);
        inputs.coordinators.insert(node.clone(), events);
        inputs.skipped_lines += skipped;
    }
    let addresses = Addresses {
        client: args.client_ip.clone(),
        cluster: args.cluster_ip.clone(),
        nodes: args
            .node_ips
            .iter()
            .map(|(node, ip)| (ip.display().to_string(), node.clone()))
            .collect::<BTreeMap<_, _>>(),
    };
    for (node, path) in &args.rapi_logs {
        inputs
            .writes
            .extend(parse_rapi_log(node, &read(path)?, &addresses));
    }
    inputs.writes.sort_by_key(|w| w.at_ms);
    for (node, path) in &args.audits {
        let text = if path.exists() {
            read(path)?
        } else {
            String::new()
        };
        let (lines, skipped) = parse_audit(&text);
        inputs.audits.insert(node.clone(), lines);
        inputs.skipped_lines += skipped;
    }
    for (node, path) in &args.hook_logs {
        if path.exists() {
            let (runs, skipped) = parse_hook_log(&read(path)?);
            inputs.hooks.insert(node.clone(), runs);
            inputs.skipped_lines += skipped;
        }
    }
    if inputs.faults.is_empty() {
        bail!("{}: no event", args.faults.display());
    }
    let report = check(
        &inputs,
        &Settings {
            slack_ms: args.slack_ms,
            ..Settings::default()
        },
    )?;
    print!("{report}");
    Ok(report.violations.is_empty())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("nemesis-check: {error:#}");
            ExitCode::from(2)
        }
    }
}
