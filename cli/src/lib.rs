//! `nodecare`: the command line, one module per subcommand. The binary only calls [`run`];
//! [`command`] gives the same definition to the man page and completion generator.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod api;
mod approval;
mod balance;
mod campaign;
mod check;
mod explain;
mod fields;
mod freeze;
mod gate;
mod harep;
mod list;
mod roll;
mod roll_http;
mod status;
mod views;
mod what_if;

const VIEW_HELP: &str = "Like gnt-* list commands: -o selects the incidents table's fields (those of \
`nodecare incidents`), -O the agents table's (those of `nodecare nodes`); `+FIELDS` adds to the \
defaults. --no-headers and --separator apply to both tables and leave out the summary lines: the \
incident rows, an empty line, the agent rows. --json prints {\"incidents\": [...], \"agents\": [...]} \
with the selected fields.";

#[derive(Debug, Parser)]
#[command(
    name = "nodecare",
    version,
    about = "Node maintenance for Ganeti clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of the biggest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Plan rolling reboots (hroller-compatible options and output); with `--execute`, run
    /// them as a campaign on the coordinator (`roll status|pause|resume|abort` follow it).
    Roll(roll::RollArgs),
    /// Show what balancing with Ganeti's hbal would do now (`--dry-run`).
    Balance(balance::BalanceArgs),
    /// Repair instances once, as Ganeti's harep does (its options, tags and output), with the
    /// coordinator's instance auto-repair duty, within its gate.
    Harep(harep::HarepArgs),
    /// Show the coordinator's incidents, agents and jobs.
    #[command(after_help = VIEW_HELP)]
    Status(status::StatusArgs),
    /// List incidents (`incidents show UUID`: one incident with its history, jobs and verdict).
    Incidents(views::IncidentsArgs),
    /// List nodes: each agent's latest verdict, its age, and why a verdict is `unknown`.
    Nodes(views::NodesArgs),
    /// Live view of `nodecare status`, refreshed every few seconds until ^C.
    #[command(after_help = VIEW_HELP)]
    Watch(views::WatchArgs),
    /// Cancel an incident: no more actions; forgotten once no longer observed.
    Cancel(status::CancelArgs),
    /// Ask the coordinator's gate for leave to disrupt a node (for reboot scripts and other
    /// tools), release it, list the grants. Exit code 3: refused, retry later.
    #[command(after_help = EXIT_HELP)]
    Disruption(gate::DisruptionArgs),
    /// Override the disruption budget of one failure domain for a while (audited), revoke,
    /// list.
    #[command(after_help = EXIT_HELP)]
    Budget(gate::BudgetArgs),
    /// The storm breaker: show it, or reset it once the cause of the storm is understood.
    #[command(after_help = EXIT_HELP)]
    Breaker(gate::BreakerArgs),
    /// The work that waits for an approval (`[approvals]`): `approval grant ID --ticket T`,
    /// `approval refuse ID --reason R` (audited), `approval list`.
    #[command(after_help = EXIT_HELP)]
    Approval(approval::ApprovalArgs),
    /// Maintenance freezes: `freeze --until TIME --reason WHY` holds planned work (campaigns,
    /// balancing, other tools' requests) until then; `freeze list` shows the windows and
    /// freezes, `freeze lift ID` ends one early (audited).
    #[command(after_help = EXIT_HELP)]
    Freeze(freeze::FreezeArgs),
    /// Run a node's diagnose scripts now (through its agent, signed by the coordinator).
    Check(check::CheckArgs),
    /// Why the coordinator did (or did not do) something: a node (`--at TIME`), an incident's
    /// (or campaign's, grant's) uuid, or a Ganeti job id, from its flight recorder.
    Explain(explain::ExplainArgs),
    /// What the coordinator would do if a verdict changed, a node were drained or set offline,
    /// another tool were granted a node, a campaign started or a cap changed: its own rounds
    /// on a private copy of its state, until nothing changes. Changes nothing.
    WhatIf(what_if::WhatIfArgs),
}

const EXIT_HELP: &str = "Exit codes: 0 done (granted, renewed, released, set, revoked, reset); 3 \
refused by the gate (the reason is printed: retry later); 1 other errors (coordinator unreachable \
or not ready, authentication, bad input); 2 usage errors. Writes authenticate like `nodecare \
cancel`: --user (or NODECARE_USER) with --password-file or NODECARE_PASSWORD.";

/// Parses the process's arguments and runs the subcommand.
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Roll(args) => roll::run(args),
        Command::Balance(args) => balance::run(&args),
        Command::Harep(args) => harep::run(args),
        Command::Status(args) => status::run_status(args),
        Command::Incidents(args) => views::run_incidents(args),
        Command::Nodes(args) => views::run_nodes(args),
        Command::Watch(args) => views::run_watch(args),
        Command::Cancel(args) => status::run_cancel(args),
        Command::Disruption(args) => gate::run_disruption(args),
        Command::Budget(args) => gate::run_budget(args),
        Command::Breaker(args) => gate::run_breaker(args),
        Command::Freeze(args) => freeze::run_freeze(args),
        Command::Approval(args) => approval::run_approval(args),
        Command::Check(args) => check::run_check(args),
        Command::Explain(args) => explain::run_explain(args),
        Command::WhatIf(args) => what_if::run_what_if(args),
    }
}

/// The command-line definition, for generated documentation (man pages, shell completions).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

#[cfg(test)]
mod tests {
    #[test]
    fn command_definition_is_consistent() {
        super::command().debug_assert();
    }
}
