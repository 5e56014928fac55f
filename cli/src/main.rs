//! `nodecare`: command-line entry point (the definition lives in the library).

use std::process::ExitCode;

fn main() -> ExitCode {
    nodecare_cli::run()
}
