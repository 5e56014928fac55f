//! `nodecare`: command-line entry point; one module per subcommand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod roll;
mod roll_http;

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

#[derive(Debug, Subcommand)]
enum Command {
    /// Plan rolling reboots (hroller-compatible options and output).
    Roll(roll::RollArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Roll(args) => roll::run(args),
    }
}
