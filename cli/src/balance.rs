//! `nodecare balance --dry-run`: what balancing with Ganeti's `hbal` would do now.
//!
//! Reads the cluster (`-t FILE` or `-m ADDRESS`, as `nodecare roll`), writes it in the htools
//! text format, runs `hbal -t /dev/stdin -C` per node group in the executor's sandbox with the
//! options of the coordinator's `[balancing]` section, and shows each group's score before and
//! after hbal's whole solution, the first job set (what the coordinator's balancing duty
//! proposes to its gate), and the jobs it leaves out (moves touching offline nodes). The
//! coordinator also leaves out moves touching nodes with incidents; its status shows those.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use nodecare_collectors::builtin::systool::{ToolError, ToolLimits, run_tool_with_input};
use nodecare_roll::hbal::{self, FirstJobset, HbalOptions, HbalPlan};
use nodecare_roll::{Cluster, htext};
use serde::Serialize;

use crate::roll::{rapi_source, text_source};

#[derive(Debug, Args)]
pub(crate) struct BalanceArgs {
    /// Show what would be done, do nothing (the only mode: the coordinator carries balancing
    /// out, see `[balancing]` in its configuration).
    #[arg(long)]
    dry_run: bool,
    /// Collect data via RAPI at ADDRESS (host, https://user:pass@host:port, or file://DIR).
    #[arg(
        short = 'm',
        long = "master",
        value_name = "ADDRESS",
        conflicts_with = "text_data"
    )]
    master: Option<String>,
    /// The htools text cluster data FILE.
    #[arg(short = 't', long = "text-data", value_name = "FILE")]
    text_data: Option<PathBuf>,
    /// Dynamic load: a file of mond reports as `hbal --mond-data` reads it (the coordinator
    /// serves the one it used last at `/1/balancing/mond-data`).
    #[arg(long = "mond-data", value_name = "FILE")]
    mond_data: Option<PathBuf>,
    /// PEM file with the cluster's RAPI certificate, pinned for -m https://.
    #[arg(long, value_name = "FILE")]
    rapi_ca: Option<PathBuf>,
    /// Node groups to balance (repeatable; default: every group with nodes).
    #[arg(short = 'G', long = "group", value_name = "ID")]
    group: Vec<String>,
    /// Minimum score gain of a step (hbal -g; --min-gain-limit is ten times it).
    #[arg(long, value_name = "DELTA", default_value_t = 0.01)]
    min_gain: f64,
    /// Allow moves that copy disks (new DRBD secondaries).
    #[arg(long)]
    disk_moves: bool,
    /// The hbal executable.
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/hbal")]
    hbal: PathBuf,
    /// Seconds hbal may take.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    timeout: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One node group's answer.
#[derive(Debug, Serialize)]
struct GroupDryRun {
    group: String,
    initial_score: Option<f64>,
    final_score: Option<f64>,
    jobsets: usize,
    #[serde(flatten)]
    first: FirstJobset,
    notes: Vec<String>,
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("Error: {msg}");
    ExitCode::from(1)
}

fn groups_with_nodes(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster
        .nodes
        .iter()
        .filter_map(|n| cluster.groups.get(n.group))
        .map(|g| (g.name.clone(), g.uuid.clone()))
        .collect()
}

async fn plan_group(
    args: &BalanceArgs,
    text: &str,
    group: &str,
    cluster: &Cluster,
) -> Result<HbalPlan, String> {
    let options = HbalOptions {
        group: Some(group.to_owned()),
        min_gain: args.min_gain,
        disk_moves: args.disk_moves,
        mond_data: args
            .mond_data
            .as_ref()
            .map(|path| path.display().to_string()),
    };
    let argv = hbal::hbal_args("/dev/stdin", &options);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let limits = ToolLimits {
        timeout: Duration::from_secs_f64(args.timeout),
        stdout_cap: 4 * 1024 * 1024,
    };
    let stdout = run_tool_with_input(&args.hbal, &argv, Some(text.as_bytes().to_vec()), limits)
        .await
        .map_err(|e| match e {
            ToolError::Missing(path) => format!(
                "hbal is missing ({}; apt-get install ganeti-htools-3.0)",
                path.display()
            ),
            other => format!("hbal failed: {other}"),
        })?;
    let stdout = String::from_utf8(stdout).map_err(|_| "hbal output is not UTF-8".to_owned())?;
    let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let instances: Vec<String> = cluster.instances.iter().map(|i| i.name.clone()).collect();
    hbal::parse(&stdout)
        .and_then(|plan| plan.resolve(&nodes, &instances))
        .map_err(|e| format!("node group {group}: {e}"))
}

