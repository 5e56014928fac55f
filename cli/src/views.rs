//! `nodecare incidents`, `nodecare incidents show`, `nodecare nodes` and `nodecare watch`: the
//! coordinator's read API as gnt-* style lists, one incident in detail, and a live view.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use nodecare_protocol::clock::{utc_text, utc_text_ms};
use nodecare_protocol::status::{AgentStatus, IncidentDetail, IncidentSummary, Overview};

use crate::api::{DEFAULT_URL, fetch};
use crate::fields::{
    INCIDENT_DEFAULTS, INCIDENT_FIELDS, NODE_DEFAULTS, NODE_FIELDS, NodeRow, now_ms,
};
use crate::list::{ListArgs, render, select};
use crate::status::{ViewArgs, render_overview};

/// `nodecare incidents`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct IncidentsArgs {
    #[command(subcommand)]
    command: Option<IncidentsCommand>,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    #[command(flatten)]
    list: ListArgs,
}

#[derive(Debug, Subcommand)]
enum IncidentsCommand {
    /// Show one incident: its state, history, jobs, verdict and each script's details.
    Show(ShowArgs),
}

/// `nodecare incidents show`.
#[derive(Debug, Args)]
struct ShowArgs {
    /// Incident uuid (see `nodecare incidents`).
    incident: String,
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Print the incident as JSON (the fields this command shows, as the coordinator gives
    /// them) instead of text.
    #[arg(long)]
    json: bool,
}

/// `nodecare nodes`.
#[derive(Debug, Args)]
pub(crate) struct NodesArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    #[command(flatten)]
    list: ListArgs,
}

/// `nodecare watch`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Coordinator API base URL.
    #[arg(long, env = "NODECARE_COORDINATOR_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Seconds between refreshes.
    #[arg(long, short = 'n', default_value_t = 5.0, value_parser = parse_interval)]
    interval: f64,
    /// Stop after this many refreshes (0: until interrupted with ^C).
    #[arg(long, default_value_t = 0)]
    count: u64,
    #[command(flatten)]
    view: ViewArgs,
}

fn parse_interval(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .parse()
        .map_err(|e| format!("not a number of seconds: {e}"))?;
    if value.is_finite() && (0.1..=86_400.0).contains(&value) {
        Ok(value)
    } else {
        Err("must be between 0.1 and 86400 seconds".to_owned())
    }
}

/// Prints `result` (or the error, prefixed with the command) and gives the exit code.
fn finish(command: &str, result: Result<String, String>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            if !text.is_empty() && !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("nodecare {command}: {error}");
            ExitCode::FAILURE
        }
    }
}

fn base(url: &str) -> &str {
    url.trim_end_matches('/')
}

/// Runs `nodecare incidents` (and `nodecare incidents show`).
pub(crate) fn run_incidents(args: IncidentsArgs) -> ExitCode {
    if let Some(IncidentsCommand::Show(show)) = args.command {
        return finish("incidents show", show_incident(&show));
    }
    let result = select(
        INCIDENT_FIELDS,
        INCIDENT_DEFAULTS,
        args.list.output.as_deref(),
    )
    .and_then(|fields| {
        let url = format!("{}/1/status", base(&args.url));
        let body = fetch(&url)?;
        let incidents: Vec<IncidentSummary> = serde_json::from_str(&body)
            .map_err(|e| format!("{url}: not a list of incidents: {e}"))?;
        Ok(render(&fields, &incidents, &args.list))
    });
    finish("incidents", result)
}

/// Runs `nodecare nodes`.
pub(crate) fn run_nodes(args: NodesArgs) -> ExitCode {
    let result =
        select(NODE_FIELDS, NODE_DEFAULTS, args.list.output.as_deref()).and_then(|fields| {
            let url = format!("{}/1/agents", base(&args.url));
            let body = fetch(&url)?;
            let agents: Vec<AgentStatus> = serde_json::from_str(&body)
                .map_err(|e| format!("{url}: not a list of agents: {e}"))?;
            let now = now_ms();
            let rows: Vec<NodeRow> = agents
                .into_iter()
                .map(|status| NodeRow {
                    status,
                    now_ms: now,
                })
                .collect();
            Ok(render(&fields, &rows, &args.list))
        });
    finish("nodes", result)
}

fn show_incident(args: &ShowArgs) -> Result<String, String> {
    let uuid = args.incident.trim();
    if uuid.is_empty() || !uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(format!("not an incident uuid: {:?}", args.incident));
    }
    let url = format!("{}/1/incidents/{uuid}", base(&args.url));
    let body = fetch(&url)?;
    let detail: IncidentDetail =
        serde_json::from_str(&body).map_err(|e| format!("{url}: not an incident: {e}"))?;
    if args.json {
        return serde_json::to_string_pretty(&detail)
            .map(|text| text + "\n")
            .map_err(|e| format!("cannot encode the incident: {e}"));
    }
    Ok(render_incident(&detail))
}

