//! The coordinator daemon, built inside the test crate so crash tests can run (and kill) it.

fn main() -> std::process::ExitCode {
    nodecare_coordinator::cli::main()
}