fn score(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_owned(), |s| format!("{s:.8}"))
}

fn render(groups: &[GroupDryRun]) -> String {
    let mut out = String::new();
    for g in groups {
        let _ignored = writeln!(
            out,
            "Node group {}: score {} -> {} (hbal's solution: {} job set(s))",
            g.group,
            score(g.initial_score),
            score(g.final_score),
            g.jobsets
        );
        for note in &g.notes {
            let _ignored = writeln!(out, "  hbal: {note}");
        }
        if g.first.jobs.is_empty() && g.first.left_out.is_empty() {
            let _ignored = writeln!(out, "  Nothing to do.");
            continue;
        }
        let _ignored = writeln!(out, "  First job set (proposed):");
        if g.first.jobs.is_empty() {
            let _ignored = writeln!(out, "    none");
        }
        for job in &g.first.jobs {
            let ops: Vec<String> = job.ops.iter().map(ToString::to_string).collect();
            let _ignored = writeln!(
                out,
                "    {}  {} => {}  [{}]  score after {:.8}",
                job.instance,
                job.from,
                job.to,
                ops.join(", "),
                job.score_after
            );
        }
        if !g.first.left_out.is_empty() {
            let _ignored = writeln!(out, "  Left out:");
            for (job, why) in &g.first.left_out {
                let _ignored = writeln!(
                    out,
                    "    {}  {} => {}  ({why})",
                    job.instance, job.from, job.to
                );
            }
        }
    }
    out
}

async fn dry_run(args: &BalanceArgs, cluster: &Cluster) -> Result<Vec<GroupDryRun>, String> {
    let present = groups_with_nodes(cluster);
    let groups: Vec<String> = if args.group.is_empty() {
        present.keys().cloned().collect()
    } else {
        let mut chosen = Vec::new();
        for wanted in &args.group {
            let Some((name, _)) = present
                .iter()
                .find(|(name, uuid)| *name == wanted || *uuid == wanted)
            else {
                return Err(format!("node group {wanted} not found (or has no nodes)"));
            };
            chosen.push(name.clone());
        }
        chosen
    };
    // What the coordinator's gate would refuse that the cluster data shows: offline nodes.
    let blocked: BTreeMap<String, String> = cluster
        .nodes
        .iter()
        .filter(|n| n.offline)
        .map(|n| (n.name.clone(), "offline".to_owned()))
        .collect();
    let text = htext::serialize(cluster);
    let mut out = Vec::new();
    for group in groups {
        let plan = plan_group(args, &text, &group, cluster).await?;
        out.push(GroupDryRun {
            group,
            initial_score: plan.initial_score,
            final_score: plan.final_score,
            jobsets: plan.jobsets.len(),
            first: plan.first_jobset(&blocked),
            notes: plan.notes.clone(),
        });
    }
    Ok(out)
}

pub(crate) fn run(args: &BalanceArgs) -> ExitCode {
    if !args.dry_run {
        return fail(
            "only --dry-run is supported: the coordinator carries balancing out \
             ([balancing] in its configuration)",
        );
    }
    if !(args.min_gain.is_finite() && args.min_gain >= 0.0) {
        return fail("--min-gain must be at least 0");
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0 && args.timeout <= 1e6) {
        return fail("--timeout must be above 0 seconds");
    }
    let source = match (&args.text_data, &args.master) {
        (Some(path), None) => text_source(path),
        (None, Some(master)) => rapi_source(master, args.rapi_ca.as_deref().map(Path::new)),
        _ => return fail("give the cluster with -t FILE or -m ADDRESS"),
    };
    let cluster = match source.load() {
        Ok(cluster) => cluster,
        Err(e) => return fail(&format!("failed to load data: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("cannot start: {e}")),
    };
    let groups = match runtime.block_on(dry_run(args, &cluster)) {
        Ok(groups) => groups,
        Err(e) => return fail(&e),
    };
    let text = if args.json {
        match serde_json::to_string_pretty(&groups) {
            Ok(json) => json + "\n",
            Err(e) => return fail(&e.to_string()),
        }
    } else {
        render(&groups)
    };
    print!("{text}");
    ExitCode::SUCCESS
}