/// Renders one incident in the style of `gnt-node info`.
pub(crate) fn render_incident(detail: &IncidentDetail) -> String {
    let i = &detail.summary;
    let mut out = String::new();
    let mut line = |indent: usize, text: String| {
        let _ignored = writeln!(out, "{:indent$}{text}", "");
    };
    line(0, format!("Incident: {}", i.id));
    line(2, format!("node: {}", i.node));
    line(2, format!("action: {}", i.action));
    line(2, format!("status: {}", i.repair_status));
    let tag_state = if i.acknowledged {
        "removed by an operator (acknowledged)"
    } else if i.tag_applied {
        "on the node"
    } else if i.repair_status == "canceled" {
        "never set: the incident was canceled"
    } else {
        "not yet on the node"
    };
    line(2, format!("tag: {} ({tag_state})", i.tag));
    if let Some(at) = i.acknowledged_at {
        line(2, format!("acknowledged at: {}", utc_text(at)));
    }
    if let Some(blocked) = &i.blocked_by {
        line(2, format!("blocked by: {blocked}"));
    }
    if let Some(failure) = &i.failure {
        line(2, format!("failure: {failure}"));
    }
    if let Some(warning) = &i.warning {
        line(2, format!("warning: {warning}"));
    }
    if let Some(ctime) = detail.ctime {
        line(2, format!("created: {}", utc_text(ctime)));
    }
    line(2, format!("modified: {}", utc_text(i.mtime)));
    let verdict = &detail.verdict;
    line(2, format!("verdict: {}", verdict.status.as_str()));
    line(4, format!("fingerprint: {}", verdict.fingerprint));
    if let Some(command) = &verdict.command {
        line(4, format!("command: {command}"));
    }
    line(4, "scripts:".to_owned());
    if verdict.details.is_empty() {
        line(6, "(none)".to_owned());
    }
    for (name, script) in &verdict.details {
        line(6, format!("- {name}: {}", script.status.as_str()));
        if let Some(command) = &script.command {
            line(8, format!("command: {command}"));
        }
        if let Some(reason) = &script.reason {
            line(8, format!("reason: {reason}"));
        }
        if !script.details.is_null() {
            line(8, format!("details: {}", script.details));
        }
    }
    match &detail.agent {
        Some(agent) => {
            let mut text = format!("agent: {}", agent.state.as_str());
            if let Some(v) = agent.verdict {
                let _ignored = write!(text, ", verdict {}", v.as_str());
            }
            if let Some(error) = agent.error.as_deref().or(agent.reason.as_deref()) {
                let _ignored = write!(text, ": {error}");
            }
            line(2, text);
        }
        None => line(2, "agent: not read".to_owned()),
    }
    line(2, "jobs:".to_owned());
    if detail.intents.is_empty() {
        if i.jobs.is_empty() {
            line(4, "(none)".to_owned());
        }
        for job in &i.jobs {
            line(4, format!("- job {job}"));
        }
    }
    for step in &detail.intents {
        let job = step
            .job_id
            .map_or_else(|| "no job".to_owned(), |id| format!("job {id}"));
        let mut text = format!("- {job}: {}, ", step.state);
        match &step.what {
            Some(what) => text.push_str(what),
            None => {
                text.push_str(&step.spec.kind);
                if step.key != step.spec.kind {
                    let _ignored = write!(text, " {}", step.key);
                }
            }
        }
        if let Some(error) = &step.error {
            let _ignored = write!(text, ": {error}");
        }
        line(4, text);
    }
    line(2, "history:".to_owned());
    if detail.history.is_empty() {
        line(4, "(none)".to_owned());
    }
    for entry in &detail.history {
        line(
            4,
            format!("- {} {}: {}", utc_text(entry.at), entry.status, entry.event),
        );
    }
    out
}

/// Runs `nodecare watch`: the status view, redrawn on a terminal, otherwise printed when it
/// changes; ^C ends it with exit code 0.
pub(crate) fn run_watch(args: WatchArgs) -> ExitCode {
    let fields = match args.view.fields() {
        Ok(fields) => fields,
        Err(error) => {
            eprintln!("nodecare watch: {error}");
            return ExitCode::FAILURE;
        }
    };
    let terminal = std::io::stdout().is_terminal();
    on_interrupt(terminal);
    let url = format!("{}/1/overview", base(&args.url));
    let mut previous: Option<String> = None;
    let mut refreshes = 0_u64;
    loop {
        let view = fetch(&url).and_then(|body| {
            serde_json::from_str::<Overview>(&body)
                .map(|overview| render_overview(&overview, &args.view, &fields))
                .map_err(|e| format!("{url}: not a coordinator overview: {e}"))
        });
        let text = view.unwrap_or_else(|error| format!("error: {error}\n"));
        let stamp = utc_text_ms(now_ms());
        let mut stdout = std::io::stdout().lock();
        let written = if terminal {
            write!(
                stdout,
                "\x1b[H\x1b[2JEvery {}s: nodecare status    {stamp}\n\n{text}",
                args.interval
            )
        } else if previous.as_deref() != Some(text.as_str()) {
            write!(stdout, "--- {stamp}\n{text}")
        } else {
            Ok(())
        };
        if written.and_then(|()| stdout.flush()).is_err() {
            // The reader went away (closed pipe): nothing more to show.
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        previous = Some(text);
        refreshes += 1;
        if args.count != 0 && refreshes >= args.count {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_secs_f64(args.interval));
    }
}

/// Ends the process cleanly on SIGINT (^C): a final newline on a terminal, exit code 0. The
/// handler is in place when this returns.
fn on_interrupt(terminal: bool) {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(runtime) = runtime else {
        // Without the handler ^C still ends the process, by the default action.
        return;
    };
    let Ok(mut interrupt) = runtime.block_on(async { signal(SignalKind::interrupt()) }) else {
        return;
    };
    let _thread = std::thread::spawn(move || {
        runtime.block_on(async {
            if interrupt.recv().await.is_some() {
                if terminal {
                    println!();
                }
                std::process::exit(0);
            }
        });
    });
}
