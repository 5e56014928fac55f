//! `nodecare roll`: hroller-compatible rolling-reboot planner.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use nodecare_roll::cluster::Cluster;
use nodecare_roll::from_rapi::{RapiAnswers, cluster_from_rapi};
use nodecare_roll::htext;
use nodecare_roll::render::{self, TextOptions};
use nodecare_roll::schedule::{FailureDomains, Mode, RollOptions, check_masters, prepare};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
#[command(disable_version_flag = true, args_conflicts_with_subcommands = true)]
pub(crate) struct RollArgs {
    /// Campaigns: follow and control (`nodecare roll status|pause|resume|abort`).
    #[command(subcommand)]
    action: Option<crate::campaign::RollAction>,

    /// Collect data via Luxi (not supported; use -m or -t).
    #[arg(short = 'L', long = "luxi", num_args = 0..=1, value_name = "SOCKET")]
    luxi: Option<Option<String>>,
    /// Collect data via RAPI at ADDRESS (host, https://user:pass@host:port, or file://DIR).
    #[arg(short = 'm', long = "master", value_name = "ADDRESS")]
    master: Option<String>,
    /// The htools text cluster data FILE.
    #[arg(short = 't', long = "text-data", value_name = "FILE")]
    text_data: Option<PathBuf>,
    /// Iallocator spec as data source (not supported).
    #[arg(short = 'I', long = "ialloc-src", value_name = "FILE")]
    ialloc_src: Option<PathBuf>,
    /// Set node as offline (repeatable).
    #[arg(short = 'O', long = "offline", value_name = "NODE")]
    offline: Vec<String>,
    /// Schedule offline maintenance: pretend all instances are offline.
    #[arg(long)]
    offline_maintenance: bool,
    /// Increase verbosity.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// Decrease verbosity.
    #[arg(short = 'q', long = "quiet", action = clap::ArgAction::Count)]
    quiet: u8,
    /// Do not show a header line.
    #[arg(long)]
    no_headers: bool,
    /// Restrict to nodes with one of the given tags.
    #[arg(long, value_name = "TAG,...")]
    node_tags: Option<String>,
    /// Save the loaded cluster state to FILE.original.
    #[arg(short = 'S', long = "save", value_name = "FILE")]
    save: Option<PathBuf>,
    /// The target node group (name or UUID).
    #[arg(short = 'G', long = "group", value_name = "ID")]
    group: Option<String>,
    /// Print the moves of the instances.
    #[arg(long)]
    print_moves: bool,
    /// Fully evacuate the nodes to be rebooted.
    #[arg(long)]
    full_evacuation: bool,
    /// Skip nodes that host a non-redundant instance.
    #[arg(long)]
    skip_non_redundant: bool,
    /// Pretend that there are no non-redundant instances.
    #[arg(long)]
    ignore_non_redundant: bool,
    /// Continue despite warnings (e.g. no master node).
    #[arg(short = 'f', long = "force")]
    force: bool,
    /// Only print the first reboot group.
    #[arg(long)]
    one_step_only: bool,
    /// Accepted for compatibility; has no effect on these backends.
    #[arg(long, value_name = "N")]
    static_kvm_node_memory: Option<u64>,
    /// Keep every reboot group inside one failure domain: `group` (node
    /// groups) or a node-tag prefix such as `rack:`.
    #[arg(long, value_name = "group|TAG-PREFIX")]
    failure_domains: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// Reproduce hroller 3.0.2 exactly, defects included.
    #[arg(long)]
    hroller_compat: bool,
    /// PEM file with the cluster's RAPI certificate, pinned for -m https://.
    #[arg(long, value_name = "FILE")]
    rapi_ca: Option<PathBuf>,
    /// Work budget of the exact colouring search (advanced).
    #[arg(long, value_name = "UNITS", hide = true)]
    colouring_budget: Option<u64>,
    #[arg(hide = true)]
    extra: Vec<String>,
    #[command(flatten)]
    execute: crate::campaign::ExecuteArgs,
}

/// Where the cluster description comes from.
pub(crate) trait ClusterSource {
    fn load(&self) -> Result<Cluster, String>;
}

struct TextFile {
    path: PathBuf,
    /// Word parse errors as hroller does.
    hroller_compat: bool,
}

