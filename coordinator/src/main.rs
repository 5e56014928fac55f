//! `nodecare-coordinator`: the master-side daemon (see [`nodecare_coordinator::cli`]).

fn main() -> std::process::ExitCode {
    nodecare_coordinator::cli::main()
}