impl ClusterSource for TextFile {
    fn load(&self) -> Result<Cluster, String> {
        let path = self.path.display();
        let bytes = std::fs::read(&self.path).map_err(|e| format!("{path}: {e}"))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            format!(
                "{path}: not valid UTF-8 (at byte {})",
                e.utf8_error().valid_up_to()
            )
        })?;
        htext::parse(&text).map_err(|e| {
            if self.hroller_compat {
                e.htools_text()
            } else {
                format!("{path}: {e}")
            }
        })
    }
}

/// `-m file://DIR`: the four RAPI answers saved as files, like htools.
struct RapiDir(PathBuf);

impl ClusterSource for RapiDir {
    fn load(&self) -> Result<Cluster, String> {
        let read = |f: &str| {
            let p: PathBuf = self.0.join(f);
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let (groups, nodes, instances, info) = (
            read("groups.json")?,
            read("nodes.json")?,
            read("instances.json")?,
            read("info.json")?,
        );
        cluster_from_rapi(RapiAnswers {
            info: &info,
            groups: &groups,
            nodes: &nodes,
            instances: &instances,
        })
        .map_err(|e| e.to_string())
    }
}

struct RapiHttp {
    url: String,
    ca: Option<PathBuf>,
}

impl ClusterSource for RapiHttp {
    fn load(&self) -> Result<Cluster, String> {
        crate::roll_http::load(&self.url, self.ca.as_deref())
    }
}

/// Writes to stderr; if stderr itself is gone there is nobody left to tell.
fn to_stderr(text: &str) {
    if std::io::stderr().write_all(text.as_bytes()).is_err() {}
}

fn to_stdout(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

fn fail(msg: &str) -> ExitCode {
    to_stderr(&format!("Error: {msg}\n"));
    ExitCode::from(1)
}

fn source(args: &RollArgs) -> Result<Box<dyn ClusterSource>, String> {
    let set = [
        args.master.is_some(),
        args.luxi.is_some(),
        args.text_data.is_some(),
    ];
    if set.iter().filter(|&&b| b).count() > 1 {
        return Err("Only one of the rapi, luxi, and data files options should be given.".into());
    }
    if let Some(t) = &args.text_data {
        return Ok(Box::new(TextFile {
            path: t.clone(),
            hroller_compat: args.hroller_compat,
        }));
    }
    if let Some(m) = &args.master {
        return Ok(rapi_source(m, args.rapi_ca.as_deref()));
    }
    if args.luxi.is_some() {
        return Err(
            "failed to load data, aborting: the Luxi backend is not supported by \
                    nodecare; use -m (RAPI) or -t (text data)"
                .into(),
        );
    }
    if args.ialloc_src.is_some() {
        return Err(
            "failed to load data, aborting: the iallocator backend is not supported \
                    by nodecare; use -m (RAPI) or -t (text data)"
                .into(),
        );
    }
    Err("failed to load data, aborting: No backend selected! Exiting.".into())
}

/// The source of `-t FILE`.
pub(crate) fn text_source(path: &Path) -> Box<dyn ClusterSource> {
    Box::new(TextFile {
        path: path.to_owned(),
        hroller_compat: false,
    })
}

/// The source of `-m ADDRESS` (`file://DIR`, a host, or a URL), pinning `ca` for https.
pub(crate) fn rapi_source(master: &str, ca: Option<&Path>) -> Box<dyn ClusterSource> {
    if let Some(dir) = master.strip_prefix("file://") {
        return Box::new(RapiDir(PathBuf::from(dir)));
    }
    // Like htools: a bare host gets https and the default RAPI port.
    let url = if master.contains("://") {
        master.to_owned()
    } else if master.contains(':') {
        format!("https://{master}")
    } else {
        format!("https://{master}:5080")
    };
    Box::new(RapiHttp {
        url,
        ca: ca.map(Path::to_path_buf),
    })
}

fn save_original(cluster: &Cluster, path: &Path) -> Result<(), String> {
    let mut p = path.as_os_str().to_owned();
    p.push(".original");
    let p = PathBuf::from(p);
    std::fs::write(&p, htext::serialize(cluster)).map_err(|e| format!("{}: {e}", p.display()))?;
    to_stderr(&format!(
        "The cluster state before hroller run has been written to file '{}'\n",
        p.display()
    ));
    Ok(())
}

pub(crate) fn run(args: RollArgs) -> ExitCode {
    if let Some(action) = args.action {
        return crate::campaign::run(action);
    }
    if args.execute.execute {
        if !args.extra.is_empty() {
            return fail("This program doesn't take any arguments.");
        }
        let selection = crate::campaign::Selection {
            group: args.group.clone(),
            offline: args.offline.clone(),
            node_tags: args.node_tags.clone(),
            failure_domains: args.failure_domains.clone(),
            skip_non_redundant: args.skip_non_redundant,
            ignore_non_redundant: args.ignore_non_redundant,
            full_evacuation: args.full_evacuation,
        };
        return crate::campaign::execute(&selection, &args.execute);
    }
    if !args.extra.is_empty() {
        return fail("This program doesn't take any arguments.");
    }
    let verbosity = 1 + i32::from(args.verbose) - i32::from(args.quiet);
    let cluster = match source(&args).and_then(|s| {
        s.load()
            .map_err(|e| format!("failed to load data, aborting: {e}"))
    }) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let warnings = cluster.inconsistency_warnings();
    if verbosity != 0 && !warnings.is_empty() {
        let mut s = String::from("Warning: cluster has inconsistent data:\n");
        for w in &warnings {
            s.push_str("  - ");
            s.push_str(w);
            s.push('\n');
        }
        s.push('\n');
        to_stderr(&s);
    }
    let failure_domains = args.failure_domains.as_deref().map(|f| match f {
        "group" | "node-group" => FailureDomains::NodeGroup,
        prefix => FailureDomains::TagPrefix(prefix.to_owned()),
    });
    let opts = RollOptions {
        offline_nodes: args.offline.clone(),
        group: args.group.clone(),
        node_tags: args.node_tags.as_ref().map(|t| {
            if t.is_empty() {
                Vec::new()
            } else {
                t.split(',').map(str::to_owned).collect()
            }
        }),
        offline_maintenance: args.offline_maintenance,
        skip_non_redundant: args.skip_non_redundant,
        ignore_non_redundant: args.ignore_non_redundant,
        full_evacuation: args.full_evacuation,
        force: args.force,
        failure_domains,
        mode: if args.hroller_compat {
            Mode::HrollerCompat
        } else {
            Mode::Improved
        },
        ..RollOptions::default()
    }
    .with_default_budgets();
    let opts = RollOptions {
        colouring_budget: args.colouring_budget.unwrap_or(opts.colouring_budget),
        ..opts
    };
    // Like hroller, the master warning comes before any later error.
    let master_warnings = match check_masters(&cluster, opts.force) {
        Ok(w) => w,
        Err(e) => return fail(&e.to_string()),
    };
    for w in &master_warnings {
        to_stderr(&format!("Warning: {w}\n"));
    }
    let prepared = match prepare(&cluster, &opts) {
        Ok(p) => p,
        Err(e) => return fail(&e.to_string()),
    };
    for w in prepared.warnings.iter().skip(master_warnings.len()) {
        to_stderr(&format!("Warning: {w}\n"));
    }
    if let Some(path) = &args.save
        && let Err(e) = save_original(&cluster, path)
    {
        return fail(&e);
    }
    if verbosity > 2 && !to_stdout(&format!("Node Graph: {}\n", prepared.graph_dump())) {
        return ExitCode::from(1);
    }
    let plan = match prepared.solve() {
        Ok(p) => p,
        Err(e) => return fail(&e.to_string()),
    };
    for w in &plan.warnings {
        to_stderr(&format!("Warning: {w}\n"));
    }
    let mut out = String::new();
    if verbosity > 1 {
        out.push_str(&plan.stats_line);
        out.push('\n');
        if !args.hroller_compat {
            let base = plan
                .htools_algorithm_groups
                .map_or_else(|| "fails".to_owned(), |n| n.to_string());
            to_stderr(&format!(
                "nodecare: {} groups via {} (htools algorithm: {base})\n",
                plan.groups.len(),
                plan.strategy
            ));
        }
    }
    out.push_str(&match args.output {
        OutputFormat::Text => render::text(
            &cluster,
            &plan,
            TextOptions {
                no_headers: args.no_headers,
                one_step_only: args.one_step_only,
                print_moves: args.print_moves,
            },
        ),
        OutputFormat::Json => {
            let warnings: Vec<String> = prepared
                .warnings
                .iter()
                .chain(&plan.warnings)
                .cloned()
                .collect();
            render::json(&cluster, &plan, args.one_step_only, &warnings)
        }
    });
    if !to_stdout(&out) {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
